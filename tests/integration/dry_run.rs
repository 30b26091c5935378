//! `--dry-run`: the checks of a real run and the lock's state, said; nothing run, nothing
//! written (every key's value and the key count the same before and after, and no write
//! command in the server's command statistics).

use crate::support::*;

/// A command that would leave a file behind, had it run.
fn would_create(dir: &TempDir) -> String {
    format!("touch '{}'", dir.join("ran").display())
}

#[test]
fn a_free_lock_would_run_and_nothing_runs() {
    let server = RedisServer::start();
    let dir = TempDir::new("dry-free");
    let out = server
        .cmd()
        .args(["-k", "dry", "--dry-run", "--shell", &would_create(&dir)])
        .run();
    out.assert_code(0)
        .assert_stderr_contains("would run now: redlock:dry is free");
    assert!(!dir.exists("ran"), "the command ran");
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

#[test]
fn a_busy_lock_is_75_and_names_the_holder() {
    let server = RedisServer::start();
    let dir = TempDir::new("dry-busy");
    let holder = hold(
        server.cmd().args(["-k", "dry", "--label", "the-holder"]),
        &dir,
        "h",
    );
    for wait in [&["--no-wait"][..], &["--wait", "10s"], &[]] {
        let out = server
            .cmd()
            .args(["-k", "dry", "--dry-run"])
            .args(wait)
            .args(["--shell", &would_create(&dir)])
            .run();
        out.assert_code(75).assert_stderr_contains("the-holder");
        assert!(!dir.exists("ran"), "the command ran");
    }
    holder.let_go();
}

#[test]
fn an_evicting_server_is_refused() {
    let server = RedisServer::start();
    let _: () = server.query(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let _: () = server.query(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let out = server
        .cmd()
        .args(["-k", "dry", "--dry-run", "--", "true"])
        .run();
    out.assert_code(125).assert_stderr_contains("allkeys-lru");
    server
        .cmd()
        .args(["-k", "dry", "--dry-run", "--allow-eviction", "--", "true"])
        .run()
        .assert_code(0);
}

#[test]
fn a_wrong_password_is_refused() {
    let server = RedisServer::start_with_password("right-password");
    let url = format!("redis://127.0.0.1:{}", server.port());
    let out = Wrapper::new(&url)
        .env("REDLOCK_PASSWORD", "wrong-password")
        .args(["-k", "dry", "--dry-run", "--", "true"])
        .run();
    out.assert_code(125);
    out.assert_not_leaked("wrong-password");
}

/// Every key's value (DUMP) and the key count the same before and after, on a server with a
/// held lock, a queued waiter, its fence, and history and stats keys; and no write command
/// counted.
#[test]
fn nothing_is_written() {
    let server = RedisServer::start();
    let dir = TempDir::new("dry-nothing");
    let holder = hold(server.cmd().args(["-k", "dry", "--fair"]), &dir, "h");
    let waiter = server
        .cmd()
        .args(["-k", "dry", "--fair", "--", "true"])
        .spawn();
    wait_until(
        std::time::Duration::from_secs(10),
        "the waiter is queued",
        || server.zcard("{redlock:dry}:queue") == 1,
    );
    let _: String = server.query(&["XADD", "{redlock:dry}:history", "*", "event", "acquired"]);
    server.hset("{redlock:dry}:stats", "acquired", "3");
    let snapshot = || {
        let mut keys = server.keys();
        keys.sort();
        let values: Vec<(String, Option<Vec<u8>>)> = keys
            .into_iter()
            .map(|key| {
                let dump: Option<Vec<u8>> = server.query(&["DUMP", &key]);
                (key, dump)
            })
            .collect();
        (server.dbsize(), values)
    };
    let before = snapshot();
    let _: () = server.query(&["CONFIG", "RESETSTAT"]);
    for flags in [&["--fair"][..], &["--no-wait"], &["-v"]] {
        server
            .cmd()
            .args(["-k", "dry", "--dry-run"])
            .args(flags)
            .args(["--shell", &would_create(&dir)])
            .run()
            .assert_code(75);
    }
    let stats = server.command_stats();
    assert_eq!(snapshot(), before);
    let writes = [
        "set", "del", "incr", "pexpire", "zadd", "zrem", "hset", "hdel", "xadd", "publish",
        "spublish", "hincrby", "expire", "unlink",
    ];
    for (command, calls) in &stats {
        assert!(
            !writes.contains(&command.as_str()),
            "{command} was called {calls} times: {stats:?}"
        );
    }
    assert!(!dir.exists("ran"));
    holder.let_go();
    waiter.wait().assert_code(0);
}

/// Redlock: every node is checked; one evicting node refuses the run.
#[test]
fn every_redlock_node_is_checked() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let quorum = || {
        let mut wrapper = Wrapper::bare();
        for url in &urls {
            wrapper = wrapper.args(["-r", url]);
        }
        wrapper.args(["-k", "dry", "--dry-run", "--", "true"])
    };
    quorum()
        .run()
        .assert_code(0)
        .assert_stderr_contains("is free (on all 3 nodes)");
    let _: () = nodes[2].query(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let _: () = nodes[2].query(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
    quorum()
        .run()
        .assert_code(125)
        .assert_stderr_contains("volatile-lru");
}

/// The write commands no dry run may send (as the server's command statistics name them).
const WRITES: [&str; 17] = [
    "set", "del", "incr", "pexpire", "zadd", "zrem", "hset", "hdel", "xadd", "publish", "spublish",
    "hincrby", "expire", "unlink", "setex", "psetex", "getdel",
];

/// Asserts that no write command was counted since the last `CONFIG RESETSTAT`.
#[track_caller]
fn assert_no_write(server: &RedisServer) {
    let stats = server.command_stats();
    for (command, calls) in &stats {
        assert!(
            !WRITES.contains(&command.as_str()),
            "{command} was called {calls} times: {stats:?}"
        );
    }
}

/// A user whose ACL lacks a command a real run needs (PEXPIRE): 125 naming it, asked of
/// the ACL without running anything (Redis 7, Valkey); Redis 6.2 cannot be asked without
/// writing, and the dry run says the permissions were not checked. Nothing is written
/// either way, and the documented minimal user passes.
#[test]
fn the_acl_is_checked_without_writing() {
    let (server, url) = crate::acl::server_with_user(&crate::acl::minimal_rules(&["+pexpire"]));
    let dir = TempDir::new("dry-acl");
    let _: () = server.query(&["CONFIG", "RESETSTAT"]);
    let out = Wrapper::new(&url)
        .args(["-k", "p", "--dry-run", "--shell", &would_create(&dir)])
        .run();
    if server.version().starts_with("redis 6.") {
        out.assert_code(0)
            .assert_stderr_contains("permissions were not checked")
            .assert_stderr_contains("would run now");
    } else {
        out.assert_code(125)
            .assert_stderr_contains("refused a command redlock-run needs")
            .assert_stderr_contains("PEXPIRE")
            .assert_stderr_lacks("would run now");
    }
    assert!(!dir.exists("ran"), "the command ran");
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
    assert_no_write(&server);

    let (server, url) = crate::acl::server_with_user(&crate::acl::minimal_rules(&[]));
    for flags in [
        &[][..],
        &["--once", "v1"],
        &["--once-per", "1h"],
        &["--limit", "2"],
    ] {
        let out = Wrapper::new(&url)
            .args(["-k", "p", "--dry-run"])
            .args(flags)
            .args(["--shell", &would_create(&dir)])
            .run();
        out.assert_code(0)
            .assert_stderr_contains("would run now")
            .assert_stderr_lacks("refused");
        if !server.version().starts_with("redis 6.") {
            out.assert_stderr_lacks("not checked");
        }
    }
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

/// `--once ID`: after a real run with that ID, a dry run with it would not run (exit 0,
/// "already done"), one with another ID would; `--once-per` alike. Nothing is written.
#[test]
fn work_already_done_would_not_run() {
    let server = RedisServer::start();
    let dir = TempDir::new("dry-once");
    for flags in [["--once", "v1"], ["--once-per", "1h"]] {
        server
            .cmd()
            .args(["-k", "once"])
            .args(flags)
            .args(["--", "true"])
            .run()
            .assert_code(0);
    }
    let before = server.keys().len();
    let _: () = server.query(&["CONFIG", "RESETSTAT"]);
    for flags in [["--once", "v1"], ["--once-per", "1h"]] {
        let out = server
            .cmd()
            .args(["-k", "once", "--dry-run"])
            .args(flags)
            .args(["--shell", &would_create(&dir)])
            .run();
        out.assert_code(0)
            .assert_stderr_contains("would not run: already done")
            .assert_stderr_contains(flags[0])
            .assert_stderr_lacks("would run now");
    }
    // Another ID would run; so would --once-per on another lock, which has no record.
    let out = server
        .cmd()
        .args(["-k", "once", "--dry-run", "--once", "v2"])
        .args(["--shell", &would_create(&dir)])
        .run();
    out.assert_code(0)
        .assert_stderr_contains("would run now")
        .assert_stderr_lacks("already done");
    let out = server
        .cmd()
        .args(["-k", "other", "--dry-run", "--once-per", "1h"])
        .args(["--shell", &would_create(&dir)])
        .run();
    out.assert_code(0)
        .assert_stderr_contains("would run now")
        .assert_stderr_lacks("already done");
    assert!(!dir.exists("ran"), "the command ran");
    assert_eq!(server.keys().len(), before, "keys: {:?}", server.keys());
    assert_no_write(&server);
}

/// `--limit 2`: with one holder a run would still get in (0); with two it is busy (75).
#[test]
fn a_limit_of_two_is_busy_only_with_two_holders() {
    let server = RedisServer::start();
    let dir = TempDir::new("dry-limit");
    let dry = || {
        server
            .cmd()
            .args(["-k", "sem", "--limit", "2", "--dry-run", "--no-wait"])
            .args(["--shell", &would_create(&dir)])
            .run()
    };
    let first = hold(server.cmd().args(["-k", "sem", "--limit", "2"]), &dir, "a");
    dry().assert_code(0).assert_stderr_contains("would run now");
    let second = hold(server.cmd().args(["-k", "sem", "--limit", "2"]), &dir, "b");
    dry()
        .assert_code(75)
        .assert_stderr_contains("would not run")
        .assert_stderr_contains("busy");
    assert!(!dir.exists("ran"), "the command ran");
    first.let_go();
    second.let_go();
    first.wait().assert_code(0);
    second.wait().assert_code(0);
}

/// A lock in use with another `--limit` refuses a real run (125), free slots or not: the
/// dry run says so, with the same exit status, instead of "would run now" or "would wait".
#[test]
fn another_limit_in_use_is_refused_as_a_real_run_is() {
    let server = RedisServer::start();
    let dir = TempDir::new("dry-other-limit");
    let one = hold(server.cmd().args(["-k", "one"]), &dir, "a");
    let two = hold(server.cmd().args(["-k", "two", "--limit", "2"]), &dir, "b");
    for (key, limit, other) in [
        ("one", "3", "--limit 1, not --limit 3"),
        ("two", "1", "--limit 2, not --limit 1"),
        ("two", "3", "--limit 2, not --limit 3"),
    ] {
        let real = server
            .cmd()
            .args(["-k", key, "--limit", limit, "--no-wait"])
            .args(["--shell", &would_create(&dir)])
            .run();
        real.assert_code(125).assert_stderr_contains(other);
        server
            .cmd()
            .args(["-k", key, "--limit", limit, "--dry-run"])
            .args(["--shell", &would_create(&dir)])
            .run()
            .assert_code(125)
            .assert_stderr_contains(other)
            .assert_stderr_lacks("would run")
            .assert_stderr_lacks("would wait");
    }
    assert!(!dir.exists("ran"), "the command ran");
    one.let_go();
    two.let_go();
    one.wait().assert_code(0);
    two.wait().assert_code(0);
}

/// A command that does not exist, or may not be executed, is 127 or 126 in a dry run as in
/// a real one, with the real run's message, not "would run now".
#[test]
fn a_command_that_cannot_run_is_127_or_126_as_in_a_real_run() {
    let server = RedisServer::start();
    let dir = TempDir::new("dry-missing");
    let real = server
        .cmd()
        .args(["-k", "dm", "--", "no-such-program-redlock-test"])
        .run();
    real.assert_code(127)
        .assert_stderr_contains("cannot run no-such-program-redlock-test: ");
    let dry = server
        .cmd()
        .args([
            "-k",
            "dm",
            "--dry-run",
            "--",
            "no-such-program-redlock-test",
        ])
        .run();
    dry.assert_code(127)
        .assert_stderr_contains("cannot run no-such-program-redlock-test: ")
        .assert_stderr_lacks("would run now");

    let plain = dir.join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    server
        .cmd()
        .args(["-k", "dm", "--dry-run", "--"])
        .arg(&plain)
        .run()
        .assert_code(126)
        .assert_stderr_contains("Permission denied")
        .assert_stderr_lacks("would run now");
    server
        .cmd()
        .args(["-k", "dm", "--dry-run", "--", "true"])
        .run()
        .assert_code(0)
        .assert_stderr_contains("would run now");
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}
