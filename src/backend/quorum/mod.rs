//! Redlock: one lock over N independent Redis masters, held while a majority (N/2+1) of
//! them have it. Each node is a `SingleRedis` (same key, same token, same scripts) owned by
//! a thread of its own, so that every request goes to all nodes at once and a round is
//! decided as soon as its outcome is certain: a slow or dead node costs nothing while a
//! majority answers.
//!
//! - **Acquire**: all nodes in parallel; won when a majority took it within a third of the
//!   TTL, timed from `started`, before the first request left (the lease is valid until
//!   `started + ttl - drift`; a slower win would leave too little to renew). Once decided,
//!   or once a majority answered yes or no (a failed node is no answer), the others get
//!   `STRAGGLER_WAIT`. Lost or split rounds release on every node that did not refuse,
//!   answered or not (a node's jobs run in order, so the release follows the acquire on a
//!   slow node).
//! - **Fence**: each node counts its own acquisitions. The fence handed out is the largest
//!   count among the nodes taken; unless a majority already reports it, it is written to
//!   the nodes first (never lowering one), so every later majority, which shares a node
//!   with this one, counts past it. See docs/guide.md, "Fencing tokens".
//! - **Renew**: all nodes in parallel; extended when a majority confirms, lost for sure when
//!   more than N - majority say the key is not ours. A takeover request (`--replace`) seen
//!   on some nodes never makes the round wait for a silent node past `STRAGGLER_WAIT`: the
//!   round ends once one request has a majority or the silent nodes could not give it one.
//!   A node that answers "not ours" while a majority confirmed (it restarted empty) is
//!   taken again; never otherwise.
//! - **Release**: all nodes, waiting for a majority's answers (failures are none), then
//!   `STRAGGLER_WAIT` for the rest. Each release is announced with the same text on every
//!   node. "Not ours" from more than N - majority nodes means the lock was lost; from
//!   fewer, it was not.
//! - **Waiting**: subscribed once a majority of nodes listens (the others join as they come
//!   up); each release wakes the waiter once, its own releases not at all.
//! - **A holder's takeover listener** (`listen`): likewise on a majority, on connections of
//!   its own, off the nodes' threads; every announcement is passed on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

mod acquire;
mod listen;
mod release;
mod renew;
mod rounds;
mod subscribe;
mod tally;

use rounds::{Answer, Nodes, Work};
pub(super) use tally::majority;

use super::protocol::HolderListener;
use super::target::RedisTarget;
use super::{
    Attempt, Eviction, HoldEnd, LockBackend, LockRequest, NoticeSink, Released, Renewal,
    Subscription, TakeoverListener,
};
use crate::report;
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

    /// How the next release is announced: this holder's identity and the number of the
    /// round that sends it, so each release reads differently and is the same everywhere.
    fn next_release_notice(&self) -> Arc<str> {
        Arc::from(format!("{}#{}", self.identity, self.nodes.next_round()))
    }
}

impl Drop for Quorum {
    fn drop(&mut self) {
        self.nodes.finish_letting_go();
    }
}

impl LockBackend for Quorum {
    fn try_acquire(&mut self, wait_ends: Option<Instant>) -> Result<Attempt> {
        self.acquire_round(wait_ends)
    }

    fn renew(&mut self, deadline: Instant, takeover_heard: bool) -> Result<Renewal> {
        self.renew_round(deadline, takeover_heard)
    }

    fn release(&mut self, keep_for: Option<Duration>, deadline: Instant) -> Result<Released> {
        self.release_round(keep_for, deadline)
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

    fn subscribe(&mut self, sink: NoticeSink, deadline: Option<Instant>) -> Result<Subscription> {
        self.subscribe_round(sink, deadline)
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

#[cfg(test)]
mod tests;
