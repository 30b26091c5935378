//! The one loop's inputs: the event type it handles, and `Events`, where it waits for the
//! next one. A run's loop is its main thread: `wait.rs` runs it while the lock is busy,
//! `supervise.rs` while the command runs. It polls, in one `ppoll`, the run's signals (a
//! `signalfd`, `signals.rs`), which also say when the command exits or stops (SIGCHLD), and
//! an eventfd on which the few threads a run may start (the renewal thread once the first
//! renewal is due, a subscription's reader while waiting) say they have sent a report
//! (`Reporter`). While a waiter waits, it polls the subscription's socket too, where no
//! thread reads it (`listen_to`): a release notice is then read on the loop's own thread,
//! and the attempt it calls for is sent from there at once. Deadlines (renewals due, the
//! lease's end, `--kill-after`) are the poll's timeout. Nothing here decides: events come
//! out in the order they are read, signals before notices before reports.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SendError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::backend::{Notice, NoticeSource};
use crate::process::{self, ChildChange};
use crate::signals::Signals;

/// What the loop hears.
pub enum Event {
    /// A signal arrived; `from_terminal` when the terminal driver generated it.
    Signal {
        signal: libc::c_int,
        from_terminal: bool,
    },
    /// The command's first process exited (not yet reaped), by `at` at the latest: when
    /// the loop read its SIGCHLD, which may be long after if this process was stopped.
    ChildExited { at: Instant },
    /// A child of this process changed state (SIGCHLD): an orphan of the command's that
    /// came back to this process may wait to be reaped.
    ChildrenChanged,
    /// The command's first process was stopped, by `signal` (Ctrl-Z: SIGTSTP).
    ChildStopped { signal: libc::c_int },
    /// A renewal succeeded: the lease now surely holds until `valid_until`.
    Renewed { valid_until: Instant },
    /// The renewal thread could not keep the lock.
    LockLost(Loss),
    /// A release notice (only while waiting for a busy lock).
    Notice(Notice),
    /// A `--replace` run asked to take over (with Redlock, on a majority of the nodes):
    /// `by` is its lock value, without a fence.
    ReplaceRequested { by: Vec<u8> },
}

/// Why the lock was lost.
#[derive(Debug, Clone)]
pub enum Loss {
    /// Redis answered: the key is gone or holds someone else's value.
    NotOurs,
    /// Redis did not confirm in time; the lease is running out.
    Unconfirmed { last_error: String },
    /// The lease's end passed `ago` before this process could act on it (it was stopped,
    /// or starved of CPU): someone else may have held the lock since.
    Expired { ago: Duration },
    /// The guardian killed the command at the lease's end as it knew it, while this
    /// process could not act.
    Guardian,
}

/// Where the loop waits for its next event.
pub struct Events {
    signals: Signals,
    /// Written to (a count) by a `Reporter` after each report.
    wake: Arc<OwnedFd>,
    reports: Receiver<Event>,
    reporter: Sender<Event>,
    /// Read from the descriptors, not handed out yet.
    read: RefCell<VecDeque<Event>>,
    /// Whether the signals' descriptor was looked at since a report was last handed out.
    looked: Cell<bool>,
    /// The command's first process, until its exit has been reported.
    child: Cell<Option<libc::pid_t>>,
    /// Whether orphans are to be reaped as they die (redlock-run is PID 1).
    orphans: bool,
    /// A subscription that the loop reads itself, while a waiter listens.
    notices: RefCell<Option<Box<dyn NoticeSource>>>,
}

/// A thread's way to report to the loop. Cloned for each thread.
#[derive(Clone)]
pub struct Reporter {
    reports: Sender<Event>,
    wake: Arc<OwnedFd>,
}

impl Reporter {
    /// Reports `event` and wakes the loop. Fails only when the loop has ended.
    pub fn send(&self, event: Event) -> Result<(), SendError<Event>> {
        self.reports.send(event)?;
        let one = 1u64;
        // SAFETY: writes the 8 bytes of `one` to an eventfd this value keeps open. It cannot
        // block (EFD_NONBLOCK) and cannot fail short of the counter's overflow, which only
        // means the loop has plenty to wake for already.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                std::ptr::addr_of!(one).cast(),
                std::mem::size_of::<u64>(),
            );
        }
        Ok(())
    }
}

impl Events {
    /// The loop's inputs, with `signals` (see `signals::listen`). With `orphans` (PID 1),
    /// each SIGCHLD is reported as `Event::ChildrenChanged` too.
    pub fn new(signals: Signals, orphans: bool) -> Result<Events> {
        // SAFETY: eventfd makes a new descriptor, whose ownership passes to the OwnedFd.
        let wake = unsafe {
            let fd = libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error()).context("cannot make an eventfd");
            }
            OwnedFd::from_raw_fd(fd)
        };
        let (reporter, reports) = mpsc::channel();
        Ok(Events {
            signals,
            wake: Arc::new(wake),
            reports,
            reporter,
            read: RefCell::default(),
            looked: Cell::new(false),
            child: Cell::new(None),
            orphans,
            notices: RefCell::default(),
        })
    }

    /// For a thread that reports to the loop.
    pub fn reporter(&self) -> Reporter {
        Reporter {
            reports: self.reporter.clone(),
            wake: Arc::clone(&self.wake),
        }
    }

    /// From now on, release notices come from `source` too, read on this thread, until
    /// `stop_listening` or the subscription's end (`Notice::Broken`, the last it gives).
    /// What it has already read is looked at now.
    pub fn listen_to(&self, source: Box<dyn NoticeSource>) {
        *self.notices.borrow_mut() = Some(source);
        self.read_notices();
    }

    /// Ends the subscription given to `listen_to`, if it has not ended.
    pub fn stop_listening(&self) {
        self.notices.borrow_mut().take();
    }

    /// From now on, the exit (`Event::ChildExited`, once) and stops of the command's first
    /// process `pid`, a child of this process, are events. A change before this call is
    /// not lost: its SIGCHLD waits in the descriptor.
    pub fn watch_child(&self, pid: libc::pid_t) {
        self.child.set(Some(pid));
    }

    /// The next event, waiting at most `timeout` for it. Never `Disconnected`: the loop
    /// keeps a sender of its own.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Event, RecvTimeoutError> {
        self.next(Some(Instant::now() + timeout))
            .ok_or(RecvTimeoutError::Timeout)
    }

    /// The next event, however long it takes.
    pub fn recv(&self) -> Event {
        loop {
            if let Some(event) = self.next(None) {
                return event;
            }
        }
    }

    /// The events that have come, without waiting.
    pub fn try_iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.read_signals();
        self.looked.set(true);
        std::iter::from_fn(|| self.ready())
    }

    /// The reports threads have sent, without waiting and without a system call; signals
    /// are left where they are.
    pub fn reports(&self) -> impl Iterator<Item = Event> + '_ {
        self.reports.try_iter()
    }

    fn ready(&self) -> Option<Event> {
        if let Some(event) = self.read.borrow_mut().pop_front() {
            return Some(event);
        }
        let report = self.reports.try_recv().ok()?;
        // A report handed out without a wait in `ppoll` since the last one (they keep
        // coming: a stream of release notices) would keep a signal waiting behind it for
        // as long as they come: the signals are read first. Otherwise the `ppoll` that woke
        // the loop for this report has looked already, and this costs nothing.
        if !self.looked.replace(false) {
            self.read_signals();
            let mut read = self.read.borrow_mut();
            if let Some(first) = read.pop_front() {
                read.push_back(report);
                return Some(first);
            }
        }
        Some(report)
    }

    /// The next event, or `None` once `deadline` has passed.
    fn next(&self, deadline: Option<Instant>) -> Option<Event> {
        loop {
            if let Some(event) = self.ready() {
                return Some(event);
            }
            let timeout = match deadline {
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    Some(left)
                }
                None => None,
            };
            if self.notices_read_already() {
                self.read_notices();
                continue;
            }
            let [signals, wake, notices] = self.poll(timeout);
            self.looked.set(true);
            if signals {
                self.read_signals();
            }
            if notices {
                self.read_notices();
            }
            if wake {
                let mut count = 0u64;
                // SAFETY: reads 8 bytes into `count` from the eventfd, which resets it; it
                // cannot block (EFD_NONBLOCK).
                unsafe {
                    libc::read(
                        self.wake.as_raw_fd(),
                        std::ptr::addr_of_mut!(count).cast(),
                        std::mem::size_of::<u64>(),
                    );
                }
            }
        }
    }

    /// Waits until the signals' descriptor, the wake-up's or the subscription's is
    /// readable, or `timeout`.
    fn poll(&self, timeout: Option<Duration>) -> [bool; 3] {
        let notices = self.notices.borrow().as_ref().map(|source| source.fd());
        let mut fds = [
            self.signals.as_raw_fd(),
            self.wake.as_raw_fd(),
            notices.unwrap_or(-1),
        ]
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        let count: libc::nfds_t = if notices.is_some() { 3 } else { 2 };
        let timespec = timeout.map(|left| libc::timespec {
            // At most i32::MAX seconds (68 years), which fits time_t whatever its width on
            // the target (musl deprecates naming the type).
            tv_sec: i32::try_from(left.as_secs()).unwrap_or(i32::MAX).into(),
            tv_nsec: libc::c_long::from(left.subsec_nanos()),
        });
        let timespec_ptr = timespec.as_ref().map_or(std::ptr::null(), |timespec| {
            timespec as *const libc::timespec
        });
        // SAFETY: `fds` and the timespec live on this frame, and `count` is at most its
        // length; a null signal mask leaves the mask alone. An error (EINTR after a stop)
        // is taken as a wake-up: the caller looks.
        let ready = unsafe { libc::ppoll(fds.as_mut_ptr(), count, timespec_ptr, std::ptr::null()) };
        if ready <= 0 {
            return [false, false, false];
        }
        // A hang-up or an error counts as readable: the read says what happened.
        fds.map(|fd| fd.revents != 0)
    }

    /// Whether the subscription holds a notice read off its socket by a command sent over
    /// it (see `NoticeSource::has_read`): the socket's poll would not say so.
    fn notices_read_already(&self) -> bool {
        self.notices
            .borrow()
            .as_ref()
            .is_some_and(|source| source.has_read())
    }

    /// Turns what the subscription has read into an event; forgets a subscription that
    /// has ended.
    fn read_notices(&self) {
        let mut notices = self.notices.borrow_mut();
        let Some(source) = notices.as_mut() else {
            return;
        };
        let Some(notice) = source.read() else {
            return;
        };
        if matches!(notice, Notice::Broken(_)) {
            notices.take();
        }
        self.read.borrow_mut().push_back(Event::Notice(notice));
    }

    /// Turns the pending signals into events.
    fn read_signals(&self) {
        for received in self.signals.read() {
            if received.signal != libc::SIGCHLD {
                self.read.borrow_mut().push_back(Event::Signal {
                    signal: received.signal,
                    from_terminal: received.from_terminal,
                });
                continue;
            }
            if let Some(pid) = self.child.get() {
                for change in process::changes(pid) {
                    let event = match change {
                        ChildChange::Stopped { signal } => Event::ChildStopped { signal },
                        ChildChange::Exited => {
                            self.child.set(None);
                            Event::ChildExited { at: Instant::now() }
                        }
                    };
                    self.read.borrow_mut().push_back(event);
                }
            }
            if self.orphans {
                self.read.borrow_mut().push_back(Event::ChildrenChanged);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals;

    fn events() -> (Events, Vec<libc::c_int>) {
        // Blocks the run's signals in this test's thread only.
        let (signals, listened) = signals::listen().expect("a signalfd");
        (Events::new(signals, false).expect("an eventfd"), listened)
    }

    #[test]
    fn a_report_from_a_thread_wakes_the_loop() {
        let (events, _) = events();
        let reporter = events.reporter();
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            assert!(reporter.send(Event::ChildrenChanged).is_ok());
        });
        let event = events.recv_timeout(Duration::from_secs(10));
        assert!(matches!(event, Ok(Event::ChildrenChanged)));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "woken, not timed out"
        );
        thread.join().unwrap();
        // The wake-up was consumed with the report: nothing more comes.
        assert!(events.try_iter().next().is_none());
    }

    /// A subscription whose messages are lines of text on a socket.
    struct Lines(std::os::unix::net::UnixStream);

    impl NoticeSource for Lines {
        fn fd(&self) -> std::os::fd::RawFd {
            self.0.as_raw_fd()
        }

        fn read(&mut self) -> Option<Notice> {
            use std::io::Read;
            let mut text = [0; 64];
            match self.0.read(&mut text) {
                Ok(0) => Some(Notice::Broken(anyhow::anyhow!("closed"))),
                Ok(n) => Some(Notice::Released {
                    by: String::from_utf8_lossy(&text[..n]).into_owned(),
                }),
                Err(_) => None,
            }
        }
    }

    #[test]
    fn a_polled_subscription_is_read_on_the_loops_own_thread() {
        use std::io::Write;
        let (events, _) = events();
        let (ours, mut server) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        events.listen_to(Box::new(Lines(ours)));
        server.write_all(b"t#1").unwrap();
        let event = events.recv_timeout(Duration::from_secs(10));
        assert!(matches!(event, Ok(Event::Notice(Notice::Released { by })) if by == "t#1"));
        // Its end is the last it gives: the socket is not polled after that.
        drop(server);
        let event = events.recv_timeout(Duration::from_secs(10));
        assert!(matches!(event, Ok(Event::Notice(Notice::Broken(_)))));
        assert!(events.notices.borrow().is_none());
        assert!(matches!(
            events.recv_timeout(Duration::from_millis(20)),
            Err(RecvTimeoutError::Timeout)
        ));
    }

    #[test]
    fn a_signal_is_not_kept_waiting_behind_reports_that_keep_coming() {
        let (events, listened) = events();
        let Some(&signal) = listened.iter().find(|&&s| s == libc::SIGUSR1) else {
            return;
        };
        // A report waits (as under a stream of release notices, one always does when the
        // loop looks), and then a signal comes.
        events.reporter().send(Event::ChildrenChanged).ok();
        // SAFETY: a signal to this thread, which blocks it: it waits in the signalfd.
        unsafe {
            libc::pthread_kill(libc::pthread_self(), signal);
        }
        let first = events.recv_timeout(Duration::from_secs(10));
        assert!(
            matches!(first, Ok(Event::Signal { signal: got, .. }) if got == signal),
            "the signal first, then the report"
        );
        assert!(matches!(
            events.recv_timeout(Duration::ZERO),
            Ok(Event::ChildrenChanged)
        ));
    }

    #[test]
    fn a_deadline_is_a_timeout() {
        let (events, _) = events();
        let started = Instant::now();
        let event = events.recv_timeout(Duration::from_millis(30));
        assert!(matches!(event, Err(RecvTimeoutError::Timeout)));
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert!(matches!(
            events.recv_timeout(Duration::ZERO),
            Err(RecvTimeoutError::Timeout)
        ));
    }

    #[test]
    fn a_signal_is_an_event_with_its_origin() {
        let (events, listened) = events();
        // SIGUSR1, unless the caller of the tests ignores it.
        let Some(&signal) = listened.iter().find(|&&s| s == libc::SIGUSR1) else {
            return;
        };
        // SAFETY: a signal to this thread, which blocks it: it waits in the signalfd.
        unsafe {
            libc::pthread_kill(libc::pthread_self(), signal);
        }
        let event = events.recv_timeout(Duration::from_secs(10));
        assert!(
            matches!(
                event,
                Ok(Event::Signal {
                    signal: got,
                    from_terminal: false
                }) if got == signal
            ),
            "sent by a process, not the terminal"
        );
        // Read before the reports: a signal and a report that came together.
        events.reporter().send(Event::ChildrenChanged).ok();
        // SAFETY: as above.
        unsafe {
            libc::pthread_kill(libc::pthread_self(), signal);
        }
        let order: Vec<Event> = events.try_iter().collect();
        assert!(matches!(
            order.as_slice(),
            [Event::Signal { .. }, Event::ChildrenChanged]
        ));
    }
}
