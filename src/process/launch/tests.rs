use super::*;

#[test]
fn a_stop_that_came_while_blocked_does_not_stop_the_child_before_its_exec() {
    // SAFETY: the forked child calls only async-signal-safe functions before `_exit`;
    // `unblock_all_signals` runs in a child with no handler of ours, as it must.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: as above: this is the forked child, which ends here.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, ptr::null_mut());
            // A Ctrl-Z to redlock-run's group, before the child had a group of its own.
            libc::kill(libc::getpid(), libc::SIGTSTP);
            unblock_all_signals();
            libc::_exit(7);
        }
    }
    let mut status = 0;
    // SAFETY: `status` is a valid place for waitpid to write to.
    let waited = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) };
    assert_eq!(waited, pid);
    if libc::WIFSTOPPED(status) {
        // SAFETY: ends the stopped child, ours.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        // SAFETY: as above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        panic!("the child stopped before its exec");
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7);
}

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
