//! Every rule about time that keeps two holders apart: how long a lease surely lasts
//! (drift, validity), when it is renewed and retried, when the command must be stopped
//! (grace, kill deadline), how long an acquisition, a replica wait or a release may take.
//! Pure arithmetic on the monotonic clock (`Instant`), so that a wall-clock jump on this
//! machine can neither stretch nor shorten a lease; the renewal thread, the supervisor, the
//! quorum and the guardian all take their numbers from here. Nothing here sleeps or talks to
//! anyone.
//!
//! - A lease is valid until `sent + ttl - drift`, `sent` being when the last *successful*
//!   acquire or renewal left this machine (Redis started its clock later than that), `drift`
//!   the Redlock allowance for clock-rate differences (1% of the TTL plus 2 ms).
//! - A renewal is due every `renew_every`; a failed one is retried quickly
//!   ([`renewal_retry`]).
//! - If no renewal has succeeded by `valid_until - grace`, the lock is lost: the command gets
//!   SIGTERM and must have had SIGKILL by `valid_until` ([`kill_deadline`]). `grace` is
//!   `--kill-after`, capped at half the time between a renewal being due and the lease
//!   ending, so that there is always time to retry.

use std::time::{Duration, Instant};

/// Shortest lease: below this, one slow round trip would eat the whole lease.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Longest lease: a year. Longer would mean a crashed holder's lock outlives anyone who
/// remembers it; the bound also keeps every deadline far from the clock's limits.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Longest `--wait`, `--kill-after`, `--min-hold` and `--max-runtime`: ten years (`--wait
/// forever` is not bounded). Any deadline built from them stays far from the limits of
/// the monotonic clock and of Redis's millisecond counters.
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// `--redis-timeout`: at least 10 ms, at most an hour (it bounds every Redis command).
pub const MIN_REDIS_TIMEOUT: Duration = Duration::from_millis(10);
pub const MAX_REDIS_TIMEOUT: Duration = Duration::from_secs(3600);
/// Shortest `--renew-every`: 10 ms, a hundred renewals a second at most. Below it a typo
/// (`1ns`, `1us`) would turn the watchdog into a busy loop against Redis (tens of thousands
/// of scripts a second) without making the lease any safer: it is as long as its TTL.
pub const MIN_RENEWAL_PERIOD: Duration = Duration::from_millis(10);

/// Retry pacing for a renewal that failed for a transient reason.
const RENEWAL_RETRY_MIN: Duration = Duration::from_millis(50);
const RENEWAL_RETRY_MAX: Duration = Duration::from_millis(500);

/// How often a lease of `ttl` is renewed unless `--renew-every` says otherwise: a third of
/// it, as Redisson's watchdog does, which leaves two more tries before the lease runs out.
pub fn default_renewal_period(ttl: Duration) -> Duration {
    ttl / 3
}

/// The longest renewal period that can keep a lease of `ttl`: half of what the lease
/// surely lasts (`ttl - drift`), so that a renewal that fails can be retried once before
/// the lease runs out. (The default, a third of the TTL, leaves two tries.)
pub fn max_renewal_period(ttl: Duration) -> Duration {
    ttl.saturating_sub(clock_drift(ttl)) / 2
}

/// How much a lease of `ttl` is cut short to allow for the server's clock running at
/// another rate than ours: 1% of the TTL plus 2 ms, as in the Redis distributed-lock spec.
pub fn clock_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The lease's timing, fixed for the run.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub ttl: Duration,
    pub renew_every: Duration,
    pub kill_after: Duration,
}

impl Timing {
    /// Allowance for the server's clock running at a different rate from ours.
    pub fn drift(&self) -> Duration {
        clock_drift(self.ttl)
    }

    /// How long after a successful acquire or renewal was sent the lease surely still holds.
    pub fn validity(&self) -> Duration {
        self.ttl.saturating_sub(self.drift())
    }

    /// How much of the lease is kept back for terminating the command once renewals fail.
    pub fn grace(&self) -> Duration {
        let spare = self.validity().saturating_sub(self.renew_every);
        self.kill_after.min(spare / 2)
    }

    /// The lease that an acquisition sent at `acquired_at` gives.
    pub fn lease_from(&self, acquired_at: Instant) -> Lease {
        Lease {
            timing: *self,
            acquired_at,
            sent_at: acquired_at,
            renewals: 0,
        }
    }
}

/// One lease as this process knows it: from the last successful acquire or renewal.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    timing: Timing,
    /// When the acquisition was sent (`--min-hold` counts from here).
    acquired_at: Instant,
    /// When the last successful acquire or renewal was sent.
    sent_at: Instant,
    /// Renewals reported so far (for the run's summary).
    renewals: u32,
}

impl Lease {
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// Until when the lease surely holds.
    pub fn valid_until(&self) -> Instant {
        self.sent_at + self.timing.validity()
    }

    /// When the lock counts as lost unless a renewal succeeds first.
    pub fn give_up_at(&self) -> Instant {
        self.valid_until() - self.timing.grace()
    }

    /// When the next renewal is due.
    pub fn renewal_due(&self) -> Instant {
        self.sent_at + self.timing.renew_every
    }

    /// A renewal sent at `sent_at` succeeded. A lease only ever grows: an older report
    /// arriving late changes nothing.
    pub fn renewed(&mut self, sent_at: Instant) {
        self.sent_at = self.sent_at.max(sent_at);
    }

    pub fn renewals(&self) -> u32 {
        self.renewals
    }

    /// A lease that runs until `valid_until`, as a renewal reported it.
    pub fn renewed_until(&mut self, valid_until: Instant) {
        self.renewals = self.renewals.saturating_add(1);
        if let Some(sent_at) = valid_until.checked_sub(self.timing.validity()) {
            self.renewed(sent_at);
        }
    }
}

/// After `failures` transient renewal failures in a row: when to try again, never past
/// `give_up_at`.
pub fn renewal_retry(now: Instant, failures: u32, give_up_at: Instant) -> Instant {
    let backoff = RENEWAL_RETRY_MIN
        .saturating_mul(1 << failures.min(4))
        .min(RENEWAL_RETRY_MAX);
    (now + backoff).min(give_up_at)
}

/// When SIGKILL is due for a command told to end at `sigterm_at`: `kill_after` later, but
/// never past the lease's end, after which nothing keeps anyone else out. Generic so that
/// the guardian, which counts nanoseconds and may not allocate or take locks, applies the
/// same rule.
pub fn kill_deadline<T, D>(sigterm_at: T, kill_after: D, lease_end: T) -> T
where
    T: Ord + SaturatingAdd<D>,
{
    sigterm_at.saturating_add(kill_after).min(lease_end)
}

/// Addition that stops at the type's largest value instead of overflowing.
pub trait SaturatingAdd<D> {
    fn saturating_add(self, by: D) -> Self;
}

impl SaturatingAdd<Duration> for Instant {
    fn saturating_add(self, by: Duration) -> Instant {
        // An Instant this far out is as good as never.
        self.checked_add(by)
            .unwrap_or_else(|| self + Duration::from_secs(100 * 365 * 24 * 3600))
    }
}

impl SaturatingAdd<u64> for u64 {
    fn saturating_add(self, by: u64) -> u64 {
        u64::saturating_add(self, by)
    }
}

/// Redlock: how long after its start an acquisition may still count as won. A win must
/// leave most of the lease: one that took longer than a third of the TTL (the usual renewal
/// period) would leave too little to renew in time, and the command would be stopped as
/// soon as it started.
pub fn acquisition_budget(ttl: Duration) -> Duration {
    ttl / 3
}

/// After taking a lock on a master with replicas: how long to wait for a replica to confirm
/// the write, out of a lease of `ttl` and a Redis timeout of `timeout`.
pub fn replica_wait(ttl: Duration, timeout: Duration) -> Duration {
    (ttl / 10).min(timeout / 2)
}

/// By when a release must be done, or `None` when the lease has ended and there is nothing
/// left to release: the lease's end, or twice the Redis timeout if sooner (the release, and
/// a look whether one that got no answer landed all the same). Never later than the lease's
/// end: past it, a key found gone may just have expired, which tells nothing.
pub fn release_deadline(now: Instant, valid_until: Instant, timeout: Duration) -> Option<Instant> {
    let deadline = valid_until.min(now + timeout.saturating_mul(2));
    (deadline > now + Duration::from_millis(1)).then_some(deadline)
}

/// With `--min-hold`: how much longer the lock taken at `sent_at` must be kept, if any.
pub fn min_hold_left(
    min_hold: Option<Duration>,
    sent_at: Instant,
    now: Instant,
) -> Option<Duration> {
    min_hold
        .map(|min_hold| (sent_at + min_hold).saturating_duration_since(now))
        .filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(ttl_ms: u64, renew_ms: u64, kill_ms: u64) -> Timing {
        Timing {
            ttl: Duration::from_millis(ttl_ms),
            renew_every: Duration::from_millis(renew_ms),
            kill_after: Duration::from_millis(kill_ms),
        }
    }

    #[test]
    fn defaults_leave_time_to_retry_and_to_terminate() {
        let t = timing(30_000, 10_000, 10_000);
        assert_eq!(t.drift(), Duration::from_millis(302));
        assert_eq!(t.validity(), Duration::from_millis(29_698));
        // Half of (29.698s - 10s): SIGTERM 9.849s before the lease ends at the latest.
        assert_eq!(t.grace(), Duration::from_millis(9_849));
    }

    #[test]
    fn short_leases_cap_the_grace() {
        let t = timing(1_000, 333, 10_000);
        assert_eq!(t.validity(), Duration::from_millis(988));
        assert_eq!(t.grace(), Duration::from_micros(327_500));
        assert!(t.renew_every < t.validity() - t.grace());
    }

    #[test]
    fn a_short_kill_after_is_kept() {
        assert_eq!(
            timing(30_000, 10_000, 2_000).grace(),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn a_lease_only_grows() {
        let t = timing(1_000, 333, 10_000);
        let start = Instant::now();
        let mut lease = t.lease_from(start);
        assert_eq!(lease.valid_until(), start + Duration::from_millis(988));
        assert_eq!(lease.renewal_due(), start + Duration::from_millis(333));
        lease.renewed(start + Duration::from_millis(300));
        let later = lease.valid_until();
        lease.renewed(start + Duration::from_millis(100));
        assert_eq!(lease.valid_until(), later, "a late, older report");
        lease.renewed_until(later + Duration::from_millis(5));
        assert_eq!(lease.valid_until(), later + Duration::from_millis(5));
    }

    #[test]
    fn sigkill_never_lands_past_the_lease() {
        let now = Instant::now();
        let end = now + Duration::from_secs(2);
        assert_eq!(kill_deadline(now, Duration::from_secs(10), end), end);
        let soon = now + Duration::from_secs(1);
        assert_eq!(kill_deadline(now, Duration::from_secs(1), end), soon);
        assert_eq!(kill_deadline(5u64, u64::MAX, 9), 9);
        assert_eq!(kill_deadline(now, Duration::MAX, end), end);
    }

    #[test]
    fn renewal_retries_back_off_up_to_the_give_up_time() {
        let now = Instant::now();
        let far = now + Duration::from_secs(60);
        assert_eq!(renewal_retry(now, 1, far), now + Duration::from_millis(100));
        assert_eq!(renewal_retry(now, 9, far), now + RENEWAL_RETRY_MAX);
        let near = now + Duration::from_millis(10);
        assert_eq!(renewal_retry(now, 1, near), near);
    }

    #[test]
    fn a_release_past_the_lease_is_skipped() {
        let now = Instant::now();
        let timeout = Duration::from_secs(5);
        assert_eq!(release_deadline(now, now, timeout), None);
        let end = now + Duration::from_secs(1);
        assert_eq!(release_deadline(now, end, timeout), Some(end));
        let far = now + Duration::from_secs(60);
        assert_eq!(release_deadline(now, far, timeout), Some(now + 2 * timeout));
        assert_eq!(min_hold_left(None, now, now), None);
        let hold = Some(Duration::from_secs(3));
        assert_eq!(min_hold_left(hold, now, now + Duration::from_secs(4)), None);
        assert_eq!(
            min_hold_left(hold, now, now + Duration::from_secs(1)),
            Some(Duration::from_secs(2))
        );
    }
}

/// The lease protocol's model (`model/lease.pml`, checked with Spin by `model/check`) states
/// the numbers it checks for a lease of `MIN_TTL`; these tests keep them the code's own.
#[cfg(test)]
mod model {
    use super::*;

    const MODEL: &str = include_str!("../model/lease.pml");

    /// The `#define NAME VALUE` lines between the model's markers of the code's numbers.
    fn model_numbers() -> Vec<(&'static str, u64)> {
        let start = MODEL
            .find("/* ---- The code's numbers")
            .expect("the model marks where the code's numbers begin");
        let end = MODEL[start..]
            .find("/* ---- end of the code's numbers")
            .expect("the model marks where the code's numbers end");
        MODEL[start..start + end]
            .lines()
            .filter_map(|line| line.strip_prefix("#define "))
            .map(|define| {
                let mut words = define.split_whitespace();
                let name = words.next().expect("a #define has a name");
                let value = words.next().and_then(|value| value.parse().ok());
                (
                    name,
                    value.expect("the model's numbers are whole numbers of ms"),
                )
            })
            .collect()
    }

    /// Whole milliseconds, rounded down as the model's comment says.
    fn ms(duration: Duration) -> u64 {
        duration.as_millis() as u64
    }

    #[test]
    fn the_model_checks_the_codes_numbers() {
        let ttl = MIN_TTL;
        let timing = Timing {
            ttl,
            renew_every: default_renewal_period(ttl),
            // The default --kill-after (cli/lease.rs): longer than the cap, as with any TTL but a
            // long one.
            kill_after: Duration::from_secs(10),
        };
        // The drift's share for clock rates (all of it but the fixed 2 ms: 1%): a lease of
        // `validity` on our clock may last validity / (1 - 1%) on the server's.
        let rate_share = clock_drift(ttl) - clock_drift(Duration::ZERO);
        let late_ns = (timing.validity().as_nanos() * rate_share.as_nanos())
            .div_ceil((ttl - rate_share).as_nanos());
        let rate_slack = late_ns.div_ceil(1_000_000) as u64;
        let expected = vec![
            ("TTL", ms(ttl)),
            ("DRIFT", ms(timing.drift())),
            ("VALIDITY", ms(timing.validity())),
            ("RENEW_EVERY", ms(timing.renew_every)),
            ("GRACE", ms(timing.grace())),
            ("BUDGET", ms(acquisition_budget(ttl))),
            ("RATE_SLACK", rate_slack),
            ("GUARD_SLACK", 1),
        ];
        assert_eq!(
            model_numbers(),
            expected,
            "model/lease.pml no longer checks the code's numbers: update it and run model/check"
        );
    }

    #[test]
    fn the_models_guardian_slack_is_the_guardians_rounding() {
        // The guardian sleeps in poll(), which counts whole ms: it rounds its wait down and
        // adds 1, so it wakes up to 1 ms after the lease's end (GUARD_SLACK).
        let guardian = include_str!("process/guardian.rs");
        assert!(
            guardian.contains("/ 1_000_000 + 1)"),
            "the guardian's wait is no longer rounded as model/lease.pml's GUARD_SLACK says: \
             update the model and run model/check"
        );
    }
}
