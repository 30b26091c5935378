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

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::connection::{Link, Session};
use super::error::{is_transient, is_try_later, FenceTooLarge};
use super::layout::{
    done_ids_key, done_keys, fence_key, limit_key, queue_keys, record_keys, replace_key,
    supersede_key, Channels, Key, LockRequest,
};
use super::notices;
use super::scripts::{
    Acquire, Acquisition, Extended, LeaveQueue, OnceArgs, RaiseFence, RecordArgs, Recorded,
    Release, ReleaseReply, Renew,
};
use super::target::RedisTarget;
use super::vetting::{self, Eviction};
use super::{
    Attempt, HoldEnd, LockBackend, NoticeSink, Released, Renewal, Subscription, TakeoverListener,
};
use crate::{lease, report};

/// Pauses between sends of a release that the server answered "not now".
const RELEASE_RETRY_MIN: Duration = Duration::from_millis(10);
const RELEASE_RETRY_MAX: Duration = Duration::from_millis(250);

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
    /// Subscribes to release notices (`LockBackend::subscribe`); with `polled`, the
    /// subscription is left for the caller's loop to read where the server allows it (see
    /// `notices::subscribe`), otherwise a thread reads it and passes notices to `sink`.
    pub fn subscribe_by(
        &mut self,
        sink: NoticeSink,
        deadline: Option<Instant>,
        polled: bool,
    ) -> Result<Subscription> {
        let until = budget_end(self.link.timeout(), deadline);
        // Its own channel, where a release wakes it when it is first in the queue, and the
        // lock's, where a release is announced when nobody is queued. (A holder listens on
        // its own channel alone, on a connection of its own: `HolderListener`.)
        let channels = [
            self.channels.wake(&self.lock.token),
            self.channels.release.clone(),
        ];
        let subscription = if self.channels.sharded {
            notices::subscribe_sharded(&mut self.link, &self.lock.key, channels, sink, until)
        } else {
            notices::subscribe(
                &mut self.link,
                &self.lock.key,
                channels,
                sink,
                until,
                polled,
            )
        };
        let subscription = subscription.context("cannot subscribe to release notices")?;
        self.listening = true;
        Ok(subscription)
    }

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

    /// One attempt to take the lock, as `LockBackend::try_acquire`, giving up at `deadline`
    /// (a Redlock node must answer within the acquisition's round).
    pub fn try_acquire_until(
        &mut self,
        deadline: Option<Instant>,
        waited: Duration,
    ) -> Result<Attempt> {
        let limit = self.lock.limit;
        let [queue, woken] = queue_keys(&self.lock.key);
        let acquire = Acquire {
            slots: (1..=limit).map(|slot| self.lock.slot_key(slot)).collect(),
            limit_key: limit_key(&self.lock.key),
            fence_key: fence_key(&self.lock.key),
            queue,
            woken,
            replace_key: replace_key(&self.lock.key),
            identity: self.identity.clone(),
            metadata: self.lock.metadata.clone(),
            ttl: self.lock.ttl,
            limit,
            fair: self.lock.fair,
            token: self.lock.token.clone(),
            channels: self.channels.clone(),
            listening: self.listening,
            arrival_ms: self.lock.arrival_ms,
            want_run_id: self.server_id.as_ref().is_some_and(|id| id.get().is_none()),
            supersede_key: supersede_key(&self.lock.key),
            supersede: self.lock.supersede,
            arrived: self.arrived,
            once: self.once_args(),
            replace: self.lock.replace,
            recording: self.record_args(),
            waited,
            final_try: self.lock.recording.final_try,
        };
        // A reply lost on the wire leaves us unsure whether the SET landed: try once more on
        // a fresh connection. The script recognises our own value and counts it as acquired.
        // A failure to connect sent nothing, and is not retried here. The first try gives
        // up at `deadline` (a wait's) or after the Redis timeout; the retry always has a
        // whole Redis timeout, even past `deadline`: cut short, it could leave a lock taken
        // by a request whose answer was merely slow held by nobody until its TTL. So a
        // server that stops answering costs up to twice the timeout, as `--help` says.
        let mut end = budget_end(self.link.timeout(), deadline);
        let mut retried = false;
        let replica_wait = lease::replica_wait(self.lock.ttl, self.link.timeout());
        let key = &self.lock.key;
        let server = self.link.display().to_string();
        let server_id = self.server_id.as_ref();
        let (eviction, cluster) = (self.eviction, self.link.is_cluster());
        let mut stamp_ms = self.stamp_ms;
        loop {
            if retried {
                end = Instant::now() + self.link.timeout();
            }
            // The server is asked whether it can keep a lock at all in the same write as the
            // first acquisition on each connection (`vetting`): the answer comes after the
            // script ran, and a lock taken on an unfit server is let go at once.
            let reply: Result<(Acquisition, Option<u64>, Instant)> =
                self.link.call(Some(end), |session| {
                    session.vet();
                    let reply = session.run(&acquire)?;
                    let sent_at = session.sent_at.unwrap_or_else(Instant::now);
                    let taken = match reply.outcome {
                        Acquisition::Acquired { slot, .. } => Some(slot),
                        _ => None,
                    };
                    if let Some(unfit) = vetting::unfit(session.facts.as_ref(), eviction, cluster) {
                        return Err(anyhow::Error::new(Refused(unfit, taken)));
                    }
                    warn_repaired(reply.repaired, key, &server);
                    warn_foreign(reply.foreign, key, &server, "read as no record");
                    warn_recorded(&reply.recorded, key, &server);
                    if let Some(id) = server_id.filter(|_| !reply.run_id.is_empty()) {
                        let _ = id.set(reply.run_id);
                    }
                    stamp_ms = stamp_ms.or(reply.stamp_ms);
                    if taken.is_some() {
                        confirm_replicated(
                            session,
                            replica_wait,
                            &key.to_string(),
                            "the lock may be lost",
                        );
                    }
                    Ok((reply.outcome, reply.skips, sent_at))
                });
            let reply = match reply {
                Err(err) => match err.downcast::<Refused>() {
                    Ok(Refused(unfit, taken)) => {
                        // Let go over a connection that listens to no channel, as a
                        // holder's release always is.
                        if taken.is_some() {
                            self.link.taken_over_subscription();
                        }
                        return Err(self.refuse(&unfit, taken));
                    }
                    Err(err) => Err(err),
                },
                Ok(reply) => Ok(reply),
            };
            self.stamp_ms = stamp_ms;
            match reply {
                Ok((Acquisition::Acquired { slot, fence }, _, sent_at)) => {
                    self.link.taken_over_subscription();
                    self.held = Some(self.lock.slot_key(slot));
                    self.slot_number = slot;
                    self.fence = fence;
                    let fence = fence.ok_or_else(|| {
                        anyhow!(
                            "{} holds no counter redlock-run can read; the lock expires by \
                             its TTL",
                            fence_key(&self.lock.key)
                        )
                    })?;
                    return Ok(Attempt::Acquired { sent_at, fence });
                }
                Ok((
                    Acquisition::Busy {
                        holder_ttl,
                        holder,
                        ahead,
                    },
                    skips,
                    _,
                )) => {
                    self.arrived = true;
                    return Ok(Attempt::Busy {
                        holder_ttl,
                        holder,
                        ahead,
                        split: false,
                        skips,
                    });
                }
                Ok((Acquisition::Superseded { newer }, skips, _)) => {
                    self.arrived = true;
                    return Ok(Attempt::Superseded { newer, skips });
                }
                Ok((Acquisition::Done { record }, skips, _)) => {
                    return Ok(Attempt::Done { record, skips })
                }
                Ok((Acquisition::OtherLimit { other }, _, _)) => {
                    let other = match other {
                        0 => String::from("a value redlock-run did not write"),
                        n => format!("--limit {n}"),
                    };
                    return Err(anyhow!(
                        "{} is in use with {other}, not --limit {limit}; every user of a lock must \
                         pass the same --limit",
                        self.lock.key
                    ));
                }
                Ok((Acquisition::FenceTooLarge { counter }, _, _)) => {
                    return Err(anyhow::Error::new(FenceTooLarge(format!(
                        "{} on {server} holds {counter}, more than any run counts to (a fence \
                         from it would be 10^18 or more): no lock is taken there until the \
                         counter is deleted (its fences then start again from the server's \
                         clock)",
                        fence_key(&self.lock.key)
                    ))));
                }
                Err(err) if retried || !self.link.sent() || !is_transient(&err) => return Err(err),
                Err(_) => retried = true,
            }
        }
    }

    /// The error for a server found `unfit` for a lock; the slot it took (`taken`) is let go
    /// first, waking a waiter that this attempt kept out.
    fn refuse(&mut self, unfit: &vetting::Unfit, taken: Option<u32>) -> anyhow::Error {
        if let Some(slot) = taken {
            self.held = Some(self.lock.slot_key(slot));
            let deadline = Instant::now() + self.link.timeout();
            let notice = format!("{}#0", self.identity);
            if let Err(err) = self.release_announcing(None, deadline, &notice, None) {
                report::warn(format_args!(
                    "cannot let go of {} at once ({err:#}); it expires by its TTL",
                    self.lock.key
                ));
            }
            self.held = None;
        }
        unfit.error(self.link.display())
    }

    /// Raises this server's fence counter to `fence` if it is lower (Redlock: the fence
    /// handed out must be on a majority, so that every later majority has it).
    pub fn raise_fence(&mut self, fence: u64, deadline: Instant) -> Result<()> {
        let raise = RaiseFence {
            fence_key: fence_key(&self.lock.key),
            fence,
        };
        self.link
            .call(Some(deadline), |session| session.run(&raise))?;
        Ok(())
    }

    /// Deletes the lock if it is still ours, as `LockBackend::release`, and announces the
    /// release to waiters with `notice`: the same text on every node of one Redlock release
    /// and different for each release, so that a waiter listening on several nodes acts on
    /// each release once. An empty `notice` wakes no one.
    ///
    /// `ending`: how the hold ended, recorded in the lock's history in the same script;
    /// `None`: an attempt letting go of what it took, recorded as `abandoned`.
    pub fn release_announcing(
        &mut self,
        keep_for: Option<Duration>,
        deadline: Instant,
        notice: &str,
        ending: Option<HoldEnd>,
    ) -> Result<Released> {
        let [queue, woken] = queue_keys(&self.lock.key);
        let release = Release {
            slot: self.held_key().clone(),
            queue,
            woken,
            replace_key: replace_key(&self.lock.key),
            done_ids_key: done_ids_key(&self.lock.key),
            semaphore: (self.lock.limit > 1).then(|| {
                let slots = (1..=self.lock.limit).map(|slot| self.lock.slot_key(slot));
                (limit_key(&self.lock.key), slots.collect())
            }),
            identity: self.identity.clone(),
            channels: self.channels.clone(),
            keep_for,
            limit: self.lock.limit,
            notice: notice.to_string(),
            grace: self.lock.ttl,
            record: self.record,
            once: self.once_args(),
            recording: self.record_args(),
            slot_number: self.slot_number,
            ending,
            lost_recorded: self.lost_recorded,
            value: self.value(),
        };
        // "Not now" (a slot being migrated answers TRYAGAIN to a script whose keys are
        // split between two masters, a master failing over): nothing ran, so it is sent
        // again, after a pause that doubles, until the deadline.
        let mut pause = RELEASE_RETRY_MIN;
        let (lock_key, server) = (self.lock.key.clone(), self.link.display().to_string());
        let lock_key = &lock_key;
        // The work this release records (--once) must survive a failover as the lock does:
        // waited for on a replica, as an acquisition is.
        let records_work = self.record;
        let replica_wait = lease::replica_wait(self.lock.ttl, self.link.timeout());
        let released = loop {
            let sent = self.link.call(Some(deadline), |session| {
                let ReleaseReply {
                    released,
                    repaired,
                    foreign,
                    recorded,
                } = session.run(&release)?;
                if records_work {
                    confirm_replicated(
                        session,
                        replica_wait,
                        &format!("the --once record of {lock_key}"),
                        "the work may be done again",
                    );
                }
                warn_recorded(&recorded, lock_key, &server);
                warn_repaired(repaired, lock_key, &server);
                warn_foreign(
                    foreign,
                    lock_key,
                    &server,
                    "the work was not recorded there",
                );
                Ok(released)
            });
            match sent {
                Err(err) if is_try_later(&err) && Instant::now() + pause < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(RELEASE_RETRY_MAX);
                }
                Err(err) if self.link.sent() => match self.look_after_release(deadline) {
                    Looked::Gone => return Ok(self.released_unanswered(&err)),
                    // The connection went silent (or broke) before the release got
                    // there: the failed one is dropped and the look went over a new one,
                    // which answers; sent again there while the lease lasts.
                    Looked::Ours if is_transient(&err) && Instant::now() + pause < deadline => {
                        report::verbose(format_args!(
                            "the release of {lock_key} got no answer ({err:#}) and the key is \
                             still this run's: sending it again on a new connection"
                        ));
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(RELEASE_RETRY_MAX);
                    }
                    Looked::Ours | Looked::Unknown => return Err(err),
                },
                sent => break sent?,
            }
        };
        Ok(released)
    }
}

impl SingleRedis {
    /// Leaves the waiters' queue (`abandon`); with `timed_out` (the time waited), as a
    /// wait that ran out, recorded as `timeout`: returns the consecutive skips then.
    fn leave_queue(&mut self, timed_out: Option<Duration>) -> Option<u64> {
        // A waiter that never listened never joined the queue. One that did is dropped
        // from it anyway once its connection closes (the next wake-up finds nobody on its
        // channel); leaving now passes on a wake-up it may have been sent meanwhile. A
        // takeover asked for (`--replace`) ends here too, listening or not.
        let recording = timed_out.is_some() && self.lock.recording.history > 0;
        if !self.listening && !self.lock.replace && !recording {
            return None;
        }
        let [queue, woken] = queue_keys(&self.lock.key);
        let leave = LeaveQueue {
            queue,
            woken,
            replace_key: replace_key(&self.lock.key),
            token: self.lock.token.clone(),
            identity: self.identity.clone(),
            channels: self.channels.clone(),
            grace: self.lock.ttl,
            recording: self.record_args(),
            timed_out: timed_out.is_some(),
            metadata: self.lock.metadata.clone(),
            waited: timed_out.unwrap_or_default(),
        };
        let (key, server) = (&self.lock.key, self.link.display().to_string());
        let left = self.link.call(None, |session| {
            let left = session.run(&leave)?;
            warn_recorded(&left.recorded, key, &server);
            Ok(left)
        });
        left.ok().and_then(|left| left.skips)
    }

    /// After a release that was sent but failed (its reply lost, a timeout, a script error
    /// after its delete), whether it may have taken effect all the same: the key is read
    /// again, on a new connection. Not to be read by `deadline` (the lease's end at the
    /// latest: after it, a key gone tells nothing): `Unknown`.
    fn look_after_release(&mut self, deadline: Instant) -> Looked {
        let key = self.held_key().clone();
        let value: Result<Option<Vec<u8>>> = self.link.call(Some(deadline), |session| {
            session.query(redis::cmd("GET").arg(&key))
        });
        match value {
            Ok(Some(value)) if value.starts_with(self.identity.as_bytes()) => Looked::Ours,
            Ok(_) => Looked::Gone,
            Err(_) => Looked::Unknown,
        }
    }

    /// A release that got no answer (`err`) with the key found gone or another's: taken as
    /// released, since it was this run's until the release was sent.
    fn released_unanswered(&self, err: &anyhow::Error) -> Released {
        // Most likely the release itself, whose answer was lost. But a lock lost during the
        // run (deleted, flushed, taken over) looks the same from here: say that it cannot
        // be told apart, rather than call the run clean or lost on a guess.
        report::warn(format_args!(
            "the release of {} got no answer ({err:#}) and the key is no longer this run's: \
             the release took effect, or the lock was lost before the command ended; \
             redlock-run cannot tell which",
            self.held_key()
        ));
        Released::Deleted
    }
}

/// What a look after a release that got no answer found (`look_after_release`).
enum Looked {
    /// The key is gone or another's.
    Gone,
    /// The key is still this holder's: the release did not take effect.
    Ours,
    /// The key could not be read in time.
    Unknown,
}

impl LockBackend for SingleRedis {
    fn try_acquire(&mut self, deadline: Option<Instant>) -> Result<Attempt> {
        let waited = self.lock.recording.started.elapsed();
        self.try_acquire_until(deadline, waited)
    }

    fn renew(&mut self, deadline: Instant, takeover_heard: bool) -> Result<Renewal> {
        // A takeover concerns a mutex only (`--replace` needs `--limit 1`). It is looked for
        // at every renewal, but in a Redis Cluster only once one was announced: there a key
        // a script names that does not exist fails it (TRYAGAIN) while the slot migrates.
        let look = self.lock.limit == 1 && (takeover_heard || !self.link.is_cluster());
        let renew = Renew {
            slot: self.held_key().clone(),
            replace_key: look.then(|| replace_key(&self.lock.key)),
            limit_key: (self.lock.limit > 1).then(|| limit_key(&self.lock.key)),
            identity: self.identity.clone(),
            ttl: self.lock.ttl,
            limit: self.lock.limit,
            // Once only; and not in a cluster (see `Renew::recording`).
            recording: (self.lock.recording.history > 0
                && !self.lost_recorded
                && !self.link.is_cluster())
            .then(|| self.record_args()),
            slot_number: self.slot_number,
            value: self.value(),
        };
        let (key, server) = (&self.lock.key, self.link.display().to_string());
        let (Extended(extended, replace_by), sent_at) =
            self.link.call(Some(deadline), |session| {
                let reply = session.run(&renew)?;
                warn_recorded(&reply.recorded, key, &server);
                Ok((reply.extended, session.sent_at.unwrap_or_else(Instant::now)))
            })?;
        if !extended && renew.recording.is_some() {
            self.lost_recorded = true;
        }
        Ok(if extended {
            Renewal::Extended {
                sent_at,
                replace_by,
            }
        } else {
            Renewal::NotOurs
        })
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
}

impl SingleRedis {
    /// This holder's listener for a takeover (`HolderListener`); `None` with `--limit`
    /// above 1, where none can be asked for (`--replace` is refused there).
    pub fn holder_listener(&self) -> Option<HolderListener> {
        if self.lock.limit != 1 {
            return None;
        }
        match HolderListener::new(&self.target, self.link.timeout(), &self.lock) {
            Ok(listener) => Some(listener),
            Err(err) => {
                report::verbose(format_args!(
                    "not listening for a takeover (--replace), renewals will find it: {err:#}"
                ));
                None
            }
        }
    }
}

/// How a holder hears a takeover (`--replace`) asked for on one deployment: a subscription
/// to its own channel, where the replacing run's acquisition announces its request, on a
/// connection of its own (`Link` is its own too: its own view of a cluster's slots, its
/// own master from Sentinel). So it is made, and made again once it breaks, without the
/// holder's backend, which renews and releases meanwhile.
pub struct HolderListener {
    link: Link,
    key: Key,
    channel: Key,
    sharded: bool,
}

impl HolderListener {
    /// Makes nothing yet: `listen` connects.
    pub fn new(
        target: &RedisTarget,
        timeout: Duration,
        lock: &LockRequest,
    ) -> Result<HolderListener> {
        let link = Link::new(target, timeout)?;
        let channels = Channels::of(&lock.key, link.is_cluster());
        Ok(HolderListener {
            channel: channels.wake(&lock.token),
            sharded: channels.sharded,
            key: lock.key.clone(),
            link,
        })
    }

    /// Subscribes (see `TakeoverListener::listen`), giving up at `until`. The channel is
    /// named twice, as the subscription takes two: Redis confirms each, and counts one
    /// subscription.
    pub fn listen_until(&mut self, sink: NoticeSink, until: Instant) -> Result<Subscription> {
        let channels = [self.channel.clone(), self.channel.clone()];
        let subscription = if self.sharded {
            notices::subscribe_sharded(&mut self.link, &self.key, channels, sink, until)
        } else {
            notices::subscribe(&mut self.link, &self.key, channels, sink, until, false)
        };
        subscription.context("cannot listen for a takeover")
    }

    pub fn display(&self) -> &str {
        self.link.display()
    }
}

impl TakeoverListener for HolderListener {
    fn listen(&mut self, sink: NoticeSink) -> Result<Subscription> {
        let until = Instant::now() + self.link.timeout();
        self.listen_until(sink, until)
    }
}

/// Warns that a script found entries in the woken waiters' record of `key` that are not
/// wake-up times (another client wrote them), and took them out (`woken_since` in
/// `scripts/prelude.lua`).
fn warn_repaired(repaired: u32, key: &Key, server: &str) {
    if repaired > 0 {
        report::warn(format_args!(
            "{} on {server} held {repaired} entr{} that {} not a wake-up time redlock-run \
             could have written (another client wrote it); removed, the waiter is woken \
             again",
            queue_keys(key)[1],
            if repaired == 1 { "y" } else { "ies" },
            if repaired == 1 { "was" } else { "were" },
        ));
    }
}

/// Warns that a `--once` record key of `key` (`foreign`: 1 `{K}:done`, 2 `{K}:done:per`,
/// 4 `{K}:done:ids`, added) holds another application's data, which redlock-run leaves
/// alone; `what` says what came of it.
fn warn_foreign(foreign: u32, key: &Key, server: &str, what: &str) {
    let [done, done_per] = done_keys(key);
    for (bit, record) in [(1, done), (2, done_per), (4, done_ids_key(key))] {
        if foreign & bit != 0 {
            report::warn(format_args!(
                "{record} on {server} is not a --once record redlock-run wrote (another \
                 type: another application's data); left alone, {what}"
            ));
        }
    }
}

/// The recording refusals already warned of in this process: each is said once per run,
/// whatever the number of scripts and Redlock nodes that meet it.
static RECORDING_WARNED: AtomicU32 = AtomicU32::new(0);

/// Warns, once per run for each kind, that a script could not record to the lock's history
/// or counters (`record` in `scripts/prelude.lua`): a command refused, named, or a key of
/// another type, named. The lock was not affected.
pub(super) fn warn_recorded(recorded: &Recorded, key: &Key, server: &str) {
    if recorded.flags == 0 {
        return;
    }
    let new = recorded.flags & !RECORDING_WARNED.fetch_or(recorded.flags, Ordering::Relaxed);
    let [history, stats] = record_keys(key);
    let refused = if recorded.refused.is_empty() {
        String::from("a command")
    } else {
        report::escape(&recorded.refused).to_string()
    };
    if new & (Recorded::HISTORY_REFUSED | Recorded::STATS_REFUSED) != 0 {
        let on = match recorded.flags & (Recorded::HISTORY_REFUSED | Recorded::STATS_REFUSED) {
            Recorded::HISTORY_REFUSED => history.to_string(),
            Recorded::STATS_REFUSED => stats.to_string(),
            _ => format!("{history} and {stats}"),
        };
        report::warn(format_args!(
            "{server} refused {refused} on {on} (see docs/security.md for the ACL): this run's \
             history and counters are not recorded there; the lock is not affected"
        ));
    }
    for (bit, name, kind) in [
        (Recorded::HISTORY_WRONG_TYPE, &history, "stream"),
        (Recorded::STATS_WRONG_TYPE, &stats, "hash"),
    ] {
        if new & bit != 0 {
            report::warn(format_args!(
                "{name} on {server} is not a {kind} redlock-run wrote (another type: another \
                 application's data); left alone, nothing recorded there; the lock is not \
                 affected"
            ));
        }
    }
}

/// When a call that may take `timeout` must end: then, or at `deadline` if sooner.
fn budget_end(timeout: Duration, deadline: Option<Instant>) -> Instant {
    let end = Instant::now() + timeout;
    deadline.map_or(end, |deadline| deadline.min(end))
}

/// An acquisition's reply from a server found unfit for a lock (`vetting`): why, and the
/// slot taken, if one was.
#[derive(Debug)]
struct Refused(vetting::Unfit, Option<u32>);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server is unfit for a lock: {:?}", self.0)
    }
}

impl std::error::Error for Refused {}

/// After taking the lock on a master that has replicas (Sentinel, Cluster), waits up to
/// `wait` for one of them to confirm the write. Replication is asynchronous: a failover to a
/// replica that never saw the lock loses it (and the fence number), and a second holder can
/// take it before this one's next renewal finds it gone. Waiting makes that unlikely; it
/// cannot rule it out, and a master without a replica in time is only reported: refusing to
/// run would turn a degraded replica into an outage of every job.
fn confirm_replicated(session: &mut Session<'_>, wait: Duration, what: &str, risk: &str) {
    match session.replicas {
        None => return,
        Some(0) => {
            report::verbose(format_args!(
                "the master has no replica: a failover now would lose {what}"
            ));
            return;
        }
        Some(_) => {}
    }
    // The server must answer before this call's time is up: at most half of what is left.
    let wait = wait.min(session.time_left() / 2);
    let mut command = redis::cmd("WAIT");
    command.arg(1).arg(wait.as_millis().max(1) as u64);
    match session.query::<i64>(&command) {
        Ok(0) => report::warn(format_args!(
            "no replica confirmed {what} within {}; if the master fails over now, {risk}",
            report::duration(wait)
        )),
        Ok(_) => {}
        Err(err) => {
            session.spoil();
            report::warn(format_args!(
                "cannot confirm that a replica has {what}: {err:#}"
            ));
        }
    }
}
