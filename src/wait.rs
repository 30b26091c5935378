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
//! one `--redis-timeout` late against a server that stops answering. Its last attempt is
//! made a second before the deadline (half the wait, if that is shorter), so that Redis has
//! time to answer it. A wait that ends while Redis cannot be reached says so
//! (`Waited::Unreachable`) instead of calling the lock still held; a step that the deadline
//! itself cut short does not count as Redis failing (a busy lock behind a slow server ends
//! as busy). A subscription that had to be made again is followed by an attempt at once: a
//! release in the gap went unheard.
//!
//! It runs on the main thread and listens on the same event channel as the supervisor, so a
//! signal and a release notice are heard in the order they came; an attempt in flight when a
//! signal arrives finishes first, and `run.rs` releases a lock that was taken that way. It
//! prints nothing but `-v` detail, the holder's name on a terminal, and one warning when
//! Redis is out of reach or refuses the subscription; `run.rs` decides what a result means.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

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
const TAKEOVER_PUSH: Duration = Duration::from_millis(1500);
/// Whether a step begun at `step` that just failed was cut short by the wait's own
/// deadline rather than given Redis's whole timeout: then it says nothing of Redis, and the
/// wait ends on what Redis last did answer (a busy lock behind a slow server is 75, not
/// "unreachable").
fn cut_short(plan: &WaitPlan, step: Instant) -> bool {
    let now = Instant::now();
    plan.deadline
        .is_some_and(|deadline| now + DEADLINE_SLACK >= deadline)
        && now.saturating_duration_since(step) < plan.redis_timeout
}

/// How close to the wait's deadline a failing step counts as cut short by it: the deadline
/// is checked by the clock after the step returns, a little late.
const DEADLINE_SLACK: Duration = Duration::from_millis(5);

/// How long before the wait's deadline its last attempt is made, at most (half the wait at
/// most): time for Redis to answer it before the deadline.
const LAST_TRY_LEAD: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub enum Waited {
    /// The lock is ours; the lease started no earlier than `sent_at`.
    Acquired {
        sent_at: Instant,
        fence: u64,
    },
    TimedOut,
    /// `--once`, `--once-per`: the work was done meanwhile (`record`: see `Attempt::Done`).
    Done {
        record: Vec<u8>,
        /// The consecutive skips, this one included (see `Attempt::Busy::skips`).
        skips: Option<u64>,
    },
    /// The deadline passed while Redis could not be reached (the last attempt failed so).
    Unreachable(anyhow::Error),
    /// A signal arrived; nothing was taken.
    Interrupted {
        signal: libc::c_int,
    },
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
    /// Held for as long as it should last: dropping it ends the subscription.
    Subscribed { _kept: Subscription },
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
    let started = Instant::now();
    let mut announcer = Announcer::new(plan.announce, started, blocker);
    let mut listening = Listening::Not;
    let mut subscribed_before = false;
    let mut next_try = Instant::now();
    // A release notice brings the next try forward, but not before this.
    let mut not_before = Instant::now();
    let mut failures = 0u32;
    // Why the last attempt (or subscription) failed, if it did.
    let mut last_failure: Option<anyhow::Error> = None;
    // Split Redlock attempts in a row (see `split_pause`), polls of a foreign holder.
    let (mut splits, mut polls) = (0u32, 0u32);
    // The holder whose release notice came last (its identity), and how often a try has
    // found it still holding since: on a Redlock node that has not released yet.
    let mut releasing: Option<String> = None;
    let mut releasing_tries = 0u32;
    // Release notices are coalesced: while one waits to be acted on, later ones only
    // replace the release it names (the latest is the one a try may still find holding).
    // A burst of messages on the lock's channel (a buggy or hostile client) then costs one
    // try and no memory, not one try and one queued event each; a notice that comes after
    // the waiter took the pending one sends a new one, so none goes unanswered.
    let pending: Arc<Mutex<Option<String>>> = Arc::default();
    let last_try_at = plan.deadline.map(|deadline| {
        deadline - LAST_TRY_LEAD.min(deadline.saturating_duration_since(started) / 2)
    });
    let mut last_tried = false;
    loop {
        // Past the deadline, nothing more is tried, even when this process was paused
        // through it with a release notice waiting: the wait is over.
        if plan
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            return Ok(match last_failure {
                Some(err) => Waited::Unreachable(err),
                None => Waited::TimedOut,
            });
        }
        if matches!(listening, Listening::Not) {
            let notices = events.reporter();
            let latest = Arc::clone(&pending);
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
            match backend.subscribe(forward, plan.deadline) {
                Ok(subscription) => {
                    listening = Listening::Subscribed {
                        _kept: subscription,
                    };
                    last_failure = None;
                    if subscribed_before {
                        next_try = Instant::now();
                    }
                    subscribed_before = true;
                }
                // Or the server has no SUBSCRIBE: as for a foreign holder, looking is the
                // only way to learn of a release.
                Err(err) if is_refused_by_acl(&err) || cannot_subscribe(&err) => {
                    report::warn(format_args!(
                        "{err:#}; without release notices, looking every {} instead",
                        report::duration(NO_NOTICES_POLL)
                    ));
                    listening = Listening::Polling;
                }
                Err(err) if is_transient(&err) => {
                    failures += 1;
                    next_try = Instant::now() + backoff(failures);
                    report_unreachable(&err, failures);
                    if !cut_short(&plan, step) {
                        last_failure = Some(err);
                    }
                }
                Err(err) => return Err(err),
            }
        }

        // Subscribed first, then tried: a release between the two cannot be missed. Near
        // the deadline, one last try whatever the schedule.
        let last_try = !last_tried && last_try_at.is_some_and(|at| Instant::now() >= at);
        let listens = !matches!(listening, Listening::Not);
        if (listens && Instant::now() >= next_try) || last_try {
            last_tried |= last_try;
            let step = Instant::now();
            match backend.try_acquire(plan.deadline) {
                Ok(Attempt::Acquired { sent_at, fence }) => {
                    return Ok(Waited::Acquired { sent_at, fence })
                }
                Ok(Attempt::Superseded { newer, skips }) => {
                    return Ok(Waited::Superseded { newer, skips })
                }
                Ok(Attempt::Done { record, skips }) => return Ok(Waited::Done { record, skips }),
                Ok(Attempt::Busy {
                    holder_ttl,
                    holder,
                    ahead,
                    split,
                    ..
                }) => {
                    failures = 0;
                    last_failure = None;
                    let silent = holder_cannot_announce(holder.as_deref(), ahead);
                    let still_releasing = releasing.as_deref().is_some_and(|identity| {
                        holder
                            .as_deref()
                            .is_some_and(|value| value.starts_with(identity.as_bytes()))
                    });
                    announcer.blocked_by(Blocker { holder, ahead });
                    splits = if split { splits + 1 } else { 0 };
                    polls = if silent { polls + 1 } else { 0 };
                    let mut delay = retry_delay(holder_ttl);
                    if split {
                        delay = delay.min(split_pause(splits));
                    }
                    if silent {
                        delay = delay.min(foreign_poll(polls));
                    }
                    match releasing_retry(releasing_tries) {
                        Some(soon) if still_releasing => {
                            releasing_tries += 1;
                            delay = delay.min(soon);
                        }
                        _ => releasing = None,
                    }
                    if matches!(listening, Listening::Polling) {
                        delay = delay.min(NO_NOTICES_POLL + jitter(NO_NOTICES_POLL / 5));
                    }
                    let pushing = plan.takeover && started.elapsed() < TAKEOVER_PUSH;
                    if pushing {
                        delay = delay.min(TAKEOVER_RETRY);
                    }
                    next_try = Instant::now() + delay;
                    // Until woken or the next try, only the subscription's connection stays.
                    if matches!(listening, Listening::Subscribed { .. }) && !pushing {
                        backend.rest();
                    }
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
                    if !cut_short(&plan, step) {
                        last_failure = Some(err);
                    }
                }
                Err(err) => return Err(err),
            }
        }

        let now = Instant::now();
        announcer.speak_if_due(key, now);
        let mut wake_at = plan
            .deadline
            .map_or(next_try, |deadline| next_try.min(deadline));
        if let Some(at) = last_try_at.filter(|_| !last_tried) {
            wake_at = wake_at.min(at);
        }
        if let Some(due) = announcer.due_at() {
            wake_at = wake_at.min(due);
        }
        match events.recv_timeout(wake_at.saturating_duration_since(now)) {
            Ok(Event::Notice(Notice::Released { .. })) => {
                let by = pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                    .unwrap_or_default();
                report::verbose(format_args!("released by its holder; trying now"));
                // `by` is the holder's identity, then `#` and a release number.
                releasing = by
                    .rsplit_once('#')
                    .map(|(identity, _)| identity.to_string());
                releasing_tries = 0;
                next_try = Instant::now().max(not_before);
            }
            Ok(Event::Notice(Notice::Broken(err))) => {
                report::verbose(format_args!("{err:#}; subscribing again"));
                listening = Listening::Not;
            }
            Ok(Event::Signal { signal, .. }) => return Ok(Waited::Interrupted { signal }),
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => bail!("internal error: event channel closed"),
        }
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
}
