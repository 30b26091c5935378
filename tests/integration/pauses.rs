//! A redlock-run that is paused (a debugger, `SIGSTOP`, a frozen machine) while its lease
//! runs out: it never starts its command on a lease that has ended, and a command that was
//! killed while redlock-run could not act always ends as a lost lock, with its message.

use std::time::Duration;

use crate::support::*;

/// The whole process is held still by a debugger right before it starts the command, as a
/// frozen VM or a `SIGSTOP` would; meanwhile its lease expires and another holder takes the
/// lock. When it goes on, it must not start the command: it says so and exits 75.
#[test]
fn a_command_never_starts_on_a_lease_that_ran_out() {
    let gdb = require(
        "gdb",
        "this test pauses redlock-run right before it starts its command",
        "apt-get install gdb",
    );
    let server = RedisServer::start();
    let dir = TempDir::new("lapsed");
    let (paused, go) = (dir.join("paused"), dir.join("go"));
    // gdb stops every thread of redlock-run at the breakpoint, the renewal thread included,
    // and ends with redlock-run's own exit status.
    let script = format!(
        "exec '{gdb}' -q -batch -ex 'break redlock_run::process::launch::launch' -ex run \
         -ex 'shell touch {paused}; while [ ! -e {go} ]; do sleep 0.05; done' \
         -ex continue -ex 'quit $_exitcode' --args \"$0\" \"$@\"",
        gdb = gdb.display(),
        paused = paused.display(),
        go = go.display(),
    );
    let late = Wrapper::via_shell(&server.url(), &script)
        .arg(BIN)
        .args(["-k", "lapsed", "--ttl", "1s", "--", "touch"])
        .arg(dir.join("late_ran"))
        .spawn();
    wait_until(Duration::from_secs(30), "gdb to pause redlock-run", || {
        paused.exists()
    });
    wait_until(
        Duration::from_secs(10),
        "the paused run's lease to expire",
        || !server.exists("redlock:lapsed"),
    );
    let other = hold(server.cmd().args(["-k", "lapsed"]), &dir, "other");
    std::fs::write(&go, "").unwrap();
    let out = late.wait();
    out.assert_code(75)
        .assert_stderr_contains("the lease on redlock:lapsed ran out before touch could start")
        .assert_stderr_contains("it was not started");
    assert!(
        !dir.exists("late_ran"),
        "the command started inside the other holder's turn"
    );
    other.let_go();
    other.wait().assert_code(0);
}

/// redlock-run is stopped (`SIGSTOP`) past its lease; the guardian kills the command at the
/// lease's end. Once continued, redlock-run reports the lost lock and exits 76, however the
/// command's death and the lost lease reach it. Several at once, since the order in which
/// its threads wake up varies.
#[test]
fn a_run_stopped_past_its_lease_always_reports_the_lost_lock() {
    let server = RedisServer::start();
    let dir = TempDir::new("stopped");
    let runs: Vec<(Running, String)> = (0..4)
        .map(|n| {
            let name = format!("job{n}");
            let pid_file = dir.join(&format!("{name}.pid"));
            let run = server
                .cmd()
                .args(["-k", &name, "--ttl", "1s", "--", "sh", "-c"])
                .arg(format!("echo $$ > '{}'; exec sleep 60", pid_file.display()))
                .spawn();
            (run, name)
        })
        .collect();
    let stopped: Vec<(Running, i32)> = runs
        .into_iter()
        .map(|(mut run, name)| {
            let command = run.read_pid(&dir.join(&format!("{name}.pid")));
            // At once: the command's process named its group to the guardian before it
            // ran its program, so no moment after its start is unguarded.
            run.signal(libc::SIGSTOP);
            (run, command)
        })
        .collect();
    for (_, command) in &stopped {
        // The guardian's backstop: SIGKILL at the lease's end (about a second).
        wait_for_death(*command, Duration::from_secs(15));
    }
    for (run, _) in stopped {
        run.signal(libc::SIGCONT);
        let out = run.wait();
        out.assert_code(76)
            .assert_stderr_contains("lock lost: the lease on redlock:job")
            .assert_stderr_contains("while redlock-run could not act");
    }
}

/// A waiter is stopped (`SIGSTOP`, as a paused VM would be) while it waits with `--wait 2s`;
/// meanwhile the holder releases. Resumed well after its deadline, it must not take the
/// lock and run: past the deadline means 75.
#[test]
fn a_waiter_paused_past_its_deadline_gives_up() {
    let server = RedisServer::start();
    let dir = TempDir::new("paused-waiter");
    let holder = hold(server.cmd().args(["-k", "pw"]), &dir, "holder");
    let waiter = server
        .cmd()
        .args(["-k", "pw", "--wait", "2s", "--", "touch"])
        .arg(dir.join("waiter_ran"))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.subscribed_clients() >= 1
    });
    waiter.signal(libc::SIGSTOP);
    holder.let_go();
    holder.wait().assert_code(0);
    // The pause itself is the premise: the waiter stays stopped until its deadline is
    // well past (its release notice is waiting in its socket).
    wait_until(
        Duration::from_secs(15),
        "the stopped waiter's deadline to be a second past",
        || waiter.started().elapsed() > Duration::from_secs(3),
    );
    waiter.signal(libc::SIGCONT);
    let out = waiter.wait();
    out.assert_code(75)
        .assert_stderr_contains("is still held by");
    assert!(
        !dir.exists("waiter_ran"),
        "the waiter ran its command past its deadline"
    );
    assert!(!server.exists("redlock:pw"));
}

/// A job that waits for `go` in `dir`, then exits with status 3; it writes its pid first.
fn job_until_go(server: &RedisServer, dir: &TempDir, name: &str, ttl: &str) -> (Running, i32) {
    let mut run = server
        .cmd()
        .args(["-k", name, "--ttl", ttl, "--", "sh", "-c"])
        .arg(format!(
            "echo $$ > '{pid}'; while [ ! -e '{go}' ]; do sleep 0.01; done; exit 3",
            pid = dir.join(&format!("{name}.pid")).display(),
            go = dir.join(&format!("{name}.go")).display(),
        ))
        .spawn();
    let pid = run.read_pid(&dir.join(&format!("{name}.pid")));
    (run, pid)
}

/// redlock-run is stopped while its command runs; the command ends on its own well inside
/// the lease, and redlock-run is continued only after the lease has run out, so that it
/// reaps the command and releases late. The command's status is reported (3), not a lost
/// lock: it finished while the lock was surely held. Several at once, since the order in
/// which redlock-run's threads wake up varies.
#[test]
fn a_command_that_ended_inside_its_lease_keeps_its_status_however_late_it_is_reaped() {
    let server = RedisServer::start();
    let dir = TempDir::new("reapedlate");
    let runs: Vec<(Running, i32, String)> = (0..4)
        .map(|n| {
            let name = format!("job{n}");
            let (run, pid) = job_until_go(&server, &dir, &name, "3s");
            (run, pid, name)
        })
        .collect();
    for (run, command, name) in &runs {
        run.signal(libc::SIGSTOP);
        std::fs::write(dir.join(&format!("{name}.go")), "").unwrap();
        wait_for_death(*command, Duration::from_secs(15));
        // It ended while its lease held on the server: the scenario this test is about.
        assert!(
            server.exists(&format!("redlock:{name}")),
            "the lease on {name} ran out before its command ended; the machine is too slow \
             for this test's 3s lease"
        );
    }
    for (_, _, name) in &runs {
        wait_until(
            Duration::from_secs(15),
            "the stopped run's lease to run out",
            || !server.exists(&format!("redlock:{name}")),
        );
    }
    for (run, _, _) in runs {
        run.signal(libc::SIGCONT);
        let out = run.wait();
        out.assert_code(3)
            .assert_stderr_lacks("lock lost")
            .assert_stderr_contains("the command ended inside its lease");
    }
}

/// The same for `--max-runtime`: redlock-run is stopped while its command runs; the command
/// ends on its own before its `--max-runtime 3s`, and redlock-run is continued after that
/// has passed. Its status (3) is reported, not "--max-runtime reached" and 124 (it used to
/// be).
#[test]
fn a_command_that_ended_inside_its_max_runtime_keeps_its_status_however_late_it_is_reaped() {
    let server = RedisServer::start();
    let dir = TempDir::new("runtimelate");
    let mut run = server
        .cmd()
        .args(["-k", "mrl", "--max-runtime", "3s", "--", "sh", "-c"])
        .arg(format!(
            "echo $$ > '{pid}'; while [ ! -e '{go}' ]; do sleep 0.01; done; exit 3",
            pid = dir.join("mrl.pid").display(),
            go = dir.join("mrl.go").display(),
        ))
        .spawn();
    let command = run.read_pid(&dir.join("mrl.pid"));
    run.signal(libc::SIGSTOP);
    std::fs::write(dir.join("mrl.go"), "").unwrap();
    wait_for_death(command, Duration::from_secs(15));
    assert!(
        run.started().elapsed() < Duration::from_secs(3),
        "the command ended after its --max-runtime; the machine is too slow for this test"
    );
    wait_until(
        Duration::from_secs(15),
        "the --max-runtime to pass while redlock-run is stopped",
        || run.started().elapsed() > Duration::from_secs(4),
    );
    run.signal(libc::SIGCONT);
    run.wait()
        .assert_code(3)
        .assert_stderr_lacks("--max-runtime of");
}

/// redlock-run and its guardian are both stopped (outside what docs/guarantees.md promises to
/// protect): the command runs past its lease with nobody to stop it, then ends with status
/// 3. Once both are continued, the run must not pass that status off as a clean run: it
/// reports the lost lock, 76.
#[test]
fn a_command_that_outlived_its_lease_unguarded_is_reported_lost() {
    let server = RedisServer::start();
    let dir = TempDir::new("unguarded");
    let (run, command) = job_until_go(&server, &dir, "job", "1s");
    let guardian: Vec<i32> = children_of(run.pid())
        .into_iter()
        .filter(|&pid| pid != command)
        .collect();
    assert_eq!(guardian.len(), 1, "redlock-run's children: {guardian:?}");
    run.signal(libc::SIGSTOP);
    signal(guardian[0], libc::SIGSTOP);
    wait_until(
        Duration::from_secs(15),
        "the stopped run's lease to run out",
        || !server.exists("redlock:job"),
    );
    std::fs::write(dir.join("job.go"), "").unwrap();
    wait_for_death(command, Duration::from_secs(15));
    signal(guardian[0], libc::SIGCONT);
    run.signal(libc::SIGCONT);
    let out = run.wait();
    eprintln!("{}", out.stderr);
    out.assert_code(76).assert_stderr_contains("lock lost");
}
