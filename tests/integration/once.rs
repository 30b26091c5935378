//! Work done once (issue 22, §3): `--once ID` runs the command only if no run of the key
//! succeeded with that ID (within `--remember`); `--once-per DUR` only if no successful
//! `--once-per` run arrived within DUR/2 of this one, by the Redis server's clock. A run
//! that finds the work done exits 0 without running its command, with one line and the
//! `already_done` event. Over Redlock, a majority of the nodes decides.
//!
//! What this module does not own: the exit-code table (`exit_codes`, `docs`), waking
//! waiters in general (`waiters`).

use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// `--once`'s record of lock `name` (documented layout: `{K}:done`).
fn done_of(name: &str) -> String {
    format!("{{{PREFIX}{name}}}:done")
}

/// `--once-per`'s record of lock `name` (documented layout: `{K}:done:per`).
fn done_per_of(name: &str) -> String {
    format!("{{{PREFIX}{name}}}:done:per")
}

/// The server's clock, in ms since the epoch.
fn server_ms(server: &RedisServer) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.connection()).unwrap();
    seconds * 1000 + micros / 1000
}

/// A command that appends a line to `log` (how many times the work was done).
fn note(log: &Path) -> String {
    format!("echo done >> '{}'", log.display())
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn five_runs_of_one_id_run_the_command_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("once-five");
    let log = dir.join("log");
    // The work takes a while, so that the others arrive while it holds the lock, and some
    // while it is free again.
    let work = format!("sleep 0.3; {}", note(&log));
    let runs: Vec<Running> = (0..5)
        .map(|_| {
            server
                .cmd()
                .args(["-k", "migrate", "--once", "v1.2.3", "--shell", &work])
                .spawn()
        })
        .collect();
    let outs: Vec<Output> = runs.into_iter().map(Running::wait).collect();
    for out in &outs {
        out.assert_code(0);
    }
    assert_eq!(lines(&log), 1, "the work ran more than once: {outs:#?}");
    let skipped: Vec<&Output> = outs
        .iter()
        .filter(|out| out.stderr.contains("already done (--once v1.2.3) at "))
        .collect();
    assert_eq!(skipped.len(), 4, "{outs:#?}");
    for out in skipped {
        out.assert_stderr_contains("not running the command");
        // Woken in turn (each one that finds the work done hands its wake-up on), not left
        // to look again when the 30s lease would have run out.
        assert!(out.elapsed < Duration::from_secs(5), "{out:#?}");
    }
}

#[test]
fn a_failed_run_records_nothing_and_the_next_one_runs() {
    let server = RedisServer::start();
    let dir = TempDir::new("once-retry");
    let log = dir.join("log");
    let tried = dir.join("tried");
    // Fails the first time, succeeds after.
    let work = format!(
        "if [ -e '{tried}' ]; then {note}; else touch '{tried}'; sleep 0.2; exit 3; fi",
        tried = tried.display(),
        note = note(&log)
    );
    let runs: Vec<Running> = (0..3)
        .map(|_| {
            server
                .cmd()
                .args(["-k", "report", "--once", "2026-11-25", "--shell", &work])
                .spawn()
        })
        .collect();
    let mut codes: Vec<i32> = runs
        .into_iter()
        .map(|run| run.wait().status.code().unwrap())
        .collect();
    codes.sort();
    assert_eq!(codes, [0, 0, 3]);
    assert_eq!(lines(&log), 1);

    // Killed by a signal, or the lock lost: nothing recorded either.
    server
        .cmd()
        .args([
            "-k",
            "report",
            "--once",
            "signal",
            "--shell",
            "kill -TERM $$",
        ])
        .run()
        .assert_code(128 + 15);
    let lose = format!(
        "redis-cli -p {} DEL {PREFIX}report >/dev/null; exit 0",
        server.port()
    );
    require(
        "redis-cli",
        "a test deletes a held lock",
        "apt-get install redis-tools",
    );
    server
        .cmd()
        .args(["-k", "report", "--once", "lost", "--shell", &lose])
        .run()
        .assert_code(76);
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(done_of("report"))
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(fields, ["2026-11-25"]);
    for id in ["signal", "lost"] {
        server
            .cmd()
            .args(["-k", "report", "--once", id, "--shell", &note(&log)])
            .run()
            .assert_code(0)
            .assert_stderr_lacks("already done");
    }
    assert_eq!(lines(&log), 3);
}

#[test]
fn min_hold_and_max_runtime() {
    let server = RedisServer::start();
    let dir = TempDir::new("once-hold");
    let log = dir.join("log");
    // Recorded with a release that keeps the key until the --min-hold mark: a run that
    // arrives meanwhile finds the work done rather than waiting for the mark.
    let run = |extra: &[&str]| {
        server
            .cmd()
            .args(["-k", "held", "--once", "h"])
            .args(extra)
            .args(["--shell", &note(&log)])
            .run()
    };
    run(&["--min-hold", "20s"]).assert_code(0);
    assert!(server.exists(&format!("{PREFIX}held")));
    let out = run(&[]);
    out.assert_code(0).assert_stderr_contains("already done");
    assert!(out.elapsed < Duration::from_secs(10), "{out:#?}");
    assert_eq!(lines(&log), 1);
    // --max-runtime ran out: nothing recorded, the next run does the work.
    server
        .cmd()
        .args([
            "-k",
            "slow",
            "--once",
            "s",
            "--max-runtime",
            "1s",
            "--kill-after",
            "1s",
        ])
        .args(["--", "sleep", "30"])
        .run()
        .assert_code(124);
    server
        .cmd()
        .args(["-k", "slow", "--once", "s", "--shell", &note(&log)])
        .run()
        .assert_code(0)
        .assert_stderr_lacks("already done");
    assert_eq!(lines(&log), 2);
}

#[test]
fn another_id_or_no_once_runs_and_the_line_names_who_did_it() {
    let server = RedisServer::start();
    let dir = TempDir::new("once-ids");
    let log = dir.join("log");
    let run = |extra: &[&str]| {
        server
            .cmd()
            .args(["-k", "deploy", "--label", "deploy of v1"])
            .args(extra)
            .args(["--shell", &note(&log)])
            .run()
    };
    run(&["--once", "v1"]).assert_code(0);
    run(&["--once", "v2"]).assert_code(0);
    run(&[]).assert_code(0);
    assert_eq!(lines(&log), 3);
    let out = run(&["--once", "v1", "--log-format", "json"]);
    out.assert_code(0);
    assert_eq!(lines(&log), 3);
    let event: serde_json::Value = out
        .stderr
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .find(|event: &serde_json::Value| event["event"] == "already_done")
        .unwrap_or_else(|| panic!("no already_done event: {}", out.stderr));
    assert_eq!(event["exit_code"], 0);
    let message = event["message"].as_str().unwrap();
    assert!(message.contains("(deploy of v1)"), "{message}");
    assert!(event["done_at_ms"].as_u64().unwrap() > 0);
    // -q: no line at all.
    let out = run(&["--once", "v1", "-q"]);
    out.assert_code(0);
    assert_eq!(out.stderr, "");
}

#[test]
fn the_record_lasts_remember() {
    let server = RedisServer::start();
    let dir = TempDir::new("once-remember");
    let log = dir.join("log");
    let run = || {
        server
            .cmd()
            .args(["-k", "nightly", "--once", "n", "--remember", "1s"])
            .args(["--shell", &note(&log)])
            .run()
    };
    run().assert_code(0);
    run().assert_code(0).assert_stderr_contains("already done");
    assert_eq!(lines(&log), 1);
    let recorded: String = redis::cmd("HGET")
        .arg(done_of("nightly"))
        .arg("n")
        .query(&mut server.connection())
        .unwrap();
    let at: u64 = recorded.split(' ').next().unwrap().parse().unwrap();
    wait_until(Duration::from_secs(10), "--remember to pass", || {
        server_ms(&server) > at + 1100
    });
    run().assert_code(0).assert_stderr_lacks("already done");
    assert_eq!(lines(&log), 2);
}

/// Hosts with skewed clocks cannot be simulated here: redlock-run is linked statically, so
/// `faketime` (LD_PRELOAD) cannot reach its clock, and redis-server does not start under
/// libfaketime. What is shown instead: the arrival recorded and judged is the server's
/// TIME at the run's first attempt, and the decision follows the server's clock alone.
#[test]
fn once_per_is_judged_by_the_server_clock() {
    let server = RedisServer::start();
    let dir = TempDir::new("once-per");
    let log = dir.join("log");
    let run = || {
        server
            .cmd()
            .args(["-k", "cron", "--once-per", "4s", "--shell", &note(&log)])
            .run()
    };
    let before = server_ms(&server);
    run().assert_code(0);
    let after = server_ms(&server);
    // The same firing from another host: skipped.
    run()
        .assert_code(0)
        .assert_stderr_contains("already done (--once-per) at ");
    assert_eq!(lines(&log), 1);
    let recorded: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(done_per_of("cron"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let arrival = recorded[0].1;
    assert!(
        (before..=after).contains(&arrival),
        "the arrival recorded is not the server's TIME: {before} <= {arrival} <= {after}"
    );
    // A record whose arrival lies DUR/2 or more from this run's, by the server's clock, is
    // another firing's: one written 2s ahead of the server's now does not count (nor
    // would one 2s behind, which is the next check).
    let _: () = redis::cmd("ZADD")
        .arg(done_per_of("later"))
        .arg(server_ms(&server) + 2500)
        .arg("0 {\"token\":\"t\",\"host\":\"ahead\"}")
        .query(&mut server.connection())
        .unwrap();
    server
        .cmd()
        .args(["-k", "later", "--once-per", "4s", "--shell", &note(&log)])
        .run()
        .assert_code(0)
        .assert_stderr_lacks("already done");
    assert_eq!(lines(&log), 2);
    // The next firing, more than DUR/2 later by the server's clock, runs.
    wait_until(Duration::from_secs(10), "half a period to pass", || {
        server_ms(&server) > arrival + 2100
    });
    run().assert_code(0).assert_stderr_lacks("already done");
    assert_eq!(lines(&log), 3);
}

#[test]
fn redlock_once_per_over_nodes_judges_by_each_nodes_clock() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = TempDir::new("once-per-redlock");
    let log = dir.join("log");
    let run = || {
        quorum(&nodes)
            .args(["-k", "cron", "--once-per", "1h", "--shell", &note(&log)])
            .run()
    };
    run().assert_code(0);
    run()
        .assert_code(0)
        .assert_stderr_contains("already done (--once-per)");
    assert_eq!(lines(&log), 1);
    let mut stamped = 0;
    for node in &nodes {
        let scores: Vec<(String, u64)> = redis::cmd("ZRANGE")
            .arg(done_per_of("cron"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut node.connection())
            .unwrap();
        stamped += scores.len();
    }
    assert!(stamped >= 2, "recorded on fewer than a majority");
}

#[test]
fn bad_once_input_is_refused() {
    let server = RedisServer::start();
    let long = "x".repeat(257);
    let cases: [(&[&str], &str); 7] = [
        (&["--once", ""], "an ID is 1 to 256 bytes of UTF-8 text"),
        (&["--once", &long], "it is 257 bytes long"),
        (&["--once-per", "soon"], "invalid --once-per"),
        (&["--once-per", "0.5s"], "shorter than the minimum of 1s"),
        (&["--once", "a", "--remember", "0"], "invalid --remember"),
        (
            &["--remember", "1d"],
            "--remember needs --once or --once-per",
        ),
        (&["--once", "a", "--limit", "2"], "need --limit 1"),
    ];
    for (args, message) in cases {
        server
            .cmd()
            .args(["-k", "bad"])
            .args(args)
            .args(["--", "true"])
            .run()
            .assert_code(125)
            .assert_stderr_contains(message);
    }
    use std::os::unix::ffi::OsStrExt;
    server
        .cmd()
        .args(["-k", "bad", "--once"])
        .arg(std::ffi::OsStr::from_bytes(b"v\xff1"))
        .args(["--", "true"])
        .run()
        .assert_code(125)
        .assert_stderr_contains("not valid UTF-8; an ID is 1 to 256 bytes of UTF-8 text");
    server
        .cmd()
        .args([
            "-k",
            "bad",
            "--once-per",
            "1m",
            "--limit",
            "3",
            "--",
            "true",
        ])
        .run()
        .assert_code(125);
}

/// redlock-run over three nodes, each given with `-r`.
fn quorum(nodes: &[RedisServer]) -> Wrapper {
    Wrapper::bare().args(nodes.iter().flat_map(|node| ["-r".to_string(), node.url()]))
}

#[test]
fn redlock_five_runs_of_one_id_run_once_and_record_on_a_majority() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = TempDir::new("once-redlock");
    let log = dir.join("log");
    let work = format!("sleep 0.3; {}", note(&log));
    let runs: Vec<Running> = (0..5)
        .map(|_| {
            quorum(&nodes)
                .args(["-k", "migrate", "--once", "v7", "--shell", &work])
                .spawn()
        })
        .collect();
    for run in runs {
        run.wait().assert_code(0);
    }
    assert_eq!(lines(&log), 1);
    // Recorded with the release that held a majority (a node a contender had taken at
    // that moment may lack it).
    let recorded = nodes
        .iter()
        .filter(|node| {
            redis::cmd("HEXISTS")
                .arg(done_of("migrate"))
                .arg("v7")
                .query::<bool>(&mut node.connection())
                .unwrap()
        })
        .count();
    assert!(recorded >= 2, "recorded on {recorded} of 3 nodes");
}

#[test]
fn redlock_a_majority_decides_already_done() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = TempDir::new("once-majority");
    let log = dir.join("log");
    let record = |node: &RedisServer, id: &str| {
        let value = format!(
            "{} {{\"token\":\"t\",\"host\":\"elsewhere\"}}",
            server_ms(node)
        );
        let _: () = redis::cmd("HSET")
            .arg(done_of("job"))
            .arg(id)
            .arg(value)
            .query(&mut node.connection())
            .unwrap();
    };
    let run = |id: &str| {
        quorum(&nodes)
            .args(["-k", "job", "--once", id, "--shell", &note(&log)])
            .run()
    };
    // Recorded on one node of three: not done; the run does the work and records it.
    record(&nodes[0], "one");
    run("one")
        .assert_code(0)
        .assert_stderr_lacks("already done");
    assert_eq!(lines(&log), 1);
    // On two of three: done, by the majority's say.
    record(&nodes[1], "two");
    record(&nodes[2], "two");
    run("two")
        .assert_code(0)
        .assert_stderr_contains("already done (--once two) at ")
        .assert_stderr_contains("by elsewhere");
    assert_eq!(lines(&log), 1);
}

#[test]
fn cluster_once_and_once_per() {
    let cluster = crate::support::deployments::Cluster::start();
    let dir = TempDir::new("once-cluster");
    let log = dir.join("log");
    for flags in [["--once", "v1"], ["--once-per", "1h"]] {
        for _ in 0..2 {
            cluster
                .cmd()
                .args(["-k", "job"])
                .args(flags)
                .args(["--shell", &note(&log)])
                .run()
                .assert_code(0);
        }
    }
    assert_eq!(lines(&log), 2);
}

/// A record dated after year 9999 (or after now at all) was not written by a release,
/// which writes the server's time: it names no time, makes nothing done, and goes. Before,
/// formatting its date panicked (exit 101), and a future date made the ID done forever.
#[test]
fn a_record_dated_in_the_future_is_not_done_and_nothing_panics() {
    let server = RedisServer::start();
    let dir = TempDir::new("once-future");
    let log = dir.join("log");
    let mut redis = server.connection();
    let _: () = redis::cmd("HSET")
        .arg(done_of("job"))
        .arg("v9")
        .arg(r#"999999999999999 {"token":"x"}"#)
        .query(&mut redis)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(done_per_of("job"))
        .arg(server_ms(&server))
        .arg("253402300800000 junk")
        .query(&mut redis)
        .unwrap();
    for args in [["--once", "v9"], ["--once-per", "1h"]] {
        server
            .cmd()
            .args(["-k", "job"])
            .args(args)
            .args(["--shell", &note(&log)])
            .run()
            .assert_code(0)
            .assert_stderr_lacks("already done");
    }
    assert_eq!(lines(&log), 2);
    // What the two runs recorded is of now: the next ones find the work done.
    let recorded: String = redis::cmd("HGET")
        .arg(done_of("job"))
        .arg("v9")
        .query(&mut redis)
        .unwrap();
    let at: u64 = recorded.split(' ').next().unwrap().parse().unwrap();
    assert!(at <= server_ms(&server), "{recorded}");
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(done_per_of("job"))
        .arg(0)
        .arg(-1)
        .query(&mut redis)
        .unwrap();
    assert!(
        !members.iter().any(|m| m == "253402300800000 junk"),
        "{members:?}"
    );
    server
        .cmd()
        .args(["-k", "job", "--once", "v9", "--shell", &note(&log)])
        .run()
        .assert_code(0)
        .assert_stderr_contains("already done");
    assert_eq!(lines(&log), 2);
}

/// Another application's data of another type under a record's name: --once runs as if
/// nothing were done and leaves it alone, and a release never fails on it (before: every
/// run exited 125 WRONGTYPE, and one whose record key turned foreign while it ran kept the
/// lock until its TTL).
#[test]
fn a_record_key_of_another_type_neither_refuses_nor_blocks_the_release() {
    let server = RedisServer::start();
    let dir = TempDir::new("once-type");
    let log = dir.join("log");
    let mut redis = server.connection();
    let _: () = redis::cmd("SET")
        .arg(done_of("typed"))
        .arg("theirs")
        .query(&mut redis)
        .unwrap();
    server
        .cmd()
        .args(["-k", "typed", "--once", "a", "--shell", &note(&log)])
        .run()
        .assert_code(0)
        .assert_stderr_contains("{redlock:typed}:done on ")
        .assert_stderr_contains("is not a --once record redlock-run wrote");
    assert_eq!(lines(&log), 1);
    let theirs: String = redis::cmd("GET")
        .arg(done_of("typed"))
        .query(&mut redis)
        .unwrap();
    assert_eq!(theirs, "theirs");
    // The record key turns foreign while the run holds: its release still lets go.
    let started = dir.join("started");
    let go = dir.join("go");
    let work = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
        started.display(),
        go.display()
    );
    let run = server
        .cmd()
        .args([
            "-k",
            "typed2",
            "--once-per",
            "1h",
            "--ttl",
            "60s",
            "--shell",
            &work,
        ])
        .spawn();
    wait_until(Duration::from_secs(20), "the command to start", || {
        started.exists()
    });
    let _: () = redis::cmd("SET")
        .arg(done_per_of("typed2"))
        .arg("theirs")
        .query(&mut redis)
        .unwrap();
    std::fs::write(&go, "").unwrap();
    run.wait()
        .assert_code(0)
        .assert_stderr_contains("{redlock:typed2}:done:per on ")
        .assert_stderr_contains("the work was not recorded there");
    let held: i64 = redis::cmd("EXISTS")
        .arg(format!("{PREFIX}typed2"))
        .query(&mut redis)
        .unwrap();
    assert_eq!(held, 0, "the lock is still held after a successful run");
}

/// A run longer than --remember keeps its own --once-per record (before, its release pruned
/// it, and a run of the same firing that waited ran the work again); and --remember below
/// the --once-per DUR is refused.
#[test]
fn remember_never_prunes_a_runs_own_once_per_record() {
    let server = RedisServer::start();
    server
        .cmd()
        .args([
            "-k",
            "short",
            "--once-per",
            "1h",
            "--remember",
            "1s",
            "--",
            "true",
        ])
        .run()
        .assert_code(125)
        .assert_stderr_contains("--remember must be at least --once-per's DUR");
    let dir = TempDir::new("once-prune");
    let log = dir.join("log");
    let started = dir.join("started");
    let work = format!("touch '{}'; sleep 4.5; {}", started.display(), note(&log));
    let run = |work: &str| {
        server
            .cmd()
            .args([
                "-k",
                "long",
                "--once-per",
                "2s",
                "--remember",
                "2s",
                "--shell",
                work,
            ])
            .spawn()
    };
    let first = run(&work);
    wait_until(
        Duration::from_secs(20),
        "the first command to start",
        || started.exists(),
    );
    // The same firing (well within DUR/2 = 2s of the first's arrival), waiting meanwhile.
    let second = run(&note(&log));
    first.wait().assert_code(0);
    second
        .wait()
        .assert_code(0)
        .assert_stderr_contains("already done (--once-per)");
    assert_eq!(lines(&log), 1);
}

/// A command that redlock-run told to stop (it passed on a SIGTERM) did not finish its
/// work, even if it exits 0 on the signal: nothing is recorded, with `--stop-timeout` or
/// without, and the next run of the same ID runs the command.
#[test]
fn a_run_told_to_stop_records_nothing_even_when_it_exits_0() {
    let server = RedisServer::start();
    let dir = TempDir::new("once-stopped");
    let log = dir.join("log");
    let pid_file = dir.join("pid");
    // Exits 0 on SIGTERM, as a trap in a shell script often does. A loop of short sleeps,
    // not `sleep 30 & wait`: a shell runs a trap between commands, and a SIGTERM that came
    // just before `wait` began waited with it for the whole sleep (the wrapper then killed
    // the group at --stop-timeout: 143, seen under load).
    let work = format!(
        "trap 'exit 0' TERM; echo $$ > '{}'; while :; do sleep 0.1; done",
        pid_file.display()
    );
    for (id, extra) in [("v3", None), ("v4", Some("5s"))] {
        let _ = std::fs::remove_file(&pid_file);
        let mut args = vec!["-k", "job", "--once", id];
        if let Some(budget) = extra {
            args.extend(["--stop-timeout", budget]);
        }
        let mut wrapper = server.cmd().args(&args).args(["--shell", &work]).spawn();
        wrapper.read_pid(&pid_file);
        wrapper.signal(libc::SIGTERM);
        // Exit 0: the command's own status, which it chose on the signal.
        wrapper.wait_within(Duration::from_secs(15)).assert_code(0);
        let recorded: bool = redis::cmd("HEXISTS")
            .arg(done_of("job"))
            .arg(id)
            .query(&mut server.connection())
            .unwrap();
        assert!(
            !recorded,
            "--once {id} was recorded as done after a SIGTERM"
        );
        server
            .cmd()
            .args(["-k", "job", "--once", id, "--shell", &note(&log)])
            .run()
            .assert_code(0)
            .assert_stderr_lacks("already done");
    }
    assert_eq!(lines(&log), 2);
}

/// A record dated a little after the server's now was written by redlock-run all the same
/// when the server's clock went back since (an NTP step), or when it comes from a master
/// whose clock ran ahead (a Sentinel failover, a Cluster slot moved to another node): it
/// still counts as done. Before, it was taken for another tool's and removed, and the work
/// was done again. One dated past `--remember` from now is still not done (see above).
#[test]
fn a_record_written_by_a_clock_ahead_of_the_servers_still_counts() {
    let server = RedisServer::start();
    let dir = TempDir::new("once-clock-back");
    let log = dir.join("log");
    let mut redis = server.connection();
    let ahead = server_ms(&server) + 60_000;
    let record = format!(r#"{ahead} {{"token":"t","fence":7,"host":"web-3","pid":1}}"#);
    let _: () = redis::cmd("HSET")
        .arg(done_of("job"))
        .arg("v1")
        .arg(&record)
        .query(&mut redis)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(done_per_of("job"))
        .arg(ahead)
        .arg(&record)
        .query(&mut redis)
        .unwrap();
    for args in [["--once", "v1"], ["--once-per", "1h"]] {
        server
            .cmd()
            .args(["-k", "job"])
            .args(args)
            .args(["--shell", &note(&log)])
            .run()
            .assert_code(0)
            .assert_stderr_contains("already done")
            .assert_stderr_contains("by web-3");
    }
    assert_eq!(lines(&log), 0, "the work was done again");
    // With --remember shorter than the record is ahead, it is not redlock-run's: not done.
    server
        .cmd()
        .args(["-k", "job", "--once", "v1", "--remember", "30s"])
        .args(["--shell", &note(&log)])
        .run()
        .assert_code(0)
        .assert_stderr_lacks("already done");
    assert_eq!(lines(&log), 1);
}

/// How many `--once` IDs a lock keeps (docs/policies.md).
const ONCE_IDS_KEPT: usize = 1000;

/// Per-commit IDs under the minimal ACL user of docs/security.md (no `HLEN`, no
/// `HRANDFIELD`): `{K}:done` holds at most `ONCE_IDS_KEPT` IDs, the oldest recorded going
/// first, from `{K}:done` and from its order `{K}:done:ids` alike. Seeded with as many IDs
/// as are kept, recorded a moment ago one millisecond apart, as releases record them.
#[test]
fn once_ids_are_capped_under_the_minimal_acl() {
    let (server, url) = crate::acl::server_with_user(&crate::acl::minimal_rules(&[]));
    let done = done_of("c");
    let order = format!("{{{PREFIX}c}}:done:ids");
    let now = server_ms(&server);
    let holder = r#"{"token":"seeded","fence":1,"host":"h","pid":1,"program":"p","limit":1}"#;
    let mut hset = redis::cmd("HSET");
    let mut zadd = redis::cmd("ZADD");
    hset.arg(&done);
    zadd.arg(&order);
    for i in 0..ONCE_IDS_KEPT {
        let at = now - 60_000 + i as u64;
        hset.arg(format!("commit-{i}"))
            .arg(format!("{at} {holder}"));
        zadd.arg(at).arg(format!("commit-{i}"));
    }
    let _: () = hset.query(&mut server.connection()).unwrap();
    let _: () = zadd.query(&mut server.connection()).unwrap();
    let dir = TempDir::new("once-capped");
    let log = dir.join("log");
    Wrapper::new(&url)
        .args(["-k", "c", "--once", "commit-new", "--shell", &note(&log)])
        .run()
        .assert_code(0)
        .assert_stderr_lacks("warning");
    assert_eq!(lines(&log), 1);
    let kept: usize = redis::cmd("HLEN")
        .arg(&done)
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(kept, ONCE_IDS_KEPT);
    assert_eq!(server.zcard(&order), ONCE_IDS_KEPT as i64);
    assert_eq!(server.hget(&done, "commit-0"), None, "the oldest stays");
    assert!(server.hget(&done, "commit-1").is_some());
    assert!(server.hget(&done, "commit-new").is_some());
    assert!(server.pttl(&order) > 0, "{order} never expires");
    // The ID forgotten runs again; one kept does not.
    Wrapper::new(&url)
        .args(["-k", "c", "--once", "commit-0", "--shell", &note(&log)])
        .run()
        .assert_code(0);
    Wrapper::new(&url)
        .args(["-k", "c", "--once", "commit-5", "--shell", &note(&log)])
        .run()
        .assert_code(0);
    assert_eq!(lines(&log), 2);
}
