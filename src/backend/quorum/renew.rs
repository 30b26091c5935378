//! Renewing on every node at once: extended when a majority confirms, lost for sure when
//! too many say the key is not ours, and the takeover (`--replace`) a majority has on
//! record. Not the other rounds (`acquire`, `release`, `subscribe`).

use std::time::Instant;

use anyhow::Result;

use super::rounds::{Answer, RoundEnd, Work};
use super::tally::Tally;
use super::Quorum;
use crate::backend::Renewal;
use crate::report;

impl Quorum {
    /// `LockBackend::renew`: one renewal on every node (see the module doc, Renew).
    pub(super) fn renew_round(
        &mut self,
        deadline: Instant,
        takeover_heard: bool,
    ) -> Result<Renewal> {
        let started = Instant::now();
        let round = self.nodes.send(self.nodes.all(), || Work::Renew {
            deadline,
            takeover_heard,
        });
        let mut tally = Tally::new(self.nodes.len());
        // A takeover (`--replace`) is acted on only when a majority of the nodes has it on
        // record from the same run: one node alone decides nothing.
        let mut requests: Vec<Vec<u8>> = Vec::new();
        let majority = self.majority;
        let end = self
            .nodes
            .collect(round, self.nodes.len(), deadline, |node, answer| {
                take_renewal(&mut tally, &mut requests, node, answer);
                // Decided: a silent node is never waited for here, request or not (a frozen
                // one would hold the renewal until its deadline, and the holder would lose
                // the lock).
                tally.decided()
            });
        tally.timed_out = end == RoundEnd::OutOfTime;
        let silent = tally.nodes.saturating_sub(tally.answered());
        if end == RoundEnd::Heard && tally.won() && !takeover_settled(&requests, silent, majority) {
            // A request seen on some nodes that the silent ones could still bring to a
            // majority: they get the straggler's wait, never the renewal's deadline.
            self.nodes
                .hear_out(round, silent, started, deadline, |node, answer| {
                    take_renewal(&mut tally, &mut requests, node, answer);
                });
        }
        tally.timed_out = end == RoundEnd::OutOfTime;
        if tally.won() {
            // Still held by a majority: a node that lost the key (it restarted empty, or
            // the key expired there during an outage) is taken again. The answers are not
            // awaited; the next renewal sees how it went.
            if !tally.no.is_empty() {
                let lost: Vec<String> = tally
                    .no
                    .iter()
                    .map(|&node| self.nodes.display(node).to_string())
                    .collect();
                report::verbose(format_args!(
                    "taking the lock again on {}, which had lost it",
                    lost.join(", ")
                ));
                let restore_by = Instant::now() + self.timeout;
                let lost_nodes = tally.no.clone();
                let waited = self.lock.recording.started.elapsed();
                self.nodes.send(lost_nodes, || Work::Acquire {
                    deadline: restore_by,
                    waited,
                });
            }
            let replace_by = requests
                .iter()
                .find(|request| {
                    requests.iter().filter(|other| other == request).count() >= self.majority
                })
                .cloned();
            return Ok(Renewal::Extended {
                sent_at: started,
                replace_by,
            });
        }
        if tally.refused() {
            return Ok(Renewal::NotOurs);
        }
        Err(tally.shortfall("confirmed the lease", &self.nodes.displays()))
    }
}

/// Notes one node's answer to a renewal: in `tally`, and any takeover it reports in
/// `requests`.
fn take_renewal(tally: &mut Tally, requests: &mut Vec<Vec<u8>>, node: usize, answer: Answer) {
    match answer {
        Answer::Renew(Ok(Renewal::Extended { replace_by, .. })) => {
            requests.extend(replace_by);
            tally.yes.push(node);
        }
        Answer::Renew(Ok(Renewal::NotOurs)) => tally.no.push(node),
        Answer::Renew(Err(err)) => tally.fail(node, &err),
        _ => {}
    }
}

/// Whether the takeovers reported so far (`requests`, one per node that has one) are
/// settled with `silent` nodes still to answer: one already has a majority, or none could
/// reach one even if every silent node reported it.
pub(super) fn takeover_settled(requests: &[Vec<u8>], silent: usize, majority: usize) -> bool {
    let most = requests
        .iter()
        .map(|request| requests.iter().filter(|other| *other == request).count())
        .max()
        .unwrap_or(0);
    most >= majority || most + silent < majority
}
