//! Redlock (several `-r`): one lock over 3 or 5 independent `redis-server` masters. Taking,
//! keeping and releasing it on a majority; mutual exclusion under contention, judged from
//! the commands' own history; a minority down before or during a run, a majority lost, a
//! node restarted empty; fences that only grow across different majorities; pub/sub
//! hand-over with a node down; `status`/`list`/`release` per node; the cost of more nodes;
//! a quorum of different servers (Redis 6.2, 7.0, Valkey) behaving as one of a kind.
//!
//! What this module does not own: anything one server already shows (`exclusion`, `lease`,
//! `faults`, `operators`). Keys beyond `PREFIX + KEY` are used only where the data layout
//! in `src/backend/mod.rs` documents them: `{K}:fence`. Every wait is for an event (a file,
//! a key, a subscription, a count of renewals seen by a server, a process's exit); renewals
//! are counted as `EVALSHA` calls a node serves, since nothing else talks to it meanwhile.

use std::collections::BTreeSet;
use std::env;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::history::History;
use crate::support::proxy::FaultProxy;
use crate::support::*;

// ---------------------------------------------------------------------------------------------
// Helpers

/// `n` independent masters.
fn start_nodes(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(nodes: &[RedisServer]) -> Vec<String> {
    nodes.iter().map(RedisServer::url).collect()
}

/// `-r URL` once per node.
fn r_args(urls: &[String]) -> Vec<String> {
    urls.iter()
        .flat_map(|url| ["-r".to_string(), url.clone()])
        .collect()
}

/// redlock-run over the nodes at `urls`, each given with `-r`.
fn quorum(urls: &[String]) -> Wrapper {
    Wrapper::bare().args(r_args(urls))
}

/// An admin subcommand (`status -k K`, `list`, ...) over the nodes at `urls`.
fn admin(urls: &[String], subcommand: &[&str]) -> Wrapper {
    Wrapper::bare().args(subcommand).args(r_args(urls))
}

/// The full Redis key of the fence counter of lock `name` (documented layout).
fn fence_key(name: &str) -> String {
    format!("{{{PREFIX}{name}}}:fence")
}

/// The fence counter of lock `name` on `node`, 0 if it has none.
#[track_caller]
fn fence_counter(node: &RedisServer, name: &str) -> u64 {
    node.get(&fence_key(name)).map_or(0, |text| {
        text.parse()
            .unwrap_or_else(|_| panic!("fence counter {text:?} is not a number"))
    })
}

/// Calls of `EVALSHA` a node has served: every acquire, renew and release is one.
fn evalsha_calls(node: &RedisServer) -> u64 {
    node.command_stats()
        .into_iter()
        .find(|(name, _)| name == "evalsha")
        .map_or(0, |(_, calls)| calls)
}

/// Waits until `node` has served `more` further renewals (EVALSHA calls) than `since`.
#[track_caller]
fn wait_for_renewals(node: &RedisServer, since: u64, more: u64) {
    wait_until(
        Duration::from_secs(20),
        &format!("{more} renewals on port {}", node.port()),
        || evalsha_calls(node) >= since + more,
    );
}

/// Asserts that every running node in `nodes` holds lock `key` for `token`, with a lease.
#[track_caller]
fn assert_held_on(nodes: &[&RedisServer], key: &str, token: &str) {
    for node in nodes {
        let value = node
            .lock_value(key)
            .unwrap_or_else(|| panic!("no {PREFIX}{key} on port {}", node.port()));
        assert_eq!(token_of(&value), token, "holder on port {}", node.port());
        let pttl = node.pttl(&format!("{PREFIX}{key}"));
        assert!(pttl > 0, "no lease on port {}: PTTL {pttl}", node.port());
    }
}

/// Asserts that none of `nodes` has any key left but fence counters.
#[track_caller]
fn assert_empty(nodes: &[&RedisServer]) {
    for node in nodes {
        assert_eq!(node.dbsize(), 0, "port {}: {:?}", node.port(), node.keys());
    }
}

/// stdout parsed as one JSON document.
#[track_caller]
fn json_of(out: &Output) -> Value {
    let text = out.stdout_str();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{text}"))
}

/// Subscribed (pub/sub) client ids on `node`.
fn subscriber_ids(node: &RedisServer) -> BTreeSet<String> {
    node.clients()
        .into_iter()
        .filter(|client| {
            client
                .iter()
                .any(|(k, v)| k == "sub" && v.parse::<u64>().unwrap_or(0) > 0)
        })
        .filter_map(|client| client.into_iter().find(|(k, _)| k == "id").map(|(_, v)| v))
        .collect()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

// ---------------------------------------------------------------------------------------------
// 1. Taking, holding, releasing

/// The job runs with `REDLOCK_FENCE` while every node holds the key for its token; after
/// it, no node has anything left but the fence counter, which each node started from its
/// clock: a majority has the fence handed out (the largest heard). A node that answered
/// after the round was decided (a straggler, on a loaded machine) may have counted past it
/// from its later clock; the next majority shares a node that has the fence, so fences
/// still grow.
#[track_caller]
fn acquires_on_every_node_and_cleans_up(
    nodes: &[RedisServer],
    wrapper: impl Fn(&[String]) -> Wrapper,
) {
    let dir = TempDir::new("redlock-basic");
    let holder = hold(wrapper(&urls(nodes)).args(["-k", "basic"]), &dir, "job");
    let token = dir.read("job.token");
    assert_uuid_v4(&token);
    let fence = fence_of(&dir, "job");
    let all: Vec<&RedisServer> = nodes.iter().collect();
    assert_held_on(&all, "basic", &token);
    holder.let_go();
    holder.wait().assert_code(0);
    assert_empty(&all);
    let counters: Vec<u64> = nodes
        .iter()
        .map(|node| fence_counter(node, "basic"))
        .collect();
    assert!(
        counters.iter().all(|&counter| counter > 1),
        "fence {fence}, counters {counters:?}"
    );
    let have_it = counters.iter().filter(|&&counter| counter == fence).count();
    assert!(
        have_it > nodes.len() / 2,
        "fence {fence}, counters {counters:?}"
    );
}

#[test]
fn three_masters_acquire_run_and_release_everywhere() {
    acquires_on_every_node_and_cleans_up(&start_nodes(3), quorum);
}

/// The five URLs come comma-separated in `REDLOCK_REDIS`, as the README documents.
#[test]
fn five_masters_from_the_environment_acquire_run_and_release_everywhere() {
    acquires_on_every_node_and_cleans_up(&start_nodes(5), |urls| Wrapper::new(&urls.join(",")));
}

// ---------------------------------------------------------------------------------------------
// 2. Mutual exclusion

/// 6 wrappers over 5 masters, each running 5 separate redlock-run invocations of a locked
/// read-modify-write of a counter file: no two sections overlap, the count is exact, and
/// the fences, recorded inside the sections, grow strictly in the order the sections ran.
#[test]
fn contending_wrappers_over_five_masters_never_overlap() {
    let _load = loading_the_machine();
    contend(&start_nodes(5), 6, 5);
}

/// `WRAPPERS` wrappers over `nodes`, each running `ROUNDS` separate redlock-run invocations
/// of a locked read-modify-write of a counter file; see the test above.
#[track_caller]
fn contend(nodes: &[RedisServer], wrappers: usize, rounds: usize) {
    let n = nodes.len();
    let urls = urls(nodes);
    let dir = TempDir::new("redlock-contention");
    let history = History::new(&dir);
    let counter = dir.join("counter");
    let fences = dir.join("fences");
    fs::write(&counter, "0\n").unwrap();
    let script = history.section(
        &dir,
        "incr",
        &format!(
            "n=$(cat '{c}')\necho \"$REDLOCK_FENCE\" >> '{f}'\necho $((n + 1)) > '{c}'",
            c = counter.display(),
            f = fences.display()
        ),
    );

    let started = Instant::now();
    let every = urls.clone();
    run_in_parallel(wrappers, rounds, move || {
        quorum(&every)
            .args(["-k", "counter", "--"])
            .arg(&script)
            .timeout(Duration::from_secs(120))
    });
    eprintln!(
        "redlock contention: {wrappers} wrappers x {rounds} rounds over {n} nodes in {:.2?}",
        started.elapsed()
    );

    history
        .check()
        .assert_count(wrappers * rounds)
        .assert_all_recorded()
        .assert_no_overlap();
    assert_eq!(
        dir.read("counter"),
        (wrappers * rounds).to_string(),
        "lost updates"
    );
    let seen: Vec<u64> = dir
        .read("fences")
        .lines()
        .map(|line| line.parse().expect("a fence per line"))
        .collect();
    assert_eq!(seen.len(), wrappers * rounds);
    for pair in seen.windows(2) {
        assert!(
            pair[0] < pair[1],
            "fences not strictly increasing in section order: {seen:?}"
        );
    }
    // Every release reached a majority before its wrapper left. A node much slower than
    // the others (a loaded machine) is not waited for, and may keep a stray copy of the
    // last release's or a lost attempt's key: a minority's, gone by the TTL (30s).
    let stray = nodes.iter().filter(|node| node.dbsize() > 0).count();
    assert!(stray < n / 2 + 1, "a majority kept a key: {stray} of {n}");
    wait_until(Duration::from_secs(40), "every node to be empty", || {
        nodes.iter().all(|node| node.dbsize() == 0)
    });
}

// ---------------------------------------------------------------------------------------------
// 3. Nodes down before the start

/// With `down` of the `n` nodes killed before the start, the lock is still taken on the
/// others and released there; the job runs and the wrapper exits 0.
#[track_caller]
fn runs_with_nodes_down(n: usize, down: usize) {
    let mut nodes = start_nodes(n);
    for node in &mut nodes[..down] {
        node.stop();
    }
    let dir = TempDir::new("redlock-down");
    let holder = hold(quorum(&urls(&nodes)).args(["-k", "down"]), &dir, "job");
    let token = dir.read("job.token");
    let up: Vec<&RedisServer> = nodes[down..].iter().collect();
    assert_held_on(&up, "down", &token);
    holder.let_go();
    let out = holder.wait();
    out.assert_code(0).assert_stderr_lacks("lost");
    assert_empty(&up);
}

#[test]
fn two_of_three_masters_are_enough() {
    runs_with_nodes_down(3, 1);
}

#[test]
fn three_of_five_masters_are_enough() {
    runs_with_nodes_down(5, 2);
}

/// With a majority down from the start the command never runs: exit 125, naming the
/// shortfall, even when the wrapper would wait for a busy lock.
#[test]
fn a_majority_down_before_the_start_runs_nothing() {
    let mut nodes = start_nodes(3);
    nodes[0].stop();
    nodes[1].stop();
    let dir = TempDir::new("redlock-majority-down");
    let ran = dir.join("ran");
    let out = quorum(&urls(&nodes))
        .args(["-k", "md", "-t", "1s", "--", "touch"])
        .arg(&ran)
        .run();
    out.assert_code(125)
        .assert_stderr_contains("too few Redis nodes could be reached")
        .assert_stderr_contains(&format!("{}: cannot connect", nodes[0].url()))
        .assert_stderr_contains(&format!("{}: cannot connect", nodes[1].url()))
        .assert_stderr_prefixed();
    assert!(!ran.exists(), "the command ran without a majority");
    // The live node's key is deleted before the wrapper leaves when the node answers within
    // the few milliseconds a decided round still listens (the usual case); on a loaded
    // machine it may answer later, and then its key must at least go by its TTL.
    let stray = nodes[2].lock_value("md");
    eprintln!("majority down: what the attempt left on the live node: {stray:?}");
    wait_until(Duration::from_secs(5), "the live node to be empty", || {
        nodes[2].dbsize() == 0
    });
}

/// A lock held by another holder on a majority is busy (75 with `--no-wait`), even though
/// one node is free, and with a node down too. The holder's keys are untouched; what the
/// attempt took on the free node is gone within its TTL at the latest.
#[test]
fn a_lock_held_on_a_majority_is_busy() {
    let mut nodes = start_nodes(3);
    let dir = TempDir::new("redlock-busy");
    // The holder has two of the three nodes (it knows only those two), and no renewal
    // comes due while a node is down.
    let holder = hold(
        quorum(&urls(&nodes[..2])).args(["-t", "120s", "-k", "busy"]),
        &dir,
        "holder",
    );
    let held = nodes[0].lock_value("busy").expect("holder's key");
    let three = urls(&nodes);
    let out = quorum(&three)
        .args(["-k", "busy", "-t", "1s", "--no-wait", "--", "true"])
        .run();
    out.assert_code(75).assert_stderr_contains("not waiting");
    // Deleted before the wrapper leaves when the free node answers within the few
    // milliseconds a decided round still listens (the usual case); on a loaded machine it
    // may answer later, and then its key must at least go by its TTL.
    let stray = nodes[2].lock_value("busy");
    eprintln!("busy: what the attempt left on the free node: {stray:?}");
    wait_until(Duration::from_secs(5), "the free node to be empty", || {
        nodes[2].dbsize() == 0
    });

    // The free node down: still busy (not "unreachable"), from a majority of answers.
    nodes[2].stop();
    let out = quorum(&three)
        .args(["-k", "busy", "--no-wait", "--", "true"])
        .run();
    out.assert_code(75).assert_stderr_contains("not waiting");
    // One of the holder's nodes down instead, the free node up: the same.
    nodes[2].restart();
    nodes[1].stop();
    let out = quorum(&three)
        .args(["-k", "busy", "-t", "1s", "--no-wait", "--", "true"])
        .run();
    out.assert_code(75).assert_stderr_contains("not waiting");
    assert_eq!(nodes[0].lock_value("busy"), Some(held));
    wait_until(Duration::from_secs(5), "the free node to be empty", || {
        nodes[2].dbsize() == 0
    });
    holder.let_go();
    holder.wait().assert_code(0);
}

/// With one node down, the holder's node answering after the free one still makes the
/// lock busy (75): a failed node is no answer, so the round listens to the node that
/// decides instead of giving it a straggler's few milliseconds and calling the majority
/// out of reach (125; seen under load in the server matrix).
#[test]
fn a_busy_node_slower_than_a_dead_one_is_heard() {
    let mut nodes = start_nodes(3);
    let dir = TempDir::new("redlock-slow-busy");
    let holder = hold(
        quorum(&urls(&nodes[..1])).args(["-t", "120s", "-k", "slow"]),
        &dir,
        "holder",
    );
    let held = nodes[0].lock_value("slow").expect("holder's key");
    nodes[1].stop();
    // The holder's node answers only once the free node has taken the key (an event of
    // the round, not a timer), long after a straggler's wait.
    nodes[0].freeze();
    let attempt = quorum(&urls(&nodes))
        .args(["-k", "slow", "-t", "6s", "--no-wait", "--", "true"])
        .spawn();
    wait_until(Duration::from_secs(10), "the free node to be taken", || {
        nodes[2].lock_value("slow").is_some()
    });
    // Well past a straggler's wait (20 ms, or twice the round's time so far), well within
    // the attempt's budget (a third of the TTL: 2 s).
    std::thread::sleep(Duration::from_millis(300));
    nodes[0].thaw();
    attempt
        .wait()
        .assert_code(75)
        .assert_stderr_contains("not waiting");
    assert_eq!(nodes[0].lock_value("slow"), Some(held));
    wait_until(Duration::from_secs(10), "the free node to be empty", || {
        nodes[2].dbsize() == 0
    });
    holder.let_go();
    holder.wait().assert_code(0);
}

/// A stale value of another holder on one node of three (with no TTL) neither blocks the
/// lock nor is ever touched, though every renewal finds that node "not ours" and tries to
/// take it back.
#[test]
fn another_holders_value_on_a_minority_is_left_alone() {
    let _timing = timing_sensitive();
    let nodes = start_nodes(3);
    let stale = "{\"token\":\"00000000-0000-4000-8000-000000000000\",\"fence\":7}";
    nodes[0].set(&format!("{PREFIX}stale"), stale);
    let dir = TempDir::new("redlock-stale");
    let holder = hold(
        quorum(&urls(&nodes)).args(["-t", "1s", "-k", "stale"]),
        &dir,
        "job",
    );
    let calls = evalsha_calls(&nodes[1]);
    wait_for_renewals(&nodes[1], calls, 4);
    assert_eq!(nodes[0].lock_value("stale").as_deref(), Some(stale));
    assert_eq!(nodes[0].pttl(&format!("{PREFIX}stale")), -1);
    holder.let_go();
    holder.wait().assert_code(0).assert_stderr_lacks("lost");
    assert_eq!(nodes[0].lock_value("stale").as_deref(), Some(stale));
    assert_empty(&[&nodes[1], &nodes[2]]);
}

// ---------------------------------------------------------------------------------------------
// 4-6. Nodes lost mid-run

/// `kill` of `n` nodes SIGKILLed while a job holds the lock with a 1s lease: it keeps
/// running through several renewals on the others and ends with its own status.
#[track_caller]
fn survives_a_minority_killed_mid_run(n: usize, kill: usize) {
    let _timing = timing_sensitive();
    let mut nodes = start_nodes(n);
    let dir = TempDir::new("redlock-minority");
    let holder = hold(
        quorum(&urls(&nodes)).args(["-t", "1s", "-k", "minority"]),
        &dir,
        "job",
    );
    let token = dir.read("job.token");
    for node in &mut nodes[..kill] {
        node.stop();
    }
    let survivor = &nodes[n - 1];
    // Each renewal extends a 1s lease by a full second: six of them span about two seconds,
    // longer than any lease the job had when the nodes died.
    wait_for_renewals(survivor, evalsha_calls(survivor), 6);
    let up: Vec<&RedisServer> = nodes[kill..].iter().collect();
    assert_held_on(&up, "minority", &token);
    assert!(!dir.exists("job.term"), "the job was signalled");
    holder.let_go();
    holder.wait().assert_code(0).assert_stderr_lacks("lost");
    assert_empty(&up);
}

#[test]
fn one_of_three_masters_killed_mid_run_changes_nothing() {
    survives_a_minority_killed_mid_run(3, 1);
}

#[test]
fn two_of_five_masters_killed_mid_run_change_nothing() {
    survives_a_minority_killed_mid_run(5, 2);
}

/// One of three nodes frozen (SIGSTOP) mid-run: it neither answers nor fails, so every
/// request to it waits out `--redis-timeout` (5s). The lease is kept on the others through
/// several renewals, and the job's end is not held up for that node either.
#[test]
fn a_master_frozen_mid_run_neither_loses_the_lock_nor_delays_the_exit() {
    let _timing = timing_sensitive();
    let nodes = start_nodes(3);
    let dir = TempDir::new("redlock-frozen");
    let holder = hold(
        quorum(&urls(&nodes)).args(["-t", "1s", "-k", "frozen"]),
        &dir,
        "job",
    );
    let token = dir.read("job.token");
    nodes[0].freeze();
    wait_for_renewals(&nodes[2], evalsha_calls(&nodes[2]), 6);
    assert_held_on(&[&nodes[1], &nodes[2]], "frozen", &token);
    assert!(!dir.exists("job.term"), "the job was signalled");
    holder.let_go();
    let go = Instant::now();
    let out = holder.wait();
    let exit = go.elapsed();
    eprintln!("frozen node: the wrapper exited {exit:.1?} after its job was let go");
    out.assert_code(0).assert_stderr_lacks("lost");
    assert!(
        exit < Duration::from_secs(3),
        "the exit waited {exit:?} for the frozen node"
    );
    assert_empty(&[&nodes[1], &nodes[2]]);
    nodes[0].thaw();
}

/// Two of three nodes SIGKILLed mid-run: the lease cannot be confirmed, the job gets
/// SIGTERM and the wrapper exits 76, saying the lock was lost.
#[test]
fn a_majority_killed_mid_run_loses_the_lock() {
    let _timing = timing_sensitive();
    let mut nodes = start_nodes(3);
    let dir = TempDir::new("redlock-majority");
    let holder = hold(
        quorum(&urls(&nodes)).args(["-t", "1s", "-k", "majority"]),
        &dir,
        "job",
    );
    nodes[0].stop();
    nodes[1].stop();
    let killed = Instant::now();
    let out = holder.wait_within(Duration::from_secs(15));
    out.assert_code(76).assert_stderr_contains("lock lost");
    assert!(dir.exists("job.term"), "the job was not sent SIGTERM");
    eprintln!(
        "majority lost: wrapper exited {:?} after the kill",
        killed.elapsed()
    );
    // The third node's copy is released or expires by its TTL; it never outlives it.
    wait_until(Duration::from_secs(5), "the survivor's key to go", || {
        nodes[2].dbsize() == 0
    });
}

/// One of three nodes restarted empty while the job runs: the other two confirm every
/// renewal, so nothing is lost; the restarted node gets the key back, and keeps it (it is
/// renewed there, not taken again and again).
#[test]
fn a_master_restarted_empty_gets_the_key_back() {
    let _timing = timing_sensitive();
    let mut nodes = start_nodes(3);
    let dir = TempDir::new("redlock-restart");
    let holder = hold(
        quorum(&urls(&nodes)).args(["-t", "1s", "-k", "restart"]),
        &dir,
        "job",
    );
    let token = dir.read("job.token");
    nodes[2].stop();
    nodes[2].restart();
    assert_eq!(nodes[2].dbsize(), 0, "restarted with data");
    let restarted = Instant::now();
    let mut back = None;
    wait_until(
        Duration::from_secs(15),
        "the key back on the restarted node",
        || {
            back = nodes[2].lock_value("restart");
            back.is_some()
        },
    );
    let back = back.unwrap();
    eprintln!(
        "restart: the key was back {:?} after the restart",
        restarted.elapsed()
    );
    assert_eq!(token_of(&back), token);
    // Renewed there from now on: the same value (an acquisition would write a new fence)
    // after more than a lease's worth of renewals.
    wait_for_renewals(&nodes[2], evalsha_calls(&nodes[2]), 6);
    assert_eq!(nodes[2].lock_value("restart"), Some(back));
    assert_held_on(&nodes.iter().collect::<Vec<_>>(), "restart", &token);
    assert!(!dir.exists("job.term"), "the job was signalled");
    holder.let_go();
    holder.wait().assert_code(0).assert_stderr_lacks("lost");
    assert_empty(&nodes.iter().collect::<Vec<_>>());
}

/// The key is deleted on some nodes while a short command runs, and the command ends before
/// any renewal could notice. Gone from a majority (2 of 3), the lock was lost: the release
/// says so and the run exits 76. Gone from a minority (1 of 3), a majority held it
/// throughout: the command's status, no loss.
#[test]
fn a_release_that_finds_the_lock_gone_from_a_majority_reports_it_lost() {
    let nodes = start_nodes(3);
    let urls = urls(&nodes);
    let dir = TempDir::new("redlock-release-lost");
    for (name, gone_from) in [("majority", 2), ("minority", 1)] {
        let holder = Job::new(&dir, name)
            .exit_code(3)
            .start(quorum(&urls).args(["-k", name, "-t", "30s"]));
        for node in &nodes[..gone_from] {
            node.del(&format!("{PREFIX}{name}"));
        }
        holder.let_go();
        let out = holder.wait();
        if gone_from == 2 {
            out.assert_code(76)
                .assert_stderr_contains("lock lost")
                .assert_stderr_contains("redlock:majority");
        } else {
            out.assert_code(3).assert_stderr_lacks("lock lost");
        }
        assert_empty(&nodes.iter().collect::<Vec<_>>());
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Fences

/// A fence counter ahead on one node only (10 on A, 0 on B and C) is the one handed out
/// (11), and is first written to the others; a later majority without A then still counts
/// past it (12; without that write it would count from B's and C's own 1 to 2).
///
/// A's answer must be among the first majority to come back to be counted at all (the
/// round ends as soon as a majority took the lock), so B and C are reached through a proxy
/// that delays their replies.
#[test]
fn fences_only_grow_across_different_majorities() {
    let mut nodes = start_nodes(3);
    nodes[0].set(&fence_key("f"), "10");
    for node in &nodes[1..] {
        node.set(&fence_key("f"), "0");
    }
    let dir = TempDir::new("redlock-fence");
    let slow: Vec<FaultProxy> = nodes[1..]
        .iter()
        .map(|node| {
            let proxy = FaultProxy::start(node.port());
            proxy.latency(Duration::ZERO, Duration::from_millis(200));
            proxy
        })
        .collect();
    let first = [nodes[0].url(), slow[0].url(), slow[1].url()];
    let holder = hold(quorum(&first).args(["-k", "f"]), &dir, "first");
    assert_eq!(fence_of(&dir, "first"), 11);
    holder.let_go();
    holder.wait().assert_code(0);
    drop(slow);
    assert_eq!(fence_counter(&nodes[0], "f"), 11);
    for node in &nodes[1..] {
        let counter = fence_counter(node, "f");
        assert!(
            counter >= 11,
            "port {}: fence counter {counter}",
            node.port()
        );
    }

    nodes[0].stop();
    let holder = hold(quorum(&urls(&nodes)).args(["-k", "f"]), &dir, "second");
    assert_eq!(fence_of(&dir, "second"), 12);
    holder.let_go();
    holder.wait().assert_code(0);
    assert_empty(&[&nodes[1], &nodes[2]]);
}

/// A majority that lost its data (flushed) while the node that kept the counter is down
/// still hands out a fence above every earlier one.
#[test]
fn fences_grow_when_a_majority_forgot_its_counters() {
    let mut nodes = start_nodes(3);
    let dir = TempDir::new("redlock-forgot");
    let holder = hold(quorum(&urls(&nodes)).args(["-k", "g"]), &dir, "first");
    let first = fence_of(&dir, "first");
    holder.let_go();
    holder.wait().assert_code(0);
    for node in &nodes[1..] {
        node.query::<()>(&["FLUSHALL"]);
    }
    nodes[0].stop();
    let holder = hold(quorum(&urls(&nodes)).args(["-k", "g"]), &dir, "second");
    let second = fence_of(&dir, "second");
    eprintln!("fences {first}, then {second} from the flushed majority");
    assert!(second > first, "{second} after {first}");
    holder.let_go();
    holder.wait().assert_code(0);
}

// ---------------------------------------------------------------------------------------------
// 8. Hand-over

/// How a node of three is lost in [`handover`].
#[derive(Clone, Copy, Debug)]
enum Lost {
    None,
    BeforeTheStart,
    WhileWaiting,
    /// Frozen (SIGSTOP) before the start: it accepts connections and never answers.
    Frozen,
}

/// A holder with a 120s lease and a waiter behind it on three nodes; `lost` says when one
/// node is killed. Returns how long after the holder's job ended the waiter's job started.
/// Without a notice the waiter would try again only when the holder's lease ran out.
fn handover(lost: Lost) -> Duration {
    handover_over(start_nodes(3), lost)
}

/// [`handover`] over the three `nodes` given.
fn handover_over(mut nodes: Vec<RedisServer>, lost: Lost) -> Duration {
    match lost {
        Lost::BeforeTheStart => nodes[0].stop(),
        Lost::Frozen => nodes[0].freeze(),
        Lost::None | Lost::WhileWaiting => {}
    }
    let urls = urls(&nodes);
    let dir = TempDir::new("redlock-handover");
    let (holder_job, waiter_script) = handover_jobs(&dir);
    let lock = ["-k", "handover", "-t", "120s"];
    let holder = holder_job.start(quorum(&urls).args(lock));
    let waiter = quorum(&urls)
        .args(lock)
        .arg("--")
        .arg(waiter_script)
        .spawn();
    // The waiter listens on at least a majority of the nodes (it may skip a slow one).
    let live = match lost {
        Lost::BeforeTheStart | Lost::Frozen => &nodes[1..],
        Lost::None | Lost::WhileWaiting => &nodes[..],
    };
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        live.iter()
            .filter(|node| !subscriber_ids(node).is_empty())
            .count()
            >= 2
    });
    if let Lost::WhileWaiting = lost {
        let before: Vec<BTreeSet<String>> = nodes[1..].iter().map(subscriber_ids).collect();
        nodes[0].stop();
        // Its subscription to the killed node broke: it subscribes again to the others.
        wait_until(
            Duration::from_secs(15),
            "the waiter to subscribe again",
            || {
                nodes[1..]
                    .iter()
                    .zip(&before)
                    .all(|(node, old)| subscriber_ids(node).difference(old).next().is_some())
            },
        );
    }
    assert!(
        !dir.exists("waiter_start"),
        "the waiter ran while the lock was held"
    );
    holder.let_go();
    holder.wait().assert_code(0);
    waiter.wait_within(Duration::from_secs(30)).assert_code(0);
    assert_empty(&nodes[1..].iter().collect::<Vec<_>>());
    handover_delay(&dir)
}

/// The waiter starts within a generous bound of the holder's end: far sooner than the 80s
/// it would wait without a release notice, with all nodes, with one down from the start,
/// with one killed while it waits, and with one frozen (no answer, no error: a waiter that
/// waited on it would start only after `--redis-timeout`, 5s).
#[test]
fn a_waiter_is_woken_by_the_release_notice_with_a_node_down() {
    let _timing = timing_sensitive();
    for lost in [
        Lost::None,
        Lost::BeforeTheStart,
        Lost::WhileWaiting,
        Lost::Frozen,
    ] {
        let delay = handover(lost);
        eprintln!("redlock hand-over ({lost:?} lost): {delay:.1?}");
        assert!(
            delay < Duration::from_secs(3),
            "waiter started {delay:?} after the holder's job ended ({lost:?} lost)"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 9. Operators

/// `status`, `list` and `release --force` over three nodes, one of which has a password:
/// the quorum's verdict, then one line per node; with a node down, that node's line says
/// why; with two down, no verdict (125). A forced release makes the holder lose the lock.
#[test]
fn status_list_and_release_show_every_node() {
    let password = "quorum-secret-pw";
    let mut nodes = vec![
        RedisServer::start(),
        RedisServer::start_with_password(password),
        RedisServer::start(),
    ];
    let urls = urls(&nodes);
    let shown: Vec<String> = nodes
        .iter()
        .map(|node| {
            let port = node.port();
            if node.url().contains(password) {
                format!("redis://:***@127.0.0.1:{port}")
            } else {
                format!("redis://127.0.0.1:{port}")
            }
        })
        .collect();
    let dir = TempDir::new("redlock-status");

    let out = admin(&urls, &["status", "-k", "st"]).run();
    out.assert_code(1);
    let text = out.stdout_str();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("redlock:st is free (on all 3 nodes)"));
    for node in &shown {
        assert_eq!(
            lines.next(),
            Some(format!("  {node}: free").as_str()),
            "{text}"
        );
    }

    // Counters that agree, as after a first acquisition (a missing one starts from each
    // server's own clock, and the largest is then written to the others).
    for node in &nodes {
        node.set(&fence_key("st"), "0");
    }
    let holder = hold(quorum(&urls).args(["-t", "3s", "-k", "st"]), &dir, "job");
    let fence = fence_of(&dir, "job");
    let token = dir.read("job.token");

    let out = admin(&urls, &["status", "-k", "st"]).run();
    out.assert_code(0).assert_not_leaked(password);
    let text = out.stdout_str();
    eprintln!("status over 3 nodes:\n{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let who = format!("pid {} `{}`", holder.pid(), program_of(holder.script()));
    assert!(
        lines[0].starts_with("redlock:st held by ")
            && lines[0].contains(&who)
            && lines[0].ends_with(&format!(", fence {fence} (on 3 of 3 nodes)")),
        "{text}"
    );
    for (line, node) in lines[1..].iter().zip(&shown) {
        assert!(
            line.starts_with(&format!("  {node}: ")) && line.contains(&who),
            "{text}"
        );
    }

    let out = admin(&urls, &["status", "-k", "st", "--json"]).run();
    out.assert_code(0);
    let status = json_of(&out);
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(
        status["quorum"],
        serde_json::json!({"nodes": 3, "majority": 2, "holding": 3})
    );
    assert_eq!(status["holders"][0]["token"], token.as_str(), "{status}");
    let per_node = status["nodes"].as_array().expect("nodes is an array");
    assert_eq!(per_node.len(), 3, "{status}");
    for (entry, node) in per_node.iter().zip(&shown) {
        assert_eq!(entry["redis"], node.as_str(), "{status}");
        assert_eq!(entry["holders"][0]["token"], token.as_str(), "{status}");
    }

    // One node down: still held, on 2 of 3; that node cannot be read.
    nodes[2].stop();
    let out = admin(&urls, &["status", "-k", "st"]).run();
    out.assert_code(0).assert_not_leaked(password);
    let text = out.stdout_str();
    eprintln!("status with a node down:\n{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].ends_with("(on 2 of 3 nodes)"), "{text}");
    assert!(
        lines[3].starts_with(&format!("  {}: cannot read: ", shown[2])),
        "{text}"
    );
    let out = admin(&urls, &["status", "-k", "st", "--json"]).run();
    out.assert_code(0);
    let status = json_of(&out);
    assert_eq!(status["quorum"]["holding"], 2, "{status}");
    assert!(status["nodes"][2]["error"].is_string(), "{status}");

    let out = admin(&urls, &["list"]).run();
    out.assert_code(0)
        .assert_stderr_contains(&format!("cannot list the locks on {}", shown[2]))
        .assert_not_leaked(password);
    let text = out.stdout_str();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("redlock:st held by ") && text.trim_end().ends_with("(on 2 of 3 nodes)"),
        "{text}"
    );
    let out = admin(&urls, &["list", "--json"]).run();
    out.assert_code(0);
    let list = json_of(&out);
    assert_eq!(list[0]["key"], "redlock:st", "{list}");
    assert_eq!(list[0]["quorum"]["holding"], 2, "{list}");

    // Release: refused without --force; with it, deleted on both nodes that answer, and the
    // holder finds the lock gone at its next renewal.
    let out = admin(&urls, &["release", "-k", "st"]).run();
    out.assert_code(125).assert_stderr_contains("--force");
    assert!(nodes[0].lock_value("st").is_some());
    let out = admin(&urls, &["release", "-k", "st", "--force"]).run();
    out.assert_code(0)
        .assert_stderr_contains(&format!("not released on {}", shown[2]))
        .assert_not_leaked(password);
    let text = out.stdout_str();
    for node in &shown[..2] {
        assert!(
            text.contains(&format!("released redlock:st on {node}, held by ")),
            "{text}"
        );
    }
    assert_empty(&[&nodes[0], &nodes[1]]);
    let out = holder.wait_within(Duration::from_secs(15));
    out.assert_code(76).assert_stderr_contains("lock lost");

    let out = admin(&urls, &["status", "-k", "st"]).run();
    out.assert_code(1);
    assert!(
        out.stdout_str()
            .starts_with("redlock:st is free (on the 2 of 3 nodes that answered)"),
        "{}",
        out.stdout_str()
    );
    // Nothing to release is exit 1, as `status` said, though a node cannot be read.
    for release in [
        &["release", "-k", "st"][..],
        &["release", "-k", "st", "--force"],
    ] {
        let out = admin(&urls, release).run();
        out.assert_code(1)
            .assert_stderr_contains(&format!("could not read {}", shown[2]));
        assert_eq!(
            out.stdout_str(),
            "redlock:st is free on the 2 of 3 nodes that answered; nothing to release\n"
        );
    }

    // Two down: too few answer to tell.
    nodes[1].stop();
    let out = admin(&urls, &["status", "-k", "st"]).run();
    out.assert_code(125)
        .assert_stderr_contains("too few Redis nodes answered");
    assert!(
        out.stdout_str()
            .starts_with("redlock:st: cannot tell whether it is held"),
        "{}",
        out.stdout_str()
    );
    let out = admin(&urls, &["status", "-k", "st", "--json"]).run();
    out.assert_code(125);
    assert_eq!(json_of(&out)["held"], Value::Null);
    admin(&urls, &["list"]).run().assert_code(125);
}

/// `--limit 2` and `--fair` need one deployment, and one server given twice is refused:
/// exit 125, nothing run, nothing written.
#[test]
fn limit_fair_and_a_repeated_server_are_refused() {
    let nodes = start_nodes(3);
    let urls = urls(&nodes);
    let twice = [urls[0].clone(), urls[1].clone(), urls[0].clone()];
    for (wrapper, reason) in [
        (
            quorum(&urls).args(["--limit", "2"]),
            "--limit needs a single",
        ),
        (quorum(&urls).arg("--fair"), "--fair needs a single"),
        (quorum(&twice), "are the same server"),
    ] {
        wrapper
            .args(["-k", "refused", "--", "true"])
            .run()
            .assert_code(125)
            .assert_stderr_contains(reason);
    }
    for node in &nodes {
        assert_eq!(
            node.query::<Vec<String>>(&["KEYS", "*"]),
            Vec::<String>::new()
        );
    }
}

/// One server twice in the quorum is refused however it is spelled (`127.1` beside
/// `127.0.0.1`, its unix socket beside its TCP port): it is known by its `run_id`, and
/// would otherwise count twice towards the majority. Exit 125, the job never runs, and
/// nothing is left behind.
#[test]
fn one_server_under_two_spellings_is_refused() {
    let nodes = start_nodes(2);
    let dir = TempDir::new("redlock-twice");
    let ran = dir.join("ran");
    let port = nodes[0].port();
    for twice in [
        format!("redis://127.1:{port}"),
        format!("redis+unix://{}", nodes[0].socket().display()),
    ] {
        let urls = [nodes[0].url(), twice.clone(), nodes[1].url()];
        let out = quorum(&urls)
            .args(["-k", "twice", "--shell"])
            .arg(format!("touch '{}'", ran.display()))
            .run();
        eprintln!(
            "{twice}: exit {:?}, {}",
            out.status.code(),
            out.stderr.trim()
        );
        out.assert_code(125)
            .assert_stderr_contains("the same server")
            .assert_stderr_prefixed();
        assert!(!ran.exists(), "the job ran over one server counted twice");
        for node in &nodes {
            assert!(!node.exists(&format!("{PREFIX}twice")), "the lock was left");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 10. Cost

/// The median time of `redlock-run -- true` over five nodes against one. Speed is judged by
/// the benchmark; this only catches a quorum that waits on something it should not.
#[test]
fn five_masters_cost_little_more_than_one() {
    const RUNS: usize = 20;
    let _timing = timing_sensitive();
    let nodes = start_nodes(5);
    let five = urls(&nodes);
    let one = &five[..1];
    let (mut single, mut quorum_times) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        for (urls, times) in [(one, &mut single), (&five[..], &mut quorum_times)] {
            let out = quorum(urls).args(["-k", "cost", "--", "true"]).run();
            out.assert_code(0);
            times.push(out.elapsed);
        }
    }
    let (single, quorum_median) = (median(single), median(quorum_times));
    eprintln!(
        "redlock cost: median of {RUNS} runs of `-- true`: 1 node {single:.1?}, \
         5 nodes {quorum_median:.1?}"
    );
    assert!(
        quorum_median < single * 10 + Duration::from_millis(50),
        "5 nodes {quorum_median:?} against 1 node {single:?}"
    );
}

/// Meeting a busy lock costs no more than the round trips: `--no-wait` exits 75 at once and
/// `--wait 1s` gives up after about a second, however long `--redis-timeout` is (a failed
/// attempt that took no node has nothing to wait for before leaving).
#[test]
fn a_busy_quorum_is_left_at_once() {
    let nodes = start_nodes(3);
    let urls = urls(&nodes);
    let dir = TempDir::new("redlock-busy-fast");
    let holder = hold(quorum(&urls).args(["-k", "fast"]), &dir, "holder");
    let started = Instant::now();
    quorum(&urls)
        .args([
            "-k",
            "fast",
            "--redis-timeout",
            "20s",
            "--no-wait",
            "--",
            "true",
        ])
        .run()
        .assert_code(75);
    let no_wait = started.elapsed();
    let started = Instant::now();
    quorum(&urls)
        .args([
            "-k",
            "fast",
            "--redis-timeout",
            "20s",
            "--wait",
            "1s",
            "--",
            "true",
        ])
        .run()
        .assert_code(75);
    let waited = started.elapsed();
    eprintln!("busy quorum: --no-wait left after {no_wait:.1?}, --wait 1s after {waited:.1?}");
    // The timeout is 20 s: waiting it out would blow both bounds by far.
    assert!(
        no_wait < Duration::from_secs(5),
        "--no-wait took {no_wait:?}"
    );
    assert!(waited < Duration::from_secs(6), "--wait 1s took {waited:?}");
    holder.let_go();
    holder.wait().assert_code(0);
}

/// Two waiters behind one holder, one of whose failed attempts was announced: after the
/// holder, one waiter runs, and when it lets go the other is woken by that release, not by
/// the end of a TTL (a waiter once took a contender's real release for a copy of its
/// failed attempt's notice and slept through it).
#[test]
fn every_release_wakes_the_waiters_once() {
    let nodes = start_nodes(3);
    let all = urls(&nodes);
    let dir = TempDir::new("redlock-every-release");
    // The holder has two nodes; each waiter's attempts take the third and let it go,
    // announcing that release to the other.
    let holder = hold(
        quorum(&all[..2]).args(["-t", "60s", "-k", "wake"]),
        &dir,
        "holder",
    );
    let waiters: Vec<Running> = ["first", "second"]
        .iter()
        .map(|name| {
            let script = dir.script(
                name,
                &format!(
                    "date +%s.%N > '{start}'\nsleep 0.2\ndate +%s.%N > '{end}'",
                    start = dir.join(&format!("{name}.start")).display(),
                    end = dir.join(&format!("{name}.end")).display()
                ),
            );
            quorum(&all)
                .args(["-k", "wake", "-t", "60s", "--"])
                .arg(script)
                .spawn()
        })
        .collect();
    // Both have tried (taking and letting go of the third node) before the release.
    wait_until(Duration::from_secs(15), "both waiters to listen", || {
        nodes[2].subscribed_clients() >= 2
    });
    // Letting go behind a holder that has a majority wakes no one: the waiters do not set
    // each other off, round and round, while the holder holds.
    let before = evalsha_calls(&nodes[2]);
    std::thread::sleep(Duration::from_secs(1)); // The quiet window: time must pass here.
    let during = evalsha_calls(&nodes[2]) - before;
    eprintln!("scripts run on the free node in a 1 s wait by two waiters: {during}");
    assert!(
        during <= 8,
        "the waiters kept trying: {during} scripts in 1 s"
    );
    holder.let_go();
    holder.wait().assert_code(0);
    for waiter in waiters {
        waiter.wait_within(Duration::from_secs(30)).assert_code(0);
    }
    let times = |name: &str| {
        let start = parse_epoch(&dir.read(&format!("{name}.start")));
        let end = parse_epoch(&dir.read(&format!("{name}.end")));
        (start, end)
    };
    let ((a_start, a_end), (b_start, b_end)) = (times("first"), times("second"));
    let gap = if a_start < b_start {
        b_start - a_end
    } else {
        a_start - b_end
    };
    eprintln!(
        "second waiter started {:.1} ms after the first ended",
        gap * 1e3
    );
    assert!(gap >= 0.0, "the two waiters overlapped");
    // The lease is 60 s: a missed wake-up would wait for it.
    assert!(
        gap < 10.0,
        "the second waiter slept {gap:.1}s past the release"
    );
}

/// Over several nodes the fence handed out is the largest count, exact past 2^53, and it is
/// written to a majority (compared as digits, never as Lua's doubles).
#[test]
fn large_fences_are_exact_across_nodes() {
    let nodes = start_nodes(3);
    // 2^53 + 2: one more is odd, which a double cannot hold.
    nodes[0].set("{redlock:bf}:fence", "9007199254740994");
    nodes[1].set("{redlock:bf}:fence", "5");
    nodes[2].set("{redlock:bf}:fence", "9007199254740993");
    let out = Wrapper::bare()
        .args(r_args(&urls(&nodes)))
        .args(["-k", "bf", "--", "sh", "-c", "printf %s \"$REDLOCK_FENCE\""])
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout_str(), "9007199254740995");
    let recorded = nodes
        .iter()
        .filter(|node| node.get("{redlock:bf}:fence").as_deref() == Some("9007199254740995"))
        .count();
    assert!(recorded >= 2, "the fence is on {recorded} of 3 nodes");
}

/// One node's fence counter at `i64::MAX` (where `INCR` overflows) is named on that node and
/// never copied to the others: the lock is taken on the sane majority, again and again, with
/// fences that keep the sane counters' scale. With two such nodes of three, no majority can
/// count a fence: refused, named, exit 125.
#[test]
fn an_absurd_fence_counter_on_one_node_is_not_spread() {
    const ABSURD: &str = "9223372036854775807";
    let nodes = start_nodes(3);
    nodes[0].set(&fence_key("af"), ABSURD);
    nodes[1].set(&fence_key("af"), "1000");
    nodes[2].set(&fence_key("af"), "2000");
    // The sane nodes answer 100 ms late, so that the absurd node's answer is surely heard:
    // once two nodes said yes, a third that has not answered gets a straggler's few
    // milliseconds only, and a loaded machine could make that one look like a straggler.
    let slow: Vec<FaultProxy> = nodes[1..]
        .iter()
        .map(|node| FaultProxy::start(node.port()))
        .collect();
    for proxy in &slow {
        proxy.latency(Duration::ZERO, Duration::from_millis(100));
    }
    let through = [nodes[0].url(), slow[0].url(), slow[1].url()];
    let run = || {
        quorum(&through)
            .args(["-k", "af", "--", "sh", "-c", "printf %s \"$REDLOCK_FENCE\""])
            .run()
    };
    for expected in ["2001", "2002"] {
        let out = run();
        out.assert_code(0)
            .assert_stderr_contains(&fence_key("af"))
            .assert_stderr_contains(ABSURD)
            .assert_stderr_lacks("overflow");
        assert_eq!(out.stdout_str(), expected);
    }
    assert_eq!(nodes[0].get(&fence_key("af")).as_deref(), Some(ABSURD));
    for node in &nodes[1..] {
        let counter = fence_counter(node, "af");
        assert!(counter <= 2002, "an absurd counter spread: {counter}");
    }

    nodes[1].set(&fence_key("af"), ABSURD);
    let out = run();
    out.assert_code(125)
        .assert_stderr_prefixed()
        .assert_stderr_contains(&fence_key("af"))
        .assert_stderr_contains(ABSURD)
        .assert_stderr_lacks("overflow");
    assert_eq!(out.stdout_str(), "");
    assert!(nodes.iter().all(|node| node.lock_value("af").is_none()));
    // Its try counted one more there, and no further.
    let counter = fence_counter(&nodes[2], "af");
    assert!(counter < 10_000, "an absurd counter spread: {counter}");
}

// ---------------------------------------------------------------------------------------------
// 10. Many waiters

/// Every node queues the waiters in the same order (by when each joined, by its own
/// clock), so every node's release wakes the same waiter: a handoff costs each node a few
/// scripts, however many wait.
#[test]
fn a_handoff_costs_each_node_the_same_whatever_the_queue() {
    let _load = loading_the_machine();
    let nodes = start_nodes(3);
    let urls = urls(&nodes);
    let dir = TempDir::new("redlock-queue");
    let log = dir.join("log");
    let holder = hold(quorum(&urls).args(["-k", "q"]), &dir, "h");
    let waiters: Vec<Running> = (0..12)
        .map(|_| {
            quorum(&urls)
                .args(["-k", "q", "--shell"])
                .arg(format!("date +%s%N >> '{}'; sleep 0.005", log.display()))
                .spawn()
        })
        .collect();
    wait_until(
        Duration::from_secs(30),
        "every waiter to queue on every node",
        || {
            nodes
                .iter()
                .all(|node| node.zcard("{redlock:q}:queue") == 12)
        },
    );
    let scripts = |node: &RedisServer| -> u64 {
        node.command_stats()
            .iter()
            .filter(|(name, _)| name == "evalsha" || name == "eval")
            .map(|(_, calls)| calls)
            .sum()
    };
    let before: Vec<u64> = nodes.iter().map(scripts).collect();
    holder.let_go();
    holder.wait().assert_code(0);
    for waiter in waiters {
        waiter.wait().assert_code(0);
    }
    assert_eq!(fs::read_to_string(&log).unwrap().lines().count(), 12);
    for (node, before) in nodes.iter().zip(before) {
        let per_handoff = (scripts(node) - before) as f64 / 13.0;
        eprintln!("port {}: {per_handoff:.2} scripts a handoff", node.port());
        assert!(
            per_handoff <= 4.0,
            "port {}: {per_handoff:.2} scripts a handoff with 12 waiters",
            node.port()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 11. Mixed servers

/// The server binaries of [`mixed_nodes`], separated like `PATH`.
const MIXED_VAR: &str = "REDLOCK_TEST_MIXED_SERVERS";

/// Three masters, one per binary named in `$REDLOCK_TEST_MIXED_SERVERS` (`scripts/test`
/// names Redis 7.0, Redis 6.2 and Valkey 9), the default server making up the rest. Without
/// the variable (a plain `cargo test`) all three run the default server, said on stderr:
/// the test then shows only what the tests above do.
fn mixed_nodes() -> Vec<RedisServer> {
    let mut programs: Vec<Option<PathBuf>> = env::var_os(MIXED_VAR)
        .map(|list| {
            env::split_paths(&list)
                .filter(|path| !path.as_os_str().is_empty())
                .map(Some)
                .collect()
        })
        .unwrap_or_default();
    if programs.is_empty() {
        eprintln!("{MIXED_VAR} is not set: every node runs the default server");
    }
    programs.resize(programs.len().max(3), None);
    programs
        .into_iter()
        .map(|program| {
            RedisServer::start_with(ServerOptions {
                program,
                ..ServerOptions::default()
            })
        })
        .collect()
}

/// One lock over masters of different versions (the scripts, `SET PX`, pub/sub and the
/// fence counter behave alike on each): taken and released everywhere with a fence on each
/// node, busy while held, a waiter woken by the release notice, and contending wrappers
/// that never overlap.
#[test]
fn a_quorum_of_mixed_servers_works_as_one_of_a_kind() {
    let nodes = mixed_nodes();
    let versions: Vec<String> = nodes.iter().map(RedisServer::version).collect();
    eprintln!("redlock over mixed servers: {versions:?}");
    if env::var_os(MIXED_VAR).is_some() {
        let kinds: BTreeSet<&String> = versions.iter().collect();
        assert!(
            kinds.len() > 1,
            "{MIXED_VAR} names servers of one version: {versions:?}"
        );
    }
    acquires_on_every_node_and_cleans_up(&nodes, quorum);

    let urls = urls(&nodes);
    let dir = TempDir::new("redlock-mixed");
    let holder = hold(quorum(&urls).args(["-k", "mixed"]), &dir, "holder");
    quorum(&urls)
        .args(["-k", "mixed", "--no-wait", "--", "true"])
        .run()
        .assert_code(75)
        .assert_stderr_contains("not waiting");
    holder.let_go();
    holder.wait().assert_code(0);

    let delay = {
        let _timing = timing_sensitive();
        handover_over(mixed_nodes(), Lost::None)
    };
    eprintln!("redlock hand-over over mixed servers: {delay:.1?}");
    assert!(
        delay < Duration::from_secs(3),
        "waiter started {delay:?} after the holder's job ended"
    );
    let _load = loading_the_machine();
    contend(&nodes, 6, 5);
}

/// Several keys over a Redlock quorum (issue 32): each key a quorum of its own, held all at
/// once or the first free of a pool, and a busy key lets go of the others on every node.
#[test]
fn several_keys_and_pools_over_three_nodes() {
    let nodes = start_nodes(3);
    let urls = urls(&nodes);
    let dir = TempDir::new("redlock-keys");
    let b = hold(quorum(&urls).args(["-k", "b"]), &dir, "b");
    quorum(&urls)
        .args(["-k", "a", "-k", "b", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    for node in &nodes {
        assert!(!node.exists("redlock:a"), "a left held on a node");
    }
    let out = quorum(&urls)
        .args([
            "-k",
            "b",
            "-k",
            "a",
            "--any",
            "--",
            "sh",
            "-c",
            "echo $REDLOCK_NAME",
        ])
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout_str().trim(), "a");
    b.let_go();
    b.wait().assert_code(0);
    let out = quorum(&urls)
        .args([
            "-k",
            "a",
            "-k",
            "b",
            "--",
            "sh",
            "-c",
            "echo \"$REDLOCK_FENCES\"",
        ])
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout_str().trim().lines().count(), 2);
}
