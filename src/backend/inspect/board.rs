//! What `serve` reads beyond `status` and `metrics`: whether the nodes answer (`PING`),
//! each lock's last events, and the arrival times of its queued waiters. Read over the
//! inspector's own connections, never others'.

use anyhow::Result;

use super::Inspector;
use crate::backend::connection::Link;
use crate::backend::error::describe_error;
use crate::backend::history::{last_of_many, Entry};
use crate::backend::layout::{queue_keys, Key};

/// The most queued waiters listed for one lock (the count is always whole).
pub const QUEUE_SHOWN: usize = 50;

impl Inspector {
    /// `Ok` when a majority of the nodes answer `PING` (the one node of a single
    /// deployment); else why not, naming each node that did not.
    pub fn ping(&mut self) -> Result<(), String> {
        let answers = self.on_every_node(|link| {
            link.call(None, |session| session.query::<String>(&redis::cmd("PING")))
        });
        let failed: Vec<String> = answers
            .iter()
            .zip(&self.displays)
            .filter_map(|(answer, display)| {
                let err = answer.as_ref().err()?;
                Some(format!("{display}: {err:#}"))
            })
            .collect();
        if self.links.len() - failed.len() >= self.majority() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    }

    /// The last `count` events of each of `keys`, oldest first (a quorum's merged as
    /// `history` merges them; one server's read in pipelines).
    pub fn last_events(&mut self, keys: &[Key], count: usize) -> Vec<Result<Vec<Entry>, String>> {
        last_of_many(&mut self.links, keys, count)
    }

    /// When each of the first [`QUEUE_SHOWN`] queued waiters of `key` arrived (ms, the
    /// server's clock), in queue order; on a quorum, the first node's that answers. A
    /// waiter's token is its member in the queue and is never returned.
    pub fn queue_arrivals(&mut self, key: &Key) -> Result<Vec<u64>> {
        let [queue, _] = queue_keys(key);
        let mut last = None;
        for link in &mut self.links {
            match arrivals(link, &queue) {
                Ok(found) => return Ok(found),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no Redis node to read")))
    }
}

fn arrivals(link: &mut Link, queue: &Key) -> Result<Vec<u64>> {
    let mut command = redis::cmd("ZRANGE");
    command
        .arg(queue)
        .arg(0)
        .arg(QUEUE_SHOWN - 1)
        .arg("WITHSCORES");
    let reply = link.call(None, |session| {
        session.query_keyed::<Vec<(Vec<u8>, f64)>>(queue, &command)
    })?;
    match reply {
        Ok(members) => Ok(members
            .into_iter()
            .map(|(_, score)| score.max(0.0) as u64)
            .collect()),
        Err((err, node)) if err.code() == Some("WRONGTYPE") => {
            let _ = node;
            Ok(Vec::new())
        }
        Err((err, node)) => Err(describe_error(err, &node)),
    }
}
