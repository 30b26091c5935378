//! The quorum's machinery: one thread per node, each owning that node's `SingleRedis` and
//! running its jobs in order, and rounds over them. A round sends one job to some nodes and
//! collects the answers as they come, until the caller has heard enough or the time runs
//! out; answers to an earlier round are recognised by number and set aside. What a round's
//! answers mean is `tally`'s part and the caller's.
//!
//! The release after a failed attempt is tracked here too: its answers may come during
//! later rounds, and the process must not end before the nodes that took the key confirm
//! it, lest the key stay behind for a TTL.

use std::cell::RefCell;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::backend::protocol::SingleRedis;
use crate::backend::target::RedisTarget;
use crate::backend::{
    Attempt, Eviction, HoldEnd, LockBackend, LockRequest, NoticeSink, Released, Renewal,
    SubscriptionParts,
};

/// Once a round is decided, how long the nodes that have not answered get at least (twice
/// the round's time so far if that is longer): healthy nodes answer together, so this
/// hears them all, while a node that is down or blackholed is not waited for.
const STRAGGLER_WAIT: Duration = Duration::from_millis(20);

/// The node threads, and the rounds sent to them.
pub(super) struct Nodes {
    nodes: Vec<Node>,
    replies: Receiver<Reply>,
    /// Numbers each round, so that a late answer to an earlier one is recognised.
    round: u64,
    /// The release after a failed attempt, until the nodes that took the key confirm it.
    /// Waiting goes on meanwhile (a node runs its requests in order, so the next attempt
    /// follows the release); leaving waits for it, lest the key stay behind for a TTL.
    unconfirmed: RefCell<Option<PendingRelease>>,
    /// Each node's server's `run_id`, once its first acquisition learnt it.
    server_ids: Vec<Arc<OnceLock<String>>>,
}

struct PendingRelease {
    round: u64,
    nodes: Vec<usize>,
    deadline: Instant,
}

/// How a round's listening ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RoundEnd {
    /// Decided, or every expected answer came.
    Heard,
    /// The time ran out first.
    OutOfTime,
}

struct Node {
    display: String,
    jobs: Sender<Job>,
}

struct Job {
    round: u64,
    work: Work,
}

pub(super) enum Work {
    Acquire {
        deadline: Instant,
        /// How long the run has waited: the same on every node.
        waited: Duration,
    },
    RaiseFence {
        fence: u64,
        deadline: Instant,
    },
    Renew {
        deadline: Instant,
        /// See `LockBackend::renew`.
        takeover_heard: bool,
    },
    Release {
        keep_for: Option<Duration>,
        deadline: Instant,
        /// What the release is announced as: the same on every node.
        notice: Arc<str>,
        /// How the hold ended, recorded in each node's history; `None`: nothing recorded
        /// (an attempt letting go of what it took).
        ending: Option<HoldEnd>,
    },
    Subscribe {
        sink: NoticeSink,
        parts: SubscriptionParts,
        until: Instant,
    },
    /// The command succeeded: the next release records the work (`--once`); nobody waits
    /// for the answer, and the node's jobs run in order.
    RecordSuccess,
    /// Leave the waiters' queue; nobody waits for the answer.
    Abandon,
    /// The wait ran out: leave the queue and record a timeout; answered with the skips.
    GiveUp,
    /// Close the command connection until the next job; nobody waits for the answer.
    Rest,
}

struct Reply {
    round: u64,
    node: usize,
    answer: Answer,
}

pub(super) enum Answer {
    Acquire(Result<Attempt>),
    RaiseFence(Result<()>),
    Renew(Result<Renewal>),
    Release(Result<Released>),
    Subscribe(Result<()>),
    /// The consecutive skips after a timeout recorded (`Work::GiveUp`).
    GaveUp(Option<u64>),
    /// A job nobody waits for is done.
    Done,
}

impl Nodes {
    /// Starts one thread per node; nothing is connected yet.
    pub(super) fn start(
        targets: &[RedisTarget],
        timeout: Duration,
        lock: &LockRequest,
        eviction: Eviction,
    ) -> Result<Nodes> {
        let (replies_tx, replies) = mpsc::channel();
        let mut nodes = Vec::with_capacity(targets.len());
        let server_ids: Vec<Arc<OnceLock<String>>> =
            targets.iter().map(|_| Arc::default()).collect();
        for (index, target) in targets.iter().enumerate() {
            let mut single = SingleRedis::new(target, timeout, lock.clone(), eviction)?;
            single.identify(Arc::clone(&server_ids[index]));
            let (jobs, queue) = mpsc::channel();
            let replies_tx = replies_tx.clone();
            std::thread::Builder::new()
                .name(format!("redis-node-{}", index + 1))
                .spawn(move || serve(index, single, &queue, &replies_tx))
                .context("cannot start a thread")?;
            nodes.push(Node {
                display: target.display.clone(),
                jobs,
            });
        }
        Ok(Nodes {
            nodes,
            replies,
            round: 0,
            unconfirmed: RefCell::new(None),
            server_ids,
        })
    }

    /// Two nodes whose servers answered with the same `run_id` (one server named twice),
    /// with that id; `None` while no two known ids agree.
    pub(super) fn same_server(&self) -> Option<(usize, usize, &str)> {
        self.server_ids.iter().enumerate().find_map(|(later, id)| {
            let id = id.get()?;
            let earlier = self.server_ids[..later]
                .iter()
                .position(|other| other.get() == Some(id))?;
            Some((earlier, later, id.as_str()))
        })
    }

    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(super) fn all(&self) -> std::ops::Range<usize> {
        0..self.nodes.len()
    }

    pub(super) fn display(&self, node: usize) -> &str {
        &self.nodes[node].display
    }

    pub(super) fn displays(&self) -> Vec<String> {
        self.nodes.iter().map(|node| node.display.clone()).collect()
    }

    /// The number the next round will have.
    pub(super) fn next_round(&self) -> u64 {
        self.round + 1
    }

    /// Sends `work(node)` to the nodes `to`; returns the round's number.
    pub(super) fn send(
        &mut self,
        to: impl IntoIterator<Item = usize>,
        mut work: impl FnMut() -> Work,
    ) -> u64 {
        self.round += 1;
        for index in to {
            // A node thread only ends with the process: a failed send cannot happen.
            let _ = self.nodes[index].jobs.send(Job {
                round: self.round,
                work: work(),
            });
        }
        self.round
    }

    /// Passes this round's answers to `take` until it returns true (decided), `expected`
    /// answers came, or `until` passes. Answers to earlier rounds are dropped.
    pub(super) fn collect(
        &self,
        round: u64,
        expected: usize,
        until: Instant,
        mut take: impl FnMut(usize, Answer) -> bool,
    ) -> RoundEnd {
        let mut answered = 0;
        while answered < expected {
            let left = until.saturating_duration_since(Instant::now());
            match self.replies.recv_timeout(left) {
                Ok(reply) if reply.round != round => {
                    self.confirm(&reply);
                    continue;
                }
                Ok(reply) => {
                    answered += 1;
                    if take(reply.node, reply.answer) {
                        return RoundEnd::Heard;
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    return RoundEnd::OutOfTime
                }
            }
        }
        RoundEnd::Heard
    }

    /// After a round is decided: the answers of the `rest` nodes still silent, for as long
    /// as `STRAGGLER_WAIT` allows.
    pub(super) fn hear_out(
        &self,
        round: u64,
        rest: usize,
        started: Instant,
        deadline: Instant,
        mut take: impl FnMut(usize, Answer),
    ) {
        if rest == 0 {
            return;
        }
        let patience = (started.elapsed() * 2).max(STRAGGLER_WAIT);
        let until = deadline.min(Instant::now() + patience);
        self.collect(round, rest, until, |node, answer| {
            take(node, answer);
            false
        });
    }

    /// Round `round` releases what a failed attempt took on `nodes`: leaving waits for their
    /// answers (`finish_letting_go`) until `deadline`.
    pub(super) fn expect_release(&self, round: u64, nodes: Vec<usize>, deadline: Instant) {
        // Nothing to wait for when the attempt took no node: no answer would ever clear it.
        *self.unconfirmed.borrow_mut() = (!nodes.is_empty()).then_some(PendingRelease {
            round,
            nodes,
            deadline,
        });
    }

    /// Notes a node's answer to the release after a failed attempt.
    fn confirm(&self, reply: &Reply) {
        let mut unconfirmed = self.unconfirmed.borrow_mut();
        if let Some(pending) = unconfirmed.as_mut().filter(|p| p.round == reply.round) {
            pending.nodes.retain(|&node| node != reply.node);
            if pending.nodes.is_empty() {
                *unconfirmed = None;
            }
        }
    }

    /// Waits (up to its deadline) for the release after a failed attempt to be confirmed.
    pub(super) fn finish_letting_go(&mut self) {
        let Some(mut pending) = self.unconfirmed.borrow_mut().take() else {
            return;
        };
        if pending.nodes.is_empty() {
            return;
        }
        // Only the nodes that took the key count: another node's quick failure must not
        // stand in for one of theirs.
        self.collect(
            pending.round,
            self.nodes.len(),
            pending.deadline,
            |node, _| {
                pending.nodes.retain(|&waited| waited != node);
                pending.nodes.is_empty()
            },
        );
    }
}

/// A node's thread: runs its jobs in order and reports each answer.
fn serve(index: usize, mut node: SingleRedis, jobs: &Receiver<Job>, replies: &Sender<Reply>) {
    for job in jobs {
        let answer = match job.work {
            Work::Acquire { deadline, waited } => {
                Answer::Acquire(node.try_acquire_until(Some(deadline), waited))
            }
            Work::RaiseFence { fence, deadline } => {
                Answer::RaiseFence(node.raise_fence(fence, deadline))
            }
            Work::Renew {
                deadline,
                takeover_heard,
            } => Answer::Renew(node.renew(deadline, takeover_heard)),
            Work::Release {
                keep_for,
                deadline,
                notice,
                ending,
            } => Answer::Release(node.release_announcing(keep_for, deadline, &notice, ending)),
            Work::Subscribe { sink, parts, until } => Answer::Subscribe(
                node.subscribe_by(sink, Some(until), false)
                    .map(|part| parts.add(part)),
            ),
            Work::RecordSuccess => {
                node.record_success();
                Answer::Done
            }
            Work::Abandon => {
                node.abandon();
                Answer::Done
            }
            Work::GiveUp => Answer::GaveUp(node.give_up()),
            Work::Rest => {
                node.rest();
                Answer::Done
            }
        };
        let reply = Reply {
            round: job.round,
            node: index,
            answer,
        };
        if replies.send(reply).is_err() {
            return;
        }
    }
}
