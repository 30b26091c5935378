//! The command's processes: spawn, watch, signal, reap. Nothing here knows about locks.
//!
//! - The command runs in a process group of its own, so that terminating it reaches every
//!   process it started (`sh -c 'a | b'`, background jobs) and never redlock-run's caller.
//! - When redlock-run runs in the foreground of a terminal (stdin is that terminal), the group
//!   is handed the terminal as a shell hands it to a job, so the command reads the terminal
//!   and a Ctrl-C reaches it directly, once. redlock-run takes the terminal back at the end.
//! - The command's first process gets SIGTERM if redlock-run dies (`PR_SET_PDEATHSIG`).
//!   That fires when the *thread* that spawned the child exits, so `spawn` must be called
//!   from the main thread. The rest of the group is the guardian's job (`guardian.rs`).
//! - redlock-run is a child subreaper, so processes the command leaves behind come back to it
//!   and can be waited for before the lock is released.
//! - As PID 1 of a container, every other child that exits is reaped as soon as we hear of
//!   it (`reap_orphans`): the orphans of the whole container come back to us and nobody
//!   else will, and the guardian, whose status is of no interest.
//! - The command's exit is observed with `waitid(WNOWAIT)`: it stays a zombie, its pid and
//!   group id cannot be reused, until `reap`, so a signal never reaches a stranger.
//! - A process of the group that runs as another user (`sudo`, a setuid program) may not be
//!   signalled: `kill` fails with EPERM. That is a group still there, never a group gone
//!   ([`Group::Unreachable`]), and a signal that reached no one is an error for the caller
//!   to report.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Instant;

use super::guardian::ReadyGuardian;
use super::launch::{self, Command, StartError};

/// What is left of the command's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Gone,
    /// Some of its processes, at least, may be signalled by this one.
    Present,
    /// Its processes all run as another user (EPERM): they are there, and no signal of
    /// ours reaches them.
    Unreachable,
}

pub struct Child {
    pid: libc::pid_t,
    /// Set when the terminal was handed to the command's group.
    terminal: bool,
}

/// Why the command could not be started.
pub enum SpawnError {
    NotFound(io::Error),
    CannotExecute(io::Error),
    /// No process could be made (EAGAIN, ENOMEM): redlock-run failed, not the command.
    NoProcess(io::Error),
    /// The lease had run out before the command could be executed; it was not started.
    LeaseEnded,
}

/// Readies this process to supervise the command: orphans of the command's processes become
/// our children (so they can be waited for), and SIGCHLD is at its default, since an
/// ignored SIGCHLD inherited from the caller would make the kernel reap the command behind
/// our back and leave no exit status to collect.
pub fn prepare() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer argument and touches no
    // memory of ours; signal() with SIG_DFL installs no handler.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
}

/// Whether this process is PID 1 of its PID namespace (a container's first process): every
/// orphan in it comes back to this process, which must reap them.
pub fn is_init() -> bool {
    std::process::id() == 1
}

/// Starts the prepared command in a new process group with `env` added, unless the lease
/// has ended (`lease_end`) by the time it would be executed; the command's process names
/// its group to `guardian` itself, before its `exec`. Call from the main thread.
pub fn spawn(
    prepared: &mut Command,
    env: &[(&str, Vec<u8>)],
    lease_end: Instant,
    guardian: Option<&ReadyGuardian>,
) -> Result<Child, SpawnError> {
    if Instant::now() >= lease_end {
        return Err(SpawnError::LeaseEnded);
    }
    let terminal = in_terminal_foreground();
    let guardian = guardian.map(ReadyGuardian::pipe);
    match launch::launch(prepared, env, terminal, lease_end, guardian) {
        Ok(pid) => Ok(Child { pid, terminal }),
        Err(err) => {
            if terminal {
                // The child may have taken it before it gave up.
                take_terminal();
            }
            Err(match err {
                StartError::LeaseEnded => SpawnError::LeaseEnded,
                StartError::Clone(err) => SpawnError::NoProcess(err),
                StartError::Exec(err) => SpawnError::from(err),
            })
        }
    }
}

impl From<io::Error> for SpawnError {
    fn from(err: io::Error) -> SpawnError {
        if err.kind() == io::ErrorKind::NotFound {
            SpawnError::NotFound(err)
        } else {
            SpawnError::CannotExecute(err)
        }
    }
}

impl Child {
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Sends `signal` to every process of the command's group that this process may signal.
    /// A group that is already gone is not an error; one whose processes all run as another
    /// user is (EPERM): the signal reached none of them.
    pub fn signal_group(&self, signal: libc::c_int) -> io::Result<()> {
        // SAFETY: killpg takes plain integers. The group id is the leader's pid, which is not
        // reused while the leader is unreaped (or while any member of the group lives).
        if unsafe { libc::killpg(self.pid, signal) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ESRCH) => Ok(()),
            _ => Err(err),
        }
    }

    /// Asks the group to end (SIGTERM, and SIGCONT so a stopped process can act on it).
    /// The error is SIGTERM's.
    pub fn terminate_group(&self) -> io::Result<()> {
        let sent = self.signal_group(libc::SIGTERM);
        let _ = self.signal_group(libc::SIGCONT);
        sent
    }

    /// Whether the terminal was handed to the command's group.
    pub fn lends_terminal(&self) -> bool {
        self.terminal
    }

    /// Whether the command's group is the terminal's foreground group, so that a signal the
    /// terminal generated (Ctrl-C, Ctrl-\) has reached it already.
    pub fn has_terminal(&self) -> bool {
        // SAFETY: tcgetpgrp takes a file descriptor and returns a number.
        self.terminal && unsafe { libc::tcgetpgrp(libc::STDIN_FILENO) } == self.pid
    }

    /// After the command stopped (Ctrl-Z): take the terminal back and stop ourselves, as a
    /// job does, so the shell regains control. Returns once we are continued.
    pub fn stop_with_command(&self) {
        if !self.terminal {
            return;
        }
        take_terminal();
        // SAFETY: raising a signal on ourselves; SIGTSTP's default action stops the process.
        unsafe {
            libc::raise(libc::SIGTSTP);
        }
    }

    /// After we were continued: give the terminal back to the command if the shell put us
    /// in the foreground (`fg`, not `bg`), then continue it.
    pub fn resume(&self) {
        if self.terminal && in_terminal_foreground() {
            // SAFETY: tcsetpgrp takes plain integers; we are in the foreground, so it does not
            // raise SIGTTOU.
            unsafe {
                libc::tcsetpgrp(libc::STDIN_FILENO, self.pid);
            }
        }
        // A command this process may not signal is told of nothing, resumed or not.
        let _ = self.signal_group(libc::SIGCONT);
    }

    /// Collects the exit status of the command, which `changes` has seen exit.
    pub fn reap(&mut self) -> io::Result<ExitStatus> {
        let mut status: libc::c_int = 0;
        loop {
            // SAFETY: `status` is a valid place for waitpid to write to.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if rc == self.pid {
                return Ok(ExitStatus::from_raw(status));
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    /// Reaps every child of this process that has exited, except the command's first
    /// process, whose status `reap` collects. Without this, orphans of the command's
    /// processes outside its group (a daemon that called `setsid`) and ones that die while
    /// the command runs would stay zombies until redlock-run exits; as PID 1 of a container
    /// they would fill the process table of a long-running command.
    pub fn reap_orphans(&self) {
        loop {
            // SAFETY: an all-zero siginfo_t is a valid value for waitid to overwrite.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // Looked at without reaping first: the child found may be the command's first
            // process, which must stay unreaped for `reap`. Stops are not asked for, so the
            // loop still hears of them (`changes`).
            // SAFETY: `info` is a valid place for waitid to write to.
            let rc = unsafe {
                libc::waitid(
                    libc::P_ALL,
                    0,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            // SAFETY: si_pid is set by waitid, and left 0 when no child has exited.
            let pid = unsafe { info.si_pid() };
            // The command's first process may hide others behind it until it is reaped:
            // `exited` calls this again then.
            if rc != 0 || pid == 0 || pid == self.pid {
                return;
            }
            let mut status = 0;
            // SAFETY: `status` is a valid place for waitpid to write to.
            unsafe {
                libc::waitpid(pid, &mut status, libc::WNOHANG);
            }
        }
    }

    /// Whether the command's first process has exited (it is left unreaped).
    pub fn has_exited(&self) -> bool {
        // SAFETY: an all-zero siginfo_t is a valid value for waitid to overwrite.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid place for waitid to write to.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set by waitid, and left 0 when no child has changed state.
        rc == 0 && unsafe { info.si_pid() } == self.pid
    }

    /// Hands the terminal back to redlock-run's own group, if it was lent.
    pub fn return_terminal(&self) {
        if self.terminal {
            take_terminal();
        }
    }

    /// What is left of the command's group, once its first process has been reaped: the
    /// processes it started (background jobs) may still run.
    pub fn group(&self) -> Group {
        // Orphans come back to us (subreaper): collect the ones that died, or they would look
        // alive for ever as zombies.
        loop {
            let mut status = 0;
            // SAFETY: `status` is a valid place for waitpid to write to.
            let rc = unsafe { libc::waitpid(-self.pid, &mut status, libc::WNOHANG) };
            if rc <= 0 {
                break;
            }
        }
        // SAFETY: signal 0 only checks that the group exists.
        if unsafe { libc::killpg(self.pid, 0) } == 0 {
            return Group::Present;
        }
        match io::Error::last_os_error().raw_os_error() {
            // Members that run as another user: there, though out of our reach.
            Some(libc::EPERM) => Group::Unreachable,
            _ => Group::Gone,
        }
    }
}

/// A change of the command's first process, as its SIGCHLD announced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildChange {
    /// Stopped, by `signal` (Ctrl-Z: SIGTSTP); the stop is consumed.
    Stopped { signal: libc::c_int },
    /// Exited (left unreaped, for `Child::reap`), or nothing is left to watch.
    Exited,
}

/// What became of `pid` since it was last asked, without waiting: its stops, then its exit.
/// Called on each SIGCHLD (which is also sent for other children: then it finds nothing).
pub fn changes(pid: libc::pid_t) -> Vec<ChildChange> {
    let mut changes = Vec::new();
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value for waitid to overwrite.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid place for waitid to write to.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WSTOPPED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if rc != 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // ECHILD: nothing left to watch; report an exit so the supervisor reaps.
            changes.push(ChildChange::Exited);
            return changes;
        }
        // SAFETY: si_pid is set by waitid, and left 0 when no child has changed state.
        if unsafe { info.si_pid() } != pid {
            return changes;
        }
        if info.si_code != libc::CLD_STOPPED {
            changes.push(ChildChange::Exited);
            return changes;
        }
        // SAFETY: for CLD_STOPPED, si_status holds the stopping signal.
        let signal = unsafe { info.si_status() };
        // Consume the stop (WNOWAIT left it pending), and look again for an exit.
        // SAFETY: as above.
        let mut consumed: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut consumed,
                libc::WSTOPPED | libc::WNOHANG,
            );
        }
        changes.push(ChildChange::Stopped { signal });
    }
}

/// Whether stdin is a terminal whose foreground process group is ours.
fn in_terminal_foreground() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp take plain integers.
    unsafe {
        libc::isatty(libc::STDIN_FILENO) == 1
            && libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp()
    }
}

fn take_terminal() {
    // SAFETY: tcsetpgrp and getpgrp take plain integers; SIGTTOU is blocked around the call
    // because we are a background group at this point.
    with_sigttou_blocked(|| unsafe { libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp()) });
}

/// Runs `f` with SIGTTOU blocked in the calling thread.
fn with_sigttou_blocked(f: impl FnOnce() -> libc::c_int) -> libc::c_int {
    // SAFETY: the sigset values live on this stack frame for the duration of the calls;
    // sigemptyset/sigaddset initialise `block` before pthread_sigmask reads it.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut previous);
        let rc = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        rc
    }
}
