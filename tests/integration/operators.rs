//! Operators' features (issue 5): `status`, `list` and `release` as people and scripts read
//! them (text, JSON, exit codes); the waiting message that names the holder; fencing tokens;
//! semaphores (`--limit`), fair queues (`--fair`), `--min-hold` and `--max-runtime`.
//!
//! What this module does not own: plain exclusion and hand-over (`exclusion`), the lease
//! itself (`lease`). Keys beyond `PREFIX + KEY` are used only where the data layout in
//! `src/backend/layout/mod.rs` documents them: `{K}:slot:N`, `{K}:fence`, `{K}:queue`.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::*;

// ---------------------------------------------------------------------------------------------
// Helpers

/// This machine's name, as the tool records it (gethostname).
fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("reading /proc/sys/kernel/hostname")
        .trim()
        .to_string()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The fair queue of lock `name` (documented layout: `{K}:queue`).
fn queue_key(name: &str) -> String {
    format!("{{{PREFIX}{name}}}:queue")
}

/// stdout parsed as one JSON document.
#[track_caller]
fn json_of(out: &Output) -> Value {
    let text = out.stdout_str();
    assert_eq!(
        text.trim_end().lines().count(),
        1,
        "JSON output is not one line:\n{text}"
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{text}"))
}

/// A field that must be a string.
#[track_caller]
fn str_field<'a>(value: &'a Value, name: &str) -> &'a str {
    value[name]
        .as_str()
        .unwrap_or_else(|| panic!("{name:?} is not a string in {value}"))
}

/// A field that must be a non-negative integer.
#[track_caller]
fn u64_field(value: &Value, name: &str) -> u64 {
    value[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name:?} is not a non-negative integer in {value}"))
}

/// The lines of a file the jobs append to, in the order they were written.
#[track_caller]
fn lines_of(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .lines()
        .map(str::to_string)
        .collect()
}

#[track_caller]
fn assert_strictly_increasing(numbers: &[u64], what: &str) {
    for pair in numbers.windows(2) {
        assert!(
            pair[0] < pair[1],
            "{what} not strictly increasing: {} then {} in {numbers:?}",
            pair[0],
            pair[1]
        );
    }
}

/// A wrapper that has exited from a signal we sent it.
#[track_caller]
fn assert_killed(out: &Output, signal: i32) {
    assert_eq!(
        out.status.signal(),
        Some(signal),
        "expected death by signal {signal}, got {:?}\n--- stderr:\n{}",
        out.status,
        out.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// status

/// `status`: exit 1 and `is free` on a free key; exit 0 and one line naming host, pid,
/// command, time held, TTL and fence while held; the same facts as one JSON object.
#[test]
fn status_names_the_holder_in_text_and_json() {
    let server = RedisServer::start();
    let dir = TempDir::new("status");

    let out = server.cmd().args(["status", "-k", "st"]).run();
    out.assert_code(1);
    assert_eq!(out.stdout_str(), "redlock:st is free\n");
    let out = server.cmd().args(["status", "-k", "st", "--json"]).run();
    out.assert_code(1);
    assert_eq!(
        json_of(&out),
        serde_json::json!({"key": "redlock:st", "held": false, "holders": []})
    );

    let before_ms = now_ms();
    let holder = hold(server.cmd().args(["-k", "st"]), &dir, "h");
    let fence = fence_of(&dir, "h");
    let host = hostname();
    let cmd = program_of(holder.script());

    let out = server.cmd().args(["status", "-k", "st"]).run();
    out.assert_code(0);
    let line = out.stdout_str();
    eprintln!("status: {}", line.trim_end());
    let expected_start = format!(
        "redlock:st held by {host} pid {} `{cmd}` for ",
        holder.pid()
    );
    let rest = line
        .trim_end()
        .strip_prefix(&expected_start)
        .unwrap_or_else(|| panic!("status line {line:?} does not start with {expected_start:?}"));
    let (held_for, rest) = rest
        .split_once(", ttl ")
        .unwrap_or_else(|| panic!("no ttl in {line:?}"));
    let (ttl, shown_fence) = rest
        .split_once(", fence ")
        .unwrap_or_else(|| panic!("no fence in {line:?}"));
    let held_for = humantime::parse_duration(held_for)
        .unwrap_or_else(|e| panic!("held-for {held_for:?} in {line:?}: {e}"));
    let ttl = humantime::parse_duration(ttl).unwrap_or_else(|e| panic!("ttl {ttl:?}: {e}"));
    assert!(held_for < Duration::from_secs(60), "held for {held_for:?}");
    assert!(
        ttl > Duration::from_secs(15) && ttl <= Duration::from_secs(30),
        "ttl {ttl:?} of a 30s lease"
    );
    assert_eq!(shown_fence, fence.to_string(), "fence in {line:?}");

    let out = server.cmd().args(["status", "-k", "st", "--json"]).run();
    out.assert_code(0);
    let status = json_of(&out);
    eprintln!("status --json: {status}");
    assert_eq!(status["key"], "redlock:st");
    assert_eq!(status["held"], true);
    let holders = status["holders"].as_array().expect("holders is an array");
    assert_eq!(holders.len(), 1, "{status}");
    let h = &holders[0];
    let value = server.lock_value("st").expect("lock key missing");
    assert_eq!(str_field(h, "key"), "redlock:st");
    assert_eq!(h["known"], true);
    assert_eq!(str_field(h, "token"), token_of(&value));
    assert_eq!(str_field(h, "host"), host);
    assert_eq!(u64_field(h, "pid"), holder.pid() as u64);
    assert_eq!(str_field(h, "program"), cmd);
    assert_eq!(h["label"], serde_json::Value::Null);
    let since_ms = u64_field(h, "since_ms");
    assert!(
        since_ms + 1000 >= before_ms && since_ms <= now_ms() + 1000,
        "since_ms {since_ms} not around now (test started at {before_ms})"
    );
    assert!(u64_field(h, "held_for_ms") < 60_000, "{h}");
    let ttl_ms = u64_field(h, "ttl_ms");
    assert!((15_000..=30_000).contains(&ttl_ms), "ttl_ms {ttl_ms}");
    assert_eq!(u64_field(h, "fence"), fence);

    holder.let_go();
    holder.wait().assert_code(0);
    server
        .cmd()
        .args(["status", "-k", "st"])
        .run()
        .assert_code(1);
}

/// `status` and `list` count "held for" from when the holder took the lock (as `check`,
/// `metrics` and `history` do), not from when its run started waiting: a run that waited
/// 4 s and has just taken the lock has held it for well under 4 s.
#[test]
fn status_and_list_count_the_hold_from_the_acquisition_not_the_wait() {
    let server = RedisServer::start();
    let dir = TempDir::new("held-for");
    let first = hold(server.cmd().args(["-k", "hf"]), &dir, "first");
    let script = dir.script("second", &Job::new(&dir, "second").body());
    let mut second = server.cmd().args(["-k", "hf", "--"]).arg(script).spawn();
    wait_until(Duration::from_secs(15), "the second run to wait", || {
        server.subscribed_clients() >= 1
    });
    let waiting = std::time::Instant::now();
    wait_until(Duration::from_secs(15), "4 s of waiting", || {
        waiting.elapsed() >= Duration::from_secs(4)
    });
    first.let_go();
    first.wait().assert_code(0);
    second.wait_for_file(&dir.join("second.ready"), Duration::from_secs(15));
    let taken = std::time::Instant::now();

    let status = json_of(&server.cmd().args(["status", "-k", "hf", "--json"]).run());
    let list = json_of(&server.cmd().args(["list", "--json"]).run());
    let line = server.cmd().args(["status", "-k", "hf"]).run().stdout_str();
    let bound = taken.elapsed() + Duration::from_secs(1);
    let held_for = |holder: &Value| Duration::from_millis(u64_field(holder, "held_for_ms"));
    let by_status = held_for(&status["holders"][0]);
    let by_list = held_for(&list[0]["holders"][0]);
    assert!(
        by_status <= bound,
        "status: held for {by_status:?}, taken {bound:?} ago\n{status}"
    );
    assert!(
        by_list <= bound,
        "list: held for {by_list:?}, taken {bound:?} ago\n{list}"
    );
    assert!(
        !line.contains(" for 4s") && !line.contains(" for 5s"),
        "{line}"
    );
    std::fs::write(dir.join("second.go"), "").unwrap();
    second.wait().assert_code(0);
}

/// A value redlock-run did not write is shown as held by an unknown holder (a string) or
/// by another application's data (a hash): exit 0, `known: false` with its type.
#[test]
fn status_shows_foreign_values_as_unknown_holders() {
    let server = RedisServer::start();
    server.set("redlock:x", "thief");
    server.hset("redlock:h", "field", "data");

    let out = server.cmd().args(["status", "-k", "x"]).run();
    out.assert_code(0);
    let line = out.stdout_str();
    assert!(
        line.starts_with("redlock:x held by an unknown holder"),
        "{line:?}"
    );
    let out = server.cmd().args(["status", "-k", "x", "--json"]).run();
    out.assert_code(0);
    let status = json_of(&out);
    assert_eq!(status["key"], "redlock:x");
    assert_eq!(status["held"], true);
    let h = &status["holders"][0];
    assert_eq!(h["known"], false, "{status}");
    assert_eq!(h["type"], "string", "{status}");
    assert_eq!(h["value"], "thief", "{status}");

    let out = server.cmd().args(["status", "-k", "h"]).run();
    out.assert_code(0);
    let line = out.stdout_str();
    assert!(
        line.starts_with("redlock:h held by ") && line.contains("hash"),
        "{line:?}"
    );
    let out = server.cmd().args(["status", "-k", "h", "--json"]).run();
    out.assert_code(0);
    let status = json_of(&out);
    assert_eq!(status["held"], true);
    let h = &status["holders"][0];
    assert_eq!(h["known"], false, "{status}");
    assert_eq!(h["type"], "hash", "{status}");

    // Looking changes nothing.
    assert_eq!(server.get("redlock:x").as_deref(), Some("thief"));
    assert_eq!(server.hget("redlock:h", "field").as_deref(), Some("data"));
}

/// status, list and release exit 125 with a prefixed message and nothing on stdout when
/// Redis cannot be reached.
#[test]
fn admin_commands_exit_125_when_redis_is_unreachable() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    for args in [
        &["status", "-k", "k"][..],
        &["status", "-k", "k", "--json"],
        &["list"],
        &["list", "--json"],
        &["release", "-k", "k", "--force"],
    ] {
        let out = Wrapper::bare()
            .args(args)
            .args(["-r", &url, "--redis-timeout", "2s"])
            .run();
        out.assert_code(125).assert_stderr_prefixed();
        assert!(!out.stderr.is_empty(), "{args:?}: no message");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: stdout {}",
            out.stdout_str()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// list

/// `list` shows each lock under the prefix once (a plain lock, a semaphore with its two
/// holders, a foreign value), never fence counters, slot keys or keys outside the prefix;
/// a semaphore whose first slot is free is still listed.
#[test]
fn list_shows_each_lock_once_with_a_semaphores_holders() {
    let server = RedisServer::start();
    let dir = TempDir::new("list");

    let out = server.cmd().arg("list").run();
    out.assert_code(0);
    assert!(out.stdout.is_empty(), "{}", out.stdout_str());
    let out = server.cmd().args(["list", "--json"]).run();
    out.assert_code(0);
    assert_eq!(json_of(&out), serde_json::json!([]));

    // A lock that came and went leaves only its fence counter behind.
    server
        .cmd()
        .args(["-k", "done", "--", "true"])
        .run()
        .assert_code(0);
    server.set("other:thing", "not under the prefix");
    server.set("redlock:x", "thief");
    let a = hold(server.cmd().args(["-k", "a"]), &dir, "a");
    let b1 = hold(server.cmd().args(["-k", "b", "--limit", "3"]), &dir, "b1");
    let b2 = hold(server.cmd().args(["-k", "b", "--limit", "3"]), &dir, "b2");

    let out = server.cmd().arg("list").run();
    out.assert_code(0);
    let text = out.stdout_str();
    eprintln!("list:\n{text}");
    let names: Vec<&str> = text
        .lines()
        .filter(|line| !line.starts_with(' '))
        .map(|line| line.split(" held by ").next().unwrap())
        .collect();
    assert_eq!(names, ["redlock:a", "redlock:b", "redlock:x"], "{text}");
    assert!(
        !text.contains(":fence") && !text.contains(":slot:"),
        "{text}"
    );
    let b_line = "redlock:b held by 2 holders:";
    let b_at = text.find(b_line).unwrap_or_else(|| panic!("no {b_line:?}"));
    let b_holders: Vec<&str> = text[b_at..].lines().skip(1).take(2).collect();
    for holder in [&b1, &b2] {
        let pid = format!(" pid {} ", holder.pid());
        assert!(
            b_holders.iter().any(|line| line.contains(&pid)),
            "pid {} not among the semaphore's holders: {b_holders:?}",
            holder.pid()
        );
    }
    assert!(
        text.contains(&format!("redlock:a held by {} pid {}", hostname(), a.pid())),
        "{text}"
    );

    let out = server.cmd().args(["list", "--json"]).run();
    out.assert_code(0);
    let list = json_of(&out);
    let locks = list.as_array().expect("list --json is an array");
    let keys: Vec<&str> = locks.iter().map(|lock| str_field(lock, "key")).collect();
    assert_eq!(keys, ["redlock:a", "redlock:b", "redlock:x"], "{list}");
    let b = &locks[1];
    assert_eq!(b["held"], true);
    let slots: Vec<(&str, u64)> = b["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|h| (str_field(h, "key"), u64_field(h, "pid")))
        .collect();
    assert_eq!(
        slots,
        [
            ("redlock:b", b1.pid() as u64),
            ("{redlock:b}:slot:2", b2.pid() as u64)
        ],
        "{b}"
    );
    assert_eq!(locks[2]["holders"][0]["known"], false);

    // With slot 1 free and slot 2 held, the semaphore is still listed, with one holder.
    b1.let_go();
    b1.wait().assert_code(0);
    assert!(!server.exists("redlock:b"));
    let list = json_of(server.cmd().args(["list", "--json"]).run().assert_code(0));
    let b = list
        .as_array()
        .unwrap()
        .iter()
        .find(|lock| lock["key"] == "redlock:b")
        .unwrap_or_else(|| panic!("semaphore with a free first slot not listed: {list}"));
    assert_eq!(b["holders"].as_array().map(Vec::len), Some(1), "{b}");
    assert_eq!(b["holders"][0]["key"], "{redlock:b}:slot:2");

    a.let_go();
    b2.let_go();
    a.wait().assert_code(0);
    b2.wait().assert_code(0);
}

// ---------------------------------------------------------------------------------------------
// release

/// Without --force, release refuses (125), says who holds the lock and how to force it,
/// and touches nothing; a free key gives exit 1 with or without --force.
#[test]
fn release_without_force_refuses_and_leaves_the_lock() {
    let server = RedisServer::start();
    let dir = TempDir::new("relnoforce");

    for args in [
        &["release", "-k", "r"][..],
        &["release", "-k", "r", "--force"],
    ] {
        let out = server.cmd().args(args).run();
        out.assert_code(1);
        assert!(out.stdout_str().contains("free"), "{}", out.stdout_str());
    }

    let holder = hold(server.cmd().args(["-k", "r"]), &dir, "h");
    let value = server.lock_value("r");
    let out = server.cmd().args(["release", "-k", "r"]).run();
    out.assert_code(125)
        .assert_stderr_prefixed()
        .assert_stderr_contains("--force")
        .assert_stderr_contains(&format!("pid {}", holder.pid()));
    eprintln!("release without --force: {}", out.stderr.trim_end());
    assert_eq!(server.lock_value("r"), value, "key changed");

    holder.let_go();
    holder
        .wait()
        .assert_code(0)
        .assert_stderr_lacks("lock lost");
}

/// Without --force, release says what would become of the holder: a redlock-run holder's
/// command is terminated at its next renewal; another client's value is renewed by no
/// redlock-run, and its holder is told nothing.
#[test]
fn release_without_force_says_what_becomes_of_each_kind_of_holder() {
    let server = RedisServer::start();
    let dir = TempDir::new("relfate");

    let holder = hold(server.cmd().args(["-k", "ours"]), &dir, "h");
    let out = server.cmd().args(["release", "-k", "ours"]).run();
    out.assert_code(125)
        .assert_stderr_contains("its command would be terminated at its next renewal");
    holder.let_go();
    holder.wait().assert_code(0);

    server.set("redlock:theirs", "thief");
    let out = server.cmd().args(["release", "-k", "theirs"]).run();
    out.assert_code(125)
        .assert_stderr_contains("nothing would tell that client to stop")
        .assert_stderr_lacks("terminated");
    assert_eq!(server.get("redlock:theirs").as_deref(), Some("thief"));
}

/// `release --force` deletes the holder's value, says whose it was, and PUBLISHes: a waiter
/// blocked behind a holder with a 10s lease starts at once, not when it would next retry
/// (~10s). The holder learns of it at its next renewal and exits 76.
#[test]
fn forced_release_wakes_a_waiter_promptly() {
    let server = RedisServer::start();
    let dir = TempDir::new("relforce");
    let holder = hold(
        server
            .cmd()
            .args(["-k", "fr", "-t", "10s", "--renew-every", "500ms"]),
        &dir,
        "h",
    );
    let started = dir.join("waiter.started");
    let mut waiter = server
        .cmd()
        .args(["-k", "fr", "--"])
        .arg(dir.script("waiter", &format!("touch '{}'", started.display())))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.subscribed_clients() > 0
    });
    assert!(!started.exists(), "the waiter ran while the lock was held");

    let released_at = Instant::now();
    let out = server.cmd().args(["release", "-k", "fr", "--force"]).run();
    out.assert_code(0);
    let said = out.stdout_str();
    let expected = format!(
        "released redlock:fr, held by {} pid {} `{}`",
        hostname(),
        holder.pid(),
        program_of(holder.script())
    );
    assert!(said.starts_with(&expected), "{said:?} vs {expected:?}");

    waiter.wait_for_file(&started, Duration::from_secs(15));
    let woke = released_at.elapsed();
    eprintln!("waiter started {woke:?} after `release --force`");
    assert!(
        woke < Duration::from_secs(3),
        "waiter took {woke:?}: not woken by the release"
    );
    waiter.wait().assert_code(0);
    let out = holder.wait_within(Duration::from_secs(15));
    out.assert_code(76).assert_stderr_contains("lock lost");
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

/// A hash under the key is never deleted, even with --force (125); a foreign string is
/// (it is what the operator was shown), and the output says it was an unknown holder.
#[test]
fn forced_release_never_deletes_another_applications_data() {
    let server = RedisServer::start();
    server.hset("redlock:h", "field", "data");
    for args in [
        &["release", "-k", "h"][..],
        &["release", "-k", "h", "--force"],
    ] {
        server
            .cmd()
            .args(args)
            .run()
            .assert_code(125)
            .assert_stderr_prefixed();
        assert_eq!(server.key_type("redlock:h"), "hash", "{args:?}");
        assert_eq!(server.hget("redlock:h", "field").as_deref(), Some("data"));
    }

    server.set("redlock:x", "thief");
    let out = server.cmd().args(["release", "-k", "x", "--force"]).run();
    out.assert_code(0);
    assert!(
        out.stdout_str()
            .starts_with("released redlock:x, held by an unknown holder"),
        "{}",
        out.stdout_str()
    );
    assert!(!server.exists("redlock:x"));
}

// ---------------------------------------------------------------------------------------------
// The waiting message

/// A waiter with -v names the holder once, a second or more into the wait, and not again
/// while the same holder renews its 1s lease every ~330ms for 3s; with -q it says nothing.
#[test]
fn waiting_message_names_the_holder_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("waitmsg");
    let holder = hold(server.cmd().args(["-k", "wm", "-t", "1s"]), &dir, "h");
    let verbose = server
        .cmd()
        .args(["-k", "wm", "-v", "--wait", "3s", "--", "true"])
        .spawn();
    let quiet = server
        .cmd()
        .args(["-k", "wm", "-q", "--wait", "3s", "--", "true"])
        .spawn();
    let needle = "waiting for redlock:wm: held by";
    let seen = wait_until(Duration::from_secs(10), "the waiting message", || {
        verbose.stderr_so_far().contains(needle)
    });
    let since_spawn = verbose.started().elapsed();
    eprintln!("waiting message seen {since_spawn:?} after the waiter started ({seen:?} polled)");
    assert!(
        since_spawn >= Duration::from_secs(1),
        "announced after only {since_spawn:?}"
    );

    // --wait 3s runs out: the holder kept its 1s lease all along.
    let out = verbose.wait();
    out.assert_code(75).assert_stderr_prefixed();
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|line| line.contains("waiting for redlock:wm"))
        .collect();
    eprintln!("after {:?} of waiting: {lines:?}", out.elapsed);
    assert_eq!(lines.len(), 1, "stderr:\n{}", out.stderr);
    let expected = format!(
        "redlock-run: {needle} {} pid {} `{}` for ",
        hostname(),
        holder.pid(),
        program_of(holder.script())
    );
    assert!(
        lines[0].starts_with(&expected),
        "{:?} vs {expected:?}",
        lines[0]
    );

    let out = quiet.wait();
    out.assert_code(75);
    assert_eq!(out.stderr, "", "-q printed something");

    holder.let_go();
    holder.wait().assert_code(0);
}

// ---------------------------------------------------------------------------------------------
// Fencing tokens

/// REDLOCK_FENCE strictly increases over 20 sequential acquisitions, and `status` shows the
/// current holder's fence, above all of them.
#[test]
fn fence_grows_over_sequential_acquisitions_and_shows_in_status() {
    let server = RedisServer::start();
    let dir = TempDir::new("fenceseq");
    let fences = dir.join("fences");
    let append = format!("echo \"$REDLOCK_FENCE\" >> '{}'", fences.display());
    for _ in 0..20 {
        server
            .cmd()
            .args(["-k", "fs", "--shell", &append])
            .run()
            .assert_code(0);
    }
    let seen: Vec<u64> = lines_of(&fences)
        .iter()
        .map(|line| line.parse().expect("REDLOCK_FENCE is a number"))
        .collect();
    eprintln!("sequential fences: {seen:?}");
    assert_eq!(seen.len(), 20);
    assert_strictly_increasing(&seen, "sequential fences");

    let holder = hold(server.cmd().args(["-k", "fs"]), &dir, "h");
    let fence = fence_of(&dir, "h");
    assert!(fence > seen[19], "fence {fence} after {}", seen[19]);
    let status = json_of(
        server
            .cmd()
            .args(["status", "-k", "fs", "--json"])
            .run()
            .assert_code(0),
    );
    assert_eq!(u64_field(&status["holders"][0], "fence"), fence, "{status}");
    holder.let_go();
    holder.wait().assert_code(0);
}

/// 20 wrappers started at once: every REDLOCK_FENCE is distinct and, read in the order the
/// critical sections ran (appends made under the lock), strictly increasing.
#[test]
fn fence_grows_in_critical_section_order_under_contention() {
    let server = RedisServer::start();
    let dir = TempDir::new("fencecont");
    let fences = dir.join("fences");
    let append = format!(
        "echo \"$REDLOCK_FENCE\" >> '{}'; sleep 0.05",
        fences.display()
    );
    let started = Instant::now();
    let wrappers: Vec<Running> = (0..20)
        .map(|_| {
            server
                .cmd()
                .args(["-k", "fc", "--shell", &append])
                .timeout(Duration::from_secs(60))
                .spawn()
        })
        .collect();
    for wrapper in wrappers {
        wrapper.wait().assert_code(0);
    }
    let seen: Vec<u64> = lines_of(&fences)
        .iter()
        .map(|line| line.parse().expect("REDLOCK_FENCE is a number"))
        .collect();
    eprintln!(
        "contended fences in critical-section order ({:?} for all 20): {seen:?}",
        started.elapsed()
    );
    assert_eq!(seen.len(), 20, "{seen:?}");
    assert_strictly_increasing(&seen, "contended fences");
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

// ---------------------------------------------------------------------------------------------
// --min-hold

/// --min-hold 2s: a job that ends at once keeps the key until ~2s after it was taken; a
/// --no-wait run inside the window exits 75, one after the mark succeeds. A job that runs
/// past its --min-hold releases at exit as usual.
#[test]
fn min_hold_keeps_the_lock_until_the_mark() {
    let server = RedisServer::start();
    let start = Instant::now();
    server
        .cmd()
        .args(["-k", "mh", "--min-hold", "2s", "--", "true"])
        .run()
        .assert_code(0);
    let pttl = server.pttl("redlock:mh");
    eprintln!("PTTL right after a --min-hold 2s job ended: {pttl}ms");
    assert!((1..=2000).contains(&pttl), "pttl {pttl}");

    server
        .cmd()
        .args(["-k", "mh", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);

    wait_until(Duration::from_secs(10), "the --min-hold mark", || {
        !server.exists("redlock:mh")
    });
    let gone = start.elapsed();
    eprintln!("key gone {gone:?} after the first run started");
    assert!(
        gone >= Duration::from_millis(1900),
        "key gone already {gone:?} after the run started"
    );
    assert!(gone < Duration::from_secs(6), "key kept for {gone:?}");
    server
        .cmd()
        .args(["-k", "mh", "--no-wait", "--", "true"])
        .run()
        .assert_code(0);

    server
        .cmd()
        .args(["-k", "mh", "--min-hold", "200ms", "--", "sleep", "0.5"])
        .run()
        .assert_code(0);
    assert!(!server.exists("redlock:mh"), "kept past its --min-hold");
}

// ---------------------------------------------------------------------------------------------
// --limit

/// Maximum number of jobs running at once, from `start`/`end` lines in the order given.
fn max_concurrency<'a>(events: impl Iterator<Item = &'a str>) -> i32 {
    let (mut now, mut max) = (0, 0);
    for event in events {
        now += if event == "start" { 1 } else { -1 };
        max = max.max(now);
    }
    max
}

/// --limit 3 with 9 jobs: all run and exit 0, and at most 3 (in fact 3) are in the critical
/// section at once, by their ns stamps and by the order of their appends.
#[test]
fn limit_lets_n_holders_in_at_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("limit");
    let history = dir.join("history");
    let wrappers: Vec<Running> = (0..9)
        .map(|i| {
            let job = format!(
                "echo \"start $(date +%s%N) {i}\" >> '{h}'; sleep 0.8; \
                 echo \"end $(date +%s%N) {i}\" >> '{h}'",
                h = history.display()
            );
            server
                .cmd()
                .args(["-k", "sem", "--limit", "3", "--shell", &job])
                .timeout(Duration::from_secs(60))
                .spawn()
        })
        .collect();
    for wrapper in wrappers {
        wrapper.wait().assert_code(0);
    }
    let lines = lines_of(&history);
    let events: Vec<(&str, u128, u32)> = lines
        .iter()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            assert_eq!(fields.len(), 3, "history line {line:?}");
            (
                fields[0],
                fields[1].parse().expect("ns stamp"),
                fields[2].parse().expect("job index"),
            )
        })
        .collect();
    for i in 0..9 {
        for kind in ["start", "end"] {
            let n = events.iter().filter(|e| e.0 == kind && e.2 == i).count();
            assert_eq!(n, 1, "job {i} has {n} {kind} lines:\n{}", lines.join("\n"));
        }
    }
    let by_append = max_concurrency(events.iter().map(|e| e.0));
    let mut by_stamp = events.clone();
    // Ends before starts on a tie: a job that ended let the next one in.
    by_stamp.sort_by_key(|e| (e.1, e.0 == "start"));
    let by_stamp = max_concurrency(by_stamp.iter().map(|e| e.0));
    eprintln!("--limit 3, 9 jobs: max concurrency {by_stamp} by stamps, {by_append} by appends");
    assert!(by_stamp <= 3 && by_append <= 3, "more than 3 at once");
    assert_eq!(by_stamp, 3, "the semaphore never let 3 in at once");
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

/// A key in use with --limit 3 refuses a run with the default limit (and the other way
/// round) with 125 and a message naming --limit, instead of waiting or running.
#[test]
fn mismatched_limits_are_refused() {
    let server = RedisServer::start();
    let dir = TempDir::new("limitmismatch");
    let ran = dir.join("ran");
    let semaphore = hold(
        server.cmd().args(["-k", "three", "--limit", "3"]),
        &dir,
        "h3",
    );
    let mutex = hold(server.cmd().args(["-k", "one"]), &dir, "h1");
    for (key, limit) in [("three", "1"), ("one", "3")] {
        let value = server.lock_value(key);
        let out = server
            .cmd()
            .args(["-k", key, "--limit", limit, "--", "touch"])
            .arg(&ran)
            .timeout(Duration::from_secs(15))
            .run();
        out.assert_code(125)
            .assert_stderr_prefixed()
            .assert_stderr_contains("--limit");
        eprintln!("{key} with --limit {limit}: {}", out.stderr.trim_end());
        assert!(!ran.exists(), "the command ran");
        assert_eq!(server.lock_value(key), value, "{key} changed");
    }
    semaphore.let_go();
    mutex.let_go();
    semaphore.wait().assert_code(0);
    mutex.wait().assert_code(0);
}

// ---------------------------------------------------------------------------------------------
// --max-runtime

/// `--max-runtime 1s` on `sleep 30`: exit 124 about a second in, lock free at exit.
#[test]
fn max_runtime_terminates_the_command_with_124() {
    let server = RedisServer::start();
    let out = server
        .cmd()
        .args(["-k", "mr", "--max-runtime", "1s", "--kill-after", "1s"])
        .args(["--", "sleep", "30"])
        .run();
    eprintln!("--max-runtime 1s on sleep 30: exit after {:?}", out.elapsed);
    out.assert_code(124)
        .assert_stderr_prefixed()
        .assert_stderr_contains("max-runtime");
    assert!(
        out.elapsed >= Duration::from_secs(1) && out.elapsed < Duration::from_secs(8),
        "exited after {:?}",
        out.elapsed
    );
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

/// A command that ignores SIGTERM gets SIGKILL --kill-after later: 124 after ~2s.
#[test]
fn max_runtime_sigkills_a_command_that_ignores_sigterm() {
    let server = RedisServer::start();
    let dir = TempDir::new("mrkill");
    let stubborn = stubborn_script(&dir);
    let mut wrapper = server
        .cmd()
        .args([
            "-k",
            "mrk",
            "--max-runtime",
            "1s",
            "--kill-after",
            "1s",
            "--",
        ])
        .arg(stubborn)
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    let out = wrapper.wait_within(Duration::from_secs(20));
    eprintln!("SIGTERM-ignoring command: exit after {:?}", out.elapsed);
    out.assert_code(124);
    assert!(dir.exists("terms"), "the command never saw SIGTERM");
    assert!(!pid_alive(pid), "command still alive");
    assert!(
        out.elapsed >= Duration::from_millis(1900) && out.elapsed < Duration::from_secs(8),
        "exited after {:?}; expected 1s + 1s of --kill-after",
        out.elapsed
    );
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

/// The lock is lost (key deleted, 1s lease) before --max-runtime runs out, and the
/// deadline passes while the SIGTERM-ignoring command is being killed: 76, not 124.
#[test]
fn lock_loss_wins_over_max_runtime() {
    let server = RedisServer::start();
    let dir = TempDir::new("mrlost");
    let stubborn = dir.script(
        "stubborn",
        &format!(
            "trap '' TERM\necho $$ > '{}'\nwhile :; do sleep 0.05; done",
            dir.join("pid").display()
        ),
    );
    let mut wrapper = server
        .cmd()
        // Lost at the first renewal (1s); SIGKILL is due at the lease's end (about 3s), so
        // --max-runtime (1.5s) passes while the command is still being terminated.
        .args(["-k", "mrl", "-t", "3s", "--max-runtime", "1500ms"])
        .args(["--kill-after", "5s", "--"])
        .arg(stubborn)
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    server.del("redlock:mrl");
    let out = wrapper.wait_within(Duration::from_secs(20));
    eprintln!(
        "lock lost, then --max-runtime passed: exit after {:?}",
        out.elapsed
    );
    out.assert_code(76).assert_stderr_contains("lock lost");
    assert!(!pid_alive(pid), "command still alive");
    assert!(
        out.elapsed > Duration::from_millis(1500),
        "--max-runtime never came into play: exited after {:?}",
        out.elapsed
    );
}

// ---------------------------------------------------------------------------------------------
// --fair

/// Starts a fair waiter on `key` whose job appends `INDEX <ns stamp>` to `order`, and
/// returns once it is queued (the queue has `queued_before + 1` members).
#[track_caller]
fn fair_waiter(
    server: &RedisServer,
    key: &str,
    index: usize,
    order: &Path,
    queued_before: i64,
    extra: &[&str],
) -> Running {
    let job = format!("echo \"{index} $(date +%s%N)\" >> '{}'", order.display());
    let waiter = server
        .cmd()
        .args(["-k", key, "--fair"])
        .args(extra)
        .args(["--shell", &job])
        .spawn();
    wait_until(
        Duration::from_secs(15),
        &format!("fair waiter {index} to queue"),
        || server.zcard(&queue_key(key)) > queued_before,
    );
    waiter
}

/// (index, ns stamp) per line of a fair waiters' order file.
#[track_caller]
fn read_order(order: &Path) -> Vec<(usize, u128)> {
    lines_of(order)
        .iter()
        .map(|line| {
            let (index, stamp) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("order line {line:?}"));
            (index.parse().unwrap(), stamp.parse().unwrap())
        })
        .collect()
}

/// Six fair waiters, each started once the previous one is queued, take the lock in the
/// order they arrived.
#[test]
fn fair_waiters_take_the_lock_in_arrival_order() {
    let server = RedisServer::start();
    let dir = TempDir::new("fair");
    let order = dir.join("order");
    let holder = hold(server.cmd().args(["-k", "fq", "--fair"]), &dir, "h");
    let waiters: Vec<Running> = (1..=6)
        .map(|i| fair_waiter(&server, "fq", i, &order, i as i64 - 1, &[]))
        .collect();
    assert_eq!(server.zcard(&queue_key("fq")), 6);
    assert!(!order.exists(), "a waiter ran while the lock was held");
    holder.let_go();
    holder.wait().assert_code(0);
    for waiter in waiters {
        waiter.wait().assert_code(0);
    }
    let ran: Vec<usize> = read_order(&order).iter().map(|e| e.0).collect();
    assert_eq!(ran, [1, 2, 3, 4, 5, 6]);
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

/// The queue outlives its live waiters however long the holder keeps the lock: fair
/// waiters with a 1s TTL behind a holder with a 20s one are still queued, in order, past
/// three times their TTL (the queue used to expire then, and the order was lost).
#[test]
fn the_fair_queue_outlasts_a_long_lease() {
    let server = RedisServer::start();
    let dir = TempDir::new("fairlong");
    let order = dir.join("order");
    let holder = hold(
        server.cmd().args(["-k", "fl", "--fair", "--ttl", "20s"]),
        &dir,
        "h",
    );
    let waiters: Vec<Running> = (1..=2)
        .map(|i| fair_waiter(&server, "fl", i, &order, i as i64 - 1, &["--ttl", "1s"]))
        .collect();
    let queued = Instant::now();
    let (queue_ttl, lease) = (server.pttl(&queue_key("fl")), server.pttl("redlock:fl"));
    eprintln!("queue PTTL {queue_ttl} ms, holder's {lease} ms");
    assert!(
        queue_ttl >= lease,
        "queue PTTL {queue_ttl} ms, lease {lease} ms"
    );
    // Past three of the waiters' TTLs, with room to spare: the queue is still there.
    wait_until(Duration::from_secs(10), "4s to pass", || {
        queued.elapsed() > Duration::from_secs(4)
    });
    assert_eq!(server.zcard(&queue_key("fl")), 2, "the queue expired");
    holder.let_go();
    holder.wait().assert_code(0);
    for waiter in waiters {
        waiter.wait().assert_code(0);
    }
    let ran: Vec<usize> = read_order(&order).iter().map(|e| e.0).collect();
    assert_eq!(ran, [1, 2]);
}

/// The queue's record of woken waiters is checked, not trusted: a wake-up time `bad`
/// written there by another client for the first waiter is dropped at the release, with a
/// warning from the holder, and the waiters take the lock at once, in order. (A time in
/// the future used to hold the queue up until the first waiter's own next look, a lease
/// of 60 s later; one that is not a number failed the release.)
fn a_bad_wake_up_time_is_repaired(name: &str, bad: &str) {
    let server = RedisServer::start();
    let dir = TempDir::new("badwoken");
    let order = dir.join("order");
    let holder = hold(
        server.cmd().args(["-k", name, "--fair", "--ttl", "60s"]),
        &dir,
        "h",
    );
    let waiters: Vec<Running> = (1..=2)
        .map(|i| fair_waiter(&server, name, i, &order, i as i64 - 1, &[]))
        .collect();
    let first: Vec<String> = server.query(&["ZRANGE", &queue_key(name), "0", "0"]);
    server.hset(&format!("{}:woken", queue_key(name)), &first[0], bad);
    holder.let_go();
    let out = holder.wait();
    eprintln!("holder: {}", out.stderr.trim());
    wait_until(Duration::from_secs(10), "the first waiter to run", || {
        order.exists()
    });
    out.assert_code(0).assert_stderr_contains("wake-up time");
    for waiter in waiters {
        waiter.wait().assert_code(0);
    }
    let ran: Vec<usize> = read_order(&order).iter().map(|e| e.0).collect();
    assert_eq!(ran, [1, 2]);
}

#[test]
fn a_wake_up_time_in_the_future_is_repaired() {
    let future = (now_ms() + 3_600_000).to_string();
    a_bad_wake_up_time_is_repaired("wfuture", &future);
}

#[test]
fn a_wake_up_time_that_is_not_a_number_is_repaired() {
    a_bad_wake_up_time_is_repaired("wnan", "soon");
}

/// A fair waiter SIGKILLed in the middle of the queue does not stall the ones behind it:
/// the release that would wake it finds nobody listening on its channel, drops it and
/// wakes the next (well within a second); the rest keep their order.
#[test]
fn a_crashed_fair_waiter_is_skipped_at_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("fairkill");
    let order = dir.join("order");
    let holder = hold(server.cmd().args(["-k", "fk", "--fair"]), &dir, "h");
    let mut waiters: Vec<Running> = (1..=5)
        .map(|i| fair_waiter(&server, "fk", i, &order, i as i64 - 1, &[]))
        .collect();
    let crashed = waiters.remove(2); // waiter 3
    crashed.signal(libc::SIGKILL);
    assert_killed(&crashed.wait_within(Duration::from_secs(10)), libc::SIGKILL);
    assert_eq!(
        server.zcard(&queue_key("fk")),
        5,
        "the crashed waiter left the queue by itself before anyone found it gone"
    );
    let killed_at = Instant::now();

    holder.let_go();
    holder.wait().assert_code(0);
    for waiter in waiters {
        waiter.wait().assert_code(0);
    }
    let all_done = killed_at.elapsed();
    let ran = read_order(&order);
    let indices: Vec<usize> = ran.iter().map(|e| e.0).collect();
    assert_eq!(indices, [1, 2, 4, 5]);
    let stall = Duration::from_nanos((ran[2].1 - ran[1].1) as u64);
    eprintln!("waiter 4 started {stall:?} after waiter 2; all done {all_done:?} after the kill");
    assert!(
        stall < Duration::from_secs(1),
        "waiter 4 stalled {stall:?} behind the crashed waiter"
    );
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

/// A fair waiter that gives up (--wait 1s, or --no-wait) leaves the queue at once; the
/// waiter queued before it still gets the lock.
#[test]
fn a_fair_waiter_that_gives_up_leaves_the_queue() {
    let server = RedisServer::start();
    let dir = TempDir::new("fairgiveup");
    let order = dir.join("order");
    let queue = queue_key("fg");
    let holder = hold(server.cmd().args(["-k", "fg", "--fair"]), &dir, "h");
    let first = fair_waiter(&server, "fg", 1, &order, 0, &[]);

    let quitter = fair_waiter(&server, "fg", 2, &order, 1, &["--wait", "1s"]);
    assert_eq!(server.zcard(&queue), 2);
    quitter.wait().assert_code(75);
    assert_eq!(
        server.zcard(&queue),
        1,
        "the waiter that gave up is still queued"
    );

    server
        .cmd()
        .args(["-k", "fg", "--fair", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    assert_eq!(
        server.zcard(&queue),
        1,
        "a --no-wait fair run stayed queued"
    );

    holder.let_go();
    holder.wait().assert_code(0);
    first.wait().assert_code(0);
    let ran: Vec<usize> = read_order(&order).iter().map(|e| e.0).collect();
    assert_eq!(ran, [1]);
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

// ---------------------------------------------------------------------------------------------
// --help

/// --help names the subcommands and the new flags; each subcommand's help has its own.
#[test]
fn help_lists_the_operator_commands_and_flags() {
    let out = Wrapper::bare().arg("--help").run();
    out.assert_code(0);
    let help = out.stdout_str();
    for needle in [
        "status",
        "list",
        "release",
        "--limit",
        "--fair",
        "--min-hold",
        "--max-runtime",
        "REDLOCK_FENCE",
        "124",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    for (sub, flags) in [
        ("status", &["--key", "--json"][..]),
        ("list", &["--json", "--prefix"]),
        ("release", &["--key", "--force"]),
    ] {
        let out = Wrapper::bare().args([sub, "--help"]).run();
        out.assert_code(0);
        for flag in flags {
            assert!(
                out.stdout_str().contains(flag),
                "{sub} --help lacks {flag}:\n{}",
                out.stdout_str()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Found while writing these tests, and fixed: a semaphore holder in slot 3 alone, queued
// fair waiters, hash-tagged lock names.

/// Three `--limit 3` holders of `key` in slots 1, 2 and 3; the first two end, and the one
/// left, in slot 3 (`{K}:slot:3`, slots 1 and 2 free), is returned as `s3`.
#[track_caller]
fn holder_in_slot_3(server: &RedisServer, dir: &TempDir, key: &str) -> Holder {
    let mut holders: Vec<Holder> = ["s1", "s2", "s3"]
        .iter()
        .map(|name| hold(server.cmd().args(["-k", key, "--limit", "3"]), dir, name))
        .collect();
    let last = holders.pop().unwrap();
    for holder in holders {
        holder.let_go();
        holder.wait().assert_code(0);
    }
    let mut keys = server.keys();
    keys.sort();
    assert_eq!(
        keys,
        [
            format!("{{{PREFIX}{key}}}:limit"),
            format!("{{{PREFIX}{key}}}:slot:3")
        ]
    );
    last
}

/// A semaphore whose only holder is in slot 3 is held: `status` exits 0 and names it,
/// `list` shows it (the `{K}:limit` key says how many slots to look at).
#[test]
fn status_and_list_see_a_semaphore_holder_in_slot_3() {
    let server = RedisServer::start();
    let dir = TempDir::new("highslot");
    let last = holder_in_slot_3(&server, &dir, "hs");

    let out = server.cmd().args(["status", "-k", "hs"]).run();
    out.assert_code(0);
    assert!(
        out.stdout_str().contains(&format!("pid {}", last.pid())),
        "{}",
        out.stdout_str()
    );
    let list = json_of(server.cmd().args(["list", "--json"]).run().assert_code(0));
    assert_eq!(list[0]["key"], "redlock:hs", "{list}");

    last.let_go();
    last.wait().assert_code(0);
}

/// A run with the default limit beside a `--limit 3` holder in slot 3 must be refused
/// (125, naming --limit), though slot 1 is free.
#[test]
fn a_default_limit_run_is_refused_beside_a_holder_in_slot_3() {
    let server = RedisServer::start();
    let dir = TempDir::new("highslotlimit");
    let last = holder_in_slot_3(&server, &dir, "hl");
    let ran = dir.join("ran");
    server
        .cmd()
        .args(["-k", "hl", "--no-wait", "--", "touch"])
        .arg(&ran)
        .run()
        .assert_code(125)
        .assert_stderr_contains("--limit");
    assert!(
        !ran.exists(),
        "a --limit 1 run ran beside a --limit 3 holder"
    );

    last.let_go();
    last.wait().assert_code(0);
}

/// A fair waiter behind a waiter that was woken and does not act (stopped: its host
/// frozen, its connection still open), with the lock itself free, must not be told that
/// the lock is held "by an unknown holder (a value redlock-run did not write)": nobody
/// holds it; it is told of the queue instead.
#[test]
fn a_fair_waiter_behind_the_queue_is_not_told_of_a_foreign_holder() {
    let server = RedisServer::start();
    let dir = TempDir::new("fairmsg");
    let order = dir.join("order");
    let holder = hold(server.cmd().args(["-k", "fm", "--fair"]), &dir, "h");
    let frozen = fair_waiter(&server, "fm", 1, &order, 0, &[]);
    frozen.signal(libc::SIGSTOP);
    holder.let_go();
    holder.wait().assert_code(0);
    // Free, with the frozen waiter first in the queue: woken, it has a lease's length
    // (30s) to try before it counts as gone.
    assert!(!server.exists("redlock:fm"));
    assert_eq!(server.zcard(&queue_key("fm")), 1);

    let out = server
        .cmd()
        .args(["-k", "fm", "--fair", "--no-wait", "--", "true"])
        .run();
    out.assert_code(75);
    eprintln!("--no-wait behind the queue: {}", out.stderr.trim_end());
    out.assert_stderr_lacks("did not write");

    let out = server
        .cmd()
        .args(["-k", "fm", "--fair", "-v", "--wait", "1500ms", "--", "true"])
        .run();
    let said: Vec<&str> = out
        .stderr
        .lines()
        .filter(|line| line.contains("waiting for"))
        .collect();
    eprintln!("-v waiter behind the queue: {said:?}");
    assert_eq!(said.len(), 1, "{}", out.stderr);
    assert!(!said[0].contains("did not write"), "{:?}", said[0]);
}

/// For a lock name with a Redis Cluster hash tag (`job{a}`) the fence counter, slot and
/// queue keys are `redlock:job{a}:fence` etc., which match the prefix: `list` must not show
/// them as locks of their own, and `release --force` must refuse to delete them.
#[test]
fn list_skips_the_fence_and_slot_keys_of_hash_tagged_names() {
    let server = RedisServer::start();
    let dir = TempDir::new("tagged");
    server
        .cmd()
        .args(["-k", "job{a}", "--", "true"])
        .run()
        .assert_code(0);
    assert!(server.exists("redlock:job{a}:fence"));
    let out = server.cmd().arg("list").run();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "", "a lock that is gone is listed");
    server
        .cmd()
        .args(["release", "-k", "job{a}:fence", "--force"])
        .run()
        .assert_code(125)
        .assert_stderr_contains("bookkeeping");
    assert!(
        server.exists("redlock:job{a}:fence"),
        "the fence counter was deleted"
    );

    let t1 = hold(
        server.cmd().args(["-k", "job{a}", "--limit", "2"]),
        &dir,
        "t1",
    );
    let t2 = hold(
        server.cmd().args(["-k", "job{a}", "--limit", "2"]),
        &dir,
        "t2",
    );
    let list = json_of(server.cmd().args(["list", "--json"]).run().assert_code(0));
    let keys: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| str_field(lock, "key"))
        .collect();
    assert_eq!(keys, ["redlock:job{a}"], "{list}");
    t1.let_go();
    t2.let_go();
    t1.wait().assert_code(0);
    t2.wait().assert_code(0);
}

/// Fences stay exact integers however large they grow: Lua's numbers are doubles, and a
/// counter of 1e14 used to be written into the lock's value as `1e+14`.
#[test]
fn large_fences_stay_exact() {
    let server = RedisServer::start();
    for (counter, next) in [
        ("99999999999999", "100000000000000"),
        ("9007199254740993", "9007199254740994"),
    ] {
        server.set("{redlock:big}:fence", counter);
        let dir = TempDir::new("bigfence");
        let holder = hold(server.cmd().args(["-k", "big"]), &dir, "h");
        assert_eq!(dir.read("h.fence"), next);
        let value = server.lock_value("big").expect("held");
        assert!(
            value.contains(&format!("\"fence\":{next},")),
            "the value has another fence: {value}"
        );
        let status = server.cmd().args(["status", "-k", "big"]).run();
        status
            .assert_code(0)
            .assert_stdout_contains(&format!("fence {next}"));
        holder.let_go();
        holder.wait().assert_code(0);
    }
}

/// A fence counter no run could have counted to (at `i64::MAX`, where `INCR` overflows) is
/// named with its value, exit 125, and no slot is taken; the counter is left as it was.
#[test]
fn an_absurd_fence_counter_is_named_and_nothing_taken() {
    let server = RedisServer::start();
    server.set("{redlock:huge}:fence", "9223372036854775807");
    let out = server.cmd().args(["-k", "huge", "--", "true"]).run();
    out.assert_code(125)
        .assert_stderr_prefixed()
        .assert_stderr_contains("{redlock:huge}:fence")
        .assert_stderr_contains("9223372036854775807")
        .assert_stderr_lacks("overflow")
        .assert_stderr_lacks("user_script");
    assert_eq!(server.lock_value("huge"), None);
    assert_eq!(
        server.get("{redlock:huge}:fence").as_deref(),
        Some("9223372036854775807")
    );
}

/// Takes lock `name` once as job `job` and returns its fence, checked against the value.
#[track_caller]
fn fence_once(server: &RedisServer, dir: &TempDir, name: &str, job: &str) -> u64 {
    let holder = hold(server.cmd().args(["-k", name]), dir, job);
    let fence = fence_of(dir, job);
    let value = server.lock_value(name).expect("held");
    assert!(
        value.contains(&format!("\"fence\":{fence},")),
        "REDLOCK_FENCE {fence}, value {value}"
    );
    holder.let_go();
    holder.wait().assert_code(0);
    fence
}

/// A fence never goes back when the server forgets its counter (FLUSHALL, a restart
/// without persistence): the next one is still larger than every one before.
#[test]
fn fences_grow_after_the_server_forgets_its_counter() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("fenceforgot");
    let first = fence_once(&server, &dir, "forgot", "first");
    let second = fence_once(&server, &dir, "forgot", "second");
    assert!(second > first, "{second} after {first}");
    server.query::<()>(&["FLUSHALL"]);
    let flushed = fence_once(&server, &dir, "forgot", "flushed");
    eprintln!("fences {first}, {second}, after FLUSHALL {flushed}");
    assert!(
        flushed > second,
        "after FLUSHALL {flushed}, before {second}"
    );
    server.restart();
    let restarted = fence_once(&server, &dir, "forgot", "restarted");
    eprintln!("after a restart without persistence {restarted}");
    assert!(
        restarted > flushed,
        "after a restart {restarted}, before {flushed}"
    );
}
