//! `redis+cluster://`: three masters made with `redis-cli --cluster create` (see
//! `support::deployments`), reached through a URL that names only the first. Locks on keys in
//! different slots land on their own masters; `status`, `list` and `release` see all of
//! them; semaphores, fences and release wake-ups work; a slot moved while a lock is held is
//! followed through `ASK` and `MOVED`, and waiters queued across a reshard follow it with
//! their subscriptions; a node that hangs does not hide the others.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::deployments::{Cluster, Process, SETTLE};
use crate::support::*;

#[test]
fn locks_on_every_master_are_held_listed_and_released() {
    let cluster = Cluster::start();
    let dir = TempDir::new("cluster-every");
    let names = cluster.names_on_each_node();
    let holders: Vec<Holder> = names
        .iter()
        .map(|name| {
            hold(
                cluster.cmd().args(["-k", name, "--renew-every", "200ms"]),
                &dir,
                name,
            )
        })
        .collect();
    for (node, name) in names.iter().enumerate() {
        let key = format!("redlock:{name}");
        assert_eq!(cluster.owner_of(&key), node);
        let value = cluster.get(&key).expect("the lock is on its master");
        assert!(value.starts_with("{\"token\":\""), "{value}");
        // The fence counter shares the lock's slot, so one script can touch both.
        assert!(cluster.nodes[node].query::<bool>(&["EXISTS", &format!("{{{key}}}:fence")]));
    }

    // `list` reads every master, not only the one the URL names.
    let out = cluster.cmd().args(["list", "--json"]).run();
    out.assert_code(0);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["key"].as_str().unwrap())
        .collect();
    keys.sort();
    let mut expected: Vec<String> = names.iter().map(|n| format!("redlock:{n}")).collect();
    expected.sort();
    assert_eq!(keys, expected);

    // A lock on a master the URL does not name: status reads it, release --force removes
    // it, and its holder learns at its next renewal.
    let far = &names[2];
    let out = cluster.cmd().args(["status", "-k", far]).run();
    out.assert_code(0);
    assert!(out.stdout_str().contains(&format!("redlock:{far} held by")));
    cluster
        .cmd()
        .args(["release", "-k", far, "--force"])
        .run()
        .assert_code(0);

    let mut holders = holders;
    let far_holder = holders.pop().unwrap();
    far_holder
        .wait()
        .assert_code(76)
        .assert_stderr_contains("lost");

    for holder in &holders {
        holder.let_go();
    }
    for holder in holders {
        holder.wait().assert_code(0);
    }
    // Only the fence counters are left.
    let left = cluster.keys();
    assert!(left.iter().all(|key| key.ends_with("}:fence")), "{left:?}");
}

#[test]
fn semaphores_fences_and_wakeups_work_across_the_cluster() {
    let _timing = timing_sensitive();
    let cluster = Cluster::start();
    let dir = TempDir::new("cluster-limit");
    let limit = ["-k", "pool", "--limit", "2", "--ttl", "30s"];
    let a = hold(cluster.cmd().args(limit), &dir, "a");
    let b = hold(cluster.cmd().args(limit), &dir, "b");
    // Both slots are taken: a third is turned away.
    cluster
        .cmd()
        .args(limit)
        .args(["--no-wait", "--", "true"])
        .run()
        .assert_code(75);

    // A waiter is woken by the release notice, long before the 30s lease would run out.
    let body = format!(
        "echo \"$REDLOCK_FENCE\" > '{}'",
        dir.join("c.fence").display()
    );
    let waiter = cluster
        .cmd()
        .args(limit)
        .args(["--wait", "25s", "--", "sh", "-c", &body])
        .spawn();
    let owner = &cluster.nodes[cluster.owner_of("redlock:pool")];
    wait_until(SETTLE, "the waiter to subscribe", || {
        subscribers(owner, "redlock-run:released:{redlock:pool}") == 1
    });
    a.let_go();
    a.wait().assert_code(0);
    let out = waiter.wait();
    out.assert_code(0);
    assert!(
        out.elapsed < Duration::from_secs(10),
        "the waiter was not woken by the release: {:?}",
        out.elapsed
    );
    let fences = [
        fence_of(&dir, "a"),
        fence_of(&dir, "b"),
        fence_of(&dir, "c"),
    ];
    assert!(
        fences[0] < fences[1] && fences[1] < fences[2],
        "fences in acquisition order: {fences:?}"
    );

    b.let_go();
    b.wait().assert_code(0);
    // `-k pool` with the default prefix: the lock, its slots and its limit are all gone.
    let left = cluster.keys();
    assert_eq!(left, ["{redlock:pool}:fence"], "{left:?}");
}

#[test]
fn a_slot_moved_while_held_is_followed_through_ask_and_moved() {
    let cluster = Cluster::start();
    let dir = TempDir::new("cluster-move");
    let key = "redlock:moving";
    let args = ["-k", "moving", "--renew-every", "100ms"];
    let holder = hold(cluster.cmd().args(args), &dir, "moving");
    let asked_before = cluster.nodes[(cluster.owner_of(key) + 1) % 3].calls("asking");

    // Mid-migration: the keys are already on the target, the slot still the source's. The
    // source answers ASK; the holder must send ASKING to the target with its renewal.
    let moving = cluster.start_moving(key);
    let target = &cluster.nodes[moving.to];
    wait_until(SETTLE, "a renewal through ASK", || {
        target.calls("asking") > asked_before && target.calls("evalsha") > 0
    });

    // Done: every node learns that the target owns the slot; the source now answers MOVED.
    cluster.finish_moving(&moving);
    let renewed = target.calls("evalsha");
    wait_until(SETTLE, "renewals on the new owner", || {
        target.calls("evalsha") > renewed + 2
    });
    assert!(
        target.query::<bool>(&["EXISTS", key]),
        "the lock moved with its slot"
    );

    holder.let_go();
    holder.wait().assert_code(0).assert_stderr_lacks("lost");
    assert!(
        !target.query::<bool>(&["EXISTS", key]),
        "released where it lives now"
    );
    // A new holder goes straight to the new owner and gets the next fence.
    let out = cluster
        .cmd()
        .args(["-k", "moving", "--no-wait", "--", "sh", "-c"])
        .arg("echo \"$REDLOCK_FENCE\"")
        .run();
    out.assert_code(0);
    let next: u64 = out.stdout_str().trim().parse().unwrap();
    assert_eq!(next, fence_of(&dir, "moving") + 1);
}

/// A seed that hangs (frozen: the kernel takes connections, nobody answers) is what a
/// blackholed host looks like. Reading the slot map gives it only its share of
/// `--redis-timeout`, then asks the next seed. (All within the cluster's 5s node timeout:
/// after that the others would call the cluster down.)
#[test]
fn a_frozen_seed_does_not_hide_the_other_nodes() {
    let mut cluster = Cluster::start();
    let names = cluster.names_on_each_node();
    let hosts: Vec<String> = cluster.nodes.iter().map(|node| node.address()).collect();
    let url = format!("redis+cluster://{}", hosts.join(","));
    cluster.nodes[0].freeze();
    let out = Wrapper::new(&url)
        .args([
            "-k",
            &names[1],
            "--redis-timeout",
            "1s",
            "--no-wait",
            "--",
            "true",
        ])
        .run();
    out.assert_code(0);
    assert!(cluster.nodes[1].query::<bool>(&["EXISTS", &format!("{{redlock:{}}}:fence", names[1])]));
}

/// How many clients listen on `channel` at `node`: sharded subscribers where the server has
/// sharded pub/sub (Redis 7 and later), plain ones before.
fn subscribers(node: &Process, channel: &str) -> i64 {
    let counts: redis::RedisResult<(String, i64)> =
        node.try_query(&["PUBSUB", "SHARDNUMSUB", channel]);
    match counts {
        Ok((_, count)) => count,
        Err(_) => {
            node.query::<(String, i64)>(&["PUBSUB", "NUMSUB", channel])
                .1
        }
    }
}

/// Whether `node` has sharded pub/sub (`SSUBSCRIBE`, Redis 7 and later).
fn has_sharded_pubsub(node: &Process) -> bool {
    node.try_query::<Vec<String>>(&["PUBSUB", "SHARDCHANNELS"])
        .is_ok()
}

/// A reshard while waiters are queued: the lock's slot, its queue with it, moves to another
/// master. With sharded pub/sub the old master ends the waiters' subscriptions; each
/// subscribes again on the new one and tries, and the queue goes on there: every waiter
/// runs, one at a time and in the order they queued (`--fair`), each woken by the release
/// before it, long before the holder's 30s TTL would have sent anyone to look. (Without
/// sharded pub/sub, Redis 6.2, a plain `PUBLISH` reaches every node: the subscriptions stay
/// where they were and the waiters are woken through the lock's channel instead.)
#[test]
fn waiters_queued_across_a_reshard_are_woken_on_the_new_master() {
    let _timing = timing_sensitive();
    let cluster = Cluster::start();
    let dir = TempDir::new("cluster-reshard");
    let key = "redlock:reshard";
    let queue = "{redlock:reshard}:queue";
    let channel = "redlock-run:released:{redlock:reshard}";
    let args = ["-k", "reshard", "--ttl", "30s", "--renew-every", "200ms"];
    let holder = hold(cluster.cmd().args(args), &dir, "holder");
    let source = &cluster.nodes[cluster.owner_of(key)];
    let sharded = has_sharded_pubsub(source);

    // `--fair` waiters, each queued before the next starts; each notes its start and end
    // in one log.
    let log = dir.join("log");
    let waiters: Vec<Running> = (0..4)
        .map(|n| {
            let body = format!(
                "echo start {n} >> '{log}'; sleep 0.05; echo end {n} >> '{log}'",
                log = log.display()
            );
            let waiter = cluster
                .cmd()
                .args(args)
                .args(["--fair", "--wait", "90s", "--", "sh", "-c", &body])
                .spawn();
            wait_until(SETTLE, "the waiter queued and listening", || {
                source.query::<i64>(&["ZCARD", queue]) == n + 1
                    && subscribers(source, channel) == n + 1
            });
            waiter
        })
        .collect();

    // Move the slot with every key in it, as `redis-cli --cluster reshard` does.
    let moving = cluster.start_moving(key);
    cluster.finish_moving(&moving);
    let target = &cluster.nodes[moving.to];
    assert_eq!(target.query::<i64>(&["ZCARD", queue]), 4, "the queue moved");
    if sharded {
        wait_until(SETTLE, "the waiters to subscribe on the new master", || {
            subscribers(target, channel) == 4
        });
        assert_eq!(subscribers(source, channel), 0);
    }

    let started = std::time::Instant::now();
    holder.let_go();
    holder.wait().assert_code(0).assert_stderr_lacks("lost");
    for waiter in waiters {
        waiter.wait().assert_code(0);
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "the waiters were not woken through the new master: {took:?}"
    );
    // One at a time, each to its end; with sharded pub/sub, in the order they queued: each
    // was woken on its own channel on the new master, none dropped from the queue as gone.
    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 8, "{lines:?}");
    for (n, pair) in lines.chunks(2).enumerate() {
        let started = pair[0].strip_prefix("start ").expect("a start first");
        assert_eq!(pair[1], format!("end {started}"), "{lines:?}");
        if sharded {
            assert_eq!(started, n.to_string(), "out of order: {lines:?}");
        }
    }
    assert_eq!(
        target.query::<i64>(&["ZCARD", queue]),
        0,
        "everyone left the queue"
    );
}

/// The documented ACL user in a cluster (docs/security.md): the minimal rules plus what a cluster needs (the slot
/// map, the masters' roles, redirections during a migration), with the rules for sharded
/// notices (`sharded`) and without them (`plain`), and a holder and a waiter of either
/// kind. Each time the waiter is woken by the release, not by its own retry 30s later nor
/// by polling: a sharded waiter listens both ways, a plain one the plain way, and a holder
/// that publishes sharded publishes the plain way too when no sharded subscriber heard.
#[test]
fn the_acl_user_is_woken_with_and_without_sharded_pubsub() {
    let _timing = timing_sensitive();
    let cluster = Cluster::start();
    let password = "cluster-acl-pw-2c7e";
    let mut plain = crate::acl::minimal_rules(&[]);
    let documented = crate::docs::documented_acl_lines();
    plain.extend(documented[1].iter().cloned());
    let mut sharded = plain.clone();
    sharded.extend(documented[2].iter().cloned());
    let users: &[(&str, &Vec<String>)] = if has_sharded_pubsub(&cluster.nodes[0]) {
        &[("sharded", &sharded), ("plain", &plain)]
    } else {
        // Redis 6.2 has no sharded pub/sub, nor its ACL rules.
        &[("plain", &plain)]
    };
    for node in &cluster.nodes {
        for (user, rules) in users {
            let secret = format!(">{password}");
            let mut setuser = vec!["ACL", "SETUSER", user, "reset", "on", &secret];
            setuser.extend(rules.iter().map(String::as_str));
            node.query::<()>(&setuser);
        }
    }
    let url = |user: &str| {
        format!(
            "redis+cluster://{user}:{password}@{}",
            cluster.nodes[0].address()
        )
    };
    for (holder_user, _) in users {
        for (waiter_user, _) in users {
            let name = format!("acl-{holder_user}-{waiter_user}");
            let dir = TempDir::new("cluster-acl");
            let args = ["-k", &name, "--ttl", "30s"];
            let holder = hold(Wrapper::new(&url(holder_user)).args(args), &dir, "holder");
            let waiter = Wrapper::new(&url(waiter_user))
                .args(args)
                .args(["--wait", "60s", "--", "true"])
                .spawn();
            let owner = &cluster.nodes[cluster.owner_of(&format!("redlock:{name}"))];
            let channel = format!("redlock-run:released:{{redlock:{name}}}");
            wait_until(SETTLE, "the waiter to subscribe", || {
                let shard: i64 = owner
                    .try_query::<(String, i64)>(&["PUBSUB", "SHARDNUMSUB", &channel])
                    .map_or(0, |(_, count)| count);
                let plain = owner
                    .query::<(String, i64)>(&["PUBSUB", "NUMSUB", &channel])
                    .1;
                // Subscribed every way its rules allow.
                plain == 1 && shard == i64::from(*waiter_user == "sharded")
            });
            let released = std::time::Instant::now();
            holder.let_go();
            holder.wait().assert_code(0).assert_stderr_lacks("NOPERM");
            let out = waiter.wait();
            out.assert_code(0)
                .assert_stderr_lacks("NOPERM")
                .assert_stderr_lacks("looking every");
            assert!(
                released.elapsed() < Duration::from_secs(10),
                "the waiter was not woken by the release ({name}): {:?}",
                released.elapsed()
            );
        }
    }
}

/// A holder that ends while its slot is being migrated (the keys already on the importing
/// master, the slot still the old one's): the old master sends its release script on
/// (`ASK`) and the importing one answers `TRYAGAIN` (some of the script's keys do not
/// exist there), so the holder sends it again until the migration ends,
/// instead of leaving the lock to expire by its TTL; then the waiters, whose subscriptions
/// moved with the slot, are woken and run, long before that TTL.
#[test]
fn a_release_while_the_slot_migrates_goes_through_when_it_ends() {
    let _timing = timing_sensitive();
    let cluster = Cluster::start();
    let dir = TempDir::new("cluster-midway");
    let key = "redlock:midway";
    let queue = "{redlock:midway}:queue";
    let channel = "redlock-run:released:{redlock:midway}";
    let args = ["-k", "midway", "--ttl", "30s", "--renew-every", "200ms"];
    let holder = hold(
        cluster.cmd().args(args).args(["--redis-timeout", "20s"]),
        &dir,
        "holder",
    );
    let source = &cluster.nodes[cluster.owner_of(key)];
    let waiters: Vec<Running> = (0..3)
        .map(|_| {
            cluster
                .cmd()
                .args(args)
                .args(["--wait", "90s", "--", "true"])
                .spawn()
        })
        .collect();
    wait_until(SETTLE, "three waiters queued and listening", || {
        source.query::<i64>(&["ZCARD", queue]) == 3 && subscribers(source, channel) == 3
    });

    let moving = cluster.start_moving(key);
    let target = &cluster.nodes[moving.to];

    let released = std::time::Instant::now();
    holder.let_go();
    wait_until(SETTLE, "the release to be told to try again", || {
        target
            .info_field("errorstats", "errorstat_TRYAGAIN")
            .is_some()
    });
    cluster.finish_moving(&moving);
    holder
        .wait()
        .assert_code(0)
        .assert_stderr_lacks("cannot release");
    for waiter in waiters {
        waiter.wait().assert_code(0);
    }
    assert!(
        released.elapsed() < Duration::from_secs(20),
        "the waiters were not woken by the release: {:?}",
        released.elapsed()
    );
    assert_eq!(target.query::<i64>(&["ZCARD", queue]), 0);
}

/// `--replace` after a reshard: the holder's lock and its listening follow the slot to the
/// new master (with sharded pub/sub the old one ends the subscription; before Redis 7 a
/// plain `PUBLISH` reaches every node), and a takeover asked for there is heard within 1 s.
#[test]
fn a_takeover_after_a_reshard_is_heard_on_the_new_master() {
    use crate::replace::{new_command, now_ns, old_command, stamp};
    let cluster = Cluster::start();
    let dir = TempDir::new("cluster-replace-reshard");
    let d = dir.join("").display().to_string();
    let key = "redlock:rr";
    let old = cluster
        .cmd()
        .args(["-k", "rr", "--ttl", "30s", "--shell"])
        .arg(format!(
            "echo \"$REDLOCK_TOKEN\" > {d}token; {}",
            old_command(&dir)
        ))
        .spawn();
    wait_until(SETTLE, "the old command to start", || {
        dir.exists("old.start")
    });
    let channel = format!("redlock-run:wake:{{{key}}}:{}", dir.read("token").trim());
    let source = cluster.owner_of(key);
    wait_until(SETTLE, "the holder to listen", || {
        subscribers(&cluster.nodes[source], &channel) == 1
    });
    let moving = cluster.start_moving(key);
    cluster.finish_moving(&moving);
    let target = &cluster.nodes[moving.to];
    if has_sharded_pubsub(target) {
        wait_until(SETTLE, "the holder to listen on the new master", || {
            subscribers(target, &channel) == 1
        });
    }
    let renewed = target.calls("evalsha");
    wait_until(SETTLE, "a renewal on the new master", || {
        target.calls("evalsha") > renewed
    });
    let asked = now_ns();
    let new = cluster
        .cmd()
        .args(["-k", "rr", "--replace", "--shell"])
        .arg(new_command(&dir, "new"))
        .spawn();
    old.wait_within(SETTLE)
        .assert_code(77)
        .assert_stderr_lacks("lost");
    new.wait_within(SETTLE).assert_code(0);
    let term = stamp(&dir, "old.term");
    assert!(
        term - asked < 1_000_000_000,
        "the old command got SIGTERM {} ms after the takeover was asked for",
        (term - asked) / 1_000_000
    );
    assert!(
        !dir.exists("new.overlap"),
        "the new command ran beside the old"
    );
    assert!(stamp(&dir, "new.start") > stamp(&dir, "old.end"));
}

/// A `--once` run that ends while its lock's slot migrates: its release (which writes the
/// record) is told to try again until the move ends, then records the work on the new
/// master, where the next run of the same ID finds it done.
#[test]
fn a_once_run_released_while_its_slot_migrates_records_the_work() {
    let cluster = Cluster::start();
    let dir = TempDir::new("cluster-once-midway");
    let key = "redlock:om";
    let holder = hold(
        cluster
            .cmd()
            .args(["-k", "om", "--once", "v1", "--redis-timeout", "20s"]),
        &dir,
        "holder",
    );
    let moving = cluster.start_moving(key);
    let target = &cluster.nodes[moving.to];
    holder.let_go();
    wait_until(SETTLE, "the release to be told to try again", || {
        target
            .info_field("errorstats", "errorstat_TRYAGAIN")
            .is_some()
    });
    cluster.finish_moving(&moving);
    holder
        .wait()
        .assert_code(0)
        .assert_stderr_lacks("cannot release");
    assert!(target.query::<bool>(&["HEXISTS", "{redlock:om}:done", "v1"]));
    cluster
        .cmd()
        .args(["-k", "om", "--once", "v1", "--", "false"])
        .run()
        .assert_code(0)
        .assert_stderr_contains("already done");
}

/// Several keys in different hash slots (issue 32): held all at once and let go on a busy
/// one; a pool's members on different masters. No script spans the slots.
#[test]
fn several_keys_and_pools_span_masters() {
    let cluster = Cluster::start();
    let dir = TempDir::new("cluster-keys");
    let names = ["k1", "k2", "k3", "k4", "k5", "k6"];
    let owners: BTreeSet<usize> = names
        .iter()
        .map(|name| cluster.owner_of(&format!("redlock:{name}")))
        .collect();
    assert!(owners.len() > 1, "all on one master: {owners:?}");
    let mut all = vec![];
    for name in names {
        all.extend(["-k", name]);
    }
    let both = hold(cluster.cmd().args(&all), &dir, "all");
    for name in names {
        assert!(
            cluster.get(&format!("redlock:{name}")).is_some(),
            "{name} free"
        );
    }
    both.let_go();
    both.wait().assert_code(0);
    let k6 = hold(cluster.cmd().args(["-k", "k6"]), &dir, "k6");
    cluster
        .cmd()
        .args(&all)
        .args(["--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    for name in &names[..5] {
        assert!(
            cluster.get(&format!("redlock:{name}")).is_none(),
            "{name} left held"
        );
    }
    let out = cluster
        .cmd()
        .args([
            "-k",
            "k6",
            "-k",
            "k1",
            "--any",
            "--",
            "sh",
            "-c",
            "echo $REDLOCK_NAME",
        ])
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout_str().trim(), "k1");
    k6.let_go();
    k6.wait().assert_code(0);
}
