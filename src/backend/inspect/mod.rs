//! Reading locks for people (`status`, `list`) and removing a stuck one (`release
//! --force`), the same way for one server, Sentinel, Cluster and a Redlock quorum: an
//! [`Inspector`] reads every node (in parallel when there are several) and a [`LockView`]
//! holds what each node said, with the verdict of the whole: a lock is held when one holder
//! has it on a majority of the nodes (on the one node of a single deployment, when it has
//! it at all). Reads are single scripts, so what a node shows is one consistent moment; a
//! forced release deletes only the exact value it just read. The wording is `admin`'s.

use std::time::Duration;

use anyhow::Result;

use super::connection::Link;
use super::quorum::majority;
use super::Deployment;

mod batch;
mod board;
mod counters;
mod dry_run;
mod list;
mod release;
mod view;

pub use batch::BATCH;
pub use dry_run::DryAsk;
pub use release::{Forced, ReleasePlan};
pub(crate) use view::read_peek;
pub use view::{LockView, NodeView, Slot, Verdict};

/// The connections that `status`, `list` and `release` read and delete through: one per
/// node (a single deployment is one node).
pub struct Inspector {
    links: Vec<Link>,
    displays: Vec<String>,
}

impl Inspector {
    /// Readies a connection to each node; connects on first use.
    pub fn open(deployment: &Deployment, timeout: Duration) -> Result<Inspector> {
        let targets = deployment.targets();
        Ok(Inspector {
            links: targets
                .iter()
                .map(|target| Link::new(target, timeout))
                .collect::<Result<_>>()?,
            displays: targets.iter().map(|t| t.display.clone()).collect(),
        })
    }

    /// Whether the nodes are the independent masters of a Redlock quorum.
    pub fn is_quorum(&self) -> bool {
        self.links.len() > 1
    }

    /// How many nodes make a majority (1 of a single deployment).
    pub fn majority(&self) -> usize {
        majority(self.links.len())
    }

    /// Runs `read` on every node at once; one result per node, in order.
    fn on_every_node<T: Send>(&mut self, read: impl Fn(&mut Link) -> T + Sync) -> Vec<T> {
        super::on_every_node(&mut self.links, read)
    }
}

#[cfg(test)]
mod tests;
