//! `--replace`: a run takes over from the holder, on one server and over a Redlock quorum.
//! The commands write their own timestamps (`date +%s%N`, the one clock of this machine) and
//! the new command checks, as it starts, that no process of the old one is still alive: a
//! takeover must never let the two run together.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::*;

/// The old command: records its pid and its start, and on SIGTERM takes a moment to finish
/// (so that a new command started too early would be caught), then records its end.
pub(crate) fn old_command(dir: &TempDir) -> String {
    let d = dir.join("").display().to_string();
    format!(
        "echo $$ > {d}old.pid; \
         trap 'date +%s%N > {d}old.term; sleep 0.3; date +%s%N > {d}old.end; exit 0' TERM; \
         date +%s%N > {d}old.start; \
         while :; do sleep 0.05; done"
    )
}

/// The new command (and a plain waiter's, named `name`): records whether any process of
/// the old command is alive (a zombie is not: its parent may be stopped), then its start.
pub(crate) fn new_command(dir: &TempDir, name: &str) -> String {
    let d = dir.join("").display().to_string();
    format!(
        "state=$(awk '{{print $3}}' /proc/$(cat {d}old.pid)/stat 2>/dev/null); \
         if [ -n \"$state\" ] && [ \"$state\" != Z ]; then echo alive > {d}{name}.overlap; fi; \
         date +%s%N > {d}{name}.start"
    )
}

pub(crate) fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[track_caller]
pub(crate) fn stamp(dir: &TempDir, name: &str) -> u128 {
    let text = dir.read(name);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name} holds {text:?}, not a time"))
}

/// `-r URL` once per node.
fn r_args(nodes: &[RedisServer]) -> Vec<String> {
    nodes
        .iter()
        .flat_map(|node| ["-r".to_string(), node.url()])
        .collect()
}

/// A holder, a plain waiter, then a `--replace` run: the holder's command gets SIGTERM
/// within 1 s, the holder exits 77 naming the new run, the new command starts only after the
/// old one has ended, and before the plain waiter that came first.
pub(crate) fn takeover(wrapper: impl Fn() -> Wrapper, subscribed: impl Fn() -> bool) {
    let dir = TempDir::new("replace");
    let old = wrapper()
        .args(["-k", "rp", "--label", "old", "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(Duration::from_secs(15), "the old command to start", || {
        dir.exists("old.start")
    });
    // The holder listens for a takeover once its command has run a moment.
    wait_until(Duration::from_secs(15), "the holder to listen", &subscribed);
    let plain = wrapper()
        .args(["-k", "rp", "--label", "plain", "--shell"])
        .arg(new_command(&dir, "plain"))
        .spawn();
    std::thread::sleep(Duration::from_millis(300));
    let asked = now_ns();
    let new = wrapper()
        .args(["-k", "rp", "--replace", "--label", "new", "--shell"])
        .arg(new_command(&dir, "new"))
        .spawn();
    old.wait_within(Duration::from_secs(20))
        .assert_code(77)
        .assert_stderr_contains("replaced by")
        .assert_stderr_contains("(new)");
    new.wait_within(Duration::from_secs(20)).assert_code(0);
    plain.wait_within(Duration::from_secs(20)).assert_code(0);
    let term = stamp(&dir, "old.term");
    assert!(
        term - asked < 1_000_000_000,
        "the old command got SIGTERM {} ms after the takeover was asked for",
        (term - asked) / 1_000_000
    );
    assert!(
        !dir.exists("new.overlap"),
        "the new command ran beside the old"
    );
    assert!(stamp(&dir, "new.start") > stamp(&dir, "old.end"));
    assert!(
        stamp(&dir, "new.start") < stamp(&dir, "plain.start"),
        "the plain waiter, queued first, was served before the replacing run"
    );
}

#[test]
fn a_replacing_run_takes_over_after_the_old_command_has_ended() {
    let server = RedisServer::start();
    takeover(|| server.cmd(), || server.subscribed_clients() >= 1);
}

#[test]
fn a_replacing_run_takes_over_from_a_redlock_holder() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    takeover(
        || Wrapper::bare().args(r_args(&nodes)),
        || nodes.iter().all(|node| node.subscribed_clients() >= 1),
    );
}

/// A holder that cannot act (stopped): the new command waits for the old lease to run out,
/// and starts only once the old command is gone.
#[test]
fn a_stopped_holder_is_waited_out_to_its_lease() {
    let server = RedisServer::start();
    let dir = TempDir::new("replace-stopped");
    let old = server
        .cmd()
        .args(["-k", "rs", "--ttl", "3s", "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(Duration::from_secs(15), "the old command to start", || {
        dir.exists("old.start")
    });
    old.signal(libc::SIGSTOP);
    let stopped = now_ns();
    let new = server
        .cmd()
        .args(["-k", "rs", "--replace", "--shell"])
        .arg(new_command(&dir, "new"))
        .spawn();
    let out = new.wait_within(Duration::from_secs(20));
    old.signal(libc::SIGCONT);
    out.assert_code(0);
    assert!(
        !dir.exists("new.overlap"),
        "the new command ran beside the old"
    );
    assert!(
        stamp(&dir, "new.start") - stamp(&dir, "old.start") >= 2_000_000_000,
        "the new command started {} ms after the holder was stopped, before its lease ended",
        (stamp(&dir, "new.start") - stopped) / 1_000_000
    );
    let _ = old.wait_within(Duration::from_secs(20));
}

/// A holder that is not redlock-run never lets go: --wait bounds the takeover (75), and the
/// request goes with the run that gave up, holding no later run up.
#[test]
fn wait_bounds_a_takeover_from_a_foreign_holder() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let _: () = redis::cmd("SET")
        .arg("redlock:rf")
        .arg("foreign")
        .arg("PX")
        .arg(60_000)
        .query(&mut conn)
        .unwrap();
    server
        .cmd()
        .args(["-k", "rf", "--replace", "--wait", "1s", "--", "true"])
        .run()
        .assert_code(75);
    let left: i64 = redis::cmd("EXISTS")
        .arg("{redlock:rf}:replace")
        .query(&mut conn)
        .unwrap();
    assert_eq!(left, 0, "the takeover outlived the run that asked for it");
}

#[test]
fn replace_is_refused_with_a_limit_or_no_wait() {
    let server = RedisServer::start();
    server
        .cmd()
        .args(["-k", "rl", "--replace", "--limit", "2", "--", "true"])
        .run()
        .assert_code(125)
        .assert_stderr_contains("--replace needs --limit 1");
    server
        .cmd()
        .args(["-k", "rl", "--replace", "--no-wait", "--", "true"])
        .run()
        .assert_code(125)
        .assert_stderr_contains("--replace needs to wait");
}

/// The replacing run is served next: a newcomer that finds the lock free while a takeover
/// stands (here the replacing run is stopped before it could try again) does not take it.
#[test]
fn a_standing_takeover_is_served_before_a_newcomer() {
    let server = RedisServer::start();
    let dir = TempDir::new("replace-next");
    let mut conn = server.connection();
    let _: () = redis::cmd("SET")
        .arg("redlock:rn")
        .arg("foreign")
        .arg("PX")
        .arg(60_000)
        .query(&mut conn)
        .unwrap();
    let new = server
        .cmd()
        .args(["-k", "rn", "--replace", "--", "touch"])
        .arg(dir.join("new.ran"))
        .spawn();
    wait_until(
        Duration::from_secs(15),
        "the takeover to be asked for",
        || {
            redis::cmd("EXISTS")
                .arg("{redlock:rn}:replace")
                .query::<i64>(&mut conn)
                .unwrap()
                == 1
        },
    );
    new.signal(libc::SIGSTOP);
    let _: () = redis::cmd("DEL")
        .arg("redlock:rn")
        .query(&mut conn)
        .unwrap();
    server
        .cmd()
        .args(["-k", "rn", "--no-wait", "--", "touch"])
        .arg(dir.join("newcomer.ran"))
        .run()
        .assert_code(75);
    new.signal(libc::SIGCONT);
    new.wait_within(Duration::from_secs(20)).assert_code(0);
    assert!(dir.exists("new.ran"));
    assert!(!dir.exists("newcomer.ran"));
}

/// Calls of `EVALSHA` a node has served: every renewal is one.
fn evalsha_calls(node: &RedisServer) -> u64 {
    node.command_stats()
        .into_iter()
        .find(|(name, _)| name == "evalsha")
        .map_or(0, |(_, calls)| calls)
}

/// Redlock: a takeover on record on one node of three decides nothing; on two, the holder
/// lets go.
#[test]
fn a_redlock_takeover_needs_a_majority_of_the_nodes() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = TempDir::new("replace-majority");
    let old = Wrapper::bare()
        .args(r_args(&nodes))
        .args(["-k", "rm", "--ttl", "3s", "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(Duration::from_secs(15), "the old command to start", || {
        dir.exists("old.start")
    });
    let request = r#"{"token":"other","host":"elsewhere","pid":1,"program":"x","label":"taker"}"#;
    let ask = |node: &RedisServer| {
        let _: () = redis::cmd("SET")
            .arg("{redlock:rm}:replace")
            .arg(request)
            .arg("PX")
            .arg(60_000)
            .query(&mut node.connection())
            .unwrap();
    };
    ask(&nodes[0]);
    // Two renewals (every second with a 3 s TTL) have seen it on that one node.
    let since = evalsha_calls(&nodes[0]);
    wait_until(Duration::from_secs(20), "two renewals", || {
        evalsha_calls(&nodes[0]) >= since + 2
    });
    assert!(
        !dir.exists("old.term"),
        "one node of three decided a takeover"
    );
    ask(&nodes[1]);
    old.wait_within(Duration::from_secs(20))
        .assert_code(77)
        .assert_stderr_contains("replaced by elsewhere pid 1 `x` (taker)");
    assert!(dir.exists("old.term"));
}

/// Redlock with one node of three frozen: a takeover request on record on one node only
/// must not make the renewals wait for the frozen node (they did, until their deadline, and
/// the holder lost its lock: exit 76); and a real takeover, on the two live nodes, stops
/// the holder within 1 s (77, not 76).
#[test]
fn a_frozen_node_does_not_hold_a_renewal_that_saw_a_takeover() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    nodes[2].freeze();
    let dir = TempDir::new("replace-frozen");
    let started = dir.join("").display().to_string();
    let holder = Wrapper::bare()
        .args(r_args(&nodes))
        .args(["-k", "rl2", "--ttl", "3s", "--shell"])
        .arg(format!("touch {started}started; sleep 6"))
        .spawn();
    wait_until(Duration::from_secs(15), "the command to start", || {
        dir.exists("started")
    });
    let _: () = redis::cmd("SET")
        .arg("{redlock:rl2}:replace")
        .arg(r#"{"token":"stale","host":"gone","pid":1,"program":"x"}"#)
        .arg("PX")
        .arg(60_000)
        .query(&mut nodes[0].connection())
        .unwrap();
    holder.wait_within(Duration::from_secs(30)).assert_code(0);

    let old = Wrapper::bare()
        .args(r_args(&nodes))
        .args(["-k", "rl3", "--ttl", "3s", "--label", "old", "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(Duration::from_secs(15), "the old command to start", || {
        dir.exists("old.start")
    });
    wait_until(Duration::from_secs(15), "the holder to listen", || {
        nodes[..2].iter().all(|node| node.subscribed_clients() >= 1)
    });
    let asked = now_ns();
    let new = Wrapper::bare()
        .args(r_args(&nodes))
        .args(["-k", "rl3", "--replace", "--label", "new", "--shell"])
        .arg(new_command(&dir, "new"))
        .spawn();
    old.wait_within(Duration::from_secs(20))
        .assert_code(77)
        .assert_stderr_contains("(new)");
    let term = stamp(&dir, "old.term");
    assert!(
        term - asked < 1_000_000_000,
        "the old command got SIGTERM {} ms after the takeover was asked for",
        (term - asked) / 1_000_000
    );
    new.wait_within(Duration::from_secs(30)).assert_code(0);
    assert!(
        !dir.exists("new.overlap"),
        "the new command ran beside the old"
    );
}

/// A replacing run killed while it waits (SIGKILL: an OOM kill, a cancelled CI job) leaves
/// nobody blocked: the holder's release finds it gone and deletes its request with it, and
/// its request never outlives its last try by more than a quarter of the holder's lease left
/// and 2 s (before: 3 TTLs, and the next plain run waited 28 s for a lock nobody held).
#[test]
fn a_replacing_run_that_dies_waiting_blocks_nobody() {
    let server = RedisServer::start();
    let dir = TempDir::new("replace-dies");
    let d = dir.join("").display().to_string();
    let old = server
        .cmd()
        .args(["-k", "rdie", "--ttl", "10s", "--shell"])
        .arg(format!(
            "trap 'touch {d}term; while [ ! -e {d}go ]; do sleep 0.05; done; exit 0' TERM; \
             touch {d}started; while :; do sleep 0.05; done"
        ))
        .spawn();
    wait_until(Duration::from_secs(15), "the old command to start", || {
        dir.exists("started")
    });
    wait_until(Duration::from_secs(15), "the holder to listen", || {
        server.subscribed_clients() >= 1
    });
    let taker = server
        .cmd()
        .args(["-k", "rdie", "--replace", "--", "true"])
        .spawn();
    wait_until(Duration::from_secs(15), "the holder to be told", || {
        dir.exists("term")
    });
    let mut conn = server.connection();
    wait_until(
        Duration::from_secs(15),
        "the replacing run to queue",
        || {
            let queued: i64 = redis::cmd("ZCARD")
                .arg("{redlock:rdie}:queue")
                .query(&mut conn)
                .unwrap();
            queued == 1
        },
    );
    let left: i64 = redis::cmd("PTTL")
        .arg("{redlock:rdie}:replace")
        .query(&mut conn)
        .unwrap();
    assert!(
        (0..=10_000 + 2_500 + 2_000).contains(&left),
        "the takeover request lasts {left} ms past its requester's try"
    );
    taker.signal(libc::SIGKILL);
    wait_for_death(taker.pid(), Duration::from_secs(10));
    std::fs::write(dir.join("go"), "").unwrap();
    old.wait_within(Duration::from_secs(20)).assert_code(77);
    let standing: i64 = redis::cmd("EXISTS")
        .arg("{redlock:rdie}:replace")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        standing, 0,
        "the dead requester's takeover outlived the release"
    );
    server
        .cmd()
        .args(["-k", "rdie", "--wait", "5s", "--", "true"])
        .run()
        .assert_code(0);
}

/// A takeover request standing on a free lock (its requester gone, or written by hand) is
/// shown by `status` and withdrawn by `release --force` (before: `status` said "free", a
/// `--no-wait` run exited 75, and `release --force` found nothing to release).
#[test]
fn status_shows_a_standing_takeover_and_release_force_withdraws_it() {
    let server = RedisServer::start();
    let _: () = redis::cmd("SET")
        .arg("{redlock:rfk}:replace")
        .arg(r#"{"token":"t","host":"web-9","pid":7,"program":"p","label":"v2"}"#)
        .arg("PX")
        .arg(60_000)
        .query(&mut server.connection())
        .unwrap();
    server
        .cmd()
        .args(["-k", "rfk", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    let out = server.cmd().args(["status", "-k", "rfk"]).run();
    out.assert_code(1);
    assert!(
        out.stdout_str()
            .contains("a takeover (--replace) by web-9 pid 7"),
        "{}",
        out.stdout_str()
    );
    let out = server.cmd().args(["status", "-k", "rfk", "--json"]).run();
    let json: serde_json::Value = serde_json::from_str(out.stdout_str().trim()).unwrap();
    assert!(
        json["takeover_by"].as_str().unwrap().contains("web-9"),
        "{json}"
    );
    let out = server.cmd().args(["release", "-k", "rfk", "--force"]).run();
    assert!(
        out.stdout_str()
            .contains("withdrew the takeover (--replace) by web-9"),
        "{}",
        out.stdout_str()
    );
    server
        .cmd()
        .args(["-k", "rfk", "--no-wait", "--", "true"])
        .run()
        .assert_code(0);
}

/// A takeover asked for the moment the old command starts, before its holder listens (it
/// does once the command has run 200 ms): heard all the same within 1 s, through the
/// replacing run's next tries.
#[test]
fn a_takeover_asked_for_before_the_holder_listens_is_heard_in_time() {
    let server = RedisServer::start();
    let dir = TempDir::new("replace-early");
    let old = server
        .cmd()
        .args(["-k", "re", "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(Duration::from_secs(15), "the old command to start", || {
        dir.exists("old.start")
    });
    let asked = now_ns();
    let new = server
        .cmd()
        .args(["-k", "re", "--replace", "--shell"])
        .arg(new_command(&dir, "new"))
        .spawn();
    old.wait_within(Duration::from_secs(20)).assert_code(77);
    new.wait_within(Duration::from_secs(20)).assert_code(0);
    let term = stamp(&dir, "old.term");
    assert!(
        term - asked < 1_000_000_000,
        "the old command got SIGTERM {} ms after the takeover was asked for",
        (term - asked) / 1_000_000
    );
    assert!(
        !dir.exists("new.overlap"),
        "the new command ran beside the old"
    );
    assert!(stamp(&dir, "new.start") > stamp(&dir, "old.end"));
}

/// Redis Cluster: the holder hears the takeover on its sharded channel, and its renewal then
/// looks for the request (it does not otherwise there: see `SingleRedis::renew`).
#[test]
fn a_replacing_run_takes_over_in_a_cluster() {
    let cluster = crate::support::deployments::Cluster::start();
    // The replacing run's first tries come often, so the holder hears it whenever it
    // starts listening.
    takeover(|| cluster.cmd(), || true);
}

/// The server's clock, in ms since the epoch.
fn server_ms(server: &RedisServer) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.connection()).unwrap();
    seconds * 1000 + micros / 1000
}

/// `--replace` with `--once`: a run whose work is already done exits 0 at its arrival
/// without asking the holder anything; the holder runs on.
#[test]
fn a_replacing_run_whose_work_is_done_replaces_nobody() {
    let server = RedisServer::start();
    let dir = TempDir::new("replace-done");
    server
        .cmd()
        .args(["-k", "rd", "--once", "v1", "--", "true"])
        .run()
        .assert_code(0);
    let old = server
        .cmd()
        .args(["-k", "rd", "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(Duration::from_secs(15), "the holder to listen", || {
        server.subscribed_clients() >= 1
    });
    server
        .cmd()
        .args(["-k", "rd", "--replace", "--once", "v1", "--", "touch"])
        .arg(dir.join("new.ran"))
        .run()
        .assert_code(0)
        .assert_stderr_contains("already done");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!dir.exists("old.term"), "a done run replaced the holder");
    assert!(!dir.exists("new.ran"));
    let asked: i64 = redis::cmd("EXISTS")
        .arg("{redlock:rd}:replace")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(asked, 0, "a done run left a takeover standing");
    old.signal(libc::SIGTERM);
    old.wait_within(Duration::from_secs(20))
        .assert_stderr_lacks("replaced by");
}

/// A replacing run that asked for a takeover and then finds the work done (here by another
/// run, recorded while it waited behind a holder that never lets go) exits 0 and withdraws
/// its request with it: the next run is not held up by it.
#[test]
fn a_replacing_run_that_finds_the_work_done_withdraws_its_takeover() {
    let server = RedisServer::start();
    let dir = TempDir::new("replace-withdrawn");
    let mut conn = server.connection();
    let _: () = redis::cmd("SET")
        .arg("redlock:rw")
        .arg("foreign")
        .arg("PX")
        .arg(2_000)
        .query(&mut conn)
        .unwrap();
    let new = server
        .cmd()
        .args(["-k", "rw", "--replace", "--once", "v1", "--", "touch"])
        .arg(dir.join("new.ran"))
        .spawn();
    wait_until(
        Duration::from_secs(15),
        "the takeover to be asked for",
        || {
            redis::cmd("EXISTS")
                .arg("{redlock:rw}:replace")
                .query::<i64>(&mut conn)
                .unwrap()
                == 1
        },
    );
    let record = format!(
        "{} {{\"token\":\"t\",\"host\":\"elsewhere\"}}",
        server_ms(&server)
    );
    let _: () = redis::cmd("HSET")
        .arg("{redlock:rw}:done")
        .arg("v1")
        .arg(record)
        .query(&mut conn)
        .unwrap();
    new.wait_within(Duration::from_secs(20))
        .assert_code(0)
        .assert_stderr_contains("already done");
    assert!(!dir.exists("new.ran"));
    let asked: i64 = redis::cmd("EXISTS")
        .arg("{redlock:rw}:replace")
        .query(&mut conn)
        .unwrap();
    assert_eq!(asked, 0, "the takeover outlived the run that asked for it");
    // Once the foreign value is gone, the lock is free for anyone: no takeover stands.
    wait_until(
        Duration::from_secs(5),
        "the foreign value to expire",
        || {
            redis::cmd("EXISTS")
                .arg("redlock:rw")
                .query::<i64>(&mut conn)
                .unwrap()
                == 0
        },
    );
    server
        .cmd()
        .args(["-k", "rw", "--no-wait", "--", "true"])
        .run()
        .assert_code(0);
}

#[test]
fn replace_is_refused_with_supersede() {
    let server = RedisServer::start();
    server
        .cmd()
        .args(["-k", "rx", "--replace", "--supersede", "--", "true"])
        .run()
        .assert_code(125)
        .assert_stderr_contains("--supersede cannot be used with --replace");
}

/// A holder already told to stop (a SIGTERM passed on, with `--stop-timeout`) is not
/// replaced as well: the first reason to end the command decides, 128+15 here.
#[test]
fn a_holder_being_stopped_is_not_replaced() {
    let server = RedisServer::start();
    let dir = TempDir::new("replace-stopping");
    let d = dir.join("").display().to_string();
    let old = server
        .cmd()
        .args(["-k", "rt", "--stop-timeout", "1s", "--shell"])
        .arg(format!(
            "trap 'date +%s%N > {d}old.term' TERM; date +%s%N > {d}old.start; \
             while :; do sleep 0.05; done"
        ))
        .spawn();
    wait_until(Duration::from_secs(15), "the holder to listen", || {
        server.subscribed_clients() >= 1
    });
    old.signal(libc::SIGTERM);
    wait_until(Duration::from_secs(5), "the command to get SIGTERM", || {
        dir.exists("old.term")
    });
    let new = server
        .cmd()
        .args(["-k", "rt", "--replace", "--", "true"])
        .spawn();
    old.wait_within(Duration::from_secs(20))
        .assert_code(128 + libc::SIGTERM)
        .assert_stderr_contains("--stop-timeout")
        .assert_stderr_lacks("replaced by");
    new.wait_within(Duration::from_secs(20)).assert_code(0);
}

/// A replaced holder whose command ignores SIGTERM, with a long --kill-after: a SIGTERM to
/// redlock-run then starts `--stop-timeout`'s budget, which kills the group well before
/// --kill-after would; the run still exits 77, the takeover having come first.
#[test]
fn stop_timeout_bounds_a_replaced_command_that_ignores_sigterm() {
    let server = RedisServer::start();
    let dir = TempDir::new("replace-budget");
    let d = dir.join("").display().to_string();
    let old = server
        .cmd()
        .args([
            "-k",
            "rb",
            "--kill-after",
            "60s",
            "--stop-timeout",
            "1s",
            "--shell",
        ])
        .arg(format!(
            "trap 'date +%s%N > {d}old.term' TERM; date +%s%N > {d}old.start; \
             while :; do sleep 0.05; done"
        ))
        .spawn();
    wait_until(Duration::from_secs(15), "the holder to listen", || {
        server.subscribed_clients() >= 1
    });
    let new = server
        .cmd()
        .args(["-k", "rb", "--replace", "--", "true"])
        .spawn();
    wait_until(Duration::from_secs(5), "the takeover's SIGTERM", || {
        dir.exists("old.term")
    });
    let signalled = now_ns();
    old.signal(libc::SIGTERM);
    old.wait_within(Duration::from_secs(20))
        .assert_code(77)
        .assert_stderr_contains("replaced by")
        .assert_stderr_contains("--stop-timeout");
    let took = (now_ns() - signalled) / 1_000_000;
    assert!(
        took < 3_000,
        "the replaced command was killed {took} ms after the stop signal"
    );
    new.wait_within(Duration::from_secs(20)).assert_code(0);
}

/// The holder's listener, once broken (here its connection is killed, as a proxy's restart
/// or a failover would), is made again: a takeover asked for afterwards is heard within 1 s,
/// not at the next renewal (every 10 s with the default TTL).
#[test]
fn a_holder_listens_again_after_its_subscription_breaks() {
    let server = RedisServer::start();
    let dir = TempDir::new("replace-relisten");
    let old = server
        .cmd()
        .args(["-k", "rl", "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(Duration::from_secs(15), "the old command to start", || {
        dir.exists("old.start")
    });
    wait_until(Duration::from_secs(15), "the holder to listen", || {
        server.subscribed_clients() >= 1
    });
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(killed, 1, "the holder's subscription");
    wait_until(
        Duration::from_secs(10),
        "the holder to listen again",
        || server.subscribed_clients() >= 1,
    );
    let asked = now_ns();
    let new = server
        .cmd()
        .args(["-k", "rl", "--replace", "--shell"])
        .arg(new_command(&dir, "new"))
        .spawn();
    old.wait_within(Duration::from_secs(20)).assert_code(77);
    new.wait_within(Duration::from_secs(20)).assert_code(0);
    let term = stamp(&dir, "old.term");
    assert!(
        term - asked < 1_000_000_000,
        "the old command got SIGTERM {} ms after the takeover was asked for",
        (term - asked) / 1_000_000
    );
    assert!(stamp(&dir, "new.start") > stamp(&dir, "old.end"));
}

/// Redlock: every node announces each takeover request on the holder's channel. Copies of
/// earlier announcements (here published by hand, with nothing on record) do not make the
/// holder deaf to a later one: a request then on record on every node, announced once more,
/// is acted on within 1 s, not at the next renewal.
#[test]
fn a_redlock_holder_hears_every_takeover_announcement() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = TempDir::new("replace-copies");
    let d = dir.join("").display().to_string();
    let old = Wrapper::bare()
        .args(r_args(&nodes))
        .args(["-k", "ra", "--shell"])
        .arg(format!(
            "echo \"$REDLOCK_TOKEN\" > {d}token; {}",
            old_command(&dir)
        ))
        .spawn();
    wait_until(Duration::from_secs(15), "the old command to start", || {
        dir.exists("old.start")
    });
    wait_until(Duration::from_secs(15), "the holder to listen", || {
        nodes.iter().all(|node| node.subscribed_clients() >= 1)
    });
    let channel = format!("redlock-run:wake:{}", dir.read("token").trim());
    let announce = |node: &RedisServer| {
        let _: u64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("replace")
            .query(&mut node.connection())
            .unwrap();
    };
    // Two announcements by every node, with nothing on record: each is looked into by a
    // renewal, which finds no request.
    let since = evalsha_calls(&nodes[0]);
    for _ in 0..2 {
        nodes.iter().for_each(announce);
    }
    wait_until(
        Duration::from_secs(5),
        "a renewal on the announcements",
        || evalsha_calls(&nodes[0]) > since,
    );
    assert!(!dir.exists("old.term"), "a takeover with nothing on record");
    let request = r#"{"token":"other","host":"elsewhere","pid":1,"program":"x","label":"taker"}"#;
    for node in &nodes {
        let _: () = redis::cmd("SET")
            .arg("{redlock:ra}:replace")
            .arg(request)
            .arg("PX")
            .arg(60_000)
            .query(&mut node.connection())
            .unwrap();
    }
    let asked = now_ns();
    announce(&nodes[0]);
    old.wait_within(Duration::from_secs(20))
        .assert_code(77)
        .assert_stderr_contains("(taker)");
    let term = stamp(&dir, "old.term");
    assert!(
        term - asked < 1_000_000_000,
        "the old command got SIGTERM {} ms after the takeover was announced",
        (term - asked) / 1_000_000
    );
}

/// With `--limit` above 1 no takeover can be asked for (`--replace` is refused there): a
/// holder opens no connection to listen for one.
#[test]
fn a_semaphore_holder_does_not_listen_for_a_takeover() {
    let server = RedisServer::start();
    let dir = TempDir::new("replace-limit");
    // Renewals every 333 ms: the holder is well into its run when it ends.
    let holder = server
        .cmd()
        .args(["-k", "rs", "--limit", "2", "--ttl", "1s", "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(Duration::from_secs(15), "the command to start", || {
        dir.exists("old.start")
    });
    let renewals = evalsha_calls(&server);
    wait_until(Duration::from_secs(15), "three renewals", || {
        assert_eq!(
            server.subscribed_clients(),
            0,
            "a semaphore holder subscribed to its channel"
        );
        evalsha_calls(&server) >= renewals + 3
    });
    holder.signal(libc::SIGTERM);
    holder.wait_within(Duration::from_secs(20)).assert_code(0);
}

/// The same in a Redis Cluster: the holder's sharded subscription, cut on the master of the
/// lock's slot, is made again, and a takeover asked for afterwards is heard within 1 s.
#[test]
fn a_cluster_holder_listens_again_after_its_subscription_breaks() {
    let cluster = crate::support::deployments::Cluster::start();
    let dir = TempDir::new("replace-relisten-cluster");
    let old = cluster
        .cmd()
        .args(["-k", "rc", "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(Duration::from_secs(15), "the old command to start", || {
        dir.exists("old.start")
    });
    let master = &cluster.nodes[cluster.owner_of("redlock:rc")];
    let listeners = || {
        master
            .query::<String>(&["CLIENT", "LIST", "TYPE", "pubsub"])
            .lines()
            .count()
    };
    wait_until(Duration::from_secs(15), "the holder to listen", || {
        listeners() >= 1
    });
    let killed: u64 = master.query(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert_eq!(killed, 1, "the holder's subscription");
    wait_until(
        Duration::from_secs(10),
        "the holder to listen again",
        || listeners() >= 1,
    );
    let asked = now_ns();
    let new = cluster
        .cmd()
        .args(["-k", "rc", "--replace", "--shell"])
        .arg(new_command(&dir, "new"))
        .spawn();
    old.wait_within(Duration::from_secs(20)).assert_code(77);
    new.wait_within(Duration::from_secs(20)).assert_code(0);
    let term = stamp(&dir, "old.term");
    assert!(
        term - asked < 1_000_000_000,
        "the old command got SIGTERM {} ms after the takeover was asked for",
        (term - asked) / 1_000_000
    );
    assert!(stamp(&dir, "new.start") > stamp(&dir, "old.end"));
}

/// A flood of takeover notices on the holder's own channel (a buggy or hostile client:
/// nothing on record asks for a takeover) costs a few renewals a second, not one each: the
/// notices are coalesced and the renewals they bring spaced. The holder keeps its lock
/// and exits with its command's status.
#[test]
fn a_flood_of_takeover_notices_costs_few_renewals() {
    let server = RedisServer::start();
    let dir = TempDir::new("noticeflood");
    // Renewals every 20 s: none falls by the schedule during the flood.
    let holder = hold(server.cmd().args(["-k", "flood", "-t", "60s"]), &dir, "h");
    let token = token_of(&server.lock_value("flood").expect("held"));
    let channel = format!("redlock-run:wake:{token}");
    wait_until(Duration::from_secs(15), "the holder to listen", || {
        let (_, listeners): (String, u64) = server.query(&["PUBSUB", "NUMSUB", &channel]);
        listeners == 1
    });
    let before = evalsha_calls(&server);
    let mut connection = server.connection();
    let started = std::time::Instant::now();
    for _ in 0..100 {
        let mut pipe = redis::pipe();
        for _ in 0..1000 {
            pipe.cmd("PUBLISH").arg(&channel).arg("replace").ignore();
        }
        let () = pipe.query(&mut connection).expect("publishing");
    }
    let flood = started.elapsed();
    assert!(server
        .lock_value("flood")
        .is_some_and(|value| value.contains(&token)));
    holder.let_go();
    holder.wait().assert_code(0);
    // Every renewal until the exit: all the scripts since the flood began, but the release.
    let (renewals, over) = (evalsha_calls(&server) - before - 1, started.elapsed());
    // One renewal per 100 ms would be the pace; twice that, and 20 more, is the bound.
    // Without the spacing it was thousands in a second.
    let bound = 20 + 2 * u64::try_from(over.as_millis() / 100).unwrap();
    eprintln!("{renewals} renewals in {over:?}, with a flood of 100,000 notices over {flood:?}");
    assert!(
        renewals <= bound,
        "{renewals} renewals in {over:?} (bound {bound})"
    );
}
