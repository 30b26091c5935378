//! The JSON of `/api/locks` and `/api/locks/NAME`, built with serde_json (which escapes
//! every string) from what `backend::inspect` read: the fields of `status --json` that
//! people read, and the events as `history --json` prints them. Never a token (a holder's
//! or a waiter's), a lock's raw value, a password or a command's arguments: holders are
//! described field by field, never copied whole. `<`, `>` and `&` are written `\u003c`,
//! `\u003e`, `\u0026`, so that no answer holds markup even if read as HTML.

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

use crate::admin::history::event_json;
use crate::backend::counters::{age, LockCounters, NodeCounters};
use crate::backend::history::Entry;
use crate::backend::inspect::{Inspector, LockView, Slot, Verdict};
use crate::backend::{shown, Key};

/// How many events of each lock the board shows.
pub const BOARD_EVENTS: usize = 5;

/// `/api/locks`: every lock read, sorted by name (the SCAN's order, sorted). Each lock is
/// written out as soon as it is built: only one lock's JSON tree exists at a time.
pub fn board(
    inspector: &mut Inspector,
    prefix: &Key,
    views: &[LockView],
    counters: &[Vec<Result<NodeCounters, String>>],
    events: &[Result<Vec<Entry>, String>],
    truncated: bool,
    read_at_ms: u64,
) -> String {
    let mut out = text(&json!({
        "read_at_ms": read_at_ms,
        "prefix": shown(prefix.as_bytes()),
        "truncated": truncated,
    }));
    // `{…}` becomes `{…,"locks":[`.
    out.pop();
    out.push_str(",\"locks\":[");
    let mut first = true;
    for ((view, nodes), events) in views.iter().zip(counters).zip(events) {
        let merged = LockCounters::merge(nodes).ok();
        let events = events.as_ref().map(Vec::as_slice).unwrap_or_default();
        let waiting = merged.as_ref().map_or(0, |c| c.waiters);
        let queue = if waiting > 0 {
            inspector.queue_arrivals(&view.key).unwrap_or_default()
        } else {
            Vec::new()
        };
        if let Some(lock) = lock_json(prefix, view, merged.as_ref(), events, &queue) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(&text(&lock));
        }
    }
    out.push_str("]}");
    out
}

/// How many of a lock's newest events its page shows (`history -n` reads more).
pub const PAGE_EVENTS: usize = 500;

/// The most bytes of one event's field (its name, its value) an answer shows: ours are far
/// shorter; a foreign writer's longer ones are cut.
pub const FIELD_SHOWN: usize = 1024;

/// `/api/locks/NAME`: the lock at `key` with its newest [`PAGE_EVENTS`] events and its counters; `None`
/// when nothing is known of it (no holder, no counters, no waiter, no history).
pub fn lock_page(
    inspector: &mut Inspector,
    prefix: &Key,
    key: &Key,
    read_at_ms: u64,
) -> Result<Option<String>> {
    let mut view = inspector.read(key);
    if view.verdict() == Verdict::Unknown {
        bail!("cannot read {key}: too few Redis nodes answered to tell whether it is held");
    }
    let nodes = inspector.counters(std::slice::from_ref(key)).remove(0);
    crate::admin::date_holders(&mut view, &nodes);
    let merged = LockCounters::merge(&nodes).map_err(|err| anyhow::anyhow!("{err}"))?;
    let history = inspector
        .last_events(std::slice::from_ref(key), PAGE_EVENTS)
        .remove(0)
        .map_err(|err| anyhow::anyhow!("{err}"))?;
    let queue = if merged.waiters > 0 {
        inspector.queue_arrivals(key)?
    } else {
        Vec::new()
    };
    let recent = &history[history.len().saturating_sub(BOARD_EVENTS)..];
    let Some(mut lock) = lock_json(prefix, &view, Some(&merged), recent, &queue) else {
        return Ok(None);
    };
    if let Some(fields) = lock.as_object_mut() {
        let history: Vec<Value> = history.iter().map(|entry| event(entry, key)).collect();
        fields.insert("history".into(), Value::Array(history));
        fields.insert("counters".into(), counters_json(&view, &merged));
        fields.insert("read_at_ms".into(), json!(read_at_ms));
    }
    Ok(Some(text(&lock)))
}

/// One lock, as the board draws a row; `None` for a name that turned out to be nothing
/// (gone between the SCAN and the read, with no counters, waiters or events).
fn lock_json(
    prefix: &Key,
    view: &LockView,
    counters: Option<&LockCounters>,
    events: &[Entry],
    queue: &[u64],
) -> Option<Value> {
    let slots = held_slots(view);
    let recorded = counters.is_some_and(|c| c.recorded);
    let waiters = counters.map_or(0, |c| c.waiters);
    if slots.is_empty() && !recorded && waiters == 0 && events.is_empty() {
        return None;
    }
    let limit = slots
        .iter()
        .filter_map(|slot| slot.holder.as_ref()?.limit)
        .max()
        .unwrap_or(1);
    let state = match (slots.len(), limit) {
        (0, _) => "free",
        _ if slots.iter().any(|slot| slot.shared) => "shared",
        (_, 1) => "held",
        _ => "slots",
    };
    let now_ms = counters.map(|c| c.now_ms).filter(|&ms| ms > 0);
    let holders: Vec<Value> = slots
        .iter()
        .map(|slot| holder_json(slot, limit, now_ms))
        .collect();
    let name = view
        .key
        .as_bytes()
        .strip_prefix(prefix.as_bytes())
        .unwrap_or(view.key.as_bytes());
    let queue: Vec<Value> = queue
        .iter()
        .enumerate()
        .map(|(at, since)| json!({ "position": at + 1, "since_ms": since }))
        .collect();
    Some(json!({
        "name": shown(name),
        "path": super::path::percent_encoded(name),
        "key": shown(view.key.as_bytes()),
        "state": state,
        "limit": limit,
        "holders": holders,
        "waiters": waiters,
        "queue": queue,
        "last_success_ms": counters.and_then(|c| c.counters.last_success()),
        "consecutive_skips": counters.map_or(0, |c| c.counters.skips),
        "events": events.iter().map(|entry| event(entry, &view.key)).collect::<Vec<_>>(),
    }))
}

/// The slots that hold the lock: on one server, all of them; over a quorum, the holder's
/// (the one with a majority), on the node where its lease ends first.
fn held_slots(view: &LockView) -> Vec<&Slot> {
    if !view.is_quorum() {
        return view
            .nodes
            .first()
            .and_then(|node| node.slots.as_ref().ok())
            .map(|slots| slots.iter().collect())
            .unwrap_or_default();
    }
    match view.verdict() {
        Verdict::Held { identity, .. } => view.holder_slot(&identity).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// A holder, field by field: never its token nor its raw value. `held_for_ms` is by the
/// server's clock when the run recorded when it took its slot, else by the value's own.
fn holder_json(slot: &Slot, limit: u64, now_ms: Option<u64>) -> Value {
    let mode = match (slot.shared, limit) {
        (true, _) => "shared",
        (false, 1) => "exclusive",
        (false, _) => "slot",
    };
    let ttl_ms = slot.ttl.map(|ttl| ttl.as_millis() as u64);
    let Some(holder) = &slot.holder else {
        // Another client's value: nothing of it is shown but that it is there, and its
        // length (a string's).
        return json!({
            "known": false,
            "ttl_ms": ttl_ms,
            "mode": mode,
            "length": (slot.kind == "string").then_some(slot.length),
        });
    };
    let held_for_ms = match (holder.since_ms, now_ms) {
        (Some(since), Some(now)) => age(now, since).ok().map(|held| held.as_millis() as u64),
        (Some(_), None) => holder
            .age()
            .and_then(Result::ok)
            .map(|held| held.as_millis() as u64),
        _ => None,
    };
    json!({
        "known": true,
        "host": holder.host,
        "pid": holder.pid,
        "program": holder.program,
        "label": holder.label,
        "since_ms": holder.since_ms,
        "held_for_ms": held_for_ms,
        "ttl_ms": ttl_ms,
        "fence": holder.fence,
        "mode": mode,
    })
}

/// An event as `history --json` prints it, less what could carry a token: the `token`
/// field, a foreign entry's raw `token` field, and a `by` that is not the forcing run's
/// metadata.
fn event(entry: &Entry, key: &Key) -> Value {
    let cut = |bytes: &Vec<u8>| bytes[..bytes.len().min(FIELD_SHOWN)].to_vec();
    let mut entry = entry.clone();
    for (name, value) in &mut entry.fields {
        *name = cut(name);
        *value = cut(value);
    }
    let mut value = event_json(&entry, key);
    if let Some(fields) = value.as_object_mut() {
        fields.remove("token");
        if fields.get("by").is_some_and(|by| !by.is_object()) {
            fields.remove("by");
        }
        if let Some(Value::Object(raw)) = fields.get_mut("fields") {
            raw.retain(|name, _| !name.contains("token") && name != "by");
        }
    }
    value
}

/// The values `metrics` gives for one lock, by name.
fn counters_json(view: &LockView, merged: &LockCounters) -> Value {
    let c = &merged.counters;
    let oldest = crate::admin::metrics::oldest_holder(view, merged);
    let mut out = Map::new();
    for (name, value) in [
        ("acquired", c.acquired),
        ("busy", c.busy),
        ("timeout", c.timeout),
        ("superseded", c.superseded),
        ("already_done", c.already_done),
        ("lost", c.lost),
        ("expired", c.expired + merged.stale),
        ("wait_ms_sum", c.wait_ms_sum),
        ("wait_count", c.wait_count),
        ("hold_ms_sum", c.hold_ms_sum),
        ("hold_count", c.hold_count),
        ("holders", crate::admin::metrics::holders(view)),
        ("waiters", merged.waiters),
        ("consecutive_skips", c.skips),
    ] {
        out.insert(name.into(), json!(value));
    }
    out.insert("last_success_ms".into(), json!(c.last_success()));
    out.insert(
        "holder_age_ms".into(),
        json!(oldest
            .filter(|oldest| oldest.ahead.is_none())
            .map(|oldest| oldest.age.as_millis() as u64)),
    );
    Value::Object(out)
}

/// `value` as text, with `<`, `>` and `&` escaped (they occur only inside strings).
fn text(value: &Value) -> String {
    let text = value.to_string();
    if !text.contains(['<', '>', '&']) {
        return text;
    }
    text.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}
