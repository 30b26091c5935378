//! How a run ends, the one table that turns that into a process exit status, and the one
//! place the process ends: [`Outcome::exit`]. README's "Exit codes" section and
//! `cli::AFTER_HELP` document this table; `tests/integration/docs.rs` keeps the three in
//! step.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};

/// Why redlock-run stops.
#[derive(Debug)]
pub enum Outcome {
    /// The command ran and ended on its own (or of a signal we forwarded). `lent_terminal`:
    /// its process group had the terminal (so a Ctrl-C reached it, not us).
    Command {
        status: ExitStatus,
        lent_terminal: bool,
    },
    /// The lock was busy and `--no-wait` was given, or `--wait` ran out.
    NotAcquired { exit_code: u8 },
    /// The lock was lost while the command ran; the command was terminated, or had ended
    /// before the loss was seen (by the release).
    LockLost,
    /// `--max-runtime` ran out; the command was terminated.
    MaxRuntime,
    /// Exit 77, nothing went wrong: `--supersede`, a newer superseding run started waiting
    /// and the command never ran; or `--replace`, another run took over, the command was
    /// terminated and the lock handed on.
    Superseded,
    /// A signal arrived before the command started, and nothing was run; or, with
    /// `--stop-timeout`, while it ran, and its group had to be killed when that ran out.
    Interrupted { signal: i32 },
    /// The command could not be executed (permission, not a binary).
    CannotExecute,
    /// The command was not found.
    NotFound,
    /// redlock-run itself failed before the command ran: usage, Redis, auth, TLS.
    Failed,
    /// `--once`, `--once-per`: a run of the key already did the work; the command did not
    /// run.
    AlreadyDone,
    /// `status`: held; `list`, `release`: done.
    Done,
    /// `status`: the lock is free; `release`: there was nothing to release.
    Free,
}

pub const LOCK_LOST: u8 = 76;
/// Superseded (`--supersede`) or replaced (`--replace`): the run gave way to another one,
/// and nothing went wrong, so CI may allow it (sysexits leaves 77 to "permission denied",
/// which a lock tool never reports).
pub const SUPERSEDED: u8 = 77;
/// As timeout(1) reports a command it stopped.
pub const MAX_RUNTIME: u8 = 124;
pub const WRAPPER_FAILED: u8 = 125;
pub const CANNOT_EXECUTE: u8 = 126;
pub const NOT_FOUND: u8 = 127;

impl Outcome {
    /// Ends the run: the exit status to return from `main`. A run that a SIGINT ended (the
    /// command died of one, or one came before the command ran) ends by SIGINT itself
    /// instead, as the command would have: a calling shell then stops its loop or script as
    /// it would have for the command.
    pub fn exit(self) -> ExitCode {
        crate::report::flush();
        match self {
            Outcome::Interrupted {
                signal: libc::SIGINT,
            } => end_by_sigint(false),
            Outcome::Command {
                status,
                lent_terminal,
            } if status.signal() == Some(libc::SIGINT) => end_by_sigint(lent_terminal),
            _ => {}
        }
        ExitCode::from(self.exit_code())
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Command { status, .. } => status_code(*status),
            Outcome::NotAcquired { exit_code } => *exit_code,
            Outcome::LockLost => LOCK_LOST,
            Outcome::MaxRuntime => MAX_RUNTIME,
            Outcome::Superseded => SUPERSEDED,
            Outcome::Interrupted { signal } => signal_code(*signal),
            Outcome::CannotExecute => CANNOT_EXECUTE,
            Outcome::NotFound => NOT_FOUND,
            Outcome::Failed => WRAPPER_FAILED,
            Outcome::AlreadyDone | Outcome::Done => 0,
            Outcome::Free => 1,
        }
    }
}

/// The shell's convention: the exit status, or 128+N for a child that died of signal N.
pub fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => signal_code(signal),
        // Stopped or continued statuses are never handed to us as a final status.
        (None, None) => WRAPPER_FAILED,
    }
}

fn signal_code(signal: i32) -> u8 {
    (128 + signal).clamp(0, 255) as u8
}

/// Ends redlock-run by SIGINT (bash stops a loop or script only for a child that died of
/// SIGINT while bash saw a SIGINT too). With `whole_job`, the SIGINT goes to redlock-run's
/// process group, which is what the terminal would have done had it not been lent to the
/// command; otherwise only to redlock-run itself. `$?` is 130 either way.
fn end_by_sigint(whole_job: bool) {
    // SAFETY: restoring the default action and sending a signal; the set lives on this
    // frame.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        if whole_job {
            libc::kill(0, libc::SIGINT);
        } else {
            libc::raise(libc::SIGINT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(status: i32) -> Outcome {
        Outcome::Command {
            status: ExitStatus::from_raw(status),
            lent_terminal: false,
        }
    }

    #[test]
    fn command_status_passes_through() {
        assert_eq!(command(7 << 8).exit_code(), 7);
        assert_eq!(command(0).exit_code(), 0);
    }

    #[test]
    fn death_by_signal_is_128_plus_n() {
        assert_eq!(command(9).exit_code(), 137);
        assert_eq!(
            Outcome::Interrupted {
                signal: libc::SIGTERM
            }
            .exit_code(),
            143
        );
    }

    #[test]
    fn wrapper_codes_are_fixed() {
        assert_eq!(Outcome::LockLost.exit_code(), 76);
        assert_eq!(Outcome::Superseded.exit_code(), 77);
        assert_eq!(Outcome::MaxRuntime.exit_code(), 124);
        assert_eq!(Outcome::Failed.exit_code(), 125);
        assert_eq!(Outcome::CannotExecute.exit_code(), 126);
        assert_eq!(Outcome::NotFound.exit_code(), 127);
        assert_eq!(Outcome::NotAcquired { exit_code: 3 }.exit_code(), 3);
    }
}
