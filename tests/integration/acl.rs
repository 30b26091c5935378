//! Redis ACL users: the user docs/security.md's minimal ACL line describes can do everything
//! redlock-run does; a user that lacks one permission gets a message naming it and exit
//! 125 before its command runs, except for the release channel, whose absence costs only
//! prompt wake-up; a server that wants a password says so. The same user reads the
//! history (and follows it), the counters and the check.

use std::time::{Duration, Instant};

use crate::support::*;

const PASSWORD: &str = "acl-pw-6f1a";

/// The minimal ACL rules for the default prefix (`redlock:`), as docs/security.md gives
/// them, less the rules named in `without`.
pub(crate) fn minimal_rules(without: &[&str]) -> Vec<String> {
    let rules = crate::docs::documented_acl_lines().swap_remove(0);
    for rule in without {
        assert!(
            rules.iter().any(|r| r == rule),
            "{rule} is not among the documented rules: {rules:?}"
        );
    }
    rules
        .into_iter()
        .filter(|rule| !without.contains(&rule.as_str()))
        .collect()
}

/// A server with the user `locker` holding `rules`; returns it with that user's URL.
pub(crate) fn server_with_user(rules: &[String]) -> (RedisServer, String) {
    let server = RedisServer::start();
    let mut setuser = vec!["ACL", "SETUSER", "locker", "reset", "on"];
    let password = format!(">{PASSWORD}");
    setuser.push(&password);
    setuser.extend(rules.iter().map(String::as_str));
    let _: () = server.query(&setuser);
    let url = format!("redis://locker:{PASSWORD}@127.0.0.1:{}", server.port());
    (server, url)
}

/// As the minimal user: run, busy, prompt wake-up, renewal, loss, --limit, --fair,
/// status, list and release --force, and a script cache emptied behind its back.
#[test]
fn the_minimal_acl_user_can_do_everything() {
    let (server, url) = server_with_user(&minimal_rules(&[]));
    let dir = TempDir::new("acl");
    let user = || Wrapper::new(&url);

    user().args(["-k", "a", "--", "true"]).run().assert_code(0);
    assert!(!server.exists("redlock:a"));

    let holder = hold(user().args(["-k", "a"]), &dir, "h");
    user()
        .args(["-k", "a", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    let waiter = user()
        .args(["-k", "a", "--", "touch"])
        .arg(dir.join("waited"))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.subscribed_clients() >= 1
    });
    let status = user().args(["status", "-k", "a"]).run();
    status
        .assert_code(0)
        .assert_stdout_contains("redlock:a held by");
    user()
        .args(["list"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("redlock:a held by");
    let released = Instant::now();
    holder.let_go();
    holder.wait().assert_code(0).assert_stderr_lacks("warning");
    let out = waiter.wait();
    out.assert_code(0).assert_stderr_lacks("warning");
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "the waiter was not woken by the release"
    );

    user()
        .args(["-k", "r", "--ttl", "1s", "--", "sleep", "2.5"])
        .run()
        .assert_code(0)
        .assert_stderr_lacks("lock lost");

    let lost = hold(user().args(["-k", "l", "--ttl", "1s"]), &dir, "lost");
    server.del("redlock:l");
    lost.wait().assert_code(76);

    for extra in [&["--limit", "2"][..], &["--fair"]] {
        user()
            .args(["-k", "x"])
            .args(extra)
            .args(["--", "true"])
            .run()
            .assert_code(0);
    }

    let stuck = hold(user().args(["-k", "f"]), &dir, "stuck");
    user()
        .args(["release", "-k", "f", "--force"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("released redlock:f")
        .assert_stderr_lacks("warning");
    stuck.wait().assert_code(76);

    // The server forgets its scripts (a restart, SCRIPT FLUSH): they are loaded again.
    let _: () = server.query(&["SCRIPT", "FLUSH"]);
    user().args(["-k", "a", "--", "true"]).run().assert_code(0);
}

/// Without `script|load`, the scripts are sent whole (EVAL) when the server lacks them, so
/// the user goes on working after a restart.
#[test]
fn a_user_that_may_not_load_scripts_still_works_after_a_flush() {
    let (server, url) = server_with_user(&minimal_rules(&["+script|load"]));
    for _ in 0..2 {
        let _: () = server.query(&["SCRIPT", "FLUSH"]);
        Wrapper::new(&url)
            .args(["-k", "s", "--", "true"])
            .run()
            .assert_code(0);
    }
}

/// Each permission redlock-run needs, taken away in turn: the run stops before its command
/// with exit 125 and a message naming what was refused, and leaves nothing behind.
#[test]
fn a_missing_permission_is_named_before_the_command_runs() {
    for (rule, named) in [
        ("+get", "GET"),
        ("+pexpire", "PEXPIRE"),
        ("+del", "DEL"),
        ("+set", "SET"),
        ("+incr", "INCR"),
        ("+type", "TYPE"),
        ("+evalsha", "evalsha"),
        ("+zadd", "ZADD"),
        ("+zrange", "ZRANGE"),
        ("+hset", "HSET"),
        ("+hdel", "HDEL"),
        // With the channels and SUBSCRIBE allowed, waiters would listen for a release that
        // is never announced, and sleep until the TTL.
        ("+publish", "PUBLISH"),
        // The server's own words: "...access one of the keys..." (Redis), "...access a
        // key" (Valkey).
        ("~redlock:*", "key"),
    ] {
        let (server, url) = server_with_user(&minimal_rules(&[rule]));
        let dir = TempDir::new("noperm");
        let out = Wrapper::new(&url)
            .args(["-k", "p", "--", "touch"])
            .arg(dir.join("ran"))
            .run();
        out.assert_code(125)
            .assert_stderr_contains("refused a command redlock-run needs")
            .assert_stderr_contains(named)
            .assert_stderr_lacks("authentication failed");
        assert!(!dir.exists("ran"), "without {rule} the command ran");
        assert!(!server.exists("redlock:p"), "without {rule} a key was left");
    }
}

/// The eviction check as a user that may not run `CONFIG` (docs/security.md's minimal user): read
/// through `INFO`, so an evicting server is still refused; a user that may run neither
/// is refused too, since the check cannot be made, unless it passes `--allow-eviction`.
#[test]
fn the_eviction_check_works_without_config() {
    let (server, url) = server_with_user(&minimal_rules(&[]));
    let _: () = server.query(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let _: () = server.query(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let dir = TempDir::new("acl-evict");
    Wrapper::new(&url)
        .args(["-k", "e", "--", "touch"])
        .arg(dir.join("ran"))
        .run()
        .assert_code(125)
        .assert_stderr_contains("maxmemory-policy is allkeys-lru");
    assert!(!dir.exists("ran"));

    let (server, url) = server_with_user(&minimal_rules(&["+info"]));
    let _: () = server.query(&["CONFIG", "SET", "maxmemory", "100mb"]);
    Wrapper::new(&url)
        .args(["-k", "e", "--", "touch"])
        .arg(dir.join("ran"))
        .run()
        .assert_code(125)
        .assert_stderr_contains("cannot tell whether")
        .assert_stderr_contains("+info");
    assert!(!dir.exists("ran"));
    Wrapper::new(&url)
        .args(["-k", "e", "--allow-eviction", "--", "true"])
        .run()
        .assert_code(0);
}

/// Without the channels (Redis 7's default for a new user): a release that deleted the key
/// reports success with a warning, waiters fall back to looking often and still get the
/// lock within a fraction of a second, and `release --force` exits 0.
#[test]
fn a_missing_channel_costs_only_prompt_wake_up() {
    let (server, url) = server_with_user(&minimal_rules(&[
        "&redlock-run:released:*",
        "&redlock-run:wake:*",
    ]));
    let dir = TempDir::new("nochannel");
    let holder = hold(Wrapper::new(&url).args(["-k", "c"]), &dir, "h");
    let waiter = Wrapper::new(&url)
        .args(["-k", "c", "--wait", "20s", "--", "touch"])
        .arg(dir.join("waited"))
        .spawn();
    std::thread::sleep(Duration::from_millis(300)); // Let the waiter find the lock busy.
    holder.let_go();
    holder
        .wait()
        .assert_code(0)
        .assert_stderr_contains("released redlock:c, but Redis refused to announce it");
    let out = waiter.wait();
    out.assert_code(0)
        .assert_stderr_contains("without release notices, looking every 250ms");
    assert!(dir.exists("waited"));
    assert!(
        out.elapsed < Duration::from_secs(15),
        "the waiter waited out a TTL: {:?}",
        out.elapsed
    );

    let stuck = hold(Wrapper::new(&url).args(["-k", "f"]), &dir, "stuck");
    Wrapper::new(&url)
        .args(["release", "-k", "f", "--force"])
        .run()
        .assert_code(0)
        .assert_stdout_contains("released redlock:f")
        .assert_stderr_contains("Redis refused to announce the release");
    stuck.wait().assert_code(76);
    assert!(!server.exists("redlock:f"));
}

/// A server that wants a password, given none: "authentication required", not a protocol
/// error, for runs and for `status` alike.
#[test]
fn no_credentials_on_a_protected_server_says_authentication_required() {
    let server = RedisServer::start_with_password(PASSWORD);
    let url = format!("redis://127.0.0.1:{}", server.port());
    for args in [&["-k", "n", "--", "true"][..], &["status", "-k", "n"]] {
        let out = Wrapper::new(&url).args(args).run();
        out.assert_code(125)
            .assert_stderr_contains("authentication required at redis://127.0.0.1:")
            .assert_stderr_lacks("protocol error");
    }
}

/// `--once` and `--once-per` need nothing beyond the documented user: the work is recorded
/// and found, and a second run skips it.
#[test]
fn the_minimal_acl_user_can_run_once() {
    let (server, url) = server_with_user(&minimal_rules(&[]));
    let dir = TempDir::new("acl-once");
    let log = dir.join("log");
    let note = format!("echo x >> '{}'", log.display());
    for flags in [["--once", "v1"], ["--once-per", "1h"]] {
        for _ in 0..2 {
            Wrapper::new(&url)
                .args(["-k", "once"])
                .args(flags)
                .args(["--shell", &note])
                .run()
                .assert_code(0)
                .assert_stderr_lacks("warning");
        }
    }
    let lines = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(lines.lines().count(), 2, "{lines}");
    assert!(server.exists("{redlock:once}:done"));
    assert!(server.exists("{redlock:once}:done:per"));
}

/// A user without the recording commands (`+xadd +hincrby`): the lock works as before, the
/// command's status stands, and one warning names what was refused; nothing recorded.
#[test]
fn a_user_that_may_not_record_runs_with_one_warning() {
    let (server, url) = server_with_user(&minimal_rules(&["+xadd", "+hincrby"]));
    let out = Wrapper::new(&url)
        .args(["-k", "h", "--", "sh", "-c", "exit 5"])
        .run();
    out.assert_code(5)
        .assert_stderr_contains("XADD")
        .assert_stderr_contains("HINCRBY");
    assert_eq!(out.stderr.matches("warning").count(), 1, "{}", out.stderr);
    assert!(!server.exists("redlock:h"));
    assert!(!server.exists("{redlock:h}:history"));
    // Waiting and giving up records nothing either, and warns once.
    let dir = TempDir::new("acl-record");
    let holder = hold(Wrapper::new(&url).args(["-k", "h"]), &dir, "h");
    let out = Wrapper::new(&url)
        .args(["-k", "h", "--wait", "1s", "--", "true"])
        .run();
    out.assert_code(75);
    assert_eq!(out.stderr.matches("warning").count(), 1, "{}", out.stderr);
    holder.let_go();
    holder.wait().assert_code(0);
}

/// As the minimal user, `metrics`, `check` and `status` read a lock's counters; without
/// `+hgetall`, `metrics` and `check` name it (125, 3 UNKNOWN) and `status` still shows the
/// lock, with a warning.
#[test]
fn the_minimal_acl_user_reads_the_counters() {
    for (without, metrics_code, check_code) in [(&[][..], 0, 0), (&["+hgetall"][..], 125, 3)] {
        let (server, url) = server_with_user(&minimal_rules(without));
        server.seed_stats("c", &[("acquired", "4".into()), ("skips", "1".into())]);
        let user = || Wrapper::new(&url);
        let metrics = user().arg("metrics").run();
        metrics.assert_code(metrics_code);
        let check = user().args(["check", "-k", "c", "--max-skips", "2"]).run();
        check.assert_code(check_code);
        let status = user().args(["status", "-k", "c"]).run();
        status
            .assert_code(1)
            .assert_stdout_contains("redlock:c is free");
        if without.is_empty() {
            let m = Exposition::parse(&metrics.stdout_str());
            assert_eq!(
                m.value("redlock_run_acquired_total", &[("key", "c")]),
                Some(4.0)
            );
            status.assert_stdout_contains("1 consecutive skip");
        } else {
            metrics.assert_stderr_contains("HGETALL");
            check.assert_stdout_contains("HGETALL");
            status
                .assert_stderr_contains("HGETALL")
                .assert_stderr_contains("warning");
        }
    }
}

/// As the minimal user, `history` reads what its runs recorded (`XREVRANGE`), and
/// `--follow` prints a new run's events as they are recorded (`XREAD BLOCK`), with no
/// warning.
#[test]
fn the_minimal_acl_user_reads_and_follows_the_history() {
    let (server, url) = server_with_user(&minimal_rules(&[]));
    let user = || Wrapper::new(&url);
    let events = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .map(|line| {
                let event: serde_json::Value = serde_json::from_str(line).expect("JSON");
                event["event"].as_str().unwrap_or_default().to_owned()
            })
            .collect()
    };
    user()
        .args(["-k", "h", "--", "true"])
        .run()
        .assert_code(0)
        .assert_stderr_lacks("warning");
    let out = user().args(["history", "-k", "h", "--json"]).run();
    out.assert_code(0).assert_stderr_lacks("warning");
    assert_eq!(events(&out.stdout_str()), ["acquired", "released"]);

    let follower = user()
        .args(["history", "-k", "h", "-n", "0", "--follow", "--json"])
        .spawn();
    wait_until(Duration::from_secs(20), "a blocking XREAD", || {
        server.clients().iter().any(|client| {
            client
                .iter()
                .any(|(field, value)| field == "cmd" && value == "xread")
        })
    });
    user()
        .args(["-k", "h", "--", "sh", "-c", "exit 3"])
        .run()
        .assert_code(3);
    wait_until(Duration::from_secs(20), "2 events followed", || {
        follower.stdout_so_far().lines().count() >= 2
    });
    follower.signal(libc::SIGTERM);
    let out = follower.wait();
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    assert_eq!(events(&out.stdout_str()), ["acquired", "released"]);
}
