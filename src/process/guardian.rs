//! The command's guard for when redlock-run itself cannot act: killed with SIGKILL, or
//! stopped. The parent-death signal reaches only the command's first process; a shell
//! script's children would run on after the lease expired. So redlock-run forks a small
//! guardian process, in a session of its own, that holds the read end of a pipe. Through it
//! the command's group is named, and the lease's end (on the monotonic clock), by the
//! command's own process before it `exec`s its program: so no stop or death of redlock-run
//! can fall between the command's start and its guardian knowing of it. Then redlock-run
//! sends the lease's end after each renewal, and a dismissal once the group is gone and the
//! lock released. A run that waits for the lock forks the guardian while it waits, so that
//! the fork (a copy of our page tables, then copy-on-write faults in both processes) is not
//! on the path from a release to the command's start; one that takes the lock at once
//! forks it just before starting the command (earlier, every page written meanwhile would
//! be copied).
//!
//! - The pipe closes before a group was named (the run ended without a command): exit.
//!
//! - The pipe closes without a dismissal (redlock-run died): SIGTERM to the command's group,
//!   if it is still there, SIGKILL at `--kill-after` or at the lease's end, whichever is
//!   sooner.
//! - The lease's end passes with no word from redlock-run (it is stopped or stuck): SIGKILL
//!   to the group at once. This is a backstop; a healthy redlock-run acts earlier.
//! - Dismissed: exit.
//!
//! It also notes, on a page of memory it shares with redlock-run, when it saw the command's
//! first process exit (a pidfd, Linux 5.3 on), and whether it killed the group: redlock-run,
//! stopped or starved meanwhile, hears of the exit late, and this tells it whether the
//! command ended on its own inside its lease.
//!
//! The guardian exits once it sees the group gone (it looks at least every second), so that
//! it does not signal a group id the kernel may have handed to someone else. A group whose
//! processes run as another user (`sudo`, a setuid program) answers EPERM: it is there, and
//! the guardian stays, though its signals cannot reach it. Forked from a
//! process with threads, it calls only async-signal-safe functions and allocates nothing.
//!
//! It is a `fork`, with memory of its own, on purpose. A `clone` sharing our memory saved
//! 0.2 ms of CPU per run, but the kernel's OOM killer kills every process that shares its
//! victim's memory, and before Linux 5.16 so does a core dump: the guardian would die with
//! redlock-run in the very cases it is there for.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

mod seen;

use super::clock::{monotonic_ns, now_ns};
use crate::{lease, signals};
use seen::{Notes, Seen, EXITED, KILLED};

/// The first message: the group, then the lease's end, 8 bytes each.
const WATCH_LEN: usize = 16;
/// What a dismissal looks like on the pipe after that; any other value is the lease's new
/// end.
const DISMISS: u64 = 0;
/// How often the guardian looks whether the group has gone, while terminating it.
const POLL_MS: libc::c_int = 10;
/// How often it looks otherwise (a check costs one system call).
const GROUP_CHECK_MS: u64 = 1000;

/// A guardian guarding a process group.
pub struct Guardian {
    pipe: OwnedFd,
    seen: Option<Seen>,
}

/// A guardian forked ahead of need, with no group to guard yet; dropped unused, it exits.
pub struct ReadyGuardian {
    pipe: OwnedFd,
    seen: Option<Seen>,
}

impl ReadyGuardian {
    /// Forks a guardian that will SIGKILL its group `kill_after` after a SIGTERM at most.
    pub fn fork(kill_after: Duration) -> io::Result<ReadyGuardian> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 just created these descriptors; each is owned once.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let kill_after_ns = kill_after.as_nanos().min(u128::from(u64::MAX)) as u64;
        let seen = Seen::map();
        let notes = seen.as_ref().map(Seen::notes);
        // SAFETY: fork has no preconditions; the child runs only `guard`, which is
        // async-signal-safe, and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: we are the freshly forked child, and `guard` never returns to the code
            // that owns the descriptors it closes. `notes` borrows the shared page, which
            // the child never unmaps (it never drops `seen`).
            unsafe { guard(read_end.as_raw_fd(), kill_after_ns, notes) }
        }
        drop(read_end);
        Ok(ReadyGuardian {
            pipe: write_end,
            seen,
        })
    }

    /// The pipe on which the command's process names its group before its `exec`
    /// ([`watch_message`]); the descriptor is close-on-exec.
    pub fn pipe(&self) -> libc::c_int {
        self.pipe.as_raw_fd()
    }

    /// The guardian of a command that named its group to it itself.
    pub fn armed(self) -> Guardian {
        Guardian {
            pipe: self.pipe,
            seen: self.seen,
        }
    }
}

/// The first message on the pipe: the group, then the lease's end, 8 bytes each. Plain
/// byte copies: the command's process builds it between `clone` and `exec`.
pub fn watch_message(group: libc::pid_t, lease_end_ns: u64) -> [u8; WATCH_LEN] {
    let mut message = [0u8; WATCH_LEN];
    let group = (group as u64).to_ne_bytes();
    let end = lease_end_ns.to_ne_bytes();
    let mut i = 0;
    while i < 8 {
        message[i] = group[i];
        message[8 + i] = end[i];
        i += 1;
    }
    message
}

impl Guardian {
    /// Tells the guardian the lease now runs until `valid_until`.
    pub fn extend(&self, valid_until: Instant) {
        self.send(monotonic_ns(valid_until).max(1));
    }

    /// When the guardian saw the command's first process exit, if it did: a moment by which
    /// it had surely exited, known even if redlock-run was stopped at the time.
    pub fn saw_exit(&self) -> Option<Instant> {
        self.seen.as_ref()?.note(EXITED)
    }

    /// Whether the guardian killed the group because the lease's end, as it knew it, had
    /// passed with no word from redlock-run.
    pub fn killed(&self) -> bool {
        self.seen
            .as_ref()
            .is_some_and(|seen| seen.note(KILLED).is_some())
    }

    /// The command's group is gone: the guardian exits. Not waited for: redlock-run exits
    /// right after, and the guardian's exit status is of no interest.
    pub fn dismiss(&self) {
        self.send(DISMISS);
    }

    fn send(&self, value: u64) {
        let bytes = value.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer; a pipe write this small is atomic. A
        // guardian that already left (its backstop fired) makes this fail, which is fine.
        unsafe {
            libc::write(self.pipe.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
        }
    }
}

/// The guardian's life, as the module's doc tells it.
///
/// It runs in a child forked from a process with threads, any of which may have held a lock
/// (the allocator's, stdout's) at the `fork`: everything from here on is async-signal-safe,
/// allocates nothing and takes no lock. Every step below keeps to that; those that change
/// this process's state, which would break redlock-run if done anywhere but here, are
/// `unsafe fn`s that say what their caller must uphold.
///
/// # Safety
/// Call only in a freshly forked child, which this takes over and ends: it closes every
/// descriptor but `pipe`, though objects copied from the parent's memory own some of them
/// (none of that code runs again here: this never returns).
unsafe fn guard(pipe: libc::c_int, kill_after: u64, notes: Option<&Notes>) -> ! {
    // SAFETY: a freshly forked child (our caller's promise).
    unsafe { detach() };
    // SAFETY: a freshly forked child, which never returns to the code that owns the
    // descriptors this closes (our caller's promise).
    let pipe = unsafe { keep_only(pipe) };

    // Nothing to guard until redlock-run names the group; a closed pipe means it never
    // will.
    let Some((group, mut lease_end)) = read_watch(pipe) else {
        leave()
    };
    // The group's id is its first process's pid, which redlock-run reaps only after it
    // has heard of its exit and read our notes: the pidfd is that process's. -1 (a
    // kernel before 5.3, no shared page): not watched, and poll ignores it.
    let mut exit_fd = match notes {
        Some(_) => watch_exit(group),
        None => -1,
    };
    loop {
        // Gone (redlock-run is about to dismiss us): never signal a group id that the
        // kernel may hand to someone else.
        if gone(group) {
            leave();
        }
        let now = now_ns();
        if now >= lease_end {
            // Nobody renewed in time and redlock-run did not act: the lease is over.
            if let Some(notes) = notes {
                note_lease_end(notes, exit_fd);
            }
            kill_group(group, libc::SIGKILL);
            leave();
        }
        let wait_ms = ((lease_end - now) / 1_000_000 + 1).min(GROUP_CHECK_MS) as libc::c_int;
        let Some([pipe_poll, exit_poll]) = wait_for(pipe, exit_fd, wait_ms) else {
            continue;
        };
        if exit_poll.revents != 0 {
            // Readable: the first process has exited, by now at the latest. Anything
            // else is an error on the pidfd, which tells nothing: it is just dropped.
            if exit_poll.revents & libc::POLLIN != 0 {
                if let Some(notes) = notes {
                    notes[EXITED].store(now_ns().max(1), Ordering::Release);
                }
            }
            // SAFETY: `exit_fd` is the pidfd this process opened, closed once: it is
            // forgotten right after.
            unsafe { libc::close(exit_fd) };
            exit_fd = -1;
        }
        if pipe_poll.revents == 0 {
            continue;
        }
        match read_word(pipe) {
            Heard::Word(DISMISS) => leave(),
            // A lease only ever grows.
            Heard::Word(end) => lease_end = lease_end.max(end),
            Heard::Closed => {
                // redlock-run is gone without a word: end the group as it would have,
                // unless it had ended it already (and died before the dismissal).
                if gone(group) {
                    leave();
                }
                terminate(group, lease::kill_deadline(now_ns(), kill_after, lease_end));
                leave();
            }
            Heard::Nothing => {} // interrupted; try again
        }
    }
}

/// Leaves redlock-run's session and process group: a signal meant for those (a terminal's
/// Ctrl-C, a CI runner killing the job's group) must not end the guard before it has done
/// its work. And gives up redlock-run's signal handling: default dispositions, no signal
/// blocked.
///
/// A signal sent to redlock-run's group between the `fork` and the `setsid` reaches the
/// guardian too, and waits there, blocked as it is in redlock-run (whose loop reads it
/// from a signalfd): it is discarded before the mask is cleared, or it would end the
/// guardian at once, and leave the command unguarded. redlock-run heard it all the same.
///
/// # Safety
/// Only in the freshly forked guardian: in redlock-run, it would take redlock-run out of
/// its caller's session and undo its signal handling.
unsafe fn detach() {
    // SAFETY: setsid and sigpending take nothing or a set on this frame; SIG_IGN and
    // SIG_DFL install no handler, and an action put back is the one this process had; the
    // sets live on this frame and sigemptyset initialises them before they are read. All
    // of it is this process's own state, which the caller promised is the guardian's.
    unsafe {
        libc::setsid();
        // Setting a pending signal's action to "ignore" discards it (POSIX), even while it
        // is blocked; its action is then put back. Signals sent from now on find the new
        // session, not this process.
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pending);
        libc::sigpending(&mut pending);
        for signal in 1..=libc::SIGRTMAX() {
            if libc::sigismember(&pending, signal) == 1 {
                let previous = libc::signal(signal, libc::SIG_IGN);
                libc::signal(signal, previous);
            }
        }
        for signal in signals::FORWARDED {
            libc::signal(signal, libc::SIG_DFL);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// Keeps only `pipe`, as descriptor 3, with /dev/null on 0 to 2: the guardian holds no one
/// else's descriptors open (a pipe on stdout would keep its reader waiting for us), and the
/// copy of the pipe's write end goes too, or its closing would never be seen. Returns the
/// pipe's new number.
///
/// # Safety
/// Only in the freshly forked guardian, which never returns to the code that owns the
/// descriptors it inherited: this closes or replaces every one of them.
unsafe fn keep_only(pipe: libc::c_int) -> libc::c_int {
    // SAFETY: dup2, open and close_range take integers and a NUL-terminated path; the
    // descriptors they close are used by nothing here again (the caller's promise).
    unsafe {
        libc::dup2(pipe, 3);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
        libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
    }
    3
}

/// The first message on the pipe ([`watch_message`]): the group and the lease's end.
/// `None` if the pipe closed, or failed, first. The message is written whole (16 bytes are
/// atomic on a pipe).
fn read_watch(pipe: libc::c_int) -> Option<(libc::pid_t, u64)> {
    let mut watch = [0u8; WATCH_LEN];
    let mut got = 0;
    while got < WATCH_LEN {
        // SAFETY: reads at most the `WATCH_LEN - got` bytes left in a live buffer.
        let read = unsafe {
            libc::read(
                pipe,
                watch.as_mut_ptr().wrapping_add(got).cast(),
                WATCH_LEN - got,
            )
        };
        if read > 0 {
            got += read as usize;
        } else if read == 0 || errno() != libc::EINTR {
            return None;
        }
    }
    let mut field = [0u8; 8];
    field.copy_from_slice(&watch[..8]);
    let group = u64::from_ne_bytes(field) as libc::pid_t;
    field.copy_from_slice(&watch[8..]);
    Some((group, u64::from_ne_bytes(field)))
}

/// What redlock-run said on the pipe after its first message.
enum Heard {
    /// A dismissal, or the lease's new end.
    Word(u64),
    /// The pipe closed: redlock-run is gone.
    Closed,
    /// Nothing whole (interrupted).
    Nothing,
}

fn read_word(pipe: libc::c_int) -> Heard {
    let mut bytes = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live buffer of 8.
    match unsafe { libc::read(pipe, bytes.as_mut_ptr().cast(), bytes.len()) } {
        8 => Heard::Word(u64::from_ne_bytes(bytes)),
        0 => Heard::Closed,
        _ => Heard::Nothing,
    }
}

/// A pidfd of `group`'s first process, readable once it has exited; -1 if there is none
/// (a kernel before 5.3).
fn watch_exit(group: libc::pid_t) -> libc::c_int {
    // SAFETY: pidfd_open takes a pid and flags, and returns a new descriptor or -1.
    unsafe { libc::syscall(libc::SYS_pidfd_open, group, 0) as libc::c_int }
}

/// Waits up to `wait_ms` for word on the pipe or the first process's exit (`exit_fd`, if
/// not -1). `None` if neither came (or the wait was interrupted).
fn wait_for(
    pipe: libc::c_int,
    exit_fd: libc::c_int,
    wait_ms: libc::c_int,
) -> Option<[libc::pollfd; 2]> {
    let mut polls = [
        libc::pollfd {
            fd: pipe,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: exit_fd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `polls` is a live array of the 2 entries poll is told of.
    let ready = unsafe { libc::poll(polls.as_mut_ptr(), 2, wait_ms) };
    (ready > 0).then_some(polls)
}

/// Notes, at the lease's end, that the guardian killed the group, unless its first process
/// had exited by then (what it left running does not make its status any less its own);
/// nothing if an exit was noted already.
fn note_lease_end(notes: &Notes, exit_fd: libc::c_int) {
    if notes[EXITED].load(Ordering::Acquire) != 0 {
        return;
    }
    let mut exit = libc::pollfd {
        fd: exit_fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `exit` is one live entry, as poll is told; a timeout of 0 only looks.
    let exited = exit_fd >= 0
        && unsafe { libc::poll(&mut exit, 1, 0) } == 1
        && exit.revents & libc::POLLIN != 0;
    let note = if exited { EXITED } else { KILLED };
    notes[note].store(now_ns().max(1), Ordering::Release);
}

/// Sends `signal` to every process of `group`.
fn kill_group(group: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill takes integers.
    unsafe { libc::kill(-group, signal) };
}

/// Ends the guardian.
fn leave() -> ! {
    // SAFETY: _exit ends the process at once, running nothing of redlock-run's (no atexit
    // handlers, no flushing of buffers copied from it).
    unsafe { libc::_exit(0) }
}

/// The errno of the calling thread.
fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns a valid pointer to the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// SIGTERM to `group` now, SIGKILL at `kill_at` if any of it is still there.
fn terminate(group: libc::pid_t, kill_at: u64) {
    kill_group(group, libc::SIGTERM);
    kill_group(group, libc::SIGCONT);
    while !gone(group) {
        if now_ns() >= kill_at {
            kill_group(group, libc::SIGKILL);
            return;
        }
        // SAFETY: poll on no descriptors (a null array of 0 entries) only sleeps.
        unsafe { libc::poll(std::ptr::null_mut(), 0, POLL_MS) };
    }
}

/// Whether no process is left in `group`. EPERM means processes that run as another user:
/// still there.
fn gone(group: libc::pid_t) -> bool {
    // SAFETY: kill with signal 0 takes integers and only checks.
    unsafe { libc::kill(-group, 0) != 0 && errno() != libc::EPERM }
}

#[cfg(test)]
mod tests;
