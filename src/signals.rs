//! Receives the signals redlock-run forwards and reports each, with its origin, to the
//! supervisor as an event. It decides nothing.
//!
//! | signal                          | while waiting for the lock | while the command runs                |
//! |---------------------------------|----------------------------|---------------------------------------|
//! | INT, TERM, HUP, QUIT, USR1, USR2 sent with `kill` | abort the wait: exit 128+N, nothing run | forwarded to the command's process group (INT, TERM, HUP and QUIT followed by CONT, so that a stopped command can act on them); with `--stop-timeout`, the first INT, TERM or HUP starts its budget |
//! | any of those, ignored by the caller (`nohup`) | stays ignored | stays ignored, by the command too |
//! | INT, QUIT typed at the terminal | abort the wait             | reach the command's group directly once it holds the terminal (redlock-run then never hears them); one typed before the hand-over reached only redlock-run, which forwards it |
//! | HUP from a hangup of the terminal | abort the wait           | not forwarded when the command's group holds the terminal: the hangup signalled that group already |
//! | TSTP (Ctrl-Z), TTIN, TTOU, WINCH | default action           | reach the command's group from the terminal directly; when the command stops, redlock-run stops too and resumes it on `fg` |
//! | PIPE                            | ignored (Rust's default)   | the command's own default applies     |
//! | CHLD                            | default (nothing)          | as PID 1 of a container: orphans, which all come back to redlock-run, are reaped as they die; otherwise the default, and what the command left in its group is reaped when it ends |
//! | KILL                            | redlock-run dies; the key expires by its TTL | the guardian process (see `process/guardian.rs`) sends the command's group SIGTERM, then SIGKILL by the lease's end; the key expires by its TTL |
//!
//! The origin matters for the terminal row: `Cause::Kernel` marks a signal the terminal
//! driver generated, `Cause::Sent` one that a process sent with `kill`.
//!
//! The man page's SIGNALS section says this table in words (`SIGNALS` in
//! `tests/integration/completions.rs`): a change of policy here changes it there.

use std::sync::mpsc::Sender;

use anyhow::{Context, Result};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;

use crate::event::Event;

pub const FORWARDED: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Starts listening, and returns the signals it listens for: those of `FORWARDED` that the
/// caller did not ignore. A signal ignored on the way in (`nohup`, `trap '' HUP`, the
/// background jobs of a non-interactive shell) stays ignored, for redlock-run and, since an
/// ignored signal survives exec, for the command. Call before anything else happens, so
/// that no signal is missed.
///
/// With `children` (redlock-run is PID 1), SIGCHLD is reported too, as
/// `Event::ChildrenChanged`, so that orphans are reaped as they die. Only then: every
/// other run has an init that reaps what escapes the command's group, and the command's own
/// group is reaped when it ends; the extra wake-ups cost a run about 0.1 ms.
pub fn listen(events: Sender<Event>, children: bool) -> Result<Vec<libc::c_int>> {
    let listened: Vec<libc::c_int> = FORWARDED
        .into_iter()
        .filter(|&signal| !is_ignored(signal))
        .collect();
    // SIGCHLD is no signal of the command's: it is not returned. (Never ignored: that would
    // let the kernel reap the command behind our back.)
    let chld = children.then_some(libc::SIGCHLD);
    let mut signals = SignalsInfo::<WithOrigin>::new(listened.iter().copied().chain(chld))
        .context("cannot install signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                let event = if origin.signal == libc::SIGCHLD {
                    Event::ChildrenChanged
                } else {
                    Event::Signal {
                        signal: origin.signal,
                        from_terminal: matches!(origin.cause, Cause::Kernel),
                    }
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        })
        .context("cannot start the signal thread")?;
    if children {
        block_sigchld();
    }
    Ok(listened)
}

/// Blocks SIGCHLD in the calling thread, and so in every thread it starts from now on: the
/// kernel then hands it to the signal thread. A handler that ran on another thread would cut
/// short a read from Redis there (a socket read with a timeout is never restarted, whatever
/// `SA_RESTART` says), and children exit at any time (the guardian, orphans). The command
/// and the guardian unblock every signal before they run.
fn block_sigchld() {
    // SAFETY: the set lives on this frame and sigemptyset initialises it before
    // pthread_sigmask reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn is_ignored(signal: libc::c_int) -> bool {
    // SAFETY: an all-zero sigaction is a valid value for sigaction to overwrite; a null
    // new action only reads the current one.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}

/// The signal's name for messages, e.g. `SIGTERM`.
pub fn name(signal: libc::c_int) -> String {
    signal_hook::low_level::signal_name(signal)
        .map_or_else(|| format!("signal {signal}"), str::to_string)
}
