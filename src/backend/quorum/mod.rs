//! Redlock: one lock over N independent Redis masters, held while a majority (N/2+1) of
//! them have it. Each node is a `SingleRedis` (same key, same token, same scripts) owned by
//! a thread of its own, so that every request goes to all nodes at once and a round is
//! decided as soon as its outcome is certain: a slow or dead node costs nothing while a
//! majority answers.
//!
//! - **Acquire**: all nodes in parallel; won when a majority took it within a third of the
//!   TTL, timed from `started`, before the first request left (the lease is valid until
//!   `started + ttl - drift`; a slower win would leave too little to renew). Once decided,
//!   or once a majority answered, the others get `STRAGGLER_WAIT`. Lost or split rounds
//!   release on every node that did not refuse, answered or not (a node's jobs run in
//!   order, so the release follows the acquire on a slow node).
//! - **Fence**: each node counts its own acquisitions. The fence handed out is the largest
//!   count among the nodes taken; unless a majority already reports it, it is written to
//!   the nodes first (never lowering one), so every later majority, which shares a node
//!   with this one, counts past it. See docs/guide.md, "Fencing tokens".
//! - **Renew**: all nodes in parallel; extended when a majority confirms, lost for sure when
//!   more than N - majority say the key is not ours. A takeover request (`--replace`) seen on
//!   some nodes never makes the round wait for a silent node past `STRAGGLER_WAIT`: the round
//!   ends once one request has a majority or the silent nodes could not give it one. A node that answers "not ours" while a
//!   majority confirmed (it restarted empty) is taken again; never otherwise.
//! - **Release**: all nodes, waiting for a majority's answers, then `STRAGGLER_WAIT` for
//!   the rest. Each release is announced with the same text on every node. "Not ours" from
//!   more than N - majority nodes means the lock was lost; from fewer, it was not.
//! - **Waiting**: subscribed once a majority of nodes listens (the others join as they come
//!   up); each release wakes the waiter once, its own releases not at all.
//! - **A holder's takeover listener** (`listen`): likewise on a majority, on connections of
//!   its own, off the nodes' threads; every announcement is passed on.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

mod listen;
mod rounds;
mod tally;

use rounds::{Answer, Nodes, RoundEnd, Work};
pub(super) use tally::majority;
use tally::{AcquireAnswers, ReleaseCopies, ReleaseTally, Tally};

use super::error::BackendError;
use super::protocol::HolderListener;
use super::target::RedisTarget;
use super::{
    Attempt, Eviction, HoldEnd, LockBackend, LockRequest, Notice, NoticeSink, Released, Renewal,
    Subscription, SubscriptionParts, TakeoverListener,
};
use crate::{lease, report};
use listen::QuorumListener;

pub struct Quorum {
    nodes: Nodes,
    majority: usize,
    timeout: Duration,
    ttl: Duration,
    /// The leading bytes of this holder's values: `{"token":"…"`.
    identity: String,
    display: String,
    /// The command succeeded and its release records the work (`--once`).
    recording: bool,
    /// How the hold ended, recorded by each node's release (`LockBackend::end_hold`).
    ending: HoldEnd,
    /// What a holder's takeover listener is made of (`listen`).
    targets: Vec<RedisTarget>,
    lock: LockRequest,
}

impl Quorum {
    /// Starts one thread per node; nothing is connected yet.
    pub fn new(
        targets: &[RedisTarget],
        timeout: Duration,
        lock: LockRequest,
        eviction: Eviction,
    ) -> Result<Quorum> {
        // Every node queues this waiter by the same time (see `LockRequest::arrival_ms`).
        let joined = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        let lock = LockRequest {
            arrival_ms: Some(joined),
            ..lock
        };
        let nodes = Nodes::start(targets, timeout, &lock, eviction)?;
        let names: Vec<&str> = targets.iter().map(|t| t.display.as_str()).collect();
        Ok(Quorum {
            majority: majority(nodes.len()),
            display: format!("{} Redis nodes ({})", nodes.len(), names.join(", ")),
            nodes,
            timeout,
            ttl: lock.ttl,
            identity: lock.identity(),
            recording: false,
            ending: HoldEnd::default(),
            targets: targets.to_vec(),
            lock,
        })
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

    /// How the next release is announced: this holder's identity and the number of the
    /// round that sends it, so each release reads differently and is the same everywhere.
    fn next_release_notice(&self) -> Arc<str> {
        Arc::from(format!("{}#{}", self.identity, self.nodes.next_round()))
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
}

impl Drop for Quorum {
    fn drop(&mut self) {
        self.nodes.finish_letting_go();
    }
}

impl LockBackend for Quorum {
    fn try_acquire(&mut self, wait_ends: Option<Instant>) -> Result<Attempt> {
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

    fn renew(&mut self, deadline: Instant, takeover_heard: bool) -> Result<Renewal> {
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

    fn release(&mut self, keep_for: Option<Duration>, deadline: Instant) -> Result<Released> {
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
        let majority = self.majority;
        self.nodes
            .collect(round, self.nodes.len(), deadline, |node, answer| {
                tally.take(&displays[node], answer) >= majority
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

    fn record_success(&mut self) {
        self.recording = true;
        self.nodes.send(self.nodes.all(), || Work::RecordSuccess);
    }

    fn end_hold(&mut self, end: HoldEnd) {
        self.ending = end;
    }

    fn give_up(&mut self) -> Option<u64> {
        self.nodes.finish_letting_go();
        let round = self.nodes.send(self.nodes.all(), || Work::GiveUp);
        let mut skips = Vec::new();
        let until = Instant::now() + self.timeout;
        self.nodes
            .collect(round, self.nodes.len(), until, |_, answer| {
                if let Answer::GaveUp(Some(count)) = answer {
                    skips.push(count);
                }
                false
            });
        by_majority(skips, self.majority)
    }

    fn abandon(&mut self) {
        // A failed attempt's release may still be on its way: it is waited for. Leaving
        // each node's queue is not: a waiter gone from a node is dropped from its queue at
        // the next release there anyway.
        self.nodes.finish_letting_go();
        self.nodes.send(self.nodes.all(), || Work::Abandon);
    }

    fn rest(&mut self) {
        self.nodes.send(self.nodes.all(), || Work::Rest);
    }

    fn subscribe(
        &mut self,
        mut sink: NoticeSink,
        deadline: Option<Instant>,
    ) -> Result<Subscription> {
        let mut until = Instant::now() + self.timeout;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        // A release is announced on every node: a waiter tries on its first copy and on
        // the one that completes a majority (`ReleaseCopies`), not on each; this waiter's
        // own releases after failed attempts are not passed on at all.
        let mut copies = ReleaseCopies::new(self.majority);
        let own = format!("{}#", self.identity);
        let once = move |notice: Notice| match &notice {
            Notice::Released { by } if by.starts_with(&own) || !copies.pass(by) => true,
            Notice::Released { .. } | Notice::Broken(_) => sink(notice),
        };
        let shared = Arc::new(Mutex::new(once));
        let parts = SubscriptionParts::new();
        let round = self.nodes.send(self.nodes.all(), || {
            let shared = Arc::clone(&shared);
            Work::Subscribe {
                sink: Box::new(move |notice: Notice| {
                    // Poisoned only by a panic, which aborts the process.
                    let mut sink = shared.lock().unwrap_or_else(|p| p.into_inner());
                    (*sink)(notice)
                }),
                parts: parts.clone(),
                until,
            }
        });
        // Ends every node's subscription when dropped, late ones included.
        let subscription = Subscription::combined(parts);
        let mut listening = 0;
        let mut errors: Vec<anyhow::Error> = Vec::new();
        let majority = self.majority;
        // Every holder releases on a majority, which shares a node with any other majority:
        // once a majority listens, a release cannot be missed, and slower nodes join as
        // they come up rather than being waited for.
        self.nodes
            .collect(round, self.nodes.len(), until, |node, answer| {
                match answer {
                    Answer::Subscribe(Ok(())) => listening += 1,
                    Answer::Subscribe(Err(err)) => {
                        report::verbose(format_args!(
                            "no release notices from {}: {err:#}",
                            self.nodes.display(node)
                        ));
                        errors.push(err);
                    }
                    _ => {}
                }
                listening >= majority
            });
        // Any node that can be reached may carry the holder's release notice; the others
        // are tried again when a subscription breaks.
        if listening == 0 {
            return Err(errors
                .into_iter()
                .next()
                .unwrap_or_else(|| anyhow!("no Redis node answered in time")));
        }
        Ok(subscription)
    }

    fn takeover_listener(&self) -> Option<Box<dyn TakeoverListener>> {
        if self.lock.limit != 1 {
            return None;
        }
        let nodes: Result<Vec<HolderListener>> = self
            .targets
            .iter()
            .map(|target| HolderListener::new(target, self.timeout, &self.lock))
            .collect();
        match nodes {
            Ok(nodes) => Some(Box::new(QuorumListener::new(
                nodes,
                self.majority,
                self.timeout,
            ))),
            Err(err) => {
                report::verbose(format_args!(
                    "not listening for a takeover (--replace), renewals will find it: {err:#}"
                ));
                None
            }
        }
    }

    fn describe(&self) -> &str {
        &self.display
    }
}

/// The count a majority of the nodes reached (readers merge counters the same way): the
/// `majority`-th highest of `counts`, one per node that reported one; `None` when fewer
/// nodes did.
fn by_majority(mut counts: Vec<u64>, majority: usize) -> Option<u64> {
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts.get(majority.checked_sub(1)?).copied()
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
fn takeover_settled(requests: &[Vec<u8>], silent: usize, majority: usize) -> bool {
    let most = requests
        .iter()
        .map(|request| requests.iter().filter(|other| *other == request).count())
        .max()
        .unwrap_or(0);
    most >= majority || most + silent < majority
}

#[cfg(test)]
mod tests {
    use super::takeover_settled;

    #[test]
    fn a_takeover_is_settled_without_waiting_for_a_node_that_cannot_change_it() {
        let a = b"a".to_vec();
        let b = b"b".to_vec();
        // No request: settled whatever the silent nodes hold, one node alone deciding nothing.
        assert!(takeover_settled(&[], 1, 2));
        assert!(takeover_settled(&[], 2, 3));
        // One node has it, one silent node could make a majority of two: not yet settled.
        assert!(!takeover_settled(std::slice::from_ref(&a), 1, 2));
        // A majority has it already: settled, a frozen third node is not waited for.
        assert!(takeover_settled(&[a.clone(), a.clone()], 1, 2));
        // Two different requests on two nodes of five, one silent: none can reach three.
        assert!(takeover_settled(&[a.clone(), b.clone()], 1, 3));
        assert!(!takeover_settled(&[a.clone(), a, b], 1, 3));
    }
}
