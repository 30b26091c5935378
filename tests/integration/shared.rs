//! Shared mode (issue 32, part 1): `-s/--shared` holders hold a lock together, an exclusive
//! holder (`-x`, the default) excludes everyone, a waiting exclusive run is not starved by
//! new shared runs, wake-ups, losing one share, the usage errors, and the no-overlap checker
//! for mixed runs under stress and under a reply cut mid-acquire.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::deployments::{Cluster, SentinelSet};
use crate::support::*;

/// How long a holder's job may take to start once it is due: generous, for a loaded machine.
const START: Duration = Duration::from_secs(20);

/// The queued waiters of lock `k`.
fn queued(server: &RedisServer) -> i64 {
    server.zcard("{redlock:k}:queue")
}

/// Starts `wrapper -- <job NAME>` without waiting for it to run (it waits for the lock);
/// returns it and the file its job touches once it runs.
fn start_waiting(dir: &TempDir, name: &str, wrapper: Wrapper) -> (Running, PathBuf) {
    let job = Job::new(dir, name);
    let script = dir.script(name, &job.body());
    (
        wrapper.arg("--").arg(script).spawn(),
        dir.join(&format!("{name}.ready")),
    )
}

fn let_go(dir: &TempDir, name: &str) {
    std::fs::write(dir.join(&format!("{name}.go")), "").expect("writing the go file");
}

#[test]
fn many_shared_holders_hold_the_lock_together_each_with_its_own_token_and_fence() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-many");
    let mode = |name: &str| {
        format!(
            "echo \"$REDLOCK_MODE\" > '{}'",
            dir.join(&format!("{name}.mode")).display()
        )
    };
    let holders: Vec<Holder> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            Job::new(&dir, name)
                .first(&mode(name))
                .start(server.cmd().args(["-k", "k", "--shared"]))
        })
        .collect();
    let fences: Vec<u64> = ["a", "b", "c"].iter().map(|n| fence_of(&dir, n)).collect();
    assert!(fences[0] < fences[1] && fences[1] < fences[2], "{fences:?}");
    for name in ["a", "b", "c"] {
        assert_eq!(dir.read(&format!("{name}.mode")).trim(), "shared");
        let token = dir.read(&format!("{name}.token"));
        let share = server.hget("{redlock:k}:shares", token.trim());
        assert!(share.is_some_and(|share| share.contains("\"mode\":\"shared\"")));
    }
    // K holds the group's value: a plain SET NX by any client fails meanwhile.
    let set: Option<String> = server.query(&["SET", "redlock:k", "v", "NX", "PX", "10000"]);
    assert_eq!(set, None, "SET NX took the lock from the shared holders");
    let value = server.lock_value("k").expect("K holds the group's value");
    assert!(value.contains(":shared\""), "{value}");
    // An exclusive run is refused, and an exclusive one's REDLOCK_MODE is exclusive.
    server
        .cmd()
        .args(["-k", "k", "--no-wait", "--", "true"])
        .run()
        .assert_code(75)
        .assert_stderr_contains("held by shared holders (the first: ");
    for holder in holders {
        holder.let_go();
        holder.wait().assert_code(0);
    }
    assert!(!server.exists("redlock:k"), "{:?}", server.keys());
    assert!(!server.exists("{redlock:k}:shares"), "{:?}", server.keys());
    let out = server
        .cmd()
        .args(["-k", "k", "-x", "--", "sh", "-c", "echo $REDLOCK_MODE"])
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout_str().trim(), "exclusive");
}

#[test]
fn an_exclusive_holder_excludes_shared_runs() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-excluded");
    let writer = hold(server.cmd().args(["-k", "k"]), &dir, "writer");
    server
        .cmd()
        .args(["-k", "k", "--shared", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    writer.let_go();
    writer.wait().assert_code(0);
    server
        .cmd()
        .args(["-k", "k", "--shared", "--no-wait", "--", "true"])
        .run()
        .assert_code(0);
}

/// Shared A and B hold; exclusive X queues; a new shared C waits behind X (a --no-wait one
/// exits 75 naming X); X starts once A and B have ended, C only after X. The shares' TTL is
/// long: only a release's wake-up starts X in time.
#[test]
fn a_waiting_exclusive_run_is_not_starved_by_new_shared_runs() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-writer");
    let shared = || server.cmd().args(["-k", "k", "--shared", "--ttl", "60s"]);
    let a = hold(shared(), &dir, "a");
    let b = hold(shared(), &dir, "b");
    let (mut x, x_ready) = start_waiting(
        &dir,
        "x",
        server
            .cmd()
            .args(["-k", "k", "--label", "the-writer", "--ttl", "60s"]),
    );
    wait_until(START, "X queued", || queued(&server) == 1);
    let out = shared().args(["--no-wait", "--", "true"]).run();
    out.assert_code(75);
    out.assert_stderr_contains("kept for an exclusive run that is waiting: ")
        .assert_stderr_contains("the-writer");
    let (mut c, c_ready) = start_waiting(&dir, "c", shared());
    wait_until(START, "C queued", || queued(&server) == 2);
    assert!(!x_ready.exists() && !c_ready.exists());
    a.let_go();
    a.wait().assert_code(0);
    b.let_go();
    b.wait().assert_code(0);
    x.wait_for_file(&x_ready, START);
    assert!(!c_ready.exists(), "C ran beside the exclusive holder");
    let_go(&dir, "x");
    c.wait_for_file(&c_ready, START);
    let_go(&dir, "c");
    x.wait().assert_code(0);
    c.wait().assert_code(0);
}

/// An exclusive release wakes every queued shared waiter at once: they all hold together
/// long before the exclusive holder's TTL (60 s), when they would have looked again.
#[test]
fn an_exclusive_release_wakes_every_shared_waiter_at_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-wake");
    let writer = hold(
        server.cmd().args(["-k", "k", "--ttl", "60s"]),
        &dir,
        "writer",
    );
    let readers: Vec<(Running, PathBuf)> = ["r1", "r2", "r3"]
        .iter()
        .map(|name| start_waiting(&dir, name, server.cmd().args(["-k", "k", "-s"])))
        .collect();
    wait_until(START, "three shared waiters queued", || {
        queued(&server) == 3
    });
    writer.let_go();
    writer.wait().assert_code(0);
    let mut readers = readers;
    for (reader, ready) in &mut readers {
        reader.wait_for_file(ready, START);
    }
    // All three hold at once (none has been let go yet).
    for name in ["r1", "r2", "r3"] {
        let_go(&dir, name);
    }
    for (reader, _) in readers {
        reader.wait().assert_code(0);
    }
}

#[test]
fn a_share_deleted_by_force_exits_76_and_the_other_shares_carry_on() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-lost");
    let shared = || server.cmd().args(["-k", "k", "--shared", "--ttl", "3s"]);
    let a = hold(shared(), &dir, "a");
    let b = hold(shared(), &dir, "b");
    let token = dir.read("a.token");
    let _: i64 = server.query(&["HDEL", "{redlock:k}:shares", token.trim()]);
    a.wait_within(Duration::from_secs(30)).assert_code(76);
    // B still holds its share (its renewals succeed), and K is the group's.
    let b_token = dir.read("b.token");
    assert!(server.hget("{redlock:k}:shares", b_token.trim()).is_some());
    assert!(server.exists("redlock:k"));
    b.let_go();
    b.wait().assert_code(0);
    assert!(!server.exists("redlock:k"));
}

#[test]
fn a_killed_share_frees_the_lock_by_its_ttl_and_not_before() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-killed");
    let a = hold(
        server.cmd().args(["-k", "k", "--shared", "--ttl", "4s"]),
        &dir,
        "a",
    );
    signal(a.pid(), libc::SIGKILL);
    let _ = a.wait();
    // Its share stands until its TTL: an exclusive run finds the lock busy meanwhile.
    server
        .cmd()
        .args(["-k", "k", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    server
        .cmd()
        .args(["-k", "k", "--wait", "60s", "--", "true"])
        .run()
        .assert_code(0);
}

#[test]
fn redis_restarted_empty_under_a_shared_group_makes_every_share_exit_76() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("shared-restart");
    let shared = || server.cmd().args(["-k", "k", "--shared", "--ttl", "3s"]);
    let a = hold(shared(), &dir, "a");
    let b = hold(shared(), &dir, "b");
    server.restart();
    a.wait_within(Duration::from_secs(30)).assert_code(76);
    b.wait_within(Duration::from_secs(30)).assert_code(76);
}

#[test]
fn shared_usage_errors_exit_125_before_any_redis_command() {
    // Nothing listens there: an error about the connection would mean it got that far.
    let wrapper = || Wrapper::new("redis://127.0.0.1:1");
    let cases: [(&[&str], &str); 8] = [
        (&["-s", "-x"], "--shared cannot be used with --exclusive"),
        (&["-s", "--limit", "2"], "--limit above 1"),
        (&["-s", "-k", "b"], "several -k/--key"),
        (&["-s", "--once-per", "1h"], "--once-per"),
        (&["-s", "--fair"], "--fair"),
        (&["-s", "--replace"], "--replace"),
        (&["-s", "--supersede", "--wait", "1s"], "--supersede"),
        (&["-s", "--dry-run"], "--dry-run"),
    ];
    for (args, needle) in cases {
        wrapper()
            .args(["-k", "k"])
            .args(args)
            .args(["--", "true"])
            .run()
            .assert_code(125)
            .assert_stderr_contains(needle)
            .assert_stderr_contains("--shared");
    }
    Wrapper::new("redis://127.0.0.1:1")
        .args(["-r", "redis://127.0.0.1:2", "-r", "redis://127.0.0.1:3"])
        .args(["-k", "k", "--shared", "--", "true"])
        .run()
        .assert_code(125)
        .assert_stderr_contains("--shared needs a single Redis deployment");
}

/// Readers and writers of one lock, at random: no writer's section overlaps any other
/// section, and the lock is left free.
#[test]
fn mixed_shared_and_exclusive_runs_never_overlap_a_writer() {
    const WRAPPERS: usize = 8;
    const ROUNDS: usize = 5;
    let _load = loading_the_machine();
    let server = RedisServer::start();
    let dir = TempDir::new("shared-stress");
    let history = crate::support::history::History::new(&dir);
    let reader = history.section(&dir, "reader", "sleep 0.02");
    let writer = history.section(&dir, "writer", "sleep 0.01");
    let url = server.url();
    let turn = std::sync::atomic::AtomicUsize::new(0);
    run_in_parallel(WRAPPERS, ROUNDS, move || {
        let n = turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let wrapper = Wrapper::new(&url)
            .args(["-k", "k"])
            .timeout(Duration::from_secs(120));
        if n.is_multiple_of(3) {
            wrapper.args(["-x", "--"]).arg(&writer)
        } else {
            wrapper.args(["-s", "--"]).arg(&reader)
        }
    });
    let checked = history.check();
    checked
        .assert_count(WRAPPERS * ROUNDS)
        .assert_all_recorded();
    let bad: Vec<_> = checked
        .overlaps
        .iter()
        .filter(|overlap| overlap.involves("writer"))
        .collect();
    assert!(
        bad.is_empty(),
        "{} overlaps with a writer:\n{}",
        bad.len(),
        checked.describe()
    );
    assert!(!server.exists("redlock:k"), "{:?}", server.keys());
    assert!(!server.exists("{redlock:k}:shares"), "{:?}", server.keys());
}

/// A reply lost anywhere in a shared acquisition (the retry recognises the share as its
/// own) leaves no share behind once the run is over.
#[test]
fn a_reply_cut_in_a_shared_acquisition_leaves_no_stray_share() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-cut");
    for busy in [false, true] {
        let other = busy.then(|| hold(server.cmd().args(["-k", "k", "-s"]), &dir, "other"));
        for n in 0..4 {
            let proxy = proxy::FaultProxy::start(server.port());
            proxy.set_after(n, proxy::Fault::DropReplies);
            let mut run = Wrapper::new(&proxy.url())
                .args(["-v", "-k", "k", "-s", "--no-wait", "--ttl", "30s"])
                .args(["--redis-timeout", "400ms", "--", "true"])
                .spawn();
            while !run.has_exited() {
                if proxy.discarded().1 >= 1 {
                    proxy.pass();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let out = run.wait();
            let case = format!("busy={busy} n={n}: exit {:?}", out.status.code());
            eprintln!("{case}");
            let mine = || {
                let shares: i64 = server.query(&["HLEN", "{redlock:k}:shares"]);
                shares != i64::from(busy) || server.exists("redlock:k") != busy
            };
            let until = Instant::now() + Duration::from_secs(10);
            while mine() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(!mine(), "a stray share ({case}): {:?}", server.keys());
        }
        if let Some(other) = other {
            other.let_go();
            other.wait().assert_code(0);
        }
    }
}

#[test]
fn status_and_list_show_every_shared_holder_and_its_mode() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-status");
    let shared = |label: &str| server.cmd().args(["-k", "k", "--shared", "--label", label]);
    let a = hold(shared("reader-one"), &dir, "a");
    let b = hold(shared("reader-two"), &dir, "b");
    server
        .cmd()
        .args(["status", "-k", "k"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("redlock:k held by 2 shared holders:")
        .assert_stdout_contains("reader-one")
        .assert_stdout_contains("reader-two");
    let out = server.cmd().args(["status", "-k", "k", "--json"]).run();
    out.assert_code(0);
    let json: serde_json::Value = serde_json::from_str(&out.stdout_str()).expect("JSON");
    let holders = json["holders"].as_array().expect("holders");
    let mut tokens: Vec<&str> = holders
        .iter()
        .map(|holder| {
            assert_eq!(holder["mode"], "shared", "{holder}");
            holder["token"].as_str().expect("a token")
        })
        .collect();
    tokens.sort_unstable();
    let (ta, tb) = (dir.read("a.token"), dir.read("b.token"));
    let mut wanted = vec![ta.trim(), tb.trim()];
    wanted.sort_unstable();
    assert_eq!(tokens, wanted);
    let list = server.cmd().arg("list").run();
    list.assert_code(0)
        .assert_stdout_contains("redlock:k held by 2 shared holders:");
    assert!(
        !list.stdout_str().contains(":shares"),
        "{}",
        list.stdout_str()
    );
    // `metrics` counts every share as a holder.
    let out = server.cmd().arg("metrics").run();
    out.assert_code(0);
    let m = Exposition::parse(&out.stdout_str());
    assert_eq!(m.value("redlock_run_holders", &[("key", "k")]), Some(2.0));
    for holder in [a, b] {
        holder.let_go();
        holder.wait().assert_code(0);
    }
    // An exclusive holder's mode.
    let x = hold(server.cmd().args(["-k", "k"]), &dir, "x");
    let out = server.cmd().args(["status", "-k", "k", "--json"]).run();
    let json: serde_json::Value = serde_json::from_str(&out.stdout_str()).expect("JSON");
    assert_eq!(json["holders"][0]["mode"], "exclusive");
    x.let_go();
    x.wait().assert_code(0);
}

/// `release --force` takes out every share; each holder exits 76, and a waiting exclusive
/// run is woken at once (the shares' TTL is long).
#[test]
fn a_forced_release_of_a_shared_lock_takes_out_every_share_and_wakes_the_writer() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-forced");
    let shared = || server.cmd().args(["-k", "k", "--shared", "--ttl", "60s"]);
    let a = hold(shared(), &dir, "a");
    let b = hold(shared(), &dir, "b");
    let (mut x, x_ready) = start_waiting(&dir, "x", server.cmd().args(["-k", "k"]));
    wait_until(START, "X queued", || queued(&server) == 1);
    server
        .cmd()
        .args(["release", "-k", "k", "--force"])
        .run()
        .assert_code(0);
    x.wait_for_file(&x_ready, START);
    let_go(&dir, "x");
    x.wait().assert_code(0);
    a.wait_within(Duration::from_secs(90)).assert_code(76);
    b.wait_within(Duration::from_secs(90)).assert_code(76);
}

/// Readers, a writer that waits and a reader behind it, on a deployment whose lock lives on
/// `node` (`cmd` names it): the writer is woken by the last share's release (the shares'
/// TTL is long), and the reader behind it by the writer's.
fn readers_and_a_writer_on(cmd: &dyn Fn() -> Wrapper, node: &dyn Fn() -> i64, dir: &TempDir) {
    let shared = || cmd().args(["-k", "k", "--shared", "--ttl", "60s"]);
    let a = hold(shared(), dir, "a");
    let b = hold(shared(), dir, "b");
    let (mut x, x_ready) = start_waiting(dir, "x", cmd().args(["-k", "k", "--ttl", "60s"]));
    wait_until(START, "X queued", || node() == 1);
    shared()
        .args(["--no-wait", "--", "true"])
        .run()
        .assert_code(75)
        .assert_stderr_contains("kept for an exclusive run that is waiting");
    let (mut c, c_ready) = start_waiting(dir, "c", shared());
    wait_until(START, "C queued", || node() == 2);
    for holder in [a, b] {
        holder.let_go();
        holder.wait().assert_code(0);
    }
    x.wait_for_file(&x_ready, START);
    assert!(!c_ready.exists(), "C ran beside the exclusive holder");
    let_go(dir, "x");
    c.wait_for_file(&c_ready, START);
    let_go(dir, "c");
    x.wait().assert_code(0);
    c.wait().assert_code(0);
}

#[test]
fn shared_mode_works_in_a_redis_cluster() {
    let cluster = Cluster::start();
    let dir = TempDir::new("shared-cluster");
    let owner = &cluster.nodes[cluster.owner_of("redlock:k")];
    readers_and_a_writer_on(
        &|| cluster.cmd(),
        &|| owner.query::<i64>(&["ZCARD", "{redlock:k}:queue"]),
        &dir,
    );
}

#[test]
fn shared_mode_works_behind_sentinel() {
    let set = SentinelSet::start();
    let dir = TempDir::new("shared-sentinel");
    readers_and_a_writer_on(
        &|| set.cmd(),
        &|| set.master.query::<i64>(&["ZCARD", "{redlock:k}:queue"]),
        &dir,
    );
}

/// Each share's acquisition and release is in the lock's history, marked shared; a
/// `--no-wait` shared run kept out is recorded as `busy`.
#[test]
fn history_records_each_share_and_marks_it_shared() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-history");
    let a = hold(
        server.cmd().args(["-k", "k", "--shared", "--label", "r1"]),
        &dir,
        "a",
    );
    server
        .cmd()
        .args(["-k", "k", "--shared", "--label", "r2", "--", "true"])
        .run()
        .assert_code(0);
    a.let_go();
    a.wait().assert_code(0);
    let writer = hold(server.cmd().args(["-k", "k"]), &dir, "w");
    server
        .cmd()
        .args(["-k", "k", "-s", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    writer.let_go();
    writer.wait().assert_code(0);
    let out = server.cmd().args(["history", "-k", "k"]).run();
    out.assert_code(0);
    let text = out.stdout_str();
    let shared = |event: &str| {
        text.lines()
            .filter(|line| line.contains(&format!(" {event}: ")) && line.contains("(shared)"))
            .count()
    };
    assert_eq!(shared("acquired"), 2, "{text}");
    assert_eq!(shared("released"), 2, "{text}");
    assert_eq!(shared("busy"), 1, "{text}");
    let json = server.cmd().args(["history", "-k", "k", "--json"]).run();
    let modes = json
        .stdout_str()
        .lines()
        .filter(|line| line.contains("\"mode\":\"shared\""))
        .count();
    assert_eq!(modes, 5, "{}", json.stdout_str());
}

/// `--once` with `--shared`: a share whose command succeeded records the work; a later
/// shared (or exclusive) run with the same ID exits 0 without running; a failure records
/// nothing.
#[test]
fn a_shared_once_run_records_its_work_and_the_next_one_skips_it() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-once");
    let ran = dir.join("ran");
    let run = |id: &str, code: i32| {
        server
            .cmd()
            .args(["-k", "k", "--shared", "--once", id, "--", "sh", "-c"])
            .arg(format!("echo x >> '{}'; exit {code}", ran.display()))
            .run()
    };
    run("fail", 3).assert_code(3);
    run("fail", 0).assert_code(0);
    run("fail", 0).assert_code(0);
    run("ok", 0).assert_code(0);
    run("ok", 0).assert_code(0);
    server
        .cmd()
        .args(["-k", "k", "--once", "ok", "--", "sh", "-c"])
        .arg(format!("echo x >> '{}'", ran.display()))
        .run()
        .assert_code(0);
    // Ran: the failure, its retry, and the first "ok"; the others found the work done.
    assert_eq!(dir.read("ran").lines().count(), 3, "{}", dir.read("ran"));
}

/// The documented ACL user (docs/security.md) needs nothing more for shared mode: readers,
/// a writer kept out and woken, and `status`.
#[test]
fn the_minimal_acl_user_can_use_shared_mode() {
    let (server, url) = crate::acl::server_with_user(&crate::acl::minimal_rules(&[]));
    let dir = TempDir::new("shared-acl");
    readers_and_a_writer_on(
        &|| Wrapper::new(&url),
        &|| server.zcard("{redlock:k}:queue"),
        &dir,
    );
    let a = hold(Wrapper::new(&url).args(["-k", "k", "-s"]), &dir, "r");
    Wrapper::new(&url)
        .args(["status", "-k", "k", "--json"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("\"mode\":\"shared\"");
    a.let_go();
    a.wait().assert_code(0);
}

/// A `--limit 3` holder holds only `{K}:slot:2` (K itself free): a shared run is refused with
/// 125 naming --limit, as an exclusive one is, instead of taking K beside it.
#[test]
fn a_shared_run_on_a_semaphores_key_is_refused_like_an_exclusive_one() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-limit");
    let ran = dir.join("ran");
    let semaphore = || server.cmd().args(["-k", "k", "--limit", "3"]);
    let first = hold(semaphore(), &dir, "first");
    let second = hold(semaphore(), &dir, "second");
    first.let_go();
    first.wait().assert_code(0);
    assert!(!server.exists("redlock:k"), "{:?}", server.keys());
    assert!(server.exists("{redlock:k}:slot:2"), "{:?}", server.keys());
    for mode in ["-x", "-s"] {
        let out = server
            .cmd()
            .args(["-k", "k", mode, "--", "touch"])
            .arg(&ran)
            .timeout(Duration::from_secs(15))
            .run();
        out.assert_code(125)
            .assert_stderr_prefixed()
            .assert_stderr_contains("in use with --limit 3");
        assert!(!ran.exists(), "{mode}: the command ran");
        assert!(!server.exists("redlock:k"), "{mode}: {:?}", server.keys());
    }
    second.let_go();
    second.wait().assert_code(0);
}

/// A share released under --min-hold keeps the group only until the min-hold mark, not for
/// its whole lease: a writer queued behind it starts long before the 60 s TTL.
#[test]
fn min_hold_keeps_a_share_only_until_its_mark() {
    let server = RedisServer::start();
    server
        .cmd()
        .args([
            "-k",
            "k",
            "-s",
            "-t",
            "60s",
            "--min-hold",
            "3s",
            "--",
            "true",
        ])
        .run()
        .assert_code(0);
    for key in ["redlock:k", "{redlock:k}:shares", "{redlock:k}:shares:exp"] {
        let pttl = server.pttl(key);
        assert!(pttl <= 3000, "{key}: PTTL {pttl} ms after a 3 s --min-hold");
    }
    server
        .cmd()
        .args(["-k", "k", "-x", "-w", "60s", "--", "true"])
        .timeout(Duration::from_secs(30))
        .run()
        .assert_code(0);
}

/// An exclusive waiter killed with SIGKILL while shares hold: a new shared run is not kept
/// out by it (A holds for as long as the test lets it). `queued` counts the queue,
/// `channels` the channels with subscribers on the server of the lock's keys.
fn a_dead_writer_on(
    cmd: &dyn Fn() -> Wrapper,
    queued: &dyn Fn() -> i64,
    channels: &dyn Fn() -> usize,
    dir: &TempDir,
) {
    let a = hold(cmd().args(["-k", "k", "-s", "-t", "60s"]), dir, "a");
    let before = channels();
    let (w, _) = start_waiting(dir, "w", cmd().args(["-k", "k", "-x", "-w", "120s"]));
    wait_until(START, "W queued and listening", || {
        queued() == 1 && channels() > before
    });
    w.signal(libc::SIGKILL);
    let _ = w.wait();
    wait_until(START, "W's subscription gone", || channels() == before);
    cmd()
        .args(["-k", "k", "-s", "--no-wait", "--", "true"])
        .run()
        .assert_code(0);
    assert_eq!(queued(), 0, "the dead writer is still queued");
    a.let_go();
    a.wait().assert_code(0);
}

#[test]
fn a_killed_exclusive_waiter_does_not_keep_new_shares_out() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-dead-writer");
    a_dead_writer_on(
        &|| server.cmd(),
        &|| queued(&server),
        &|| server.query::<Vec<String>>(&["PUBSUB", "CHANNELS"]).len(),
        &dir,
    );
}

#[test]
fn a_killed_exclusive_waiter_does_not_keep_new_shares_out_in_a_cluster() {
    let cluster = Cluster::start();
    let dir = TempDir::new("shared-dead-writer-cluster");
    let owner = &cluster.nodes[cluster.owner_of("redlock:k")];
    a_dead_writer_on(
        &|| cluster.cmd(),
        &|| owner.query::<i64>(&["ZCARD", "{redlock:k}:queue"]),
        &|| {
            let plain: Vec<String> = owner.query(&["PUBSUB", "CHANNELS"]);
            // Redis 6.2 has no sharded channels.
            let sharded: Vec<String> = owner
                .try_query(&["PUBSUB", "SHARDCHANNELS"])
                .unwrap_or_default();
            plain.len() + sharded.len()
        },
        &dir,
    );
}

/// A live exclusive waiter is not woken (made to try) by each new shared run that finds it
/// queued: it stays queued and the shared run waits behind it.
#[test]
fn a_live_exclusive_waiter_keeps_new_shares_out_without_being_woken() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-live-writer");
    let a = hold(server.cmd().args(["-k", "k", "-s", "-t", "60s"]), &dir, "a");
    let (mut w, w_ready) = start_waiting(
        &dir,
        "w",
        server.cmd().args(["-k", "k", "-x", "-w", "120s"]),
    );
    wait_until(START, "W queued", || queued(&server) == 1);
    // Stopped, W cannot try (and so clear its mark) if woken; its subscription stays.
    w.signal(libc::SIGSTOP);
    for _ in 0..3 {
        server
            .cmd()
            .args(["-k", "k", "-s", "--no-wait", "--", "true"])
            .run()
            .assert_code(75);
    }
    assert_eq!(queued(&server), 1);
    assert!(!server.exists("{redlock:k}:queue:woken"), "W was woken");
    w.signal(libc::SIGCONT);
    a.let_go();
    a.wait().assert_code(0);
    w.wait_for_file(&w_ready, START);
    let_go(&dir, "w");
    w.wait().assert_code(0);
}

/// A writer whose --wait runs out wakes the shared waiters queued behind it: they start at
/// once beside the holding share, long before its 60 s lease would end.
#[test]
fn a_writer_giving_up_wakes_the_readers_behind_it() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-writer-leaves");
    let a = hold(server.cmd().args(["-k", "k", "-s", "-t", "60s"]), &dir, "a");
    let w = server
        .cmd()
        .args(["-k", "k", "-x", "-w", "3s", "--", "true"])
        .spawn();
    wait_until(START, "W queued", || queued(&server) == 1);
    let (mut r, r_ready) = start_waiting(
        &dir,
        "r",
        server
            .cmd()
            .args(["-k", "k", "-s", "-t", "60s", "-w", "120s"]),
    );
    wait_until(START, "R queued", || queued(&server) == 2);
    w.wait().assert_code(75);
    r.wait_for_file(&r_ready, Duration::from_secs(30));
    let_go(&dir, "r");
    r.wait().assert_code(0);
    a.let_go();
    a.wait().assert_code(0);
}

/// A writer giving up behind another exclusive waiter wakes nobody: the readers behind it
/// still wait for the writer ahead.
#[test]
fn a_writer_giving_up_behind_another_writer_leaves_the_readers_queued() {
    let server = RedisServer::start();
    let dir = TempDir::new("shared-writer-leaves-behind");
    let a = hold(server.cmd().args(["-k", "k", "-s", "-t", "60s"]), &dir, "a");
    let (mut x, x_ready) = start_waiting(
        &dir,
        "x",
        server.cmd().args(["-k", "k", "-x", "-w", "120s"]),
    );
    wait_until(START, "X queued", || queued(&server) == 1);
    let w = server
        .cmd()
        .args(["-k", "k", "-x", "-w", "3s", "--", "true"])
        .spawn();
    wait_until(START, "W queued", || queued(&server) == 2);
    let (mut r, r_ready) = start_waiting(
        &dir,
        "r",
        server.cmd().args(["-k", "k", "-s", "-w", "120s"]),
    );
    wait_until(START, "R queued", || queued(&server) == 3);
    // Stopped, R cannot try (and so clear its mark) if woken; its subscription stays.
    r.signal(libc::SIGSTOP);
    w.wait().assert_code(75);
    assert_eq!(queued(&server), 2);
    assert!(!server.exists("{redlock:k}:queue:woken"), "R was woken");
    r.signal(libc::SIGCONT);
    assert!(!r_ready.exists(), "R ran before the writer ahead");
    a.let_go();
    a.wait().assert_code(0);
    x.wait_for_file(&x_ready, START);
    assert!(!r_ready.exists(), "R ran beside the writer");
    let_go(&dir, "x");
    r.wait_for_file(&r_ready, START);
    let_go(&dir, "r");
    x.wait().assert_code(0);
    r.wait().assert_code(0);
}
