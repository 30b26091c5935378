//! Servers a lock is not safe on, or that are not what the URL says: one that may evict the
//! lock's key under memory pressure (refused before the command runs, unless
//! `--allow-eviction`), a Redis Cluster node behind a plain `redis://` URL, a port that is
//! not Redis at all, a URL that asks for RESP3, a server whose `SUBSCRIBE` was renamed
//! away (its waiters poll), and one whose `HELLO` was (its waiters' subscriptions stay
//! RESP2).
//!
//! What this module does not own: the ACL side of the eviction check (a user without
//! `CONFIG`), which `acl.rs` tests with docs/security.md's minimal user.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::support::deployments::{Cluster, SentinelSet};
use crate::support::*;

/// Makes `server` one that evicts keys by `policy` once it holds 100 MB.
fn evicting(server: &RedisServer, policy: &str) {
    let _: () = server.query(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let _: () = server.query(&["CONFIG", "SET", "maxmemory-policy", policy]);
}

/// A run on `url` (or on `-r` URLs) that would touch a file if its command ran: refused
/// with 125 before the command, naming `policy` and the fix.
#[track_caller]
fn assert_refused_for_eviction(wrapper: Wrapper, policy: &str) {
    let dir = TempDir::new("evicting");
    let out = wrapper
        .args(["-k", "ev", "--", "touch"])
        .arg(dir.join("ran"))
        .run();
    out.assert_code(125)
        .assert_stderr_contains("may evict")
        .assert_stderr_contains(&format!("maxmemory-policy is {policy}"))
        .assert_stderr_contains("CONFIG SET maxmemory-policy noeviction")
        .assert_stderr_contains("--allow-eviction");
    assert!(!dir.exists("ran"), "the command ran on an evicting server");
}

/// `allkeys-lru` (the usual cache setting) and `volatile-ttl` (which picks keys that expire
/// soonest, a lock's first): refused, and the lock left behind for no one.
#[test]
fn a_server_that_may_evict_the_lock_is_refused() {
    let server = RedisServer::start();
    for policy in ["allkeys-lru", "volatile-ttl"] {
        evicting(&server, policy);
        assert_refused_for_eviction(server.cmd(), policy);
        assert!(!server.exists("redlock:ev"), "{policy}: the lock was left");
    }
}

/// `INFO` calls a server has served (`INFO commandstats`); the call that reads them is
/// counted only by the next one.
fn info_calls(server: &RedisServer) -> u64 {
    server
        .command_stats()
        .into_iter()
        .find(|(name, _)| name == "info")
        .map_or(0, |(_, calls)| calls)
}

/// A run asks the server what it is (memory, cluster) with one `INFO`, in the write that
/// carries its acquisition, where the server takes several sections at once (Redis 7,
/// Valkey). Redis 6.2 refuses that, and is asked each section after, in one round trip:
/// still checked, as the eviction refusal shows.
#[test]
fn a_run_asks_info_once() {
    let server = RedisServer::start();
    let old = server.version().starts_with("redis 6.");
    let before = info_calls(&server);
    server
        .cmd()
        .args(["-k", "io", "--", "true"])
        .run()
        .assert_code(0);
    let asked = info_calls(&server) - before - 1;
    assert_eq!(asked, if old { 3 } else { 1 }, "INFO calls in one run");
    evicting(&server, "allkeys-lru");
    assert_refused_for_eviction(server.cmd(), "allkeys-lru");
}

/// `--allow-eviction` and `REDLOCK_ALLOW_EVICTION` take the risk; a server with a memory
/// limit that never evicts (`noeviction`) needs neither.
#[test]
fn eviction_may_be_allowed_and_noeviction_is_fine() {
    let server = RedisServer::start();
    evicting(&server, "allkeys-lru");
    server
        .cmd()
        .args(["-k", "ev", "--allow-eviction", "--", "true"])
        .run()
        .assert_code(0);
    server
        .cmd()
        .env("REDLOCK_ALLOW_EVICTION", "1")
        .args(["-k", "ev", "--", "true"])
        .run()
        .assert_code(0);
    evicting(&server, "noeviction");
    server
        .cmd()
        .args(["-k", "ev", "--", "true"])
        .run()
        .assert_code(0)
        .assert_stderr_lacks("evict");
}

/// The check rides on a connection's first acquisition, and a waiter, which closes its
/// connection between tries, is not asked again on each: the `INFO` calls the server counts
/// do not grow while it waits and takes the lock.
#[test]
fn a_waiter_is_checked_once_not_on_every_try() {
    let server = RedisServer::start();
    let dir = TempDir::new("checked-once");
    // `INFO commandstats` counts the calls before it; this reading adds one itself.
    let infos = || -> u64 {
        let stats: String = server.query(&["INFO", "commandstats"]);
        stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_info:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().unwrap())
    };
    let holder = hold(server.cmd().args(["-k", "once"]), &dir, "h");
    let mut waiter = server
        .cmd()
        .args(["-v", "-k", "once", "--wait", "20s", "--", "true"])
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to be waiting", || {
        waiter.stderr_so_far().contains("still busy") || waiter.has_exited()
    });
    let before = infos();
    holder.let_go();
    holder.wait().assert_code(0);
    waiter.wait().assert_code(0);
    assert_eq!(infos(), before + 1, "the waiter asked INFO again");
}

/// What a server said of itself is trusted for a waiter's later tries only for a while
/// (a minute; debug builds, the suite's, take `REDLOCK_TEST_FACTS_KEPT_MS`, see
/// CONTRIBUTING.md): a policy changed while it waits is seen before it takes the lock, and
/// the run refused. With the period at 0 every try asks again.
#[test]
fn a_waiter_asks_again_once_the_answer_is_old() {
    let server = RedisServer::start();
    let dir = TempDir::new("asked-again");
    let holder = hold(server.cmd().args(["-k", "again"]), &dir, "h");
    let mut waiter = server
        .cmd()
        .env("REDLOCK_TEST_FACTS_KEPT_MS", "0")
        .args(["-v", "-k", "again", "--wait", "20s", "--", "touch"])
        .arg(dir.join("ran"))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to be waiting", || {
        waiter.stderr_so_far().contains("still busy") || waiter.has_exited()
    });
    evicting(&server, "allkeys-lru");
    holder.let_go();
    holder.wait().assert_code(0);
    waiter
        .wait()
        .assert_code(125)
        .assert_stderr_contains("allkeys-lru");
    assert!(!dir.exists("ran"), "the command ran on an evicting server");
    assert!(!server.exists("redlock:again"), "the lock was left");
}

/// Redlock: one evicting node of three is enough to refuse (its copy of the lock may vanish,
/// and a majority would then rest on the other two alone).
#[test]
fn redlock_with_one_evicting_node_is_refused() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    evicting(&nodes[1], "allkeys-lru");
    let mut wrapper = Wrapper::bare();
    for node in &nodes {
        wrapper = wrapper.arg("-r").arg(node.url());
    }
    assert_refused_for_eviction(wrapper, "allkeys-lru");
    for node in &nodes {
        assert!(!node.exists("redlock:ev"), "port {}: left", node.port());
    }
}

/// Sentinel: the master the sentinels name is checked; Cluster: the master that serves the
/// lock's slot (another master evicting does not matter to this lock).
#[test]
fn the_master_found_is_checked() {
    let set = SentinelSet::start();
    let _: () = set.master.query(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let _: () = set
        .master
        .query(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
    assert_refused_for_eviction(set.cmd(), "volatile-lru");

    let cluster = Cluster::start();
    let owner = cluster.owner_of("redlock:ev");
    let other = (owner + 1) % cluster.nodes.len();
    let _: () = cluster.nodes[other].query(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let _: () = cluster.nodes[other].query(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    cluster
        .cmd()
        .args(["-k", "ev", "--", "true"])
        .run()
        .assert_code(0);
    let _: () = cluster.nodes[owner].query(&["CONFIG", "SET", "maxmemory", "100mb"]);
    let _: () = cluster.nodes[owner].query(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    assert_refused_for_eviction(cluster.cmd(), "allkeys-lru");
    assert_eq!(cluster.get("redlock:ev"), None);
}

/// A plain `redis://` URL that leads to a Redis Cluster node (the one that serves the key):
/// refused, pointing at `redis+cluster://`, whose notices and queue it would not share.
#[test]
fn a_cluster_node_behind_a_plain_url_is_refused() {
    let cluster = Cluster::start();
    let node = &cluster.nodes[cluster.owner_of("redlock:plain")];
    let url = format!("redis://{}", node.address());
    let dir = TempDir::new("plain-cluster");
    Wrapper::new(&url)
        .args(["-k", "plain", "--", "touch"])
        .arg(dir.join("ran"))
        .run()
        .assert_code(125)
        .assert_stderr_contains("is a Redis Cluster node")
        .assert_stderr_contains("redis+cluster://");
    assert!(!dir.exists("ran"));
    assert_eq!(cluster.get("redlock:plain"), None);
}

/// A port that answers HTTP: "not a Redis server", naming the address, not a parse error.
#[test]
fn a_server_that_is_not_redis_is_named_so() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 512];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let url = format!("redis://:Qx7secret@127.0.0.1:{port}");
    for args in [&["-k", "http", "--", "true"][..], &["status", "-k", "http"]] {
        Wrapper::new(&url)
            .args(args)
            .run()
            .assert_code(125)
            .assert_stderr_contains(&format!(
                "redis://:***@127.0.0.1:{port} is not a Redis server"
            ))
            .assert_stderr_lacks("Unexpected")
            .assert_not_leaked("Qx7secret");
    }
}

/// `?protocol=resp3` is refused up front (waiters would never hear a release on it).
#[test]
fn a_url_asking_for_resp3_is_refused_up_front() {
    let server = RedisServer::start();
    for protocol in ["resp3", "3"] {
        let url = format!("{}/?protocol={protocol}", server.url());
        let dir = TempDir::new("resp3");
        Wrapper::new(&url)
            .args(["-k", "r3", "--", "touch"])
            .arg(dir.join("ran"))
            .run()
            .assert_code(125)
            .assert_stderr_contains("protocol=")
            .assert_stderr_contains("RESP3")
            .assert_stderr_lacks("speaks RESP2");
        assert!(!dir.exists("ran"));
    }
}

/// A parameter the URL's scheme does not know (`?foo=bar`, a typo of `protocol`) is
/// refused (125) rather than ignored (the URL is shown, its password redacted, as for any
/// bad URL); `redis+unix://`'s own `db`, `user` and `pass` are not refused there.
#[test]
fn an_unknown_url_parameter_is_refused() {
    let server = RedisServer::start();
    let dir = TempDir::new("unknown-param");
    for query in ["?foo=bar", "?protocol=resp2&foo=bar", "?db=1"] {
        let url = format!("{}/{query}", server.url());
        Wrapper::new(&url)
            .args(["-k", "qp", "--", "touch"])
            .arg(dir.join("ran"))
            .run()
            .assert_code(125)
            .assert_stderr_contains("unknown parameter");
        assert!(!dir.exists("ran"), "{query}");
    }
    Wrapper::new(&format!("{}/?protocol=resp2", server.url()))
        .args(["-k", "qp", "--", "true"])
        .run()
        .assert_code(0);
}

/// `SUBSCRIBE` renamed away in the server's configuration: a waiter cannot be told of a
/// release, so it looks often instead, and gets the lock soon after it is let go (the TTL
/// here is far longer than the test).
#[test]
fn without_subscribe_waiters_poll() {
    let server = RedisServer::start_with(ServerOptions {
        args: vec!["--rename-command".into(), "SUBSCRIBE".into(), String::new()],
        ..ServerOptions::default()
    });
    let dir = TempDir::new("nosubscribe");
    let holder = hold(server.cmd().args(["-k", "s", "--ttl", "60s"]), &dir, "h");
    let mut waiter = server
        .cmd()
        .args(["-k", "s", "--wait", "50s", "--", "touch"])
        .arg(dir.join("waited"))
        .spawn();
    wait_until(
        Duration::from_secs(20),
        "the waiter to fall back to polling",
        || waiter.stderr_so_far().contains("without release notices") || waiter.has_exited(),
    );
    let let_go = Instant::now();
    holder.let_go();
    holder.wait().assert_code(0);
    let out = waiter.wait();
    out.assert_code(0)
        .assert_stderr_contains("without release notices, looking every 250ms");
    assert!(dir.exists("waited"));
    assert!(
        let_go.elapsed() < Duration::from_secs(20),
        "the waiter waited for the TTL: {:?}",
        let_go.elapsed()
    );
}

/// `HELLO` renamed away (or a server before Redis 6): the subscription stays RESP2, a
/// woken waiter takes the lock over a connection of its own as before, and is still woken by
/// the release, not by the holder's TTL (far longer than the test).
#[test]
fn without_hello_waiters_are_woken_the_old_way() {
    let server = RedisServer::start_with(ServerOptions {
        args: vec!["--rename-command".into(), "HELLO".into(), String::new()],
        ..ServerOptions::default()
    });
    let dir = TempDir::new("nohello");
    let holder = hold(server.cmd().args(["-k", "nh", "--ttl", "60s"]), &dir, "h");
    let waiter = server
        .cmd()
        .args(["-k", "nh", "--wait", "50s", "--", "touch"])
        .arg(dir.join("waited"))
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to queue", || {
        server.zcard("{redlock:nh}:queue") == 1
    });
    let let_go = Instant::now();
    holder.let_go();
    holder.wait().assert_code(0);
    waiter
        .wait()
        .assert_code(0)
        .assert_stderr_lacks("without release notices");
    assert!(dir.exists("waited"));
    assert!(
        let_go.elapsed() < Duration::from_secs(20),
        "the waiter waited for the TTL: {:?}",
        let_go.elapsed()
    );
    assert_eq!(server.dbsize(), 0, "keys left: {:?}", server.keys());
}

/// A server with PUBLISH renamed away (its operator's choice, not this user's ACL) takes
/// locks as before: the release goes unannounced, with a warning. It used to be refused at
/// every acquisition ("Invalid command passed to redis.acl_check_cmd()"). With SUBSCRIBE
/// renamed away too, waiters look instead of listening and still get the lock.
#[test]
fn a_server_without_publish_still_takes_locks() {
    for renamed in [vec!["PUBLISH"], vec!["PUBLISH", "SUBSCRIBE"]] {
        let mut args = Vec::new();
        for command in &renamed {
            args.extend([
                "--rename-command".to_string(),
                command.to_string(),
                String::new(),
            ]);
        }
        let server = RedisServer::start_with(ServerOptions {
            args,
            ..ServerOptions::default()
        });
        let out = server.cmd().args(["-k", "np", "--", "true"]).run();
        out.assert_code(0)
            .assert_stderr_contains("refused to announce it");
        assert!(!server.exists("redlock:np"), "{renamed:?}: not released");
        let dir = TempDir::new("nopublish");
        let holder = hold(server.cmd().args(["-k", "np2", "--ttl", "2s"]), &dir, "h");
        let waiter = server
            .cmd()
            .args(["-k", "np2", "--wait", "30s", "--", "true"])
            .spawn();
        holder.let_go();
        holder.wait().assert_code(0);
        waiter.wait().assert_code(0);
    }
}
