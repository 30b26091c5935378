//! `status`, `list` and `release`: what operators ask of locks, printed on stdout (text or
//! JSON). One flow for every kind of deployment: reading and deleting go through
//! `backend::inspect`, whose views hold what each node said and the verdict of the whole.
//! The branches here choose the words, which are `describe`'s: one server's view is said in
//! a line per lock; a Redlock quorum's names each node and the quorum's verdict. `history`
//! is worded in `admin/history.rs`, over `backend::history`.

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::backend::counters::{LockCounters, NodeCounters};
use crate::backend::inspect::{Forced, Inspector, LockView, ReleasePlan, Verdict};
use crate::backend::Key;
use crate::config::{AdminAction, AdminConfig};
use crate::describe::{
    lock_json, lock_line, lone_failure, node_lines, print, slot_phrase, success_line, verdict_line,
};
use crate::exit::Outcome;
use crate::report::escape;
use crate::{holder, report};

pub mod check;
pub(crate) mod history;
pub(crate) mod metrics;

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
pub(crate) fn date_holders(view: &mut LockView, counters: &[Result<NodeCounters, String>]) {
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
