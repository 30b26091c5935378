//! `--stop-timeout`: after a SIGTERM, SIGINT or SIGHUP to redlock-run, a command that has not
//! ended within the budget is killed with its group, the lock is released and the run exits
//! 128+N, all within the budget and a second, so the next run finds the lock free. Without
//! the flag a command that ignores the signal keeps the lock for as long as it runs.

use std::time::{Duration, Instant};

use crate::support::*;

/// Starts a stubborn command (it ignores SIGTERM) under `args`, sends SIGTERM once it runs,
/// and returns the wrapper, the command's pid and when the signal was sent.
fn stubborn_under(server: &RedisServer, dir: &TempDir, args: &[&str]) -> (Running, i32, Instant) {
    let mut wrapper = server
        .cmd()
        .args(args)
        .arg("--")
        .arg(stubborn_script(dir))
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    assert!(server.exists("redlock:stop"));
    let sent = Instant::now();
    wrapper.signal(libc::SIGTERM);
    (wrapper, pid, sent)
}

#[test]
fn stop_timeout_kills_a_command_that_ignores_sigterm_and_frees_the_lock() {
    let server = RedisServer::start();
    let dir = TempDir::new("stop-timeout");
    let args = ["-k", "stop", "--stop-timeout", "2s", "--log-format", "json"];
    let (wrapper, pid, _) = stubborn_under(&server, &dir, &args);
    let pgid = pgid_of(pid).expect("the command's group");
    let freed = wait_until(Duration::from_secs(10), "the lock to be free", || {
        !server.exists("redlock:stop")
    });
    let out = wrapper.wait_within(Duration::from_secs(10));
    out.assert_code(143)
        .assert_stderr_contains(r#""event":"stop_timeout""#)
        .assert_stderr_contains(r#""exit_code":143"#);
    // The command had its budget, and no more than a second past it.
    assert!(
        freed >= Duration::from_millis(1800),
        "the lock was freed {freed:?} after SIGTERM: before the budget of 2s ran out"
    );
    assert!(
        freed <= Duration::from_secs(3),
        "the lock was freed {freed:?} after SIGTERM, not within 2s + 1s"
    );
    assert_eq!(dir.read("terms"), "TERM", "SIGTERM forwarded once");
    assert!(!pid_alive(pid), "the command survived");
    assert!(live_in_group(pgid).is_empty(), "its group survived");
    assert_eq!(server.dbsize(), 0, "left in Redis: {:?}", server.keys());
}

/// Without the flag, a command that ignores SIGTERM keeps running, and keeps the lock.
#[test]
fn without_stop_timeout_a_command_that_ignores_sigterm_keeps_the_lock() {
    let server = RedisServer::start();
    let dir = TempDir::new("no-stop-timeout");
    let (mut wrapper, pid, sent) = stubborn_under(&server, &dir, &["-k", "stop"]);
    wait_until(
        Duration::from_secs(10),
        "SIGTERM to reach the command",
        || dir.exists("terms"),
    );
    // Longer than the 2s + 1s the flag would have given it.
    while sent.elapsed() < Duration::from_secs(4) {
        assert!(
            !wrapper.has_exited(),
            "redlock-run ended without --stop-timeout"
        );
        assert!(server.exists("redlock:stop"), "the lock was released");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(pid_alive(pid));
    // USR1 is forwarded, and the script does not trap it: it dies of it.
    wrapper.signal(libc::SIGUSR1);
    wrapper
        .wait_within(Duration::from_secs(15))
        .assert_code(128 + libc::SIGUSR1)
        .assert_stderr_lacks("stop-timeout");
    assert_eq!(server.dbsize(), 0);
}

/// A command that ends within the budget exits with its own status, and nothing is killed.
#[test]
fn a_command_that_ends_within_the_stop_timeout_keeps_its_status() {
    let server = RedisServer::start();
    let dir = TempDir::new("stop-in-time");
    let script = dir.script(
        "polite",
        &format!(
            "trap 'sleep 0.3; exit 3' TERM\necho $$ > '{}'\nwhile :; do sleep 0.05; done",
            dir.join("pid").display()
        ),
    );
    let mut wrapper = server
        .cmd()
        .args(["-k", "stop", "--stop-timeout", "5s", "--"])
        .arg(script)
        .spawn();
    wrapper.read_pid(&dir.join("pid"));
    wrapper.signal(libc::SIGTERM);
    wrapper
        .wait_within(Duration::from_secs(15))
        .assert_code(3)
        .assert_stderr_lacks("stop-timeout");
    assert_eq!(server.dbsize(), 0);
}

#[test]
fn a_malformed_stop_timeout_is_a_usage_error() {
    let server = RedisServer::start();
    let dir = TempDir::new("stop-bad");
    for bad in ["soon", "-1", "2 fortnights", "", "11 years"] {
        server
            .cmd()
            .args([
                "-k",
                "stop",
                &format!("--stop-timeout={bad}"),
                "--",
                "touch",
            ])
            .arg(dir.join("ran"))
            .run()
            .assert_code(125)
            .assert_stderr_contains("invalid --stop-timeout");
        assert!(
            !dir.exists("ran"),
            "the command ran with --stop-timeout {bad:?}"
        );
    }
}

/// Over a Redlock quorum of three masters: the lock is free on every node within the budget
/// and a second.
#[test]
fn over_three_masters_the_lock_is_free_on_every_node_within_the_budget() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = TempDir::new("stop-redlock");
    let mut wrapper = Wrapper::bare();
    for node in &nodes {
        wrapper = wrapper.args(["-r", &node.url()]);
    }
    let mut wrapper = wrapper
        .args(["-k", "stop", "--stop-timeout", "1s", "--"])
        .arg(stubborn_script(&dir))
        .spawn();
    wrapper.read_pid(&dir.join("pid"));
    assert!(nodes.iter().all(|node| node.exists("redlock:stop")));
    wrapper.signal(libc::SIGTERM);
    let freed = wait_until(
        Duration::from_secs(10),
        "the lock to be free everywhere",
        || nodes.iter().all(|node| !node.exists("redlock:stop")),
    );
    wrapper
        .wait_within(Duration::from_secs(10))
        .assert_code(143);
    assert!(
        freed <= Duration::from_secs(2),
        "the lock was freed on every node {freed:?} after SIGTERM, not within 1s + 1s"
    );
    assert_eq!(dir.read("terms"), "TERM");
}

/// A budget longer than the TTL: the lease is renewed meanwhile, so the command gets all of
/// it, not just what was left of the lease when the signal came.
#[test]
fn a_stop_timeout_longer_than_the_ttl_is_given_in_full() {
    let server = RedisServer::start();
    let dir = TempDir::new("stop-long");
    let args = ["-k", "stop", "--ttl", "1s", "--stop-timeout", "2500ms"];
    let (wrapper, _, _) = stubborn_under(&server, &dir, &args);
    let freed = wait_until(Duration::from_secs(10), "the lock to be free", || {
        !server.exists("redlock:stop")
    });
    wrapper
        .wait_within(Duration::from_secs(10))
        .assert_code(143);
    assert!(
        freed >= Duration::from_millis(2300),
        "the lock was freed {freed:?} after SIGTERM: before the budget of 2.5s ran out"
    );
    assert!(
        freed <= Duration::from_millis(3500),
        "the lock was freed {freed:?} after SIGTERM, not within 2.5s + 1s"
    );
}
