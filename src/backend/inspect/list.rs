//! `list`: the names of the locks under a prefix, found by SCAN on every master of every
//! node. Not what each lock holds (`view`).

use anyhow::Result;

use super::Inspector;
use crate::backend::connection::Link;
use crate::backend::layout::{lock_of_internal_key, Key};

/// How many keys one SCAN step asks for.
const SCAN_BATCH: usize = 500;

impl Inspector {
    /// The names of the locks under `prefix` that any node knows of, sorted, each once,
    /// with the nodes that could not be listed and why. `with_counters`: also the locks
    /// that have only their counters (`{K}:stats`) now, free and with nobody waiting.
    pub fn list(&mut self, prefix: &Key, with_counters: bool) -> (Vec<Key>, Vec<(String, String)>) {
        let listed = self.on_every_node(|link| list_locks(link, prefix, with_counters));
        let mut names = Vec::new();
        let mut failed = Vec::new();
        for (found, display) in listed.into_iter().zip(&self.displays) {
            match found {
                Ok(found) => names.extend(found),
                Err(err) => failed.push((display.clone(), format!("{err:#}"))),
            }
        }
        names.sort();
        names.dedup();
        (names, failed)
    }
}

/// The names (full keys) of every lock under `prefix`, each once: keys that start with it,
/// less the locks' own bookkeeping keys (fence, limit, queue, slots), which stand for their
/// lock instead.
fn list_locks(link: &mut Link, prefix: &Key, with_counters: bool) -> Result<Vec<Key>> {
    let escaped = glob_escape(prefix.as_bytes());
    let mut names = Vec::new();
    // Untagged locks keep their bookkeeping under `{K}…`, outside the prefix: a semaphore
    // whose first slot is free is found through its limit key, a lock that has counters
    // through them.
    let mut patterns = vec![
        [escaped.as_slice(), b"*"].concat(),
        [b"{", escaped.as_slice(), b"*}:limit"].concat(),
    ];
    if with_counters {
        patterns.push([b"{", escaped.as_slice(), b"*}:stats"].concat());
    }
    for pattern in patterns {
        for name in scan(link, &pattern)? {
            names.push(lock_of_internal_key(&name).unwrap_or(name));
        }
    }
    names.retain(|name| name.starts_with(prefix.as_bytes()));
    names.sort();
    names.dedup();
    Ok(names)
}

/// The keys that match `pattern` on every server that holds keys: in a cluster, each
/// master has its own share, and SCAN on one sees only that.
fn scan(link: &mut Link, pattern: &[u8]) -> Result<Vec<Key>> {
    let mut found = Vec::new();
    for master in link.masters()? {
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) =
                link.call_on(Some(&master), None, |session| {
                    let mut scan = redis::cmd("SCAN");
                    scan.arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(SCAN_BATCH);
                    session.query(&scan)
                })?;
            found.extend(keys.into_iter().map(Key::new));
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(found)
}

/// `text` with the glob characters SCAN MATCH knows escaped.
pub(super) fn glob_escape(text: &[u8]) -> Vec<u8> {
    let mut escaped = Vec::with_capacity(text.len());
    for &byte in text {
        if matches!(byte, b'*' | b'?' | b'[' | b']' | b'\\') {
            escaped.push(b'\\');
        }
        escaped.push(byte);
    }
    escaped
}
