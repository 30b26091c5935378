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
    /// The command's first process was stopped (Ctrl-Z).
    ChildStopped,
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
    let mut ending = Ending::Exited;
    // Once the command is being terminated: when SIGKILL is due, and whether it was sent.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut runtime_ends = limits.max_runtime.map(|limit| Instant::now() + limit);
    loop {
        let timer = [kill_at.filter(|_| !killed), runtime_ends]
            .into_iter()
            .flatten()
            .min();
        let event = match timer {
            Some(at) => match events.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    if runtime_ends.is_some_and(|at| now >= at) {
                        runtime_ends = None;
                        if kill_at.is_none() {
                            report::error(&anyhow::anyhow!(
                                "--max-runtime of {} reached; terminating the command \
                                 (SIGTERM now, SIGKILL in {})",
                                report::duration(limits.max_runtime.unwrap_or_default()),
                                report::duration(limits.kill_after)
                            ));
                            child.terminate_group();
                            kill_at = Some(now + limits.kill_after);
                            ending = Ending::MaxRuntime;
                        }
                    } else if kill_at.is_some_and(|at| now >= at) && !killed {
                        report::verbose(format_args!("sending SIGKILL to the command"));
                        child.signal_group(libc::SIGKILL);
                        killed = true;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => unreachable_disconnect()?,
            },
            None => match events.recv() {
                Ok(event) => event,
                Err(_) => unreachable_disconnect()?,
            },
        };
        match event {
            Event::Signal {
                signal,
                from_terminal,
            } => {
                if from_terminal && child.has_terminal() {
                    report::verbose(format_args!(
                        "{} came from the terminal, which delivered it to the command already",
                        signals::name(signal)
                    ));
                } else {
                    report::verbose(format_args!(
                        "forwarding {} to the command",
                        signals::name(signal)
                    ));
                    child.signal_group(signal);
                }
            }
            Event::ChildStopped => {
                if !child.lends_terminal() || kill_at.is_some() {
                    continue;
                }
                child.stop_with_command();
                // Continued. While we were stopped nothing renewed the lease: resume the
                // command only if the lease still holds; the renewal thread, now running
                // again, renews at once.
                if Instant::now() >= renewer.valid_until() {
                    report::error(&anyhow::anyhow!(
                        "lock lost: {key} expired while the command was stopped; killing it"
                    ));
                    child.signal_group(libc::SIGKILL);
                    kill_at = Some(Instant::now());
                    killed = true;
                    ending = Ending::LockLost;
                } else {
                    child.resume();
                }
            }
            Event::LockLost(loss) => {
                if ending == Ending::LockLost {
                    continue;
                }
                ending = Ending::LockLost;
                let now = Instant::now();
                let (why, latest_kill) = match loss {
                    Loss::NotOurs => (
                        format!("{key} is gone from Redis or now held by someone else"),
                        None,
                    ),
                    Loss::Unconfirmed {
                        valid_until,
                        last_error,
                    } => (
                        format!("Redis did not confirm {key} in time ({last_error})"),
                        Some(valid_until),
                    ),
                };
                let due = kill_at.unwrap_or(now + limits.kill_after);
                let at = latest_kill.map_or(due, |latest| latest.min(due));
                report::error(&anyhow::anyhow!(
                    "lock lost: {why}; terminating the command (SIGTERM now, SIGKILL in {})",
                    report::duration(at.saturating_duration_since(now))
                ));
                child.terminate_group();
                kill_at = Some(at);
            }
            Event::ChildExited => {
                let status = child
                    .reap()
                    .context("cannot collect the command's status")?;
                report::verbose(format_args!("command ended: {status}"));
                let leftovers_kill_at =
                    kill_at.unwrap_or_else(|| Instant::now() + limits.kill_after);
                if child.end_leftovers(leftovers_kill_at) && kill_at.is_none() {
                    report::warn(format_args!(
                        "the command left processes running in its process group; \
                         terminated them before releasing the lock"
                    ));
                }
                child.return_terminal();
                return Ok(Supervised { status, ending });
            }
            Event::Notice(_) => {}
        }
    }
}

/// The signal thread holds a sender for the whole run, so the channel cannot close.
fn unreachable_disconnect<T>() -> Result<T> {
    anyhow::bail!("internal error: the event channel closed")
}
