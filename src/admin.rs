//! `status`, `list` and `release`: what operators ask of locks, printed on stdout (text or
//! JSON). One flow for every kind of deployment: reading and deleting go through
//! `backend::inspect`, whose views hold what each node said and the verdict of the whole.
//! The branches here are wording only: one server's view is said in a line per lock; a
//! Redlock quorum's names each node and the quorum's verdict. `history` is worded in
//! `admin/history.rs`, over `backend::history`.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::backend::counters::{self, LockCounters, NodeCounters};
use crate::backend::inspect::{Forced, Inspector, LockView, ReleasePlan, Slot, Verdict};
use crate::backend::{shown, Key};
use crate::config::{AdminAction, AdminConfig};
use crate::exit::Outcome;
use crate::report::escape;
use crate::{holder, report};

pub mod check;
mod history;
mod metrics;

pub fn run(config: &AdminConfig) -> Outcome {
    if let AdminAction::Check { key, thresholds } = &config.action {
        return check::run(config, key, thresholds);
    }
    if let AdminAction::Status { key, .. }
    | AdminAction::Release { key, .. }
    | AdminAction::History { key, .. } = &config.action
    {
        report::set_key(key);
    }
    match run_checked(config) {
        Ok(outcome) => outcome,
        Err(err) => {
            report::error(&err);
            Outcome::Failed
        }
    }
}

fn run_checked(config: &AdminConfig) -> Result<Outcome> {
    let inspector = || Inspector::open(&config.redis, config.redis_timeout);
    match &config.action {
        AdminAction::Status { key, json } => status(&mut inspector()?, key, *json),
        AdminAction::List { json } => list(&mut inspector()?, &config.prefix, *json),
        AdminAction::Release { key, force } => release(&mut inspector()?, key, *force),
        AdminAction::Metrics => metrics::metrics(&mut inspector()?, &config.prefix),
        // Judged by `check::run`, which reports its own failures as a plugin does.
        AdminAction::Check { key, thresholds } => Ok(check::run(config, key, thresholds)),
        AdminAction::History {
            key,
            lines,
            json,
            follow,
        } => {
            let request = history::Request {
                key,
                lines: *lines,
                json: *json,
                follow: *follow,
            };
            history::show(&config.redis, config.redis_timeout, &request)
        }
    }
}

/// Exit 0 when held, 1 when free; 125 when too few nodes answered to tell.
fn status(inspector: &mut Inspector, key: &Key, json: bool) -> Result<Outcome> {
    let mut view = inspector.read(key);
    if let Some(err) = lone_failure(&view) {
        bail!("cannot read {key}: {err}");
    }
    let takeover = pending_takeover(inspector, key);
    let nodes = inspector.counters(std::slice::from_ref(key)).remove(0);
    date_holders(&mut view, &nodes);
    let record = success_record(key, &nodes);
    if json {
        let mut object = lock_json(&view);
        if let (Some((by, on)), Some(fields)) = (&takeover, object.as_object_mut()) {
            fields.insert("takeover_by".into(), json!(by));
            fields.insert("takeover_nodes".into(), json!(on));
        }
        if let (Some(record), Some(fields)) = (&record, object.as_object_mut()) {
            let c = &record.counters;
            fields.insert("last_success_ms".into(), json!(c.last_success()));
            fields.insert("consecutive_skips".into(), json!(c.skips));
        }
        print(&object.to_string())?;
    } else {
        if view.is_quorum() {
            print(&format!("{}\n{}", verdict_line(&view), node_lines(&view)))?;
        } else {
            print(&lock_line(&view))?;
        }
        if let Some((by, on)) = &takeover {
            let nodes = if view.is_quorum() {
                format!(" on {on} of {} nodes", view.nodes.len())
            } else {
                String::new()
            };
            print(&format!(
                "a takeover (--replace) by {by} is pending{nodes}: it is served before anyone \
                 else; `release --force` withdraws it"
            ))?;
        }
        if let Some(line) = record.as_ref().and_then(success_line) {
            print(&line)?;
        }
    }
    match view.verdict() {
        Verdict::Held { .. } => Ok(Outcome::Done),
        Verdict::Free { .. } => Ok(Outcome::Free),
        Verdict::Unknown => {
            bail!("cannot tell whether {key} is held: too few Redis nodes answered")
        }
    }
}

/// The names of every lock under `prefix` that any node knows of (with `with_counters`,
/// also those that have only counters): an error when too few nodes answered, a warning
/// for each that did not.
fn lock_names(inspector: &mut Inspector, prefix: &Key, with_counters: bool) -> Result<Vec<Key>> {
    let (names, failed) = inspector.list(prefix, with_counters);
    if inspector.is_quorum() {
        for (display, err) in &failed {
            report::warn(format_args!("cannot list the locks on {display}: {err}"));
        }
        if failed.len() >= inspector.majority() {
            bail!("cannot list locks: too few Redis nodes answered");
        }
    } else if let Some((_, err)) = failed.first() {
        bail!("cannot list locks: {err}");
    }
    Ok(names)
}

/// Every lock any node knows of, a line (or JSON object) each.
fn list(inspector: &mut Inspector, prefix: &Key, json: bool) -> Result<Outcome> {
    let names = lock_names(inspector, prefix, false)?;
    let mut views = inspector.read_all(&names);
    for (view, nodes) in views.iter_mut().zip(inspector.counters(&names)) {
        date_holders(view, &nodes);
    }
    if let Some((key, err)) = views
        .iter()
        .find_map(|view| Some((&view.key, lone_failure(view)?)))
    {
        bail!("cannot read {key}: {err}");
    }
    if !inspector.is_quorum() {
        // Gone between the scan and the read: not a lock any more. (A quorum's list shows
        // every name any node knows, with its verdict.)
        views.retain(|view| view.verdict() != Verdict::Free { strays: 0 });
    }
    if json {
        let all: Vec<_> = views.iter().map(lock_json).collect();
        print(&serde_json::Value::Array(all).to_string())?;
    } else {
        for view in &views {
            print(&if view.is_quorum() {
                verdict_line(view)
            } else {
                lock_line(view)
            })?;
        }
    }
    Ok(Outcome::Done)
}

/// Exit 0 when something was deleted, 1 when the lock was free; refuses without `--force`.
fn release(inspector: &mut Inspector, key: &Key, force: bool) -> Result<Outcome> {
    let view = inspector.read(key);
    if let Some(err) = lone_failure(&view) {
        bail!("cannot read {key}: {err}");
    }
    let lock_key = key;
    let quorum = view.is_quorum();
    let unread: Vec<String> = view
        .unread()
        .map(|(display, err)| format!("{display}: {err}"))
        .collect();
    let nodes = view.nodes.len();
    if force {
        withdraw_takeover(inspector, key)?;
    }
    let held = match view.release_plan(force) {
        ReleasePlan::Free => {
            print(&if quorum {
                format!("{key} is free on every node; nothing to release")
            } else {
                format!("{key} is free; nothing to release")
            })?;
            return Ok(Outcome::Free);
        }
        ReleasePlan::FreeOnMajority { read } => {
            for line in &unread {
                report::warn(format_args!("could not read {line}"));
            }
            print(&format!(
                "{key} is free on the {read} of {nodes} nodes that answered; nothing to release"
            ))?;
            return Ok(Outcome::Free);
        }
        ReleasePlan::Leftovers => {
            // Leftovers of a failed or lost attempt: nobody holds the lock.
            print(&format!(
                "{}; nothing to release (--force deletes those values now)",
                verdict_line(&view)
            ))?;
            return Ok(Outcome::Free);
        }
        ReleasePlan::Refuse { held } => {
            let held_by = if quorum {
                verdict_line(&view)
            } else {
                let phrases: Vec<String> = held.iter().map(|(_, slot)| slot_phrase(slot)).collect();
                format!("{key} is held by {}", phrases.join("; "))
            };
            // Only a redlock-run holder renews, and so learns that its lock is gone; another
            // client's value is renewed by no redlock-run, and its holder is never told.
            let ours = held
                .iter()
                .filter(|(_, slot)| slot.holder.is_some())
                .count();
            let fate = match (ours, held.len() - ours) {
                (_, 0) => "its command would be terminated at its next renewal",
                (0, _) => {
                    "redlock-run does not renew another client's value, so nothing would tell \
                     that client to stop"
                }
                _ => {
                    "a redlock-run holder's command would be terminated at its next renewal; \
                     nothing would tell another client's holder to stop"
                }
            };
            bail!(
                "{held_by}; releasing it lets another holder in while this one may still run \
                 ({fate}). Add --force to release it"
            );
        }
        ReleasePlan::Delete { held } => held,
    };
    let mut deleted_any = false;
    for (node, slot) in held {
        // Where the slot is, when there is more than one place it could be.
        let on = if quorum {
            format!(" on {}", escape(&view.nodes[node].display))
        } else {
            String::new()
        };
        let slot_key = &slot.key;
        if slot.value.is_none() {
            report::error(&anyhow::anyhow!(
                "{slot_key}{on} is a {}, not a lock redlock-run wrote; not deleting another \
                 application's data",
                slot.kind
            ));
            continue;
        }
        let who = holder::describe(slot.value.as_deref());
        let deleted = inspector
            .force_release(node, lock_key, slot)
            .with_context(|| format!("cannot release {slot_key}{on}"));
        match deleted {
            Ok(forced @ (Forced::Deleted | Forced::DeletedUnannounced)) => {
                print(&format!("released {slot_key}{on}, held by {who}"))?;
                deleted_any = true;
                if forced == Forced::DeletedUnannounced {
                    report::warn(format_args!(
                        "Redis refused to announce the release{on}: this user may not \
                         publish on the release channel, so waiters find the lock free only \
                         when they next look (see docs/security.md)"
                    ));
                }
            }
            Ok(Forced::Changed) if quorum => print(&format!(
                "{slot_key}{on} changed while being released; nothing deleted there"
            ))?,
            Ok(Forced::Changed) => print(&format!(
                "{slot_key} changed while being released (no longer held by {who}); nothing \
                 deleted"
            ))?,
            // One server: there is nowhere else to try.
            Err(err) if !quorum => return Err(err),
            Err(err) => report::error(&err),
        }
    }
    for line in &unread {
        report::warn(format_args!(
            "not released on {line}; it expires there by its TTL"
        ));
    }
    if deleted_any {
        Ok(Outcome::Done)
    } else {
        bail!("nothing was released")
    }
}

/// The lock's counters, for the last success and the skips `status` shows (a line after
/// the holder's, `last_success_ms` and `consecutive_skips` in JSON); `None` when no run
/// recorded any (recording off, an older version) or they cannot be read (a warning:
/// the lock itself was read).
fn success_record(key: &Key, nodes: &[Result<NodeCounters, String>]) -> Option<LockCounters> {
    metrics::warn_notes(nodes);
    match LockCounters::merge(nodes) {
        Ok(counters) => counters.recorded.then_some(counters),
        Err(err) => {
            report::warn(format_args!(
                "cannot read the counters of {key} (last success, skips): {err}"
            ));
            None
        }
    }
}

/// Dates each holder from when it took its slot, as the lock's counters recorded it (the
/// server's clock; `slot:<i>` of `{K}:stats`), as `check`, `metrics` and `history` do: the
/// value's own `since_ms` is when its run started, its wait included. A holder without such
/// a record (recording off, another version) keeps its value's time.
fn date_holders(view: &mut LockView, counters: &[Result<NodeCounters, String>]) {
    for (node, read) in view.nodes.iter_mut().zip(counters) {
        let (Ok(slots), Ok(read)) = (&mut node.slots, read) else {
            continue;
        };
        for slot in slots {
            let (Some(holder), Some(value)) = (&mut slot.holder, &slot.value) else {
                continue;
            };
            if let Some((taken_ms, _)) = read.holding.iter().find(|(_, held)| held == value) {
                holder.since_ms = Some(*taken_ms);
            }
        }
    }
}

/// `last success 2026-11-26T00:00:05Z (3m 12s ago), 2 consecutive skips`; `None` when
/// there is nothing to say (no success yet, no skip), as for a lock taken for the first time.
fn success_line(record: &LockCounters) -> Option<String> {
    let skips = record.counters.skips;
    let skips = format!(
        "{skips} consecutive skip{}",
        if skips == 1 { "" } else { "s" }
    );
    let Some(at) = record.counters.last_success() else {
        return (record.counters.skips > 0).then(|| format!("no run has succeeded yet, {skips}"));
    };
    // Past year 9999 RFC 3339 has no words for it (humantime's Display fails, and
    // `to_string` would panic): such a count was not written by a run.
    let when = std::time::UNIX_EPOCH
        .checked_add(Duration::from_millis(at))
        .filter(|&time| {
            time < std::time::UNIX_EPOCH + Duration::from_secs(crate::holder::LAST_RFC3339_SECOND)
        })
        .map_or_else(
            || String::from("(a time out of range)"),
            |time| humantime::format_rfc3339_seconds(time).to_string(),
        );
    let age = match counters::age(record.now_ms, at) {
        Ok(ago) => format!("{} ago", report::duration(whole_seconds(ago))),
        Err(ahead) => format!(
            "{} in the future: a clock stepped back, or counters not written by redlock-run",
            report::duration(whole_seconds(ahead))
        ),
    };
    Some(format!("last success {when} ({age}), {skips}"))
}

fn whole_seconds(duration: Duration) -> Duration {
    Duration::from_secs(duration.as_secs())
}

/// Why the one server of a single deployment could not be read, if it could not. (A
/// quorum's unread nodes are shown beside the others.)
fn lone_failure(view: &LockView) -> Option<&str> {
    match view.nodes.as_slice() {
        [node] => node.slots.as_ref().err().map(String::as_str),
        _ => None,
    }
}

/// One server: `redlock:deploy held by web-3 pid 4242 `deploy.sh` (v1.2) for 3m12s, ttl
/// 24s, fence 118`.
pub(crate) fn lock_line(view: &LockView) -> String {
    let key = &view.key;
    let slots = view
        .nodes
        .first()
        .and_then(|node| node.slots.as_ref().ok())
        .map_or(&[][..], Vec::as_slice);
    match slots {
        [] => format!("{key} is free"),
        [slot] => format!("{key} held by {}", slot_phrase(slot)),
        _ => {
            let mut line = format!("{key} held by {} holders:", slots.len());
            for slot in slots {
                line.push_str(&format!("\n  {}", slot_phrase(slot)));
            }
            line
        }
    }
}

/// A quorum: the verdict, with how many nodes agree.
pub(crate) fn verdict_line(view: &LockView) -> String {
    let key = &view.key;
    let nodes = view.nodes.len();
    match view.verdict() {
        Verdict::Held {
            identity,
            nodes: holding,
        } => {
            let phrase = view
                .holder_slot(&identity)
                .map_or_else(String::new, slot_phrase);
            format!("{key} held by {phrase} (on {holding} of {nodes} nodes)")
        }
        Verdict::Free { strays: 0 } => {
            let read = view.nodes.iter().filter(|node| node.slots.is_ok()).count();
            if read == nodes {
                format!("{key} is free (on all {nodes} nodes)")
            } else {
                format!("{key} is free (on the {read} of {nodes} nodes that answered)")
            }
        }
        Verdict::Free { strays } => format!(
            "{key} is free: no holder has a majority of the {nodes} nodes ({strays} still have \
             a value, which expires by its TTL)"
        ),
        Verdict::Unknown => {
            format!("{key}: cannot tell whether it is held; too few of the {nodes} nodes answered")
        }
    }
}

/// A quorum: what each node holds.
fn node_lines(view: &LockView) -> String {
    let lines: Vec<String> = view
        .nodes
        .iter()
        .map(|node| match &node.slots {
            Ok(slots) if slots.is_empty() => format!("  {}: free", escape(&node.display)),
            Ok(slots) => {
                let phrases: Vec<String> = slots.iter().map(slot_phrase).collect();
                format!("  {}: {}", escape(&node.display), phrases.join("; "))
            }
            Err(err) => format!("  {}: cannot read: {}", escape(&node.display), escape(err)),
        })
        .collect();
    lines.join("\n")
}

fn slot_phrase(slot: &Slot) -> String {
    let who = match (&slot.holder, &slot.value) {
        (Some(holder), _) => holder.to_string(),
        (None, Some(_)) => holder::describe(None),
        (None, None) => format!("another application's {} (not a lock)", escape(&slot.kind)),
    };
    let ttl = match slot.ttl {
        Some(ttl) => format!(
            "ttl {}",
            report::duration(Duration::from_secs(ttl.as_secs()))
        ),
        None => String::from("no ttl"),
    };
    let fence = slot
        .holder
        .as_ref()
        .and_then(|holder| holder.fence)
        .map(|fence| format!(", fence {fence}"))
        .unwrap_or_default();
    format!("{who}, {ttl}{fence}")
}

/// One lock as JSON: its holders; for a quorum also the quorum's count and each node's view
/// (`held` is null when too few nodes answered to tell).
fn lock_json(view: &LockView) -> serde_json::Value {
    let key = &view.key;
    if !view.is_quorum() {
        let slots = view
            .nodes
            .first()
            .and_then(|node| node.slots.as_ref().ok())
            .map_or(&[][..], Vec::as_slice);
        let holders: Vec<_> = slots.iter().map(slot_json).collect();
        return json!({ "key": key.to_string(), "held": !slots.is_empty(), "holders": holders });
    }
    let (held, holders, holding) = match view.verdict() {
        Verdict::Held { identity, nodes } => {
            let holders: Vec<_> = view
                .holder_slot(&identity)
                .map(slot_json)
                .into_iter()
                .collect();
            (json!(true), holders, nodes)
        }
        Verdict::Free { .. } => (json!(false), Vec::new(), 0),
        Verdict::Unknown => (serde_json::Value::Null, Vec::new(), 0),
    };
    let nodes: Vec<_> = view
        .nodes
        .iter()
        .map(|node| match &node.slots {
            Ok(slots) => json!({
                "redis": node.display,
                "holders": slots.iter().map(slot_json).collect::<Vec<_>>(),
            }),
            Err(err) => json!({ "redis": node.display, "error": err }),
        })
        .collect();
    json!({
        "key": key.to_string(),
        "held": held,
        "holders": holders,
        "quorum": { "nodes": view.nodes.len(), "majority": view.majority(), "holding": holding },
        "nodes": nodes,
    })
}

fn slot_json(slot: &Slot) -> serde_json::Value {
    let ttl_ms = slot.ttl.map(|ttl| ttl.as_millis() as u64);
    match &slot.holder {
        Some(holder) => json!({
            "key": slot.key.to_string(),
            "known": true,
            "token": holder.token,
            "host": holder.host,
            "pid": holder.pid,
            "program": holder.program,
            "label": holder.label,
            "since_ms": holder.since_ms,
            "held_for_ms": holder.age().and_then(Result::ok).map(|held| held.as_millis() as u64),
            // null unless its start lies in the future (clocks differ, or hostile data).
            "ahead_ms": holder.age().and_then(Result::err).map(|ahead| ahead.as_millis() as u64),
            "ttl_ms": ttl_ms,
            "fence": holder.fence,
        }),
        None => json!({
            "key": slot.key.to_string(),
            "known": false,
            "type": slot.kind,
            "value": slot.value.as_deref().map(shown),
            "ttl_ms": ttl_ms,
        }),
    }
}

/// A line on stdout; a closed stdout (`| head`) is not an error worth a message.
pub(crate) fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}") {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

/// The takeover (`--replace`) standing for `key`, if any node has one: who asked for it
/// (one line, escaped) and on how many nodes.
fn pending_takeover(inspector: &mut Inspector, key: &Key) -> Option<(String, usize)> {
    let requests: Vec<Vec<u8>> = inspector.takeover(key).into_iter().flatten().collect();
    let first = requests.first()?;
    Some((holder::replacing_run(first), requests.len()))
}

/// `release --force`: a takeover standing for `key` goes too, whoever asked for it (one whose
/// requester is still waiting asks again at its next try, while the lock is held).
fn withdraw_takeover(inspector: &mut Inspector, key: &Key) -> Result<()> {
    let Some((by, _)) = pending_takeover(inspector, key) else {
        return Ok(());
    };
    let (deleted, failed) = inspector.withdraw_takeover(key);
    for (display, err) in &failed {
        report::warn(format_args!(
            "could not withdraw the takeover on {display}: {err}"
        ));
    }
    if deleted > 0 {
        print(&format!("withdrew the takeover (--replace) by {by}"))?;
    }
    Ok(())
}
