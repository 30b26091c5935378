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
//! signal arrives finishes first, and `run.rs` releases a lock that was taken that way. It
//! prints nothing but `-v` detail, the holder's name on a terminal, and one warning when
//! Redis is out of reach or refuses the subscription; `run.rs` decides what a result means.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::backend::{
    cannot_subscribe, is_refused_by_acl, is_transient, Attempt, Holder, Key, LockBackend, Notice,
    Subscription,
};
use crate::event::{Event, Events};
use crate::holder::Blocker;
use crate::report;

/// Re-check a key that has no TTL (not ours to judge: another tool's lock or another
/// application's data) at least this often.
const NO_TTL_RECHECK: Duration = Duration::from_secs(10);
/// Back-off bounds while Redis cannot be reached during a wait.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// Polling a holder that will never announce its release: from this, doubling, up to the
/// next; each with up to a quarter more at random.
const FOREIGN_POLL_MIN: Duration = Duration::from_millis(50);
const FOREIGN_POLL_MAX: Duration = Duration::from_secs(1);
/// Polling when the Redis user may not subscribe: a release is seen this late at most.
const NO_NOTICES_POLL: Duration = Duration::from_millis(250);
/// Longest random pause before retrying after contenders split the Redlock nodes: long
/// next to one round over the nodes, short next to a job.
const SPLIT_PAUSE_MAX: Duration = Duration::from_millis(50);
/// Trying again while a release is still on its way to the other Redlock nodes: from this,
/// doubling, up to 32 times it, at most `RELEASING_TRIES` times (a release that did not
/// reach a majority leaves the lock to expire, and waiting for that is the usual schedule).
const RELEASING_RETRY: Duration = Duration::from_millis(5);
const RELEASING_TRIES: u32 = 10;
/// How long a wait lasts before the holder is named.
const ANNOUNCE_AFTER: Duration = Duration::from_secs(1);
/// With `--replace`, how often to try (each try asks the holder again) during the first
/// `TAKEOVER_PUSH` of the wait. A holder listens for a takeover only once its command has run
/// 200 ms (`renew.rs`): one asked for before then is heard at the next try, and so within
/// the second promised. After that the holder listens, or never will (then its renewals
/// find the request), and the usual pace resumes.
const TAKEOVER_RETRY: Duration = Duration::from_millis(300);
/// Subscribing again after the subscription broke: at once the first time, then after a
/// pause from `RESUBSCRIBE_MIN` doubling up to `RESUBSCRIBE_MAX`, back to at once when the
/// one that broke had lasted `RESUBSCRIBE_MAX`. Anyone who may publish on the channel can
/// break it (a message too large to be a notice): a flood of those then costs a connection
/// a second, not one a message (and one try, as a subscription made again is followed by
/// one at once). Meanwhile the waiter makes no try, but its last one at the deadline.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(1);
const TAKEOVER_PUSH: Duration = Duration::from_millis(1500);
/// How close to the wait's deadline a failing step counts as cut short by it: the deadline
/// is checked by the clock after the step returns, a little late.
const DEADLINE_SLACK: Duration = Duration::from_millis(5);

/// How long before the wait's deadline its early last attempt is made, at most (half the
/// wait at most): time for even a slow Redis to answer it before the deadline.
const LAST_TRY_LEAD: Duration = Duration::from_secs(1);
/// How long before the deadline the wait's final attempt is made, at most (a quarter of the
/// wait at most): a loopback or LAN round trip's time and then some. Whatever the pacing
/// (a foreign holder polled with gaps of a second, a holder's lease end far off), a wait
/// ends with an attempt at its deadline: a lock freed in its last second is not missed.
const FINAL_TRY_LEAD: Duration = Duration::from_millis(50);
/// A waiter that names the holder (a terminal, `-v`) looks at least this often, so that it
/// names a new holder even when no release wakes it: a release wakes only the first waiter
/// of the queue. One script per 5 s for such a waiter; batch waiters do not pay it.
const ANNOUNCE_RECHECK: Duration = Duration::from_secs(5);

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
/// could not reach Redis.
pub fn wait_for_lock(
    backend: &mut dyn LockBackend,
    key: &Key,
    plan: WaitPlan,
    blocker: Option<Blocker>,
    events: &Events,
) -> Result<Waited> {
    let mut waiter = Waiter::new(backend, key, plan, blocker, events);
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
        blocker: Option<Blocker>,
        events: &'a Events,
    ) -> Waiter<'a> {
        let started = Instant::now();
        Waiter {
            backend,
            key,
            pacing: Pacing::new(plan, started),
            announcer: Announcer::new(plan.announce, started, blocker),
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

    /// When the loop must wake up next, having named the holder if that is due.
    fn wake_at(&mut self, now: Instant) -> Instant {
        self.announcer.speak_if_due(self.key, now);
        let mut wake_at = self.pacing.wake_at();
        if let (Listening::Not, Some(at)) = (&self.listening, self.resubscribe_at) {
            wake_at = wake_at.min(at.max(now));
        }
        self.announcer
            .due_at()
            .map_or(wake_at, |due| wake_at.min(due))
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
    /// The wait is over: a subscription the loop polled ends with it.
    fn drop(&mut self) {
        self.events.stop_listening();
    }
}

/// What a try that found the lock busy learnt of its holder.
#[derive(Debug, Clone, Copy)]
struct Busy<'a> {
    /// How long the holder's key has left; `None`: no TTL.
    holder_ttl: Option<Duration>,
    /// One holder's value, when a slot is held by a string value.
    holder: Option<&'a [u8]>,
    /// With `--fair`: waiters queued before this one.
    ahead: u32,
    /// Redlock: contenders split the nodes between them.
    split: bool,
}

/// A failure to reach Redis, as the pacing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failure {
    /// How many steps in a row have failed so.
    in_a_row: u32,
    /// Whether it says anything of Redis (see `Pacing::unreachable`).
    counts: bool,
}

/// The pacing rules of a wait (see the module's documentation): when the next try is due,
/// and when to wake up. It reads no clock and talks to no Redis: each step passes the time
/// it happened at, so every rule is tested without either. (The jitter is random.)
#[derive(Debug)]
struct Pacing {
    started: Instant,
    /// Give up then; `None`: never.
    deadline: Option<Instant>,
    redis_timeout: Duration,
    takeover: bool,
    /// The holder is named (a terminal, `-v`): looked at every `ANNOUNCE_RECHECK` at least.
    announces: bool,
    /// The next try, unless a release notice brings it forward.
    next_try: Instant,
    /// A release notice brings the next try forward, but not before this.
    not_before: Instant,
    /// The tries made near the deadline whatever the schedule, in time order (a second
    /// before it, and at it: `LAST_TRY_LEAD`, `FINAL_TRY_LEAD`); each is taken once.
    last_tries: [Option<Instant>; 2],
    subscribed_before: bool,
    /// No release notices come (refused by the ACL, or no `SUBSCRIBE`): looking instead.
    polling: bool,
    /// Steps in a row that could not reach Redis.
    failures: u32,
    /// Split Redlock attempts in a row (see `split_pause`), polls of a silent holder.
    splits: u32,
    polls: u32,
    /// The holder whose release notice came last (its identity), and how often a try has
    /// found it still holding since: on a Redlock node that has not released yet.
    releasing: Option<String>,
    releasing_tries: u32,
}

impl Pacing {
    fn new(plan: WaitPlan, started: Instant) -> Pacing {
        Pacing {
            started,
            deadline: plan.deadline,
            redis_timeout: plan.redis_timeout,
            takeover: plan.takeover,
            announces: plan.announce,
            next_try: started,
            not_before: started,
            last_tries: plan.deadline.map_or([None, None], |deadline| {
                let wait = deadline.saturating_duration_since(started);
                [LAST_TRY_LEAD.min(wait / 2), FINAL_TRY_LEAD.min(wait / 4)]
                    .map(|lead| Some(deadline - lead))
            }),
            subscribed_before: false,
            polling: false,
            failures: 0,
            splits: 0,
            polls: 0,
            releasing: None,
            releasing_tries: 0,
        }
    }

    /// Whether the deadline has passed: then nothing more is tried.
    fn is_over(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|deadline| now >= deadline)
    }

    /// Whether to try now: once listening (subscribed, or polling) and the next try is
    /// due; and near the deadline whatever the schedule (each of `last_tries` once: those
    /// whose time has come are all taken by this one try).
    fn try_now(&mut self, now: Instant, listens: bool) -> bool {
        let mut last_try = false;
        for at in &mut self.last_tries {
            if at.is_some_and(|at| now >= at) {
                *at = None;
                last_try = true;
            }
        }
        (listens && now >= self.next_try) || last_try
    }

    /// A subscription is active. One made again (the last one broke) is followed by a try
    /// at once: a release in the gap went unheard.
    fn subscribed(&mut self, now: Instant) {
        if self.subscribed_before {
            self.next_try = now;
        }
        self.subscribed_before = true;
    }

    /// No release notices will come: a busy lock is looked at every `NO_NOTICES_POLL`.
    fn without_notices(&mut self) {
        self.polling = true;
    }

    /// A step begun at `step` could not reach Redis: the next try after a growing backoff.
    /// It counts as Redis failing only if it had Redis's whole timeout: one that the
    /// deadline itself cut short says nothing of Redis, and the wait ends on what Redis
    /// last did answer (a busy lock behind a slow server is 75, not "unreachable").
    fn unreachable(&mut self, step: Instant, now: Instant) -> Failure {
        self.failures += 1;
        self.next_try = now + backoff(self.failures);
        let cut_short = self
            .deadline
            .is_some_and(|deadline| now + DEADLINE_SLACK >= deadline)
            && now.saturating_duration_since(step) < self.redis_timeout;
        Failure {
            in_a_row: self.failures,
            counts: !cut_short,
        }
    }

    /// A try found the lock busy: schedules the next one, and returns how far off it is.
    fn busy(&mut self, now: Instant, busy: Busy) -> Duration {
        self.failures = 0;
        let silent = holder_cannot_announce(busy.holder, busy.ahead);
        let still_releasing = self.releasing.as_deref().is_some_and(|identity| {
            busy.holder
                .is_some_and(|value| value.starts_with(identity.as_bytes()))
        });
        self.splits = if busy.split { self.splits + 1 } else { 0 };
        self.polls = if silent { self.polls + 1 } else { 0 };
        let mut delay = retry_delay(busy.holder_ttl);
        if busy.split {
            delay = delay.min(split_pause(self.splits));
        }
        if silent {
            delay = delay.min(foreign_poll(self.polls));
        }
        match releasing_retry(self.releasing_tries) {
            Some(soon) if still_releasing => {
                self.releasing_tries += 1;
                delay = delay.min(soon);
            }
            _ => self.releasing = None,
        }
        if self.polling {
            delay = delay.min(NO_NOTICES_POLL + jitter(NO_NOTICES_POLL / 5));
        }
        if self.announces {
            delay = delay.min(ANNOUNCE_RECHECK);
        }
        if self.pushing(now) {
            delay = delay.min(TAKEOVER_RETRY);
        }
        self.next_try = now + delay;
        // The other contenders' releases are about to come: they must not send everyone
        // back in at the same moment.
        self.not_before = if busy.split { self.next_try } else { now };
        delay
    }

    /// `--replace`, early in the wait: tries come often, each asking the holder again.
    fn pushing(&self, now: Instant) -> bool {
        self.takeover && now.saturating_duration_since(self.started) < TAKEOVER_PUSH
    }

    /// A release notice came: try now (or once a split's pause is over). `by` is the
    /// holder's identity, then `#` and a release number: a try that finds that holder
    /// still there is soon repeated (`releasing_retry`).
    fn released(&mut self, now: Instant, by: &str) {
        self.releasing = by
            .rsplit_once('#')
            .map(|(identity, _)| identity.to_string());
        self.releasing_tries = 0;
        self.next_try = now.max(self.not_before);
    }

    /// When the wait must wake up: the next try, the last try, or the deadline.
    fn wake_at(&self) -> Instant {
        let mut wake_at = self
            .deadline
            .map_or(self.next_try, |deadline| self.next_try.min(deadline));
        if let Some(at) = self.last_tries.iter().flatten().min() {
            wake_at = wake_at.min(*at);
        }
        wake_at
    }
}

/// Whether the holder that refused us will never announce its release: a value that
/// redlock-run did not write (another client's lock), or a key that is not a string
/// (another application's data). A fair queue ahead of us is ours, and announces.
fn holder_cannot_announce(holder: Option<&[u8]>, ahead: u32) -> bool {
    match holder {
        Some(value) => Holder::parse(value).is_none(),
        None => ahead == 0,
    }
}

/// Names the holder on stderr once a wait has lasted a second, and again each time the
/// holder changes; never in a loop.
struct Announcer {
    enabled: bool,
    due: Instant,
    /// What the last attempt that reached Redis found; `None` before one did.
    blocker: Option<Blocker>,
    /// Who was last named, so a renewal (same holder) says nothing new.
    named: Option<(Option<String>, bool)>,
}

impl Announcer {
    fn new(enabled: bool, started: Instant, blocker: Option<Blocker>) -> Announcer {
        Announcer {
            enabled,
            due: started + ANNOUNCE_AFTER,
            blocker,
            named: None,
        }
    }

    fn blocked_by(&mut self, blocker: Blocker) {
        self.blocker = Some(blocker);
    }

    /// When it next needs to wake up to speak, if ever.
    fn due_at(&self) -> Option<Instant> {
        (self.enabled && self.named.is_none()).then_some(self.due)
    }

    fn speak_if_due(&mut self, key: &Key, now: Instant) {
        let Some(blocker) = self
            .blocker
            .as_ref()
            .filter(|_| self.enabled && now >= self.due)
        else {
            return;
        };
        let who = blocker.identity();
        if self.named.as_ref() == Some(&who) {
            return;
        }
        report::waiting(format_args!("waiting for {key}: {}", blocker.phrase()));
        self.named = Some(who);
    }
}

/// When to try again if no release notice comes: just after the holder's lease would end if
/// it stopped renewing, plus a little jitter so that many waiters do not retry in lockstep.
pub fn retry_delay(holder_ttl: Option<Duration>) -> Duration {
    let base = holder_ttl.unwrap_or(NO_TTL_RECHECK);
    let jitter_cap = (base / 10).clamp(Duration::from_millis(1), Duration::from_millis(250));
    base + Duration::from_millis(1) + jitter(jitter_cap)
}

/// The pause before the next try when the holder whose release was just announced still
/// holds (its release has not reached every Redlock node yet), after `tries` such tries;
/// `None` once it is time to stop trying so soon.
fn releasing_retry(tries: u32) -> Option<Duration> {
    (tries < RELEASING_TRIES).then(|| RELEASING_RETRY * (1 << tries.min(5)))
}

/// The pause before the `polls`-th look at a holder that will not announce its release:
/// doubling from `FOREIGN_POLL_MIN` to `FOREIGN_POLL_MAX`, with up to a quarter more at
/// random so that waiters spread out.
fn foreign_poll(polls: u32) -> Duration {
    let base = FOREIGN_POLL_MIN
        .saturating_mul(1 << polls.saturating_sub(1).min(10))
        .min(FOREIGN_POLL_MAX);
    base + jitter(base / 4)
}

/// After the `splits`-th split Redlock attempt in a row: a random pause, so that contenders
/// retry at different times, doubling with each split so that repeated splits (or a holder
/// that only looks split because a node of its is down) cost few requests.
fn split_pause(splits: u32) -> Duration {
    let cap = SPLIT_PAUSE_MAX.saturating_mul(1 << splits.saturating_sub(1).min(8));
    Duration::from_millis(1) + jitter(cap)
}

fn backoff(failures: u32) -> Duration {
    let doubled = RECONNECT_MIN.saturating_mul(1 << failures.min(10));
    doubled.min(RECONNECT_MAX) + jitter(RECONNECT_MIN)
}

fn report_unreachable(err: &anyhow::Error, failures: u32) {
    if failures == 1 {
        report::warn(format_args!("{err:#}; still waiting, retrying"));
    } else {
        report::verbose(format_args!("{err:#}; retrying"));
    }
}

/// A random duration below `cap`.
fn jitter(cap: Duration) -> Duration {
    let random = u128::from_ne_bytes(crate::random::bytes16()) as u64;
    let cap_ns = cap.as_nanos().max(1) as u64;
    Duration::from_nanos(random % cap_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_follows_the_holders_ttl() {
        for _ in 0..100 {
            let delay = retry_delay(Some(Duration::from_secs(20)));
            assert!(delay > Duration::from_secs(20));
            assert!(delay <= Duration::from_millis(20_251));
        }
    }

    #[test]
    fn keys_without_ttl_are_rechecked_rarely() {
        assert!(retry_delay(None) >= NO_TTL_RECHECK);
    }

    #[test]
    fn split_pauses_are_random_and_grow() {
        assert!((0..50).all(|_| split_pause(1) <= SPLIT_PAUSE_MAX + Duration::from_millis(1)));
        let first: Vec<Duration> = (0..50).map(|_| split_pause(1)).collect();
        assert!(first.iter().any(|pause| *pause != first[0]), "not random");
        assert!(split_pause(30) <= SPLIT_PAUSE_MAX * 256 + Duration::from_millis(1));
    }

    #[test]
    fn a_release_on_its_way_is_retried_soon_then_left() {
        assert_eq!(releasing_retry(0), Some(RELEASING_RETRY));
        assert_eq!(releasing_retry(5), Some(RELEASING_RETRY * 32));
        assert_eq!(releasing_retry(9), Some(RELEASING_RETRY * 32));
        assert_eq!(releasing_retry(RELEASING_TRIES), None);
    }

    #[test]
    fn foreign_holders_are_polled_with_backoff() {
        assert!(foreign_poll(1) < FOREIGN_POLL_MIN * 2);
        assert!(foreign_poll(3) >= FOREIGN_POLL_MIN * 4);
        assert!(foreign_poll(40) <= FOREIGN_POLL_MAX + FOREIGN_POLL_MAX / 4);
        assert!(holder_cannot_announce(Some(b"another client's token"), 0));
        assert!(
            holder_cannot_announce(None, 0),
            "not a string: another application's"
        );
        assert!(!holder_cannot_announce(None, 2), "a fair queue");
        assert!(!holder_cannot_announce(
            Some(br#"{"token":"t","fence":1}"#),
            0
        ));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!(backoff(1) < backoff(4));
        assert!(backoff(30) <= RECONNECT_MAX + RECONNECT_MIN);
    }
    const MS: Duration = Duration::from_millis(1);
    /// A value written by redlock-run (one that announces its release), and its identity
    /// as a release notice names it.
    const OURS: &[u8] = br#"{"token":"t","fence":1}"#;
    const OURS_RELEASED: &str = r##"{"token":"t"#7"##;

    fn plan(wait: Option<Duration>, takeover: bool, started: Instant) -> WaitPlan {
        WaitPlan {
            deadline: wait.map(|wait| started + wait),
            announce: false,
            redis_timeout: Duration::from_secs(2),
            takeover,
        }
    }

    fn busy(holder: Option<&[u8]>, holder_ttl: Option<Duration>) -> Busy<'_> {
        Busy {
            holder_ttl,
            holder,
            ahead: 0,
            split: false,
        }
    }

    #[test]
    fn the_first_try_is_due_at_once_but_only_once_listening() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(None, false, t0), t0);
        assert!(!pacing.try_now(t0, false), "not before the subscription");
        assert!(pacing.try_now(t0, true));
    }

    #[test]
    fn behind_a_holder_of_ours_the_next_try_is_at_its_lease_end_or_its_notice() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(None, false, t0), t0);
        pacing.subscribed(t0);
        let delay = pacing.busy(t0, busy(Some(OURS), Some(Duration::from_secs(20))));
        assert!(delay > Duration::from_secs(20) && delay <= Duration::from_millis(20_251));
        assert_eq!(pacing.wake_at(), t0 + delay, "no tick before it");
        assert!(!pacing.try_now(t0 + Duration::from_secs(19), true));
        let notice = t0 + Duration::from_secs(3);
        pacing.released(notice, "");
        assert_eq!(pacing.wake_at(), notice);
        assert!(
            pacing.try_now(notice, true),
            "a notice brings the try forward"
        );
    }

    #[test]
    fn a_key_without_ttl_is_rechecked_rarely() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(None, false, t0), t0);
        assert!(pacing.busy(t0, busy(Some(OURS), None)) >= NO_TTL_RECHECK);
    }

    #[test]
    fn a_holder_that_cannot_announce_is_polled_with_backoff() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(None, false, t0), t0);
        let ttl = Some(Duration::from_secs(60));
        let delays: Vec<Duration> = (0..12)
            .map(|_| pacing.busy(t0, busy(Some(b"another client's token"), ttl)))
            .collect();
        assert!(delays[0] >= FOREIGN_POLL_MIN && delays[0] < FOREIGN_POLL_MIN * 2);
        assert!(delays[2] >= FOREIGN_POLL_MIN * 4, "doubling");
        assert!(
            delays[11] <= FOREIGN_POLL_MAX + FOREIGN_POLL_MAX / 4,
            "capped"
        );
        // Another application's key (not a string) is polled too; a holder of ours resets
        // the backoff and is not polled.
        assert!(pacing.busy(t0, busy(None, ttl)) <= FOREIGN_POLL_MAX + FOREIGN_POLL_MAX / 4);
        assert!(pacing.busy(t0, busy(Some(OURS), ttl)) > Duration::from_secs(60));
        assert!(pacing.busy(t0, busy(None, ttl)) < FOREIGN_POLL_MIN * 2);
    }

    #[test]
    fn without_notices_a_busy_lock_is_looked_at_often() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(None, false, t0), t0);
        pacing.without_notices();
        let delay = pacing.busy(t0, busy(Some(OURS), Some(Duration::from_secs(60))));
        assert!(delay >= NO_NOTICES_POLL && delay <= NO_NOTICES_POLL + NO_NOTICES_POLL / 5);
        assert!(
            pacing.try_now(t0 + delay, true),
            "polling counts as listening"
        );
    }

    #[test]
    fn nothing_is_tried_past_the_deadline() {
        let t0 = Instant::now();
        let pacing = Pacing::new(plan(Some(Duration::from_secs(10)), false, t0), t0);
        assert!(!pacing.is_over(t0 + Duration::from_millis(9_999)));
        assert!(pacing.is_over(t0 + Duration::from_secs(10)));
        assert!(
            pacing.is_over(t0 + Duration::from_secs(3600)),
            "paused through it"
        );
        assert!(!Pacing::new(plan(None, false, t0), t0).is_over(t0 + Duration::from_secs(3600)));
    }

    #[test]
    fn the_last_try_is_a_second_before_the_deadline_or_half_the_wait() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(Some(Duration::from_secs(10)), false, t0), t0);
        pacing.busy(t0, busy(Some(OURS), Some(Duration::from_secs(60))));
        let last = t0 + Duration::from_secs(9);
        assert_eq!(pacing.wake_at(), last, "before the holder's lease end");
        assert!(!pacing.try_now(last - MS, true));
        assert!(
            pacing.try_now(last, false),
            "whatever the schedule, even unsubscribed"
        );
        assert!(!pacing.try_now(last + MS, true), "once");
        assert_eq!(
            pacing.wake_at(),
            t0 + Duration::from_secs(10) - FINAL_TRY_LEAD,
            "then the deadline's try"
        );

        let short = Pacing::new(plan(Some(Duration::from_millis(600)), false, t0), t0);
        assert_eq!(short.wake_at(), t0, "the first try is due at once");
        assert_eq!(
            short.last_tries,
            [
                Some(t0 + Duration::from_millis(300)),
                Some(t0 + Duration::from_millis(550))
            ]
        );
    }

    #[test]
    fn a_waiter_that_names_the_holder_looks_again_every_few_seconds() {
        let t0 = Instant::now();
        let ttl = Some(Duration::from_secs(90));
        let mut announcing = Pacing::new(
            WaitPlan {
                announce: true,
                ..plan(None, false, t0)
            },
            t0,
        );
        announcing.subscribed(t0);
        assert_eq!(
            announcing.busy(t0, busy(Some(OURS), ttl)),
            ANNOUNCE_RECHECK,
            "a holder of ours with a long lease"
        );
        let mut silent = Pacing::new(plan(None, false, t0), t0);
        silent.subscribed(t0);
        assert!(
            silent.busy(t0, busy(Some(OURS), ttl)) > ANNOUNCE_RECHECK,
            "a batch waiter keeps the usual pace"
        );
    }

    #[test]
    fn a_wait_ends_with_a_try_at_its_deadline_whatever_the_pacing() {
        // Behind another client's lock, polled with growing gaps: after the early last try
        // (a second before the deadline) the next poll falls past the deadline, and a
        // release in between must still be found.
        let t0 = Instant::now();
        let wait = Duration::from_secs(2);
        let deadline = t0 + wait;
        let mut pacing = Pacing::new(plan(Some(wait), false, t0), t0);
        let early = t0 + Duration::from_secs(1);
        assert!(pacing.try_now(early, true), "the early last try");
        pacing.busy(
            early,
            busy(Some(&b"foreign"[..]), Some(Duration::from_secs(60))),
        );
        pacing.next_try = deadline + Duration::from_secs(1);
        let final_try = deadline - FINAL_TRY_LEAD;
        assert_eq!(pacing.wake_at(), final_try, "woken for the deadline's try");
        assert!(!pacing.try_now(final_try - MS, true));
        assert!(pacing.try_now(final_try, false), "made, even unsubscribed");
        assert!(!pacing.try_now(final_try + MS, true), "once");
        assert_eq!(pacing.wake_at(), deadline, "then the deadline");

        // However short the wait, its last try is before its deadline.
        let short = Pacing::new(plan(Some(Duration::from_millis(40)), false, t0), t0);
        let tries: Vec<Instant> = short.last_tries.iter().flatten().copied().collect();
        assert!(tries
            .iter()
            .all(|&at| at >= t0 && at < t0 + Duration::from_millis(40)));
    }

    #[test]
    fn a_failure_to_reach_redis_backs_off_and_counts_unless_the_deadline_cut_it_short() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(Some(Duration::from_secs(30)), false, t0), t0);
        let first = pacing.unreachable(t0, t0 + Duration::from_secs(2));
        assert_eq!(
            first,
            Failure {
                in_a_row: 1,
                counts: true
            }
        );
        let after = pacing.wake_at() - (t0 + Duration::from_secs(2));
        assert!(after >= RECONNECT_MIN * 2 && after < RECONNECT_MIN * 3);
        // At the deadline, after less than Redis's timeout: cut short, says nothing.
        let step = t0 + Duration::from_millis(29_500);
        let cut = pacing.unreachable(step, t0 + Duration::from_secs(30));
        assert_eq!(
            cut,
            Failure {
                in_a_row: 2,
                counts: false
            }
        );
        // Given the whole timeout, it counts even at the deadline.
        let whole = pacing.unreachable(t0 + Duration::from_secs(28), t0 + Duration::from_secs(30));
        assert!(whole.counts);
        // A busy answer ends the run of failures.
        pacing.busy(t0, busy(Some(OURS), None));
        assert_eq!(pacing.unreachable(t0, t0).in_a_row, 1);
    }

    #[test]
    fn a_subscription_made_again_is_followed_by_a_try_at_once() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(None, false, t0), t0);
        pacing.subscribed(t0);
        pacing.busy(t0, busy(Some(OURS), Some(Duration::from_secs(60))));
        let again = t0 + Duration::from_secs(5);
        assert!(!pacing.try_now(again, true));
        pacing.subscribed(again);
        assert!(pacing.try_now(again, true));
    }

    #[test]
    fn after_a_split_a_notice_does_not_bring_the_try_before_the_pause() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(None, false, t0), t0);
        let split = Busy {
            split: true,
            ..busy(Some(OURS), Some(Duration::from_secs(60)))
        };
        let delay = pacing.busy(t0, split);
        assert!(delay <= SPLIT_PAUSE_MAX + MS);
        pacing.released(t0, "");
        assert_eq!(pacing.wake_at(), t0 + delay);
        // Not split: a notice brings the try to the moment it came.
        pacing.busy(t0, busy(Some(OURS), Some(Duration::from_secs(60))));
        pacing.released(t0 + MS, "");
        assert_eq!(pacing.wake_at(), t0 + MS);
    }

    #[test]
    fn a_holder_still_there_after_its_release_notice_is_retried_soon_then_left() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(None, false, t0), t0);
        let ttl = Some(Duration::from_secs(60));
        pacing.released(t0, OURS_RELEASED);
        let delays: Vec<Duration> = (0..=RELEASING_TRIES)
            .map(|_| pacing.busy(t0, busy(Some(OURS), ttl)))
            .collect();
        assert_eq!(delays[0], RELEASING_RETRY);
        assert_eq!(delays[1], RELEASING_RETRY * 2);
        assert_eq!(delays[9], RELEASING_RETRY * 32);
        assert!(
            delays[10] > Duration::from_secs(60),
            "the usual schedule again"
        );
        // Another holder than the one released is not retried soon.
        pacing.released(t0, OURS_RELEASED);
        let other = br#"{"token":"u","fence":2}"#;
        assert!(pacing.busy(t0, busy(Some(other), ttl)) > Duration::from_secs(60));
    }

    #[test]
    fn a_takeover_tries_often_at_first_then_at_the_usual_pace() {
        let t0 = Instant::now();
        let mut pacing = Pacing::new(plan(None, true, t0), t0);
        let ttl = Some(Duration::from_secs(60));
        assert!(pacing.pushing(t0));
        assert_eq!(pacing.busy(t0, busy(Some(OURS), ttl)), TAKEOVER_RETRY);
        let later = t0 + TAKEOVER_PUSH;
        assert!(!pacing.pushing(later));
        assert!(pacing.busy(later, busy(Some(OURS), ttl)) > Duration::from_secs(60));
        assert!(!Pacing::new(plan(None, false, t0), t0).pushing(t0));
    }
}
