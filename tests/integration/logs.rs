//! Logs a machine can read (issue 14): `--log-format json` (or `REDLOCK_LOG_FORMAT=json`)
//! turns every line redlock-run writes on stderr into one JSON object with the same message
//! as the text line, the same redaction and escaping, and the fields a log collector needs;
//! `-v` ends a run with a summary line (waited, held, renewals, exit code); a skipped run is
//! told apart by its event and exit code.
//!
//! What this module does not own: which messages exist (each is tested where its behaviour
//! is), the text format's wording.

use serde_json::Value;

use crate::support::*;

const SECRET: &str = "log-pw-93c1";

/// Every line of `stderr` as a JSON object with the fields every line has.
#[track_caller]
fn json_lines(stderr: &str) -> Vec<Value> {
    assert!(!stderr.is_empty(), "nothing on stderr");
    stderr
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line:?}\n{stderr}"));
            for field in ["time", "level", "event", "message"] {
                assert!(value[field].is_string(), "no {field:?} in {line}");
            }
            let time = value["time"].as_str().unwrap();
            humantime::parse_rfc3339(time).unwrap_or_else(|e| panic!("time {time:?}: {e}"));
            assert!(
                ["error", "warn", "info", "debug"].contains(&value["level"].as_str().unwrap()),
                "{line}"
            );
            value
        })
        .collect()
}

/// The text lines' messages, as JSON's `message` has them: without `redlock-run: ` and
/// a warning's `warning: `.
#[track_caller]
fn text_messages(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .map(|line| {
            let message = line
                .strip_prefix("redlock-run: ")
                .unwrap_or_else(|| panic!("not a redlock-run line: {line:?}"));
            message
                .strip_prefix("warning: ")
                .unwrap_or(message)
                .to_string()
        })
        .collect()
}

/// Runs `args` in text and in JSON and checks that both say the same, line for line,
/// with nothing secret in either; returns the JSON lines.
#[track_caller]
fn same_in_both(wrapper: impl Fn() -> Wrapper, args: &[&str], code: i32) -> Vec<Value> {
    let text = wrapper().args(args).run();
    text.assert_code(code).assert_not_leaked(SECRET);
    let json = wrapper().args(["--log-format", "json"]).args(args).run();
    json.assert_code(code).assert_not_leaked(SECRET);
    let lines = json_lines(&json.stderr);
    let messages: Vec<&str> = lines
        .iter()
        .map(|line| line["message"].as_str().unwrap())
        .collect();
    // Tokens, pids and times differ between two runs: compare the words that do not.
    let shape = |message: &str| {
        message
            .split_whitespace()
            .filter(|word| !word.chars().any(|c| c.is_ascii_digit()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let text_messages = text_messages(&text.stderr);
    assert_eq!(
        text_messages.iter().map(|m| shape(m)).collect::<Vec<_>>(),
        messages.iter().map(|m| shape(m)).collect::<Vec<_>>(),
        "text:\n{}\njson:\n{}",
        text.stderr,
        json.stderr
    );
    lines
}

fn events(lines: &[Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|line| line["event"].as_str().unwrap())
        .collect()
}

#[test]
fn a_run_in_json_says_what_text_says_with_its_numbers() {
    let server = RedisServer::start_with_password(SECRET);
    let url = format!("redis://:{SECRET}@127.0.0.1:{}", server.port());
    let wrapper = || Wrapper::new(&url);

    let lines = same_in_both(wrapper, &["-k", "job", "-v", "--", "true"], 0);
    assert_eq!(
        events(&lines),
        ["step", "acquired", "started", "step", "released", "summary"],
        "{lines:?}"
    );
    for line in &lines {
        assert_eq!(line["key"], "redlock:job", "{line}");
    }
    let summary = lines.last().unwrap();
    assert_eq!(summary["exit_code"], 0, "{summary}");
    assert_eq!(summary["renewals"], 0, "{summary}");
    assert!(
        summary["waited_ms"].is_u64() && summary["held_ms"].is_u64(),
        "{summary}"
    );
    assert_eq!(summary["fence"], lines[1]["fence"], "{summary}");
    assert!(summary["fence"].is_u64(), "{summary}");

    // The command's status is the summary's.
    let lines = same_in_both(wrapper, &["-k", "job", "-v", "--", "sh", "-c", "exit 3"], 3);
    assert_eq!(lines.last().unwrap()["exit_code"], 3);

    // A bad command line and a wrong password: errors, in JSON too, with nothing secret. A
    // bad command line keeps clap's lines in text (error, tip, usage), so only its first
    // line is the JSON message's beginning.
    let args = ["-k", "job", "--bogus"];
    let text = wrapper().args(args).run();
    text.assert_code(125).assert_not_leaked(SECRET);
    let json = wrapper().args(["--log-format", "json"]).args(args).run();
    json.assert_code(125).assert_not_leaked(SECRET);
    let lines = json_lines(&json.stderr);
    assert_eq!(events(&lines), ["usage"]);
    let error = text_messages(text.stderr.lines().next().unwrap()).remove(0);
    let message = lines[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{error}; ")),
        "text:\n{}\njson:\n{}",
        text.stderr,
        json.stderr
    );
    let wrong = format!("redis://:wrong-{SECRET}@127.0.0.1:{}", server.port());
    let lines = same_in_both(|| Wrapper::new(&wrong), &["-k", "job", "--", "true"], 125);
    assert_eq!(events(&lines), ["error"]);
    assert_eq!(lines[0]["level"], "error");
}

#[test]
fn renewals_are_counted_in_the_summary() {
    let server = RedisServer::start();
    let out = server
        .cmd()
        .args([
            "--log-format",
            "json",
            "-v",
            "-k",
            "long",
            "--ttl",
            "300ms",
            "--",
        ])
        .args(["sleep", "1"])
        .run();
    out.assert_code(0);
    let lines = json_lines(&out.stderr);
    let renewed = events(&lines).iter().filter(|e| **e == "renewed").count() as u64;
    let summary = lines.last().unwrap();
    assert_eq!(summary["event"], "summary", "{summary}");
    assert!(renewed >= 2, "renewing every 100ms for 1s: {renewed}");
    assert_eq!(summary["renewals"], renewed, "{summary}");
    let held = summary["held_ms"].as_u64().unwrap();
    assert!((1000..10_000).contains(&held), "{summary}");
    let text = server
        .cmd()
        .args(["-v", "-k", "long", "--ttl", "300ms", "--", "sleep", "0.5"])
        .run();
    text.assert_code(0);
    let last = text.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("redlock-run: finished: waited ") && last.ends_with(", exit 0"),
        "{last:?}"
    );
    assert!(
        last.contains(" times, exit 0") || last.contains(" time, exit 0"),
        "{last}"
    );
}

/// A skipped run (busy, `--wait` ran out) and a lost lock are told apart by their event
/// and exit code, whatever the verbosity.
#[test]
fn skipped_and_lost_runs_are_told_apart() {
    let server = RedisServer::start();
    let dir = TempDir::new("logs-skip");
    let holder = hold(
        server.cmd().args(["-k", "busy", "--renew-every", "200ms"]),
        &dir,
        "holder",
    );
    let lines = same_in_both(|| server.cmd(), &["-k", "busy", "-n", "--", "true"], 75);
    assert_eq!(events(&lines), ["busy"]);
    assert_eq!(lines[0]["exit_code"], 75);
    let lines = same_in_both(
        || server.cmd(),
        &["-k", "busy", "-w", "200ms", "-E", "3", "--", "true"],
        3,
    );
    assert_eq!(events(&lines), ["wait_timeout"]);
    assert_eq!(lines[0]["exit_code"], 3);

    // The environment asks for JSON; a flag on the command line wins.
    let out = server
        .cmd()
        .env("REDLOCK_LOG_FORMAT", "json")
        .args(["-k", "busy", "-n", "--", "true"])
        .run();
    out.assert_code(75);
    assert_eq!(events(&json_lines(&out.stderr)), ["busy"]);
    let out = server
        .cmd()
        .env("REDLOCK_LOG_FORMAT", "json")
        .args(["--log-format", "text", "-k", "busy", "-n", "--", "true"])
        .run();
    out.assert_code(75);
    assert!(out.stderr.starts_with("redlock-run: "), "{}", out.stderr);

    // A lost lock: the holder's own log, in JSON, names it as such.
    holder.let_go();
    holder.wait().assert_code(0);
    let lost = server
        .cmd()
        .args([
            "--log-format",
            "json",
            "-k",
            "lost",
            "--renew-every",
            "100ms",
        ])
        .args(["--", "sleep", "30"])
        .spawn();
    wait_until(
        std::time::Duration::from_secs(10),
        "the lock to be taken",
        || server.exists("redlock:lost"),
    );
    server.del("redlock:lost");
    let out = lost.wait();
    out.assert_code(76);
    let lines = json_lines(&out.stderr);
    assert_eq!(events(&lines), ["lost"], "{}", out.stderr);
    assert_eq!(lines[0]["level"], "error");
    assert!(lines[0]["fence"].is_u64(), "{}", lines[0]);
}

/// Text from outside stays escaped inside the JSON string: a newline in a key cannot start
/// a line of its own, nor an escape sequence reach a terminal that shows the log.
#[test]
fn json_lines_escape_what_came_from_outside() {
    let server = RedisServer::start();
    let evil = "{\"token\":\"t\",\"host\":\"h\\u001b]0;pwned\\u0007\\nforged\",\"program\":\"p\"}";
    server.set("redlock:evil\nkey", evil);
    let out = server
        .cmd()
        .args([
            "--log-format",
            "json",
            "-k",
            "evil\nkey",
            "-n",
            "--",
            "true",
        ])
        .run();
    out.assert_code(75);
    assert_eq!(out.stderr.lines().count(), 1, "{:?}", out.stderr);
    let lines = json_lines(&out.stderr);
    let message = lines[0]["message"].as_str().unwrap();
    assert!(
        !message.contains('\u{1b}') && !message.contains('\n'),
        "{message:?}"
    );
    assert!(
        message.contains("h\\x1b]0;pwned\\x07\\nforged"),
        "{message}"
    );
    assert_eq!(lines[0]["key"], "redlock:evil\\nkey");
}
