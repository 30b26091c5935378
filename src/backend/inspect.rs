//! Reading locks for people (`status`, `list`) and removing a stuck one (`release
//! --force`). Reads are single scripts, so what is shown is one consistent moment; a forced
//! release deletes only the exact value it just read.

use std::time::Duration;

use anyhow::Result;

use super::single::{Link, FORCE_RELEASE, PEEK};
use super::{limit_key, lock_of_internal_key, release_channel, slot_key};
use crate::config::MAX_LIMIT;
use crate::holder::Holder;

/// How many keys one SCAN step asks for.
const SCAN_BATCH: usize = 500;

/// One held slot of a lock, as Redis has it now.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The Redis key of this slot.
    pub key: String,
    /// The value when the key is a string; `None` for another type (another
    /// application's hash, list, …).
    pub value: Option<String>,
    /// The key's Redis type (`string`, `hash`, …).
    pub kind: String,
    /// Time left before it expires; `None` when it never does.
    pub ttl: Option<Duration>,
    /// Who holds it, when the value is one redlock-run wrote.
    pub holder: Option<Holder>,
}

/// The held slots of the lock at `key` (empty when free): slot 1, and with a semaphore
/// (its `{K}:limit` key, or a holder's value, says how many slots) the others.
pub fn read_lock(link: &mut Link, key: &str) -> Result<Vec<Slot>> {
    let declared = peek(link, &limit_key(key))?
        .and_then(|limit| limit.value?.trim().parse::<u32>().ok())
        .unwrap_or(1);
    let mut limit = declared.clamp(1, MAX_LIMIT);
    let mut held = Vec::new();
    let mut slot = 1;
    while slot <= limit {
        if let Some(found) = peek(link, &slot_key(key, slot))? {
            let in_value = found.holder.as_ref().and_then(|h| h.limit).unwrap_or(1);
            limit = limit.max(in_value.min(u64::from(MAX_LIMIT)) as u32);
            held.push(found);
        }
        slot += 1;
    }
    Ok(held)
}

/// The names (full keys) of every lock under `prefix`, each once: keys that start with it,
/// less the locks' own bookkeeping keys (fence, limit, queue, slots), which stand for their
/// lock instead.
pub fn list_locks(link: &mut Link, prefix: &str) -> Result<Vec<String>> {
    let escaped = glob_escape(prefix);
    let mut names = Vec::new();
    // Untagged locks keep their bookkeeping under `{K}…`, outside the prefix: a semaphore
    // whose first slot is free is found through its limit key.
    for pattern in [format!("{escaped}*"), format!("{{{escaped}*}}:limit")] {
        for name in scan(link, &pattern)? {
            names.push(lock_of_internal_key(&name).unwrap_or(name));
        }
    }
    names.retain(|name| name.starts_with(prefix));
    names.sort();
    names.dedup();
    Ok(names)
}

/// Deletes `slot` if it still holds the value read, and wakes the lock's waiters. Returns
/// whether it was deleted (false: it changed or vanished in the meantime).
pub fn force_release(link: &mut Link, lock_key: &str, slot: &Slot) -> Result<bool> {
    let Some(value) = &slot.value else {
        return Ok(false);
    };
    let channel = release_channel(lock_key);
    let deleted: i64 = link.call(None, |session| {
        session.eval(&FORCE_RELEASE, &[&slot.key], &[value, &channel])
    })?;
    Ok(deleted == 1)
}

fn peek(link: &mut Link, key: &str) -> Result<Option<Slot>> {
    let (kind, pttl, value): (String, i64, String) =
        link.call(None, |session| session.eval(&PEEK, &[key], &[]))?;
    if kind == "none" {
        return Ok(None);
    }
    let holder = Holder::parse(&value);
    Ok(Some(Slot {
        key: key.to_string(),
        value: (kind == "string").then_some(value),
        kind,
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        holder,
    }))
}

/// The keys that match `pattern` on every server that holds keys: in a cluster, each
/// master has its own share, and SCAN on one sees only that.
fn scan(link: &mut Link, pattern: &str) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for master in link.masters()? {
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) =
                link.call_on(Some(&master), None, |session| {
                    let mut scan = redis::cmd("SCAN");
                    scan.arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(SCAN_BATCH);
                    session.query(&scan)
                })?;
            found.extend(keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(found)
}

/// `text` with the glob characters SCAN MATCH knows escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for ch in text.chars() {
        if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(ch);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert_eq!(glob_escape("redlock:"), "redlock:");
    }
}
