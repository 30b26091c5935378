//! Exit statuses and what the command sees: its own status passed through, 128+S for a
//! signal death, 75 / -E when the lock is not obtained, 126 / 127 when the command cannot
//! run; stdout untouched; the REDLOCK_* environment.

use std::fs;
use std::time::Duration;

use crate::support::*;

#[test]
fn command_status_is_passed_through() {
    let server = RedisServer::start();
    for code in [0, 1, 7, 42, 255] {
        server
            .cmd()
            .args(["-k", "status", "--", "sh", "-c"])
            .arg(format!("exit {code}"))
            .run()
            .assert_code(code);
    }
    assert_eq!(server.dbsize(), 0);
}

#[test]
fn command_killed_by_a_signal_gives_128_plus_signal() {
    let server = RedisServer::start();
    server
        .cmd()
        .args(["-k", "sig", "--", "sh", "-c", "kill -KILL $$"])
        .run()
        .assert_code(137);
    server
        .cmd()
        .args(["-k", "sig", "--", "sh", "-c", "kill -TERM $$"])
        .run()
        .assert_code(143);
    assert_eq!(server.dbsize(), 0, "keys left: {:?}", server.keys());
}

/// stdout carries exactly the command's bytes, even with -v (which talks on stderr).
#[test]
fn stdout_is_only_the_command_output() {
    let server = RedisServer::start();
    let expected: &[u8] = b"hello\nworld\x00\xff\xfe no newline";
    for verbose in [false, true] {
        let mut cmd = server.cmd().args(["-k", "out"]);
        if verbose {
            cmd = cmd.arg("-v");
        }
        let out = cmd
            .args(["--", "printf", "hello\\nworld\\000\\377\\376 no newline"])
            .run();
        out.assert_code(0).assert_stderr_prefixed();
        assert_eq!(out.stdout, expected, "verbose={verbose}");
        if verbose {
            assert!(!out.stderr.is_empty(), "-v printed nothing on stderr");
        }
    }
    // The command's own stderr passes through as well.
    let out = server
        .cmd()
        .args(["-k", "out", "-q", "--", "sh", "-c", "echo oops >&2"])
        .run();
    out.assert_code(0);
    assert_eq!(out.stderr, "oops\n");
    assert!(out.stdout.is_empty());
}

/// A holder's job that writes the REDLOCK_KEY, REDLOCK_TOKEN and REDLOCK_TTL_MS it sees to
/// `NAME.env`, one per line.
fn showing_env<'a>(dir: &'a TempDir, name: &str) -> Job<'a> {
    Job::new(dir, name).first(&format!(
        "printf '%s\\n%s\\n%s\\n' \"$REDLOCK_KEY\" \"$REDLOCK_TOKEN\" \"$REDLOCK_TTL_MS\" > '{env}.tmp'\n\
         mv '{env}.tmp' '{env}'",
        env = dir.join(&format!("{name}.env")).display(),
    ))
}

/// The command sees REDLOCK_KEY, REDLOCK_TOKEN and REDLOCK_TTL_MS, and the token is the one
/// stored in Redis.
#[test]
fn command_environment_describes_the_lock() {
    let server = RedisServer::start();
    let dir = TempDir::new("env");
    let holder =
        showing_env(&dir, "default").start(server.cmd().args(["-k", "envtest", "-t", "5s"]));
    let env = dir.read("default.env");
    let lines: Vec<&str> = env.lines().collect();
    assert_eq!(lines.len(), 3, "env file: {env:?}");
    assert_eq!(lines[0], "redlock:envtest");
    assert_uuid_v4(lines[1]);
    assert_eq!(lines[2], "5000");
    let value = server
        .get("redlock:envtest")
        .expect("lock key missing while the command runs");
    assert_eq!(token_of(&value), lines[1], "stored value: {value}");
    assert!(value.ends_with('}'), "value is not a JSON object: {value}");
    let pttl = server.pttl("redlock:envtest");
    assert!((1..=5000).contains(&pttl), "pttl {pttl}");
    holder.let_go();
    holder.wait().assert_code(0);
    assert_eq!(server.dbsize(), 0);

    // A custom prefix and a bare-number TTL (seconds).
    let holder = showing_env(&dir, "custom").start(
        server
            .cmd()
            .args(["-k", "envtest", "--prefix", "app/", "-t", "2"]),
    );
    let env = dir.read("custom.env");
    let lines: Vec<&str> = env.lines().collect();
    assert_eq!(lines[0], "app/envtest");
    assert_eq!(lines[2], "2000");
    assert_eq!(
        token_of(&server.get("app/envtest").expect("app/envtest missing")),
        lines[1]
    );
    holder.let_go();
    holder.wait().assert_code(0);
    assert_eq!(server.dbsize(), 0);
}

/// --no-wait on a busy lock exits 75 (or the -E code) and never runs the command;
/// --wait 500ms gives up after about half a second.
#[test]
fn busy_lock_is_not_obtained() {
    let server = RedisServer::start();
    let dir = TempDir::new("busy");
    let holder = hold(server.cmd().args(["-k", "busy"]), &dir, "holder");
    let held = server.lock_value("busy").expect("holder's key missing");
    let ran = dir.join("ran");

    let out = server
        .cmd()
        .args(["-k", "busy", "--no-wait", "--", "touch"])
        .arg(&ran)
        .run();
    out.assert_code(75).assert_stderr_prefixed();
    assert!(
        out.elapsed < Duration::from_secs(5),
        "--no-wait took {:?}",
        out.elapsed
    );

    server
        .cmd()
        .args(["-k", "busy", "-E", "3", "--no-wait", "--", "touch"])
        .arg(&ran)
        .run()
        .assert_code(3);

    server
        .cmd()
        .args(["-k", "busy", "-n", "--", "touch"])
        .arg(&ran)
        .run()
        .assert_code(75);

    let out = server
        .cmd()
        .args(["-k", "busy", "--wait", "500ms", "--", "touch"])
        .arg(&ran)
        .run();
    out.assert_code(75);
    eprintln!("--wait 500ms gave up after {:?}", out.elapsed);
    assert!(
        out.elapsed >= Duration::from_millis(450),
        "gave up too early: {:?}",
        out.elapsed
    );
    assert!(
        out.elapsed < Duration::from_secs(5),
        "gave up too late: {:?}",
        out.elapsed
    );

    assert!(!ran.exists(), "a command ran without the lock");
    holder.assert_kept_the_lock_alone(&server, "busy", held);
}

/// --wait longer than the holder's job gets the lock.
#[test]
fn bounded_wait_succeeds_when_the_holder_finishes_in_time() {
    let server = RedisServer::start();
    let dir = TempDir::new("waitok");
    let holder = hold(server.cmd().args(["-k", "w"]), &dir, "holder");
    let waiter = server
        .cmd()
        .args(["-k", "w", "--wait", "20s", "--", "touch"])
        .arg(dir.join("ran"))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.subscribed_clients() > 0
    });
    assert!(!dir.exists("ran"));
    holder.let_go();
    holder.wait().assert_code(0);
    waiter.wait().assert_code(0);
    assert!(dir.exists("ran"));
    assert_eq!(server.dbsize(), 0);
}

#[test]
fn non_executable_command_gives_126_and_releases() {
    let server = RedisServer::start();
    let dir = TempDir::new("126");
    let file = dir.join("not-executable");
    fs::write(&file, "#!/bin/sh\necho should not run\n").unwrap();
    let out = server.cmd().args(["-k", "x", "--"]).arg(&file).run();
    out.assert_code(126).assert_stderr_prefixed();
    assert!(out.stdout.is_empty());
    assert_eq!(server.dbsize(), 0, "keys left: {:?}", server.keys());

    // A directory cannot be executed either.
    server
        .cmd()
        .args(["-k", "x", "--"])
        .arg(dir.path())
        .run()
        .assert_code(126);
    assert_eq!(server.dbsize(), 0);
}

#[test]
fn missing_command_gives_127_and_releases() {
    let server = RedisServer::start();
    let out = server
        .cmd()
        .args(["-k", "x", "--", "redlock-run-no-such-command-xyz"])
        .run();
    out.assert_code(127).assert_stderr_prefixed();
    assert!(
        out.stderr.contains("redlock-run-no-such-command-xyz"),
        "stderr does not name the command: {}",
        out.stderr
    );
    assert_eq!(server.dbsize(), 0, "keys left: {:?}", server.keys());

    server
        .cmd()
        .args(["-k", "x", "--", "/nonexistent/dir/cmd"])
        .run()
        .assert_code(127);
    assert_eq!(server.dbsize(), 0);
}

/// A command that cannot be started at all (an empty name) is refused before Redis is asked
/// for the lock: the command is readied before the lock is taken.
#[test]
fn an_empty_command_name_gives_127_before_redis_is_asked() {
    let server = RedisServer::start();
    let before = server.command_stats();
    server
        .cmd()
        .args(["-k", "x", "--", ""])
        .run()
        .assert_code(127)
        .assert_stderr_prefixed();
    let scripts = |stats: &[(String, u64)]| -> u64 {
        stats
            .iter()
            .filter(|(name, _)| name.starts_with("eval") || name.starts_with("script"))
            .map(|(_, calls)| calls)
            .sum()
    };
    assert_eq!(
        scripts(&server.command_stats()),
        scripts(&before),
        "a lock was asked for"
    );
    assert_eq!(server.dbsize(), 0);
}

#[test]
fn shell_mode_runs_a_pipeline() {
    let server = RedisServer::start();
    let out = server
        .cmd()
        .args(["-k", "sh", "--shell", "echo a | cat; echo \"$REDLOCK_KEY\""])
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "a\nredlock:sh\n");
    server
        .cmd()
        .args(["-k", "sh", "-c", "exit 9"])
        .run()
        .assert_code(9);
    assert_eq!(server.dbsize(), 0);
}

/// Arguments after -- reach the command verbatim, including ones that look like flags.
#[test]
fn command_arguments_are_passed_verbatim() {
    let server = RedisServer::start();
    let out = server
        .cmd()
        .args([
            "-k", "args", "--", "printf", "[%s]", "-k", "--ttl", "a b", "", "--",
        ])
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "[-k][--ttl][a b][][--]");
}

/// A command that cannot be started because no process can be made (fork fails with
/// EAGAIN) is redlock-run's failure, 125, not "cannot execute" (126). Run as an unprivileged
/// user with a process limit that leaves room for redlock-run's threads but not for the
/// command; the limit is searched for, since it depends on how many threads run.
#[test]
fn no_process_for_the_command_is_a_wrapper_failure() {
    let setpriv = require(
        "setpriv",
        "this test runs redlock-run as an unprivileged user under a process limit",
        "apt-get install util-linux",
    );
    let server = RedisServer::start();
    let without_a_process = (2..=10).find_map(|limit| {
        let script = format!(
            "exec prlimit --nproc={limit}:{limit} '{}' --reuid 65534 --regid 65534 \
             --clear-groups \"$0\" \"$@\"",
            setpriv.display()
        );
        let out = Wrapper::via_shell(&server.url(), &script)
            .args([BIN, "-k", "nproc", "--", "true"])
            .run();
        out.stderr.contains("cannot start true").then_some(out)
    });
    let out = without_a_process.expect("no process limit kept the command from starting");
    out.assert_code(125)
        .assert_stderr_contains("Resource temporarily unavailable");
}
