//! Waiting for a busy lock: subscribe to release notices, then try again on each notice or
//! when the holder's lease would have run out, until the lock is ours, the deadline passes,
//! or a signal ends the wait. Behind a holder of ours it never polls on a fixed tick: a
//! waiter costs Redis one command per notice, or one per holder lease (two thirds of the
//! holder's TTL while it renews), and starts within a round trip of a release. Two kinds of
//! holder cannot announce their release, and are polled instead, with backoff and jitter so
//! that waiters spread out: a holder that is not redlock-run (another client's `SET NX`
//! lock, another application's key), and any holder when this Redis user may not subscribe
//! (its ACL lacks the channel) or the server has no `SUBSCRIBE` (renamed away).
//!
//! No attempt or subscription of a wait starts after its deadline, and none is given longer
//! than the deadline to answer: a wait paused past its deadline (`SIGSTOP`, a frozen VM)
//! gives up when it resumes, without another try. The one exception is the retry of an
//! attempt whose answer did not come: its request may have taken the lock, and only the
//! retry can tell (it has a whole Redis timeout; see `protocol`), so a wait can end up to
//! one `--redis-timeout` late against a server that stops answering. Whatever the pacing,
//! two last attempts are made: a second before the deadline (half the wait, if that is
//! shorter), so that even a slow Redis has time to answer it, and one at the deadline
//! (50 ms before it), so that a lock freed in the wait's last second is not missed. A wait that ends while Redis cannot be reached says so
//! (`Waited::Unreachable`) instead of calling the lock still held; a step that the deadline
//! itself cut short does not count as Redis failing (a busy lock behind a slow server ends
//! as busy). A subscription that had to be made again is followed by an attempt at once: a
//! release in the gap went unheard.
//!
//! The wait is a `Waiter`, one method per step as the supervisor has one per event:
//! `listen` (subscribe), `attempt` (try to take the lock), `hear` (a notice, a broken
//! subscription, a signal). Its pacing rules above, which decide when the next attempt is
//! due, are `Pacing`: it reads no clock and talks to no Redis, and each rule has a test.
//!
//! It is the run's loop while the lock is busy: on the main thread, it waits on the same
//! `Events` as the supervisor (signals, and release notices that the subscription's reader
//! reports), a signal read before a notice that came with it; an attempt in flight when a
//! signal arrives finishes first, and `run` releases a lock that was taken that way. It
//! prints nothing but `-v` detail, the holder's name (`announce`), its progress (`progress`:
//! a status line redrawn on a terminal, a plain line now and then elsewhere; a redraw is a
//! due time of the loop, with no Redis command), and one warning when Redis is out of reach
//! or refuses the subscription; `run` decides what a result means.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::backend::{
    cannot_subscribe, is_refused_by_acl, is_transient, Attempt, Key, LockBackend, Notice,
    Subscription,
};
use crate::event::{Event, Events};
use crate::holder::Blocker;
use crate::report;

mod announce;
mod pacing;
mod progress;

use announce::Announcer;
use pacing::{Busy, Pacing, NO_NOTICES_POLL};
pub use progress::About;
use progress::Progress;

/// Subscribing again after the subscription broke: at once the first time, then after a
/// pause from `RESUBSCRIBE_MIN` doubling up to `RESUBSCRIBE_MAX`, back to at once when the
/// one that broke had lasted `RESUBSCRIBE_MAX`. Anyone who may publish on the channel can
/// break it (a message too large to be a notice): a flood of those then costs a connection
/// a second, not one a message (and one try, as a subscription made again is followed by
/// one at once). Meanwhile the waiter makes no try, but its last one at the deadline.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub enum Waited {
    /// The lock is ours; the lease started no earlier than `sent_at`.
    Acquired { sent_at: Instant, fence: u64 },
    /// The deadline passed with the lock still busy: `blocker` is what the last attempt
    /// that reached Redis found (the holder, or the fair queue ahead), for the message.
    TimedOut { blocker: Option<Blocker> },
    /// `--once`, `--once-per`: the work was done meanwhile (`record`: see `Attempt::Done`).
    /// Not a skip: no consecutive skips to carry.
    Done { record: Vec<u8> },
    /// The deadline passed while Redis could not be reached (the last attempt failed so).
    Unreachable(anyhow::Error),
    /// A signal arrived; nothing was taken.
    Interrupted { signal: libc::c_int },
    /// `--supersede`: a newer superseding waiter arrived (`newer`: its value); this one has
    /// left the queue.
    Superseded {
        newer: Option<Vec<u8>>,
        /// The consecutive skips, this one included (see `Attempt::Busy::skips`).
        skips: Option<u64>,
    },
}

/// How a wait goes about it.
#[derive(Debug, Clone, Copy)]
pub struct WaitPlan {
    /// Give up then; `None`: never.
    pub deadline: Option<Instant>,
    /// Name the holder on stderr after a second of waiting (a terminal, or `-v`).
    pub announce: bool,
    /// `--redis-timeout`: what a step that Redis failed had to answer in.
    pub redis_timeout: Duration,
    /// `--replace`: each try asks the holder again to stop, so the first ones come often.
    pub takeover: bool,
}

/// How release notices reach the waiter.
enum Listening {
    /// Not subscribed (yet, or any more).
    Not,
    /// Held for as long as it should last: dropping it ends the subscription. `since`: when
    /// it was made.
    Subscribed { _kept: Subscription, since: Instant },
    /// The ACL refuses the subscription, or the server has none: poll.
    Polling,
}

/// Waits until the lock is ours, the plan's deadline passes or a signal arrives on
/// `events`. The caller has found the lock busy once, because of `blocker`, or (`None`)
/// could not reach Redis. `about`: what the progress shown meanwhile needs besides.
pub fn wait_for_lock(
    backend: &mut dyn LockBackend,
    key: &Key,
    plan: WaitPlan,
    about: About<'_>,
    blocker: Option<Blocker>,
    events: &Events,
) -> Result<Waited> {
    let mut waiter = Waiter::new(backend, key, plan, about, blocker, events);
    loop {
        if let Some(waited) = waiter.over(Instant::now()) {
            return Ok(waited);
        }
        if matches!(waiter.listening, Listening::Not) && waiter.may_listen(Instant::now()) {
            waiter.listen()?;
        }
        // Subscribed first, then tried: a release between the two cannot be missed.
        let listens = !matches!(waiter.listening, Listening::Not);
        if waiter.pacing.try_now(Instant::now(), listens) {
            if let Some(waited) = waiter.attempt()? {
                return Ok(waited);
            }
        }
        let now = Instant::now();
        let wake_at = waiter.wake_at(now);
        match events.recv_timeout(wake_at.saturating_duration_since(now)) {
            Ok(event) => {
                if let Some(waited) = waiter.hear(event) {
                    return Ok(waited);
                }
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
        }
    }
}

/// A wait between its steps: listen (subscribe to release notices), attempt (try to take
/// the lock), hear (an event: a notice, a broken subscription, a signal). When to attempt
/// is the `Pacing`'s to say.
struct Waiter<'a> {
    backend: &'a mut dyn LockBackend,
    key: &'a Key,
    pacing: Pacing,
    announcer: Announcer,
    progress: Progress<'a>,
    listening: Listening,
    /// Why the last attempt (or subscription) failed, if it did.
    last_failure: Option<anyhow::Error>,
    /// Release notices are coalesced: while one waits to be acted on, later ones only
    /// replace the release it names (the latest is the one a try may still find holding).
    /// A burst of messages on the lock's channel (a buggy or hostile client) then costs one
    /// try and no memory, not one try and one queued event each; a notice that comes after
    /// the waiter took the pending one sends a new one, so none goes unanswered.
    pending: Arc<Mutex<Option<String>>>,
    events: &'a Events,
    /// After a broken subscription: not subscribed again before then, and the pause
    /// before the next time (see `RESUBSCRIBE_MIN`).
    resubscribe_at: Option<Instant>,
    resubscribe_pause: Duration,
}

impl<'a> Waiter<'a> {
    fn new(
        backend: &'a mut dyn LockBackend,
        key: &'a Key,
        plan: WaitPlan,
        about: About<'a>,
        blocker: Option<Blocker>,
        events: &'a Events,
    ) -> Waiter<'a> {
        let started = Instant::now();
        let progress = Progress::new(about, key, started, plan.deadline, plan.redis_timeout);
        Waiter {
            backend,
            key,
            pacing: Pacing::new(plan, started),
            // On a terminal that redraws, the status line says it, and this line replaces
            // it at the end.
            announcer: Announcer::new(plan.announce && !progress.redraws(), started, blocker),
            progress,
            listening: Listening::Not,
            last_failure: None,
            pending: Arc::default(),
            events,
            resubscribe_at: None,
            resubscribe_pause: Duration::ZERO,
        }
    }

    /// Whether subscribing (again) is due.
    fn may_listen(&self, now: Instant) -> bool {
        self.resubscribe_at.is_none_or(|at| now >= at)
    }

    /// The subscription made at `since` broke at `now`: when to subscribe again.
    fn broke(&mut self, since: Option<Instant>, now: Instant) {
        if since.is_some_and(|since| now.saturating_duration_since(since) >= RESUBSCRIBE_MAX) {
            self.resubscribe_pause = Duration::ZERO;
        }
        self.resubscribe_at = Some(now + self.resubscribe_pause);
        self.resubscribe_pause =
            (self.resubscribe_pause * 2).clamp(RESUBSCRIBE_MIN, RESUBSCRIBE_MAX);
    }

    /// Past the deadline, nothing more is tried, even when this process was paused through
    /// it with a release notice waiting: the wait is over.
    fn over(&mut self, now: Instant) -> Option<Waited> {
        self.pacing
            .is_over(now)
            .then(|| match self.last_failure.take() {
                Some(err) => Waited::Unreachable(err),
                None => Waited::TimedOut {
                    blocker: self.announcer.blocker.take(),
                },
            })
    }

    /// Subscribes to release notices; without the right to, or a server without
    /// `SUBSCRIBE`, polls instead.
    fn listen(&mut self) -> Result<()> {
        let notices = self.events.reporter();
        let latest = Arc::clone(&self.pending);
        let forward = Box::new(move |notice| match notice {
            Notice::Released { by } => {
                let mut latest = latest.lock().unwrap_or_else(PoisonError::into_inner);
                latest.replace(by).is_some()
                    || notices
                        .send(Event::Notice(Notice::Released { by: String::new() }))
                        .is_ok()
            }
            notice => notices.send(Event::Notice(notice)).is_ok(),
        });
        let step = Instant::now();
        match self.backend.subscribe(forward, self.pacing.deadline) {
            Ok(mut subscription) => {
                // No thread reads it: the loop polls its socket (see `event::Events`).
                if let Some(source) = subscription.take_source() {
                    self.events.listen_to(source);
                }
                self.listening = Listening::Subscribed {
                    _kept: subscription,
                    since: Instant::now(),
                };
                self.last_failure = None;
                self.pacing.subscribed(Instant::now());
            }
            // Or the server has no SUBSCRIBE: as for a foreign holder, looking is the only
            // way to learn of a release.
            Err(err) if is_refused_by_acl(&err) || cannot_subscribe(&err) => {
                report::warn(format_args!(
                    "{err:#}; without release notices, looking every {} instead",
                    report::duration(NO_NOTICES_POLL)
                ));
                self.listening = Listening::Polling;
                self.pacing.without_notices();
            }
            Err(err) if is_transient(&err) => self.unreachable(err, step),
            Err(err) => return Err(err),
        }
        Ok(())
    }

    /// Tries to take the lock: the wait's end, or the next try scheduled.
    fn attempt(&mut self) -> Result<Option<Waited>> {
        let step = Instant::now();
        let busy = match self.backend.try_acquire(self.pacing.deadline) {
            // Sent at or after the deadline: this process was stopped (SIGSTOP, a frozen
            // VM) between the deadline's check and the send. The wait was over before the
            // try left, so the lock is given back at once (best effort: it expires by its
            // TTL otherwise) and the wait ends as timed out, as a wait paused past its
            // deadline always does.
            Ok(Attempt::Acquired { sent_at, .. })
                if self
                    .pacing
                    .deadline
                    .is_some_and(|deadline| sent_at >= deadline) =>
            {
                report::verbose(format_args!(
                    "the lock was taken by a try sent after the wait's deadline (this process \
                     was paused); giving it back"
                ));
                let _ = self
                    .backend
                    .release(None, Instant::now() + self.pacing.redis_timeout);
                return Ok(Some(Waited::TimedOut {
                    blocker: self.announcer.blocker.take(),
                }));
            }
            Ok(Attempt::Acquired { sent_at, fence }) => {
                return Ok(Some(Waited::Acquired { sent_at, fence }))
            }
            Ok(Attempt::Superseded { newer, skips }) => {
                return Ok(Some(Waited::Superseded { newer, skips }))
            }
            Ok(Attempt::Done { record, .. }) => return Ok(Some(Waited::Done { record })),
            Ok(Attempt::Busy {
                holder_ttl,
                holder,
                ahead,
                split,
                ..
            }) => (holder_ttl, Blocker { holder, ahead }, split),
            Err(err) if is_transient(&err) => {
                self.unreachable(err, step);
                return Ok(None);
            }
            Err(err) => return Err(err),
        };
        let (holder_ttl, blocker, split) = busy;
        self.last_failure = None;
        let now = Instant::now();
        let delay = self.pacing.busy(
            now,
            Busy {
                holder_ttl,
                holder: blocker.holder.as_deref(),
                ahead: blocker.ahead,
                split,
            },
        );
        self.announcer.blocked_by(blocker);
        // Until woken or the next try, only the subscription's connection stays.
        if matches!(self.listening, Listening::Subscribed { .. }) && !self.pacing.pushing(now) {
            self.backend.rest();
        }
        report::verbose(format_args!(
            "still busy; next try in {} unless released sooner",
            report::duration(delay)
        ));
        Ok(None)
    }

    /// Acts on an event from the loop's channel; `Some` ends the wait.
    fn hear(&mut self, event: Event) -> Option<Waited> {
        match event {
            Event::Notice(Notice::Released { by }) => {
                // From a reader thread, the release is in `pending`; read by the loop
                // itself, in the event.
                let by = self
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                    .unwrap_or(by);
                report::verbose(format_args!("released by its holder; trying now"));
                self.pacing.released(Instant::now(), &by);
            }
            Event::Notice(Notice::Broken(err)) => {
                let since = match self.listening {
                    Listening::Subscribed { since, .. } => Some(since),
                    _ => None,
                };
                let now = Instant::now();
                self.broke(since, now);
                report::verbose(format_args!(
                    "{err:#}; subscribing again in {}",
                    report::duration(self.resubscribe_at.map_or(Duration::ZERO, |at| at - now))
                ));
                self.events.stop_listening();
                self.listening = Listening::Not;
            }
            Event::Signal { signal, .. } => return Some(Waited::Interrupted { signal }),
            _ => {}
        }
        None
    }

    /// When the loop must wake up next, having named the holder and shown the progress if
    /// that is due.
    fn wake_at(&mut self, now: Instant) -> Instant {
        self.announcer.speak_if_due(self.key, now);
        self.progress.tick(self.announcer.blocker.as_ref(), now);
        let mut wake_at = self.pacing.wake_at();
        if let (Listening::Not, Some(at)) = (&self.listening, self.resubscribe_at) {
            wake_at = wake_at.min(at.max(now));
        }
        [self.announcer.due_at(), self.progress.due_at()]
            .into_iter()
            .flatten()
            .fold(wake_at, Instant::min)
    }

    /// A step could not reach Redis: tried again after a backoff.
    fn unreachable(&mut self, err: anyhow::Error, step: Instant) {
        let failure = self.pacing.unreachable(step, Instant::now());
        report_unreachable(&err, failure.in_a_row);
        if failure.counts {
            self.last_failure = Some(err);
        }
    }
}

impl Drop for Waiter<'_> {
    /// The wait is over: a subscription the loop polled ends with it, and the status line.
    fn drop(&mut self) {
        self.progress.finish();
        self.events.stop_listening();
    }
}

fn report_unreachable(err: &anyhow::Error, failures: u32) {
    if failures == 1 {
        report::warn(format_args!("{err:#}; still waiting, retrying"));
    } else {
        report::verbose(format_args!("{err:#}; retrying"));
    }
}
