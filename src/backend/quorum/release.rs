//! Releasing on every node at once: a majority's answers, then the stragglers' wait, and
//! what the answers say of how the hold ended. The release after a failed attempt is
//! `acquire`'s (`let_go`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::rounds::Work;
use super::tally::ReleaseTally;
use super::Quorum;
use crate::backend::Released;
use crate::report;

impl Quorum {
    /// `LockBackend::release`: the release on every node (see the module doc, Release).
    pub(super) fn release_round(
        &mut self,
        keep_for: Option<Duration>,
        deadline: Instant,
    ) -> Result<Released> {
        let started = Instant::now();
        let notice = self.next_release_notice();
        let ending = self.ending;
        let round = self.nodes.send(self.nodes.all(), || Work::Release {
            keep_for,
            deadline,
            notice: Arc::clone(&notice),
            ending: Some(ending),
        });
        let mut tally = ReleaseTally::default();
        let displays = self.nodes.displays();
        // Once a majority has answered, the lock is free for others; a node much slower
        // than the rest (down, blackholed) is not waited for, and the key expires there by
        // its TTL. Healthy nodes answer together, so this rarely cuts anyone off.
        let (nodes, majority) = (self.nodes.len(), self.majority);
        self.nodes.collect(round, nodes, deadline, |node, answer| {
            tally.take(&displays[node], answer);
            tally.heard_enough(nodes, majority)
        });
        let rest = self.nodes.len().saturating_sub(tally.answered);
        self.nodes
            .hear_out(round, rest, started, deadline, |node, answer| {
                tally.take(&displays[node], answer);
            });
        let mut missed = tally.errors.clone();
        let silent = self.nodes.len().saturating_sub(tally.answered);
        if silent > 0 {
            missed.push(format!("{silent} did not answer in time"));
        }
        if !missed.is_empty() {
            report::verbose(format_args!(
                "not released on every node (the key expires there by its TTL): {}",
                missed.join("; ")
            ));
        }
        let recorded = tally.deleted + tally.unannounced + tally.kept;
        if self.recording && recorded < majority && tally.not_ours <= self.nodes.len() - majority {
            report::warn(format_args!(
                "the work was recorded as done on {recorded} of {} Redis nodes, fewer than a \
                 majority: a later run with the same --once or --once-per may do it again",
                self.nodes.len()
            ));
        }
        // Gone from so many nodes that no majority can have held it: lost, whatever the
        // others did. Gone from a minority only, a majority held it throughout.
        Ok(if tally.not_ours > self.nodes.len() - majority {
            Released::NotOurs
        } else if tally.kept > 0 {
            Released::KeptUntilMinHold
        } else if tally.deleted > 0 {
            Released::Deleted
        } else if tally.unannounced > 0 {
            Released::DeletedUnannounced
        } else if tally.not_ours > 0 {
            Released::NotOurs
        } else if tally.errors.is_empty() {
            return Err(anyhow!("no Redis node answered in time"));
        } else {
            return Err(anyhow!("{}", tally.errors.join("; ")));
        })
    }
}
