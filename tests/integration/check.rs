//! `check -k KEY` (issue 23): a monitoring plugin's line and exit codes (0 OK, 1 WARNING,
//! 2 CRITICAL, 3 UNKNOWN) at each threshold, with counters and holders seeded per the data
//! model; UNKNOWN for Redis down, bad credentials and every bad command line; a Redlock
//! quorum's majority values.

use std::time::Duration;

use crate::support::*;

/// `check -k KEY ARGS` against `server`: its exit code and its one line.
#[track_caller]
fn check(server: &RedisServer, key: &str, args: &[&str]) -> (i32, String) {
    let out = server.cmd().args(["check", "-k", key]).args(args).run();
    plugin_result(&out)
}

/// The exit code and the single stdout line of a plugin run, checked for the plugin
/// guidelines' shape: `REDLOCK STATE - …`, and its performance data.
#[track_caller]
fn plugin_result(out: &Output) -> (i32, String) {
    let code = out
        .status
        .code()
        .expect("check exits, never dies of a signal");
    let stdout = out.stdout_str();
    assert!(
        stdout.ends_with('\n') && stdout.lines().count() == 1,
        "not one line on stdout: {stdout:?}\nstderr:\n{}",
        out.stderr
    );
    let line = stdout.trim_end().to_string();
    let word = ["OK", "WARNING", "CRITICAL", "UNKNOWN"][code as usize];
    assert!(
        line.starts_with(&format!("REDLOCK {word} - ")),
        "exit {code} with {line:?}"
    );
    if let Some((_, perfdata)) = line.split_once(" | ") {
        for item in perfdata.split(' ') {
            assert_perfdata(item);
        }
    }
    (code, line)
}

/// `'label'=value[UOM];[warn];[crit];[min];[max]`, value a number or U.
#[track_caller]
fn assert_perfdata(item: &str) {
    let (label, rest) = item
        .strip_prefix('\'')
        .and_then(|item| item.split_once("'="))
        .unwrap_or_else(|| panic!("{item:?}: no quoted label"));
    assert!(
        !label.is_empty() && !label.contains(['=', '\'']),
        "{item:?}"
    );
    let mut fields = rest.split(';');
    let value = fields.next().unwrap();
    if value != "U" {
        let number = value.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '%');
        number
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("{item:?}: {value:?} is not a value"));
        let unit = &value[number.len()..];
        assert!(
            ["", "s", "ms", "us", "%", "B", "KB", "MB", "TB", "c"].contains(&unit),
            "{item:?}"
        );
    }
    let rest: Vec<&str> = fields.collect();
    assert!(rest.len() <= 4, "{item:?}");
    for threshold in rest {
        assert!(
            threshold.is_empty() || threshold.parse::<f64>().is_ok(),
            "{item:?}: {threshold:?}"
        );
    }
}

/// The holder's age: OK under both levels, WARNING over --warn-held, CRITICAL over
/// --max-held, naming host:pid and how long; a free lock is OK.
#[test]
fn held_too_long_warns_then_goes_critical() {
    let server = RedisServer::start();
    server.seed_holder("h", "web-3", 4242, Duration::from_secs(600));
    let (code, line) = check(&server, "h", &["--warn-held", "1h", "--max-held", "2h"]);
    assert_eq!(code, 0, "{line}");
    assert!(line.contains("held by web-3:4242 for 10m"), "{line}");
    assert!(
        line.contains("'held'=600.") && line.contains(";3600.000;7200.000;0;"),
        "{line}"
    );
    let (code, line) = check(&server, "h", &["--warn-held", "5m", "--max-held", "2h"]);
    assert_eq!(code, 1, "{line}");
    assert!(
        line.contains("for 10m") && line.contains("(WARNING: over 5m)"),
        "{line}"
    );
    let (code, line) = check(&server, "h", &["--warn-held", "1m", "--max-held", "5m"]);
    assert_eq!(code, 2, "{line}");
    assert!(
        line.contains("held by web-3:4242 for 10m") && line.contains("(CRITICAL: over 5m)"),
        "{line}"
    );

    // A level below a second is named as given.
    let (code, line) = check(&server, "h", &["--max-held", "1500ms"]);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("(CRITICAL: over 1s 500ms)"), "{line}");

    let (code, line) = check(&server, "free", &["--max-held", "1s"]);
    assert_eq!(code, 0, "{line}");
    assert!(line.contains("redlock:free: free"), "{line}");
}

/// A holder recorded as taking its slot an hour in the future of the server's clock (a
/// clock stepped back, or data redlock-run did not write) is named, not read as held for
/// 0s (issue 30): UNKNOWN when a held level depends on it, shown with its skew otherwise;
/// `metrics` gives the age as negative, `status` names it too.
#[test]
fn a_holder_dated_in_the_future_is_named_not_read_as_0s() {
    let server = RedisServer::start();
    let ahead = server.server_ms() + 3_600_000;
    let value = format!(
        "{{\"token\":\"t-7\",\"fence\":1,\"host\":\"web-7\",\"pid\":7,\
         \"program\":\"job.sh\",\"since_ms\":{ahead},\"ttl_ms\":30000,\"limit\":1}}"
    );
    server.query::<()>(&["SET", "redlock:ahead", &value, "PX", "60000"]);
    server.seed_stats("ahead", &[("slot:1", format!("{ahead} {value}"))]);

    let (code, line) = check(&server, "ahead", &["--max-held", "2h"]);
    assert_eq!(code, 3, "{line}");
    assert!(line.contains("in the future"), "{line}");
    let (code, line) = check(&server, "ahead", &[]);
    assert_eq!(code, 0, "{line}");
    assert!(
        line.contains("held by web-7:7") && line.contains("59m") && line.contains("in the future"),
        "{line}"
    );
    assert!(line.contains("'held'=U"), "{line}");

    let out = server.cmd().arg("metrics").run();
    out.assert_code(0);
    let age = Exposition::parse(&out.stdout_str())
        .value("redlock_run_holder_age_seconds", &[("key", "ahead")])
        .unwrap_or_else(|| panic!("no holder age: {}", out.stdout_str()));
    assert!((-3_700.0..=-3_500.0).contains(&age), "{age}");

    let out = server.cmd().args(["status", "-k", "ahead"]).run();
    out.assert_code(0).assert_stdout_contains("in the future");
    let json = server.cmd().args(["status", "-k", "ahead", "--json"]).run();
    let json: serde_json::Value = serde_json::from_str(&json.stdout_str()).unwrap();
    let holder = &json["holders"][0];
    assert_eq!(holder["held_for_ms"], serde_json::Value::Null, "{json}");
    assert!(
        holder["ahead_ms"].as_u64().is_some_and(|ms| ms > 3_500_000),
        "{json}"
    );
}

/// Consecutive skips: the N-th is the alarm; the performance data's threshold is N-1.
#[test]
fn consecutive_skips_warn_then_go_critical() {
    let server = RedisServer::start();
    server.seed_stats("s", &[("skips", "3".into()), ("busy", "3".into())]);
    let (code, line) = check(&server, "s", &["--warn-skips", "4", "--max-skips", "5"]);
    assert_eq!(code, 0, "{line}");
    assert!(
        line.contains("3 consecutive skips") && line.contains("'skips'=3;3;4;0;"),
        "{line}"
    );
    let (code, line) = check(&server, "s", &["--warn-skips", "3", "--max-skips", "5"]);
    assert_eq!(code, 1, "{line}");
    assert!(line.contains("(WARNING: at 3)"), "{line}");
    let (code, line) = check(&server, "s", &["--max-skips", "3"]);
    assert_eq!(code, 2, "{line}");
    assert!(
        line.contains("3 consecutive skips (CRITICAL: at 3)"),
        "{line}"
    );
}

/// Time since the last success, by the server's clock; never succeeded is CRITICAL with
/// --max-since-success, WARNING with only --warn-since-success.
#[test]
fn no_recent_success_warns_then_goes_critical() {
    let server = RedisServer::start();
    let at = server.server_ms() - 2 * 3_600_000;
    server.seed_stats("j", &[("last_success_ms", at.to_string())]);
    let (code, line) = check(
        &server,
        "j",
        &["--warn-since-success", "3h", "--max-since-success", "1d"],
    );
    assert_eq!(code, 0, "{line}");
    assert!(
        line.contains("last success 2h ago") && line.contains("'since_success'=7200."),
        "{line}"
    );
    let (code, line) = check(
        &server,
        "j",
        &["--warn-since-success", "1h", "--max-since-success", "1d"],
    );
    assert_eq!(code, 1, "{line}");
    let (code, line) = check(&server, "j", &["--max-since-success", "90m"]);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("(CRITICAL: over 1h 30m)"), "{line}");

    let (code, line) = check(&server, "never-ran", &["--max-since-success", "1d"]);
    assert_eq!(code, 2, "{line}");
    assert!(
        line.contains("never succeeded") && line.contains("'since_success'=U"),
        "{line}"
    );
    let (code, _) = check(&server, "never-ran", &["--warn-since-success", "1d"]);
    assert_eq!(code, 1);
    let (code, line) = check(&server, "never-ran", &[]);
    assert_eq!(code, 0, "{line}");
}

/// A last success recorded in the future (a server clock stepped back, or data not written
/// by redlock-run) is named, not read as "0s ago": UNKNOWN when a level depends on it, and
/// the skew shown otherwise; `status` shows it too.
#[test]
fn a_last_success_in_the_future_is_named() {
    let server = RedisServer::start();
    let at = server.server_ms() + 3 * 3_600_000 + 30_000;
    server.seed_stats("fut", &[("last_success_ms", at.to_string())]);
    let (code, line) = check(&server, "fut", &["--max-since-success", "1d"]);
    assert_eq!(code, 3, "{line}");
    assert!(line.contains("in the future"), "{line}");
    assert!(line.contains("3h"), "{line}");
    let (code, line) = check(&server, "fut", &[]);
    assert_eq!(code, 0, "{line}");
    assert!(
        line.contains("last success 3h")
            && line.contains("in the future")
            && !line.contains(" ago"),
        "{line}"
    );
    let out = server.cmd().args(["status", "-k", "fut"]).run();
    assert!(
        out.stdout_str().contains("in the future") && !out.stdout_str().contains("0s ago"),
        "{}",
        out.stdout_str()
    );
}

/// The worst level wins, and the line names each breach.
#[test]
fn the_worst_breach_decides() {
    let server = RedisServer::start();
    server.seed_holder("w", "db-1", 77, Duration::from_secs(7200));
    server.seed_stats("w", &[("skips", "2".into())]);
    let (code, line) = check(&server, "w", &["--warn-skips", "2", "--max-held", "1h"]);
    assert_eq!(code, 2, "{line}");
    assert!(
        line.contains("db-1:77") && line.contains("(WARNING: at 2)"),
        "{line}"
    );
}

/// UNKNOWN (3), with the line on stdout, for Redis down and bad credentials.
#[test]
fn redis_down_or_refusing_is_unknown() {
    let out = Wrapper::new(&format!("redis://127.0.0.1:{}", free_port()))
        .args(["check", "-k", "j", "--max-skips", "1"])
        .run();
    let (code, line) = plugin_result(&out);
    assert_eq!(code, 3, "{line}");
    assert!(line.contains("redlock:j: cannot"), "{line}");

    let server = RedisServer::start_with_password("s3cret-pw");
    let wrong = format!("redis://:wrong-pw@127.0.0.1:{}", server.port());
    let out = Wrapper::new(&wrong).args(["check", "-k", "j"]).run();
    let (code, line) = plugin_result(&out);
    assert_eq!(code, 3, "{line}");
    out.assert_not_leaked("wrong-pw")
        .assert_not_leaked("s3cret-pw");
}

/// Counters another application's key stands in for: only reported without thresholds
/// that need them (OK), UNKNOWN with them, the reason on the plugin's line itself (a
/// monitoring system shows stdout, seldom stderr).
#[test]
fn counters_of_another_type_are_unknown_and_named_on_the_line() {
    let server = RedisServer::start();
    let _: () = server.query(&["SET", &stats_key("t"), "foreign"]);
    let (code, line) = check(&server, "t", &["--max-held", "1h"]);
    assert_eq!(code, 0, "{line}");
    let (code, line) = check(&server, "t", &["--max-skips", "2"]);
    assert_eq!(code, 3, "{line}");
    assert!(
        line.contains("not readable") && line.contains("is a string"),
        "{line}"
    );
}

/// Every command line that is not a check is UNKNOWN (3), never 125 or a panic: clap's own
/// errors, bad durations and counts, a warning level above the critical one.
#[test]
fn bad_command_lines_are_unknown() {
    let server = RedisServer::start();
    let cases: [&[&str]; 12] = [
        &["check", "-k", "j", "--max-skips", "-1"],
        &["check", "-k", "j", "--max-skips", "0"],
        &["check", "-k", "j", "--max-skips", "99999999999999999999999"],
        &["check", "-k", "j", "--max-skips", "x"],
        &["check", "-k", "j", "--max-held", "garbage"],
        &["check", "-k", "j", "--max-held", "-5s"],
        &["check", "-k", "j", "--max-held", "100y"],
        &["check", "-k", "j", "--max-since-success", "0"],
        &["check", "-k", "j", "--warn-held", "2h", "--max-held", "1h"],
        &["check", "-k", "j", "--no-such-flag"],
        &["check"],
        &[
            "--log-format",
            "json",
            "check",
            "-k",
            "j",
            "--warn-skips",
            "3",
            "--max-skips",
            "2",
        ],
    ];
    for args in cases {
        let out = server.cmd().args(args).run();
        let (code, line) = plugin_result(&out);
        assert_eq!(code, 3, "{args:?}: {line}");
    }
    // A negative number is read as the option's value and refused by name, not taken
    // for an unknown flag.
    for flag in [
        "--max-skips",
        "--warn-skips",
        "--max-held",
        "--warn-since-success",
    ] {
        let (code, line) = check(&server, "j", &[flag, "-1"]);
        assert_eq!(code, 3, "{line}");
        assert!(line.contains(&format!("invalid {flag}")), "{line}");
    }
    // Options before the subcommand's name (clap refuses them): UNKNOWN too, saying where
    // they go; a missing -k is named.
    let url = server.url();
    let before: [&[&str]; 5] = [
        &["-r", &url, "check", "-k", "j"],
        &["--redis", &url, "check", "-k", "j"],
        &["-v", "check", "-k", "j"],
        &["--ping", "http://h.example/x", "check", "-k", "j"],
        &[
            "--history=5",
            "-qr",
            &url,
            "check",
            "-k",
            "j",
            "--max-skips",
            "2",
        ],
    ];
    for args in before {
        let out = server.cmd().args(args).run();
        let (code, line) = plugin_result(&out);
        assert_eq!(code, 3, "{args:?}: {line}");
        assert!(line.contains("options go after"), "{args:?}: {line}");
    }
    let out = server.cmd().args(["check"]).run();
    assert!(
        plugin_result(&out).1.contains("--key"),
        "{}",
        out.stdout_str()
    );
    // The rest of redlock-run keeps 125 for a usage error, and so does a run (its -k first,
    // or after --) of a program named check.
    server
        .cmd()
        .args(["status", "--no-such-flag"])
        .run()
        .assert_code(125);
    for args in [
        &["-k", "j", "--no-such-flag", "check"][..],
        &["--no-such-flag", "--", "check", "-k", "j"],
    ] {
        let out = server.cmd().args(args).run();
        out.assert_code(125);
        assert_eq!(out.stdout_str(), "", "{args:?}");
    }
}

/// Redlock: the skips a majority of the nodes reached decide.
#[test]
fn a_quorum_judges_by_what_a_majority_reached() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for (node, skips) in nodes.iter().zip([5, 1, 3]) {
        node.seed_stats("q", &[("skips", skips.to_string())]);
    }
    let run = |args: &[&str]| {
        let mut wrapper = Wrapper::bare().args(["check", "-k", "q"]).args(args);
        for node in &nodes {
            wrapper = wrapper.args(["-r", &node.url()]);
        }
        plugin_result(&wrapper.run())
    };
    let (code, line) = run(&["--max-skips", "3"]);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("3 consecutive skips"), "{line}");
    let (code, line) = run(&["--max-skips", "4"]);
    assert_eq!(code, 0, "{line}");
}

/// `--once-per` on three hosts with `check --max-skips 3`: the hosts that find the night's
/// work done are not skips (they did not stand in for a failure), so the check stays OK
/// right after a success, however many hosts there are; a busy run still is a skip.
#[test]
fn work_found_already_done_is_not_a_skip() {
    let server = RedisServer::start();
    let night = || server.cmd().args(["-k", "nightly", "--once-per", "1h"]);
    night().args(["--", "true"]).run().assert_code(0);
    for _host in 0..3 {
        night()
            .args(["--", "false"])
            .run()
            .assert_code(0)
            .assert_stderr_contains("already done");
    }
    let (code, line) = check(&server, "nightly", &["--max-skips", "3"]);
    assert_eq!(code, 0, "{line}");
    assert!(line.contains("0 consecutive skips"), "{line}");
    let metrics = server.cmd().arg("metrics").run();
    assert!(
        metrics.stdout_str().contains("reason=\"already_done\"} 3"),
        "{}",
        metrics.stdout_str()
    );

    let dir = TempDir::new("done-busy");
    let holder = hold(server.cmd().args(["-k", "nightly"]), &dir, "h");
    server
        .cmd()
        .args(["-k", "nightly", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    let (_, line) = check(&server, "nightly", &["--max-skips", "3"]);
    assert!(line.contains("1 consecutive skip,"), "{line}");
    holder.let_go();
    holder.wait().assert_code(0);
}
