//! The lock's history and counters as the scripts record them (`{K}:history`, a stream;
//! `{K}:stats`, a hash), read here with raw Redis commands: each outcome's events in order
//! with their fields, the counters after each, the cap and `--history 0`, Redlock nodes,
//! and keys of another type (the run goes on, warned once).

use std::collections::HashMap;
use std::time::Duration;

use crate::support::*;

/// `{redlock:NAME}:history` and `{redlock:NAME}:stats`.
fn keys_of(name: &str) -> (String, String) {
    (
        format!("{{{PREFIX}{name}}}:history"),
        format!("{{{PREFIX}{name}}}:stats"),
    )
}

/// One history entry: its ID's milliseconds and its fields.
#[derive(Debug)]
struct Entry {
    ms: u64,
    fields: HashMap<String, String>,
}

impl Entry {
    fn event(&self) -> &str {
        self.field("event")
    }

    #[track_caller]
    fn field(&self, name: &str) -> &str {
        self.fields
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.fields))
    }

    #[track_caller]
    fn number(&self, name: &str) -> u64 {
        self.field(name)
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number in {:?}", self.fields))
    }

    fn has(&self, name: &str) -> bool {
        self.fields.contains_key(name)
    }
}

/// The history of lock `name` on `server`, oldest first.
fn history(server: &RedisServer, name: &str) -> Vec<Entry> {
    let (key, _) = keys_of(name);
    let entries: Vec<(String, Vec<String>)> = server.query(&["XRANGE", &key, "-", "+"]);
    entries
        .into_iter()
        .map(|(id, flat)| Entry {
            ms: id.split('-').next().unwrap().parse().unwrap(),
            fields: flat
                .chunks(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect(),
        })
        .collect()
}

/// A time held, by the script's clock, against the difference of two entries' IDs: the
/// script reads the time just before or after the entry gets its ID.
#[track_caller]
fn assert_close(held: u64, between_ids: u64) {
    assert!(
        held.abs_diff(between_ids) <= 2,
        "held {held} ms, {between_ids} ms between"
    );
}

fn events(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(Entry::event).collect()
}

/// The counters of lock `name` on `server`.
fn stats(server: &RedisServer, name: &str) -> HashMap<String, String> {
    server.query(&["HGETALL", &keys_of(name).1])
}

#[track_caller]
fn counter(stats: &HashMap<String, String>, field: &str) -> u64 {
    stats
        .get(field)
        .unwrap_or_else(|| panic!("no {field} in {stats:?}"))
        .parse()
        .unwrap()
}

/// A holder's value as the history stores it: a JSON object with the token, host, pid and
/// program, and a fence only for a holder.
#[track_caller]
fn assert_holder(entry: &Entry, token: &str, program: &str, fenced: bool) {
    let holder: serde_json::Value = serde_json::from_str(entry.field("holder"))
        .unwrap_or_else(|err| panic!("holder is not JSON ({err}): {:?}", entry.fields));
    assert_eq!(holder["token"], token, "{:?}", entry.fields);
    assert_eq!(holder["program"], program, "{:?}", entry.fields);
    assert!(holder["pid"].is_u64() && holder["host"].is_string());
    assert_eq!(holder.get("fence").is_some(), fenced, "{:?}", entry.fields);
    assert_eq!(entry.field("token"), token);
}

#[test]
fn runs_record_acquired_then_released_with_their_status() {
    let server = RedisServer::start();
    let dir = TempDir::new("hist-run");
    server
        .cmd()
        .args(["-k", "r", "--", "sh", "-c", "exit 3"])
        .run()
        .assert_code(3);
    let holder = hold(server.cmd().args(["-k", "r"]), &dir, "ok");
    let token = dir.read("ok.token").trim().to_string();
    let fence: u64 = dir.read("ok.fence").trim().parse().unwrap();
    holder.let_go();
    holder.wait().assert_code(0);

    let entries = history(&server, "r");
    assert_eq!(
        events(&entries),
        ["acquired", "released", "acquired", "released"]
    );
    assert_eq!(entries[1].number("exit_code"), 3);
    let (acquired, released) = (&entries[2], &entries[3]);
    assert_holder(acquired, &token, "ok", true);
    assert_holder(released, &token, "ok", true);
    assert_eq!(acquired.number("fence"), fence);
    assert_eq!(released.number("fence"), fence);
    // Taken at the first try: what it "waited" is only the run's start-up (connecting, the
    // server's check), a few ms at most on a loaded machine, never 0 for sure.
    assert!(
        acquired.number("waited_ms") < 5_000,
        "{:?}",
        acquired.fields
    );
    assert_eq!(released.number("exit_code"), 0);
    assert!(released.ms >= acquired.ms);
    assert_close(released.number("held_ms"), released.ms - acquired.ms);
    assert!(!acquired.has("held_ms") && !released.has("waited_ms"));

    let stats = stats(&server, "r");
    assert_eq!(counter(&stats, "acquired"), 2);
    assert_eq!(
        (counter(&stats, "wait_count"), counter(&stats, "hold_count")),
        (2, 2)
    );
    assert_eq!(
        counter(&stats, "hold_ms_sum"),
        entries[1].number("held_ms") + released.number("held_ms")
    );
    // The success is the second run's; the failure before it neither set nor reset skips.
    assert_eq!(counter(&stats, "last_success_ms"), released.ms);
    assert_eq!(counter(&stats, "skips"), 0);
    // No holder left: no slot field.
    assert!(!stats.contains_key("slot:1"), "{stats:?}");
}

/// A run that does not wait records `busy`; one whose wait runs out records `timeout` with
/// the time it waited; each counts a consecutive skip, and the holder's success resets them.
#[test]
fn busy_and_timeout_count_skips_until_a_success() {
    let server = RedisServer::start();
    let dir = TempDir::new("hist-skip");
    let holder = hold(server.cmd().args(["-k", "s"]), &dir, "h");
    server
        .cmd()
        .args(["-k", "s", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    assert_eq!(counter(&stats(&server, "s"), "skips"), 1);
    server
        .cmd()
        .args(["-k", "s", "--wait", "1s", "--", "true"])
        .run()
        .assert_code(75);
    let counted = stats(&server, "s");
    assert_eq!(counter(&counted, "skips"), 2);
    assert_eq!(
        (counter(&counted, "busy"), counter(&counted, "timeout")),
        (1, 1)
    );
    holder.let_go();
    holder.wait().assert_code(0);

    let entries = history(&server, "s");
    assert_eq!(
        events(&entries),
        ["acquired", "busy", "timeout", "released"]
    );
    let (busy, timeout) = (&entries[1], &entries[2]);
    assert_holder(busy, busy.field("token"), "true", false);
    assert_holder(timeout, timeout.field("token"), "true", false);
    assert_ne!(busy.field("token"), entries[0].field("token"));
    assert!(timeout.number("waited_ms") >= 900, "{:?}", timeout.fields);
    assert!(!busy.has("fence") && !timeout.has("fence"));
    assert_eq!(counter(&stats(&server, "s"), "skips"), 0);
}

/// `--once`: the second run finds the work done (`already_done`, recorded and counted, but
/// not a skip: the work is done); `--supersede`: the older waiter gives way (`superseded`,
/// a skip).
#[test]
fn already_done_is_recorded_and_superseded_is_a_skip() {
    let server = RedisServer::start();
    let dir = TempDir::new("hist-once");
    for _ in 0..2 {
        server
            .cmd()
            .args(["-k", "o", "--once", "job-1", "--", "true"])
            .run()
            .assert_code(0);
    }
    assert_eq!(
        events(&history(&server, "o")),
        ["acquired", "released", "already_done"]
    );
    let counted = stats(&server, "o");
    assert_eq!(
        (
            counter(&counted, "already_done"),
            counter(&counted, "skips")
        ),
        (1, 0)
    );

    let holder = hold(server.cmd().args(["-k", "p"]), &dir, "h");
    let older = server
        .cmd()
        .args(["-k", "p", "--supersede", "--label", "older", "--", "true"])
        .spawn();
    wait_until(Duration::from_secs(15), "the older waiter to queue", || {
        server.zcard(&format!("{{{PREFIX}p}}:queue")) == 1
    });
    let newer = server
        .cmd()
        .args(["-k", "p", "--supersede", "--label", "newer", "--", "true"])
        .spawn();
    older.wait().assert_code(77);
    holder.let_go();
    holder.wait().assert_code(0);
    newer.wait().assert_code(0);
    let entries = history(&server, "p");
    assert_eq!(
        events(&entries),
        ["acquired", "superseded", "released", "acquired", "released"]
    );
    assert!(entries[1].field("holder").contains("\"label\":\"older\""));
    assert_eq!(counter(&stats(&server, "p"), "superseded"), 1);
    assert_eq!(
        counter(&stats(&server, "p"), "skips"),
        0,
        "reset by the success"
    );
}

/// `release --force`: `forced`, naming the holder and the forcer; the holder then finds its
/// lock gone and records `lost`, once, with its command's status.
#[test]
fn forced_then_lost_by_the_holder() {
    let server = RedisServer::start();
    let dir = TempDir::new("hist-force");
    let holder = hold(server.cmd().args(["-k", "f"]), &dir, "h");
    let token = dir.read("h.token").trim().to_string();
    server
        .cmd()
        .args(["release", "-k", "f", "--force"])
        .run()
        .assert_code(0);
    holder.wait().assert_code(76);
    let entries = history(&server, "f");
    assert_eq!(events(&entries), ["acquired", "forced", "lost"]);
    let forced = &entries[1];
    assert_holder(forced, &token, "h", true);
    let by: serde_json::Value = serde_json::from_str(forced.field("by")).unwrap();
    assert_eq!(by["program"], "redlock-run");
    assert_ne!(by["pid"], serde_json::json!(holder_pid_of(&entries[0])));
    assert_close(forced.number("held_ms"), forced.ms - entries[0].ms);
    // Seen by a renewal (the command still ran: no status yet) or by the release (143).
    let lost = &entries[2];
    assert_eq!(lost.field("token"), token);
    assert!(!lost.has("exit_code") || lost.number("exit_code") == 143);
    // Its hold was counted by the forced release, not again.
    assert!(!lost.has("held_ms"));
    let counted = stats(&server, "f");
    assert_eq!(
        (counter(&counted, "lost"), counter(&counted, "hold_count")),
        (1, 1)
    );
}

fn holder_pid_of(entry: &Entry) -> u64 {
    let holder: serde_json::Value = serde_json::from_str(entry.field("holder")).unwrap();
    holder["pid"].as_u64().unwrap()
}

/// A lock deleted under its holder: the renewal finds it and records `lost`; the release,
/// finding it gone too, records nothing more.
#[test]
fn a_deleted_lock_is_recorded_lost_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("hist-lost");
    let mut wrapper = server
        .cmd()
        .args(["-k", "l", "-t", "1s", "--"])
        .arg(sleeper(&dir))
        .spawn();
    wrapper.read_pid(&dir.join("pid"));
    server.del("redlock:l");
    wrapper.wait_within(Duration::from_secs(15)).assert_code(76);
    let entries = history(&server, "l");
    assert_eq!(events(&entries), ["acquired", "lost"]);
    assert_eq!(entries[1].field("token"), entries[0].field("token"));
    assert_eq!(entries[1].number("fence"), entries[0].number("fence"));
    assert!(entries[1].has("held_ms"));
    let counted = stats(&server, "l");
    assert_eq!(counter(&counted, "lost"), 1);
    assert!(!counted.contains_key("slot:1"), "{counted:?}");
}

/// A holder killed with `kill -9` never releases: the next acquisition finds its lease ran
/// out and records `expired` for it, found by the new holder.
#[test]
fn a_holder_killed_with_sigkill_is_found_expired() {
    let server = RedisServer::start();
    let dir = TempDir::new("hist-expired");
    let mut wrapper = server
        .cmd()
        .args(["-k", "e", "-t", "1s", "--"])
        .arg(sleeper(&dir))
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    wrapper.signal(libc::SIGKILL);
    wait_until(Duration::from_secs(5), "the wrapper to die", || {
        wrapper.has_exited()
    });
    wait_for_death(pid, Duration::from_secs(5));
    wait_until(Duration::from_secs(10), "the lease to run out", || {
        !server.exists("redlock:e")
    });
    server
        .cmd()
        .args(["-k", "e", "--", "true"])
        .run()
        .assert_code(0);
    let entries = history(&server, "e");
    assert_eq!(
        events(&entries),
        ["acquired", "expired", "acquired", "released"]
    );
    let expired = &entries[1];
    assert_eq!(expired.field("token"), entries[0].field("token"));
    assert_eq!(expired.field("by"), entries[2].field("token"));
    assert_eq!(expired.number("fence"), entries[0].number("fence"));
    assert!(expired.number("held_ms") >= 1000, "{:?}", expired.fields);
    assert_eq!(counter(&stats(&server, "e"), "expired"), 1);
}

/// `--limit 3`: a holder of slot 2 killed with `kill -9` while slot 1 comes free. Later
/// runs take slot 1 only, and the first of them records `expired` for the dead holder all
/// the same; a run that takes slot 2 at last does not record it again.
#[test]
fn a_dead_holder_of_a_slot_nobody_takes_is_found_expired_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("hist-expired-slot");
    let wrapper = || server.cmd().args(["-k", "s", "--limit", "3", "-t", "1s"]);
    let first = hold(wrapper(), &dir, "a");
    let dead = Job::new(&dir, "b")
        .first(&format!("echo $$ > '{}'", dir.join("b.pid").display()))
        .start(wrapper());
    let job = read_pid(&dir.join("b.pid"));
    signal(dead.pid(), libc::SIGKILL);
    wait_for_death(dead.pid(), Duration::from_secs(5));
    wait_for_death(job, Duration::from_secs(5));
    wait_until(Duration::from_secs(10), "slot 2's lease to run out", || {
        !server.exists("{redlock:s}:slot:2")
    });
    first.let_go();
    first.wait().assert_code(0);
    for _ in 0..2 {
        wrapper().args(["--", "true"]).run().assert_code(0);
    }
    let dead_token = dir.read("b.token");
    let expired: Vec<Entry> = history(&server, "s")
        .into_iter()
        .filter(|entry| entry.event() == "expired")
        .collect();
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!(expired[0].field("token"), dead_token);
    assert_eq!(expired[0].number("fence"), fence_of(&dir, "b"));
    assert!(expired[0].number("held_ms") >= 1000, "{expired:?}");
    assert_eq!(counter(&stats(&server, "s"), "expired"), 1);

    // Slot 1 held: the next run takes slot 2, the dead holder's, and finds nothing there.
    let holder = hold(wrapper(), &dir, "c");
    wrapper().args(["--", "true"]).run().assert_code(0);
    holder.let_go();
    holder.wait().assert_code(0);
    let entries = history(&server, "s");
    let expired = entries.iter().filter(|e| e.event() == "expired").count();
    assert_eq!(expired, 1, "{:?}", events(&entries));
    let counted = stats(&server, "s");
    assert_eq!(counter(&counted, "expired"), 1);
    assert!(
        !counted.keys().any(|field| field.starts_with("slot:")),
        "{counted:?}"
    );
}

/// The replaced holder's release records `replaced`, not `released`.
#[test]
fn a_replaced_holder_records_replaced() {
    let server = RedisServer::start();
    let dir = TempDir::new("hist-replace");
    let old = server
        .cmd()
        .args(["-k", "x", "--shell"])
        .arg(format!(
            "touch {}; while :; do sleep 0.05; done",
            dir.join("old").display()
        ))
        .spawn();
    wait_until(Duration::from_secs(15), "the old command to start", || {
        dir.exists("old")
    });
    wait_until(Duration::from_secs(15), "the holder to listen", || {
        server.subscribed_clients() >= 1
    });
    server
        .cmd()
        .args(["-k", "x", "--replace", "--", "true"])
        .run()
        .assert_code(0);
    old.wait().assert_code(77);
    let entries = history(&server, "x");
    assert_eq!(
        events(&entries),
        ["acquired", "replaced", "acquired", "released"]
    );
    assert_eq!(entries[1].field("token"), entries[0].field("token"));
    assert!(entries[1].has("exit_code") && entries[1].has("held_ms"));
    // Told to stop: not a success.
    assert!(
        !stats(&server, "x").contains_key("last_success_ms") || {
            counter(&stats(&server, "x"), "last_success_ms") == entries[3].ms
        }
    );
}

/// `--history 3` keeps the last 3 events; `--history 0` writes neither key.
#[test]
fn the_cap_and_history_0() {
    let server = RedisServer::start();
    for _ in 0..3 {
        server
            .cmd()
            .args(["-k", "c", "--history", "3", "--", "true"])
            .run()
            .assert_code(0);
    }
    let entries = history(&server, "c");
    assert_eq!(events(&entries), ["released", "acquired", "released"]);
    assert_eq!(counter(&stats(&server, "c"), "acquired"), 3);

    server
        .cmd()
        .args(["-k", "z", "--history", "0", "--", "true"])
        .run()
        .assert_code(0);
    server
        .cmd()
        .args(["-k", "z", "--", "true"])
        .env("REDLOCK_HISTORY", "0")
        .run()
        .assert_code(0);
    let (history_key, stats_key) = keys_of("z");
    assert!(!server.exists(&history_key) && !server.exists(&stats_key));

    for bad in ["1000001", "-1", "lots"] {
        server
            .cmd()
            .args(["-k", "z", &format!("--history={bad}"), "--", "true"])
            .run()
            .assert_code(125)
            .assert_stderr_contains("--history");
    }
}

/// A history that is a string and counters that are a list (another application's data):
/// left alone; the run works, keeps its command's status, and warns once for each.
#[test]
fn keys_of_another_type_are_left_alone_with_one_warning_each() {
    let server = RedisServer::start();
    let (history_key, stats_key) = keys_of("w");
    server.set(&history_key, "theirs");
    let _: i64 = server.query(&["RPUSH", &stats_key, "theirs"]);
    let out = server
        .cmd()
        .args(["-k", "w", "--", "sh", "-c", "exit 4"])
        .run();
    out.assert_code(4);
    let stderr = out.stderr.clone();
    assert_eq!(stderr.matches("warning").count(), 2, "{stderr}");
    assert_eq!(stderr.matches(&history_key).count(), 1, "{stderr}");
    assert_eq!(stderr.matches(&stats_key).count(), 1, "{stderr}");
    assert_eq!(server.get(&history_key).as_deref(), Some("theirs"));
    assert_eq!(server.key_type(&stats_key), "list");
    assert!(!server.exists("redlock:w"));
}

/// Redlock: every node records the run.
#[test]
fn every_redlock_node_records() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut wrapper = Wrapper::bare();
    for node in &nodes {
        wrapper = wrapper.args(["-r", &node.url()]);
    }
    wrapper
        .args(["-k", "q", "--", "sh", "-c", "exit 2"])
        .run()
        .assert_code(2);
    let tokens: Vec<String> = nodes
        .iter()
        .map(|node| {
            let entries = history(node, "q");
            assert_eq!(events(&entries), ["acquired", "released"]);
            assert_eq!(entries[1].number("exit_code"), 2);
            assert_eq!(counter(&stats(node, "q"), "acquired"), 1);
            entries[0].field("token").to_string()
        })
        .collect();
    assert!(tokens.iter().all(|token| *token == tokens[0]));
}

/// Redlock: an attempt that took the lock on every node, held still by a debugger before it
/// settles its fence until a third of its TTL has passed (a majority won too slowly), lets
/// it go again: each node records the end of its `acquired`, `abandoned`, and `history`
/// shows it. The command never runs; no hold is counted.
#[test]
fn an_attempt_that_wins_a_majority_too_slowly_records_abandoned() {
    let gdb = require(
        "gdb",
        "this test holds redlock-run still while its attempt runs out of time",
        "apt-get install gdb",
    );
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    // One count everywhere: the fence is settled at once, and only the time is wrong.
    for node in &nodes {
        node.set("{redlock:ab}:fence", "100");
    }
    let dir = TempDir::new("hist-abandoned");
    let (paused, go, ran) = (dir.join("paused"), dir.join("go"), dir.join("ran"));
    let script = format!(
        "exec '{gdb}' -q -batch \
         -ex 'break redlock_run::backend::quorum::Quorum::settle_fence' -ex run \
         -ex 'shell touch {paused}; while [ ! -e {go} ]; do sleep 0.05; done' \
         -ex delete -ex continue -ex 'quit $_exitcode' --args \"$0\" \"$@\"",
        gdb = gdb.display(),
        paused = paused.display(),
        go = go.display(),
    );
    let mut wrapper = Wrapper::via_shell(&nodes[0].url(), &script).arg(BIN);
    for node in &nodes {
        wrapper = wrapper.args(["-r", node.url().as_str()]);
    }
    let running = wrapper
        .args(["-k", "ab", "--ttl", "9s", "--no-wait", "--", "touch"])
        .arg(&ran)
        .spawn();
    wait_until(Duration::from_secs(30), "gdb to hold redlock-run", || {
        paused.exists()
    });
    // Taken on every node; a third of the TTL gone since (PTTL counts from after the attempt
    // started), with plenty left for the release to find the key still there.
    wait_until(
        Duration::from_secs(15),
        "a third of the TTL to pass",
        || {
            nodes.iter().all(|node| {
                let pttl = node.pttl("redlock:ab");
                (0..5500).contains(&pttl)
            })
        },
    );
    std::fs::write(&go, "").unwrap();
    let out = running.wait();
    out.assert_stderr_contains("took longer than a third of its TTL");
    assert!(!ran.exists(), "the command ran");
    for node in &nodes {
        let entries = history(node, "ab");
        assert_eq!(events(&entries), ["acquired", "abandoned"]);
        let abandoned = &entries[1];
        assert_eq!(abandoned.field("token"), entries[0].field("token"));
        assert_eq!(abandoned.number("fence"), entries[0].number("fence"));
        assert!(!abandoned.has("exit_code"), "{:?}", abandoned.fields);
        let counted = stats(node, "ab");
        assert!(!counted.contains_key("hold_count"), "{counted:?}");
        assert!(
            !counted.keys().any(|f| f.starts_with("slot:")),
            "{counted:?}"
        );
    }
    let shown = nodes
        .iter()
        .fold(Wrapper::bare().args(["history", "-k", "ab"]), |w, node| {
            w.args(["-r", node.url().as_str()])
        })
        .run();
    shown.assert_code(0);
    let text = shown.stdout_str();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].contains(" abandoned: fence "), "{lines:?}");
}

/// Counters that are not integers (another client wrote them) start again from the run's
/// increment: the counting goes on, and with it the removal of a released holder's
/// `slot:1` field, so that an expired lease is recorded once, not again at each run.
#[test]
fn counters_that_are_not_numbers_start_again_and_expire_once() {
    let server = RedisServer::start();
    let (_, stats_key) = keys_of("n");
    let dead = r#"{"token":"dead-holder","fence":7,"host":"h","pid":1,"program":"p","since":"2026-01-01T00:00:00Z","ttl_ms":1000,"limit":1}"#;
    let _: i64 = server.query(&[
        "HSET",
        &stats_key,
        "slot:1",
        &format!("1000 {dead}"),
        "expired",
        "not a number",
        "acquired",
        "1.5",
        "hold_count",
        "9223372036854775807",
    ]);
    for _ in 0..3 {
        let out = server.cmd().args(["-k", "n", "--", "true"]).run();
        out.assert_code(0);
        assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    }
    let entries = history(&server, "n");
    assert_eq!(
        events(&entries),
        ["expired", "acquired", "released", "acquired", "released", "acquired", "released"]
    );
    assert_eq!(entries[0].field("token"), "dead-holder");
    assert!(entries.iter().skip(2).step_by(2).all(|e| e.has("held_ms")));
    let counted = stats(&server, "n");
    assert_eq!(counter(&counted, "expired"), 1);
    assert_eq!(counter(&counted, "acquired"), 3);
    assert_eq!(counter(&counted, "hold_count"), 3);
    assert!(!counted.contains_key("slot:1"), "{counted:?}");
}
