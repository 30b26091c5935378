//! Many waiters (issue 13): a release wakes one waiter, the first live one in the lock's
//! queue, so a handoff costs Redis the same few requests however many wait; with `--limit`
//! each freed slot wakes one; a waiter killed while queued holds up nobody (the release
//! that would wake it finds nobody on its channel and wakes the next); a waiter whose host
//! vanished with its connection open delays the queue by at most one `--ttl`.
//!
//! What this module does not own: the order of `--fair` waiters (`operators`), waking with
//! Redis nodes down (`redlock`), the benchmark's figures (`scripts/bench --waiters`).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

/// The waiters' queue of lock `name` (documented layout: `{K}:queue`).
fn queue_of(name: &str) -> String {
    format!("{{{PREFIX}{name}}}:queue")
}

/// A job that notes `start` and `end` (ns) in `log` and fails loudly if another job of the
/// same lock is inside at the same time (an `mkdir` that must not find its directory).
fn noting_job(dir: &TempDir, log: &Path) -> String {
    let inside = dir.join("inside");
    let overlap = dir.join("overlap");
    format!(
        "mkdir '{inside}' 2>/dev/null || touch '{overlap}'; \
         s=$(date +%s%N); sleep 0.005; e=$(date +%s%N); \
         rmdir '{inside}'; echo \"$s $e\" >> '{log}'",
        inside = inside.display(),
        overlap = overlap.display(),
        log = log.display(),
    )
}

/// (start, end) of each job in `log`, by start.
fn sections(log: &Path) -> Vec<(u128, u128)> {
    let text = fs::read_to_string(log).unwrap_or_default();
    let mut all: Vec<(u128, u128)> = text
        .lines()
        .map(|line| {
            let (start, end) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("log line {line:?}"));
            (start.parse().unwrap(), end.parse().unwrap())
        })
        .collect();
    all.sort();
    all
}

/// Script runs (EVALSHA and EVAL) the server has seen.
fn scripts_run(server: &RedisServer) -> u64 {
    server
        .command_stats()
        .iter()
        .filter(|(name, _)| name == "evalsha" || name == "eval")
        .map(|(_, calls)| calls)
        .sum()
}

/// `waiters` more runs of `job` queued behind a holder of `name`, where `already` wait;
/// returns them once every one is in the queue.
#[track_caller]
fn queue_up(
    server: &RedisServer,
    name: &str,
    extra: &[&str],
    job: &str,
    (already, waiters): (usize, usize),
) -> Vec<Running> {
    let running: Vec<Running> = (0..waiters)
        .map(|_| {
            server
                .cmd()
                .args(["-k", name])
                .args(extra)
                .args(["--shell", job])
                .spawn()
        })
        .collect();
    wait_until(Duration::from_secs(30), "every waiter to queue", || {
        server.zcard(&queue_of(name)) == (already + waiters) as i64
    });
    running
}

/// However long the queue, a handoff costs the same: the holder's release wakes one waiter,
/// which takes the lock (two scripts). Measured over a drain of 5 and of 30 waiters, plain,
/// with `--limit 3` and with `--fair`.
#[test]
fn a_handoff_costs_the_same_whatever_the_queue() {
    let _load = loading_the_machine();
    for extra in [&[][..], &["--limit", "3"], &["--fair"]] {
        for waiters in [5, 30] {
            let server = RedisServer::start();
            let dir = TempDir::new("waiters-cost");
            let log = dir.join("log");
            let holders: Vec<Holder> = (0..if extra.contains(&"3") { 3 } else { 1 })
                .map(|n| {
                    hold(
                        server.cmd().args(["-k", "q"]).args(extra),
                        &dir,
                        &format!("h{n}"),
                    )
                })
                .collect();
            let job = if extra.contains(&"3") {
                format!(
                    "echo \"$(date +%s%N) $(date +%s%N)\" >> '{}'",
                    log.display()
                )
            } else {
                noting_job(&dir, &log)
            };
            let queued = queue_up(&server, "q", extra, &job, (0, waiters));
            let before = scripts_run(&server);
            for holder in holders {
                holder.let_go();
                holder.wait().assert_code(0);
            }
            for waiter in queued {
                waiter.wait().assert_code(0);
            }
            let scripts = scripts_run(&server) - before;
            let per_handoff = scripts as f64 / waiters as f64;
            eprintln!("{extra:?}, {waiters} waiters: {per_handoff:.2} scripts a handoff");
            assert!(
                per_handoff <= 3.0,
                "{extra:?}: {scripts} scripts for {waiters} handoffs: the queue's length costs"
            );
            assert_eq!(sections(&log).len(), waiters);
            assert!(!dir.exists("overlap"), "{extra:?}: two jobs ran at once");
            let left: Vec<String> = server
                .keys()
                .into_iter()
                .filter(|key| key.contains(":queue"))
                .collect();
            assert!(
                left.is_empty(),
                "{extra:?}: the queue outlived its waiters: {left:?}"
            );
        }
    }
}

/// A quarter of the queue killed with SIGKILL while it waits: every other waiter runs, and
/// no handoff waits on a dead one (each release drops the dead it meets and wakes the next
/// live waiter at once).
#[test]
fn waiters_killed_in_the_queue_hold_up_nobody() {
    let server = RedisServer::start();
    let dir = TempDir::new("waiters-killed");
    let log = dir.join("log");
    let holder = hold(server.cmd().args(["-k", "k"]), &dir, "h");
    let job = noting_job(&dir, &log);
    let mut queued = queue_up(&server, "k", &[], &job, (0, 12));
    // Four of them, dead among the live ones.
    let killed: Vec<Running> = [6, 4, 2, 0].into_iter().map(|i| queued.remove(i)).collect();
    for waiter in killed {
        waiter.signal(libc::SIGKILL);
        let out = waiter.wait_within(Duration::from_secs(10));
        assert_eq!(out.status.code(), None, "not killed: {:?}", out.status);
    }
    let released = Instant::now();
    holder.let_go();
    holder.wait().assert_code(0);
    for waiter in queued {
        waiter.wait().assert_code(0);
    }
    let ran = sections(&log);
    assert_eq!(ran.len(), 8);
    assert!(!dir.exists("overlap"), "two jobs ran at once");
    let gaps: Vec<u128> = ran
        .windows(2)
        .map(|w| w[1].0.saturating_sub(w[0].1))
        .collect();
    let longest = Duration::from_nanos(*gaps.iter().max().unwrap() as u64);
    eprintln!(
        "8 live waiters after 4 killed: all done in {:?}, longest gap {longest:?}",
        released.elapsed()
    );
    assert!(
        longest < Duration::from_secs(1),
        "a handoff waited {longest:?} on a dead waiter"
    );
    assert_eq!(
        server.zcard(&queue_of("k")),
        0,
        "dead waiters left in the queue"
    );
}

/// A waiter that was woken and never acts (its host vanished, its connection still open:
/// here, stopped with SIGSTOP) delays the ones behind it by at most one `--ttl` (2s), plain
/// and with `--fair`; then it is dropped from the queue.
#[test]
fn a_waiter_gone_with_its_connection_open_delays_the_queue_by_one_ttl_at_most() {
    let ttl = Duration::from_secs(2);
    for fair in [false, true] {
        let server = RedisServer::start();
        let dir = TempDir::new("waiters-frozen");
        let log = dir.join("log");
        let extra: &[&str] = if fair {
            &["--ttl", "2s", "--fair"]
        } else {
            &["--ttl", "2s"]
        };
        let holder = hold(server.cmd().args(["-k", "z"]).args(extra), &dir, "h");
        let job = noting_job(&dir, &log);
        let mut queued = queue_up(&server, "z", extra, &job, (0, 1));
        let frozen = queued.pop().unwrap();
        let behind = queue_up(&server, "z", extra, &job, (1, 2));
        frozen.signal(libc::SIGSTOP);
        let released = Instant::now();
        holder.let_go();
        holder.wait().assert_code(0);
        for waiter in behind {
            waiter.wait().assert_code(0);
        }
        let waited = released.elapsed();
        eprintln!("fair {fair}: the waiters behind a frozen one were done after {waited:?}");
        assert!(
            waited < ttl + Duration::from_millis(1500),
            "fair {fair}: the queue waited {waited:?} behind a frozen waiter (--ttl {ttl:?})"
        );
        assert_eq!(sections(&log).len(), 2);
        assert!(!dir.exists("overlap"), "two jobs ran at once");
        frozen.signal(libc::SIGKILL);
    }
}

/// Calls of `EVALSHA` (every try of a waiter is one) since the last `CONFIG RESETSTAT`.
fn tries_served(server: &RedisServer) -> u64 {
    server
        .command_stats()
        .into_iter()
        .find(|(name, _)| name == "evalsha")
        .map_or(0, |(_, calls)| calls)
}

/// A burst of messages on a lock's release channel (a buggy or hostile client) is
/// coalesced: the waiter tries a few times, not once a message, and still takes the lock
/// at the holder's real release.
#[test]
fn a_burst_of_release_notices_is_coalesced() {
    const BURST: u64 = 20_000;
    let server = RedisServer::start();
    let dir = TempDir::new("burst");
    let holder = hold(server.cmd().args(["-k", "burst"]), &dir, "h");
    let ran = dir.join("ran");
    let waiter = server
        .cmd()
        .args(["-k", "burst", "--shell"])
        .arg(format!("touch '{}'", ran.display()))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.waiters_of("burst") == 1
    });
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut server.connection())
        .expect("CONFIG RESETSTAT");
    let mut burst = redis::pipe();
    for number in 0..BURST {
        burst
            .cmd("PUBLISH")
            .arg(format!("redlock-run:released:{PREFIX}burst"))
            .arg(format!("{{\"token\":\"x\"#{number}"))
            .ignore();
    }
    let _: () = burst
        .query(&mut server.connection())
        .expect("the burst of PUBLISH");
    // Until the tries stop: a second without one.
    let (mut last, mut since) = (u64::MAX, Instant::now());
    wait_until(
        Duration::from_secs(120),
        "the waiter's tries to stop",
        || {
            let now = tries_served(&server);
            if now != last {
                (last, since) = (now, Instant::now());
            }
            since.elapsed() > Duration::from_secs(1)
        },
    );
    eprintln!("{BURST} notices, {last} tries");
    assert!(last <= BURST / 10, "{last} tries for {BURST} notices");
    assert!(!ran.exists(), "the waiter ran while the lock was held");
    holder.let_go();
    holder.wait().assert_code(0);
    waiter.wait().assert_code(0);
}

/// Messages too large to be a notice (over 1 MiB each), published on the lock's channel by
/// anyone who may publish there, while a waiter waits and tries over its subscription: they
/// cost it its subscription (made again), never its run. The holder it then becomes hears
/// none of them (its connection stopped listening when it took the lock), and a lock taken
/// from it is still reported lost (76).
#[test]
fn messages_too_large_on_the_channel_cost_a_waiter_no_more_than_its_subscription() {
    let server = RedisServer::start();
    let dir = TempDir::new("large");
    let holder = hold(server.cmd().args(["-k", "large"]), &dir, "h");
    let script = dir.script("w", &Job::new(&dir, "w").body());
    let mut waiter = server
        .cmd()
        .args(["-k", "large", "--"])
        .arg(&script)
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to queue", || {
        server.zcard(&queue_of("large")) == 1
    });
    let channel = format!("redlock-run:released:{PREFIX}large");
    let junk = "x".repeat((1 << 20) + 100_000);
    let publish = |count: usize| {
        let mut connection = server.connection();
        for _ in 0..count {
            let _: i64 = redis::cmd("PUBLISH")
                .arg(&channel)
                .arg(&junk)
                .query(&mut connection)
                .expect("PUBLISH");
        }
    };
    publish(20);
    holder.let_go();
    holder.wait().assert_code(0);
    waiter.wait_for_file(&dir.join("w.ready"), Duration::from_secs(15));
    server.del("redlock:large");
    publish(5);
    fs::write(dir.join("w.go"), "").unwrap();
    waiter.wait().assert_code(76);
}
