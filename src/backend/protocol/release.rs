//! Letting go on one deployment: the release (compare-and-DEL plus its announcement to
//! waiters), sent again while the server says "not now" or the key is still ours, and a
//! waiter leaving the queue. Not acquiring or renewing (`acquire`, `renew`).

use std::time::{Duration, Instant};

use anyhow::Result;

use super::warnings::{confirm_replicated, warn_foreign, warn_recorded, warn_repaired};
use super::SingleRedis;
use crate::backend::error::{is_transient, is_try_later};
use crate::backend::layout::{done_ids_key, limit_key, queue_keys, replace_key, shared_keys};
use crate::backend::scripts::{LeaveQueue, Release, ReleaseReply, ReleaseShared};
use crate::backend::{HoldEnd, Released};
use crate::{lease, report};

/// Pauses between sends of a release that the server answered "not now".
const RELEASE_RETRY_MIN: Duration = Duration::from_millis(10);
const RELEASE_RETRY_MAX: Duration = Duration::from_millis(250);

impl SingleRedis {
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
        // --shared: this holder's share, by the shared-mode script (same reply).
        let shared = self.lock.shared.then(|| ReleaseShared {
            lock: self.lock.key.clone(),
            shared_keys: shared_keys(&self.lock.key),
            queue: release.queue.clone(),
            woken: release.woken.clone(),
            replace_key: release.replace_key.clone(),
            identity: self.identity.clone(),
            token: self.lock.token.clone(),
            channels: self.channels.clone(),
            keep_for,
            notice: notice.to_string(),
            grace: self.lock.ttl,
            recording: release.recording.clone(),
            event: if ending.is_some() { "released" } else { "" },
            exit_code: ending.and_then(|ending| ending.exit_code),
            value: release.value.clone(),
            once: release.once.clone(),
            record: self.record,
        });
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
                } = match &shared {
                    Some(shared) => session.run(shared)?,
                    None => session.run(&release)?,
                };
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
    pub(super) fn leave_queue(&mut self, timed_out: Option<Duration>) -> Option<u64> {
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
            lock: self.lock.key.clone(),
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
        // A share is its entry in `{K}:shares`, not `K` (the group's value).
        let look = if self.lock.shared {
            let [shares, _, _] = shared_keys(&self.lock.key);
            redis::cmd("HGET").arg(shares).arg(&self.lock.token).clone()
        } else {
            redis::cmd("GET").arg(&key).clone()
        };
        let value: Result<Option<Vec<u8>>> = self
            .link
            .call(Some(deadline), |session| session.query(&look));
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
