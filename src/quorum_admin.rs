//! `status`, `list` and `release` over the nodes of a Redlock quorum: every node is read
//! (in parallel), each node's view is shown, and the verdict is the quorum's: a lock is held
//! when one holder has it on a majority of the nodes. The wording of a single node's view
//! is `admin`'s.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;

use crate::admin::{print, slot_json, slot_phrase};
use crate::backend::inspect::{self, Slot};
use crate::backend::quorum::majority;
use crate::backend::single::Link;
use crate::config::{AdminAction, AdminConfig, RedisTarget};
use crate::exit::Outcome;
use crate::{backend, holder, report};

/// What one node said about a lock: its held slots, or why it could not be read.
struct NodeView {
    display: String,
    slots: Result<Vec<Slot>, String>,
}

/// What the nodes say together.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// One holder (by its identity) has a majority of the nodes.
    Held { identity: String, nodes: usize },
    /// No holder has a majority, and the nodes that could not be read could not change
    /// that. `strays`: nodes that still have some value (an acquisition in progress, or
    /// what a lost or split one left to expire).
    Free { strays: usize },
    /// Too many nodes could not be read to tell.
    Unknown,
}

pub fn run(config: &AdminConfig) -> Result<Outcome> {
    let timeout = config.redis_timeout;
    match &config.action {
        AdminAction::Status { key, json } => status(&config.redis, timeout, key, *json),
        AdminAction::List { json } => list(&config.redis, timeout, &config.prefix, *json),
        AdminAction::Release { key, force } => release(&config.redis, timeout, key, *force),
    }
}

/// Runs `read` on every node at once; one result per node, in the order given.
fn on_every_node<T: Send>(
    targets: &[RedisTarget],
    timeout: Duration,
    read: impl Fn(&mut Link) -> Result<T> + Sync,
) -> Vec<Result<T, String>> {
    std::thread::scope(|scope| {
        let reads: Vec<_> = targets
            .iter()
            .map(|target| {
                let read = &read;
                scope.spawn(move || {
                    Link::new(target, timeout)
                        .and_then(|mut link| read(&mut link))
                        .map_err(|err| format!("{err:#}"))
                })
            })
            .collect();
        reads
            .into_iter()
            .map(|read| {
                read.join()
                    .unwrap_or_else(|_| Err(String::from("internal error")))
            })
            .collect()
    })
}

fn read_nodes(targets: &[RedisTarget], timeout: Duration, key: &str) -> Vec<NodeView> {
    on_every_node(targets, timeout, |link| inspect::read_lock(link, key))
        .into_iter()
        .zip(targets)
        .map(|(slots, target)| NodeView {
            display: target.display.clone(),
            slots,
        })
        .collect()
}

/// Who holds a slot, the same on every node: the token for values of ours, else the value.
fn identity(slot: &Slot) -> String {
    match (&slot.holder, &slot.value) {
        (Some(holder), _) => holder.token.clone().unwrap_or_default(),
        (None, Some(value)) => value.clone(),
        (None, None) => format!("a {}", slot.kind),
    }
}

fn verdict(views: &[NodeView]) -> Verdict {
    let majority = majority(views.len());
    let mut counts: Vec<(String, usize)> = Vec::new();
    let mut unread = 0;
    let mut strays = 0;
    for view in views {
        match &view.slots {
            Err(_) => unread += 1,
            Ok(slots) => {
                let Some(first) = slots.first() else { continue };
                strays += 1;
                let who = identity(first);
                match counts.iter_mut().find(|(identity, _)| *identity == who) {
                    Some((_, count)) => *count += 1,
                    None => counts.push((who, 1)),
                }
            }
        }
    }
    let most = counts.iter().max_by_key(|(_, count)| *count).cloned();
    match most {
        Some((identity, nodes)) if nodes >= majority => Verdict::Held { identity, nodes },
        Some((_, nodes)) if nodes + unread >= majority => Verdict::Unknown,
        None if unread >= majority => Verdict::Unknown,
        _ => Verdict::Free { strays },
    }
}

/// The slot of the verdict's holder on the node where its lease ends first (the quorum
/// holds it at least that long).
fn holder_slot<'a>(views: &'a [NodeView], holder: &str) -> Option<&'a Slot> {
    views
        .iter()
        .filter_map(|view| view.slots.as_ref().ok()?.first())
        .filter(|slot| identity(slot) == holder)
        .min_by_key(|slot| slot.ttl.unwrap_or(Duration::MAX))
}

fn verdict_line(key: &str, views: &[NodeView]) -> String {
    let nodes = views.len();
    match verdict(views) {
        Verdict::Held {
            identity,
            nodes: holding,
        } => {
            let phrase = holder_slot(views, &identity).map_or_else(String::new, slot_phrase);
            format!("{key} held by {phrase} (on {holding} of {nodes} nodes)")
        }
        Verdict::Free { strays: 0 } => {
            let read = views.iter().filter(|view| view.slots.is_ok()).count();
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

fn node_lines(views: &[NodeView]) -> String {
    let lines: Vec<String> = views
        .iter()
        .map(|view| match &view.slots {
            Ok(slots) if slots.is_empty() => format!("  {}: free", view.display),
            Ok(slots) => {
                let phrases: Vec<String> = slots.iter().map(slot_phrase).collect();
                format!("  {}: {}", view.display, phrases.join("; "))
            }
            Err(err) => format!("  {}: cannot read: {err}", view.display),
        })
        .collect();
    lines.join("\n")
}

fn status_json(key: &str, views: &[NodeView]) -> serde_json::Value {
    let verdict = verdict(views);
    let (held, holders, holding) = match &verdict {
        Verdict::Held { identity, nodes } => {
            let holders: Vec<_> = holder_slot(views, identity)
                .map(slot_json)
                .into_iter()
                .collect();
            (json!(true), holders, *nodes)
        }
        Verdict::Free { .. } => (json!(false), Vec::new(), 0),
        Verdict::Unknown => (serde_json::Value::Null, Vec::new(), 0),
    };
    let nodes: Vec<_> = views
        .iter()
        .map(|view| match &view.slots {
            Ok(slots) => json!({
                "redis": view.display,
                "holders": slots.iter().map(slot_json).collect::<Vec<_>>(),
            }),
            Err(err) => json!({ "redis": view.display, "error": err }),
        })
        .collect();
    json!({
        "key": key,
        "held": held,
        "holders": holders,
        "quorum": { "nodes": views.len(), "majority": majority(views.len()), "holding": holding },
        "nodes": nodes,
    })
}

/// Exit 0 when a holder has a majority, 1 when free; 125 when too few nodes answered.
fn status(targets: &[RedisTarget], timeout: Duration, key: &str, json: bool) -> Result<Outcome> {
    let views = read_nodes(targets, timeout, key);
    if json {
        print(&status_json(key, &views).to_string())?;
    } else {
        print(&format!(
            "{}\n{}",
            verdict_line(key, &views),
            node_lines(&views)
        ))?;
    }
    match verdict(&views) {
        Verdict::Held { .. } => Ok(Outcome::Done),
        Verdict::Free { .. } => Ok(Outcome::Free),
        Verdict::Unknown => {
            bail!("cannot tell whether {key} is held: too few Redis nodes answered")
        }
    }
}

/// Every lock any node knows of, with the quorum's verdict on each.
fn list(targets: &[RedisTarget], timeout: Duration, prefix: &str, json: bool) -> Result<Outcome> {
    let mut names = Vec::new();
    let mut unread = 0;
    for (found, target) in on_every_node(targets, timeout, |link| inspect::list_locks(link, prefix))
        .into_iter()
        .zip(targets)
    {
        match found {
            Ok(found) => names.extend(found),
            Err(err) => {
                unread += 1;
                report::warn(format_args!(
                    "cannot list the locks on {}: {err}",
                    target.display
                ));
            }
        }
    }
    if unread >= majority(targets.len()) {
        bail!("cannot list locks: too few Redis nodes answered");
    }
    names.sort();
    names.dedup();
    // One connection per node for every name; a node that fails is not asked again.
    let per_node = on_every_node(targets, timeout, |link| {
        names
            .iter()
            .map(|name| inspect::read_lock(link, name))
            .collect::<Result<Vec<_>>>()
    });
    let mut all = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let views: Vec<NodeView> = per_node
            .iter()
            .zip(targets)
            .map(|(read, target)| NodeView {
                display: target.display.clone(),
                slots: read
                    .as_ref()
                    .map(|locks| locks[index].clone())
                    .map_err(Clone::clone),
            })
            .collect();
        if json {
            all.push(status_json(name, &views));
        } else {
            print(&verdict_line(name, &views))?;
        }
    }
    if json {
        print(&serde_json::Value::Array(all).to_string())?;
    }
    Ok(Outcome::Done)
}

/// Deletes the lock's values on every node (exactly the values read), with `--force`.
fn release(targets: &[RedisTarget], timeout: Duration, key: &str, force: bool) -> Result<Outcome> {
    if let Some(lock) = backend::lock_of_internal_key(key) {
        bail!("{key} is bookkeeping of the lock {lock}, not a lock; release {lock} instead");
    }
    let views = read_nodes(targets, timeout, key);
    let held: Vec<(&RedisTarget, &Slot)> = views
        .iter()
        .zip(targets)
        .filter_map(|(view, target)| Some((target, view.slots.as_ref().ok()?)))
        .flat_map(|(target, slots)| slots.iter().map(move |slot| (target, slot)))
        .collect();
    let unread: Vec<String> = views
        .iter()
        .filter_map(|view| Some(format!("{}: {}", view.display, view.slots.as_ref().err()?)))
        .collect();
    if held.is_empty() && unread.is_empty() {
        print(&format!("{key} is free on every node; nothing to release"))?;
        return Ok(Outcome::Free);
    }
    // Free as `status` says it is: the nodes read are a majority and none holds anything.
    let read = views.len() - unread.len();
    if held.is_empty() && read >= majority(views.len()) {
        for line in &unread {
            report::warn(format_args!("could not read {line}"));
        }
        print(&format!(
            "{key} is free on the {read} of {} nodes that answered; nothing to release",
            views.len()
        ))?;
        return Ok(Outcome::Free);
    }
    if !force {
        if let Verdict::Free { .. } = verdict(&views) {
            // Leftovers of a failed or lost attempt: nobody holds the lock.
            print(&format!(
                "{}; nothing to release (--force deletes those values now)",
                verdict_line(key, &views)
            ))?;
            return Ok(Outcome::Free);
        }
        bail!(
            "{}; releasing it lets another holder in while this one may still run (it would \
             be terminated at its next renewal). Add --force to release it",
            verdict_line(key, &views)
        );
    }
    let mut deleted_any = false;
    for (target, slot) in held {
        if slot.value.is_none() {
            report::error(&anyhow!(
                "{} on {} is a {}, not a lock redlock-run wrote; not deleting another \
                 application's data",
                slot.key,
                target.display,
                slot.kind
            ));
            continue;
        }
        let who = holder::describe(slot.value.as_deref());
        let deleted = Link::new(target, timeout)
            .and_then(|mut link| inspect::force_release(&mut link, key, slot))
            .with_context(|| format!("cannot release {} on {}", slot.key, target.display));
        match deleted {
            Ok(true) => {
                print(&format!(
                    "released {} on {}, held by {who}",
                    slot.key, target.display
                ))?;
                deleted_any = true;
            }
            Ok(false) => print(&format!(
                "{} on {} changed while being released; nothing deleted there",
                slot.key, target.display
            ))?,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(token: &str) -> Result<Vec<Slot>, String> {
        let value = format!("{{\"token\":\"{token}\",\"fence\":1}}");
        Ok(vec![Slot {
            key: "k".into(),
            holder: crate::holder::Holder::parse(&value),
            value: Some(value),
            kind: "string".into(),
            ttl: Some(Duration::from_secs(1)),
        }])
    }

    fn views(slots: Vec<Result<Vec<Slot>, String>>) -> Vec<NodeView> {
        slots
            .into_iter()
            .map(|slots| NodeView {
                display: "redis://n".into(),
                slots,
            })
            .collect()
    }

    #[test]
    fn the_quorum_decides() {
        let down = || Err(String::from("down"));
        let held = verdict(&views(vec![held_by("a"), held_by("a"), Ok(vec![])]));
        assert_eq!(
            held,
            Verdict::Held {
                identity: "a".into(),
                nodes: 2
            }
        );
        let split = verdict(&views(vec![held_by("a"), held_by("b"), Ok(vec![])]));
        assert_eq!(split, Verdict::Free { strays: 2 });
        assert_eq!(
            verdict(&views(vec![held_by("a"), down(), Ok(vec![])])),
            Verdict::Unknown
        );
        assert_eq!(
            verdict(&views(vec![Ok(vec![]), down(), Ok(vec![])])),
            Verdict::Free { strays: 0 }
        );
        assert_eq!(
            verdict(&views(vec![down(), down(), Ok(vec![])])),
            Verdict::Unknown
        );
    }
}
