//! `redis+sentinel://`: a master, a replica and three sentinels (see
//! `support::deployments`). The master is killed or switched over while a holder runs, and
//! what follows is what docs/guarantees.md says: a lock that reached the
//! replica carries on at the new master; one that did not is lost, the holder stops with 76
//! at its next renewal, and until then a second holder can start. A sentinel that hangs does
//! not keep anyone from the master.

use std::time::Duration;

use crate::support::deployments::{SentinelSet, SERVICE, SETTLE};
use crate::support::*;

const KEY_TTL: &str = "30s";
const RENEW_EVERY: &str = "500ms";

/// A wrapper that holds lock `name` with the lease and renewals every test here uses.
fn holding(set: &SentinelSet, name: &str) -> Wrapper {
    set.cmd()
        .args([
            "-k",
            name,
            "--ttl",
            KEY_TTL,
            "--renew-every",
            RENEW_EVERY,
            "-v",
        ])
        .timeout(Duration::from_secs(90))
}

#[test]
fn a_lock_that_reached_the_replica_survives_the_masters_death() {
    let mut set = SentinelSet::start();
    let dir = TempDir::new("sentinel-kill");
    let holder = hold(holding(&set, "kill"), &dir, "job");
    // The acquisition waited for the replica (WAIT 1): it has the lock by the time the
    // command starts, so this is no race.
    let held: Option<String> = set.replica.query(&["GET", "redlock:kill"]);
    let held = held.unwrap_or_else(|| {
        panic!(
            "the replica lacks the lock while the command runs; holder's stderr:\n{}",
            holder.stderr_so_far()
        )
    });
    let first_fence = fence_of(&dir, "job");

    set.master.kill();
    set.wait_for_promotion();
    // The holder reconnects through the sentinels and renews on the new master.
    wait_until(SETTLE, "a renewal on the new master", || {
        set.replica.calls("evalsha") > 0
    });
    let still: Option<String> = set.replica.query(&["GET", "redlock:kill"]);
    assert_eq!(still, Some(held), "the holder's value changed");

    holder.let_go();
    let out = holder.wait();
    out.assert_code(0).assert_stderr_lacks("lost");
    assert!(!set.replica.query::<bool>(&["EXISTS", "redlock:kill"]));

    // The fence counter moved over with the lock: the next holder's number is larger.
    let next = set
        .cmd()
        .args(["-k", "kill", "--no-wait", "--", "sh", "-c"])
        .arg("echo \"$REDLOCK_FENCE\"")
        .run();
    next.assert_code(0);
    let next_fence: u64 = next.stdout_str().trim().parse().unwrap();
    assert!(next_fence > first_fence, "{next_fence} after {first_fence}");
}

#[test]
fn a_failover_that_lost_the_key_stops_the_command_with_76() {
    let mut set = SentinelSet::start();
    let dir = TempDir::new("sentinel-lost");
    let holder = hold(holding(&set, "lost"), &dir, "job");
    // What asynchronous replication can do: the replica never got the lock (here it is
    // removed from the replica alone, which accepts writes in this fixture).
    set.replica.query::<i64>(&["DEL", "redlock:lost"]);

    set.master.kill();
    set.wait_for_promotion();
    // Between the failover and the holder's next renewal nothing stops a second holder:
    // docs/guarantees.md says so. The first holder never re-creates the key, so this always gets in.
    let second = set
        .cmd()
        .args(["-k", "lost", "--no-wait", "--", "true"])
        .run();
    second.assert_code(0);

    // The holder's next renewal finds the key gone on the new master: its command is
    // stopped (it would otherwise hold until `go`) and it exits 76.
    let out = holder.wait_within(SETTLE);
    out.assert_code(76).assert_stderr_contains("lost");
    assert!(
        !dir.exists("job.go"),
        "the command was stopped, not let finish"
    );
}

#[test]
fn a_switchover_moves_the_lock_with_its_data() {
    let set = SentinelSet::start();
    let dir = TempDir::new("sentinel-switch");
    let holder = hold(holding(&set, "switch"), &dir, "job");
    let held: Option<String> = set.replica.query(&["GET", "redlock:switch"]);

    // A planned failover: the old master lives on. The sentinels make it a replica of the
    // new one at their next look at it, up to 10s later; until then a holder that reached it
    // renews there. Demoted at once here, it answers renewals with READONLY, and the holder
    // finds the new master through the sentinels.
    set.sentinels[0].query::<String>(&["SENTINEL", "FAILOVER", SERVICE]);
    set.wait_for_promotion();
    let new_master = set.replica.port().to_string();
    set.master
        .query::<String>(&["REPLICAOF", "127.0.0.1", &new_master]);
    wait_until(SETTLE, "a renewal on the new master", || {
        set.replica.calls("evalsha") > 0
    });
    let still: Option<String> = set.replica.query(&["GET", "redlock:switch"]);
    assert_eq!(still, held);

    holder.let_go();
    holder.wait().assert_code(0).assert_stderr_lacks("lost");
    assert!(!set.replica.query::<bool>(&["EXISTS", "redlock:switch"]));
}

#[test]
fn status_list_and_release_find_the_master() {
    let set = SentinelSet::start();
    let dir = TempDir::new("sentinel-admin");
    let holder = hold(holding(&set, "admin"), &dir, "job");

    let out = set.cmd().args(["status", "-k", "admin"]).run();
    out.assert_code(0);
    assert!(out.stdout_str().contains("redlock:admin held by"));
    let out = set.cmd().args(["list"]).run();
    out.assert_code(0);
    assert!(
        out.stdout_str().contains("redlock:admin"),
        "{}",
        out.stdout_str()
    );
    set.cmd()
        .args(["release", "-k", "admin", "--force"])
        .run()
        .assert_code(0);
    holder.wait_within(SETTLE).assert_code(76);

    // A master name no sentinel knows is a mistake, not an outage: no waiting, 125.
    let hosts: Vec<String> = set.sentinels.iter().map(|s| s.address()).collect();
    let url = format!("redis+sentinel://{}/nosuchmaster", hosts.join(","));
    let out = Wrapper::new(&url).args(["-k", "x", "--", "true"]).run();
    out.assert_code(125)
        .assert_stderr_contains("knows no master \"nosuchmaster\"");
}

/// A sentinel that hangs (frozen: the kernel takes connections, nobody answers) is what a
/// blackholed host looks like. It is the first in the URL and the one the holder's searches
/// start with; each search gives it only its share of the time and asks the others, so the
/// holder finds the new master after a failover, and a new run finds it within a
/// `--redis-timeout` that the frozen sentinel alone would use up.
#[test]
fn a_frozen_sentinel_does_not_hide_the_new_master() {
    let mut set = SentinelSet::start();
    let dir = TempDir::new("sentinel-frozen");
    let holder = hold(holding(&set, "frozen"), &dir, "job");
    set.sentinels[0].freeze();
    set.master.kill();
    set.wait_for_promotion();
    wait_until(SETTLE, "a renewal on the new master", || {
        set.replica.calls("evalsha") > 0
    });

    let out = set
        .cmd()
        .args([
            "-k",
            "other",
            "--redis-timeout",
            "1s",
            "--no-wait",
            "--",
            "true",
        ])
        .run();
    out.assert_code(0);

    holder.let_go();
    holder.wait().assert_code(0).assert_stderr_lacks("lost");
}

/// The holder's own connections to `node` that listen (pub/sub), the sentinels' apart.
fn listeners(node: &crate::support::deployments::Process) -> usize {
    node.try_query::<String>(&["CLIENT", "LIST", "TYPE", "pubsub"])
        .unwrap_or_default()
        .lines()
        .filter(|client| !client.contains("name=sentinel"))
        .count()
}

/// `--replace` through the sentinels: the holder listens on the master they name, and the
/// takeover goes as on one server (SIGTERM within 1 s, the new command after the old one).
#[test]
fn a_replacing_run_takes_over_through_the_sentinels() {
    let set = SentinelSet::start();
    crate::replace::takeover(|| set.cmd(), || listeners(&set.master) >= 1);
}

/// A failover while the holder listens: its subscription, cut with the old master, is made
/// again on the new one through the sentinels, and a takeover asked for there is heard
/// within 1 s, not at the next renewal.
#[test]
fn a_takeover_after_a_failover_is_heard_on_the_new_master() {
    use crate::replace::{new_command, now_ns, old_command, stamp};
    let mut set = SentinelSet::start();
    let dir = TempDir::new("sentinel-replace-failover");
    let old = set
        .cmd()
        .args(["-k", "rf", "--ttl", KEY_TTL, "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(SETTLE, "the old command to start", || {
        dir.exists("old.start")
    });
    wait_until(SETTLE, "the holder to listen", || {
        listeners(&set.master) >= 1
    });
    set.master.kill();
    set.wait_for_promotion();
    wait_until(SETTLE, "the holder to listen on the new master", || {
        listeners(&set.replica) >= 1
    });
    let asked = now_ns();
    let new = set
        .cmd()
        .args(["-k", "rf", "--replace", "--shell"])
        .arg(new_command(&dir, "new"))
        .spawn();
    old.wait_within(SETTLE)
        .assert_code(77)
        .assert_stderr_contains("replaced by");
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

/// A planned switchover while the holder listens: the old master lives on as a replica, and
/// the holder's subscription may stay there. A takeover asked for on the new master still
/// reaches the holder within 1 s.
#[test]
fn a_takeover_after_a_switchover_is_heard() {
    use crate::replace::{new_command, now_ns, old_command, stamp};
    let set = SentinelSet::start();
    let dir = TempDir::new("sentinel-replace-switch");
    let old = set
        .cmd()
        .args(["-k", "rs", "--ttl", KEY_TTL, "--shell"])
        .arg(old_command(&dir))
        .spawn();
    wait_until(SETTLE, "the old command to start", || {
        dir.exists("old.start")
    });
    wait_until(SETTLE, "the holder to listen", || {
        listeners(&set.master) >= 1
    });
    set.sentinels[0].query::<String>(&["SENTINEL", "FAILOVER", SERVICE]);
    set.wait_for_promotion();
    let new_master = set.replica.port().to_string();
    set.master
        .query::<String>(&["REPLICAOF", "127.0.0.1", &new_master]);
    wait_until(SETTLE, "a renewal on the new master", || {
        set.replica.calls("evalsha") > 0
    });
    let asked = now_ns();
    let new = set
        .cmd()
        .args(["-k", "rs", "--replace", "--shell"])
        .arg(new_command(&dir, "new"))
        .spawn();
    old.wait_within(SETTLE).assert_code(77);
    new.wait_within(SETTLE).assert_code(0);
    let term = stamp(&dir, "old.term");
    assert!(
        term - asked < 1_000_000_000,
        "the old command got SIGTERM {} ms after the takeover was asked for",
        (term - asked) / 1_000_000
    );
    assert!(stamp(&dir, "new.start") > stamp(&dir, "old.end"));
}

/// `--once` and `--once-per` records travel to the replica with the lock: after the master's
/// death, the same work is found done on the new master.
#[test]
fn once_records_survive_a_failover() {
    let mut set = SentinelSet::start();
    let dir = TempDir::new("sentinel-once");
    let log = dir.join("log");
    let note = format!("echo ran >> '{}'", log.display());
    let url = set.url();
    let once = |flags: [&str; 2]| {
        Wrapper::new(&url)
            .args(["-k", "job"])
            .args(flags)
            .args(["--shell", &note])
            .run()
    };
    let flags = [["--once", "v1"], ["--once-per", "1h"]];
    for flags in flags {
        once(flags)
            .assert_code(0)
            .assert_stderr_lacks("already done");
    }
    wait_until(SETTLE, "the records to reach the replica", || {
        set.replica
            .try_query::<bool>(&["EXISTS", "{redlock:job}:done"])
            .unwrap_or(false)
            && set
                .replica
                .try_query::<bool>(&["EXISTS", "{redlock:job}:done:per"])
                .unwrap_or(false)
    });
    set.master.kill();
    set.wait_for_promotion();
    for flags in flags {
        once(flags)
            .assert_code(0)
            .assert_stderr_contains("already done");
    }
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2);
}

/// A `--once` run's release waits for a replica to have the record, as an acquisition waits
/// for the lock (`WAIT 1`), and says so when none confirms it: a failover right after would
/// lose the record, and the work would be done again.
#[test]
fn a_once_record_no_replica_confirmed_is_warned_of() {
    let mut set = SentinelSet::start();
    let url = set.url();
    // Stopped, not killed: the master still counts it as connected, and WAIT times out.
    set.replica.freeze();
    let out = Wrapper::new(&url)
        .args(["-k", "job", "--once", "v1", "--ttl", "2s", "--", "true"])
        .run();
    out.assert_code(0)
        .assert_stderr_contains("no replica confirmed the --once record of redlock:job");
}

/// Several keys through the sentinels (issue 32): a pool and a multi-key run, both on the
/// master they find; a switchover under a multi-key run moves both keys with their data.
#[test]
fn pools_and_multi_key_runs_follow_the_master() {
    let set = SentinelSet::start();
    let dir = TempDir::new("sentinel-keys");
    let both = hold(holding(&set, "db").args(["-k", "cache"]), &dir, "both");
    let held: Vec<Option<String>> = ["redlock:db", "redlock:cache"]
        .iter()
        .map(|key| set.master.query(&["GET", key]))
        .collect();
    assert!(held.iter().all(Option::is_some), "{held:?}");
    let out = set
        .cmd()
        .args(["-k", "db", "-k", "spare", "--any", "--no-wait", "--"])
        .args(["sh", "-c", "echo $REDLOCK_NAME"])
        .run();
    out.assert_code(0);
    assert_eq!(out.stdout_str().trim(), "spare");
    set.sentinels[0].query::<String>(&["SENTINEL", "FAILOVER", SERVICE]);
    set.wait_for_promotion();
    let new_master = set.replica.port().to_string();
    set.master
        .query::<String>(&["REPLICAOF", "127.0.0.1", &new_master]);
    wait_until(SETTLE, "renewals on the new master", || {
        set.replica.calls("evalsha") > 1
    });
    let still: Vec<Option<String>> = ["redlock:db", "redlock:cache"]
        .iter()
        .map(|key| set.replica.query(&["GET", key]))
        .collect();
    assert_eq!(still, held);
    both.let_go();
    both.wait().assert_code(0).assert_stderr_lacks("lost");
}
