//! `status`, `list` and `release`: what operators ask of locks, printed on stdout (text or
//! JSON). Reading and deleting go through `backend::inspect`; this module only words it.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::backend;
use crate::backend::inspect::{self, Slot};
use crate::backend::single::Link;
use crate::config::{AdminAction, AdminConfig};
use crate::exit::Outcome;
use crate::holder;
use crate::report;

pub fn run(config: &AdminConfig) -> Outcome {
    match run_checked(config) {
        Ok(outcome) => outcome,
        Err(err) => {
            report::error(&err);
            Outcome::Failed
        }
    }
}

fn run_checked(config: &AdminConfig) -> Result<Outcome> {
    let [target] = config.redis.as_slice() else {
        return crate::quorum_admin::run(config);
    };
    let mut link = Link::new(target, config.redis_timeout)?;
    match &config.action {
        AdminAction::Status { key, json } => status(&mut link, key, *json),
        AdminAction::List { json } => list(&mut link, &config.prefix, *json),
        AdminAction::Release { key, force } => release(&mut link, key, *force),
    }
}

/// Exit 0 when held, 1 when free.
fn status(link: &mut Link, key: &str, json: bool) -> Result<Outcome> {
    let slots = inspect::read_lock(link, key).with_context(|| format!("cannot read {key}"))?;
    if json {
        print(&lock_json(key, &slots).to_string())?;
    } else {
        print(&lock_line(key, &slots))?;
    }
    Ok(if slots.is_empty() {
        Outcome::Free
    } else {
        Outcome::Done
    })
}

fn list(link: &mut Link, prefix: &str, json: bool) -> Result<Outcome> {
    let names = inspect::list_locks(link, prefix).context("cannot list locks")?;
    let mut locks = Vec::with_capacity(names.len());
    for name in names {
        let slots =
            inspect::read_lock(link, &name).with_context(|| format!("cannot read {name}"))?;
        // Gone between the scan and the read: not a lock any more.
        if !slots.is_empty() {
            locks.push((name, slots));
        }
    }
    if json {
        let all: Vec<_> = locks
            .iter()
            .map(|(name, slots)| lock_json(name, slots))
            .collect();
        print(&serde_json::Value::Array(all).to_string())?;
    } else {
        for (name, slots) in &locks {
            print(&lock_line(name, slots))?;
        }
    }
    Ok(Outcome::Done)
}

/// Exit 0 when something was deleted, 1 when the lock was free; refuses without `--force`.
fn release(link: &mut Link, key: &str, force: bool) -> Result<Outcome> {
    if let Some(lock) = backend::lock_of_internal_key(key) {
        bail!(
            "{key} is bookkeeping of the lock {lock} (its fence counter, limit, queue or a \
             slot), not a lock; deleting it could let fences repeat. Release {lock} instead"
        );
    }
    let slots = inspect::read_lock(link, key).with_context(|| format!("cannot read {key}"))?;
    if slots.is_empty() {
        print(&format!("{key} is free; nothing to release"))?;
        return Ok(Outcome::Free);
    }
    if !force {
        bail!(
            "{key} is held by {}; releasing it lets another holder in while this one may \
             still run (it would be terminated at its next renewal). Add --force to release it",
            holders_phrase(&slots)
        );
    }
    let mut deleted_any = false;
    for slot in &slots {
        if slot.value.is_none() {
            report::error(&anyhow::anyhow!(
                "{} is a {}, not a lock redlock-run wrote; not deleting another application's data",
                slot.key,
                slot.kind
            ));
            continue;
        }
        let who = holder::describe(slot.value.as_deref());
        if inspect::force_release(link, key, slot)
            .with_context(|| format!("cannot release {}", slot.key))?
        {
            print(&format!("released {}, held by {who}", slot.key))?;
            deleted_any = true;
        } else {
            print(&format!(
                "{} changed while being released (no longer held by {who}); nothing deleted",
                slot.key
            ))?;
        }
    }
    if deleted_any {
        Ok(Outcome::Done)
    } else {
        bail!("nothing was released")
    }
}

/// `redlock:deploy held by web-3 pid 4242 `./deploy.sh prod` for 3m12s, ttl 24s, fence 118`
fn lock_line(key: &str, slots: &[Slot]) -> String {
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

fn holders_phrase(slots: &[Slot]) -> String {
    let phrases: Vec<String> = slots.iter().map(slot_phrase).collect();
    phrases.join("; ")
}

pub(crate) fn slot_phrase(slot: &Slot) -> String {
    let who = match (&slot.holder, &slot.value) {
        (Some(holder), _) => holder.to_string(),
        (None, Some(_)) => holder::describe(None),
        (None, None) => format!("another application's {} (not a lock)", slot.kind),
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

fn lock_json(key: &str, slots: &[Slot]) -> serde_json::Value {
    let holders: Vec<_> = slots.iter().map(slot_json).collect();
    json!({ "key": key, "held": !slots.is_empty(), "holders": holders })
}

pub(crate) fn slot_json(slot: &Slot) -> serde_json::Value {
    let ttl_ms = slot.ttl.map(|ttl| ttl.as_millis() as u64);
    match &slot.holder {
        Some(holder) => json!({
            "key": slot.key,
            "known": true,
            "token": holder.token,
            "host": holder.host,
            "pid": holder.pid,
            "cmd": holder.cmd,
            "since_ms": holder.since_ms,
            "held_for_ms": holder.held_for().map(|held| held.as_millis() as u64),
            "ttl_ms": ttl_ms,
            "fence": holder.fence,
        }),
        None => json!({
            "key": slot.key,
            "known": false,
            "type": slot.kind,
            "value": slot.value,
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
