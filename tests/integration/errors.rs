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
        (vec!["-k", "x", "-t", "1s", "--renew-every", "495ms"], true),
        (vec!["-k", "x", "-t", "1s", "--renew-every", "900ms"], true),
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
            // The longest renewal period a 1s lease allows: half of 1s less its 12ms drift.
            "494ms",
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

/// A mistyped flag: clap's lines kept apart in text (the error after `redlock-run: `, the
/// tip, the usage), one JSON object in JSON; neither runs the lines together.
#[test]
fn a_mistyped_flag_keeps_the_lines_of_its_error() {
    let out = Wrapper::bare()
        .args(["-k", "x", "--bogus-flag", "--", "true"])
        .run();
    out.assert_code(125);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines[0], "redlock-run: unexpected argument '--bogus-flag' found",
        "{}",
        out.stderr
    );
    let has = |start: &str| {
        lines
            .iter()
            .any(|line| line.trim_start().starts_with(start))
    };
    assert!(
        has("tip: to pass '--bogus-flag' as a value"),
        "{}",
        out.stderr
    );
    assert!(
        has("Usage: redlock-run [OPTIONS] --key <KEY>"),
        "{}",
        out.stderr
    );

    let out = Wrapper::bare()
        .args([
            "--log-format",
            "json",
            "-k",
            "x",
            "--bogus-flag",
            "--",
            "true",
        ])
        .run();
    out.assert_code(125);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    let line: serde_json::Value = serde_json::from_str(lines[0]).expect("one JSON object");
    assert_eq!(line["event"], "usage", "{line}");
    assert_eq!(
        line["message"],
        "unexpected argument '--bogus-flag' found; tip: to pass '--bogus-flag' as a value, \
         use '-- --bogus-flag'; try --help",
        "{line}"
    );
}

/// With `--` on the line, a word before it is a mistake (a value that needed quotes), not
/// the command: `--wait 5 minutes -- job` used to run a program called `minutes` (127).
#[test]
fn a_word_before_the_separator_is_a_usage_error() {
    let server = RedisServer::start();
    let dir = TempDir::new("stray");
    let out = server
        .cmd()
        .args(["-k", "st", "--wait", "5", "minutes", "--", "touch"])
        .arg(dir.join("ran"))
        .run();
    out.assert_code(125)
        .assert_stderr_contains("unexpected 'minutes' before '--'")
        .assert_stderr_contains("--wait '5 minutes'");
    assert!(!dir.exists("ran"), "the command ran");
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
    // Without a word before it, `--` and the command's own `--` are as before.
    server
        .cmd()
        .args(["-k", "st", "--", "sh", "-c", "exit 3", "--", "x"])
        .run()
        .assert_code(3);
}

/// A subcommand one or two letters off is suggested, instead of asking for --key; a
/// program of that name after `--` still runs.
#[test]
fn a_misspelt_subcommand_is_suggested() {
    let out = Wrapper::bare().args(["stauts", "-k", "x"]).run();
    out.assert_code(125)
        .assert_stderr_contains("unrecognized subcommand 'stauts'")
        .assert_stderr_contains("did you mean 'status'?")
        .assert_stderr_lacks("--key <KEY>' were not provided");
    Wrapper::bare()
        .args(["lst"])
        .run()
        .assert_code(125)
        .assert_stderr_contains("did you mean 'list'?");
    // Too far from any: the usual error.
    Wrapper::bare()
        .args(["test"])
        .run()
        .assert_code(125)
        .assert_stderr_lacks("did you mean");
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
    // From the environment: a password typed on the command line adds a warning line.
    let out = Wrapper::new(&format!("redis://:downsecret99@127.0.0.1:{port}"))
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

/// Every number is checked where it is parsed: a duration past its limit is refused with
/// 125 and a message naming the limit, before Redis is asked and before anything runs (it
/// used to pass, then panic after the command ran, leaving the lock held).
#[test]
fn durations_past_their_limits_are_refused_up_front() {
    let server = RedisServer::start();
    let dir = TempDir::new("huge");
    let huge = "100000000years";
    for flag in [
        "--ttl",
        "--wait",
        "--kill-after",
        "--min-hold",
        "--max-runtime",
        "--redis-timeout",
        "--renew-every",
    ] {
        assert_rejected(&server, &dir, &["-k", "x", flag, huge], true);
        let out = server
            .cmd()
            .args(["-k", "x", flag, huge, "--", "true"])
            .run();
        out.assert_code(125)
            .assert_stderr_contains(&format!("invalid {flag}: "))
            .assert_stderr_contains("longer than the limit of");
    }
    for (flag, limit) in [
        ("--ttl", "366days"),
        ("--wait", "3651days"),
        ("--redis-timeout", "61m"),
    ] {
        assert_rejected(&server, &dir, &["-k", "x", flag, limit], true);
    }
    // The limits themselves are fine.
    server
        .cmd()
        .args(["-k", "x", "--ttl", "365days", "--min-hold", "1ms"])
        .args(["--max-runtime", "3650days", "--kill-after", "3650days"])
        .args(["--wait", "3650days", "--redis-timeout", "1h", "--", "true"])
        .run()
        .assert_code(0);
}

/// A renewal schedule that cannot keep the lease is refused, with the rule in the message.
#[test]
fn a_renewal_schedule_that_cannot_keep_the_lease_is_refused() {
    let server = RedisServer::start();
    let out = server
        .cmd()
        .args(["-k", "x", "-t", "10s", "--renew-every", "9s", "--", "true"])
        .run();
    out.assert_code(125)
        .assert_stderr_contains(
            "invalid --renew-every: with --ttl 10s it must be at least 10ms and at most 4s 949ms",
        )
        .assert_stderr_contains("so that a failed renewal can be retried");
}

/// A renewal period has a floor: `1ns` would renew tens of thousands of times a second, a
/// busy loop against Redis that makes the lease no safer. Refused before Redis is asked.
#[test]
fn a_renewal_period_below_the_floor_is_refused() {
    let server = RedisServer::start();
    let dir = TempDir::new("renewfloor");
    for period in ["1ns", "1us", "9ms", "0"] {
        assert_rejected(&server, &dir, &["-k", "x", "--renew-every", period], true);
        server
            .cmd()
            .args(["-k", "x", "--renew-every", period, "--", "true"])
            .run()
            .assert_code(125)
            .assert_stderr_contains("invalid --renew-every: ")
            .assert_stderr_contains("shorter than the minimum of 10ms");
    }
    // The floor itself is allowed, and renews as often as it says.
    server
        .cmd()
        .args(["-k", "x", "-t", "1s", "--renew-every", "10ms", "--", "true"])
        .run()
        .assert_code(0);
}

/// A flag beats the environment: an exported REDLOCK_WAIT does not make --no-wait a usage
/// error; --no-wait simply wins. (Both typed on the command line still contradict.)
#[test]
fn no_wait_beats_a_wait_from_the_environment() {
    let server = RedisServer::start();
    let dir = TempDir::new("envwait");
    let holder = hold(server.cmd().args(["-k", "ew"]), &dir, "h");
    let out = server
        .cmd()
        .env("REDLOCK_WAIT", "30s")
        .args(["-k", "ew", "--no-wait", "--", "true"])
        .run();
    out.assert_code(75).assert_stderr_contains("not waiting");
    assert!(out.elapsed < Duration::from_secs(10), "it waited");
    let both = server
        .cmd()
        .args(["-k", "ew", "--wait", "1s", "--no-wait", "--", "true"])
        .run();
    both.assert_code(125)
        .assert_stderr_contains("'--no-wait' cannot be used with '--wait <DUR>'");
    holder.let_go();
    holder.wait().assert_code(0);
}
