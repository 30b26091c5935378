//! `metrics` (issue 23): every lock's counters in the Prometheus text format, read by a
//! strict parser (`support::exposition`), with values as seeded per the data model; odd
//! key names; Redis unreachable; a Redlock quorum's majority values. And `status`'s last
//! success and consecutive skips.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

fn metrics(server: &RedisServer) -> Exposition {
    let out = server.cmd().arg("metrics").run();
    out.assert_code(0).assert_stderr_prefixed();
    Exposition::parse(&out.stdout_str())
}

/// Every counter a run keeps, seeded, comes out under its name in base units; a lock
/// without counters but held shows its holder; a free one shows nothing more.
#[test]
fn seeded_counters_come_out_in_base_units() {
    let server = RedisServer::start();
    let last_success = server.server_ms() - 3_600_000;
    let fields = [
        ("acquired", 5),
        ("busy", 2),
        ("timeout", 1),
        ("superseded", 3),
        ("already_done", 4),
        ("lost", 1),
        ("expired", 2),
        ("wait_ms_sum", 1500),
        ("wait_count", 5),
        ("hold_ms_sum", 2_250),
        ("hold_count", 4),
        ("skips", 3),
        ("last_success_ms", last_success),
    ];
    let fields: Vec<(&str, String)> = fields.iter().map(|(f, v)| (*f, v.to_string())).collect();
    server.seed_stats("job", &fields);
    server.seed_holder("job", "web-3", 4242, Duration::from_secs(120));
    server.query::<i64>(&["ZADD", "{redlock:job}:queue", "1", "a", "2", "b"]);
    // A holder that ended without a release, not found yet: its slot is free.
    server.seed_stats(
        "crashed",
        &[
            ("expired", "1".into()),
            ("slot:1", "5 {\"token\":\"x\"}".into()),
            // Fields that are no holder's slot (another client's) count for nothing.
            ("slot:0", "5 x".into()),
            ("slot:x", "5 x".into()),
        ],
    );
    // A holder that records nothing (an older version): held, no counters.
    server.set(
        "redlock:plain",
        "{\"token\":\"p\",\"host\":\"h\",\"pid\":1,\"since_ms\":1}",
    );
    // Another client's value under the prefix: held, by whom and since when unknown.
    server.set("redlock:foreign", "12");

    let m = metrics(&server);
    let job = [("key", "job")];
    let v = |name: &str, labels: &[(&str, &str)]| {
        m.value(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in {m:#?}"))
    };
    assert_eq!(v("redlock_run_acquired_total", &job), 5.0);
    for (reason, count) in [
        ("busy", 2.0),
        ("timeout", 1.0),
        ("superseded", 3.0),
        ("already_done", 4.0),
    ] {
        assert_eq!(
            v(
                "redlock_run_not_acquired_total",
                &[("key", "job"), ("reason", reason)]
            ),
            count
        );
    }
    assert_eq!(v("redlock_run_lost_total", &job), 1.0);
    assert_eq!(v("redlock_run_expired_total", &job), 2.0);
    assert_eq!(v("redlock_run_wait_seconds_sum", &job), 1.5);
    assert_eq!(v("redlock_run_wait_seconds_count", &job), 5.0);
    assert_eq!(v("redlock_run_hold_seconds_sum", &job), 2.25);
    assert_eq!(v("redlock_run_hold_seconds_count", &job), 4.0);
    assert_eq!(v("redlock_run_holders", &job), 1.0);
    assert_eq!(v("redlock_run_waiters", &job), 2.0);
    let age = v("redlock_run_holder_age_seconds", &job);
    assert!(
        (120.0..120.0 + RUN_TIMEOUT.as_secs_f64()).contains(&age),
        "{age}"
    );
    assert_eq!(
        v("redlock_run_last_success_timestamp_seconds", &job),
        last_success as f64 / 1000.0
    );
    assert_eq!(v("redlock_run_consecutive_skips", &job), 3.0);
    assert_eq!(
        m.family("redlock_run_wait_seconds").unwrap().kind,
        "summary"
    );

    // The stale slot counts as expired; nobody holds the lock, so no age.
    let crashed = [("key", "crashed")];
    assert_eq!(v("redlock_run_expired_total", &crashed), 2.0);
    assert_eq!(v("redlock_run_holders", &crashed), 0.0);
    assert_eq!(m.value("redlock_run_holder_age_seconds", &crashed), None);
    assert_eq!(
        m.value("redlock_run_last_success_timestamp_seconds", &crashed),
        None
    );

    let plain = [("key", "plain")];
    assert_eq!(v("redlock_run_holders", &plain), 1.0);
    assert_eq!(v("redlock_run_acquired_total", &plain), 0.0);
    assert!(v("redlock_run_holder_age_seconds", &plain) > 1_000_000.0);

    let foreign = [("key", "foreign")];
    assert_eq!(v("redlock_run_holders", &foreign), 1.0);
    assert_eq!(m.value("redlock_run_holder_age_seconds", &foreign), None);

    let keys = m.keys("redlock_run_acquired_total");
    assert_eq!(
        keys,
        ["crashed", "foreign", "job", "plain"]
            .map(String::from)
            .into(),
        "{m:#?}"
    );
    // Every family is there, each lock once in each family that is always written.
    for family in [
        "redlock_run_acquired_total",
        "redlock_run_lost_total",
        "redlock_run_expired_total",
        "redlock_run_holders",
        "redlock_run_waiters",
        "redlock_run_consecutive_skips",
    ] {
        assert_eq!(m.family(family).unwrap().samples.len(), 4, "{family}");
    }
}

/// Names with quotes, backslashes, line feeds, braces, UTF-8 and bytes that are not UTF-8
/// all parse, each its own series, valid names exactly as given to -k.
#[test]
fn odd_key_names_make_valid_distinct_series() {
    let server = RedisServer::start();
    let names: [&[u8]; 9] = [
        b"quo\"te",
        b"back\\slash",
        b"line\nfeed",
        b"{brace}",
        b"x{t}y",
        "z\u{fc}rich \u{202e}".as_bytes(),
        b"\xff\xfe",
        b"\\xff\xfe",
        b"tab\there",
    ];
    let mut con = server.connection();
    for (at, name) in names.iter().enumerate() {
        let key = [b"redlock:".as_slice(), name].concat();
        // The documented layout: `{K}:stats`, or `K:stats` when K has a hash tag.
        let tagged = name.iter().position(|&b| b == b'{').is_some_and(|open| {
            name[open + 1..]
                .iter()
                .position(|&b| b == b'}')
                .is_some_and(|len| len > 0)
        });
        let stats = if tagged {
            [key.as_slice(), b":stats"].concat()
        } else {
            [b"{".as_slice(), &key, b"}:stats"].concat()
        };
        redis::cmd("HSET")
            .arg(&stats)
            .arg("acquired")
            .arg(at + 1)
            .query::<i64>(&mut con)
            .unwrap();
    }
    let m = metrics(&server);
    let samples = &m.family("redlock_run_acquired_total").unwrap().samples;
    assert_eq!(samples.len(), names.len(), "{m:#?}");
    for (at, name) in names.iter().enumerate() {
        let value = (at + 1) as f64;
        let sample = samples
            .iter()
            .find(|s| s.value == value)
            .unwrap_or_else(|| panic!("no sample for {name:?}: {samples:#?}"));
        match std::str::from_utf8(name) {
            Ok(text) => {
                assert_eq!(sample.labels["key"], text);
                assert!(!sample.labels.contains_key("key_escaped"));
            }
            Err(_) => assert_eq!(sample.labels["key_escaped"], "true", "{sample:?}"),
        }
    }
    assert_eq!(
        samples
            .iter()
            .find(|s| s.value == 7.0)
            .map(|s| s.labels["key"].clone()),
        Some("\\xff\\xfe".to_string())
    );
}

/// Redis unreachable: 125, a prefixed message, nothing on stdout (a textfile written
/// through a rename keeps its last content). An empty prefix is refused.
#[test]
fn metrics_fail_with_125_and_print_nothing() {
    let out = Wrapper::new(&format!("redis://127.0.0.1:{}", free_port()))
        .arg("metrics")
        .run();
    out.assert_code(125).assert_stderr_prefixed();
    assert!(out.stdout.is_empty(), "{}", out.stdout_str());

    let server = RedisServer::start();
    let out = server.cmd().args(["metrics", "--prefix", ""]).run();
    out.assert_code(125).assert_stderr_contains("--prefix");
    assert!(out.stdout.is_empty());
}

/// Counters of another type are skipped with a warning naming the key; the others and the
/// lock itself still show.
#[test]
fn counters_of_another_type_are_skipped_with_a_warning() {
    let server = RedisServer::start();
    server.seed_holder("wrong", "h", 7, Duration::ZERO);
    server.del(&stats_key("wrong"));
    server.query::<i64>(&["RPUSH", &stats_key("wrong"), "x"]);
    server.seed_stats(
        "fine",
        &[("acquired", "2".into()), ("skips", "nonsense".into())],
    );
    let out = server.cmd().arg("metrics").run();
    out.assert_code(0)
        .assert_stderr_contains("{redlock:wrong}:stats is a list")
        .assert_stderr_contains("skips");
    let m = Exposition::parse(&out.stdout_str());
    assert_eq!(
        m.value("redlock_run_holders", &[("key", "wrong")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("redlock_run_acquired_total", &[("key", "fine")]),
        Some(2.0)
    );
    assert_eq!(
        m.value("redlock_run_consecutive_skips", &[("key", "fine")]),
        Some(0.0)
    );
}

/// Redlock: each value is the highest that a majority of the nodes reached; with a node
/// down, the others still decide.
#[test]
fn a_quorum_shows_what_a_majority_reached() {
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for (node, (acquired, skips)) in nodes.iter().zip([(7, 1), (5, 4), (6, 3)]) {
        node.seed_stats(
            "q",
            &[
                ("acquired", acquired.to_string()),
                ("skips", skips.to_string()),
            ],
        );
    }
    let run = |nodes: &[RedisServer]| {
        let mut wrapper = Wrapper::bare().arg("metrics");
        for node in nodes {
            wrapper = wrapper.args(["-r", &node.url()]);
        }
        wrapper.run()
    };
    let out = run(&nodes);
    out.assert_code(0);
    let m = Exposition::parse(&out.stdout_str());
    assert_eq!(
        m.value("redlock_run_acquired_total", &[("key", "q")]),
        Some(6.0)
    );
    assert_eq!(
        m.value("redlock_run_consecutive_skips", &[("key", "q")]),
        Some(3.0)
    );

    nodes[0].stop();
    let out = run(&nodes);
    out.assert_code(0)
        .assert_stderr_contains("cannot list the locks");
    let m = Exposition::parse(&out.stdout_str());
    assert_eq!(
        m.value("redlock_run_acquired_total", &[("key", "q")]),
        Some(5.0)
    );
    assert_eq!(
        m.value("redlock_run_consecutive_skips", &[("key", "q")]),
        Some(3.0)
    );

    nodes[1].stop();
    run(&nodes).assert_code(125);
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.stdout_str()))
}

/// `status` shows the last success and the consecutive skips, in text (a line, when there
/// was a success or a skip) and JSON (when the lock has counters at all).
#[test]
fn status_shows_the_last_success_and_the_skips() {
    let server = RedisServer::start();
    let at = server.server_ms() - 300_000;
    server.seed_stats(
        "s",
        &[("last_success_ms", at.to_string()), ("skips", "2".into())],
    );
    let out = server.cmd().args(["status", "-k", "s"]).run();
    out.assert_code(1);
    let text = out.stdout_str();
    let line = text.lines().nth(1).unwrap_or_default();
    assert!(
        line.starts_with("last success 20")
            && line.contains("(5m")
            && line.ends_with("ago), 2 consecutive skips"),
        "{text}"
    );
    let json = json_of(&server.cmd().args(["status", "-k", "s", "--json"]).run());
    assert_eq!(json["last_success_ms"], at);
    assert_eq!(json["consecutive_skips"], 2);

    server.seed_stats("never", &[("busy", "1".into()), ("skips", "1".into())]);
    let out = server.cmd().args(["status", "-k", "never"]).run();
    out.assert_stdout_contains("no run has succeeded yet, 1 consecutive skip\n");

    let out = server.cmd().args(["status", "-k", "none"]).run();
    out.assert_code(1);
    assert_eq!(out.stdout_str(), "redlock:none is free\n");
    let json = json_of(&server.cmd().args(["status", "-k", "none", "--json"]).run());
    assert!(json.get("last_success_ms").is_none() && json.get("consecutive_skips").is_none());

    // A last success past year 9999 (not a run's: RFC 3339 cannot write it) is said to be
    // out of range, without a panic.
    server.seed_stats(
        "far",
        &[
            ("last_success_ms", "99999999999999999".into()),
            ("skips", "1".into()),
        ],
    );
    let out = server.cmd().args(["status", "-k", "far"]).run();
    out.assert_code(1)
        .assert_stdout_contains("last success (a time out of range)")
        .assert_stderr_lacks("panicked");

    // Counters with nothing to say (a first run under way): no line; JSON says so.
    server.seed_stats("first", &[("acquired", "1".into())]);
    let out = server.cmd().args(["status", "-k", "first"]).run();
    assert_eq!(out.stdout_str(), "redlock:first is free\n");
    let json = json_of(&server.cmd().args(["status", "-k", "first", "--json"]).run());
    assert!(json["last_success_ms"].is_null(), "{json}");
    assert_eq!(json["consecutive_skips"], 0);
}

/// End to end: real runs of each outcome move the counters that `metrics`, `check` and
/// `status` show, from nothing to what each outcome adds; a holder killed with `kill -9`
/// counts as expired as soon as its lease has run out, and still once (not twice) after
/// the next run has found it.
#[test]
fn real_runs_of_each_outcome_move_the_counters() {
    let server = RedisServer::start();
    let dir = TempDir::new("e2e");
    let run = |args: &[&str]| server.cmd().args(["-k", "e2e"]).args(args).run();
    let snapshot = || metrics(&server);
    let value = |m: &Exposition, name: &str, reason: Option<&str>| {
        let mut labels = vec![("key", "e2e")];
        labels.extend(reason.map(|r| ("reason", r)));
        m.value(name, &labels)
    };
    let count = |m: &Exposition, name: &str| value(m, name, None).unwrap_or(-1.0);

    let before = snapshot();
    assert!(
        before.keys("redlock_run_acquired_total").is_empty(),
        "{before:#?}"
    );
    let (code, line) = plugin(&server, &["--max-since-success", "1h"]);
    assert_eq!(code, 2, "{line}");

    // A success, then a failure: both acquired and held; only the first succeeded.
    run(&["--", "true"]).assert_code(0);
    let m = snapshot();
    assert_eq!(count(&m, "redlock_run_acquired_total"), 1.0);
    assert_eq!(count(&m, "redlock_run_hold_seconds_count"), 1.0);
    assert_eq!(count(&m, "redlock_run_wait_seconds_count"), 1.0);
    assert_eq!(count(&m, "redlock_run_holders"), 0.0);
    let success = count(&m, "redlock_run_last_success_timestamp_seconds");
    assert!(success > 1.7e9, "{m:#?}");
    run(&["--", "sh", "-c", "exit 3"]).assert_code(3);
    let m = snapshot();
    assert_eq!(count(&m, "redlock_run_acquired_total"), 2.0);
    assert_eq!(count(&m, "redlock_run_hold_seconds_count"), 2.0);
    assert_eq!(
        count(&m, "redlock_run_last_success_timestamp_seconds"),
        success
    );
    let (code, line) = plugin(&server, &["--max-since-success", "1h"]);
    assert_eq!(code, 0, "{line}");

    // Held: busy (--no-wait) and a timed-out wait are skips; a waiter is queued.
    let holder = hold(server.cmd().args(["-k", "e2e"]), &dir, "holder");
    run(&["--no-wait", "--", "true"]).assert_code(75);
    run(&["--wait", "300ms", "--", "true"]).assert_code(75);
    let waiter = server.cmd().args(["-k", "e2e", "--", "true"]).spawn();
    wait_until(Duration::from_secs(15), "the waiter to queue", || {
        server.zcard("{redlock:e2e}:queue") == 1
    });
    let m = snapshot();
    assert_eq!(count(&m, "redlock_run_holders"), 1.0);
    assert_eq!(count(&m, "redlock_run_waiters"), 1.0);
    assert!(count(&m, "redlock_run_holder_age_seconds") >= 0.0, "{m:#?}");
    assert_eq!(
        value(&m, "redlock_run_not_acquired_total", Some("busy")),
        Some(1.0)
    );
    assert_eq!(
        value(&m, "redlock_run_not_acquired_total", Some("timeout")),
        Some(1.0)
    );
    assert_eq!(count(&m, "redlock_run_consecutive_skips"), 2.0);
    let (code, line) = plugin(&server, &["--max-skips", "2", "--max-held", "1h"]);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains(&format!(":{} for ", holder.pid())), "{line}");
    let status = server.cmd().args(["status", "-k", "e2e"]).run();
    status
        .assert_code(0)
        .assert_stdout_contains("ago), 2 consecutive skips");

    // The holder and then the waiter succeed: the skips start again.
    holder.let_go();
    holder.wait().assert_code(0);
    waiter.wait().assert_code(0);
    let m = snapshot();
    assert_eq!(count(&m, "redlock_run_acquired_total"), 4.0);
    assert_eq!(count(&m, "redlock_run_consecutive_skips"), 0.0);
    assert_eq!(count(&m, "redlock_run_waiters"), 0.0);
    assert_eq!(
        m.value("redlock_run_holder_age_seconds", &[("key", "e2e")]),
        None
    );

    // --once: the second run finds the work done.
    run(&["--once", "id-1", "--", "true"]).assert_code(0);
    run(&["--once", "id-1", "--", "true"]).assert_code(0);
    let m = snapshot();
    assert_eq!(
        value(&m, "redlock_run_not_acquired_total", Some("already_done")),
        Some(1.0)
    );
    // Work found already done is not a skip.
    assert_eq!(count(&m, "redlock_run_consecutive_skips"), 0.0);

    // Lost: the key deleted under a holder that renews often.
    let holder = hold(
        server.cmd().args(["-k", "e2e", "--ttl", "1s"]),
        &dir,
        "lost",
    );
    server.del("redlock:e2e");
    holder.wait().assert_code(76);
    assert_eq!(count(&snapshot(), "redlock_run_lost_total"), 1.0);

    // Expired: a holder killed with kill -9 leaves its lease to run out.
    let holder = hold(
        server.cmd().args(["-k", "e2e", "--ttl", "1s"]),
        &dir,
        "killed",
    );
    let m = snapshot();
    assert_eq!(count(&m, "redlock_run_expired_total"), 0.0);
    signal(holder.pid(), libc::SIGKILL);
    wait_until(
        Duration::from_secs(15),
        "the killed holder's lease to run out",
        || !server.exists("redlock:e2e"),
    );
    let m = snapshot();
    assert_eq!(count(&m, "redlock_run_expired_total"), 1.0, "{m:#?}");
    assert_eq!(count(&m, "redlock_run_holders"), 0.0);
    let acquired = count(&m, "redlock_run_acquired_total");
    run(&["--", "true"]).assert_code(0);
    let m = snapshot();
    assert_eq!(count(&m, "redlock_run_expired_total"), 1.0, "{m:#?}");
    assert_eq!(count(&m, "redlock_run_acquired_total"), acquired + 1.0);
    drop(holder);
}

/// `check -k e2e ARGS`: its exit code and line.
fn plugin(server: &RedisServer, args: &[&str]) -> (i32, String) {
    let out = server.cmd().args(["check", "-k", "e2e"]).args(args).run();
    (out.status.code().unwrap_or(-1), out.stdout_str())
}

/// End to end over a Redlock quorum of three: real runs count on every node, and one node's
/// stray count does not move what `metrics` and `check` show.
#[test]
fn real_runs_over_a_quorum_count_by_majority() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = TempDir::new("e2e-quorum");
    let with_nodes = |wrapper: Wrapper| {
        nodes
            .iter()
            .fold(wrapper, |w, node| w.args(["-r", &node.url()]))
    };
    // Options go before a run's `--`, and after a subcommand's name.
    let run = |args: &[&str]| with_nodes(Wrapper::bare()).args(args).run();
    let admin = |args: &[&str]| with_nodes(Wrapper::bare().args(args)).run();
    run(&["-k", "rq", "--", "true"]).assert_code(0);
    run(&["-k", "rq", "--", "true"]).assert_code(0);
    let holder = hold(with_nodes(Wrapper::bare().args(["-k", "rq"])), &dir, "h");
    run(&["-k", "rq", "--no-wait", "--", "true"]).assert_code(75);
    nodes[0].hset(&stats_key("rq"), "acquired", "100");
    nodes[0].hset(&stats_key("rq"), "skips", "100");

    let out = admin(&["metrics"]);
    out.assert_code(0);
    let m = Exposition::parse(&out.stdout_str());
    let key = [("key", "rq")];
    assert_eq!(m.value("redlock_run_acquired_total", &key), Some(3.0));
    assert_eq!(m.value("redlock_run_consecutive_skips", &key), Some(1.0));
    assert_eq!(m.value("redlock_run_holders", &key), Some(1.0));
    assert_eq!(
        m.value(
            "redlock_run_not_acquired_total",
            &[("key", "rq"), ("reason", "busy")]
        ),
        Some(1.0)
    );
    let out = admin(&["check", "-k", "rq", "--max-skips", "1"]);
    out.assert_code(2)
        .assert_stdout_contains("1 consecutive skip (CRITICAL: at 1)");
    holder.let_go();
    holder.wait().assert_code(0);
    let out = admin(&[
        "check",
        "-k",
        "rq",
        "--max-skips",
        "1",
        "--max-since-success",
        "1h",
    ]);
    out.assert_code(0)
        .assert_stdout_contains("REDLOCK OK - redlock:rq: free, 0 consecutive skips");
}
