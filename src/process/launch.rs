//! Starting the command's first process the way `posix_spawn` does (a `clone` that shares
//! our memory and suspends us until the child has called `exec`), with the three things
//! `posix_spawn` cannot do: the parent-death signal, the check that we are still its parent,
//! and handing it the terminal. A plain `fork` would copy our page tables and then make
//! every page we touch before the child's `exec` a copy-on-write fault; on the wrapper's
//! critical path (start, hand-off) that was a fifth of a millisecond.
//!
//! Everything the child needs (paths to try, argv, envp, its stack) is prepared by the
//! parent: most of it in [`Prepared::new`] before the lock is taken (while waiting, for a
//! run that waits), the rest (the run's own variables) just before the `clone`. The child
//! only calls async-signal-safe functions on memory it does not own, writes its `errno`
//! into shared memory if every `exec` fails, and `_exit`s.
//!
//! Right before each `exec`, the child compares the monotonic clock with the lease's end it
//! was given, and does not start the command on a lease that has run out: a pause of the
//! whole process anywhere between taking the lock and this point (a frozen VM, `SIGSTOP`, a
//! debugger, swapping) would otherwise start the command inside the next holder's turn.
//! What is left is the few instructions between that reading and the kernel's `exec`.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Instant;

use super::clock::{monotonic_ns, now_ns};
use super::guardian::watch_message;

extern "C" {
    /// The process's environment, as the C library keeps it (mutable there, as std declares
    /// it too; read here only, once, before the lock is taken).
    static mut environ: *const *const libc::c_char;
}

/// Size of the child's stack: it runs a few system calls and nothing else.
const CHILD_STACK: usize = 64 * 1024;

/// The command, ready to start: everything that does not depend on the lock.
pub struct Prepared {
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

impl Prepared {
    /// Readies `argv` to run with the inherited environment, in which the names in `sets`
    /// will be replaced at [`launch`]. `reset` lists the signals that have handlers in this
    /// process.
    pub fn new(argv: &[OsString], sets: &[&str], reset: &[libc::c_int]) -> io::Result<Prepared> {
        let argv_strings = c_strings(argv.iter().map(|arg| arg.as_bytes().to_vec()))?;
        let candidates = candidates(&argv[0])?;
        let mut sh_argv = vec![c"/bin/sh".as_ptr(), ptr::null()];
        sh_argv.extend(pointers(&argv_strings).into_iter().skip(1));
        Ok(Prepared {
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

/// Starts the prepared command with `env` (names given to [`Prepared::new`]) added, in a
/// new process group, with `SIGTERM` as its parent-death signal and, if `take_terminal`, as
/// the terminal's foreground group, unless `lease_end` has passed when it is about to be
/// executed. Returns the child's pid.
pub fn launch(
    prepared: &mut Prepared,
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

/// The child's side. Async-signal-safe calls only; no allocation, no locks.
extern "C" fn run_child(plan: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `plan` points to the parent's `Plan`, alive and not touched by the parent
    // while this child runs (the parent is suspended by CLONE_VFORK).
    let plan = unsafe { &mut *(plan as *mut Plan) };
    // SAFETY: every call below is async-signal-safe and takes plain values or pointers into
    // `plan`, which lives until exec or _exit.
    unsafe {
        for &signal in plan.reset {
            libc::signal(signal, libc::SIG_DFL);
        }
        // Rust ignores SIGPIPE for itself; the command expects the default.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        if libc::setpgid(0, 0) != 0 {
            return fail(plan);
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
            return fail(plan);
        }
        // The parent died before the death signal was armed: nobody holds the lock for us.
        if libc::getppid() != plan.parent {
            libc::_exit(128 + libc::SIGTERM);
        }
        if plan.take_terminal {
            // As a background group, taking the terminal would stop us with SIGTTOU; all
            // signals are still blocked here, SIGTTOU included.
            libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, ptr::null_mut());

        // execvp's rule: try each directory; remember EACCES, but keep looking.
        let mut first_error = 0;
        let mut named = plan.guardian < 0;
        for path in plan.candidates {
            // As late as can be: nothing but this reading lies between it and the kernel.
            if now_ns() >= plan.lease_end_ns {
                plan.errno.store(LEASE_ENDED, Ordering::SeqCst);
                libc::_exit(127);
            }
            // Named to the guardian before the program can run, whatever happens to
            // redlock-run from here on (the descriptor closes on exec); only once the
            // lease is known to hold, or the guardian would end us for a lapsed one.
            if !named {
                let message = watch_message(libc::getpid(), plan.lease_end_ns);
                libc::write(plan.guardian, message.as_ptr().cast(), message.len());
                named = true;
            }
            libc::execve(path.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr());
            let errno = *libc::__errno_location();
            match errno {
                libc::ENOEXEC => {
                    plan.sh_argv[1] = path.as_ptr();
                    if now_ns() >= plan.lease_end_ns {
                        plan.errno.store(LEASE_ENDED, Ordering::SeqCst);
                        libc::_exit(127);
                    }
                    libc::execve(
                        c"/bin/sh".as_ptr(),
                        plan.sh_argv.as_ptr(),
                        plan.envp.as_ptr(),
                    );
                    first_error = *libc::__errno_location();
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
        libc::_exit(127)
    }
}

/// Records the current errno for the parent and exits.
///
/// # Safety
/// Only from the child, before exec.
unsafe fn fail(plan: &Plan) -> libc::c_int {
    // SAFETY: errno location is thread-local and valid; _exit never returns.
    unsafe {
        plan.errno
            .store((*libc::__errno_location()).max(1), Ordering::SeqCst);
        libc::_exit(127)
    }
}

/// Where to look for `program`: itself if it holds a `/`, else each PATH directory.
fn candidates(program: &OsStr) -> io::Result<Vec<CString>> {
    let bytes = program.as_bytes();
    if bytes.contains(&b'/') {
        return c_strings([bytes.to_vec()]);
    }
    if bytes.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    c_strings(path.as_bytes().split(|&b| b == b':').map(|dir| {
        // An empty entry means the current directory, as in execvp.
        let mut full = if dir.is_empty() {
            b".".to_vec()
        } else {
            dir.to_vec()
        };
        full.push(b'/');
        full.extend_from_slice(bytes);
        full
    }))
}

/// The inherited environment's `NAME=value` entries, less those named in `sets`.
fn inherited_environment(sets: &[&str]) -> Vec<*const libc::c_char> {
    let mut entries = Vec::new();
    // SAFETY: `environ` is a NULL-terminated array of NUL-terminated strings, and nothing
    // in this process changes it (no setenv, no std::env::set_var).
    unsafe {
        let mut entry = std::ptr::addr_of!(environ).read();
        while !entry.is_null() && !(*entry).is_null() {
            let text = std::ffi::CStr::from_ptr(*entry).to_bytes();
            // An entry without `=` is no variable; std's `vars_os` skips those too.
            if let Some(at) = text.iter().position(|&b| b == b'=') {
                if !sets.iter().any(|set| set.as_bytes() == &text[..at]) {
                    entries.push(*entry);
                }
            }
            entry = entry.add(1);
        }
    }
    entries
}

fn c_strings(items: impl IntoIterator<Item = Vec<u8>>) -> io::Result<Vec<CString>> {
    items
        .into_iter()
        .map(|item| {
            CString::new(item).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "an argument holds a NUL byte")
            })
        })
        .collect()
}

/// A NULL-terminated array of pointers into `strings`, which must outlive it.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(ptr::null()))
        .collect()
}

fn block_all_signals() -> libc::sigset_t {
    // SAFETY: both sets live on this frame; sigfillset initialises `all` before use.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
        previous
    }
}

fn restore_signals(previous: &libc::sigset_t) {
    // SAFETY: `previous` was filled by pthread_sigmask.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, previous, ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_a_run_sets_are_left_out_of_the_inherited_environment() {
        let names = |entries: Vec<*const libc::c_char>| -> Vec<Vec<u8>> {
            entries
                .into_iter()
                .map(|entry| {
                    // SAFETY: pointers into `environ`, which no test changes.
                    unsafe { std::ffi::CStr::from_ptr(entry) }
                        .to_bytes()
                        .to_vec()
                })
                .map(|entry| entry.split(|&b| b == b'=').next().unwrap_or(&[]).to_vec())
                .collect()
        };
        let all = names(inherited_environment(&[]));
        assert_eq!(all.len(), std::env::vars_os().count());
        assert!(all.contains(&b"PATH".to_vec()), "the tests run with a PATH");
        let without_path = names(inherited_environment(&["PATH", "NOT_SET_ANYWHERE"]));
        assert_eq!(without_path.len(), all.len() - 1);
        assert!(!without_path.contains(&b"PATH".to_vec()));
    }
}
