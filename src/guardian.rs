//! The command's guard for when redlock-run itself cannot act: killed with SIGKILL, or
//! stopped. The parent-death signal reaches only the command's first process; a shell
//! script's children would run on after the lease expired. So redlock-run starts a small
//! guardian process, in a session of its own, that holds the read end of a pipe. Through it
//! redlock-run names the command's group once the command has started, then sends the
//! lease's end (on the monotonic clock) after each renewal, and a dismissal once the group is
//! gone and the lock released. A run that takes the lock at once starts the guardian after
//! starting the command; a run that waits for the lock starts it while waiting, so that
//! starting it is not on the path from a release to the command's start.
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
//! The guardian exits once it sees the group gone (it looks at least every second), so that
//! it does not signal a group id the kernel may have handed to someone else.
//!
//! On x86_64 and aarch64 the guardian is a `clone` that shares redlock-run's memory rather
//! than a `fork`: no copy of the page tables, no copy-on-write faults in either process
//! afterwards, no address space to tear down when it exits. That was 0.2 ms of CPU per run
//! (`perf stat`: 2.13 -> 1.91 ms for `redlock-run -- true`), which a machine running many
//! contending jobs feels. Sharing memory, it runs on a stack of its own that nobody frees,
//! reads nothing but that stack, and makes its system calls directly (its `sys` module):
//! the C library's wrappers would write `errno` into the thread-local storage of
//! redlock-run's main thread. Elsewhere it is a `fork`, with the same code. Either way it starts with
//! every signal blocked and keeps them blocked, so that no handler of redlock-run's ever
//! runs in it and only SIGKILL ends it before its work is done.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::spawn::{block_all_signals, restore_signals};

/// The first message: the group, then the lease's end, 8 bytes each.
const WATCH_LEN: usize = 16;
/// What a dismissal looks like on the pipe after that; any other value is the lease's new
/// end.
const DISMISS: u64 = 0;
/// How often the guardian looks whether the group has gone, while terminating it.
const POLL_MS: u64 = 10;
/// How often it looks otherwise (a check costs one system call).
const GROUP_CHECK_MS: u64 = 1000;

/// A guardian guarding a process group.
pub struct Guardian {
    pipe: OwnedFd,
}

/// A guardian started ahead of need, with no group to guard yet; dropped unused, it exits.
pub struct ReadyGuardian {
    pipe: OwnedFd,
}

impl ReadyGuardian {
    /// Starts a guardian that will SIGKILL its group `kill_after` after a SIGTERM at most.
    pub fn start(kill_after: Duration) -> io::Result<ReadyGuardian> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 just created these descriptors; each is owned once.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let kill_after_ns = kill_after.as_nanos().min(u128::from(u64::MAX)) as u64;
        // The guardian inherits a mask that blocks everything, and keeps it.
        let previous = block_all_signals();
        let started = start_guard(read_end.as_raw_fd(), kill_after_ns);
        restore_signals(&previous);
        started?;
        drop(read_end);
        Ok(ReadyGuardian { pipe: write_end })
    }

    /// Names the process group to guard, whose lease ends at `valid_until`. An error means
    /// the guardian is gone.
    pub fn guard(self, group: libc::pid_t, valid_until: Instant) -> io::Result<Guardian> {
        let mut message = [0u8; WATCH_LEN];
        message[..8].copy_from_slice(&(group as u64).to_ne_bytes());
        message[8..].copy_from_slice(&monotonic_ns(valid_until).to_ne_bytes());
        // SAFETY: writes 16 bytes from a live buffer; a pipe write this small is atomic.
        let written = unsafe {
            libc::write(
                self.pipe.as_raw_fd(),
                message.as_ptr().cast(),
                message.len(),
            )
        };
        if written != WATCH_LEN as isize {
            return Err(io::Error::last_os_error());
        }
        Ok(Guardian { pipe: self.pipe })
    }
}

impl Guardian {
    /// Starts the guardian of process group `group`, whose lease ends at `valid_until`.
    pub fn start(
        group: libc::pid_t,
        kill_after: Duration,
        valid_until: Instant,
    ) -> io::Result<Guardian> {
        ReadyGuardian::start(kill_after)?.guard(group, valid_until)
    }

    /// Tells the guardian the lease now runs until `valid_until`.
    pub fn extend(&self, valid_until: Instant) {
        self.send(monotonic_ns(valid_until).max(1));
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

/// Starts the guardian process running [`guard`]: a `clone` sharing our memory, on a stack
/// of its own that is never freed (the guardian may outlive us).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn start_guard(pipe: libc::c_int, kill_after: u64) -> io::Result<()> {
    const STACK: usize = 64 * 1024;
    #[repr(C)]
    struct Args {
        pipe: libc::c_int,
        kill_after: u64,
    }
    extern "C" fn entry(args: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `args` points to the `Args` written at the bottom of this guardian's own
        // stack mapping, which nobody else writes or frees.
        let Args { pipe, kill_after } = unsafe { (args as *const Args).read() };
        // SAFETY: we are the new guardian process; `guard` does not return.
        unsafe { guard(pipe, kill_after) }
    }
    // SAFETY: an anonymous private mapping; no memory of ours is touched.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let args = stack.cast::<Args>();
    // SAFETY: the mapping is fresh, writable, aligned to a page, and larger than `Args`.
    unsafe { args.write(Args { pipe, kill_after }) };
    // SAFETY: the child runs `entry` on the top of the fresh mapping (stacks grow down on
    // both architectures) and touches nothing else of ours; without CLONE_THREAD,
    // CLONE_FILES or CLONE_SIGHAND it has its own descriptors and signal dispositions.
    let pid = unsafe {
        libc::clone(
            entry,
            stack.cast::<u8>().add(STACK).cast(),
            libc::CLONE_VM | libc::SIGCHLD,
            args.cast(),
        )
    };
    if pid < 0 {
        let err = io::Error::last_os_error();
        // SAFETY: the mapping made above, which no guardian uses.
        unsafe { libc::munmap(stack, STACK) };
        return Err(err);
    }
    Ok(())
}

/// Starts the guardian process running [`guard`]: a plain `fork`.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn start_guard(pipe: libc::c_int, kill_after: u64) -> io::Result<()> {
    // SAFETY: the child runs only `guard`, which makes system calls and nothing else.
    match unsafe { libc::fork() } {
        pid if pid < 0 => Err(io::Error::last_os_error()),
        // SAFETY: we are the forked child; `guard` does not return.
        0 => unsafe { guard(pipe, kill_after) },
        _ => Ok(()),
    }
}

/// The guardian's life: system calls on values of its own, no allocation, no C library.
///
/// # Safety
/// Call only in a freshly started guardian process, with every signal blocked.
unsafe fn guard(pipe: libc::c_int, kill_after: u64) -> ! {
    // SAFETY: plain system calls on descriptors and processes; buffers live on this stack.
    unsafe {
        // Out of redlock-run's session and process group: a signal meant for those (a
        // terminal's Ctrl-C, a CI runner killing the job's group) must not reach the guard.
        sys::setsid();
        // Keep only the pipe, as descriptor 3, and hold no one else's descriptors open (a
        // pipe on stdout would keep its reader waiting for us); the copy of the pipe's write
        // end goes too, or its closing would never be seen.
        if pipe != 3 {
            sys::dup3(pipe, 3);
        }
        let null = sys::open_dev_null();
        if null >= 0 {
            for fd in 0..3 {
                sys::dup3(null as libc::c_int, fd);
            }
        }
        sys::close_from(4);
        let pipe = 3;

        // Nothing to guard until redlock-run names the group; a closed pipe means it never
        // will. The message is written whole (16 bytes are atomic on a pipe).
        let mut watch = [0u8; WATCH_LEN];
        let mut got = 0;
        while got < WATCH_LEN {
            let read = sys::read(pipe, watch.as_mut_ptr().add(got), WATCH_LEN - got);
            if read > 0 {
                got += read as usize;
            } else if read != -(libc::EINTR as isize) {
                sys::exit();
            }
        }
        let mut field = [0u8; 8];
        field.copy_from_slice(&watch[..8]);
        let group = u64::from_ne_bytes(field) as libc::pid_t;
        field.copy_from_slice(&watch[8..]);
        let mut lease_end = u64::from_ne_bytes(field);
        loop {
            // Gone (redlock-run is about to dismiss us): never signal a group id that the
            // kernel may hand to someone else.
            if sys::kill(-group, 0) != 0 {
                sys::exit();
            }
            let now = sys::monotonic_ns();
            if now >= lease_end {
                // Nobody renewed in time and redlock-run did not act: the lease is over.
                sys::kill(-group, libc::SIGKILL);
                sys::exit();
            }
            let wait_ms = ((lease_end - now) / 1_000_000 + 1).min(GROUP_CHECK_MS);
            if sys::wait_readable(pipe, wait_ms) <= 0 {
                continue;
            }
            let mut bytes = [0u8; 8];
            match sys::read(pipe, bytes.as_mut_ptr(), bytes.len()) {
                8 => match u64::from_ne_bytes(bytes) {
                    DISMISS => sys::exit(),
                    // Two threads send ends; a lease only ever grows.
                    end => lease_end = lease_end.max(end),
                },
                0 => {
                    // redlock-run is gone without a word: end the group as it would have,
                    // unless it had ended it already (and died before the dismissal).
                    if sys::kill(-group, 0) != 0 {
                        sys::exit();
                    }
                    terminate(
                        group,
                        lease_end.min(sys::monotonic_ns().saturating_add(kill_after)),
                    );
                    sys::exit();
                }
                _ => {} // interrupted; try again
            }
        }
    }
}

/// SIGTERM to `group` now, SIGKILL at `kill_at` if any of it is still there.
///
/// # Safety
/// For the guardian only.
unsafe fn terminate(group: libc::pid_t, kill_at: u64) {
    // SAFETY: kill and a timed wait on no descriptor, with plain values.
    unsafe {
        sys::kill(-group, libc::SIGTERM);
        sys::kill(-group, libc::SIGCONT);
        while sys::kill(-group, 0) == 0 {
            if sys::monotonic_ns() >= kill_at {
                sys::kill(-group, libc::SIGKILL);
                return;
            }
            sys::wait_readable(-1, POLL_MS);
        }
    }
}

/// The guardian's system calls. Each returns what the kernel returned: a result, or minus
/// the error number. On x86_64 and aarch64 they are made directly (the guardian shares our
/// memory, and the C library's wrappers would write `errno` into our main thread's
/// thread-local storage); elsewhere (a forked guardian) through the C library.
mod sys {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    unsafe fn syscall(number: libc::c_long, args: [usize; 6]) -> isize {
        let result: isize;
        // SAFETY: the caller passes arguments valid for `number`; the kernel's system call
        // convention for the architecture, with the registers it clobbers declared.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") number as isize => result,
                in("rdi") args[0],
                in("rsi") args[1],
                in("rdx") args[2],
                in("r10") args[3],
                in("r8") args[4],
                in("r9") args[5],
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        // SAFETY: as above.
        #[cfg(target_arch = "aarch64")]
        unsafe {
            std::arch::asm!(
                "svc 0",
                in("x8") number as usize,
                inlateout("x0") args[0] as isize => result,
                in("x1") args[1],
                in("x2") args[2],
                in("x3") args[3],
                in("x4") args[4],
                in("x5") args[5],
                options(nostack),
            );
        }
        result
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    unsafe fn syscall(number: libc::c_long, args: [usize; 6]) -> isize {
        // SAFETY: as the caller's; errno is this (forked) process's own.
        unsafe {
            let result =
                libc::syscall(number, args[0], args[1], args[2], args[3], args[4], args[5]);
            if result < 0 {
                -(*libc::__errno_location() as isize)
            } else {
                result as isize
            }
        }
    }

    pub unsafe fn setsid() -> isize {
        // SAFETY: no arguments.
        unsafe { syscall(libc::SYS_setsid, [0; 6]) }
    }

    pub unsafe fn dup3(from: libc::c_int, to: libc::c_int) -> isize {
        // SAFETY: plain descriptor numbers.
        unsafe { syscall(libc::SYS_dup3, [from as usize, to as usize, 0, 0, 0, 0]) }
    }

    pub unsafe fn open_dev_null() -> isize {
        let path = c"/dev/null";
        // SAFETY: a NUL-terminated path in static memory.
        unsafe {
            syscall(
                libc::SYS_openat,
                [
                    libc::AT_FDCWD as usize,
                    path.as_ptr() as usize,
                    libc::O_RDWR as usize,
                    0,
                    0,
                    0,
                ],
            )
        }
    }

    /// Closes every descriptor from `first` on.
    pub unsafe fn close_from(first: u32) -> isize {
        // SAFETY: plain numbers.
        unsafe {
            syscall(
                libc::SYS_close_range,
                [first as usize, u32::MAX as usize, 0, 0, 0, 0],
            )
        }
    }

    /// # Safety
    /// `buf` must be valid for writes of `len` bytes.
    pub unsafe fn read(fd: libc::c_int, buf: *mut u8, len: usize) -> isize {
        // SAFETY: per the contract above.
        unsafe { syscall(libc::SYS_read, [fd as usize, buf as usize, len, 0, 0, 0]) }
    }

    /// Waits up to `ms` for `fd` to become readable (`fd` -1: just waits). Positive when
    /// it is.
    pub unsafe fn wait_readable(fd: libc::c_int, ms: u64) -> isize {
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout = libc::timespec {
            tv_sec: (ms / 1000) as libc::time_t,
            tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
        };
        let count = usize::from(fd >= 0);
        // SAFETY: `poll` and `timeout` live on this frame; no signal mask is passed.
        unsafe {
            syscall(
                libc::SYS_ppoll,
                [
                    std::ptr::addr_of_mut!(poll) as usize,
                    count,
                    std::ptr::addr_of!(timeout) as usize,
                    0,
                    0,
                    0,
                ],
            )
        }
    }

    pub unsafe fn kill(pid: libc::pid_t, signal: libc::c_int) -> isize {
        // SAFETY: plain numbers.
        unsafe { syscall(libc::SYS_kill, [pid as usize, signal as usize, 0, 0, 0, 0]) }
    }

    /// The monotonic clock, as `Instant` reads it, in nanoseconds.
    pub unsafe fn monotonic_ns() -> u64 {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` lives on this frame; CLOCK_MONOTONIC always exists.
        unsafe {
            syscall(
                libc::SYS_clock_gettime,
                [
                    libc::CLOCK_MONOTONIC as usize,
                    std::ptr::addr_of_mut!(now) as usize,
                    0,
                    0,
                    0,
                    0,
                ],
            )
        };
        now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
    }

    pub unsafe fn exit() -> ! {
        // SAFETY: ends this process; exit_group does not return.
        unsafe {
            syscall(libc::SYS_exit_group, [0; 6]);
        }
        unreachable!("exit_group returned")
    }
}

/// The monotonic clock that `Instant` reads, in nanoseconds.
fn now_ns() -> u64 {
    // SAFETY: an all-zero timespec is valid for clock_gettime to overwrite.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `now` is a valid place to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// `at` on the monotonic clock, in nanoseconds (std's `Instant` is CLOCK_MONOTONIC on Linux).
fn monotonic_ns(at: Instant) -> u64 {
    let (reference, reference_ns) = (Instant::now(), now_ns());
    if at >= reference {
        reference_ns.saturating_add((at - reference).as_nanos() as u64)
    } else {
        reference_ns.saturating_sub((reference - at).as_nanos() as u64)
    }
}
