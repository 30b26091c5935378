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
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::clock::{instant_at, monotonic_ns, now_ns};
use crate::{lease, signals};

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

/// What the guardian saw, on a page shared with it: when (`now_ns`) the command's first
/// process exited, and when it killed the group at the lease's end; each 0 until then.
type Notes = [AtomicU64; 2];
const EXITED: usize = 0;
const KILLED: usize = 1;

/// The shared page, mapped before the guardian is forked.
struct Seen(NonNull<Notes>);

// SAFETY: the page is only ever accessed through its atomics.
unsafe impl Send for Seen {}
// SAFETY: as above.
unsafe impl Sync for Seen {}

impl Seen {
    /// A shared, zeroed page, inherited by the guardian's fork; `None` if it cannot be had
    /// (then exits are known only from when redlock-run hears of them).
    fn map() -> Option<Seen> {
        // SAFETY: an anonymous mapping, no file; the result is checked.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Notes>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return None;
        }
        // A fresh anonymous mapping is zeroed and page-aligned: valid atomics of 0.
        NonNull::new(page.cast::<Notes>()).map(Seen)
    }

    fn notes(&self) -> &Notes {
        // SAFETY: the mapping lives until `drop`, and holds the notes.
        unsafe { self.0.as_ref() }
    }

    /// A note, as an `Instant`, if it was made.
    fn note(&self, which: usize) -> Option<Instant> {
        let at = self.notes()[which].load(Ordering::Acquire);
        (at != 0).then(|| instant_at(at))
    }
}

impl Drop for Seen {
    fn drop(&mut self) {
        // SAFETY: unmaps the page mapped in `map`, used by nothing after this.
        unsafe {
            libc::munmap(self.0.as_ptr().cast(), std::mem::size_of::<Notes>());
        }
    }
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
        let notes = seen.as_ref().map_or(std::ptr::null(), |seen| seen.notes());
        // SAFETY: fork has no preconditions; the child runs only `guard`, which is
        // async-signal-safe, and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: we are the forked child; `guard` does not return; `notes` is null or
            // the shared page, which the child never unmaps.
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

/// The guardian's life. Only async-signal-safe calls, no allocation.
///
/// # Safety
/// Call only in a freshly forked child; `notes` is null or points to the shared page.
unsafe fn guard(pipe: libc::c_int, kill_after: u64, notes: *const Notes) -> ! {
    // SAFETY: plain system calls on descriptors and signals of this process.
    unsafe {
        // Out of redlock-run's session and process group: a signal meant for those (a
        // terminal's Ctrl-C, a CI runner killing the job's group) must not end the guard
        // before it has done its work.
        libc::setsid();
        for signal in signals::FORWARDED {
            libc::signal(signal, libc::SIG_DFL);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // Keep only the pipe, as descriptor 3, and hold no one else's descriptors open (a
        // pipe on stdout would keep its reader waiting for us); the copy of the pipe's write
        // end goes too, or its closing would never be seen.
        libc::dup2(pipe, 3);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
        libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
        let pipe = 3;

        // Nothing to guard until redlock-run names the group; a closed pipe means it never
        // will. The message is written whole (16 bytes are atomic on a pipe).
        let mut watch = [0u8; WATCH_LEN];
        let mut got = 0;
        while got < WATCH_LEN {
            let read = libc::read(pipe, watch.as_mut_ptr().add(got).cast(), WATCH_LEN - got);
            if read > 0 {
                got += read as usize;
            } else if read == 0 || *libc::__errno_location() != libc::EINTR {
                libc::_exit(0);
            }
        }
        let mut field = [0u8; 8];
        field.copy_from_slice(&watch[..8]);
        let group = u64::from_ne_bytes(field) as libc::pid_t;
        field.copy_from_slice(&watch[8..]);
        let mut lease_end = u64::from_ne_bytes(field);
        // The group's id is its first process's pid, which redlock-run reaps only after it
        // has heard of its exit and read our notes: the pidfd is that process's. -1 (a
        // kernel before 5.3, no shared page): not watched, and poll ignores it.
        let mut exit_fd = if notes.is_null() {
            -1
        } else {
            libc::syscall(libc::SYS_pidfd_open, group, 0) as libc::c_int
        };
        loop {
            // Gone (redlock-run is about to dismiss us): never signal a group id that the
            // kernel may hand to someone else.
            if gone(group) {
                libc::_exit(0);
            }
            let now = now_ns();
            if now >= lease_end {
                // Nobody renewed in time and redlock-run did not act: the lease is over.
                // Noted as a kill only if the first process was still there to be killed
                // (what it left running does not make its status any less its own).
                if !notes.is_null() && (*notes)[EXITED].load(Ordering::Acquire) == 0 {
                    let mut exit = libc::pollfd {
                        fd: exit_fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    let exited = exit_fd >= 0
                        && libc::poll(&mut exit, 1, 0) == 1
                        && exit.revents & libc::POLLIN != 0;
                    let note = if exited { EXITED } else { KILLED };
                    (*notes)[note].store(now_ns().max(1), Ordering::Release);
                }
                libc::kill(-group, libc::SIGKILL);
                libc::_exit(0);
            }
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
            let wait_ms = ((lease_end - now) / 1_000_000 + 1).min(GROUP_CHECK_MS) as libc::c_int;
            if libc::poll(polls.as_mut_ptr(), 2, wait_ms) <= 0 {
                continue;
            }
            if polls[1].revents != 0 {
                // Readable: the first process has exited, by now at the latest. Anything
                // else is an error on the pidfd, which tells nothing: it is just dropped.
                if polls[1].revents & libc::POLLIN != 0 {
                    (*notes)[EXITED].store(now_ns().max(1), Ordering::Release);
                }
                libc::close(exit_fd);
                exit_fd = -1;
            }
            if polls[0].revents == 0 {
                continue;
            }
            let mut bytes = [0u8; 8];
            let read = libc::read(pipe, bytes.as_mut_ptr().cast(), bytes.len());
            match read {
                8 => match u64::from_ne_bytes(bytes) {
                    DISMISS => libc::_exit(0),
                    // A lease only ever grows.
                    end => lease_end = lease_end.max(end),
                },
                0 => {
                    // redlock-run is gone without a word: end the group as it would have,
                    // unless it had ended it already (and died before the dismissal).
                    if gone(group) {
                        libc::_exit(0);
                    }
                    terminate(group, lease::kill_deadline(now_ns(), kill_after, lease_end));
                    libc::_exit(0);
                }
                _ => {} // interrupted; try again
            }
        }
    }
}

/// SIGTERM to `group` now, SIGKILL at `kill_at` if any of it is still there.
///
/// # Safety
/// Async-signal-safe; for the guardian only.
unsafe fn terminate(group: libc::pid_t, kill_at: u64) {
    // SAFETY: kill and poll with plain values.
    unsafe {
        libc::kill(-group, libc::SIGTERM);
        libc::kill(-group, libc::SIGCONT);
        while !gone(group) {
            if now_ns() >= kill_at {
                libc::kill(-group, libc::SIGKILL);
                return;
            }
            libc::poll(std::ptr::null_mut(), 0, POLL_MS);
        }
    }
}

/// Whether no process is left in `group`. EPERM means processes that run as another user:
/// still there.
///
/// # Safety
/// Async-signal-safe; for the guardian only.
unsafe fn gone(group: libc::pid_t) -> bool {
    // SAFETY: kill with signal 0 only checks; errno is this thread's.
    unsafe { libc::kill(-group, 0) != 0 && *libc::__errno_location() != libc::EPERM }
}
