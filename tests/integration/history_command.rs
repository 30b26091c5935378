//! `redlock-run history` (issue 23, §1, the reading side): a lock's last events from its
//! stream `{K}:history`, newest last, in text and JSON; `--follow` printing new ones as
//! they are recorded until interrupted; a Redlock quorum showing what a majority recorded;
//! bad input (`-n`, a key of another type, entries another client wrote). The streams are
//! seeded here with raw `XADD`s in the documented format, at fixed IDs (fixed times).
//!
//! What this module does not own: what the runs record (the recording's own tests).

use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// The history stream of lock `name` (documented layout: `{K}:history`).
fn history_of(name: &str) -> String {
    format!("{{{PREFIX}{name}}}:history")
}

/// `XADD stream id field value …`, any bytes.
#[track_caller]
fn xadd(server: &RedisServer, stream: &[u8], id: &str, fields: &[(&str, &[u8])]) {
    let mut command = redis::cmd("XADD");
    command.arg(stream).arg(id);
    for (field, value) in fields {
        command.arg(field.as_bytes()).arg(*value);
    }
    let _: String = command
        .query(&mut server.connection())
        .unwrap_or_else(|e| panic!("XADD {id}: {e}"));
}

/// 2025-11-26T00:19:05.000Z, in ms since the epoch.
const BASE_MS: u64 = 1_764_116_345_000;

fn id_at(offset_ms: u64) -> String {
    format!("{}-0", BASE_MS + offset_ms)
}

const HOLDER_1: &[u8] = br#"{"token":"t1","fence":118,"host":"web-3","pid":4242,"program":"deploy.sh","label":"v1.2","since":"2025-11-26T00:19:05Z","since_ms":1764116345000,"ttl_ms":30000,"limit":1}"#;
const WAITER_2: &[u8] =
    br#"{"token":"t2","host":"web-4","pid":7,"program":"deploy.sh","since_ms":1764116345100}"#;
const HOLDER_3: &[u8] =
    br#"{"token":"t3","fence":119,"host":"web-5","pid":9,"program":"job","since_ms":1}"#;
const FORCER: &[u8] = br#"{"host":"ops-1","pid":77,"program":"redlock-run"}"#;

/// An acquisition, a busy run, its release, and a forced release, as runs record them.
fn seed_four_events(server: &RedisServer, name: &str) {
    let stream = history_of(name);
    let stream = stream.as_bytes();
    xadd(
        server,
        stream,
        &id_at(0),
        &[
            ("event", b"acquired"),
            ("token", b"t1"),
            ("fence", b"118"),
            ("holder", HOLDER_1),
            ("waited_ms", b"1200"),
        ],
    );
    xadd(
        server,
        stream,
        &id_at(100),
        &[("event", b"busy"), ("token", b"t2"), ("holder", WAITER_2)],
    );
    xadd(
        server,
        stream,
        &id_at(3333),
        &[
            ("event", b"released"),
            ("token", b"t1"),
            ("fence", b"118"),
            ("holder", HOLDER_1),
            ("exit_code", b"0"),
            ("held_ms", b"3333"),
        ],
    );
    xadd(
        server,
        stream,
        &id_at(4000),
        &[
            ("event", b"forced"),
            ("token", b"t3"),
            ("fence", b"119"),
            ("holder", HOLDER_3),
            ("held_ms", b"500"),
            ("by", FORCER),
        ],
    );
}

const FOUR_LINES: [&str; 4] = [
    "2025-11-26T00:19:05.000Z acquired: fence 118, web-3 pid 4242 `deploy.sh` (v1.2), waited 1s 200ms",
    "2025-11-26T00:19:05.100Z busy: web-4 pid 7 `deploy.sh`",
    "2025-11-26T00:19:08.333Z released: fence 118, web-3 pid 4242 `deploy.sh` (v1.2), exit 0, held 3s 333ms",
    "2025-11-26T00:19:09.000Z forced: fence 119, web-5 pid 9 `job`, held 500ms, forced by ops-1 pid 77 `redlock-run`",
];

fn json_lines(out: &Output) -> Vec<Value> {
    out.stdout_str()
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
        })
        .collect()
}

/// The events in text, oldest first, one line each; the same in JSON with numbers as
/// numbers; `-n` takes the newest.
#[test]
fn history_shows_the_events_oldest_first_in_text_and_json() {
    let server = RedisServer::start();
    seed_four_events(&server, "job");

    let out = server.cmd().args(["history", "-k", "job"]).run();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), FOUR_LINES.join("\n") + "\n");
    assert_eq!(out.stderr, "");

    let out = server.cmd().args(["history", "-k", "job", "-n", "2"]).run();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), FOUR_LINES[2..].join("\n") + "\n");

    let out = server.cmd().args(["history", "-k", "job", "--json"]).run();
    out.assert_code(0);
    let events = json_lines(&out);
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["acquired", "busy", "released", "forced"]);
    let acquired = &events[0];
    assert_eq!(acquired["time"], "2025-11-26T00:19:05.000Z");
    assert_eq!(acquired["time_ms"], BASE_MS);
    assert_eq!(acquired["key"], "redlock:job");
    assert_eq!(acquired["fence"], 118);
    assert_eq!(acquired["waited_ms"], 1200);
    assert_eq!(acquired["host"], "web-3");
    assert_eq!(acquired["pid"], 4242);
    assert_eq!(acquired["program"], "deploy.sh");
    assert_eq!(acquired["label"], "v1.2");
    assert_eq!(acquired["token"], "t1");
    let released = &events[2];
    assert_eq!(released["exit_code"], 0);
    assert_eq!(released["held_ms"], 3333);
    assert!(released.get("waited_ms").is_none(), "{released}");
    assert_eq!(events[1].get("fence"), None, "a busy run has no fence");
    assert_eq!(events[3]["by"]["host"], "ops-1");
}

/// `-n 0` without --follow, more than 10000, negative, and not a number: refused (125) before
/// anything is read; a key with no history: "no history", exit 1 (as `status` of a free
/// lock), and nothing on stdout in JSON.
#[test]
fn history_refuses_bad_counts_and_says_when_there_is_none() {
    let server = RedisServer::start();
    for n in ["0", "10001", "99999999999999999999999", "-1", "ten", ""] {
        let out = server.cmd().args(["history", "-k", "job", "-n", n]).run();
        out.assert_code(125).assert_stderr_contains("invalid -n");
        assert_eq!(out.stdout_str(), "", "-n {n:?}");
    }
    let out = server
        .cmd()
        .args(["history", "-k", "job", "-n", "10000"])
        .run();
    out.assert_code(1);
    assert_eq!(out.stdout_str(), "no history for redlock:job\n");

    let out = server.cmd().args(["history", "-k", "job", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.stdout_str(), "");
}

/// A `{K}:history` that is not a stream is named, with its type; nothing else is touched.
#[test]
fn history_of_another_type_is_named_and_refused() {
    let server = RedisServer::start();
    server.set(&history_of("w"), "someone's string");
    let out = server.cmd().args(["history", "-k", "w"]).run();
    out.assert_code(125)
        .assert_stderr_contains("{redlock:w}:history")
        .assert_stderr_contains("holds a string, not a stream")
        .assert_stderr_prefixed();
    assert_eq!(out.stdout_str(), "");
    assert_eq!(
        server.get(&history_of("w")).as_deref(),
        Some("someone's string")
    );
}

/// Entries another client wrote: fields missing, numbers that are not, huge values,
/// control characters, bytes that are not UTF-8, under a key name that is not UTF-8
/// either: shown as far as they read, escaped, one line each, never a panic.
#[test]
fn history_shows_foreign_and_corrupt_entries_as_far_as_they_read() {
    let server = RedisServer::start();
    let stream = b"{redlock:odd\xff\n}:history";
    xadd(&server, stream, &id_at(0), &[("color", b"blue\x1b[31m")]);
    xadd(
        &server,
        stream,
        &id_at(1),
        &[
            ("event", b"released\nforged line"),
            ("fence", b"-1"),
            ("exit_code", b"99999999999999999999999"),
            ("held_ms", b"18446744073709551615"),
            ("holder", b"\xff\xfe not json"),
        ],
    );
    xadd(
        &server,
        stream,
        &id_at(2),
        &[
            ("event", b"acquired"),
            (
                "holder",
                br#"{"token":"t","host":"h\u202eexe.txt","pid":1}"#,
            ),
        ],
    );
    xadd(
        &server,
        stream,
        "18446744073709551615-0",
        &[("event", b"busy")],
    );

    let name = std::ffi::OsStr::from_bytes(b"odd\xff\n");
    let out = server.cmd().arg("history").arg("-k").arg(name).run();
    out.assert_code(0);
    let stdout = out.stdout_str();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(
        lines[0],
        "2025-11-26T00:19:05.000Z an entry redlock-run did not write: color=\"blue\\x1b[31m\""
    );
    let (shown, held) = lines[1].rsplit_once(", held ").expect(lines[1]);
    assert_eq!(
        shown,
        "2025-11-26T00:19:05.001Z released\\nforged line: fence \"-1\" (not a number), an \
         unknown run (a value redlock-run did not write), exit \"99999999999999999999999\" \
         (not a number)"
    );
    assert!(held.contains("years"), "{held}");
    assert!(lines[2].contains("h\\u{202e}exe.txt pid 1"), "{}", lines[2]);
    assert!(
        lines[3].starts_with("(unknown time, ID 18446744073709551615-0) busy"),
        "{}",
        lines[3]
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);

    let out = server
        .cmd()
        .arg("history")
        .arg("-k")
        .arg(name)
        .arg("--json")
        .run();
    out.assert_code(0);
    let events = json_lines(&out);
    assert_eq!(events.len(), 4);
    assert_eq!(events[0]["event"], Value::Null);
    assert_eq!(events[0]["fields"]["color"], "blue\\x1b[31m");
    assert_eq!(events[0]["key"], "redlock:odd\\xff\\n");
    assert_eq!(events[1]["held_ms"], u64::MAX);
    assert_eq!(
        events[1]["ill_formed"],
        serde_json::json!(["fence", "exit_code", "holder"])
    );
    assert_eq!(events[3]["time"], Value::Null);
}

/// Waits until the follower has printed `count` lines; returns them.
#[track_caller]
fn lines_printed(running: &Running, count: usize) -> Vec<String> {
    let mut lines = Vec::new();
    wait_until(
        Duration::from_secs(20),
        &format!("{count} lines from history --follow"),
        || {
            lines = running.stdout_so_far().lines().map(String::from).collect();
            lines.len() >= count
        },
    );
    lines
}

/// `--follow` prints the last events, then each new one as it is recorded, in order, and
/// ends by the signal that interrupts it (130 after SIGINT, 143 after SIGTERM, as tail -f).
/// `-n 0 --follow` prints only new ones.
#[test]
fn history_follow_prints_new_events_until_interrupted() {
    let server = RedisServer::start();
    seed_four_events(&server, "f");
    for (signal, n) in [(libc::SIGTERM, "2"), (libc::SIGINT, "0")] {
        let running = server
            .cmd()
            .args(["history", "-k", "f", "--follow", "-n", n])
            .spawn();
        let past = if n == "2" { 2 } else { 0 };
        if past > 0 {
            assert_eq!(lines_printed(&running, past), FOUR_LINES[2..]);
        }
        // Blocked in its read: what is added now comes after what it read.
        wait_until(Duration::from_secs(20), "a blocking XREAD", || {
            server.clients().iter().any(|client| {
                client
                    .iter()
                    .any(|(field, value)| field == "cmd" && value == "xread")
            })
        });
        let stream = history_of("f");
        // Past the seeded ones: the server's own clock, `*`.
        for event in ["busy", "timeout", "superseded"] {
            xadd(
                &server,
                stream.as_bytes(),
                "*",
                &[("event", event.as_bytes()), ("token", b"t9")],
            );
        }
        let lines = lines_printed(&running, past + 3);
        let new: Vec<&str> = lines[past..]
            .iter()
            .map(|line| line.split_once(' ').unwrap().1)
            .collect();
        assert_eq!(new, ["busy", "timeout", "superseded"], "{lines:?}");
        running.signal(signal);
        let out = running.wait();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&out.status),
            Some(signal),
            "{out:?}"
        );
        assert_eq!(out.stdout_str().lines().count(), past + 3);
        assert!(out.stderr.is_empty(), "{}", out.stderr);
    }
}

/// With no stdout at all (`>&-`, as a careless cron line or service unit leaves it), a
/// follower ends as it does on a closed pipe (exit 0), rather than follow for ever unheard:
/// Rust's stdout takes a write to a closed descriptor as done.
#[test]
fn history_follow_ends_when_stdout_is_closed() {
    let server = RedisServer::start();
    seed_four_events(&server, "closed");
    let mut child = std::process::Command::new("sh")
        .args(["-c", "exec \"$@\" >&-", "sh", crate::support::BIN])
        .args(["history", "-r", &server.url(), "-k", "closed", "--follow"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting sh");
    let limit = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the follower") {
            break status;
        }
        if std::time::Instant::now() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("history --follow with stdout closed still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// A blocking read that ends with nothing new (each waits a little less than
/// --redis-timeout) is sent again: a quiet lock does not end a follower.
#[test]
fn history_follow_outlasts_its_reads_timing_out() {
    let server = RedisServer::start();
    let running = server
        .cmd()
        .args(["history", "-k", "quiet", "--follow", "-n", "0"])
        .args(["--redis-timeout", "100ms"])
        .spawn();
    let xreads = || {
        server
            .command_stats()
            .into_iter()
            .find(|(command, _)| command == "xread")
            .map_or(0, |(_, calls)| calls)
    };
    wait_until(Duration::from_secs(20), "four blocking reads", || {
        xreads() >= 4
    });
    let stream = history_of("quiet");
    xadd(&server, stream.as_bytes(), "*", &[("event", b"busy")]);
    let lines = lines_printed(&running, 1);
    assert!(lines[0].ends_with(" busy"), "{lines:?}");
    assert!(
        running.stderr_so_far().is_empty(),
        "{}",
        running.stderr_so_far()
    );
    running.signal(libc::SIGTERM);
    let out = running.wait();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGTERM)
    );
}

/// A follower whose server goes away says so and exits 125.
#[test]
fn history_follow_ends_125_when_redis_goes_away() {
    let mut server = RedisServer::start();
    seed_four_events(&server, "gone");
    let running = server
        .cmd()
        .args(["history", "-k", "gone", "--follow", "-n", "1"])
        .spawn();
    lines_printed(&running, 1);
    server.stop();
    let out = running.wait();
    out.assert_code(125)
        .assert_stderr_contains("cannot follow the history of redlock:gone")
        .assert_stderr_prefixed();
}

/// Redlock: an event (token + event) is shown when a majority of the nodes recorded it, at
/// the earliest of their times; one node's alone is not. Following, an event is printed
/// once its second node records it.
#[test]
fn history_of_a_quorum_shows_what_a_majority_recorded() {
    let nodes = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let stream = history_of("q");
    let stream = stream.as_bytes();
    let on = |node: usize, offset: u64, event: &str, token: &str| {
        xadd(
            &nodes[node],
            stream,
            &id_at(offset),
            &[
                ("event", event.as_bytes()),
                ("token", token.as_bytes()),
                ("holder", HOLDER_1),
            ],
        );
    };
    // Acquired on all three, released on two, lost on one (its node's noise).
    on(0, 10, "acquired", "t1");
    on(1, 12, "acquired", "t1");
    on(2, 11, "acquired", "t1");
    on(1, 500, "released", "t1");
    on(2, 400, "released", "t1");
    on(0, 450, "lost", "t1");
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let quorum = || {
        let mut wrapper = Wrapper::bare().args(["history", "-k", "q"]);
        for url in &urls {
            wrapper = wrapper.args(["-r", url.as_str()]);
        }
        wrapper
    };
    let out = quorum().run();
    out.assert_code(0);
    let stdout = out.stdout_str();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with("2025-11-26T00:19:05.010Z acquired:"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("2025-11-26T00:19:05.400Z released:"),
        "{stdout}"
    );

    let running = quorum().args(["--follow", "--json"]).spawn();
    lines_printed(&running, 2);
    // On one node, then another event on two: only the second is shown.
    on(0, 600, "acquired", "t4");
    on(0, 700, "busy", "t5");
    on(2, 701, "busy", "t5");
    let lines = lines_printed(&running, 3);
    let event: Value = serde_json::from_str(&lines[2]).unwrap();
    assert_eq!(event["event"], "busy", "{lines:?}");
    assert_eq!(event["token"], "t5");
    assert_eq!(event["time_ms"], BASE_MS + 700);
    // Its second node: now shown.
    on(1, 650, "acquired", "t4");
    let lines = lines_printed(&running, 4);
    let event: Value = serde_json::from_str(&lines[3]).unwrap();
    assert_eq!(
        (event["event"].as_str(), event["token"].as_str()),
        (Some("acquired"), Some("t4"))
    );
    assert_eq!(
        event["time_ms"],
        BASE_MS + 600,
        "the earliest of the nodes' times"
    );
    running.signal(libc::SIGTERM);
    let out = running.wait();
    assert_eq!(out.stdout_str().lines().count(), 4, "{}", out.stdout_str());
}

/// End to end: real runs record their events (a run that succeeds, a busy one behind a
/// holder, a holder that fails with 3), and `history` shows them in order, with the
/// holder's fence, the exit statuses and who was busy.
#[test]
fn history_shows_what_real_runs_recorded_in_order() {
    let server = RedisServer::start();
    let dir = TempDir::new("history-e2e");
    server
        .cmd()
        .args(["-k", "e2e", "--", "true"])
        .run()
        .assert_code(0);
    let holder = Job::new(&dir, "h").exit_code(3).start(server.cmd().args([
        "-k",
        "e2e",
        "--label",
        "night\x1b run",
    ]));
    server
        .cmd()
        .args(["-k", "e2e", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    holder.let_go();
    holder.wait().assert_code(3);
    let fence = fence_of(&dir, "h");

    let out = server.cmd().args(["history", "-k", "e2e", "--json"]).run();
    out.assert_code(0);
    let events = json_lines(&out);
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["acquired", "released", "acquired", "busy", "released"],
        "{}",
        out.stdout_str()
    );
    assert_eq!(events[1]["exit_code"], 0);
    assert_eq!(events[2]["fence"], fence);
    assert_eq!(events[2]["label"], "night\x1b run");
    assert_eq!(events[4]["fence"], fence);
    assert_eq!(events[4]["exit_code"], 3);
    assert!(events[4]["held_ms"].is_u64(), "{}", events[4]);
    assert!(events[2]["waited_ms"].is_u64(), "{}", events[2]);
    assert_eq!(events[3]["program"], "true", "the busy run's command");
    let times: Vec<u64> = events
        .iter()
        .map(|e| e["time_ms"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|pair| pair[0] <= pair[1]), "{times:?}");

    let out = server.cmd().args(["history", "-k", "e2e", "-n", "3"]).run();
    out.assert_code(0);
    let stdout = out.stdout_str();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].contains(&format!(" acquired: fence {fence}, "))
            && lines[0].contains("(night\\x1b run)"),
        "{stdout}"
    );
    assert!(lines[1].contains(" busy: "), "{stdout}");
    assert!(
        lines[2].contains(&format!(" released: fence {fence}, "))
            && lines[2].contains(", exit 3, held "),
        "{stdout}"
    );
}

/// End to end over Redlock: a run over three servers records on each, and `history` over
/// the three shows each event once.
#[test]
fn history_of_real_runs_over_a_quorum_shows_each_event_once() {
    let nodes = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let with_nodes = |wrapper: Wrapper| {
        nodes.iter().fold(wrapper, |wrapper, node| {
            wrapper.args(["-r", node.url().as_str()])
        })
    };
    with_nodes(Wrapper::bare().args(["-k", "qe"]))
        .args(["--", "true"])
        .run()
        .assert_code(0);
    let out = with_nodes(Wrapper::bare().args(["history", "-k", "qe", "--json"])).run();
    out.assert_code(0);
    let names: Vec<String> = json_lines(&out)
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["acquired", "released"], "{}", out.stdout_str());
}

/// Redlock with one node of three down: the two others are read (a warning names the one
/// that is not) and what both recorded is shown; with two down, nothing can be told (125).
#[test]
fn history_of_a_quorum_with_nodes_down() {
    let mut nodes = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let stream = history_of("down");
    for node in &nodes[1..] {
        xadd(
            node,
            stream.as_bytes(),
            &id_at(0),
            &[("event", b"busy"), ("token", b"t")],
        );
    }
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let quorum = || {
        urls.iter()
            .fold(Wrapper::bare().args(["history", "-k", "down"]), |w, url| {
                w.args(["-r", url.as_str()])
            })
    };
    nodes[0].stop();
    let out = quorum().run();
    out.assert_code(0)
        .assert_stderr_contains("could not read the history of redlock:down on")
        .assert_stderr_prefixed();
    assert_eq!(out.stdout_str(), "2025-11-26T00:19:05.000Z busy\n");
    nodes[1].stop();
    let out = quorum().run();
    out.assert_code(125)
        .assert_stderr_contains("too few of the 3 Redis nodes answered");
    assert_eq!(out.stdout_str(), "");
}

/// A Redis Cluster: the history is read from the master of the lock's slot, whichever node
/// the URL names, and followed there.
#[test]
fn history_on_a_cluster_is_read_from_the_locks_master() {
    let cluster = crate::support::deployments::Cluster::start();
    let stream = history_of("cl");
    let owner = cluster.owner_of(&stream);
    assert_ne!(owner, 0, "the URL's node is not the lock's master");
    let owner = &cluster.nodes[owner];
    owner.query::<String>(&["XADD", &stream, &id_at(0), "event", "busy", "token", "t"]);
    let out = cluster.cmd().args(["history", "-k", "cl"]).run();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "2025-11-26T00:19:05.000Z busy\n");

    let running = cluster
        .cmd()
        .args(["history", "-k", "cl", "--follow"])
        .spawn();
    lines_printed(&running, 1);
    owner.query::<String>(&["XADD", &stream, "*", "event", "timeout", "token", "u"]);
    let lines = lines_printed(&running, 2);
    assert!(lines[1].ends_with(" timeout"), "{lines:?}");
}
