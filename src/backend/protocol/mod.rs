//! The lock protocol on one Redis deployment: SET NX PX through a Lua script,
//! compare-and-PEXPIRE, compare-and-DEL plus PUBLISH. One connection (`connection::Link`)
//! carries acquire, renew and release; a second one, opened only when the lock is busy,
//! carries the subscription to release notices, and a holder's takeover listener
//! (`HolderListener`) has one of its own.
//!
//! "One deployment" may be the master that Sentinels name or, in a Redis Cluster, the
//! master of the lock's hash slot: `endpoint` finds it and `connection` follows `MOVED` and
//! `ASK`. On such a master with replicas, an acquisition waits (`WAIT 1`, briefly) for a
//! replica to have it, so that a failover right after it is unlikely to lose the key and
//! the fence.
//!
//! By event, one file each: `acquire`, `renew`, `release` (and leaving the waiters' queue),
//! `listen` (release notices, takeovers); `warnings` what scripts' replies warn of, and
//! the wait for a replica.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Result;

mod acquire;
mod listen;
mod release;
mod renew;
mod warnings;

pub use listen::HolderListener;
pub(super) use warnings::warn_recorded;

use super::connection::Link;
use super::layout::{done_keys, record_keys, Channels, Key, LockRequest};
use super::scripts::{OnceArgs, RecordArgs};
use super::target::RedisTarget;
use super::vetting::Eviction;
use super::{
    Attempt, HoldEnd, LockBackend, NoticeSink, Released, Renewal, Subscription, TakeoverListener,
};

pub struct SingleRedis {
    link: Link,
    /// Where `link` goes: a holder's listener (`HolderListener`) connects there on its own.
    target: RedisTarget,
    lock: LockRequest,
    identity: String,
    /// The slot key this holder has, once it has one.
    held: Option<Key>,
    /// Whether this waiter listens for its own wake-up (its subscription is up): only then
    /// may it join the waiters' queue, or a release would wake it in vain.
    listening: bool,
    /// Where releases are announced: sharded in a cluster.
    channels: Channels,
    /// A Redlock node: where the server's `run_id` goes, learnt with the first acquisition
    /// (see `identify`).
    server_id: Option<Arc<OnceLock<String>>>,
    /// Whether a server that may evict the lock is used anyway (see `vetting`).
    eviction: Eviction,
    /// Whether this server answered an attempt of this waiter: with `--supersede`, it has
    /// arrived there, and another's value in the registry is then a newer waiter's.
    arrived: bool,
    /// With `--once-per`: this run's arrival by this server's clock, from the first
    /// attempt it answered (each Redlock node stamps, and judges, by its own clock).
    stamp_ms: Option<u64>,
    /// The command succeeded: the release records the work as done.
    record: bool,
    /// The slot this holder has, by number, and the fence this server gave it: what its
    /// value here is, for the history.
    slot_number: u32,
    fence: Option<u64>,
    /// How the hold ended (`LockBackend::end_hold`).
    ending: HoldEnd,
    /// A renewal recorded this holder's loss on this server: the release does not again.
    lost_recorded: bool,
}

impl SingleRedis {
    /// Prepares the client; connects on first use.
    pub fn new(
        target: &RedisTarget,
        timeout: Duration,
        lock: LockRequest,
        eviction: Eviction,
    ) -> Result<SingleRedis> {
        let link = Link::new(target, timeout)?;
        Ok(SingleRedis {
            eviction,
            channels: Channels::of(&lock.key, link.is_cluster()),
            link,
            target: target.clone(),
            identity: lock.identity(),
            lock,
            held: None,
            listening: false,
            server_id: None,
            arrived: false,
            stamp_ms: None,
            record: false,
            slot_number: 1,
            fence: None,
            ending: HoldEnd::default(),
            lost_recorded: false,
        })
    }

    /// Where the lock's history and counters go, and the stream's cap (0: nowhere).
    fn record_args(&self) -> RecordArgs {
        let [history_key, stats_key] = record_keys(&self.lock.key);
        RecordArgs {
            history_key,
            stats_key,
            max: self.lock.recording.history,
        }
    }

    /// This holder's value as it wrote it here; empty before it holds.
    fn value(&self) -> String {
        self.fence.map_or_else(String::new, |fence| {
            format!("{},\"fence\":{fence}{}", self.identity, self.lock.metadata)
        })
    }

    /// How the hold ended: the next release (`release_announcing` with `Some`) records it.
    pub fn end_hold(&mut self, end: HoldEnd) {
        self.ending = end;
    }

    /// Makes the next acquisition learn the server's `run_id` into `id`, in the same script
    /// (no round trip of its own): a Redlock quorum tells by it one server named twice
    /// under two spellings (`127.1` and `127.0.0.1`, a unix socket and a TCP port).
    pub fn identify(&mut self, id: Arc<OnceLock<String>>) {
        self.server_id = Some(id);
    }

    /// What the scripts take of `--once` and `--once-per`.
    fn once_args(&self) -> OnceArgs {
        let once = &self.lock.once;
        let [done_key, done_per_key] = done_keys(&self.lock.key);
        OnceArgs {
            done_key,
            done_per_key,
            id: once.id.clone().unwrap_or_default(),
            per: once.per.unwrap_or_default(),
            stamp_ms: self.stamp_ms,
            remember: once.remember,
        }
    }

    /// Marks the command as succeeded: the release records its work (`--once`).
    pub fn record_success(&mut self) {
        self.record = self.lock.once.is_on();
    }

    /// The key this holder renews and releases: its slot, or the lock's key before it has
    /// one (nothing of ours is there then, and the scripts find nothing to touch).
    fn held_key(&self) -> &Key {
        self.held.as_ref().unwrap_or(&self.lock.key)
    }
}

impl LockBackend for SingleRedis {
    fn try_acquire(&mut self, deadline: Option<Instant>) -> Result<Attempt> {
        let waited = self.lock.recording.started.elapsed();
        self.try_acquire_until(deadline, waited)
    }

    fn renew(&mut self, deadline: Instant, takeover_heard: bool) -> Result<Renewal> {
        self.renew_held(deadline, takeover_heard)
    }

    fn release(&mut self, keep_for: Option<Duration>, deadline: Instant) -> Result<Released> {
        // One process releases once, so any fixed suffix keeps its notices distinct.
        let notice = format!("{}#0", self.identity);
        let ending = self.ending;
        self.release_announcing(keep_for, deadline, &notice, Some(ending))
    }

    fn record_success(&mut self) {
        SingleRedis::record_success(self);
    }

    fn end_hold(&mut self, end: HoldEnd) {
        SingleRedis::end_hold(self, end);
    }

    fn abandon(&mut self) {
        self.leave_queue(None);
    }

    fn give_up(&mut self) -> Option<u64> {
        let waited = self.lock.recording.started.elapsed();
        self.leave_queue(Some(waited))
    }

    fn rest(&mut self) {
        if self.listening {
            self.link.rest();
        }
    }

    /// Subscribes with a socket that the waiter's loop polls itself, where the server
    /// allows it (see `polled`).
    fn subscribe(&mut self, sink: NoticeSink, deadline: Option<Instant>) -> Result<Subscription> {
        self.subscribe_by(sink, deadline, true)
    }

    fn takeover_listener(&self) -> Option<Box<dyn TakeoverListener>> {
        let listener = self.holder_listener()?;
        Some(Box::new(listener))
    }

    fn describe(&self) -> &str {
        self.link.display()
    }

    fn let_go(&mut self, deadline: Instant) -> Result<Released> {
        let notice = format!("{}#0", self.identity);
        let released = self.release_announcing(None, deadline, &notice, None);
        self.held = None;
        self.fence = None;
        released
    }

    fn subscribe_threaded(
        &mut self,
        sink: NoticeSink,
        deadline: Option<Instant>,
    ) -> Result<Subscription> {
        self.subscribe_by(sink, deadline, false)
    }

    fn slot(&self) -> u32 {
        self.slot_number
    }
}

/// When a call that may take `timeout` must end: then, or at `deadline` if sooner.
fn budget_end(timeout: Duration, deadline: Option<Instant>) -> Instant {
    let end = Instant::now() + timeout;
    deadline.map_or(end, |deadline| deadline.min(end))
}
