//! The watchdog: a thread that renews the lease on schedule while the command runs and
//! reports to the supervisor when the lock is lost. It shares the backend with the main
//! thread, which uses it again for the release once renewals have stopped, so one
//! connection serves acquire, renew and release.
//!
//! Timing, all on the monotonic clock (`Instant`), so a wall-clock jump on this machine can
//! neither stretch nor shorten a lease:
//! - the lease is valid until `sent + ttl - drift`, `sent` being when the last *successful*
//!   acquire or renewal left this machine (Redis started its clock later than that), `drift`
//!   the Redlock allowance for clock-rate differences (1% of the TTL plus 2 ms);
//! - a renewal is due every `renew_every`; a failed one is retried quickly;
//! - if no renewal has succeeded by `valid_until - grace`, the lock is lost: the supervisor
//!   sends SIGTERM and must have sent SIGKILL by `valid_until`. `grace` is `--kill-after`,
//!   capped at half the time between a renewal being due and the lease ending, so that there
//!   is always time to retry.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::backend::{self, LockBackend, Renewal};
use crate::report;
use crate::supervise::Event;

/// Retry pacing for a renewal that failed for a transient reason.
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_millis(500);

/// The lease's timing, fixed for the run.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTiming {
    pub ttl: Duration,
    pub renew_every: Duration,
    pub kill_after: Duration,
}

impl LeaseTiming {
    /// Allowance for the server's clock running at a different rate from ours.
    pub fn drift(&self) -> Duration {
        backend::clock_drift(self.ttl)
    }

    /// How long after a successful renewal was sent the lease surely still holds.
    pub fn validity(&self) -> Duration {
        self.ttl.saturating_sub(self.drift())
    }

    /// How much of the lease is kept back for terminating the command once renewals fail.
    pub fn grace(&self) -> Duration {
        let spare = self.validity().saturating_sub(self.renew_every);
        self.kill_after.min(spare / 2)
    }
}

/// Why the lock was lost.
#[derive(Debug, Clone)]
pub enum Loss {
    /// Redis answered: the key is gone or holds someone else's value.
    NotOurs,
    /// Redis did not confirm in time; the lease is running out.
    Unconfirmed { last_error: String },
}

pub struct Renewer {
    /// Set, with the backend locked, once renewals are to stop.
    stopped: Arc<AtomicBool>,
    backend: SharedBackend,
    valid_until: Arc<Mutex<Instant>>,
    timing: LeaseTiming,
}

pub type SharedBackend = Arc<Mutex<Box<dyn LockBackend>>>;

/// A renewal thread started ahead of need (before the lock is even taken), so that starting
/// it is off the path from taking the lock to starting the command, and cannot fail once
/// the command runs. It waits for a lease; dropped unused, its thread ends.
pub struct ReadyRenewer {
    lease: Sender<Lease>,
    timing: LeaseTiming,
}

/// What the renewal thread is handed once the lock is taken.
struct Lease {
    backend: SharedBackend,
    valid_until: Arc<Mutex<Instant>>,
    sent_at: Instant,
    stopped: Arc<AtomicBool>,
}

impl ReadyRenewer {
    /// `on_renewed` will hear each new end of the lease.
    pub fn spawn(
        timing: LeaseTiming,
        events: Sender<Event>,
        on_renewed: Box<dyn Fn(Instant) + Send>,
    ) -> Result<ReadyRenewer> {
        let (lease, leased) = mpsc::channel::<Lease>();
        std::thread::Builder::new()
            .name("renew".into())
            .spawn(move || {
                let Ok(lease) = leased.recv() else {
                    return;
                };
                if let Some(loss) = renew_until_stopped(&lease, timing, &*on_renewed) {
                    let _ = events.send(Event::LockLost(loss));
                }
            })
            .context("cannot start the renewal thread")?;
        Ok(ReadyRenewer { lease, timing })
    }

    /// Starts renewing a lease acquired by a command sent at `sent_at`.
    pub fn start(self, backend: Box<dyn LockBackend>, sent_at: Instant) -> Renewer {
        let valid_until = Arc::new(Mutex::new(sent_at + self.timing.validity()));
        let backend: SharedBackend = Arc::new(Mutex::new(backend));
        let stopped = Arc::new(AtomicBool::new(false));
        let _ = self.lease.send(Lease {
            backend: Arc::clone(&backend),
            valid_until: Arc::clone(&valid_until),
            sent_at,
            stopped: Arc::clone(&stopped),
        });
        Renewer {
            stopped,
            backend,
            valid_until,
            timing: self.timing,
        }
    }
}

impl Renewer {
    /// Until when the lease surely holds, by the last successful renewal.
    pub fn valid_until(&self) -> Instant {
        *lock(&self.valid_until)
    }

    /// When the lock counts as lost unless a renewal succeeds first. The supervisor watches
    /// this too, so that a renewal stuck in I/O can never delay the command's termination.
    pub fn give_up_at(&self) -> Instant {
        self.valid_until() - self.timing.grace()
    }

    /// Stops renewing and hands over the backend for the release. A renewal in flight
    /// finishes first; none starts after. The thread is neither waited for nor woken: this
    /// is on the path from the command's exit to the release, which a waiter is waiting on,
    /// and a thread woken there competes with the release for the CPUs. It ends when its
    /// next renewal comes due, or with the process.
    pub fn stop(self) -> (SharedBackend, Instant) {
        let backend = lock(&self.backend);
        self.stopped.store(true, Ordering::Relaxed);
        drop(backend);
        let valid_until = self.valid_until();
        (self.backend, valid_until)
    }
}

/// Renews on schedule until stopped (`None`) or until the lock is lost (`Some`).
fn renew_until_stopped(
    lease: &Lease,
    timing: LeaseTiming,
    on_renewed: &dyn Fn(Instant),
) -> Option<Loss> {
    let mut sent_at = lease.sent_at;
    let mut failures = 0u32;
    let mut last_error = String::from("no renewal was answered");
    let mut next_renewal = sent_at + timing.renew_every;
    loop {
        std::thread::sleep(next_renewal.saturating_duration_since(Instant::now()));
        if lease.stopped.load(Ordering::Relaxed) {
            return None;
        }

        let valid_until = sent_at + timing.validity();
        let give_up_at = valid_until - timing.grace();
        if Instant::now() >= give_up_at {
            return Some(Loss::Unconfirmed { last_error });
        }
        let mut backend = lock(&lease.backend);
        // Stopped while this thread was waking up: the release may already have happened.
        // (`stop` sets the flag with the backend locked, so this reading is the last word.)
        if lease.stopped.load(Ordering::Relaxed) {
            return None;
        }
        let renewal = backend.renew(give_up_at);
        drop(backend);
        match renewal {
            Ok(Renewal::Extended {
                sent_at: attempt_sent,
            }) => {
                if failures > 0 {
                    report::verbose(format_args!("renewed after {failures} failed attempts"));
                }
                failures = 0;
                sent_at = attempt_sent;
                *lock(&lease.valid_until) = sent_at + timing.validity();
                on_renewed(sent_at + timing.validity());
                next_renewal = sent_at + timing.renew_every;
                report::verbose(format_args!("lease renewed"));
            }
            Ok(Renewal::NotOurs) => return Some(Loss::NotOurs),
            Err(err) => {
                failures += 1;
                last_error = format!("{err:#}");
                report::verbose(format_args!("renewal failed, retrying: {last_error}"));
                let backoff = RETRY_MIN
                    .saturating_mul(1 << failures.min(4))
                    .min(RETRY_MAX);
                next_renewal = (Instant::now() + backoff).min(give_up_at);
            }
        }
    }
}

/// A poisoned lock only means another thread panicked, and a panic aborts this process.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(ttl_ms: u64, renew_ms: u64, kill_ms: u64) -> LeaseTiming {
        LeaseTiming {
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
}
