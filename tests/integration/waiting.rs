//! Waiting through what a server or another client does: "try later" replies are waited
//! out within --wait, a Redis gone for the end of the wait is called unreachable, a holder
//! that will never announce its release is polled, every wait makes a last attempt at its
//! deadline, and a subscription made again is followed by an attempt at once.

use std::time::{Duration, Instant};

use crate::support::*;

/// A server at its client limit: a waiter with --wait keeps trying (it used to exit 125 at
/// once), says why once, and gets the lock once the server takes clients again.
#[test]
fn a_server_at_its_client_limit_is_waited_out() {
    let server = RedisServer::start();
    let dir = TempDir::new("maxclients");
    let holder = hold(server.cmd().args(["-k", "mc"]), &dir, "h");
    // One connection held open here: counted, then the limit set to the count.
    let mut admin = server.connection();
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    let count = clients.lines().count();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(count)
        .query(&mut admin)
        .unwrap();
    let waiter = server
        .cmd()
        .args(["-k", "mc", "--wait", "60s", "--", "touch"])
        .arg(dir.join("waited"))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to be refused", || {
        waiter.stderr_so_far().contains("max number of clients")
    });
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(10000)
        .query(&mut admin)
        .unwrap();
    holder.let_go();
    holder.wait().assert_code(0);
    waiter
        .wait()
        .assert_code(0)
        .assert_stderr_contains("still waiting, retrying");
    assert!(dir.exists("waited"));
}

/// Redis goes away while a run waits: when --wait runs out, it says Redis could not be
/// reached and exits 125, not 75 as if the lock were still held.
#[test]
fn a_redis_gone_at_the_end_of_the_wait_is_called_unreachable() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("gone");
    let _holder = hold(server.cmd().args(["-k", "g"]), &dir, "h");
    let waiter = server
        .cmd()
        .args([
            "-k",
            "g",
            "--wait",
            "3s",
            "--redis-timeout",
            "500ms",
            "--",
            "true",
        ])
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.subscribed_clients() >= 1
    });
    server.stop();
    waiter
        .wait()
        .assert_code(125)
        .assert_stderr_contains("cannot take redlock:g: gave up after 3s")
        .assert_stderr_contains("cannot connect to redis://127.0.0.1:")
        .assert_stderr_lacks("still held");
}

/// Behind a lock another client took (`SET NX` under --prefix ''), released after a while
/// without a word: the waiter polls and gets it within about a second of the release
/// (it used to look again only when that lock's TTL would have ended).
#[test]
fn a_foreign_holder_is_polled() {
    let server = RedisServer::start();
    let dir = TempDir::new("foreign");
    server.set("jobs:nightly", "another-client-token");
    let _: () = server.query(&["PEXPIRE", "jobs:nightly", "20000"]);
    let waiter = server
        .cmd()
        .args([
            "--prefix",
            "",
            "-k",
            "jobs:nightly",
            "--wait",
            "15s",
            "--",
            "touch",
        ])
        .arg(dir.join("waited"))
        .spawn();
    std::thread::sleep(Duration::from_secs(2)); // The other client holds for a while.
    let evals_before = evalsha_calls(&server);
    server.del("jobs:nightly");
    let released = Instant::now();
    let out = waiter.wait();
    out.assert_code(0);
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "took {took:?} after the release"
    );
    assert!(dir.exists("waited"));
    assert!(
        evals_before <= 30,
        "{evals_before} attempts in 2s of polling: no backoff"
    );
}

/// How long the waits below last, and how long before their end the lock is freed without a
/// word (no release notice): after every try the waiter's schedule makes before its deadline
/// (the holder's lease is far off; a foreign lock's polls, 50 ms doubling to 1 s, come at
/// about 1.55-1.95 s and then 2.55 s), but well before the deadline itself.
const LAST_WAIT: Duration = Duration::from_millis(2500);
const FREED_BEFORE_THE_END: Duration = Duration::from_millis(400);

/// Runs `waiter --wait 2500ms -- touch DIR/waited`, calls `free` 2.1 s after it started,
/// and returns how the waiter ended.
fn freed_just_before_the_deadline(waiter: Wrapper, dir: &TempDir, free: impl FnOnce()) -> Output {
    let _timing = timing_sensitive();
    let waiter = waiter
        .args(["--wait", "2500ms", "--", "touch"])
        .arg(dir.join("waited"))
        .spawn();
    // The waiter's deadline is 2.5 s after its own start, which is after this one.
    wait_until(
        Duration::from_secs(15),
        "the end of the wait to be near",
        || waiter.started().elapsed() >= LAST_WAIT - FREED_BEFORE_THE_END,
    );
    free();
    waiter.wait()
}

/// The holder's lock is deleted without a word 0.4 s before the waiter's deadline, while
/// its next try is far off (after the holder's TTL): the waiter's last attempt, at its
/// deadline, gets it, whatever the wait: plain, `--fair`, `--limit 2` (one of two slots
/// freed), a server without `SUBSCRIBE` (polling), a Redlock quorum of three. The last
/// attempt used to come a second before the deadline, and miss a lock freed after it.
#[test]
fn every_wait_makes_a_last_attempt_at_its_deadline() {
    for flags in [&[][..], &["--fair"], &["--limit", "2"]] {
        let server = RedisServer::start();
        let dir = TempDir::new("lastattempt");
        let holder = hold(server.cmd().args(["-k", "la"]).args(flags), &dir, "h");
        let other = (flags.first() == Some(&"--limit"))
            .then(|| hold(server.cmd().args(["-k", "la"]).args(flags), &dir, "h2"));
        let out = freed_just_before_the_deadline(
            server.cmd().args(["-k", "la"]).args(flags),
            &dir,
            || server.del("redlock:la"),
        );
        out.assert_code(0);
        assert!(dir.exists("waited"), "{flags:?}");
        holder.let_go();
        holder.wait().assert_code(76);
        if let Some(other) = other {
            other.let_go();
            other.wait().assert_code(0);
        }
    }

    let server = RedisServer::start_with(ServerOptions {
        args: vec!["--rename-command".into(), "SUBSCRIBE".into(), String::new()],
        ..ServerOptions::default()
    });
    let dir = TempDir::new("lastattempt-polling");
    let holder = hold(server.cmd().args(["-k", "la"]), &dir, "h");
    let out = freed_just_before_the_deadline(server.cmd().args(["-k", "la"]), &dir, || {
        server.del("redlock:la")
    });
    out.assert_code(0)
        .assert_stderr_contains("without release notices");
    holder.let_go();
    holder.wait().assert_code(76);

    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let quorum = || {
        Wrapper::bare()
            .args(nodes.iter().flat_map(|node| ["-r".to_string(), node.url()]))
            .args(["-k", "la"])
    };
    let dir = TempDir::new("lastattempt-quorum");
    let holder = hold(quorum(), &dir, "h");
    let out = freed_just_before_the_deadline(quorum(), &dir, || {
        nodes.iter().for_each(|node| node.del("redlock:la"));
    });
    out.assert_code(0);
    assert!(dir.exists("waited"));
    holder.let_go();
    holder.wait().assert_code(76);
}

/// A waiter queued behind another (`-v`, so it names who it waits for) while two holders
/// come and go: it names the first holder, then the waiter ahead of it once that one holds
/// the lock, each once, with `--fair` and without. A release wakes only the first waiter in
/// the queue, and the holders' leases (60 s) outlast the test, so nothing else would make
/// it look again: it used to say one line and nothing more.
#[test]
fn a_waiter_at_the_back_of_the_queue_names_each_new_holder() {
    for flags in [&["--fair"][..], &[]] {
        let server = RedisServer::start();
        let dir = TempDir::new("names-each");
        let args = |label: &str| {
            server
                .cmd()
                .args(["-k", "q", "--ttl", "60s", "--wait", "60s", "--label", label])
                .args(flags)
        };
        let first = hold(args("first"), &dir, "first");
        let script = dir.script("second", &Job::new(&dir, "second").body());
        let mut second = args("second").arg("--").arg(script).spawn();
        wait_until(Duration::from_secs(15), "the second run to queue", || {
            server.zcard("{redlock:q}:queue") >= 1
        });
        let third = args("third")
            .arg("-v")
            .args(["--", "touch"])
            .arg(dir.join("waited"))
            .spawn();
        let named = |label: &str| {
            let needle = "waiting for redlock:q: held by ";
            third
                .stderr_so_far()
                .lines()
                .filter(|line| line.contains(needle) && line.contains(&format!("({label})")))
                .count()
        };
        wait_until(Duration::from_secs(15), "the first holder named", || {
            named("first") == 1
        });
        first.let_go();
        first.wait().assert_code(0);
        second.wait_for_file(&dir.join("second.ready"), Duration::from_secs(15));
        wait_until(Duration::from_secs(20), "the second holder named", || {
            named("second") == 1
        });
        std::fs::write(dir.join("second.go"), "").unwrap();
        second.wait().assert_code(0);
        let out = third.wait();
        out.assert_code(0);
        assert!(dir.exists("waited"));
        let lines = out
            .stderr
            .lines()
            .filter(|line| line.contains("waiting for redlock:q:"))
            .count();
        assert_eq!(
            lines, 2,
            "{flags:?}: each holder named once\n{}",
            out.stderr
        );
    }
}

/// The issue 30 scenario, as a new user met it: behind another client's lock (polled with
/// growing gaps: about 120, 230, 420 and 860 ms, then 1.2 s), the lock is deleted 1.8 s into
/// a 2 s wait, after the wait's early last attempt and when the next poll would fall past
/// the deadline. The wait still ends with an attempt at its deadline, and gets the lock.
#[test]
fn a_foreign_lock_freed_just_before_the_deadline_is_taken() {
    let server = RedisServer::start();
    let dir = TempDir::new("lastforeign");
    server.set("la", "foreign");
    let _: () = server.query(&["PEXPIRE", "la", "60000"]);
    let spawned = Instant::now();
    let waiter = server
        .cmd()
        .args(["--prefix", "", "-k", "la", "--wait", "2s", "--", "touch"])
        .arg(dir.join("waited"))
        .spawn();
    // The waiter's wait starts after its spawn, so this is 1.8 s or less into it: never
    // after its deadline's attempt, whatever the load.
    std::thread::sleep(Duration::from_millis(1800).saturating_sub(spawned.elapsed()));
    server.del("la");
    let out = waiter.wait();
    out.assert_code(0);
    assert!(dir.exists("waited"));
}

/// When `--wait` runs out, the message names the holder as the `--no-wait` one does (its
/// label, host and pid), not "another process"; behind another client's lock, says so.
#[test]
fn a_wait_that_runs_out_names_the_holder() {
    let server = RedisServer::start();
    let dir = TempDir::new("waitnames");
    let holder = hold(
        server
            .cmd()
            .args(["-k", "wn", "--label", "nightly by alice"]),
        &dir,
        "h",
    );
    let out = server
        .cmd()
        .args(["-k", "wn", "--wait", "1s", "--", "true"])
        .run();
    out.assert_code(75)
        .assert_stderr_contains("redlock:wn is still held by ")
        .assert_stderr_contains("nightly by alice")
        .assert_stderr_contains(&format!("pid {}", holder.pid()))
        .assert_stderr_lacks("another process");
    holder.let_go();
    holder.wait().assert_code(0);

    server.set("wf", "another-client-token");
    server
        .cmd()
        .args(["--prefix", "", "-k", "wf", "--wait", "1s", "--", "true"])
        .run()
        .assert_code(75)
        .assert_stderr_contains(
            "wf is still held by an unknown holder (a value redlock-run did not write)",
        );
}

/// The lock is deleted without a word, then the waiter's subscription is cut: on
/// subscribing again it tries at once (a release in the gap would have gone unheard), and
/// gets the lock long before the holder's TTL would have ended.
#[test]
fn a_subscription_made_again_is_followed_by_an_attempt() {
    let server = RedisServer::start();
    let dir = TempDir::new("resubscribe");
    let holder = hold(server.cmd().args(["-k", "rs"]), &dir, "h");
    let waiter = server
        .cmd()
        .args(["-k", "rs", "--wait", "20s", "--", "touch"])
        .arg(dir.join("waited"))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.subscribed_clients() >= 1
    });
    server.del("redlock:rs");
    let cut = Instant::now();
    let _: i64 = server.query(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    waiter.wait().assert_code(0);
    assert!(
        cut.elapsed() < Duration::from_secs(10),
        "waited {:?} after the cut",
        cut.elapsed()
    );
    holder.wait().assert_code(76);
}

/// How many scripts the server has run so far.
fn evalsha_calls(server: &RedisServer) -> u64 {
    server
        .command_stats()
        .into_iter()
        .filter(|(name, _)| name == "evalsha" || name == "eval")
        .map(|(_, calls)| calls)
        .sum()
}

/// Redis freezes (`SIGSTOP`: connections hang rather than fail) while a run waits with
/// `--wait 3s` and `--redis-timeout 2s`: no attempt starts after the deadline and none
/// outlasts it, but for the retry of the last one, unanswered (only the retry can tell
/// whether it took the lock): it gives up at about 5 s (exit 125, Redis did not answer),
/// not after its last attempt at the deadline and twice the Redis timeout (7 s).
#[test]
fn a_frozen_redis_does_not_stretch_the_wait() {
    let server = RedisServer::start();
    let dir = TempDir::new("frozen-wait");
    let holder = hold(server.cmd().args(["-k", "fw"]), &dir, "h");
    let waiter = server
        .cmd()
        .args(["-k", "fw", "--wait", "3s", "--redis-timeout", "2s"])
        .args(["--", "true"])
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.subscribed_clients() >= 1
    });
    server.freeze();
    let out = waiter.wait();
    server.thaw();
    eprintln!("frozen Redis: --wait 3s gave up after {:?}", out.elapsed);
    out.assert_code(125)
        .assert_stderr_contains("cannot take redlock:fw: gave up after");
    assert!(
        out.elapsed < Duration::from_millis(6500),
        "--wait 3s gave up after {:?}\n{}",
        out.elapsed,
        out.stderr
    );
    holder.let_go();
    holder.wait().assert_code(0);
}

/// Connections the server has accepted so far (`INFO stats`).
fn connections_received(server: &RedisServer) -> u64 {
    server
        .info("stats")
        .lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .and_then(|count| count.trim().parse().ok())
        .expect("total_connections_received in INFO stats")
}

/// Messages too large to be a notice (over 1 MiB) flooding the release channel end the
/// waiter's subscription each time; it subscribes again after a pause that grows (up to a
/// second), not at once each time: a few connections, not one a message. Once the flood
/// stops, it subscribes again and a real release wakes it.
#[test]
fn a_flood_of_oversized_messages_makes_few_connections() {
    let server = RedisServer::start();
    let dir = TempDir::new("bigflood");
    let holder = hold(server.cmd().args(["-k", "bf", "-t", "60s"]), &dir, "h");
    let waiter = server
        .cmd()
        .args(["-k", "bf", "--wait", "120s", "--", "touch"])
        .arg(dir.join("waited"))
        .spawn();
    let channel = "redlock-run:released:redlock:bf";
    let waiter_listens = || {
        let (_, listeners): (String, u64) = server.query(&["PUBSUB", "NUMSUB", channel]);
        listeners == 1
    };
    wait_until(
        Duration::from_secs(15),
        "the waiter to subscribe",
        waiter_listens,
    );
    let before = connections_received(&server);
    let junk = "x".repeat((1 << 20) + 1);
    let mut publisher = server.connection();
    let started = Instant::now();
    let mut sent = 0;
    while started.elapsed() < Duration::from_secs(2) {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(channel)
            .arg(&junk)
            .query(&mut publisher)
            .expect("publishing");
        sent += 1;
    }
    let flood = started.elapsed();
    // One connection of the publisher's own, and the waiter's.
    let made = connections_received(&server) - before - 1;
    eprintln!("{made} connections during {sent} oversized messages over {flood:?}");
    // Subscribing again up to a second apart makes a few rounds a second at first, one a
    // second after that; each round a connection for the subscription and one for its
    // try, and one to spare.
    let bound = 3 * (4 + 2 * flood.as_secs());
    assert!(
        made <= bound,
        "{made} connections in {flood:?} (bound {bound})"
    );

    wait_until(
        Duration::from_secs(15),
        "the waiter to subscribe again",
        waiter_listens,
    );
    let released = Instant::now();
    holder.let_go();
    holder.wait().assert_code(0);
    waiter.wait().assert_code(0);
    assert!(dir.exists("waited"));
    // The lease is 60 s: a missed release would wait for it.
    assert!(
        released.elapsed() < Duration::from_secs(30),
        "woken {:?} after the release",
        released.elapsed()
    );
}
