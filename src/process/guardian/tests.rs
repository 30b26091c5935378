//! Unit tests of the guardian: its detaching from our session, and its reading of the pipe.

use super::*;

/// The two ends of a fresh pipe; both close on drop.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 just created these descriptors; each is owned once.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn write(fd: &OwnedFd, bytes: &[u8]) {
    // SAFETY: writes from a live buffer of `bytes.len()` bytes.
    let wrote = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    assert_eq!(wrote, bytes.len() as isize);
}

#[test]
fn a_signal_sent_to_the_group_before_the_guardian_left_it_does_not_end_it() {
    // SAFETY: the child is single-threaded from its own point of view after the fork,
    // and calls only async-signal-safe functions before `_exit`; `detach` is called in
    // the freshly forked child, as it must be.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: as above: this is the forked child, which ends here.
        unsafe {
            // As in redlock-run: SIGTERM blocked (read from a signalfd there), and one
            // sent to the group at the fork, waiting.
            let mut term: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut term);
            libc::sigaddset(&mut term, libc::SIGTERM);
            libc::sigprocmask(libc::SIG_BLOCK, &term, std::ptr::null_mut());
            libc::kill(libc::getpid(), libc::SIGTERM);
            detach();
            libc::_exit(7);
        }
    }
    let mut status = 0;
    // SAFETY: `status` is a valid place for waitpid to write to.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
        "the guardian survived the signal meant for redlock-run (status {status:#x})"
    );
}

#[test]
fn the_guardian_reads_what_the_command_and_redlock_run_write() {
    let (read_end, write_end) = pipe();
    write(&write_end, &watch_message(4321, 987_654_321));
    assert_eq!(read_watch(read_end.as_raw_fd()), Some((4321, 987_654_321)));
    write(&write_end, &55u64.to_ne_bytes());
    write(&write_end, &DISMISS.to_ne_bytes());
    assert!(matches!(read_word(read_end.as_raw_fd()), Heard::Word(55)));
    assert!(matches!(
        read_word(read_end.as_raw_fd()),
        Heard::Word(DISMISS)
    ));
    drop(write_end);
    assert!(matches!(read_word(read_end.as_raw_fd()), Heard::Closed));
}

#[test]
fn a_pipe_closed_before_the_first_message_is_nothing_to_guard() {
    let (read_end, write_end) = pipe();
    // Half a message, then redlock-run is gone.
    write(&write_end, &watch_message(4321, 1)[..8]);
    drop(write_end);
    assert_eq!(read_watch(read_end.as_raw_fd()), None);
}
