//! `--supersede`: a waiting run gives way (exit 77, its command never run) to a newer
//! superseding run of the same key, within a second of the newer one's arrival; holders and
//! waiters without the flag are never dropped; `--fair` keeps the survivors' order; a
//! Redlock quorum decides by a majority of its nodes; `--no-wait` with it is refused; with
//! `--once`, work already done wins over superseding.
//!
//! What this module does not own: waiting itself (`waiting`, `waiters`), the fair queue
//! (`operators`). Keys beyond `PREFIX + KEY` are used only as `src/backend/layout/mod.rs`
//! documents them: `{K}:queue` (whose size says a plain waiter has queued) and
//! `{K}:supersede` (whose value names the newest superseding waiter, by its pid).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::deployments::Cluster;
use crate::support::*;

/// How long a superseded waiter may take to leave once the newer one is seen to arrive: the
/// issue's second, and nothing more (the newer one arrived before the test saw it).
const SUPERSEDED_WITHIN: Duration = Duration::from_secs(1);

fn queue_key(name: &str) -> String {
    format!("{{{PREFIX}{name}}}:queue")
}

fn registry_key(name: &str) -> String {
    format!("{{{PREFIX}{name}}}:supersede")
}

/// A waiter whose job appends `NAME` to `order`, started under `wrapper`.
fn waiter(wrapper: Wrapper, name: &str, order: &Path) -> Running {
    let job = format!("echo {name} >> '{}'", order.display());
    wrapper.args(["--label", name, "--shell", &job]).spawn()
}

/// Waits until `servers` all name the superseding waiter `pid` as the newest.
#[track_caller]
fn wait_registered(servers: &[&RedisServer], key: &str, pid: i32) -> Instant {
    wait_until(
        Duration::from_secs(15),
        &format!("superseding waiter {pid} to arrive"),
        || {
            servers.iter().all(|server| {
                server
                    .get(&registry_key(key))
                    .is_some_and(|value| value.contains(&format!("\"pid\":{pid},")))
            })
        },
    );
    Instant::now()
}

/// Waits until `server`'s queue of `key` has `count` waiters.
#[track_caller]
fn wait_queued(server: &RedisServer, key: &str, count: i64) {
    wait_until(
        Duration::from_secs(15),
        &format!("{count} waiters queued"),
        || server.zcard(&queue_key(key)) == count,
    );
}

/// Asserts that the superseded waiter `older` ends with 77 within a second of `seen` (when
/// the newer one, `newer_pid`, was seen to arrive), naming the newer one and running nothing.
#[track_caller]
fn assert_superseded(older: Running, seen: Instant, newer_pid: i32, newer_label: &str) {
    let out = older.wait_within(Duration::from_secs(15));
    let after = seen.elapsed();
    out.assert_code(77)
        .assert_stderr_contains("superseded on redlock:")
        .assert_stderr_contains(&format!("pid {newer_pid}"))
        .assert_stderr_contains(&format!("({newer_label})"));
    assert!(
        after <= SUPERSEDED_WITHIN,
        "superseded {after:?} after the newer waiter arrived"
    );
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Behind a holder, in this order: superseding s1, plain p1, superseding s2, plain p2,
/// superseding s3 (and, with `--fair`, plain p3). s1 gives way to s2 and s2 to s3, each
/// within a second; every plain waiter runs, and s3, the newest, runs. With `--fair` they run
/// in their order of arrival.
fn mixed_waiters(fair: bool) {
    let server = RedisServer::start();
    let dir = TempDir::new("supersede");
    let order = dir.join("order");
    let key = if fair { "deploy-fair" } else { "deploy" };
    let extra: &[&str] = if fair { &["--fair"] } else { &[] };
    let cmd = || server.cmd().args(["-k", key]).args(extra);
    let holder = hold(cmd(), &dir, "holder");

    let s1 = waiter(cmd().arg("--supersede"), "s1", &order);
    wait_registered(&[&server], key, s1.pid());
    wait_queued(&server, key, 1);
    let p1 = waiter(cmd(), "p1", &order);
    wait_queued(&server, key, 2);
    let s2 = waiter(cmd().arg("--supersede"), "s2", &order);
    let seen = wait_registered(&[&server], key, s2.pid());
    let s2_pid = s2.pid();
    assert_superseded(s1, seen, s2_pid, "s2");
    // s1 left the queue, s2 joined it.
    wait_queued(&server, key, 2);
    let p2 = waiter(cmd(), "p2", &order);
    wait_queued(&server, key, 3);
    let s3 = waiter(cmd().arg("--supersede"), "s3", &order);
    let seen = wait_registered(&[&server], key, s3.pid());
    let s3_pid = s3.pid();
    assert_superseded(s2, seen, s3_pid, "s3");
    wait_queued(&server, key, 3);
    let p3 = fair.then(|| {
        let p3 = waiter(cmd(), "p3", &order);
        wait_queued(&server, key, 4);
        p3
    });
    assert!(
        lines(&order).is_empty(),
        "a waiter ran while the lock was held"
    );

    holder.let_go();
    holder.wait().assert_code(0);
    for survivor in [Some(p1), Some(p2), Some(s3), p3].into_iter().flatten() {
        survivor
            .wait()
            .assert_code(0)
            .assert_stderr_lacks("superseded");
    }
    let mut ran = lines(&order);
    if fair {
        assert_eq!(ran, ["p1", "p2", "s3", "p3"], "not in arrival order");
    } else {
        ran.sort();
        assert_eq!(ran, ["p1", "p2", "s3"]);
    }
    // The newest's value stays, without a TTL: an older waiter that missed its wake-up
    // finds it however late it wakes (see the test below).
    let left = server.pttl(&registry_key(key));
    assert_eq!(left, -1, "the registry would expire: PTTL {left}");
    assert!(server
        .get(&registry_key(key))
        .is_some_and(|value| value.contains(&format!("\"pid\":{s3_pid},"))));
}

#[test]
fn only_older_superseding_waiters_give_way() {
    mixed_waiters(false);
}

#[test]
fn fair_survivors_keep_their_order() {
    mixed_waiters(true);
}

/// The JSON log has the event, with the exit code; `-q` keeps the line out of the text log.
#[test]
fn the_superseded_event_and_quiet() {
    let server = RedisServer::start();
    let dir = TempDir::new("supersede-log");
    let order = dir.join("order");
    let cmd = || server.cmd().args(["-k", "logged"]);
    let holder = hold(cmd(), &dir, "holder");
    let s1 = waiter(
        cmd().args(["--supersede", "--log-format", "json"]),
        "s1",
        &order,
    );
    wait_registered(&[&server], "logged", s1.pid());
    let s2 = waiter(cmd().args(["--supersede", "-q"]), "s2", &order);
    let seen = wait_registered(&[&server], "logged", s2.pid());
    let out = s1.wait_within(Duration::from_secs(15));
    assert!(seen.elapsed() <= SUPERSEDED_WITHIN);
    out.assert_code(77)
        .assert_stderr_contains("\"event\":\"superseded\"")
        .assert_stderr_contains("\"exit_code\":77");
    let s3 = waiter(cmd().args(["--supersede"]), "s3", &order);
    wait_registered(&[&server], "logged", s3.pid());
    let out = s2.wait_within(Duration::from_secs(15));
    out.assert_code(77);
    assert_eq!(out.stderr, "", "-q printed");
    holder.let_go();
    holder.wait().assert_code(0);
    s3.wait().assert_code(0);
    assert_eq!(lines(&order), ["s3"]);
}

#[test]
fn supersede_without_waiting_is_refused() {
    let server = RedisServer::start();
    for no_wait in [&["--no-wait"][..], &["--wait", "0"]] {
        server
            .cmd()
            .args(["-k", "nw", "--supersede"])
            .args(no_wait)
            .args(["--", "true"])
            .run()
            .assert_code(125)
            .assert_stderr_contains("--supersede cannot be used with --no-wait");
    }
    assert_eq!(server.dbsize(), 0);
}

/// Over three Redlock nodes: the older superseding waiter gives way within a second, the
/// newer runs once the holder is done. Then a single node that says "superseded" (its
/// registry names another run) decides nothing: the waiter runs.
#[test]
fn redlock_supersedes_by_a_majority() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let refs: Vec<&RedisServer> = nodes.iter().collect();
    let dir = TempDir::new("supersede-redlock");
    let order = dir.join("order");
    let cmd = || {
        let mut wrapper = Wrapper::bare().args(["-k", "rl"]);
        for node in &nodes {
            wrapper = wrapper.args(["-r", &node.url()]);
        }
        wrapper
    };
    let holder = hold(cmd(), &dir, "holder");
    let s1 = waiter(cmd().arg("--supersede"), "s1", &order);
    wait_registered(&refs, "rl", s1.pid());
    let s2 = waiter(cmd().arg("--supersede"), "s2", &order);
    let seen = wait_registered(&refs, "rl", s2.pid());
    let s2_pid = s2.pid();
    assert_superseded(s1, seen, s2_pid, "s2");
    holder.let_go();
    holder.wait().assert_code(0);
    s2.wait().assert_code(0);
    assert_eq!(lines(&order), ["s2"]);

    // One node of three names someone newer: a minority, so s3 still runs.
    let holder = hold(cmd(), &dir, "holder2");
    let s3 = waiter(cmd().arg("--supersede"), "s3", &order);
    wait_registered(&refs, "rl", s3.pid());
    nodes[0].set(
        &registry_key("rl"),
        r#"{"token":"someone-else","host":"elsewhere","pid":1}"#,
    );
    holder.let_go();
    holder.wait().assert_code(0);
    s3.wait().assert_code(0).assert_stderr_lacks("superseded");
    assert_eq!(lines(&order), ["s2", "s3"]);
}

/// In a Redis Cluster the newer waiter tells the older one on its sharded wake-up channel,
/// in the lock's hash slot: the older one still gives way within a second.
#[test]
fn a_cluster_supersedes_on_the_locks_slot() {
    let cluster = Cluster::start();
    let dir = TempDir::new("supersede-cluster");
    let order = dir.join("order");
    let cmd = || cluster.cmd().args(["-k", "cl"]);
    let registered = |pid: i32| {
        wait_until(
            Duration::from_secs(15),
            &format!("superseding waiter {pid} to arrive"),
            || {
                cluster
                    .get(&registry_key("cl"))
                    .is_some_and(|value| value.contains(&format!("\"pid\":{pid},")))
            },
        );
        Instant::now()
    };
    let holder = hold(cmd(), &dir, "holder");
    let s1 = waiter(cmd().arg("--supersede"), "s1", &order);
    registered(s1.pid());
    let s2 = waiter(cmd().arg("--supersede"), "s2", &order);
    let seen = registered(s2.pid());
    let s2_pid = s2.pid();
    assert_superseded(s1, seen, s2_pid, "s2");
    holder.let_go();
    holder.wait().assert_code(0);
    s2.wait().assert_code(0);
    assert_eq!(lines(&order), ["s2"]);
}

/// With `--once` too, "already done" is checked before superseding (docs/policies.md): a
/// waiting superseding run that finds the work done once its turn comes exits 0, even when
/// the registry names a newer run; one that finds it done on arrival takes no one's place.
#[test]
fn already_done_wins_over_superseding() {
    let server = RedisServer::start();
    let dir = TempDir::new("supersede-once");
    let order = dir.join("order");
    let cmd = || server.cmd().args(["-k", "both"]);
    let holder = hold(cmd().args(["--once", "v1"]), &dir, "holder");
    let s1 = waiter(cmd().args(["--supersede", "--once", "v1"]), "s1", &order);
    wait_registered(&[&server], "both", s1.pid());
    wait_queued(&server, "both", 1);
    // A newer superseding run, as the registry would name it: s1 would give way at its next
    // try, but the holder's success, recorded by its release, comes first.
    server.set(
        &registry_key("both"),
        r#"{"token":"someone-else","host":"elsewhere","pid":1}"#,
    );
    holder.let_go();
    holder.wait().assert_code(0);
    s1.wait_within(Duration::from_secs(15))
        .assert_code(0)
        .assert_stderr_contains("already done (--once v1)")
        .assert_stderr_lacks("superseded");

    // A superseding waiter s2 behind a plain holder; a superseding run whose work is done
    // (s3) leaves on arrival, exit 0, and s2 stays the newest: it runs.
    let holder = hold(cmd(), &dir, "holder2");
    let s2 = waiter(cmd().arg("--supersede"), "s2", &order);
    wait_registered(&[&server], "both", s2.pid());
    waiter(cmd().args(["--supersede", "--once", "v1"]), "s3", &order)
        .wait_within(Duration::from_secs(15))
        .assert_code(0)
        .assert_stderr_contains("already done (--once v1)");
    wait_registered(&[&server], "both", s2.pid());
    holder.let_go();
    holder.wait().assert_code(0);
    s2.wait().assert_code(0).assert_stderr_lacks("superseded");
    assert_eq!(lines(&order), ["s2"]);
}

/// A superseding waiter that misses its wake-up (stopped, as a paused VM would be) and stays
/// stopped well past the time the registry used to expire (3 leases after the newer run's
/// last try: about 4 s with `--ttl 1s`) still learns, however late it wakes, that a newer
/// run arrived: 77, naming it, and its older command never runs after the newer one's.
#[test]
fn a_waiter_paused_past_the_newer_runs_turn_still_gives_way() {
    let server = RedisServer::start();
    let dir = TempDir::new("supersede-paused");
    let order = dir.join("order");
    let cmd = || server.cmd().args(["-k", "late", "--ttl", "1s"]);
    let holder = hold(cmd(), &dir, "holder");
    let s1 = waiter(cmd().arg("--supersede"), "s1", &order);
    wait_registered(&[&server], "late", s1.pid());
    wait_queued(&server, "late", 1);
    s1.signal(libc::SIGSTOP);
    let stopped = Instant::now();

    let s2 = waiter(cmd().arg("--supersede"), "s2", &order);
    let s2_pid = s2.pid();
    wait_registered(&[&server], "late", s2_pid);
    holder.let_go();
    holder.wait().assert_code(0);
    s2.wait_within(Duration::from_secs(15)).assert_code(0);
    assert_eq!(lines(&order), ["s2"]);
    // The pause is the premise: s1 stays stopped twice as long as the registry once lasted
    // after s2's last try (its wake-up notice waits in its socket).
    wait_until(
        Duration::from_secs(30),
        "the stopped waiter to have been stopped for 8 s",
        || stopped.elapsed() > Duration::from_secs(8),
    );
    s1.signal(libc::SIGCONT);
    s1.wait_within(Duration::from_secs(15))
        .assert_code(77)
        .assert_stderr_contains(&format!("pid {s2_pid}"))
        .assert_stderr_contains("(s2)");
    assert_eq!(
        lines(&order),
        ["s2"],
        "the older command ran after the newer"
    );
}
