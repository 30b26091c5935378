//! Acquiring on every node at once, and the fence a win hands out: a round of `Acquire`,
//! then the fence settled on a majority, or what the attempt took let go. What the answers
//! mean is `tally`'s; the other rounds are `renew`'s, `release`'s and `subscribe`'s.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Result};

use super::rounds::{Answer, RoundEnd, Work};
use super::tally::{majority, AcquireAnswers, Tally};
use super::{by_majority, Quorum};
use crate::backend::error::BackendError;
use crate::backend::Attempt;
use crate::{lease, report};

impl Quorum {
    /// `LockBackend::try_acquire`: one attempt on every node (see the module doc, Acquire).
    pub(super) fn acquire_round(&mut self, wait_ends: Option<Instant>) -> Result<Attempt> {
        let started = Instant::now();
        // The lease is valid until `started + TTL - drift`, but a win must leave most of it.
        let in_time = started + lease::acquisition_budget(self.ttl);
        let mut deadline = (started + self.timeout).min(in_time);
        if let Some(wait_ends) = wait_ends {
            deadline = deadline.min(wait_ends);
        }
        let waited = self.lock.recording.started.elapsed();
        let round = self
            .nodes
            .send(self.nodes.all(), || Work::Acquire { deadline, waited });
        let mut heard = AcquireAnswers::new(self.nodes.len());
        let end = self
            .nodes
            .collect(round, self.nodes.len(), deadline, |node, answer| {
                heard.take(node, answer)
            });
        // The others, briefly: their fence counts (the fence handed out is the largest of
        // all heard), and whether they took the key (a failed attempt waits for those
        // nodes to let go before leaving).
        let rest = self.nodes.len() - heard.tally.answered();
        self.nodes
            .hear_out(round, rest, started, deadline, |node, answer| {
                heard.take(node, answer);
            });
        let AcquireAnswers {
            mut tally,
            counted,
            refusals,
            unfit,
            superseded,
            done,
            skips,
            too_large,
        } = heard;
        let skips = by_majority(skips, self.majority);
        tally.timed_out = end == RoundEnd::OutOfTime;
        if let Some(err) = unfit {
            self.let_go(&tally, true);
            return Err(err);
        }
        // One server named twice would count twice towards the majority. Its addresses
        // were compared at start-up; what it is, only its answer can tell.
        if let Some((earlier, later, run_id)) = self.nodes.same_server() {
            let err = anyhow!(
                "--redis {} and {} are the same server (run_id {run_id}): each Redlock node \
                 must be a separate server",
                self.nodes.display(earlier),
                self.nodes.display(later)
            );
            self.let_go(&tally, false);
            return Err(err);
        }

        // Done by a majority's say: nothing of this attempt may stand in anyone's way.
        if done.len() >= self.majority {
            self.let_go(&tally, true);
            let record = done.into_iter().next().map(|(_, record)| record);
            return Ok(Attempt::Done {
                record: record.unwrap_or_default(),
                skips,
            });
        }
        if tally.won() && Instant::now() < in_time {
            match self.settle_fence(&counted, deadline) {
                Ok(fence) if Instant::now() < in_time => {
                    // A node whose counter is absurd took nothing, and its counter was not
                    // copied: said, as the lock now leans on one node fewer.
                    for message in &too_large {
                        report::warn(format_args!("{message}; taken on the other nodes"));
                    }
                    // Queued on the nodes that refused us: leave, passing on any wake-up
                    // they sent meanwhile. Not waited for (the nodes' threads do it next).
                    self.nodes.send(tally.no.clone(), || Work::Abandon);
                    return Ok(Attempt::Acquired {
                        sent_at: started,
                        fence,
                    });
                }
                Ok(_) => {}
                Err(err) => {
                    self.let_go(&tally, true);
                    return Err(err);
                }
            }
        }
        if tally.won() {
            self.let_go(&tally, true);
            return Err(anyhow::Error::new(BackendError::transient(format!(
                "taking the lock on a majority of the Redis nodes took longer than a third of \
                 its TTL ({}), which leaves too little of it",
                humantime::format_duration(self.ttl)
            ))));
        }
        // Superseded only when a majority of the nodes says so: one node alone (it missed
        // this waiter's arrival, or restarted) decides nothing. Those nodes took nothing.
        if superseded.len() >= self.majority {
            self.let_go(&tally, false);
            let newer = superseded.into_iter().flatten().next();
            return Ok(Attempt::Superseded { newer, skips });
        }
        // Busy when a majority answered and some of it holds another's value (with a node
        // down, a holder may have only one of the nodes that answered).
        let reached = tally.yes.len() + tally.no.len();
        if tally.refused() || reached >= self.majority {
            // A split: this attempt took some nodes and no other holder has a majority of
            // those that answered. With a node silent that may be wrong (the holder may
            // have it); the waiter's pauses after a split grow, so guessing wrong costs a
            // few retries, while missing a split would send contenders back in lockstep.
            let split = !tally.yes.is_empty() && refusals.split(majority(reached));
            // Behind a holder with a majority, what this attempt took blocked no one: it is
            // let go quietly, or each waiter's release would wake the others, round and
            // round, for as long as the holder holds.
            self.let_go(&tally, split);
            return Ok(Attempt::Busy {
                holder_ttl: refusals.free_in(self.nodes.len(), self.majority),
                holder: refusals.holder(),
                ahead: 0,
                split,
                skips,
            });
        }
        self.let_go(&tally, true);
        Err(tally.shortfall("could be reached", &self.nodes.displays()))
    }

    /// The fence to hand out, from what each node counted: the largest, first written to
    /// enough nodes that a majority has it.
    fn settle_fence(&mut self, counted: &[(usize, u64)], deadline: Instant) -> Result<u64> {
        let fence = counted.iter().map(|&(_, fence)| fence).max().unwrap_or(0);
        let have_it: Vec<usize> = counted
            .iter()
            .filter(|&&(_, counted)| counted == fence)
            .map(|&(node, _)| node)
            .collect();
        if have_it.len() >= self.majority {
            return Ok(fence);
        }
        let behind: Vec<usize> = self
            .nodes
            .all()
            .filter(|node| !have_it.contains(node))
            .collect();
        let round = self
            .nodes
            .send(behind.iter().copied(), || Work::RaiseFence {
                fence,
                deadline,
            });
        let mut tally = Tally::new(self.nodes.len());
        tally.yes = have_it;
        let end = self
            .nodes
            .collect(round, behind.len(), deadline, |node, answer| {
                match answer {
                    Answer::RaiseFence(Ok(())) => tally.yes.push(node),
                    Answer::RaiseFence(Err(err)) => tally.fail(node, &err),
                    _ => {}
                }
                tally.won()
            });
        tally.timed_out = end == RoundEnd::OutOfTime;
        if tally.won() {
            Ok(fence)
        } else {
            Err(tally
                .shortfall("recorded the fence", &self.nodes.displays())
                .context("cannot record the fence on a majority"))
        }
    }

    /// Releases on every node but those that refused (they hold someone else's value):
    /// after a lost or split acquisition, so that what this attempt took, late answers
    /// included, does not stand in anyone's way until it expires. Not waited for here; see
    /// `Nodes::expect_release`. Nodes that did not answer the attempt are not waited for even then:
    /// they are likely down, and a key that lands there late is a minority's, gone by its TTL.
    ///
    /// `announce`: whether waiters are told (when what it took may have kept someone else
    /// from a majority).
    fn let_go(&mut self, tally: &Tally, announce: bool) {
        let deadline = Instant::now() + self.timeout;
        let nodes: Vec<usize> = self
            .nodes
            .all()
            .filter(|node| !tally.no.contains(node))
            .collect();
        let notice = if announce {
            self.next_release_notice()
        } else {
            Arc::from("")
        };
        let round = self.nodes.send(nodes, || Work::Release {
            keep_for: None,
            deadline,
            notice: Arc::clone(&notice),
            ending: None,
        });
        self.nodes
            .expect_release(round, tally.yes.clone(), deadline);
    }
}
