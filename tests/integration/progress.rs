//! Progress while waiting, off a terminal (issue 33): a plain "still waiting for" line once
//! a minute after the first minute (shortened here by the debug builds'
//! `REDLOCK_TEST_PROGRESS_EVERY_MS`), as text or as a JSON event; no carriage return and no
//! escape sequence ever; nothing with `-q`. The status line redrawn on a terminal is
//! tested in `terminal`.

use std::time::Duration;

use crate::support::*;

/// The debug builds' knob for the period of the plain line (a minute otherwise).
const EVERY: &str = "REDLOCK_TEST_PROGRESS_EVERY_MS";

/// This machine's name, as the tool records it (gethostname).
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("reading /proc/sys/kernel/hostname")
        .trim()
        .to_string()
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// A CI log (stderr a pipe) gets a plain line now and then while the lock stays busy,
/// naming the lock, the holder and the time waited of the limit; never a `\r` or an ESC.
#[test]
fn off_a_terminal_a_long_wait_says_so_now_and_then_in_plain_lines() {
    let server = RedisServer::start();
    let dir = TempDir::new("plainwait");
    let holder = hold(server.cmd().args(["-k", "pn"]), &dir, "h");
    let waiter = server
        .cmd()
        .env(EVERY, "300")
        .args(["-k", "pn", "--wait", "60s", "--", "true"])
        .spawn();
    let needle = "still waiting for redlock:pn: held by";
    wait_until(Duration::from_secs(20), "three plain lines", || {
        count(&waiter.stderr_so_far(), needle) >= 3
    });
    holder.let_go();
    let out = waiter.wait();
    out.assert_code(0).assert_stderr_prefixed();
    eprintln!("{}", out.stderr);
    let line = out
        .stderr
        .lines()
        .find(|line| line.contains(needle))
        .expect("a plain line");
    let expected = format!("redlock-run: {needle} {} pid {}", hostname(), holder.pid());
    assert!(line.starts_with(&expected), "{line:?}");
    assert!(line.contains(", waited "), "{line:?}");
    assert!(line.contains(" of 1m"), "{line:?}");
    assert!(
        !out.stderr.contains('\r') && !out.stderr.contains('\x1b'),
        "{:?}",
        out.stderr
    );
}

/// `-q` says nothing while waiting, however long: its twin without `-q`, waiting beside it,
/// shows that the lines were due.
#[test]
fn quiet_waiters_write_nothing_while_waiting() {
    let server = RedisServer::start();
    let dir = TempDir::new("quietwait");
    let holder = hold(server.cmd().args(["-k", "pq"]), &dir, "h");
    let waiter = |quiet: bool| {
        let cmd = server.cmd().env(EVERY, "200");
        let cmd = if quiet { cmd.arg("-q") } else { cmd };
        cmd.args(["-k", "pq", "--wait", "60s", "--", "true"])
            .spawn()
    };
    let quiet = waiter(true);
    let loud = waiter(false);
    wait_until(Duration::from_secs(20), "the loud twin's lines", || {
        count(&loud.stderr_so_far(), "still waiting for redlock:pq") >= 3
    });
    holder.let_go();
    loud.wait().assert_code(0);
    let out = quiet.wait();
    out.assert_code(0);
    assert_eq!(out.stderr, "", "-q wrote something");
}

/// With `--log-format json`, the plain line is a `waiting` event with its numbers.
#[test]
fn the_plain_line_is_a_json_event_with_log_format_json() {
    let server = RedisServer::start();
    let dir = TempDir::new("jsonwait");
    let holder = hold(server.cmd().args(["-k", "pj"]), &dir, "h");
    // Another run waiting, queued first: counted in the line.
    let other = server
        .cmd()
        .args(["-k", "pj", "-q", "--wait", "60s", "--", "true"])
        .spawn();
    let mut admin = server.connection();
    wait_until(
        Duration::from_secs(20),
        "the other run in the queue",
        || {
            redis::cmd("ZCARD")
                .arg("{redlock:pj}:queue")
                .query::<u64>(&mut admin)
                .unwrap()
                == 1
        },
    );
    let waiter = server
        .cmd()
        .env(EVERY, "300")
        .args(["-k", "pj", "--log-format", "json", "--wait", "60s"])
        .args(["--", "true"])
        .spawn();
    wait_until(Duration::from_secs(20), "a JSON waiting event", || {
        waiter.stderr_so_far().contains("\"waiters\":2")
    });
    holder.let_go();
    let out = waiter.wait();
    out.assert_code(0);
    other.wait().assert_code(0);
    let event: serde_json::Value = out
        .stderr
        .lines()
        .find(|line| line.contains("\"waiters\":2"))
        .map(|line| serde_json::from_str(line).expect("one JSON object a line"))
        .unwrap();
    assert_eq!(event["event"], "waiting", "{event}");
    assert_eq!(event["level"], "info", "{event}");
    assert_eq!(event["key"], "redlock:pj", "{event}");
    assert_eq!(event["limit_ms"], 60_000, "{event}");
    assert!(event["waited_ms"].as_u64().is_some(), "{event}");
    assert!(event["held_ms"].as_u64().is_some(), "{event}");
    assert_eq!(event["waiters"], 2, "{event}");
    let message = event["message"].as_str().unwrap();
    assert!(
        message.contains(", 1 other run waiting, waited "),
        "{message}"
    );
    assert!(
        message.starts_with(&format!(
            "still waiting for redlock:pj: held by {} pid {}",
            hostname(),
            holder.pid()
        )),
        "{message}"
    );
    assert!(!out.stderr.contains('\x1b'), "{:?}", out.stderr);
}
