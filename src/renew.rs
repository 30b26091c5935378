//! The watchdog: a thread that renews the lease on schedule while the command runs and
//! reports each renewal, and a lost lock, to the supervising loop as events. It acts on
//! nothing else: telling the guardian, or stopping the command, is the loop's part. It
//! shares the backend with the main thread, which uses it again for the release once
//! renewals have stopped, so one connection serves acquire, renew and release. The schedule
//! and every deadline come from `lease.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::backend::{LockBackend, Renewal};
use crate::event::{Event, Loss};
use crate::lease::{self, Lease};
use crate::report;

/// The renewal thread once it has a lease.
pub struct Renewer {
    /// Set, with the backend locked, once renewals are to stop.
    stopped: Arc<AtomicBool>,
    backend: SharedBackend,
}

pub type SharedBackend = Arc<Mutex<Box<dyn LockBackend>>>;

/// A renewal thread started ahead of need (before the lock is even taken), so that starting
/// it is off the path from taking the lock to starting the command, and cannot fail once
/// the command runs. It waits for a lease; dropped unused, its thread ends.
pub struct ReadyRenewer {
    handover: Sender<Handover>,
}

/// What the renewal thread is handed once the lock is taken.
struct Handover {
    backend: SharedBackend,
    lease: Lease,
    stopped: Arc<AtomicBool>,
}

impl ReadyRenewer {
    /// Renewals and a loss will be reported on `events`.
    pub fn spawn(events: Sender<Event>) -> Result<ReadyRenewer> {
        let (handover, handed) = mpsc::channel::<Handover>();
        std::thread::Builder::new()
            .name("renew".into())
            .spawn(move || {
                let Ok(handover) = handed.recv() else {
                    return;
                };
                if let Some(loss) = renew_until_stopped(handover, &events) {
                    let _ = events.send(Event::LockLost(loss));
                }
            })
            .context("cannot start the renewal thread")?;
        Ok(ReadyRenewer { handover })
    }

    /// Starts renewing `lease`, held through `backend`.
    pub fn start(self, backend: Box<dyn LockBackend>, lease: Lease) -> Renewer {
        let backend: SharedBackend = Arc::new(Mutex::new(backend));
        let stopped = Arc::new(AtomicBool::new(false));
        let _ = self.handover.send(Handover {
            backend: Arc::clone(&backend),
            lease,
            stopped: Arc::clone(&stopped),
        });
        Renewer { stopped, backend }
    }
}

impl Renewer {
    /// Stops renewing and hands over the backend for the release. A renewal in flight
    /// finishes first, and its event is sent before this returns; none starts after. The
    /// thread is neither waited for nor woken: this is on the path from the command's exit
    /// to the release, which a waiter is waiting on, and a thread woken there competes with
    /// the release for the CPUs. It ends when its next renewal comes due, or with the
    /// process.
    pub fn stop(self) -> SharedBackend {
        let backend = lock_backend(&self.backend);
        self.stopped.store(true, Ordering::Relaxed);
        drop(backend);
        self.backend
    }
}

/// Renews on schedule until stopped (`None`) or until the lock is lost (`Some`).
fn renew_until_stopped(handover: Handover, events: &Sender<Event>) -> Option<Loss> {
    let Handover {
        backend,
        mut lease,
        stopped,
    } = handover;
    let mut failures = 0u32;
    let mut last_error = String::from("no renewal was answered");
    let mut next_renewal = lease.renewal_due();
    loop {
        std::thread::sleep(next_renewal.saturating_duration_since(Instant::now()));
        if stopped.load(Ordering::Relaxed) {
            return None;
        }

        let give_up_at = lease.give_up_at();
        if Instant::now() >= give_up_at {
            return Some(Loss::Unconfirmed { last_error });
        }
        let mut backend = lock_backend(&backend);
        // Stopped while this thread was waking up: the release may already have happened.
        // (`stop` sets the flag with the backend locked, so this reading is the last word.)
        if stopped.load(Ordering::Relaxed) {
            return None;
        }
        match backend.renew(give_up_at) {
            Ok(Renewal::Extended { sent_at }) => {
                lease.renewed(sent_at);
                // Sent with the backend still locked, so that once `stop` has the backend,
                // every renewal that succeeded has been reported.
                let _ = events.send(Event::Renewed {
                    valid_until: lease.valid_until(),
                });
                drop(backend);
                if failures > 0 {
                    report::verbose(format_args!("renewed after {failures} failed attempts"));
                }
                failures = 0;
                next_renewal = lease.renewal_due();
                report::verbose_as(report::LogEvent::Renewed, format_args!("lease renewed"));
            }
            Ok(Renewal::NotOurs) => return Some(Loss::NotOurs),
            Err(err) => {
                drop(backend);
                failures += 1;
                last_error = format!("{err:#}");
                report::verbose(format_args!("renewal failed, retrying: {last_error}"));
                next_renewal = lease::renewal_retry(Instant::now(), failures, give_up_at);
            }
        }
    }
}

/// The shared backend, for this thread alone until the guard drops. A poisoned mutex only
/// means another thread panicked, and a panic aborts this process.
pub fn lock_backend(backend: &SharedBackend) -> MutexGuard<'_, Box<dyn LockBackend>> {
    backend
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
