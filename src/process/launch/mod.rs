//! Starting the command's first process the way `posix_spawn` does (a `clone` that shares
//! our memory and suspends us until the child has called `exec`), with the three things
//! `posix_spawn` cannot do: the parent-death signal, the check that we are still its parent,
//! and handing it the terminal. A plain `fork` would copy our page tables and then make
//! every page we touch before the child's `exec` a copy-on-write fault; on the wrapper's
//! critical path (start, hand-off) that was a fifth of a millisecond.
//!
//! Everything the child needs (paths to try, argv, envp, its stack) is prepared by the
//! parent: most of it in [`Command::new`] before the lock is taken (while waiting, for a
//! run that waits), the rest (the run's own variables) just before the `clone`. The child
//! only calls async-signal-safe functions on memory it does not own, writes its `errno`
//! into shared memory if every `exec` fails, and `_exit`s.
//!
//! Right before each `exec`, the child compares the monotonic clock with the lease's end it
//! was given, and does not start the command on a lease that has run out: a pause of the
//! whole process anywhere between taking the lock and this point (a frozen VM, `SIGSTOP`, a
//! debugger, swapping) would otherwise start the command inside the next holder's turn.
//! What is left is the few instructions between that reading and the kernel's `exec`.

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Instant;

use super::clock::{monotonic_ns, now_ns};
use super::guardian::watch_message;
use env::{c_strings, inherited_environment, pointers};
use mask::{block_all_signals, restore_signals};
use search::candidates;
pub use search::find;

mod env;
mod mask;
mod search;
#[cfg(test)]
mod tests;

/// Size of the child's stack: it runs a few system calls and nothing else.
const CHILD_STACK: usize = 64 * 1024;

/// The command, ready to start: everything that does not depend on the lock.
pub struct Command {
    /// Full paths to try, in PATH order (one when the command holds a `/`).
    candidates: Vec<CString>,
    /// Owns the strings `argv` and `sh_argv` point into.
    _argv_strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    /// `/bin/sh <path> args…` for a file without a `#!` line (ENOEXEC), as execvp does;
    /// the child fills in `<path>`.
    sh_argv: Vec<*const libc::c_char>,
    /// The inherited environment less the names the run sets: pointers into `environ`.
    /// Nothing in redlock-run changes its environment, so they stay valid.
    inherited: Vec<*const libc::c_char>,
    /// Signals whose handler must not run in the child; reset to the default first.
    reset: Vec<libc::c_int>,
    stack: Vec<u8>,
}

impl Command {
    /// Readies `argv` to run with the inherited environment, in which the names in `sets`
    /// will be replaced at [`launch`]. `reset` lists the signals that have handlers in this
    /// process.
    pub fn new(argv: &[OsString], sets: &[&str], reset: &[libc::c_int]) -> io::Result<Command> {
        let argv_strings = c_strings(argv.iter().map(|arg| arg.as_bytes().to_vec()))?;
        let candidates = candidates(&argv[0])?;
        let mut sh_argv = vec![c"/bin/sh".as_ptr(), ptr::null()];
        sh_argv.extend(pointers(&argv_strings).into_iter().skip(1));
        Ok(Command {
            candidates,
            argv: pointers(&argv_strings),
            _argv_strings: argv_strings,
            sh_argv,
            inherited: inherited_environment(sets),
            reset: reset.to_vec(),
            stack: vec![0u8; CHILD_STACK],
        })
    }
}

/// What the child reads, all of it prepared by the parent: the child allocates nothing.
struct Plan<'a> {
    candidates: &'a [CString],
    argv: &'a [*const libc::c_char],
    sh_argv: &'a mut [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    parent: libc::pid_t,
    take_terminal: bool,
    reset: &'a [libc::c_int],
    /// The lease's end on the monotonic clock, in nanoseconds: no `exec` at or after it.
    lease_end_ns: u64,
    /// The guardian's pipe, to which the child names its group before any `exec`; -1
    /// without a guardian.
    guardian: libc::c_int,
    /// Set by the child when no `exec` succeeded (`LEASE_ENDED` when none was tried).
    errno: AtomicI32,
}

/// What the child leaves in `Plan::errno` when the lease had ended (errno values are
/// positive).
const LEASE_ENDED: i32 = -1;

/// Why the command was not started.
#[derive(Debug)]
pub enum StartError {
    /// The lease had run out when the command was about to be executed.
    LeaseEnded,
    /// `clone` failed (no process could be made: EAGAIN, ENOMEM).
    Clone(io::Error),
    /// Every `exec` failed, or the child could not be set up; the error says why.
    Exec(io::Error),
}

/// Starts the prepared command with `env` (names given to [`Command::new`]) added, in a
/// new process group, with `SIGTERM` as its parent-death signal and, if `take_terminal`, as
/// the terminal's foreground group, unless `lease_end` has passed when it is about to be
/// executed. Returns the child's pid.
pub fn launch(
    prepared: &mut Command,
    env: &[(&str, Vec<u8>)],
    take_terminal: bool,
    lease_end: Instant,
    guardian: Option<libc::c_int>,
) -> Result<libc::pid_t, StartError> {
    let ours = c_strings(
        env.iter()
            .map(|(name, value)| [name.as_bytes(), b"=", value].concat()),
    )
    .map_err(StartError::Exec)?;
    let mut envp = Vec::with_capacity(prepared.inherited.len() + ours.len() + 1);
    envp.extend_from_slice(&prepared.inherited);
    envp.extend(ours.iter().map(|entry| entry.as_ptr()));
    envp.push(ptr::null());
    let mut plan = Plan {
        candidates: &prepared.candidates,
        argv: &prepared.argv,
        sh_argv: &mut prepared.sh_argv,
        envp: &envp,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        take_terminal,
        reset: &prepared.reset,
        lease_end_ns: monotonic_ns(lease_end),
        guardian: guardian.unwrap_or(-1),
        errno: AtomicI32::new(0),
    };
    // The stack grows down on every architecture Linux runs Rust on but PA-RISC.
    let stack_top = prepared.stack.as_mut_ptr().wrapping_add(CHILD_STACK);

    // No signal handler may run in the child while it shares our memory: block them all
    // here (the child inherits the mask, resets handlers, then unblocks).
    let previous = block_all_signals();
    // SAFETY: `run_child` only touches `plan`, which outlives the child's use of it because
    // CLONE_VFORK suspends this thread until the child has exec'd or exited; the stack is
    // likewise alive until then. `stack_top` is the end of a live 64 KiB allocation.
    let pid = unsafe {
        libc::clone(
            run_child,
            stack_top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            ptr::addr_of_mut!(plan).cast(),
        )
    };
    let clone_error = io::Error::last_os_error();
    restore_signals(&previous);
    if pid < 0 {
        return Err(StartError::Clone(clone_error));
    }
    let errno = plan.errno.load(Ordering::SeqCst);
    if errno != 0 {
        // The child has exited already; collect it.
        let mut status = 0;
        // SAFETY: `status` is a valid place for waitpid to write to.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(match errno {
            LEASE_ENDED => StartError::LeaseEnded,
            errno => StartError::Exec(io::Error::from_raw_os_error(errno)),
        });
    }
    Ok(pid)
}

/// The child's side, entered by `clone` on the stack `launch` gave it, while the parent's
/// thread is suspended (CLONE_VFORK) until this child has exec'd or exited.
///
/// The child shares the memory of a process with threads, any of which may have held a
/// lock (the allocator's, stdout's) at the `clone`: from here to `exec` everything is
/// async-signal-safe, allocates nothing and takes no lock, and only reads what the parent
/// prepared in `plan`. Every step below keeps to that; those that change this process's
/// state, which would break redlock-run if done anywhere but here, are `unsafe fn`s that
/// say what their caller must uphold.
extern "C" fn run_child(plan: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `plan` points to the parent's `Plan`, alive and not touched by the parent
    // while this child runs (the parent is suspended by CLONE_VFORK).
    let plan = unsafe { &mut *(plan as *mut Plan) };
    // SAFETY: this is the cloned child, before exec, and every signal is blocked: the
    // parent blocked them all before the `clone`, and the mask is inherited.
    unsafe { reset_handlers(plan.reset) };
    // SAFETY: the cloned child, before exec.
    if !unsafe { own_group(plan.parent) } {
        // SAFETY: the cloned child, before exec; errno is the failed call's.
        return unsafe { fail(plan) };
    }
    if plan.take_terminal {
        // SAFETY: the child leads its own group (just above) and SIGTTOU is still blocked.
        unsafe { take_terminal() };
    }
    // SAFETY: the cloned child, whose handlers were all reset to their defaults above.
    unsafe { unblock_all_signals() };
    // SAFETY: the cloned child, set up, before exec; `plan` was built by `launch`, whose
    // argv, sh_argv and envp are NULL-terminated arrays of pointers to NUL-terminated
    // strings that live until the parent resumes, after the exec.
    unsafe { exec_command(plan) }
}

/// Resets to their defaults the signals whose handlers are redlock-run's, and SIGPIPE,
/// which Rust ignores for itself and the command expects at its default.
///
/// # Safety
/// Only in the cloned child, before exec, with every signal blocked: the dispositions are
/// the child's own (no CLONE_SIGHAND), and in redlock-run itself this would undo its
/// signal handling.
unsafe fn reset_handlers(reset: &[libc::c_int]) {
    // SAFETY: SIG_DFL installs no handler; the caller is the child, whose dispositions
    // these are.
    unsafe {
        for &signal in reset {
            libc::signal(signal, libc::SIG_DFL);
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Puts the calling process in a group of its own, with SIGTERM as its parent-death
/// signal. If the parent died before that signal was armed, nobody holds the lock for the
/// command: the child exits as that SIGTERM would have ended it. `false` when a call
/// failed, with its errno left.
///
/// # Safety
/// Only in the cloned child, before exec: in redlock-run it would move redlock-run out of
/// its caller's group.
unsafe fn own_group(parent: libc::pid_t) -> bool {
    // SAFETY: setpgid and prctl(PR_SET_PDEATHSIG) take integers and touch no memory; the
    // caller is the child, which these are meant for.
    let armed = unsafe {
        libc::setpgid(0, 0) == 0 && libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) == 0
    };
    // SAFETY: getppid has no preconditions.
    if armed && unsafe { libc::getppid() } != parent {
        // SAFETY: _exit ends the process at once; the caller is the child.
        unsafe { libc::_exit(128 + libc::SIGTERM) };
    }
    armed
}

/// Makes the calling process's group the terminal's foreground group.
///
/// # Safety
/// Only in the cloned child, leading its own group, with SIGTTOU blocked: as a background
/// group, taking the terminal would stop the child with SIGTTOU, and the parent with it,
/// which waits for the child's exec.
unsafe fn take_terminal() {
    // SAFETY: tcsetpgrp and getpid take and return integers; SIGTTOU is blocked (the
    // caller's promise).
    unsafe {
        libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
    }
}

/// Unblocks every signal, for the command, once the job-control stops that came while they
/// were blocked are discarded.
///
/// A Ctrl-Z (SIGTSTP, or SIGTTIN, SIGTTOU) sent to redlock-run's process group between the
/// `clone` and the child's own group reaches the child too, and waits there, blocked. Let
/// through, it would stop the child before its `exec`, in a group of its own that nobody
/// continues, and redlock-run with it, suspended in the `clone` until the child has
/// exec'd: a hang. redlock-run heard the stop itself.
///
/// # Safety
/// Only in the cloned child, once every handler of redlock-run's is reset to its default
/// ([`reset_handlers`]): a handler that ran here would run on memory the child shares with
/// the parent, whose thread it interrupted at an unknown point.
unsafe fn unblock_all_signals() {
    // SAFETY: the sets live on this frame and sigemptyset initialises them before they are
    // read; SIG_IGN installs no handler, and the action put back is the child's own (the
    // default: the caller's promise, or ignored); no handler of ours is left to run.
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pending);
        libc::sigpending(&mut pending);
        for stop in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
            if libc::sigismember(&pending, stop) == 1 {
                // Ignoring a pending signal discards it (POSIX), blocked or not.
                let previous = libc::signal(stop, libc::SIG_IGN);
                libc::signal(stop, previous);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, ptr::null_mut());
    }
}

/// Executes the command as execvp does: each candidate in turn, EACCES remembered while
/// looking on, `/bin/sh` for a file without a `#!` line (ENOEXEC). Does not return: if no
/// `exec` succeeds it leaves why in `plan.errno` (`LEASE_ENDED` if the lease ran out
/// first) and exits.
///
/// # Safety
/// Only in the cloned child, set up ([`own_group`], signals reset and unblocked), before
/// exec; `plan`'s argv, sh_argv and envp are NULL-terminated arrays of pointers to
/// NUL-terminated strings that live until the child has exec'd or exited.
unsafe fn exec_command(plan: &mut Plan) -> ! {
    let mut first_error = 0;
    let mut named = plan.guardian < 0;
    for path in plan.candidates {
        give_up_if_lease_ended(plan);
        // Named to the guardian before the program can run, whatever happens to
        // redlock-run from here on (the descriptor closes on exec); only once the
        // lease is known to hold, or the guardian would end us for a lapsed one.
        if !named {
            name_to_guardian(plan.guardian, plan.lease_end_ns);
            named = true;
        }
        // SAFETY: `path` is a CString of the parent's; argv and envp are as this
        // function's caller promised.
        match unsafe { try_exec(path, plan.argv, plan.envp) } {
            libc::ENOEXEC => {
                plan.sh_argv[1] = path.as_ptr();
                give_up_if_lease_ended(plan);
                // SAFETY: sh_argv is NULL-terminated, and points to "/bin/sh", `path` and
                // the parent's argv strings; envp as above.
                first_error = unsafe { try_exec(c"/bin/sh", plan.sh_argv, plan.envp) };
                break;
            }
            libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {}
            libc::EACCES => first_error = libc::EACCES,
            other => {
                first_error = other;
                break;
            }
        }
    }
    let errno = if first_error == 0 {
        libc::ENOENT
    } else {
        first_error
    };
    plan.errno.store(errno, Ordering::SeqCst);
    // SAFETY: _exit ends the child at once, running nothing of the parent's (no atexit
    // handlers, no flushing of buffers it shares with the parent).
    unsafe { libc::_exit(127) }
}

/// Replaces the child with `path`; returns only if that failed, with the errno.
///
/// # Safety
/// Only in the cloned child, set up, before exec; `argv` and `envp` are NULL-terminated
/// arrays of pointers to NUL-terminated strings.
unsafe fn try_exec(
    path: &std::ffi::CStr,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> libc::c_int {
    // SAFETY: `path` is NUL-terminated; argv and envp are as the caller promised.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    errno()
}

/// Exits, leaving `LEASE_ENDED` for the parent, if the lease has run out. Read as late as
/// can be: nothing but this reading lies between it and the kernel's `exec`.
fn give_up_if_lease_ended(plan: &Plan) {
    if now_ns() >= plan.lease_end_ns {
        plan.errno.store(LEASE_ENDED, Ordering::SeqCst);
        // SAFETY: _exit takes a status and ends the process at once.
        unsafe { libc::_exit(127) };
    }
}

/// Names the calling process's group, and the lease's end, to the guardian on its pipe.
fn name_to_guardian(pipe: libc::c_int, lease_end_ns: u64) {
    // SAFETY: getpid has no preconditions.
    let message = watch_message(unsafe { libc::getpid() }, lease_end_ns);
    // SAFETY: writes from a live buffer of `message.len()` bytes.
    unsafe { libc::write(pipe, message.as_ptr().cast(), message.len()) };
}

/// The errno of the calling thread. In the cloned child, which shares the parent's thread
/// pointer, that is the suspended parent thread's: it reads it only after the child is
/// done.
fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns a valid pointer to the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Records the current errno for the parent and exits.
///
/// # Safety
/// Only in the cloned child, before exec: in redlock-run, it would end the run at once
/// with 127, its lock held.
unsafe fn fail(plan: &Plan) -> libc::c_int {
    plan.errno.store(errno().max(1), Ordering::SeqCst);
    // SAFETY: _exit ends the process at once; the caller is the child.
    unsafe { libc::_exit(127) }
}
