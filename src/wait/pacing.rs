//! When a wait's next attempt is due, and how long each kind of busy lock is left alone:
//! the `Pacing` of the module's rules, and the delays it draws on. It reads no clock and
//! talks to no Redis; the steps themselves, and what they print, are the `Waiter`'s.

use std::time::{Duration, Instant};

use super::WaitPlan;
use crate::backend::Holder;

/// With `--replace`, how often to try (each try asks the holder again) during the first
/// `TAKEOVER_PUSH` of the wait. A holder listens for a takeover only once its command has run
/// 200 ms (`renew.rs`): one asked for before then is heard at the next try, and so within
/// the second promised. After that the holder listens, or never will (then its renewals
/// find the request), and the usual pace resumes.
const TAKEOVER_RETRY: Duration = Duration::from_millis(300);
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
/// Polling when the Redis user may not subscribe: a release is seen this late at most.
pub(super) const NO_NOTICES_POLL: Duration = Duration::from_millis(250);

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
/// Longest random pause before retrying after contenders split the Redlock nodes: long
/// next to one round over the nodes, short next to a job.
const SPLIT_PAUSE_MAX: Duration = Duration::from_millis(50);
/// Trying again while a release is still on its way to the other Redlock nodes: from this,
/// doubling, up to 32 times it, at most `RELEASING_TRIES` times (a release that did not
/// reach a majority leaves the lock to expire, and waiting for that is the usual schedule).
const RELEASING_RETRY: Duration = Duration::from_millis(5);
const RELEASING_TRIES: u32 = 10;

/// What a try that found the lock busy learnt of its holder.
#[derive(Debug, Clone, Copy)]
pub(super) struct Busy<'a> {
    /// How long the holder's key has left; `None`: no TTL.
    pub(super) holder_ttl: Option<Duration>,
    /// One holder's value, when a slot is held by a string value.
    pub(super) holder: Option<&'a [u8]>,
    /// With `--fair`: waiters queued before this one.
    pub(super) ahead: u32,
    /// Redlock: contenders split the nodes between them.
    pub(super) split: bool,
}

/// A failure to reach Redis, as the pacing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Failure {
    /// How many steps in a row have failed so.
    pub(super) in_a_row: u32,
    /// Whether it says anything of Redis (see `Pacing::unreachable`).
    pub(super) counts: bool,
}

/// The pacing rules of a wait (see the documentation of `wait`): when the next try is due,
/// and when to wake up. It reads no clock and talks to no Redis: each step passes the time
/// it happened at, so every rule is tested without either. (The jitter is random.)
#[derive(Debug)]
pub(super) struct Pacing {
    started: Instant,
    /// Give up then; `None`: never.
    pub(super) deadline: Option<Instant>,
    pub(super) redis_timeout: Duration,
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
    pub(super) fn new(plan: WaitPlan, started: Instant) -> Pacing {
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
    pub(super) fn is_over(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|deadline| now >= deadline)
    }

    /// Whether to try now: once listening (subscribed, or polling) and the next try is
    /// due; and near the deadline whatever the schedule (each of `last_tries` once: those
    /// whose time has come are all taken by this one try).
    pub(super) fn try_now(&mut self, now: Instant, listens: bool) -> bool {
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
    pub(super) fn subscribed(&mut self, now: Instant) {
        if self.subscribed_before {
            self.next_try = now;
        }
        self.subscribed_before = true;
    }

    /// No release notices will come: a busy lock is looked at every `NO_NOTICES_POLL`.
    pub(super) fn without_notices(&mut self) {
        self.polling = true;
    }

    /// A step begun at `step` could not reach Redis: the next try after a growing backoff.
    /// It counts as Redis failing only if it had Redis's whole timeout: one that the
    /// deadline itself cut short says nothing of Redis, and the wait ends on what Redis
    /// last did answer (a busy lock behind a slow server is 75, not "unreachable").
    pub(super) fn unreachable(&mut self, step: Instant, now: Instant) -> Failure {
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
    pub(super) fn busy(&mut self, now: Instant, busy: Busy) -> Duration {
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
    pub(super) fn pushing(&self, now: Instant) -> bool {
        self.takeover && now.saturating_duration_since(self.started) < TAKEOVER_PUSH
    }

    /// A release notice came: try now (or once a split's pause is over). `by` is the
    /// holder's identity, then `#` and a release number: a try that finds that holder
    /// still there is soon repeated (`releasing_retry`).
    pub(super) fn released(&mut self, now: Instant, by: &str) {
        self.releasing = by
            .rsplit_once('#')
            .map(|(identity, _)| identity.to_string());
        self.releasing_tries = 0;
        self.next_try = now.max(self.not_before);
    }

    /// When the wait must wake up: the next try, the last try, or the deadline.
    pub(super) fn wake_at(&self) -> Instant {
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

/// When to try again if no release notice comes: just after the holder's lease would end if
/// it stopped renewing, plus a little jitter so that many waiters do not retry in lockstep.
fn retry_delay(holder_ttl: Option<Duration>) -> Duration {
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

/// A random duration below `cap`.
fn jitter(cap: Duration) -> Duration {
    let random = u128::from_ne_bytes(crate::random::bytes16()) as u64;
    let cap_ns = cap.as_nanos().max(1) as u64;
    Duration::from_nanos(random % cap_ns)
}

#[cfg(test)]
mod tests;
