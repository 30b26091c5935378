//! The one loop that decides, while the command runs. Threads only report (`Event`): the
//! signal thread, the child watcher, the renewal thread. This loop forwards signals, reacts
//! to a lost lock by terminating the command, and returns once the command and everything
//! left in its process group are gone. It never talks to Redis.

use std::process::ExitStatus;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::backend::Notice;
use crate::child::Child;
use crate::renew::{Loss, Renewer};
use crate::report;
use crate::signals;

/// What the reporting threads say.
pub enum Event {
    /// A signal arrived; `from_terminal` when the terminal driver generated it.
    Signal {
        signal: libc::c_int,
        from_terminal: bool,
    },
    /// The command's first process exited (not yet reaped).
    ChildExited,
    /// The command's first process was stopped, by `signal` (Ctrl-Z: SIGTSTP).
    ChildStopped { signal: libc::c_int },
    /// The renewal thread could not keep the lock.
    LockLost(Loss),
    /// A release notice (only while waiting for a busy lock).
    Notice(Notice),
}

pub struct Supervised {
    pub status: ExitStatus,
    pub ending: Ending,
}

/// Why the command ended, as far as redlock-run had a hand in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// On its own, or of a signal we forwarded.
    Exited,
    /// Terminated because `--max-runtime` ran out.
    MaxRuntime,
    /// Terminated because the lock was lost (this wins over `MaxRuntime`).
    LockLost,
}

/// The time limits the supervisor enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From SIGTERM to SIGKILL when the command is terminated.
    pub kill_after: Duration,
    pub max_runtime: Option<Duration>,
}

/// Supervises `child` until it and its process group are gone.
pub fn supervise(
    child: &mut Child,
    events: &Receiver<Event>,
    renewer: &Renewer,
    key: &str,
    limits: Limits,
) -> Result<Supervised> {
    let mut state = Supervisor {
        child,
        renewer,
        key,
        limits,
        ending: Ending::Exited,
        kill_at: None,
        killed: false,
        runtime_ends: limits.max_runtime.map(|limit| Instant::now() + limit),
    };
    loop {
        let event = match state.next_timer() {
            Some(at) => match events.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(event) => Some(event),
                Err(RecvTimeoutError::Timeout) => state.timer_fired(Instant::now()),
                Err(RecvTimeoutError::Disconnected) => unreachable_disconnect()?,
            },
            None => Some(events.recv().or_else(|_| unreachable_disconnect())?),
        };
        if let Some(done) = event
            .map(|event| state.handle(event))
            .transpose()?
            .flatten()
        {
            return Ok(done);
        }
    }
}

/// The supervisor's state between events.
struct Supervisor<'a> {
    child: &'a mut Child,
    renewer: &'a Renewer,
    key: &'a str,
    limits: Limits,
    ending: Ending,
    /// Once the command is being terminated: when SIGKILL is due, and whether it was sent.
    kill_at: Option<Instant>,
    killed: bool,
    runtime_ends: Option<Instant>,
}

impl Supervisor<'_> {
    /// The soonest deadline: SIGKILL due, --max-runtime, or the lease's own end. The renewal
    /// thread reports a loss itself, but it may be stuck in a slow read; the lease is watched
    /// here as well, so that nothing in Redis I/O can delay the command's termination.
    fn next_timer(&self) -> Option<Instant> {
        let lease_ends = (self.ending != Ending::LockLost).then(|| self.renewer.give_up_at());
        [
            self.kill_at.filter(|_| !self.killed),
            self.runtime_ends,
            lease_ends,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Acts on whichever deadline has passed; a lease that ran out becomes a `LockLost`.
    fn timer_fired(&mut self, now: Instant) -> Option<Event> {
        if self.ending != Ending::LockLost && now >= self.renewer.give_up_at() {
            return Some(Event::LockLost(Loss::Unconfirmed {
                last_error: String::from("the renewal did not return in time"),
            }));
        }
        if self.runtime_ends.is_some_and(|at| now >= at) {
            self.runtime_ends = None;
            if self.kill_at.is_none() {
                self.child.terminate_group();
                self.kill_at = Some(now + self.limits.kill_after);
                self.ending = Ending::MaxRuntime;
                report::error(&anyhow::anyhow!(
                    "--max-runtime of {} reached; terminating the command \
                     (SIGTERM now, SIGKILL in {})",
                    report::duration(self.limits.max_runtime.unwrap_or_default()),
                    report::duration(self.limits.kill_after)
                ));
            }
        } else if self.kill_at.is_some_and(|at| now >= at) && !self.killed {
            report::verbose(format_args!("sending SIGKILL to the command"));
            self.child.signal_group(libc::SIGKILL);
            self.killed = true;
        }
        None
    }

    /// Reacts to one event; `Some` once the command and its group are gone.
    fn handle(&mut self, event: Event) -> Result<Option<Supervised>> {
        match event {
            Event::Signal {
                signal,
                from_terminal,
            } => self.forward(signal, from_terminal),
            Event::ChildStopped { signal } => self.stopped(signal),
            Event::LockLost(loss) => self.lost(loss),
            Event::ChildExited => return self.exited().map(Some),
            Event::Notice(_) => {}
        }
        Ok(None)
    }

    fn forward(&mut self, signal: libc::c_int, from_terminal: bool) {
        if from_terminal && self.child.has_terminal() {
            report::verbose(format_args!(
                "{} came from the terminal, which delivered it to the command already",
                signals::name(signal)
            ));
        } else {
            report::verbose(format_args!(
                "forwarding {} to the command",
                signals::name(signal)
            ));
            self.child.signal_group(signal);
            // A stopped command would keep a terminating signal pending for ever.
            if matches!(
                signal,
                libc::SIGINT | libc::SIGTERM | libc::SIGHUP | libc::SIGQUIT
            ) {
                self.child.signal_group(libc::SIGCONT);
            }
        }
    }

    fn stopped(&mut self, signal: libc::c_int) {
        if self.kill_at.is_some() {
            return;
        }
        if !self.child.lends_terminal() {
            if matches!(signal, libc::SIGTTIN | libc::SIGTTOU) {
                report::warn(format_args!(
                    "the command is stopped by {}: it tried to use a terminal that belongs \
                     to another process group; it keeps the lock until it is continued or \
                     ended (a signal to redlock-run ends it)",
                    signals::name(signal)
                ));
            }
            return;
        }
        self.child.stop_with_command();
        // Continued. While we were stopped nothing renewed the lease: resume the command
        // only if the lease still holds; the renewal thread, running again, renews at once.
        if Instant::now() >= self.renewer.valid_until() {
            report::error(&anyhow::anyhow!(
                "lock lost: {} expired while the command was stopped; killing it",
                self.key
            ));
            self.child.signal_group(libc::SIGKILL);
            self.kill_at = Some(Instant::now());
            self.killed = true;
            self.ending = Ending::LockLost;
        } else {
            self.child.resume();
        }
    }

    fn lost(&mut self, loss: Loss) {
        if self.ending == Ending::LockLost {
            return;
        }
        self.ending = Ending::LockLost;
        let now = Instant::now();
        let key = self.key;
        let why = match loss {
            Loss::NotOurs => format!("{key} is gone from Redis or now held by someone else"),
            Loss::Unconfirmed { last_error } => {
                format!("Redis did not confirm {key} in time ({last_error})")
            }
        };
        // Past the lease's end nothing keeps anyone else out: SIGKILL by then at the latest
        // (the guardian would do it otherwise).
        let due = self.kill_at.unwrap_or(now + self.limits.kill_after);
        let at = due.min(self.renewer.valid_until().max(now));
        // Signal first: reporting could block on a full stderr pipe.
        self.child.terminate_group();
        self.kill_at = Some(at);
        report::error(&anyhow::anyhow!(
            "lock lost: {why}; terminating the command (SIGTERM now, SIGKILL in {})",
            report::duration(at.saturating_duration_since(now))
        ));
    }

    fn exited(&mut self) -> Result<Supervised> {
        // Even when the status cannot be had, the group is ended before anything else.
        let status = self.child.reap();
        // Past the lease's end nothing keeps anyone else out: leftovers are killed by then.
        let leftovers_kill_at = self
            .kill_at
            .unwrap_or_else(|| Instant::now() + self.limits.kill_after)
            .min(self.renewer.valid_until());
        if self.child.end_leftovers(leftovers_kill_at) && self.kill_at.is_none() {
            report::warn(format_args!(
                "the command left processes running in its process group; \
                 terminated them before releasing the lock"
            ));
        }
        self.child.return_terminal();
        let status = status.context("cannot collect the command's status")?;
        report::verbose(format_args!("command ended: {status}"));
        Ok(Supervised {
            status,
            ending: self.ending,
        })
    }
}

/// The signal thread holds a sender for the whole run, so the channel cannot close.
fn unreachable_disconnect<T>() -> Result<T> {
    anyhow::bail!("internal error: the event channel closed")
}
