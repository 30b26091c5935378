//! redlock-run's own failures: bad input, an unreachable Redis, a wrong password. All exit
//! 125 without running the command or writing to Redis, and never print a password.

use std::time::Duration;

use crate::support::*;

/// Runs the wrapper with `args` followed by a command that would leave a marker, and checks
/// it failed with 125, ran nothing and wrote nothing.
#[track_caller]
fn assert_rejected(server: &RedisServer, dir: &TempDir, args: &[&str], with_command: bool) {
    let marker = dir.join("ran");
    let mut cmd = server.cmd().args(args);
    if with_command {
        cmd = cmd.arg("--").arg("touch").arg(&marker);
    }
    let out = cmd.run();
    assert_eq!(
        out.status.code(),
        Some(125),
        "args {args:?}: expected 125, got {:?}\nstderr:\n{}",
        out.status,
        out.stderr
    );
    assert!(
        !out.stderr.trim().is_empty(),
        "args {args:?}: no error message"
    );
    assert!(!marker.exists(), "args {args:?}: the command ran");
    assert_eq!(
        server.dbsize(),
        0,
        "args {args:?}: keys written: {:?}",
        server.keys()
    );
}

#[test]
fn bad_input_exits_125_without_touching_redis() {
    let server = RedisServer::start();
    let dir = TempDir::new("badinput");
    let long_key = "k".repeat(1025);
    let ran = dir.join("ran");
    let ran = ran.to_str().unwrap();
    let touch_ran = format!("touch {ran}");
    let cases: Vec<(Vec<&str>, bool)> = vec![
        (vec!["-k", ""], true),
        (vec!["-k", &long_key], true),
        (vec!["-k", "x", "-t", "0"], true),
        (vec!["-k", "x", "-t", "0s"], true),
        (vec!["-k", "x", "-t", "50ms"], true),
        (vec!["-k", "x", "-t", "abc"], true),
        (vec!["-k", "x", "-t", "-5"], true),
        (vec!["-k", "x", "-t", "1s", "--renew-every", "1s"], true),
        (vec!["-k", "x", "-t", "1s", "--renew-every", "2s"], true),
        (vec!["-k", "x", "--wait", "soon"], true),
        (vec!["-k", "x", "--kill-after", "xyz"], true),
        (vec!["-k", "x", "--redis-timeout", "nope"], true),
        (vec!["-k", "x", "-r", "http://x"], true),
        (vec!["-k", "x", "-r", "not a url"], true),
        (vec!["-k", "x", "--bogus-flag"], true),
        (vec!["-k", "x"], false),
        (vec!["--", "touch", ran], false),
        (vec!["-k", "x", "--shell", &touch_ran], true),
        (vec!["-k", "x", "-E", "256"], true),
        (vec!["-k", "x", "-E", "-1"], true),
        (vec!["-k", "x", "--no-wait", "--wait", "1s"], true),
        (vec!["-k", "x", "-q", "-v"], true),
    ];
    for (args, with_command) in &cases {
        assert_rejected(&server, &dir, args, *with_command);
    }
}

/// The limits themselves are accepted.
#[test]
fn boundary_values_are_accepted() {
    let server = RedisServer::start();
    let key = "k".repeat(1024);
    let out = server
        .cmd()
        .args(["-k", &key, "--", "sh", "-c", "printf %s \"$REDLOCK_KEY\""])
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), format!("redlock:{key}"));

    for (ttl, ms) in [("100ms", "100"), ("2", "2000"), ("1m", "60000")] {
        let out = server
            .cmd()
            .args([
                "-k",
                "b",
                "-t",
                ttl,
                "--",
                "sh",
                "-c",
                "printf %s \"$REDLOCK_TTL_MS\"",
            ])
            .run();
        out.assert_code(0);
        assert_eq!(out.stdout_str(), ms, "-t {ttl}");
    }
    server
        .cmd()
        .args([
            "-k",
            "b",
            "-t",
            "1s",
            "--renew-every",
            "900ms",
            "--wait",
            "forever",
        ])
        .args([
            "--kill-after",
            "2s",
            "--redis-timeout",
            "2s",
            "-E",
            "200",
            "--",
            "true",
        ])
        .run()
        .assert_code(0);
    // Options also come from the environment.
    let out = server
        .cmd()
        .env("REDLOCK_TTL", "7s")
        .env("REDLOCK_PREFIX", "env:")
        .args([
            "-k",
            "e",
            "--",
            "sh",
            "-c",
            "printf '%s %s' \"$REDLOCK_KEY\" \"$REDLOCK_TTL_MS\"",
        ])
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "env:e 7000");
    assert_eq!(server.dbsize(), 0);
}

#[test]
fn help_and_version_exit_0() {
    let out = Wrapper::bare().arg("--help").run();
    out.assert_code(0);
    let help = out.stdout_str();
    for needle in [
        "--key",
        "--shell",
        "--no-wait",
        "75",
        "76",
        "125",
        "126",
        "127",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    assert!(help.to_lowercase().contains("exit status"), "{help}");

    let out = Wrapper::bare().arg("--version").run();
    out.assert_code(0);
    assert!(
        out.stdout_str().contains(env!("CARGO_PKG_VERSION")),
        "--version: {}",
        out.stdout_str()
    );
}

/// --help must not show the value of REDLOCK_REDIS, which may hold a password.
#[test]
fn help_hides_the_redis_url_from_the_environment() {
    let out = Wrapper::new("redis://:helpsecret123@127.0.0.1:1")
        .arg("--help")
        .run();
    out.assert_code(0).assert_not_leaked("helpsecret123");
}

/// Nothing listens on the port: 125 quickly, one line, command not run, password redacted.
#[test]
fn unreachable_redis_at_start_exits_125() {
    let dir = TempDir::new("down");
    let port = free_port();
    let out = Wrapper::bare()
        .args(["-r", &format!("redis://:downsecret99@127.0.0.1:{port}")])
        .args(["-k", "x", "--", "touch"])
        .arg(dir.join("ran"))
        .timeout(Duration::from_secs(20))
        .run();
    out.assert_code(125).assert_stderr_prefixed();
    assert!(!dir.exists("ran"));
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?} to give up",
        out.elapsed
    );
    assert_eq!(
        out.stderr.trim().lines().count(),
        1,
        "expected one line:\n{}",
        out.stderr
    );
    let lower = out.stderr.to_lowercase();
    assert!(
        lower.contains("connect") || lower.contains("unreachable") || lower.contains("refused"),
        "stderr does not say it cannot connect: {}",
        out.stderr
    );
    out.assert_not_leaked("downsecret99");

    // The same through REDLOCK_REDIS and with -v.
    let out = Wrapper::new(&format!("redis://:downsecret99@127.0.0.1:{port}"))
        .args(["-v", "-k", "x", "--", "touch"])
        .arg(dir.join("ran"))
        .run();
    out.assert_code(125).assert_not_leaked("downsecret99");
    assert!(!dir.exists("ran"));
}

#[test]
fn wrong_password_exits_125_without_printing_it() {
    let server = RedisServer::start_with_password("right-pass-4321");
    let dir = TempDir::new("auth");
    let url = format!("redis://:wrongpass-8765@127.0.0.1:{}", server.port());
    for verbose in [false, true] {
        let mut cmd = Wrapper::bare().args(["-r", &url, "-k", "x"]);
        if verbose {
            cmd = cmd.arg("-v");
        }
        let out = cmd.arg("--").arg("touch").arg(dir.join("ran")).run();
        out.assert_code(125)
            .assert_stderr_contains("auth")
            .assert_stderr_prefixed()
            .assert_not_leaked("wrongpass-8765")
            .assert_not_leaked("right-pass-4321");
        assert!(!dir.exists("ran"), "verbose={verbose}: the command ran");
    }
    // A user name too (ACL form).
    let url = format!("redis://default:wrongpass-8765@127.0.0.1:{}", server.port());
    Wrapper::bare()
        .args(["-r", &url, "-k", "x", "--", "true"])
        .run()
        .assert_code(125)
        .assert_stderr_contains("auth")
        .assert_not_leaked("wrongpass-8765");
    // No password at all against a server that needs one.
    Wrapper::bare()
        .args(["-r", &format!("redis://127.0.0.1:{}", server.port())])
        .args(["-k", "x", "--", "true"])
        .run()
        .assert_code(125);
    assert_eq!(server.dbsize(), 0);
}

#[test]
fn right_password_works_and_is_never_printed() {
    let server = RedisServer::start_with_password("right-pass-4321");
    let dir = TempDir::new("authok");
    // server.url() carries the password; pass it with -r this time.
    let out = Wrapper::bare()
        .args(["-r", &server.url(), "-v", "-k", "ok", "--", "touch"])
        .arg(dir.join("ran"))
        .run();
    out.assert_code(0)
        .assert_stderr_prefixed()
        .assert_not_leaked("right-pass-4321");
    assert!(dir.exists("ran"));
    assert_eq!(server.dbsize(), 0);
}

/// A URL naming a database is honoured: the key lands in that database.
#[test]
fn database_number_in_url_is_used() {
    let server = RedisServer::start();
    let dir = TempDir::new("db");
    let holder = hold(
        Wrapper::bare()
            .args(["-r", &format!("redis://127.0.0.1:{}/3", server.port())])
            .args(["-k", "indb3"]),
        &dir,
        "hold",
    );
    assert_eq!(server.dbsize(), 0, "key written to db 0");
    let mut con = server.connection();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut con).unwrap();
    let exists: i64 = redis::cmd("EXISTS")
        .arg("redlock:indb3")
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, 1, "key not in db 3");
    holder.let_go();
    holder.wait().assert_code(0);
    let exists: i64 = redis::cmd("EXISTS")
        .arg("redlock:indb3")
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, 0, "key not released in db 3");
}
