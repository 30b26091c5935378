//! The lock's key, checked: PREFIX + KEY, refused when it would share keys with another
//! lock or, on a Redis Cluster, straddle hash slots; `release` refused a lock's bookkeeping;
//! and whether this run was started by a run of the same key.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use anyhow::{bail, Result};

use crate::backend::{
    colocates, lock_of_internal_key, shares_keys_with, Deployment, Key, MAX_KEY_LEN,
};

/// The run's key: PREFIX + KEY, refused when its keys would be another lock's too.
pub(super) fn lock_key(prefix: &OsStr, name: &OsStr) -> Result<Key> {
    let key = full_key(prefix, name)?;
    if let Some(other) = shares_keys_with(&key) {
        bail!(
            "invalid --key: {key} would share its keys (lock, fence counter, queue, \
             semaphore slots or --once records) with the lock {other}, and the two would \
             block each other; choose another name"
        );
    }
    Ok(key)
}

/// The run's key on `redis`: on a Cluster, one whose keys can share its hash slot.
pub(super) fn fits_cluster(key: &Key, redis: &Deployment) -> Result<()> {
    if redis.has_cluster() && !colocates(key) {
        bail!(
            "invalid --key for Redis Cluster: {key} has a '}}' but no hash tag, so its \
             fence, slots and queue cannot share its hash slot; use a name without braces, \
             or with a tag such as {{deploy}}"
        );
    }
    Ok(())
}

/// PREFIX + KEY, after checking the lock name.
pub(super) fn full_key(prefix: &OsStr, name: &OsStr) -> Result<Key> {
    if name.is_empty() {
        bail!("--key must not be empty");
    }
    if name.len() > MAX_KEY_LEN {
        bail!(
            "--key is {} bytes long; the limit is {MAX_KEY_LEN}",
            name.len()
        );
    }
    Ok(Key::new(prefix.as_bytes()).followed_by(name.as_bytes()))
}

/// `release` takes locks, not their bookkeeping: deleting a fence counter could let fences
/// repeat, and a limit, queue or slot key is the lock's to manage.
pub(super) fn refuse_bookkeeping(key: &Key) -> Result<()> {
    if let Some(lock) = lock_of_internal_key(key) {
        bail!(
            "{key} is bookkeeping of the lock {lock} (its fence counter, limit, queue or a \
             slot), not a lock; deleting it could let fences repeat. Release {lock} instead"
        );
    }
    Ok(())
}

/// The `REDLOCK_TOKEN` of the run whose command started this one, if that run holds `key`
/// by name: its `REDLOCK_KEY`, or one line of its `REDLOCK_KEYS` (several keys held). See
/// README, "Environment given to the command".
pub(super) fn outer_token(key: &Key) -> Option<String> {
    let named = |name: &[u8]| name == key.as_bytes();
    let in_key = std::env::var_os("REDLOCK_KEY").is_some_and(|outer| named(outer.as_bytes()));
    let in_keys = std::env::var_os("REDLOCK_KEYS")
        .is_some_and(|outer| outer.as_bytes().split(|&byte| byte == b'\n').any(named));
    if !in_key && !in_keys {
        return None;
    }
    std::env::var("REDLOCK_TOKEN")
        .ok()
        .filter(|token| !token.is_empty())
}
