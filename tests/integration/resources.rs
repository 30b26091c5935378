//! Several locks per run (issue 32): a pool (`-k s1 -k s2 --any`), the first free member
//! held; several keys held at once (`-k db -k cache`), all or none. What the command is
//! given (`REDLOCK_NAME`, `REDLOCK_KEYS`, `REDLOCK_FENCES`, `REDLOCK_SLOT`), who wakes a
//! waiter, a lost member, the usage errors, and the no-overlap checker under stress and
//! faults. Sentinel and Cluster runs are in `sentinel` and `cluster`; Redlock in `redlock`.

use std::fs;
use std::time::{Duration, Instant};

use crate::support::history::History;
use crate::support::*;

/// A job that writes what a run gave it to `NAME.env`, then holds until let go.
fn env_job<'a>(dir: &'a TempDir, name: &str) -> Job<'a> {
    let out = dir.join(&format!("{name}.env"));
    Job::new(dir, name).first(&format!(
        "printf '%s|%s|%s|%s|%s|%s\\n' \"$REDLOCK_KEY\" \"$REDLOCK_NAME\" \"$REDLOCK_SLOT\" \
         \"$REDLOCK_FENCE\" \"$REDLOCK_KEYS\" \"$REDLOCK_FENCES\" > '{}'",
        out.display()
    ))
}

/// The fields `env_job` wrote: key, name, slot, fence, keys, fences.
fn env_of(dir: &TempDir, name: &str) -> Vec<String> {
    dir.read(&format!("{name}.env"))
        .trim_end_matches('\n')
        .split('|')
        .map(str::to_string)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Several keys at once

#[test]
fn a_multi_key_run_holds_every_key_and_gives_each_fence_in_the_order_named() {
    let server = RedisServer::start();
    let dir = TempDir::new("multi");
    let holder = env_job(&dir, "both").start(server.cmd().args(["-k", "db", "-k", "cache"]));
    let token = dir.read("both.token");
    for name in ["db", "cache"] {
        let value = server
            .lock_value(name)
            .unwrap_or_else(|| panic!("{name} not held"));
        assert_eq!(
            token_of(&value),
            token.trim(),
            "{name} held by another token"
        );
    }
    let env = env_of(&dir, "both");
    let fence_db: u64 = server.get("{redlock:db}:fence").unwrap().parse().unwrap();
    let fence_cache: u64 = server
        .get("{redlock:cache}:fence")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(env[0], "redlock:db");
    assert_eq!(env[1], "db");
    assert_eq!(env[3], fence_db.to_string());
    assert_eq!(env[4], "redlock:db\nredlock:cache");
    assert_eq!(env[5], format!("{fence_db}\n{fence_cache}"));
    holder.let_go();
    holder.wait().assert_code(0);
    assert!(!server.exists("redlock:db") && !server.exists("redlock:cache"));
}

#[test]
fn a_no_wait_multi_key_run_with_one_key_busy_exits_75_and_leaves_none_held() {
    let server = RedisServer::start();
    let dir = TempDir::new("multi-busy");
    let holder = hold(server.cmd().args(["-k", "b"]), &dir, "b");
    // `a` sorts first: it is taken, then `b` found busy, then `a` let go.
    let out = server
        .cmd()
        .args(["-k", "a", "-k", "b", "--no-wait", "--", "true"])
        .run();
    out.assert_code(75).assert_stderr_contains("held by");
    assert!(
        !server.exists("redlock:a"),
        "a left held: {:?}",
        server.keys()
    );
    holder.let_go();
    holder.wait().assert_code(0);
}

/// A multi-key wait is named after every key it waits for, and its progress reads no one
/// key's history: "waiting for redlock:a and redlock:b", not the first key's name beside
/// another key's holder.
#[test]
fn a_multi_key_wait_is_named_after_every_key() {
    let server = RedisServer::start();
    let dir = TempDir::new("multi-named");
    let holder = hold(server.cmd().args(["-k", "b"]), &dir, "b");
    let out = server
        .cmd()
        .env("REDLOCK_TEST_PROGRESS_EVERY_MS", "200")
        .args(["-k", "a", "-k", "b", "--wait", "3s", "-v", "--", "true"])
        .run();
    out.assert_code(75)
        .assert_stderr_contains("waiting for redlock:a and redlock:b: held by")
        .assert_stderr_contains("still waiting for redlock:a and redlock:b: held by")
        .assert_stderr_contains("time left: unknown")
        .assert_stderr_lacks("waiting for redlock:a:");
    holder.let_go();
    holder.wait().assert_code(0);
}

#[test]
fn a_multi_key_waiter_starts_once_the_last_busy_key_is_released() {
    let server = RedisServer::start();
    let dir = TempDir::new("multi-wait");
    let a = hold(server.cmd().args(["-k", "a", "--ttl", "60s"]), &dir, "a");
    let b = hold(server.cmd().args(["-k", "b", "--ttl", "60s"]), &dir, "b");
    let done = dir.join("ran");
    let waiter = server
        .cmd()
        .args(["-k", "a", "-k", "b", "--", "touch"])
        .arg(&done)
        .spawn();
    // Queued behind both: a release of either wakes it; it runs only after the second.
    wait_until(Duration::from_secs(10), "the waiter queued", || {
        server.zcard("{redlock:a}:queue") == 1
    });
    a.let_go();
    a.wait().assert_code(0);
    wait_until(Duration::from_secs(10), "the waiter queued on b", || {
        server.zcard("{redlock:b}:queue") == 1
    });
    assert!(!done.exists(), "ran while b was held");
    let released = Instant::now();
    b.let_go();
    b.wait().assert_code(0);
    let out = waiter.wait_within(Duration::from_secs(30));
    out.assert_code(0);
    // Woken by b's release, not by a look at the 60 s lease's end.
    assert!(
        released.elapsed() < Duration::from_secs(20),
        "started {:?} after the release",
        released.elapsed()
    );
    assert!(
        !server.exists("redlock:a") && !server.exists("redlock:b"),
        "{:?}",
        server.keys()
    );
}

#[test]
fn losing_one_key_of_several_is_losing_the_lock_and_the_others_are_released() {
    let server = RedisServer::start();
    let dir = TempDir::new("multi-lost");
    let holder =
        Job::new(&dir, "both").start(server.cmd().args(["-k", "a", "-k", "b", "--ttl", "3s"]));
    server.del("redlock:b");
    let out = holder.wait_within(Duration::from_secs(30));
    out.assert_code(76);
    assert!(dir.exists("both.term"), "the command was not told to stop");
    assert!(
        !server.exists("redlock:a"),
        "a left held: {:?}",
        server.keys()
    );
}

#[test]
fn crossing_multi_key_runs_never_deadlock_and_never_overlap() {
    const WRAPPERS: usize = 8;
    const ROUNDS: usize = 5;
    let _load = loading_the_machine();
    let server = RedisServer::start();
    let dir = TempDir::new("crossing");
    let history = History::new(&dir);
    let script = history.section(&dir, "both", "sleep 0.01");
    let url = server.url();
    let turn = std::sync::atomic::AtomicUsize::new(0);
    run_in_parallel(WRAPPERS, ROUNDS, move || {
        let crossed = turn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(2);
        let keys = if crossed {
            ["-k", "a", "-k", "b"]
        } else {
            ["-k", "b", "-k", "a"]
        };
        Wrapper::new(&url)
            .args(keys)
            .arg("--")
            .arg(&script)
            .timeout(Duration::from_secs(120))
    });
    history
        .check()
        .assert_count(WRAPPERS * ROUNDS)
        .assert_all_recorded()
        .assert_no_overlap();
    assert!(
        !server.exists("redlock:a") && !server.exists("redlock:b"),
        "{:?}",
        server.keys()
    );
}

// ---------------------------------------------------------------------------------------------
// Pools

#[test]
fn a_pool_run_takes_the_first_free_member_in_the_order_given_and_is_told_which() {
    let server = RedisServer::start();
    let dir = TempDir::new("pool");
    let first = hold(server.cmd().args(["-k", "s1"]), &dir, "s1");
    let pool = env_job(&dir, "pool").start(
        server
            .cmd()
            .args(["-k", "s1", "-k", "s2", "-k", "s3", "--any"]),
    );
    let env = env_of(&dir, "pool");
    assert_eq!(env[0], "redlock:s2");
    assert_eq!(env[1], "s2");
    assert_eq!(env[4], "redlock:s2");
    assert!(server.exists("redlock:s2") && !server.exists("redlock:s3"));
    // A plain run of that member is excluded by the pool run.
    server
        .cmd()
        .args(["-k", "s2", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    // And nothing of the pool run stays queued behind s1.
    assert_eq!(server.zcard("{redlock:s1}:queue"), 0);
    // `status` of the member names the pool run, as for any lock.
    let token = dir.read("pool.token");
    server
        .cmd()
        .args(["status", "-k", "s2", "--json"])
        .run()
        .assert_code(0)
        .assert_stdout_contains(token.trim());
    pool.let_go();
    pool.wait().assert_code(0);
    first.let_go();
    first.wait().assert_code(0);
}

#[test]
fn a_busy_pool_with_no_wait_exits_75_naming_each_members_holder() {
    let server = RedisServer::start();
    let dir = TempDir::new("pool-busy");
    let one = hold(
        server.cmd().args(["-k", "s1", "--label", "first-holder"]),
        &dir,
        "s1",
    );
    let two = hold(
        server.cmd().args(["-k", "s2", "--label", "second-holder"]),
        &dir,
        "s2",
    );
    let out = server
        .cmd()
        .args(["-k", "s1", "-k", "s2", "--any", "--no-wait", "--", "true"])
        .run();
    out.assert_code(75)
        .assert_stderr_contains("first-holder")
        .assert_stderr_contains("second-holder");
    // And when a wait runs out.
    let out = server
        .cmd()
        .args([
            "-k", "s1", "-k", "s2", "--any", "--wait", "1s", "--", "true",
        ])
        .run();
    out.assert_code(75)
        .assert_stderr_contains("first-holder")
        .assert_stderr_contains("second-holder");
    for holder in [one, two] {
        holder.let_go();
        holder.wait().assert_code(0);
    }
}

#[test]
fn a_pool_waiter_is_woken_by_the_member_that_frees_first() {
    let server = RedisServer::start();
    let dir = TempDir::new("pool-wait");
    let one = hold(server.cmd().args(["-k", "s1", "--ttl", "60s"]), &dir, "s1");
    let two = hold(server.cmd().args(["-k", "s2", "--ttl", "60s"]), &dir, "s2");
    let script = dir.script("pool", &env_job(&dir, "pool").body());
    let mut waiter = server
        .cmd()
        .args(["-k", "s1", "-k", "s2", "--any", "--"])
        .arg(&script)
        .spawn();
    wait_until(Duration::from_secs(10), "the waiter queued", || {
        server.zcard("{redlock:s2}:queue") == 1
    });
    let released = Instant::now();
    two.let_go();
    two.wait().assert_code(0);
    waiter.wait_for_file(&dir.join("pool.ready"), Duration::from_secs(20));
    assert!(
        released.elapsed() < Duration::from_secs(20),
        "woken {:?} after the release",
        released.elapsed()
    );
    assert_eq!(env_of(&dir, "pool")[1], "s2");
    // No longer queued behind s1.
    assert_eq!(server.zcard("{redlock:s1}:queue"), 0);
    fs::write(dir.join("pool.go"), "").unwrap();
    waiter.wait().assert_code(0);
    one.let_go();
    one.wait().assert_code(0);
}

#[test]
fn pool_runs_never_hold_the_same_member() {
    const WRAPPERS: usize = 9;
    const ROUNDS: usize = 4;
    let _load = loading_the_machine();
    let server = RedisServer::start();
    let dir = TempDir::new("pool-stress");
    let members = ["s1", "s2", "s3"];
    // One history per member: sections of one member must never overlap.
    let histories: Vec<(TempDir, History)> = members
        .iter()
        .map(|name| {
            let dir = TempDir::new(&format!("pool-{name}"));
            let history = History::new(&dir);
            (dir, history)
        })
        .collect();
    let mut dispatch = String::new();
    for (name, (member_dir, history)) in members.iter().zip(&histories) {
        let section = history.section(member_dir, name, "sleep 0.02");
        dispatch.push_str(&format!(
            "[ \"$REDLOCK_NAME\" = {name} ] && exec '{}'\n",
            section.display()
        ));
    }
    dispatch.push_str("exit 99\n");
    let script = dir.script("dispatch", &dispatch);
    let url = server.url();
    run_in_parallel(WRAPPERS, ROUNDS, move || {
        Wrapper::new(&url)
            .args(["-k", "s1", "-k", "s2", "-k", "s3", "--any", "--"])
            .arg(&script)
            .timeout(Duration::from_secs(120))
    });
    let mut total = 0;
    for (_, history) in &histories {
        let checked = history.check();
        checked.assert_all_recorded().assert_no_overlap();
        total += checked.intervals.len();
    }
    assert_eq!(total, WRAPPERS * ROUNDS);
}

// ---------------------------------------------------------------------------------------------
// One key: its name and slot

#[test]
fn a_single_key_run_is_told_its_name_and_a_semaphore_holder_its_slot() {
    let server = RedisServer::start();
    let dir = TempDir::new("slot");
    let first = env_job(&dir, "one").start(server.cmd().args(["-k", "sem", "--limit", "3"]));
    let second = env_job(&dir, "two").start(server.cmd().args(["-k", "sem", "--limit", "3"]));
    let (one, two) = (env_of(&dir, "one"), env_of(&dir, "two"));
    assert_eq!(one[0], "redlock:sem");
    assert_eq!(one[1], "sem");
    assert_eq!(one[2], "1");
    assert_eq!(two[2], "2");
    for holder in [first, second] {
        holder.let_go();
        holder.wait().assert_code(0);
    }
}

// ---------------------------------------------------------------------------------------------
// Usage errors

#[test]
fn combinations_without_a_clear_meaning_are_refused_at_once() {
    let server = RedisServer::start();
    let cases: [(&[&str], &str); 9] = [
        (&["-k", "a", "-k", "a"], "named twice"),
        (&["-k", "a", "--any"], "--any"),
        (&["-k", "a", "-k", "b", "--limit", "2"], "--limit"),
        (&["-k", "a", "-k", "b", "--replace"], "--replace"),
        (
            &["-k", "a", "-k", "b", "--any", "--supersede"],
            "--supersede",
        ),
        (&["-k", "a", "-k", "b", "--fair"], "--fair"),
        (&["-k", "a", "-k", "b", "--once", "x"], "--once"),
        (&["-k", "a", "-k", "b", "--dry-run"], "--dry-run"),
        (&["-k", "a", "-k", "b\nc"], "line feed"),
    ];
    for (args, needle) in cases {
        let out = server.cmd().args(args).args(["--", "true"]).run();
        out.assert_code(125).assert_stderr_contains(needle);
    }
    assert_eq!(server.dbsize(), 0, "{:?}", server.keys());
}

#[test]
fn min_hold_keeps_every_key_of_a_multi_key_run_to_the_mark() {
    let server = RedisServer::start();
    server
        .cmd()
        .args(["-k", "a", "-k", "b", "--min-hold", "30s", "--", "true"])
        .run()
        .assert_code(0);
    for key in ["redlock:a", "redlock:b"] {
        assert!(
            server.pttl(key) > 10_000,
            "{key} not kept: {}",
            server.pttl(key)
        );
    }
}

#[test]
fn a_run_started_while_members_free_up_fills_the_pool() {
    let server = RedisServer::start();
    let dir = TempDir::new("pool-fill");
    let started = Instant::now();
    let holders: Vec<Holder> = (0..3)
        .map(|n| {
            hold(
                server
                    .cmd()
                    .args(["-k", "s1", "-k", "s2", "-k", "s3", "--any"]),
                &dir,
                &format!("h{n}"),
            )
        })
        .collect();
    for name in ["s1", "s2", "s3"] {
        assert!(server.exists(&format!("redlock:{name}")), "{name} free");
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    for holder in holders {
        holder.let_go();
        holder.wait().assert_code(0);
    }
}

// ---------------------------------------------------------------------------------------------
// Faults

#[test]
fn a_multi_key_holder_killed_with_sigkill_leaves_both_keys_to_their_ttl_and_no_overlap() {
    let server = RedisServer::start();
    let dir = TempDir::new("multi-kill");
    let history = History::new(&dir);
    let section = history.section(&dir, "both", "sleep 600");
    let ready = dir.join("killed.ready");
    let script = dir.script(
        "killed",
        &format!("touch '{}'\nexec '{}'", ready.display(), section.display()),
    );
    let killed = start_holding(
        server.cmd().args(["-k", "a", "-k", "b", "--ttl", "10s"]),
        &script,
        &ready,
    );
    signal(killed.pid(), libc::SIGKILL);
    // Each key stays held, to its TTL: a plain run of either is turned away meanwhile.
    for name in ["a", "b"] {
        server
            .cmd()
            .args(["-k", name, "--no-wait", "--", "true"])
            .run()
            .assert_code(75);
    }
    // A crossing run gets in once both keys expired, never while the killed one's command
    // (ended by its guardian) could still run.
    let next = history.section(&dir, "next", "true");
    server
        .cmd()
        .args(["-k", "b", "-k", "a", "--wait", "30s", "--"])
        .arg(&next)
        .run()
        .assert_code(0);
    history.check().assert_no_overlap();
    drop(killed);
}

#[test]
fn redis_restarted_empty_under_a_multi_key_run_is_a_lost_lock_and_nothing_is_left_held() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("multi-restart");
    let holder =
        Job::new(&dir, "both").start(server.cmd().args(["-k", "a", "-k", "b", "--ttl", "2s"]));
    let token = dir.read("both.token");
    for name in ["a", "b"] {
        let value = server
            .lock_value(name)
            .unwrap_or_else(|| panic!("{name} not held"));
        assert_eq!(token_of(&value), token.trim());
    }
    server.restart();
    // A run that takes the fresh, empty server meanwhile holds both keys; the holder that
    // lost them stops its command.
    let other = Job::new(&dir, "other").start(server.cmd().args(["-k", "b", "-k", "a"]));
    let out = holder.wait_within(Duration::from_secs(30));
    out.assert_code(76);
    // The lost holder's release touched neither key of the new holder.
    let other_token = dir.read("other.token");
    for name in ["a", "b"] {
        let value = server
            .lock_value(name)
            .unwrap_or_else(|| panic!("{name} not held"));
        assert_eq!(token_of(&value), other_token.trim());
    }
    other.let_go();
    other.wait().assert_code(0);
    assert!(
        !server.exists("redlock:a") && !server.exists("redlock:b"),
        "{:?}",
        server.keys()
    );
}

/// A reply cut at each point of a multi-key run and of a pool run in turn (from the n-th
/// request on, one or two replies lost, then traffic passes again), with `b` free or held
/// by another run: the command runs only with every key it was given held under its token,
/// and whatever the run's outcome, it leaves no key of its own held behind it. Two losses
/// make the retry of an acquisition fail too: the key it may have taken is let go.
#[test]
fn a_reply_cut_anywhere_in_an_acquisition_leaves_no_partial_hold() {
    let server = RedisServer::start();
    let dir = TempDir::new("multi-cut");
    let seen = dir.join("seen");
    let look = format!(
        "n=0; for k in $REDLOCK_KEYS; do \
           redis-cli -p {port} --raw get \"$k\" | grep -qF \"$REDLOCK_TOKEN\" || exit 9; \
           n=$((n + 1)); done; echo $n > '{seen}'",
        port = server.port(),
        seen = seen.display()
    );
    let mut cut = 0;
    for busy in [false, true] {
        let other = busy.then(|| hold(server.cmd().args(["-k", "b"]), &dir, "other"));
        for pool in [false, true] {
            for losses in [1, 2] {
                for n in 0..4 {
                    let _ = fs::remove_file(&seen);
                    let proxy = proxy::FaultProxy::start(server.port());
                    proxy.set_after(n, proxy::Fault::DropReplies);
                    let mut args = vec!["-v", "-k", "a", "-k", "b", "--no-wait", "--ttl", "30s"];
                    args.extend(["--redis-timeout", "400ms"]);
                    if pool {
                        args.push("--any");
                    }
                    let mut run = Wrapper::new(&proxy.url())
                        .args(&args)
                        .args(["--", "sh", "-c", &look])
                        .spawn();
                    while !run.has_exited() {
                        if proxy.discarded().1 >= losses {
                            proxy.pass();
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    let out = run.wait();
                    let case = format!(
                        "busy={busy} pool={pool} losses={losses} n={n}: exit {:?}, {}",
                        out.status.code(),
                        proxy.summary()
                    );
                    eprintln!("{case}");
                    cut += usize::from(proxy.discarded().1 > 0);
                    if out.status.code() == Some(9) {
                        panic!("the command ran without a key it was given: {case}");
                    }
                    if seen.exists() {
                        let wanted = if pool { "1" } else { "2" };
                        assert_eq!(dir.read("seen").trim(), wanted, "{case}");
                    }
                    // `a` is only ever this run's; `b` the other holder's, if any.
                    let clean =
                        || !server.exists("redlock:a") && server.exists("redlock:b") == busy;
                    let until = Instant::now() + Duration::from_secs(10);
                    while !clean() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    assert!(
                        clean(),
                        "left held: a={:?} b={:?} ({case})\n{}",
                        server.lock_value("a"),
                        server.lock_value("b"),
                        out.stderr
                    );
                }
            }
        }
        if let Some(other) = other {
            other.let_go();
            other.wait().assert_code(0);
        }
    }
    // A run sends a few requests (the handshake, an acquire per key, the releases).
    assert!(cut >= 16, "few runs had a reply cut: {cut}");
}

/// A run started by the command of a multi-key run, for any of its keys, would wait for its
/// own parent for ever: refused at once (125), naming the outer run, as for one key.
#[test]
fn a_nested_run_of_any_key_its_parent_holds_is_refused() {
    let server = RedisServer::start();
    for (outer, inner) in [("a", "b"), ("b", "b"), ("c", "a")] {
        let nested = format!("{} -k {inner} --wait 20s -- true", BIN);
        let mut args = vec!["-k", "a", "-k", "b"];
        if outer == "c" {
            args = vec!["-k", "c", "-k", "a", "--any"];
        }
        let out = server
            .cmd()
            .args(&args)
            .args(["--", "sh", "-c", &nested])
            .run();
        let expected = if outer == "c" { 0 } else { 125 };
        // With the pool, `c` was free and held: `a` is not the parent's, and runs.
        out.assert_code(expected);
        if expected == 125 {
            out.assert_stderr_contains("whose command started this one");
        }
    }
}
