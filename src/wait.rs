//! Waiting for a busy lock: subscribe to release notices, then try again on each notice or
//! when the holder's lease would have run out, until the lock is ours, the deadline passes,
//! or a signal ends the wait. It never polls on a fixed tick: a waiter costs Redis one
//! command per notice, or one per holder lease (two thirds of the holder's TTL while it
//! renews), and starts within a round trip of a release.
//!
//! It runs on the main thread and listens on the same event channel as the supervisor, so a
//! signal and a release notice are heard in the order they came; an attempt in flight when a
//! signal arrives finishes first, and `run.rs` releases a lock that was taken that way. It
//! prints nothing but `-v` detail; `run.rs` decides what a result means.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::backend::{is_transient, Attempt, LockBackend, Notice, Subscription};
use crate::event::Event;
use crate::holder::Blocker;
use crate::report;

/// Re-check a key that has no TTL (not ours to judge: another tool's lock or another
/// application's data) this often; only a release notice or its deletion frees it.
const NO_TTL_RECHECK: Duration = Duration::from_secs(10);
/// Back-off bounds while Redis cannot be reached during a wait.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// Longest random pause before retrying after contenders split the Redlock nodes: long
/// next to one round over the nodes, short next to a job.
const SPLIT_PAUSE_MAX: Duration = Duration::from_millis(50);
/// How long a wait lasts before the holder is named.
const ANNOUNCE_AFTER: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The lock is ours; the lease started no earlier than `sent_at`.
    Acquired {
        sent_at: Instant,
        fence: u64,
    },
    TimedOut,
    /// A signal arrived; nothing was taken.
    Interrupted {
        signal: libc::c_int,
    },
}

/// How a wait goes about it.
#[derive(Debug, Clone, Copy)]
pub struct WaitPlan {
    /// Give up then; `None`: never.
    pub deadline: Option<Instant>,
    /// With `--fair`: try (and so renew the queue heartbeat) at least this often.
    pub heartbeat: Option<Duration>,
    /// Name the holder on stderr after a second of waiting (a terminal, or `-v`).
    pub announce: bool,
}

/// Waits until the lock is ours, the plan's deadline passes or a signal arrives on
/// `events`. The caller has already found the lock busy once, because of `blocker`.
pub fn wait_for_lock(
    backend: &mut dyn LockBackend,
    key: &str,
    plan: WaitPlan,
    blocker: Blocker,
    events_tx: &Sender<Event>,
    events: &Receiver<Event>,
) -> Result<Waited> {
    let started = Instant::now();
    let mut announcer = Announcer::new(plan.announce, started, blocker);
    let mut subscription: Option<Subscription> = None;
    let mut next_try = Instant::now();
    // A release notice brings the next try forward, but not before this.
    let mut not_before = Instant::now();
    let mut failures = 0u32;
    // Split Redlock attempts in a row (see `split_pause`).
    let mut splits = 0u32;
    loop {
        if subscription.is_none() {
            let notices = events_tx.clone();
            let forward = Box::new(move |notice| notices.send(Event::Notice(notice)).is_ok());
            match backend.subscribe(forward) {
                Ok(subscribed) => subscription = Some(subscribed),
                Err(err) if is_transient(&err) => {
                    failures += 1;
                    next_try = Instant::now() + backoff(failures);
                    report_unreachable(&err, failures);
                }
                Err(err) => return Err(err),
            }
        }

        // Subscribed first, then tried: a release between the two cannot be missed.
        if subscription.is_some() && Instant::now() >= next_try {
            match backend.try_acquire() {
                Ok(Attempt::Acquired { sent_at, fence }) => {
                    return Ok(Waited::Acquired { sent_at, fence })
                }
                Ok(Attempt::Busy {
                    holder_ttl,
                    holder,
                    ahead,
                    split,
                }) => {
                    failures = 0;
                    announcer.blocked_by(Blocker { holder, ahead });
                    splits = if split { splits + 1 } else { 0 };
                    let mut delay = if split {
                        split_pause(splits).min(retry_delay(holder_ttl))
                    } else {
                        retry_delay(holder_ttl)
                    };
                    if let Some(heartbeat) = plan.heartbeat {
                        delay = delay.min(heartbeat);
                    }
                    next_try = Instant::now() + delay;
                    // The other contenders' releases are about to come: they must not
                    // send everyone back in at the same moment.
                    not_before = if split { next_try } else { Instant::now() };
                    report::verbose(format_args!(
                        "still busy; next try in {} unless released sooner",
                        report::duration(delay)
                    ));
                }
                Err(err) if is_transient(&err) => {
                    failures += 1;
                    next_try = Instant::now() + backoff(failures);
                    report_unreachable(&err, failures);
                }
                Err(err) => return Err(err),
            }
        }

        let now = Instant::now();
        if plan.deadline.is_some_and(|deadline| now >= deadline) {
            return Ok(Waited::TimedOut);
        }
        announcer.speak_if_due(key, now);
        let mut wake_at = plan
            .deadline
            .map_or(next_try, |deadline| next_try.min(deadline));
        if let Some(due) = announcer.due_at() {
            wake_at = wake_at.min(due);
        }
        match events.recv_timeout(wake_at.saturating_duration_since(now)) {
            Ok(Event::Notice(Notice::Released { .. })) => {
                report::verbose(format_args!("released by its holder; trying now"));
                next_try = Instant::now().max(not_before);
            }
            Ok(Event::Notice(Notice::Broken(err))) => {
                report::verbose(format_args!("{err:#}; subscribing again"));
                subscription = None;
            }
            Ok(Event::Signal { signal, .. }) => return Ok(Waited::Interrupted { signal }),
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => bail!("internal error: event channel closed"),
        }
    }
}

/// Names the holder on stderr once a wait has lasted a second, and again each time the
/// holder changes; never in a loop.
struct Announcer {
    enabled: bool,
    due: Instant,
    blocker: Blocker,
    /// Who was last named, so a renewal (same holder) says nothing new.
    named: Option<(Option<String>, bool)>,
}

impl Announcer {
    fn new(enabled: bool, started: Instant, blocker: Blocker) -> Announcer {
        Announcer {
            enabled,
            due: started + ANNOUNCE_AFTER,
            blocker,
            named: None,
        }
    }

    fn blocked_by(&mut self, blocker: Blocker) {
        self.blocker = blocker;
    }

    /// When it next needs to wake up to speak, if ever.
    fn due_at(&self) -> Option<Instant> {
        (self.enabled && self.named.is_none()).then_some(self.due)
    }

    fn speak_if_due(&mut self, key: &str, now: Instant) {
        if !self.enabled || now < self.due {
            return;
        }
        let who = self.blocker.identity();
        if self.named.as_ref() == Some(&who) {
            return;
        }
        report::line_anyway(format_args!("waiting for {key}: {}", self.blocker.phrase()));
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
    fn backoff_grows_and_is_capped() {
        assert!(backoff(1) < backoff(4));
        assert!(backoff(30) <= RECONNECT_MAX + RECONNECT_MIN);
    }
}
