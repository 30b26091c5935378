//! `release`: what to do with a lock from what the nodes said ([`ReleasePlan`]), and the
//! deletions a forced release and a withdrawn takeover (`--replace`) make. Not how a lock
//! is read (`view`).

use anyhow::Result;

use super::view::peek;
use super::{Inspector, LockView, Slot, Verdict};
use crate::backend::connection::Link;
use crate::backend::layout::{
    identity_in, process_metadata, queue_keys, record_keys, replace_key, shared_keys, slot_number,
    Channels, Holder, Key, Recording,
};
use crate::backend::protocol::warn_recorded;
use crate::backend::scripts::{ForceRelease, OnceArgs, RecordArgs, ReleaseShared};
use crate::backend::Released;

/// How a forced release went (the force_release script's reply).
pub use crate::backend::scripts::Forced;

/// What `release` does with a lock, decided from what the nodes said (see
/// [`LockView::release_plan`]); the wording is `admin`'s.
#[derive(Debug)]
pub enum ReleasePlan<'a> {
    /// Every node was read and none has anything: nothing to release.
    Free,
    /// None of the nodes read has anything, and they are a majority (`read` of them): free,
    /// as `status` says; the others could not be read.
    FreeOnMajority { read: usize },
    /// Without --force: only leftovers that no holder has a majority of (a failed or lost
    /// attempt, expiring by their TTL); nothing is deleted.
    Leftovers,
    /// Without --force: someone holds it (or too few nodes answered to tell): refused.
    /// `held`: every slot found, with its node.
    Refuse { held: Vec<(usize, &'a Slot)> },
    /// With --force: each slot found, with its node, is deleted if it still holds the value
    /// read; the nodes not read keep theirs until their TTL.
    Delete { held: Vec<(usize, &'a Slot)> },
}

impl LockView {
    /// What `release` (`force`: `release --force`) is to do with this lock. Once every
    /// node said nothing is held, there is nothing to do, with or without --force.
    pub fn release_plan(&self, force: bool) -> ReleasePlan<'_> {
        let held: Vec<(usize, &Slot)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(node, view)| Some((node, view.slots.as_ref().ok()?)))
            .flat_map(|(node, slots)| slots.iter().map(move |slot| (node, slot)))
            .collect();
        let unread = self.unread().count();
        if held.is_empty() && unread == 0 {
            return ReleasePlan::Free;
        }
        // Free as `status` says it is: the nodes read are a majority and none holds anything.
        let read = self.nodes.len() - unread;
        if held.is_empty() && read >= self.majority() {
            return ReleasePlan::FreeOnMajority { read };
        }
        if force {
            return ReleasePlan::Delete { held };
        }
        match self.verdict() {
            Verdict::Free { .. } => ReleasePlan::Leftovers,
            _ => ReleasePlan::Refuse { held },
        }
    }
}

impl Inspector {
    /// Deletes `slot` of the lock `key` on node `node` if it still holds the value read, and
    /// wakes the lock's waiters.
    pub fn force_release(&mut self, node: usize, key: &Key, slot: &Slot) -> Result<Forced> {
        force_release(&mut self.links[node], key, slot)
    }

    /// The takeover (`--replace`) standing on each node for the lock at `key`: the value of
    /// the run that asked for it; `None` where there is none or the node could not be read.
    pub fn takeover(&mut self, key: &Key) -> Vec<Option<Vec<u8>>> {
        let request = replace_key(key);
        self.on_every_node(|link| {
            peek(link, &request)
                .ok()
                .flatten()
                .and_then(|slot| slot.value)
        })
    }

    /// Deletes the takeover (`--replace`) standing for the lock at `key`, on every node:
    /// how many nodes had one, and the errors of the nodes that could not be reached.
    pub fn withdraw_takeover(&mut self, key: &Key) -> (usize, Vec<(String, String)>) {
        let request = replace_key(key);
        let results = self.on_every_node(|link| {
            link.call(None, |session| {
                session.query::<u64>(redis::cmd("DEL").arg(&request))
            })
        });
        let mut deleted = 0;
        let mut failed = Vec::new();
        for (node, result) in results.into_iter().enumerate() {
            match result {
                Ok(count) => deleted += usize::from(count > 0),
                Err(err) => failed.push((self.displays[node].clone(), format!("{err:#}"))),
            }
        }
        (deleted, failed)
    }
}

/// Deletes `slot` if it still holds the value read, and wakes the lock's waiters.
fn force_release(link: &mut Link, lock_key: &Key, slot: &Slot) -> Result<Forced> {
    let Some(value) = &slot.value else {
        return Ok(Forced::Changed);
    };
    let [queue, woken] = queue_keys(lock_key);
    let [history_key, stats_key] = record_keys(lock_key);
    if slot.shared {
        let records = [history_key, stats_key];
        return force_release_share(link, lock_key, value, [queue, woken], records);
    }
    let force = ForceRelease {
        slot: slot.key.clone(),
        queue,
        woken,
        value: value.clone(),
        channels: Channels::of(lock_key, link.is_cluster()),
        recording: RecordArgs {
            history_key,
            stats_key,
            max: Recording::DEFAULT_HISTORY,
        },
        slot_number: slot_number(lock_key, &slot.key),
        by: process_metadata(),
    };
    let server = link.display().to_string();
    link.call(None, |session| {
        let reply = session.run(&force)?;
        warn_recorded(&reply.recorded, lock_key, &server);
        Ok(reply.forced)
    })
}

/// Takes out the share (`--shared`) whose value is `value`, as its own release would: the
/// last one's deletes the group and wakes the queue's head. (Not recorded in the history.)
fn force_release_share(
    link: &mut Link,
    lock_key: &Key,
    value: &[u8],
    [queue, woken]: [Key; 2],
    [history_key, stats_key]: [Key; 2],
) -> Result<Forced> {
    let Some(token) = Holder::parse(value).and_then(|holder| holder.token) else {
        return Ok(Forced::Changed);
    };
    let identity = String::from_utf8_lossy(identity_in(value)).into_owned();
    let release = ReleaseShared {
        lock: lock_key.clone(),
        shared_keys: shared_keys(lock_key),
        queue,
        woken,
        replace_key: replace_key(lock_key),
        notice: format!("{identity}#forced"),
        identity,
        token,
        channels: Channels::of(lock_key, link.is_cluster()),
        keep_for: None,
        grace: std::time::Duration::from_secs(30),
        recording: RecordArgs {
            history_key,
            stats_key,
            max: Recording::DEFAULT_HISTORY,
        },
        event: "forced",
        exit_code: None,
        value: String::new(),
        once: OnceArgs::default(),
        record: false,
    };
    let released = link.call(None, |session| Ok(session.run(&release)?.released))?;
    Ok(match released {
        Released::Deleted => Forced::Deleted,
        Released::DeletedUnannounced => Forced::DeletedUnannounced,
        Released::KeptUntilMinHold | Released::NotOurs => Forced::Changed,
    })
}
