//! The watchdog: a thread that renews the lease on schedule while the command runs and
//! reports each renewal, and a lost lock, to the supervising loop as events. The thread is
//! started by the loop only when it is first needed (`Renewer::starts_at`: the first
//! renewal, or the takeover listener's start), so that a command that ends sooner (a cron
//! job's `true`, most of a CI step's checks) never has one: nothing but the lock is taken
//! before the command starts. A renewal is a round trip that may take up to
//! `--redis-timeout`, longer than the loop may take to react to a signal: hence a thread. It acts on
//! nothing else: telling the guardian, or stopping the command, is the loop's part. It
//! shares the backend with the main thread, which uses it again for the release once
//! renewals have stopped, so one connection serves acquire, renew and release. The schedule
//! and every deadline come from `lease.rs`.
//!
//! A holder also listens for a takeover (`--replace`) on a thread of its own (`Listening`),
//! on connections of its own: subscribing never holds the backend, so a release is never
//! kept waiting behind it. A subscription that breaks (its connection reset, a failover, a
//! cluster slot that moved) is made again, after a pause that doubles up to
//! `RELISTEN_MAX`; while there is none, each renewal looks for a request, even in a Redis
//! Cluster, where it otherwise looks only when told.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::backend::{
    cannot_subscribe, is_refused_by_acl, is_takeover_notice, LockBackend, Notice, Renewal,
    TakeoverListener,
};
use crate::event::{Event, Loss, Reporter};
use crate::lease::{self, Lease};
use crate::report;

/// How long the command runs before its holder listens for a takeover (`--replace`): the
/// subscription's connection is then made well after the command's start, off the path to
/// it, and a command that ends sooner never makes one. A takeover asked for before is asked
/// again by the replacing run's next tries, which come often at first (`wait.rs`).
const LISTEN_AFTER: Duration = Duration::from_millis(200);

/// The first pause before listening again once the takeover listener broke or could not be
/// made, doubled at each failure up to `RELISTEN_MAX`; back to the first once a
/// subscription has lasted `RELISTEN_MAX`.
const RELISTEN_MIN: Duration = Duration::from_millis(100);
const RELISTEN_MAX: Duration = Duration::from_secs(5);

/// The least time between two renewals that takeover notices bring forward. Anyone may
/// publish on the holder's channel: a flood of notices (a buggy or hostile client) then
/// costs a renewal this often, not one a round trip, and a real request is heard this much
/// later at worst. The first notice is acted on at once.
const TAKEOVER_LOOK_GAP: Duration = Duration::from_millis(100);

/// How long to wait before trying again to start the renewal thread, if it could not be
/// started (EAGAIN). Meanwhile the loop watches the lease's end itself, and ends the command
/// as for a lost lock if the thread never starts.
const START_RETRY: Duration = Duration::from_millis(100);

/// The lease's watchdog: renews `lease` through the backend on a thread the loop starts
/// when it is due (`start_if_due`).
pub struct Renewer {
    /// Set, with the backend locked, once renewals are to stop.
    stopped: Arc<AtomicBool>,
    backend: SharedBackend,
    /// Until the thread is started: what it is handed, and when it is due.
    waiting: Option<(Handover, Instant)>,
}

pub type SharedBackend = Arc<Mutex<Box<dyn LockBackend>>>;

/// What the renewal thread is handed when it starts.
struct Handover {
    backend: SharedBackend,
    lease: Lease,
    stopped: Arc<AtomicBool>,
    /// When to listen for a takeover (`--replace`).
    listen_at: Instant,
    reporter: Reporter,
}

impl Renewer {
    /// The watchdog of `lease`, held through `backend`; renewals and a loss will be reported
    /// through `reporter`. No thread yet.
    pub fn new(backend: Box<dyn LockBackend>, lease: Lease, reporter: Reporter) -> Renewer {
        let backend: SharedBackend = Arc::new(Mutex::new(backend));
        let stopped = Arc::new(AtomicBool::new(false));
        let listen_at = Instant::now() + LISTEN_AFTER;
        let due = lease.renewal_due().min(listen_at);
        let handover = Handover {
            backend: Arc::clone(&backend),
            lease,
            stopped: Arc::clone(&stopped),
            listen_at,
            reporter,
        };
        Renewer {
            stopped,
            backend,
            waiting: Some((handover, due)),
        }
    }

    /// When the loop is to start the thread (`start_if_due`); `None` once it has.
    pub fn starts_at(&self) -> Option<Instant> {
        self.waiting.as_ref().map(|(_, at)| *at)
    }

    /// Starts the thread if it is due. If it cannot be started, says so and tries again
    /// shortly: the lease's end is watched by the loop all the same.
    pub fn start_if_due(&mut self, now: Instant) {
        if self.starts_at().is_none_or(|at| now < at) {
            return;
        }
        let Some((handover, _)) = self.waiting.take() else {
            return;
        };
        // A thread that cannot be made drops its closure: the handover is kept here too, so
        // that it can be taken back and the start tried again.
        let slot = Arc::new(Mutex::new(Some(handover)));
        let theirs = Arc::clone(&slot);
        let started = std::thread::Builder::new()
            .name("renew".into())
            .spawn(move || {
                let handover = theirs.lock().ok().and_then(|mut slot| slot.take());
                if let Some(handover) = handover {
                    let reporter = handover.reporter.clone();
                    if let Some(loss) = renew_until_stopped(handover, &reporter) {
                        let _ = reporter.send(Event::LockLost(loss));
                    }
                }
            });
        if let Err(err) = started {
            report::warn(format_args!(
                "cannot start the renewal thread ({err}); trying again in {}",
                report::duration(START_RETRY)
            ));
            let handover = slot.lock().ok().and_then(|mut slot| slot.take());
            self.waiting = handover.map(|handover| (handover, now + START_RETRY));
        }
    }

    /// Stops renewing and hands over the backend for the release. A renewal in flight
    /// finishes first, and its event is sent before this returns; none starts after. The
    /// thread, if it was started, is neither waited for nor woken: this is on the path from
    /// the command's exit to the release, which a waiter is waiting on, and a thread woken
    /// there competes with the release for the CPUs. It ends when its next renewal comes
    /// due, or with the process.
    pub fn stop(self) -> SharedBackend {
        let backend = lock_backend(&self.backend);
        self.stopped.store(true, Ordering::Relaxed);
        drop(backend);
        // Never started: its share of the backend goes with the handover.
        drop(self.waiting);
        self.backend
    }
}

/// Renews on schedule until stopped (`None`) or until the lock is lost (`Some`).
fn renew_until_stopped(handover: Handover, events: &Reporter) -> Option<Loss> {
    let Handover {
        backend,
        mut lease,
        stopped,
        listen_at,
        reporter: _,
    } = handover;
    let mut failures = 0u32;
    let mut last_error = String::from("no renewal was answered");
    let mut next_renewal = lease.renewal_due();
    // A takeover's notice only makes the next renewal come now (or `TAKEOVER_LOOK_GAP`
    // after the last one a notice brought): the renewal is what decides (with Redlock, a
    // majority of the nodes), and it is also the fallback for a notice that never came.
    let (poke_sender, poked) = mpsc::channel::<()>();
    let poke = Poke {
        pending: Arc::new(AtomicBool::new(false)),
        sender: poke_sender,
    };
    let mut listen_at = Some(listen_at);
    let mut listening: Option<Listening> = None;
    let mut replace_told = false;
    // A notice heard and not yet acted on; when a notice last brought a renewal.
    let mut renew_now = false;
    let mut looked_at: Option<Instant> = None;
    loop {
        let mut wake_at = listen_at.map_or(next_renewal, |at| at.min(next_renewal));
        let look_from = looked_at.map(|at| at + TAKEOVER_LOOK_GAP);
        if let (true, Some(from)) = (renew_now, look_from) {
            wake_at = wake_at.min(from);
        }
        renew_now |= sleep_until(&poked, wake_at);
        if stopped.load(Ordering::Relaxed) {
            return None;
        }
        let now = Instant::now();
        if listen_at.is_some_and(|at| now >= at) {
            listen_at = None;
            // No I/O under the lock: the listener connects on a thread of its own.
            let listener = lock_backend(&backend).takeover_listener();
            listening = listener.and_then(|listener| Listening::start(listener, poke.clone()));
        }
        let look_due = renew_now && look_from.is_none_or(|from| now >= from);
        if !look_due && now < next_renewal {
            continue;
        }
        // Notices that came together (one per Redlock node, or a flood) make one renewal;
        // one that comes from now on pokes again.
        poke.pending.store(false, Ordering::SeqCst);
        while poked.try_recv().is_ok() {}
        if renew_now {
            looked_at = Some(now);
        }
        let looking = std::mem::take(&mut renew_now);

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
        // Without a listener (not made yet, broken, or none to be had) a request may come
        // unannounced: looked for at each renewal, in a cluster too.
        let deaf = listening
            .as_ref()
            .is_none_or(|l| !l.up.load(Ordering::Relaxed));
        match backend.renew(give_up_at, looking || deaf) {
            Ok(Renewal::Extended {
                sent_at,
                replace_by,
            }) => {
                lease.renewed(sent_at);
                if let Some(by) = replace_by.filter(|_| !replace_told) {
                    replace_told = true;
                    // Heard: nothing more to listen for.
                    listening = None;
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

/// How a takeover's notices reach the renewal thread: one poke stands for all those that
/// come before the thread takes it (it clears `pending` first), so that a flood of them
/// queues nothing.
#[derive(Clone)]
struct Poke {
    pending: Arc<AtomicBool>,
    sender: Sender<()>,
}

impl Poke {
    /// Returns false once the renewal thread is gone.
    fn poke(&self) -> bool {
        self.pending.swap(true, Ordering::SeqCst) || self.sender.send(()).is_ok()
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

/// What the listening thread hears.
enum Heard {
    /// The subscription of that generation broke.
    Broken(u64, anyhow::Error),
    /// The renewal thread is done with it (`Listening` dropped).
    Stop,
}

/// The holder's takeover listener, on a thread of its own: subscribed to the holder's own
/// channel, where a `--replace` run's acquisition announces its request, each announcement
/// pokes the renewal thread. Made again when it breaks; ended when dropped. One connection
/// per holder (per node with Redlock), and its subscription's round trips.
struct Listening {
    /// Whether a subscription is up now.
    up: Arc<AtomicBool>,
    heard: Sender<Heard>,
}

impl Listening {
    fn start(listener: Box<dyn TakeoverListener>, poke: Poke) -> Option<Listening> {
        let up = Arc::new(AtomicBool::new(false));
        let (heard, hear) = mpsc::channel();
        let (up_there, heard_there) = (Arc::clone(&up), heard.clone());
        let started = std::thread::Builder::new()
            .name("takeover-listen".into())
            .spawn(move || listen_for_takeover(listener, &poke, &up_there, &heard_there, &hear));
        match started {
            Ok(_) => Some(Listening { up, heard }),
            Err(err) => {
                report::verbose(format_args!(
                    "not listening for a takeover (--replace), renewals will find it: {err}"
                ));
                None
            }
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.heard.send(Heard::Stop);
    }
}

/// Listens until told to stop, subscribing again after a pause whenever the subscription
/// breaks or cannot be made; gives up only where it never could be (a server without
/// SUBSCRIBE, an ACL that refuses the channel): then the renewals alone find a takeover.
fn listen_for_takeover(
    mut listener: Box<dyn TakeoverListener>,
    poke: &Poke,
    up: &AtomicBool,
    heard: &Sender<Heard>,
    hear: &Receiver<Heard>,
) {
    let mut pause = RELISTEN_MIN;
    let mut generation = 0u64;
    loop {
        generation += 1;
        let (poke_by, broke) = (poke.clone(), heard.clone());
        let this = generation;
        let sink = Box::new(move |notice: Notice| match notice {
            Notice::Released { by } if is_takeover_notice(&by) => poke_by.poke(),
            Notice::Released { .. } => true,
            Notice::Broken(err) => {
                let _ = broke.send(Heard::Broken(this, err));
                false
            }
        });
        let since = Instant::now();
        match listener.listen(sink) {
            Ok(subscription) => {
                up.store(true, Ordering::Relaxed);
                if generation > 1 {
                    // A request announced while nobody listened is read now.
                    let _ = poke.poke();
                }
                let broken = loop {
                    match hear.recv() {
                        Ok(Heard::Broken(of, err)) if of == generation => break err,
                        Ok(Heard::Broken(..)) => {}
                        Ok(Heard::Stop) | Err(_) => return,
                    }
                };
                up.store(false, Ordering::Relaxed);
                drop(subscription);
                if since.elapsed() >= RELISTEN_MAX {
                    pause = RELISTEN_MIN;
                }
                report::verbose(format_args!(
                    "the subscription for a takeover (--replace) broke, listening again in \
                     {}: {broken:#}",
                    report::duration(pause)
                ));
            }
            Err(err) if cannot_subscribe(&err) || is_refused_by_acl(&err) => {
                report::verbose(format_args!(
                    "not listening for a takeover (--replace), renewals will find it: {err:#}"
                ));
                return;
            }
            Err(err) => report::verbose(format_args!(
                "cannot listen for a takeover (--replace), trying again in {}: {err:#}",
                report::duration(pause)
            )),
        }
        let until = Instant::now() + pause;
        loop {
            match hear.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(Heard::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(Heard::Broken(..)) => {}
                Err(RecvTimeoutError::Timeout) => break,
            }
        }
        pause = (pause * 2).min(RELISTEN_MAX);
    }
}

/// The shared backend, for this thread alone until the guard drops. A poisoned mutex only
/// means another thread panicked, and a panic aborts this process.
pub fn lock_backend(backend: &SharedBackend) -> MutexGuard<'_, Box<dyn LockBackend>> {
    backend
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
