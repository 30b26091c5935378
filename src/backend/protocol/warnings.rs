//! What a script's reply warns of (a repaired queue record, another application's keys, a
//! recording refused) and, after a write that must outlive a failover, the wait for a
//! replica to confirm it. Not the scripts' calls themselves.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::backend::connection::Session;
use crate::backend::layout::{done_ids_key, done_keys, queue_keys, record_keys, Key};
use crate::backend::scripts::Recorded;
use crate::report;

/// Warns that a script found entries in the woken waiters' record of `key` that are not
/// wake-up times (another client wrote them), and took them out (`woken_since` in
/// `scripts/prelude.lua`).
pub(super) fn warn_repaired(repaired: u32, key: &Key, server: &str) {
    if repaired > 0 {
        report::warn(format_args!(
            "{} on {server} held {repaired} entr{} that {} not a wake-up time redlock-run \
             could have written (another client wrote it); removed, the waiter is woken \
             again",
            queue_keys(key)[1],
            if repaired == 1 { "y" } else { "ies" },
            if repaired == 1 { "was" } else { "were" },
        ));
    }
}

/// Warns that a `--once` record key of `key` (`foreign`: 1 `{K}:done`, 2 `{K}:done:per`,
/// 4 `{K}:done:ids`, added) holds another application's data, which redlock-run leaves
/// alone; `what` says what came of it.
pub(super) fn warn_foreign(foreign: u32, key: &Key, server: &str, what: &str) {
    let [done, done_per] = done_keys(key);
    for (bit, record) in [(1, done), (2, done_per), (4, done_ids_key(key))] {
        if foreign & bit != 0 {
            report::warn(format_args!(
                "{record} on {server} is not a --once record redlock-run wrote (another \
                 type: another application's data); left alone, {what}"
            ));
        }
    }
}

/// The recording refusals already warned of in this process: each is said once per run,
/// whatever the number of scripts and Redlock nodes that meet it.
static RECORDING_WARNED: AtomicU32 = AtomicU32::new(0);

/// Warns, once per run for each kind, that a script could not record to the lock's history
/// or counters (`record` in `scripts/prelude.lua`): a command refused, named, or a key of
/// another type, named. The lock was not affected.
pub(in crate::backend) fn warn_recorded(recorded: &Recorded, key: &Key, server: &str) {
    if recorded.flags == 0 {
        return;
    }
    let new = recorded.flags & !RECORDING_WARNED.fetch_or(recorded.flags, Ordering::Relaxed);
    let [history, stats] = record_keys(key);
    let refused = if recorded.refused.is_empty() {
        String::from("a command")
    } else {
        report::escape(&recorded.refused).to_string()
    };
    if new & (Recorded::HISTORY_REFUSED | Recorded::STATS_REFUSED) != 0 {
        let on = match recorded.flags & (Recorded::HISTORY_REFUSED | Recorded::STATS_REFUSED) {
            Recorded::HISTORY_REFUSED => history.to_string(),
            Recorded::STATS_REFUSED => stats.to_string(),
            _ => format!("{history} and {stats}"),
        };
        report::warn(format_args!(
            "{server} refused {refused} on {on} (see docs/security.md for the ACL): this run's \
             history and counters are not recorded there; the lock is not affected"
        ));
    }
    for (bit, name, kind) in [
        (Recorded::HISTORY_WRONG_TYPE, &history, "stream"),
        (Recorded::STATS_WRONG_TYPE, &stats, "hash"),
    ] {
        if new & bit != 0 {
            report::warn(format_args!(
                "{name} on {server} is not a {kind} redlock-run wrote (another type: another \
                 application's data); left alone, nothing recorded there; the lock is not \
                 affected"
            ));
        }
    }
}

/// After taking the lock on a master that has replicas (Sentinel, Cluster), waits up to
/// `wait` for one of them to confirm the write. Replication is asynchronous: a failover to a
/// replica that never saw the lock loses it (and the fence number), and a second holder can
/// take it before this one's next renewal finds it gone. Waiting makes that unlikely; it
/// cannot rule it out, and a master without a replica in time is only reported: refusing to
/// run would turn a degraded replica into an outage of every job.
pub(super) fn confirm_replicated(
    session: &mut Session<'_>,
    wait: Duration,
    what: &str,
    risk: &str,
) {
    match session.replicas {
        None => return,
        Some(0) => {
            report::verbose(format_args!(
                "the master has no replica: a failover now would lose {what}"
            ));
            return;
        }
        Some(_) => {}
    }
    // The server must answer before this call's time is up: at most half of what is left.
    let wait = wait.min(session.time_left() / 2);
    let mut command = redis::cmd("WAIT");
    command.arg(1).arg(wait.as_millis().max(1) as u64);
    match session.query::<i64>(&command) {
        Ok(0) => report::warn(format_args!(
            "no replica confirmed {what} within {}; if the master fails over now, {risk}",
            report::duration(wait)
        )),
        Ok(_) => {}
        Err(err) => {
            session.spoil();
            report::warn(format_args!(
                "cannot confirm that a replica has {what}: {err:#}"
            ));
        }
    }
}
