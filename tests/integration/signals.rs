//! Signals sent to the wrapper: forwarded once to the command's process group, the lock
//! released afterwards; a signal while waiting aborts the wait; a SIGKILLed wrapper takes
//! its command down with it (parent-death signal) and the lease then expires.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use crate::support::*;

/// A command that records each signal it receives (by name, one line each) and exits with
/// a per-signal code.
fn trapping_script(dir: &TempDir) -> std::path::PathBuf {
    let log = dir.join("signals");
    // No core files from a forwarded SIGQUIT hitting `sleep`.
    let mut body = String::from("ulimit -c 0 2>/dev/null\n");
    for (name, code) in [
        ("TERM", 10),
        ("HUP", 11),
        ("INT", 12),
        ("USR1", 13),
        ("USR2", 14),
        ("QUIT", 15),
    ] {
        body.push_str(&format!(
            "trap 'echo {name} >> \"{log}\"; exit {code}' {name}\n",
            log = log.display()
        ));
    }
    body.push_str(&format!(
        "echo $$ > '{pid}'\ntouch '{ready}'\nwhile :; do sleep 0.05; done",
        pid = dir.join("pid").display(),
        ready = dir.join("ready").display()
    ));
    dir.script("trapper", &body)
}

#[track_caller]
fn check_forwarded(sig: i32, name: &str, code: i32) {
    let server = RedisServer::start();
    let dir = TempDir::new(&format!("fwd-{name}"));
    let script = trapping_script(&dir);
    let mut wrapper = server.cmd().args(["-k", "fwd", "--"]).arg(script).spawn();
    wrapper.wait_for_file(&dir.join("ready"), Duration::from_secs(15));
    assert!(server.exists("redlock:fwd"));
    wrapper.signal(sig);
    let out = wrapper.wait_within(Duration::from_secs(15));
    out.assert_code(code);
    let log = dir.read("signals");
    assert_eq!(log, name, "signals the command received");
    assert_eq!(
        server.dbsize(),
        0,
        "key not released after SIG{name}: {:?}",
        server.keys()
    );
}

#[test]
fn sigterm_is_forwarded_once() {
    check_forwarded(libc::SIGTERM, "TERM", 10);
}

#[test]
fn sighup_is_forwarded_once() {
    check_forwarded(libc::SIGHUP, "HUP", 11);
}

#[test]
fn sigint_is_forwarded_once() {
    check_forwarded(libc::SIGINT, "INT", 12);
}

#[test]
fn sigusr1_is_forwarded_once() {
    check_forwarded(libc::SIGUSR1, "USR1", 13);
}

#[test]
fn sigusr2_is_forwarded_once() {
    check_forwarded(libc::SIGUSR2, "USR2", 14);
}

#[test]
fn sigquit_is_forwarded_once() {
    check_forwarded(libc::SIGQUIT, "QUIT", 15);
}

/// A warning said before the run's signals are blocked (a password typed on the command
/// line) starts the thread that writes stderr early: it must not take a SIGTERM meant for
/// the command, which would end redlock-run by the signal's default action, unforwarded.
#[test]
fn sigterm_is_forwarded_after_an_early_warning() {
    let server = RedisServer::start_with_password("s3cret");
    let dir = TempDir::new("fwd-early-warning");
    let script = trapping_script(&dir);
    let mut wrapper = Wrapper::bare()
        .args(["-r", &server.url(), "-k", "fwd", "--"])
        .arg(script)
        .spawn();
    wrapper.wait_for_file(&dir.join("ready"), Duration::from_secs(15));
    wrapper.signal(libc::SIGTERM);
    let out = wrapper.wait_within(Duration::from_secs(15));
    out.assert_code(10);
    assert!(
        out.stderr.contains("password given on the command line"),
        "the early warning: {}",
        out.stderr
    );
    assert_eq!(dir.read("signals"), "TERM", "signals the command received");
}

/// A command that does not handle SIGTERM dies of it, and the wrapper reports 143.
#[test]
fn command_dying_of_forwarded_sigterm_gives_143() {
    let server = RedisServer::start();
    let dir = TempDir::new("term143");
    let mut wrapper = server
        .cmd()
        .args(["-k", "t", "--"])
        .arg(sleeper(&dir))
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    // The pid file is written before exec: wait until the exec happened so the signal hits
    // sleep and not the shell.
    wait_until(Duration::from_secs(10), "exec of sleep", || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    });
    wrapper.signal(libc::SIGTERM);
    wrapper
        .wait_within(Duration::from_secs(15))
        .assert_code(143);
    assert!(!pid_alive(pid));
    assert_eq!(server.dbsize(), 0);
}

/// The command runs in its own process group, not the wrapper's.
#[test]
fn command_runs_in_its_own_process_group() {
    let server = RedisServer::start();
    let dir = TempDir::new("pgrp");
    let holder = Job::new(&dir, "p")
        .first(&format!("echo $$ > '{}'", dir.join("pid").display()))
        .start(server.cmd().args(["-k", "g"]));
    let pid = read_pid(&dir.join("pid"));
    assert_eq!(pgid_of(pid), Some(pid), "command is not a group leader");
    assert_ne!(pgid_of(holder.pid()), Some(pid));
    holder.let_go();
    holder.wait().assert_code(0);
}

/// SIGTERM to a wrapper waiting for a busy lock: exits 143 promptly, its command never
/// runs, and the holder's key is untouched.
#[test]
fn sigterm_while_waiting_aborts_the_wait() {
    let server = RedisServer::start();
    let dir = TempDir::new("waitsig");
    let holder = hold(server.cmd().args(["-k", "busy"]), &dir, "holder");
    let held = server.lock_value("busy").expect("holder's key");
    let waiter = server
        .cmd()
        .args(["-k", "busy", "--", "touch"])
        .arg(dir.join("ran"))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.subscribed_clients() > 0
    });
    waiter.signal(libc::SIGTERM);
    let out = waiter.wait_within(Duration::from_secs(10));
    out.assert_code(143);
    assert!(!dir.exists("ran"), "the waiter's command ran");
    holder.assert_kept_the_lock_alone(&server, "busy", held);
}

/// SIGINT while waiting with a bounded --wait: nothing run, and redlock-run ends by SIGINT
/// (130 to a shell), so that a calling shell loop stops as it would for the command.
#[test]
fn sigint_while_waiting_ends_by_sigint() {
    let server = RedisServer::start();
    let dir = TempDir::new("waitint");
    let holder = hold(server.cmd().args(["-k", "busy"]), &dir, "holder");
    let waiter = server
        .cmd()
        .args(["-k", "busy", "--wait", "60s", "--", "touch"])
        .arg(dir.join("ran"))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.subscribed_clients() > 0
    });
    waiter.signal(libc::SIGINT);
    let out = waiter.wait_within(Duration::from_secs(10));
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGINT),
        "{:?}, stderr:\n{}",
        out.status,
        out.stderr
    );
    assert!(!dir.exists("ran"));
    assert_eq!(server.dbsize(), 1);
    holder.let_go();
    holder.wait().assert_code(0);
}

/// SIGKILL of the wrapper: the command dies too (parent-death signal) and the key expires by
/// its TTL.
#[test]
fn sigkilled_wrapper_takes_the_command_down_and_the_key_expires() {
    let server = RedisServer::start();
    let dir = TempDir::new("sigkill");
    let mut wrapper = server
        .cmd()
        .args(["-k", "orphan", "-t", "1s", "--"])
        .arg(sleeper(&dir))
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    assert!(server.exists("redlock:orphan"));
    wrapper.signal(libc::SIGKILL);
    wait_until(Duration::from_secs(5), "the wrapper to die", || {
        wrapper.has_exited()
    });
    let took = wait_for_death(pid, Duration::from_secs(5));
    eprintln!("command died {took:?} after the wrapper was killed");
    wait_until(Duration::from_secs(5), "the key to expire", || {
        !server.exists("redlock:orphan")
    });
}

/// A caller that ignores SIGCHLD (Perl's `$SIG{CHLD}='IGNORE'`, some daemons) passes that on
/// through exec; redlock-run must still collect the command's status and end its whole group
/// before releasing.
#[test]
fn an_ignored_sigchld_from_the_caller_changes_nothing() {
    let server = RedisServer::start();
    let dir = TempDir::new("chld");
    let bg = dir.join("bg");
    // A shell's own `trap '' CHLD` does not reach exec'd programs; Perl's does.
    let script = format!(
        "exec perl -e '$SIG{{CHLD}}=\"IGNORE\"; exec @ARGV' {} -k chld -- \
         sh -c 'sleep 30 & echo $! > {}; exit 3'",
        BIN,
        bg.display()
    );
    let out = Wrapper::via_shell(&server.url(), &script).run();
    out.assert_code(3);
    let pid: i32 = dir.read("bg").parse().expect("a pid");
    assert!(!pid_alive(pid), "the background sleep outlived the lock");
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

/// A signal the caller ignores (`nohup`, `trap '' HUP`) stays ignored: redlock-run neither
/// dies of it nor passes it on, and the command inherits the ignoring.
#[test]
fn a_signal_ignored_by_the_caller_stays_ignored() {
    let server = RedisServer::start();
    let dir = TempDir::new("nohup");
    let ready = dir.join("ready");
    let script = format!(
        "trap '' HUP; exec {} -k nohup -- sh -c 'touch {}; sleep 1; echo survived'",
        BIN,
        ready.display()
    );
    let mut wrapper = Wrapper::via_shell(&server.url(), &script).spawn();
    wrapper.wait_for_file(&ready, Duration::from_secs(15));
    wrapper.signal(libc::SIGHUP);
    let out = wrapper.wait_within(Duration::from_secs(15));
    out.assert_code(0);
    assert_eq!(out.stdout_str().trim(), "survived");
}

/// A process left in the command's group that `SIGKILL` does not remove. A real one is stuck
/// in the kernel (uninterruptible sleep), which a test cannot make on demand; a zombie does
/// the same to the group: it is still a member, and no signal ends it. Here the test process
/// itself, in the same session, starts a `sleep` that joins the command's group before its
/// `exec`; redlock-run's signals kill it, and it stays a zombie until the test reaps it.
/// After `SIGKILL` and 5 s, redlock-run releases the lock all the same, and must say so.
#[test]
fn processes_that_outlive_sigkill_are_left_with_a_warning() {
    use std::os::unix::process::CommandExt;

    let server = RedisServer::start();
    let dir = TempDir::new("unkillable");
    let go = dir.join("go");
    let mut run = server
        .cmd()
        .args(["-k", "stuck", "--kill-after", "1s", "--", "sh", "-c"])
        .arg(format!(
            "echo $$ > '{}'; until [ -e '{}' ]; do sleep 0.02; done",
            dir.join("pid").display(),
            go.display()
        ))
        .spawn();
    let group = run.read_pid(&dir.join("pid"));
    let mut member = std::process::Command::new("sleep");
    member.arg("100");
    // SAFETY: setpgid is async-signal-safe and touches no memory.
    unsafe {
        member.pre_exec(move || {
            if libc::setpgid(0, group) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut member = member
        .spawn()
        .expect("starting a sleep in the command's group");
    assert_eq!(pgid_of(member.id() as i32), Some(group));
    std::fs::write(&go, "").unwrap();
    let out = run.wait();
    let _ = member.wait();
    out.assert_code(0)
        .assert_stderr_contains("still there 5s after SIGKILL")
        .assert_stderr_contains("releasing redlock:stuck while they exist")
        .assert_stderr_lacks("terminated them");
    assert!(!server.exists("redlock:stuck"));
}
