//! How a lock is held in Redis, behind one small interface. Everything that talks to Redis
//! lives under this module, by layer, from the bottom up:
//!
//! - `error`: what a failure is, and whether it may pass;
//! - `target`: the URLs the user gave, checked and redacted;
//! - `endpoint`: which server a command goes to (one server, Sentinel, Cluster discovery);
//! - `connection`: deadlines on every command, redirections, script loading; `wire` what
//!   the commands travel over (a connection, or a waiter's RESP3 subscription);
//! - `layout` and `scripts`: key names, the value format, limits; the Lua scripts;
//! - `protocol`: the lock on one deployment, `notices` its subscription to release
//!   notices (`polled` where the run's loop reads it itself); `quorum`: Redlock over
//!   several; `keyset`: several locks as one (several `-k`: all of them, or a pool);
//! - `vetting`: whether a server can keep a lock at all (eviction, a cluster node behind a
//!   plain URL), asked along with the first acquisition on each connection;
//! - `inspect`: reading and clearing locks for `status`, `list` and `release`, and
//!   `counters` their counters for `metrics`, `check` and `status`;
//! - `history`: reading a lock's event history for `history`.
//!
//! The rest of the program sees [`LockBackend`], [`inspect::Inspector`] and
//! [`history::History`], never a Redis connection. Nothing here knows of processes or signals.

mod connection;
pub mod counters;
mod endpoint;
mod error;
pub mod history;
pub mod inspect;
mod key;
pub mod keyset;
mod layout;
mod notices;
mod polled;
mod protocol;
mod quorum;
mod scripts;
mod target;
mod vetting;
mod wire;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;

pub use error::cannot_subscribe;
pub use error::{is_refused_by_acl, is_transient, is_try_later};
pub use key::shown;
pub use layout::Recording;
pub use layout::{
    colocates, lock_of_internal_key, shares_keys_with, Holder, Key, LockRequest, Once, MAX_KEY_LEN,
    MAX_LABEL_LEN, MAX_LIMIT,
};
/// The replies of the scripts, read by the fuzz targets as the backend reads them.
pub(crate) use scripts::{AcquireReply, Acquisition, Extended, PeekReply};
pub use target::{holds_secret, Deployment, Password, Sources};
pub use vetting::Eviction;

// The parsers of what comes from outside, for `crate::fuzzing`.
pub(crate) use endpoint::{key_slot, master_address, parse_slots};
pub(crate) use layout::{identity_in, sibling_key};
pub(crate) use target::{mask_url, redact_url, split_urls};

/// The backend for `deployment`: one Redis deployment, or a Redlock quorum over several
/// independent masters. Nothing is connected yet. Each acquisition refuses a server that
/// may evict the lock, unless `eviction` allows it (see `vetting`).
pub fn open(
    deployment: &Deployment,
    timeout: Duration,
    lock: LockRequest,
    eviction: Eviction,
) -> Result<Box<dyn LockBackend>> {
    Ok(match deployment.targets() {
        [single] => Box::new(protocol::SingleRedis::new(single, timeout, lock, eviction)?),
        nodes => Box::new(quorum::Quorum::new(nodes, timeout, lock, eviction)?),
    })
}

/// Opens a key set (several `-k`): one backend per key of `keys`, in the order given, each
/// an ordinary lock of `lock`'s kind on `deployment` under the same token (see `keyset`).
pub fn open_set(
    deployment: &Deployment,
    timeout: Duration,
    lock: LockRequest,
    keys: &[Key],
    mode: keyset::Mode,
    eviction: Eviction,
) -> Result<Box<dyn LockBackend>> {
    let identity = lock.identity();
    let members = keys
        .iter()
        .map(|key| {
            let member = LockRequest {
                key: key.clone(),
                ..lock.clone()
            };
            open(deployment, timeout, member, eviction)
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes: Vec<&[u8]> = keys.iter().map(Key::as_bytes).collect();
    Ok(Box::new(keyset::KeySet::new(
        mode, members, &bytes, &identity, timeout,
    )))
}

/// What the last attempt of a key set found at one member (`LockBackend::members`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberState {
    /// Held, with this acquisition's fence.
    Held { fence: u64 },
    /// Busy: the holder's value, when it is a string.
    Busy { holder: Option<Vec<u8>> },
    /// Not tried (an earlier member was busy), or not answered.
    Untried,
}

/// The result of one attempt to take the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Ours. The lease runs for the TTL from `sent_at` at the earliest: the moment the
    /// successful command left this machine, before Redis could start the clock. `fence`
    /// is this acquisition's number, larger than any before it for this lock.
    Acquired { sent_at: Instant, fence: u64 },
    /// Someone else holds it, for `holder_ttl` more at most if they do not renew; `None`
    /// when the key never expires (not a lock of ours, or a holder that set no TTL).
    /// `holder` is a holder's value, when it is a string.
    Busy {
        holder_ttl: Option<Duration>,
        holder: Option<Vec<u8>>,
        /// With `--fair`: how many waiters are queued before this one.
        ahead: u32,
        /// No one holds a majority of the Redlock nodes: contenders split them, and each
        /// will let go. Retry after a short random pause, not on the next release notice,
        /// so that contenders do not collide again in lockstep.
        split: bool,
        /// On a run's final attempt (one that does not wait): the consecutive skips of this
        /// lock, this one included, as `{K}:stats` counts them; `None` when not recorded.
        skips: Option<u64>,
    },
    /// With `--supersede`: a newer superseding waiter arrived while this one waited (on a
    /// majority of the Redlock nodes). `newer` is its value: its identity and metadata.
    /// This waiter has left the queue.
    Superseded {
        newer: Option<Vec<u8>>,
        /// The consecutive skips, this one included (see `Busy::skips`).
        skips: Option<u64>,
    },
    /// `--once`, `--once-per`: a run of this key already did the work (with Redlock, so
    /// say a majority of the nodes). `record` is `<when, server ms> <that holder's value>`.
    /// Nothing was taken.
    Done {
        record: Vec<u8>,
        /// The consecutive skips, this one included (see `Busy::skips`).
        skips: Option<u64>,
    },
}

/// How a hold ended, told to the backend before the release, which records it in the
/// lock's history and counters (`{K}:history`, `{K}:stats`) in the same script.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HoldEnd {
    /// The command's status as redlock-run reports it (its exit code, 128+N for a
    /// signal); `None` when it never ran.
    pub exit_code: Option<u8>,
    /// It exited 0 on its own: the release records the last success, and the consecutive
    /// skips start again from 0.
    pub success: bool,
    /// Another run took over (`--replace`): recorded as `replaced`.
    pub replaced: bool,
}

/// The result of one renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Extended by a command sent at `sent_at`: the lease now runs from then.
    /// `replace_by`: another run asked to take over (`--replace`): its lock value, without
    /// a fence (a [`Holder`] reads it); with Redlock, asked on a majority of the nodes.
    Extended {
        sent_at: Instant,
        replace_by: Option<Vec<u8>>,
    },
    /// The key is gone or holds someone else's value: the lock is lost for sure.
    NotOurs,
}

/// The result of a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    Deleted,
    /// Deleted, but the server refused to announce it (the user may not publish on the
    /// release channel): waiters find the lock free only when they next look.
    DeletedUnannounced,
    /// Left to expire at the `--min-hold` mark.
    KeptUntilMinHold,
    /// The key was gone or someone else's; nothing was touched.
    NotOurs,
}

/// What the subscription to release notices reports.
#[derive(Debug)]
pub enum Notice {
    /// A holder released the lock: try now. `by` names the release (the holder's identity
    /// and a release number), the same on every Redlock node.
    Released { by: String },
    /// The subscription broke; no notice will come through it any more.
    Broken(anyhow::Error),
}

/// What a `--replace` run's acquisition announces on the holder's own channel
/// (`scripts/acquire.lua`): `replace`, or `replace ` and more that names the request.
/// Only a poke: the holder's renewal reads the request on record, and that decides.
pub fn is_takeover_notice(by: &str) -> bool {
    by == "replace" || by.starts_with("replace ")
}

/// Where release notices go: called from the subscription's thread with each notice;
/// returns false once nobody listens any more.
pub type NoticeSink = Box<dyn FnMut(Notice) -> bool + Send>;

/// An active subscription to release notices. Dropping it ends the subscription (its
/// thread notices within a second and closes the connection).
pub struct Subscription {
    stopped: Arc<AtomicBool>,
    /// With several Redlock nodes: one subscription per node, added as each comes up.
    parts: Option<SubscriptionParts>,
    /// A subscription that no thread reads: the loop is to poll it (`take_source`).
    source: Option<Box<dyn NoticeSource>>,
}

/// A subscription's socket, for the run's loop to poll and read itself (see `polled`),
/// instead of a thread that reads it and passes each notice on.
pub trait NoticeSource: Send {
    /// The descriptor to poll for reading.
    fn fd(&self) -> std::os::fd::RawFd;

    /// Reads what has come, without blocking, and returns the notices in it coalesced:
    /// the latest release, or `Notice::Broken` once the subscription has ended (nothing
    /// comes through it after that). Whatever it has read is handed on: it never keeps a
    /// complete message back for a later call.
    fn read(&mut self) -> Option<Notice>;

    /// Whether something was taken off the socket for `read` to hand on although the socket
    /// may not be readable (a command sent over the subscription read a notice that came
    /// before its reply): the loop then reads before it polls.
    fn has_read(&self) -> bool {
        false
    }
}

/// The node subscriptions of a combined one, shared with the threads that make them:
/// `None` once the whole has ended, so that a part that comes up late ends at once.
#[derive(Clone)]
pub struct SubscriptionParts(Arc<Mutex<Option<Vec<Subscription>>>>);

impl SubscriptionParts {
    pub fn new() -> SubscriptionParts {
        SubscriptionParts(Arc::new(Mutex::new(Some(Vec::new()))))
    }

    /// Keeps `part` for as long as the whole lives.
    pub fn add(&self, part: Subscription) {
        let mut parts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(parts) = parts.as_mut() {
            parts.push(part);
        }
        // Otherwise `part` is dropped here: nobody listens any more.
    }
}

impl Default for SubscriptionParts {
    fn default() -> Self {
        SubscriptionParts::new()
    }
}

impl Subscription {
    pub fn new() -> Subscription {
        Subscription {
            stopped: Arc::new(AtomicBool::new(false)),
            parts: None,
            source: None,
        }
    }

    /// A subscription that the loop reads itself: `source`, which the caller must poll.
    pub fn polled(source: Box<dyn NoticeSource>) -> Subscription {
        let mut subscription = Subscription::new();
        subscription.source = Some(source);
        subscription
    }

    /// The socket to poll, when no thread reads this subscription (once: the caller owns
    /// it from then on, and dropping it ends the subscription).
    pub fn take_source(&mut self) -> Option<Box<dyn NoticeSource>> {
        self.source.take()
    }

    /// One subscription made of several (late ones included), ended together.
    pub fn combined(parts: SubscriptionParts) -> Subscription {
        Subscription {
            stopped: Arc::new(AtomicBool::new(false)),
            parts: Some(parts),
            source: None,
        }
    }

    /// The flag the listening side checks to learn that nobody listens any more.
    pub fn stopped_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stopped)
    }
}

impl Default for Subscription {
    fn default() -> Self {
        Subscription::new()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Relaxed);
        if let Some(parts) = &self.parts {
            let ended = parts.0.lock().unwrap_or_else(|p| p.into_inner()).take();
            drop(ended);
        }
    }
}

/// A lock in some Redis deployment. Each call is bounded in time: by the configured Redis
/// timeout, and by `deadline` where one is given.
pub trait LockBackend: Send {
    /// One attempt to take the lock, given up at `deadline` (a wait's), and within the
    /// Redis timeout in any case. Errors are transport or server failures.
    fn try_acquire(&mut self, deadline: Option<Instant>) -> Result<Attempt>;

    /// Extend the lease, giving up at `deadline`. `takeover_heard`: a takeover
    /// (`--replace`) was announced on this holder's channel, so the renewal looks for it
    /// even where it otherwise would not (a Redis Cluster: see `SingleRedis::renew`).
    fn renew(&mut self, deadline: Instant, takeover_heard: bool) -> Result<Renewal>;

    /// Delete the lock if it is still ours and wake the waiters, or, with `keep_for`, leave
    /// it to expire that much later (`--min-hold`). Gives up at `deadline`, which is never
    /// past the lease's end; within it, a release that got no answer is looked into (its
    /// key read back) before it counts as failed.
    fn release(&mut self, keep_for: Option<Duration>, deadline: Instant) -> Result<Released>;

    /// The command succeeded: the next release records the work as done (`--once`,
    /// `--once-per`), in the same script, so that the record and the release are one step.
    fn record_success(&mut self);

    /// How the hold ended: the next release records it (see [`HoldEnd`]).
    fn end_hold(&mut self, end: HoldEnd);

    /// Stop waiting: leave the waiters' queue, if in it. Best effort, bounded by the timeout.
    fn abandon(&mut self);

    /// The wait ran out (`--wait`): leave the queue as `abandon` does, and record a
    /// `timeout` (unless `--history 0`). Returns the consecutive skips of this lock, this
    /// one included; `None` when not recorded. Bounded by the timeout.
    fn give_up(&mut self) -> Option<u64>;

    /// Between a waiter's tries: closes the command connection, so that a waiting process
    /// holds one connection to Redis, its subscription's (10,000 waiting hosts then fit in
    /// Redis's default `maxclients`). The next try connects again.
    fn rest(&mut self);

    /// Subscribe to release notices, passed to `sink` as they come. Returns once the
    /// subscription is active, so a release after this call returns is never missed; gives
    /// up at `deadline`, and within the Redis timeout in any case.
    fn subscribe(&mut self, sink: NoticeSink, deadline: Option<Instant>) -> Result<Subscription>;

    /// How this holder hears a takeover (`--replace`) asked for, on connections of its
    /// own, so that listening, and listening again, never waits on the backend; nothing is
    /// connected yet. `None` where none can be asked for (`--limit` above 1).
    fn takeover_listener(&self) -> Option<Box<dyn TakeoverListener>>;

    /// Where the lock lives, safe to print.
    fn describe(&self) -> &str;

    /// An attempt lets go of what it took without running a command (a key set's member
    /// taken before another was found busy): deleted if ours, as a release, recorded as
    /// `abandoned` where the backend can tell it apart.
    fn let_go(&mut self, deadline: Instant) -> Result<Released> {
        self.release(None, deadline)
    }

    /// As `subscribe`, but always read by a thread that passes each notice to `sink`,
    /// never left for the caller to poll (a key set listens to several at once).
    fn subscribe_threaded(
        &mut self,
        sink: NoticeSink,
        deadline: Option<Instant>,
    ) -> Result<Subscription> {
        self.subscribe(sink, deadline)
    }

    /// Which of the `--limit` slots is held, from 1 (1 without `--limit`).
    fn slot(&self) -> u32 {
        1
    }

    /// A key set's members, in the order the run named them, as the last attempt found
    /// them; empty for one lock.
    fn members(&self) -> Vec<MemberState> {
        Vec::new()
    }
}

/// A holder's subscription to its own channel, where a takeover (`--replace`) is announced
/// (`LockBackend::takeover_listener`).
pub trait TakeoverListener: Send {
    /// Subscribes, passing each notice to `sink`; returns once it listens (with Redlock, on
    /// a majority of the nodes; the others join as they come up), within the Redis
    /// timeout. May be called again once a subscription has broken.
    fn listen(&mut self, sink: NoticeSink) -> Result<Subscription>;
}

/// Runs `read` on every node at once (`status`, `list`, `history` over a Redlock quorum);
/// one result per node, in order. One node is read on this thread.
pub(crate) fn on_every_node<N: Send, T: Send>(
    nodes: &mut [N],
    read: impl Fn(&mut N) -> T + Sync,
) -> Vec<T> {
    if let [node] = nodes {
        return vec![read(node)];
    }
    std::thread::scope(|scope| {
        let reads: Vec<_> = nodes
            .iter_mut()
            .map(|node| {
                let read = &read;
                scope.spawn(move || read(node))
            })
            .collect();
        reads
            .into_iter()
            // A node's panic (a bug; the release build aborts on it) goes on here.
            .map(|read| {
                read.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}
