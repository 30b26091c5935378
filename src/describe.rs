//! How a lock's state is put in words and JSON: shared by `status`, `list`, the dry run and,
//! later, `serve`. Wording only: reading the lock is `backend::inspect`'s, deciding what to
//! do about it is the caller's.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;

use crate::backend::counters::{self, LockCounters};
use crate::backend::inspect::{LockView, Slot, Verdict};
use crate::backend::shown;
use crate::report::escape;
use crate::{holder, report};

/// Why the one server of a single deployment could not be read, if it could not. (A
/// quorum's unread nodes are shown beside the others.)
pub(crate) fn lone_failure(view: &LockView) -> Option<&str> {
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
    // Shared holders (`--shared`) are shown as `--limit` slots are, named as such.
    let shared = if slots.iter().any(|slot| slot.shared) {
        " shared"
    } else {
        ""
    };
    match slots {
        [] => format!("{key} is free"),
        [slot] => format!("{key} held by{shared} {}", slot_phrase(slot)),
        _ => {
            let mut line = format!("{key} held by {}{shared} holders:", slots.len());
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
pub(crate) fn node_lines(view: &LockView) -> String {
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

pub(crate) fn slot_phrase(slot: &Slot) -> String {
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
pub(crate) fn lock_json(view: &LockView) -> serde_json::Value {
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
            "mode": if slot.shared { "shared" } else { "exclusive" },
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

/// `last success 2026-11-26T00:00:05Z (3m 12s ago), 2 consecutive skips`; `None` when
/// there is nothing to say (no success yet, no skip), as for a lock taken for the first time.
pub(crate) fn success_line(record: &LockCounters) -> Option<String> {
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

/// A line on stdout; a closed stdout (`| head`) is not an error worth a message.
pub(crate) fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}") {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}
