//! The one loop that decides, while the command runs, on the main thread: it waits on the
//! run's `Events` (signals, the command's exit and stops, the renewal thread's reports) with
//! its next deadline as the timeout, and acts on each, as this table says. It never talks to
//! Redis.
//!
//! | event                                   | action                                                |
//! |-----------------------------------------|-------------------------------------------------------|
//! | a forwarded signal (`Signal`)           | passed on to the command's group (see `signals.rs`), with `--stop-timeout` its budget started |
//! | the command stopped (`ChildStopped`)    | with the terminal lent: stop too, and on `fg` resume it if the lease still holds |
//! | the command's first process exited (`ChildExited`) | reap it, end what it left in its group, wait for that under the lease |
//! | SIGCHLD as PID 1 (`ChildrenChanged`)    | reap the orphans that died                            |
//! | a renewal (`Renewed`)                   | the lease's end moves; the guardian is told          |
//! | a lost lock (`LockLost`)                | terminate the command (SIGTERM, SIGKILL by the lease's end) |
//! | a takeover asked for (`ReplaceRequested`) | terminate the command as for `--max-runtime`       |
//! | deadline: the renewal thread is due     | start it (`Renewer::start_if_due`)                    |
//! | deadline: the lease's end (give-up time) | the lock is lost, unless the command ended in time   |
//! | deadline: `--max-runtime`, `--kill-after`, `--stop-timeout` | SIGTERM, then SIGKILL            |
//! | deadline: a look at what the command left | returns once its group is gone                     |
//!
//! Processes the command leaves in its group are waited out by this same loop, so the lease
//! is kept and watched (and the guardian told) meanwhile. Those that run as another user
//! (`sudo`, a setuid program) are out of reach of any signal: the loop says so and waits for
//! them for as long as they run, since releasing the lock then would let a second holder
//! start beside them. Those that outlive `SIGKILL` (stuck in the kernel) are left after
//! `UNKILLABLE_WAIT`, with a warning.
//!
//! With `--stop-timeout`, the first SIGTERM, SIGINT or SIGHUP that reaches redlock-run while
//! the command runs starts a budget: if the group is still there when it runs out, it is
//! killed, and the run ends as that signal would have ended it (`Ending::Stopped`). It is a
//! timer of this loop like `--kill-after`'s; the lease is renewed and watched meanwhile as
//! ever, so a lease that runs out first ends the command as a lost lock.
//!
//! A takeover asked for by a `--replace` run (the renewal thread reports it,
//! `Event::ReplaceRequested`) terminates the command as `--max-runtime` does
//! (`Ending::Replaced`, exit 77), and the lock is released only once the group is gone. The
//! first reason to end the command decides how the run ends: a takeover asked for once the
//! command is already being ended (a lost lock, `--max-runtime`, a stop signal) changes
//! nothing, and a stop signal after a takeover still starts `--stop-timeout`'s budget, which
//! may kill the group sooner than `--kill-after` would. A lost lock wins over all of them.
//!
//! As PID 1 of a container, orphans that come back to this process are reaped as they die
//! (SIGCHLD), so that none is left a zombie while the command runs.
//!
//! The loop, its deadlines and the decisions they share are here; what each kind of event
//! does is in a file of its own: `signal.rs` (signals, job control, `--stop-timeout`),
//! `renewal.rs` (renewals, takeovers, a lost lock), `ended.rs` (the command's end).

use std::io;
use std::process::ExitStatus;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::backend::Key;
use crate::event::{Event, Events, Loss};
use crate::lease::{self, Lease};
use crate::process::{Child, Guardian};
use crate::renew::Renewer;
use crate::report;
use crate::signals;

mod ended;
mod renewal;
mod signal;

pub struct Supervised {
    pub status: ExitStatus,
    pub ending: Ending,
    /// A terminating signal to redlock-run was passed on to the command (or the terminal
    /// delivered it) while it ran: however it then exited, it was told to stop, and its
    /// work is not recorded as done (`--once`).
    pub asked_to_stop: bool,
}

/// Why the command ended, as far as redlock-run had a hand in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// On its own, or of a signal we forwarded.
    Exited,
    /// Terminated because `--max-runtime` ran out.
    MaxRuntime,
    /// Terminated because the lock was lost (this wins over `MaxRuntime`), or found lost
    /// once it had ended, when it may have run on without the lock.
    LockLost,
    /// Killed because `--stop-timeout` ran out after redlock-run received `signal`.
    Stopped { signal: libc::c_int },
    /// Terminated because a `--replace` run asked to take over.
    Replaced,
}

/// How often to look whether processes the command left in its group have gone.
const LEFTOVER_POLL: Duration = Duration::from_millis(10);
/// The same, once they are known to be out of reach (they may run for hours).
const UNREACHABLE_POLL: Duration = Duration::from_millis(100);

/// The time limits the supervisor enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From SIGTERM to SIGKILL when the command is terminated.
    pub kill_after: Duration,
    pub max_runtime: Option<Duration>,
    /// From a terminating signal to redlock-run to SIGKILL (`--stop-timeout`).
    pub stop_timeout: Option<Duration>,
}

/// Supervises `child` until it and its process group are gone, keeping `lease` up to date
/// with the renewals reported and `guardian` told of each; starts `renewer`'s thread when it
/// is due.
pub fn supervise(
    child: &mut Child,
    guardian: Option<&Guardian>,
    events: &Events,
    renewer: &mut Renewer,
    lease: &mut Lease,
    key: &Key,
    limits: Limits,
) -> Result<Supervised> {
    let mut state = Supervisor {
        child,
        guardian,
        renewer,
        lease,
        key,
        limits,
        ending: Ending::Exited,
        kill_at: None,
        killed_at: None,
        stop: None,
        ended_by: None,
        runtime_ends: limits.max_runtime.map(|limit| Instant::now() + limit),
        reaped: None,
        told_unreachable: false,
        asked_to_stop: false,
    };
    loop {
        let event = match state.next_timer() {
            Some(at) => match events.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(event) => Some(event),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    state.timer_fired(Instant::now())
                }
            },
            None => Some(events.recv()),
        };
        if let Some(event) = event {
            // A deadline that passed before this event was heard is acted on first, so that
            // the order of the threads' reports cannot decide the outcome: after a pause of
            // this whole process, the command's death (at the guardian's hand) and the lost
            // lock arrive together, and the lease's end is what happened first. Renewals
            // are exempt: one that came in time moves the deadline. The command's exit is
            // dated first: when it ended, not when we heard of it, is what the lease is
            // held against.
            if let Event::ChildExited { at } = event {
                state.command_ended(at);
            }
            if !matches!(event, Event::Renewed { .. }) {
                if let Some(lost) = state.timer_fired(Instant::now()) {
                    state.handle(lost);
                }
            }
            state.handle(event);
        }
        if let Some(done) = state.finished()? {
            return Ok(done);
        }
    }
}

/// After the renewal thread has stopped: takes the renewals it reported after the loop
/// ended, so that `lease` is as the last successful renewal left it. Other events are of no
/// use any more.
pub fn catch_up(events: &Events, lease: &mut Lease) {
    for event in events.reports() {
        if let Event::Renewed { valid_until } = event {
            lease.renewed_until(valid_until);
        }
    }
}

/// The supervisor's state between events.
struct Supervisor<'a> {
    child: &'a mut Child,
    guardian: Option<&'a Guardian>,
    renewer: &'a mut Renewer,
    lease: &'a mut Lease,
    key: &'a Key,
    limits: Limits,
    ending: Ending,
    /// Once the command is being terminated: when SIGKILL is due, and when it was sent.
    kill_at: Option<Instant>,
    killed_at: Option<Instant>,
    /// Once a terminating signal started the `--stop-timeout` budget: the signal, and when
    /// the group is killed if it is still there.
    stop: Option<(libc::c_int, Instant)>,
    /// Once the command's first process has exited: a moment by which it had.
    ended_by: Option<Instant>,
    runtime_ends: Option<Instant>,
    /// Once the command's first process has exited: its status, while what it left in its
    /// group is ended.
    reaped: Option<Reaped>,
    /// Whether the user was told that the group's processes are out of reach.
    told_unreachable: bool,
    /// Whether a terminating signal to redlock-run was passed on to the command (or the
    /// terminal delivered it): a takeover asked for after that is left to it.
    asked_to_stop: bool,
}

/// The command's first process, reaped.
struct Reaped {
    status: io::Result<ExitStatus>,
    /// Whether it left processes in its group that it was not being told to end already.
    left_processes: bool,
}

impl Supervisor<'_> {
    /// The soonest deadline: SIGKILL due, --max-runtime, the renewal thread's start, or the
    /// lease's own end; and while processes the command left are ended, the next look at its
    /// group. The renewal thread reports a loss itself, but it may be stuck in a slow read
    /// (or not started); the lease is watched here as well, so that nothing in Redis I/O can
    /// delay the command's termination.
    fn next_timer(&self) -> Option<Instant> {
        // Once the command has ended, its lease has nothing more to protect, unless it left
        // processes in its group (they are waited for under the lease).
        let lease_ends = (self.ending != Ending::LockLost
            && (self.ended_by.is_none() || self.reaped.is_some()))
        .then(|| self.lease.give_up_at());
        let poll = if self.told_unreachable {
            UNREACHABLE_POLL
        } else {
            LEFTOVER_POLL
        };
        let look = self.reaped.as_ref().map(|_| Instant::now() + poll);
        [
            self.kill_at.filter(|_| self.killed_at.is_none()),
            self.stop
                .map(|(_, at)| at)
                .filter(|_| self.killed_at.is_none()),
            self.runtime_ends,
            lease_ends,
            look,
            self.renewer.starts_at(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Acts on whichever deadline has passed; a lease that ran out becomes a `LockLost`,
    /// unless the command had ended while it surely held.
    fn timer_fired(&mut self, now: Instant) -> Option<Event> {
        self.renewer.start_if_due(now);
        let lease_due = self.ending != Ending::LockLost && now >= self.lease.give_up_at();
        if lease_due && !self.ended_in_time(now) {
            let valid_until = self.lease.valid_until();
            if self.ended_by.unwrap_or(now) >= valid_until {
                // Not just late: past the lease's end, so this process could not act in
                // time (and the command may have run on past it).
                return Some(Event::LockLost(Loss::Expired {
                    ago: now.saturating_duration_since(valid_until),
                }));
            }
            return Some(Event::LockLost(Loss::Unconfirmed {
                last_error: String::from("the renewal did not return in time"),
            }));
        }
        self.stop_due(now);
        if let Some(runtime_end) = self.runtime_ends.filter(|&at| now >= at) {
            self.runtime_ends = None;
            // A command that ended before its --max-runtime, heard of late (this process was
            // stopped), is not terminated for it: what it left is ended when it is reaped.
            if self.ended_by.is_none() && self.reaped.is_none() && self.child.has_exited() {
                self.command_ended(now);
            }
            let ended_in_time = self.ended_by.is_some_and(|by| by < runtime_end);
            if self.kill_at.is_none() && !ended_in_time {
                let sent = self.child.terminate_group();
                self.kill_at = Some(now + self.limits.kill_after);
                self.ending = Ending::MaxRuntime;
                report::error_as(
                    report::LogEvent::MaxRuntime,
                    &anyhow::anyhow!(
                        "--max-runtime of {} reached; terminating the command \
                     (SIGTERM now, SIGKILL in {})",
                        report::duration(self.limits.max_runtime.unwrap_or_default()),
                        report::duration(self.limits.kill_after)
                    ),
                );
                told(libc::SIGTERM, sent);
            }
        } else if self.kill_at.is_some_and(|at| now >= at) && self.killed_at.is_none() {
            report::verbose(format_args!("sending SIGKILL to the command"));
            told(libc::SIGKILL, self.child.signal_group(libc::SIGKILL));
            self.killed_at = Some(now);
        }
        None
    }

    /// Reacts to one event.
    fn handle(&mut self, event: Event) {
        match event {
            Event::Signal {
                signal,
                from_terminal,
            } => self.forward(signal, from_terminal),
            Event::ChildStopped { signal } => self.stopped(signal),
            Event::Renewed { valid_until } => self.renewed(valid_until),
            Event::LockLost(loss) => self.reported_lost(loss),
            Event::ChildExited { .. } => self.exited(),
            Event::ChildrenChanged => self.child.reap_orphans(),
            Event::ReplaceRequested { by } => self.replace_requested(&by),
            Event::Notice(_) => {}
        }
    }

    /// When SIGKILL is due if the command is told to end now (or was told already): never
    /// past the lease's end, after which nothing keeps anyone else out (the guardian would
    /// do it otherwise).
    fn kill_due(&self, now: Instant) -> Instant {
        let lease_end = self.lease.valid_until().max(now);
        match self.kill_at {
            Some(due) => due.min(lease_end),
            None => lease::kill_deadline(now, self.limits.kill_after, lease_end),
        }
    }

    /// The command's first process has exited, by `heard_at` at the latest; the guardian,
    /// which runs while this process may be stopped, may have seen it earlier.
    fn command_ended(&mut self, heard_at: Instant) {
        let seen = self.guardian.and_then(Guardian::saw_exit);
        self.ended_by = [Some(heard_at), self.ended_by, seen]
            .into_iter()
            .flatten()
            .min();
    }

    /// Whether the command ended while the lease surely held: its first process (asked of
    /// the kernel too, as its SIGCHLD may be read late after a stop), and nothing it
    /// left in its group, which is waited for under the lease once the first is reaped.
    fn ended_in_time(&mut self, now: Instant) -> bool {
        if self.reaped.is_some() {
            // Only its leftovers keep the loop going: they run on, so nothing has ended.
            return false;
        }
        if self.ended_by.is_none() && self.child.has_exited() {
            self.command_ended(now);
        }
        self.ended_by
            .is_some_and(|by| by < self.lease.valid_until())
    }
}

/// Says so when a signal to the command's group reached none of it.
fn told(signal: libc::c_int, sent: io::Result<()>) {
    let Err(err) = sent else { return };
    let why = if err.raw_os_error() == Some(libc::EPERM) {
        " (its processes run as another user, such as under sudo; see docs/guide.md, \
         \"Signals and process groups\")"
    } else {
        ""
    };
    report::warn(format_args!(
        "cannot send {} to the command's process group: {err}{why}",
        signals::name(signal)
    ));
}
