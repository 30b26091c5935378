//! Mutual exclusion and hand-over between wrappers: the lock actually serialises
//! read-modify-write jobs, a released lock is gone at once, and a waiter is woken promptly
//! without polling Redis.

use std::fs;
use std::thread;
use std::time::Duration;

use crate::support::*;

/// 10 wrappers in parallel, each running 10 separate locked increments of a counter file
/// (read, sleep, write): without exclusion updates are lost.
#[test]
fn parallel_increments_are_never_lost() {
    let server = RedisServer::start();
    let dir = TempDir::new("incr");
    let counter = dir.join("counter");
    fs::write(&counter, "0\n").unwrap();
    let script = dir.script(
        "incr",
        &format!(
            "n=$(cat '{c}')\nsleep 0.01\necho $((n + 1)) > '{c}'",
            c = counter.display()
        ),
    );

    let url = server.url();
    run_in_parallel(10, 10, move || {
        Wrapper::new(&url)
            .args(["-k", "counter", "--"])
            .arg(&script)
            .timeout(Duration::from_secs(90))
    });
    assert_eq!(fs::read_to_string(&counter).unwrap().trim(), "100");
    assert_eq!(server.dbsize(), 0, "keys left: {:?}", server.keys());
}

/// The bank example: a withdrawal of 200 and a transfer of 300 out of 1000, both
/// read-sleep-write under the same key, leave 500.
#[test]
fn bank_withdraw_and_transfer_end_at_500() {
    let server = RedisServer::start();
    let dir = TempDir::new("bank");
    let balance = dir.join("balance");
    fs::write(&balance, "1000\n").unwrap();
    let take = |name: &str, amount: u32| {
        dir.script(
            name,
            &format!(
                "b=$(cat '{f}')\nsleep 0.3\necho $((b - {amount})) > '{f}'\necho {name} done",
                f = balance.display()
            ),
        )
    };
    let withdraw = take("withdraw", 200);
    let transfer = take("transfer", 300);

    let a = server
        .cmd()
        .args(["-k", "account:42", "--"])
        .arg(withdraw)
        .spawn();
    let b = server
        .cmd()
        .args(["-k", "account:42", "--"])
        .arg(transfer)
        .spawn();
    let a = a.wait();
    let b = b.wait();
    a.assert_code(0);
    b.assert_code(0);
    assert_eq!(a.stdout_str(), "withdraw done\n");
    assert_eq!(b.stdout_str(), "transfer done\n");
    assert_eq!(fs::read_to_string(&balance).unwrap().trim(), "500");
}

/// The key is deleted by the wrapper itself as it exits, not left to expire.
#[test]
fn lock_is_released_as_soon_as_the_wrapper_exits() {
    let server = RedisServer::start();
    let dir = TempDir::new("release");
    let seen = dir.join("seen");
    let out = server
        .cmd()
        .args(["-k", "job", "-t", "60s", "--"])
        .args(["sh", "-c", "echo \"$REDLOCK_KEY\" > \"$1\"", "sh"])
        .arg(&seen)
        .run();
    out.assert_code(0);
    assert_eq!(fs::read_to_string(&seen).unwrap().trim(), "redlock:job");
    assert!(
        !server.exists("redlock:job"),
        "key still present after exit: {:?} (pttl {})",
        server.get("redlock:job"),
        server.pttl("redlock:job")
    );
    assert_eq!(server.dbsize(), 0);
}

/// A waiter started while the lock is held runs its command promptly after the holder
/// exits, and does not poll Redis while it waits.
#[test]
fn waiter_is_woken_promptly_without_polling() {
    let server = RedisServer::start();
    let dir = TempDir::new("handoff");
    // A long TTL keeps the holder from renewing during the test, so commands counted in the
    // quiet window are the waiter's.
    let (holder_job, waiter_script) = handover_jobs(&dir);
    let holder = holder_job.start(server.cmd().args(["-k", "handoff", "-t", "120s"]));

    let waiter = server
        .cmd()
        .args(["-k", "handoff", "-t", "120s", "--"])
        .arg(waiter_script)
        .spawn();
    // Subscribed, then tried once more and queued: from here on it only listens.
    wait_until(Duration::from_secs(15), "the waiter to queue", || {
        server.subscribed_clients() > 0 && server.zcard("{redlock:handoff}:queue") == 1
    });
    let before = server.command_stats();
    let conns_before = connections_received(&server);
    thread::sleep(Duration::from_millis(1500)); // The quiet window: time must pass here.
    let after = server.command_stats();
    let conns_after = connections_received(&server);
    assert!(
        !dir.exists("waiter_start"),
        "the waiter ran while the lock was held"
    );

    // The test's own inspection: INFO, CLIENT LIST, and whatever a new connection sends.
    let ignore = [
        "info",
        "client|list",
        "client|setinfo",
        "client",
        "hello",
        "ping",
    ];
    let mut delta = Vec::new();
    let mut total = 0;
    for (name, calls) in &after {
        if ignore.contains(&name.as_str()) {
            continue;
        }
        let prev = before
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, c)| *c);
        if *calls > prev {
            delta.push((name.clone(), calls - prev));
            total += calls - prev;
        }
    }
    // The test itself opens two connections between the snapshots (command_stats and
    // connections_received each connect once).
    let waiter_conns = (conns_after - conns_before).saturating_sub(2);
    eprintln!("commands issued during a 1.5s wait: {delta:?}; new connections: {waiter_conns}");
    assert!(
        total <= 5,
        "the waiter polled Redis while waiting: {delta:?}"
    );
    assert!(
        waiter_conns <= 1,
        "the waiter kept reconnecting: {waiter_conns} new connections"
    );

    holder.let_go();
    holder.wait().assert_code(0);
    waiter.wait().assert_code(0);
    let delay = handover_delay(&dir);
    eprintln!("hand-over delay: {delay:.1?}");
    assert!(
        delay < Duration::from_secs(1),
        "waiter started {delay:.3?} after the holder's job ended"
    );
    assert_eq!(server.dbsize(), 0);
}

/// A waiter woken by a release takes the lock over the connection the notice came on (it
/// speaks RESP3 there, where a reply and a notice cannot be mistaken for each other): no
/// connection is made between the notice and the acquisition. The lock taken, that
/// connection stops listening at once (`UNSUBSCRIBE`) and carries the holder's release.
#[test]
fn a_woken_waiter_takes_the_lock_over_its_subscription() {
    let server = RedisServer::start();
    let dir = TempDir::new("wire");
    let holder = hold(server.cmd().args(["-k", "wire", "-t", "120s"]), &dir, "h");
    let job = Job::new(&dir, "w");
    let script = dir.script("w", &job.body());
    let mut waiter = server
        .cmd()
        .args(["-k", "wire", "-t", "120s", "--"])
        .arg(&script)
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to queue", || {
        server.zcard("{redlock:wire}:queue") == 1
    });
    let calls = |stats: &[(String, u64)], name: &str| {
        stats.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c)
    };
    let before = server.command_stats();
    holder.let_go();
    holder.wait().assert_code(0);
    waiter.wait_for_file(&dir.join("w.ready"), Duration::from_secs(15));
    // Holding: the connection it waited on is the one that unsubscribed, and it is no
    // longer subscribed; no other is.
    let field = |client: &[(String, String)], name: &str| {
        client
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let clients = server.clients();
    let unsubscribed: Vec<_> = clients
        .iter()
        .filter(|client| field(client, "cmd").as_deref() == Some("unsubscribe"))
        .collect();
    assert_eq!(unsubscribed.len(), 1, "{clients:?}");
    assert_eq!(field(unsubscribed[0], "sub").as_deref(), Some("0"));
    fs::write(dir.join("w.go"), "").unwrap();
    waiter.wait().assert_code(0);
    assert_eq!(server.dbsize(), 0, "keys left: {:?}", server.keys());
    let after = server.command_stats();
    assert_eq!(
        calls(&after, "unsubscribe") - calls(&before, "unsubscribe"),
        1,
        "{after:?}"
    );
}

fn connections_received(server: &RedisServer) -> u64 {
    server
        .info("stats")
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_connections_received in INFO stats")
}

/// A nested redlock-run takes its own `-k`, not the REDLOCK_KEY its parent exported.
#[test]
fn nested_wrapper_uses_its_own_key() {
    let server = RedisServer::start();
    let dir = TempDir::new("nested");
    let inner_script = dir.script(
        "inner",
        &format!(
            "echo \"$REDLOCK_KEY\" > '{k}'\necho \"$REDLOCK_TOKEN\" > '{t}'",
            k = dir.join("inner_key").display(),
            t = dir.join("inner_token").display()
        ),
    );
    let outer_script = dir.script(
        "outer",
        &format!(
            "echo \"$REDLOCK_TOKEN\" > '{t}'\n'{bin}' -k inner -- '{inner}'\nexit $?",
            t = dir.join("outer_token").display(),
            bin = BIN,
            inner = inner_script.display()
        ),
    );
    server
        .cmd()
        .args(["-k", "outer", "--"])
        .arg(outer_script)
        .run()
        .assert_code(0);
    assert_eq!(dir.read("inner_key"), "redlock:inner");
    assert_ne!(
        dir.read("inner_token"),
        dir.read("outer_token"),
        "the inner wrapper reused its parent's token"
    );
    assert_eq!(server.dbsize(), 0, "keys left: {:?}", server.keys());
}

/// A job whose script calls a helper that takes the same lock (a deploy script calling a
/// step that is also run on its own): the inner run would wait for its own parent for ever.
/// It sees the outer run's `REDLOCK_KEY` and `REDLOCK_TOKEN`, finds that token holding the
/// key on its Redis, and refuses at once with 125, naming the outer run.
#[test]
fn a_nested_run_of_the_same_lock_is_refused_at_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("nested");
    let out = server
        .cmd()
        .timeout(Duration::from_secs(20))
        .args(["-k", "deploy", "--", "sh", "-c"])
        .arg(format!(
            "'{BIN}' -k deploy -- touch '{ran}'; echo $? > '{code}'",
            ran = dir.join("inner_ran").display(),
            code = dir.join("code").display()
        ))
        .run();
    out.assert_code(0)
        .assert_stderr_contains("redlock:deploy is held by the run of redlock-run")
        .assert_stderr_contains("nested");
    assert_eq!(dir.read("code"), "125");
    assert!(!dir.exists("inner_ran"));
    let token = out
        .stderr
        .lines()
        .find(|line| line.contains("is held by the run"))
        .unwrap_or_default()
        .to_string();
    assert!(token.contains("pid"), "the outer run is named: {token}");
}

/// Nested locks that are not the same lock stay legitimate: another key on the same Redis,
/// and the same key name on another Redis (the outer run's token does not hold it there).
#[test]
fn nested_runs_of_other_locks_work() {
    let server = RedisServer::start();
    let other = RedisServer::start();
    let dir = TempDir::new("nested-other");
    let out = server
        .cmd()
        .args(["-k", "deploy", "--", "sh", "-c"])
        .arg(format!(
            "'{BIN}' -k migrate -- touch '{a}' && '{BIN}' -r '{url}' -k deploy -- touch '{b}'",
            a = dir.join("other_key").display(),
            b = dir.join("other_redis").display(),
            url = other.url(),
        ))
        .run();
    out.assert_code(0);
    assert!(dir.exists("other_key") && dir.exists("other_redis"));
}
