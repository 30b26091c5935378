//! The watchdog: a thread that renews the lease on schedule while the command runs and
//! reports each renewal, and a lost lock, to the supervising loop as events. It acts on
//! nothing else: telling the guardian, or stopping the command, is the loop's part. It
//! shares the backend with the main thread, which uses it again for the release once
//! renewals have stopped, so one connection serves acquire, renew and release. The schedule
//! and every deadline come from `lease.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::backend::{LockBackend, Notice, Renewal, Subscription};
use crate::event::{Event, Loss};
use crate::lease::{self, Lease};
use crate::report;

/// How long the command runs before its holder listens for a takeover (`--replace`): the
/// subscription's connection is then made well after the command's start, off the path to
/// it, and a command that ends sooner never makes one. A takeover asked for before is asked
/// again by the replacing run's next tries, which come often at first (`wait.rs`).
const LISTEN_AFTER: Duration = Duration::from_millis(200);

/// The message a takeover sends on the holder's own channel (`acquire.lua`).
const REPLACE_NOTICE: &str = "replace";

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
    // A takeover's notice only makes the next renewal come now: the renewal is what
    // decides (with Redlock, a majority of the nodes), and it is also the fallback for a
    // notice that never came.
    let (poke, poked) = mpsc::channel::<()>();
    let mut listen_at = Some(Instant::now() + LISTEN_AFTER);
    let mut _listening: Option<Subscription> = None;
    let mut replace_told = false;
    loop {
        let wake_at = listen_at.map_or(next_renewal, |at| at.min(next_renewal));
        let renew_now = sleep_until(&poked, wake_at);
        if stopped.load(Ordering::Relaxed) {
            return None;
        }
        if listen_at.is_some_and(|at| Instant::now() >= at) {
            listen_at = None;
            let mut backend = lock_backend(&backend);
            if stopped.load(Ordering::Relaxed) {
                return None;
            }
            _listening = listen_for_takeover(&mut **backend, poke.clone(), next_renewal);
            drop(backend);
        }
        if !renew_now && Instant::now() < next_renewal {
            continue;
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
        match backend.renew(give_up_at, renew_now) {
            Ok(Renewal::Extended {
                sent_at,
                replace_by,
            }) => {
                lease.renewed(sent_at);
                if let Some(by) = replace_by.filter(|_| !replace_told) {
                    replace_told = true;
                    let _ = events.send(Event::ReplaceRequested { by });
                }
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

/// Sleeps until `until`, or until a takeover's notice comes: then returns true.
fn sleep_until(poked: &Receiver<()>, until: Instant) -> bool {
    match poked.recv_timeout(until.saturating_duration_since(Instant::now())) {
        Ok(()) => true,
        Err(RecvTimeoutError::Timeout) => false,
        // Never: this thread keeps a sender.
        Err(RecvTimeoutError::Disconnected) => {
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
            false
        }
    }
}

/// Subscribes to this holder's own channel, where a `--replace` run's acquisition sends its
/// request: each one pokes the renewal thread. Given up at `deadline` (the next renewal's),
/// and then the renewals alone find a takeover. One connection more per holder, the
/// subscription of a waiting run (`LockBackend::subscribe`), on this holder's channel alone.
fn listen_for_takeover(
    backend: &mut dyn LockBackend,
    poke: Sender<()>,
    deadline: Instant,
) -> Option<Subscription> {
    let sink = Box::new(move |notice: Notice| match notice {
        Notice::Released { by } if by == REPLACE_NOTICE => poke.send(()).is_ok(),
        Notice::Released { .. } => true,
        Notice::Broken(_) => false,
    });
    match backend.subscribe(sink, Some(deadline)) {
        Ok(subscription) => Some(subscription),
        Err(err) => {
            report::verbose(format_args!(
                "not listening for a takeover (--replace), renewals will find it: {err:#}"
            ));
            None
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
