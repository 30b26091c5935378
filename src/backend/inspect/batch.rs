//! Reading locks on every node (`Inspector::read`, `read_all`), and many locks of one server
//! in few round trips, for `list`, `metrics` and `serve`:
//! the scripts `status` runs for one lock (`peek.lua`, `counters.lua`; a plain `GET` of a
//! semaphore's `{K}:limit`) sent for [`BATCH`] locks at a time in one pipeline, each reply
//! read as the one-lock read reads it. What a pipeline cannot settle is read again lock by lock the usual way: a server
//! that lacks a script (`NOSCRIPT`, loaded then), a semaphore (its other slots), a shared
//! group (its shares). Not for a
//! cluster, whose keys live on many nodes: its locks are read one by one.

use redis::FromRedisValue;

use super::view::{is_group, read_lock, read_peek, LockView, NodeView, Slot};
use super::Inspector;
use crate::backend::connection::Link;
use crate::backend::counters::{read_counters, NodeCounters};
use crate::backend::layout::{limit_key, Key};
use crate::backend::scripts::{evalsha, CountersReply, Peek, PeekReply};

/// How many locks one pipeline reads: a few hundred KiB of replies at most.
pub const BATCH: usize = 250;

impl Inspector {
    /// The lock at `key` on every node.
    pub fn read(&mut self, key: &Key) -> LockView {
        let mut views = self.read_all(std::slice::from_ref(key));
        views.pop().unwrap_or_else(|| LockView {
            key: key.clone(),
            nodes: Vec::new(),
        })
    }

    /// Each of `keys` on every node. A node that fails is not asked again: it shows that
    /// failure for the rest of the keys.
    pub fn read_all(&mut self, keys: &[Key]) -> Vec<LockView> {
        let per_node = self.on_every_node(|link| {
            if !link.is_cluster() {
                return read_locks(link, keys);
            }
            let mut read = Vec::with_capacity(keys.len());
            for key in keys {
                match read_lock(link, key) {
                    Ok(slots) => read.push(Ok(slots)),
                    Err(err) => {
                        let err = format!("{err:#}");
                        read.resize(keys.len(), Err(err));
                        break;
                    }
                }
            }
            read
        });
        keys.iter()
            .enumerate()
            .map(|(index, key)| LockView {
                key: key.clone(),
                nodes: per_node
                    .iter()
                    .zip(&self.displays)
                    .map(|(read, display)| NodeView {
                        display: display.clone(),
                        slots: read[index].clone(),
                    })
                    .collect(),
            })
            .collect()
    }
}

/// Each of `keys`' held slots on `link` (empty when free), as `view::read_lock` reads
/// them. Once the server has failed, the rest show that failure.
pub(super) fn read_locks(link: &mut Link, keys: &[Key]) -> Vec<Result<Vec<Slot>, String>> {
    let mut read = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(BATCH) {
        let commands = chunk
            .iter()
            .flat_map(|key| {
                let mut limit = redis::cmd("GET");
                limit.arg(limit_key(key));
                [limit, evalsha(&Peek { key: key.clone() })]
            })
            .collect();
        let replies = match link.call(None, |session| session.pipelined(commands)) {
            Ok(replies) => replies,
            Err(err) => {
                read.resize(keys.len(), Err(format!("{err:#}")));
                return read;
            }
        };
        let mut replies = replies.into_iter();
        for key in chunk {
            let limit = declared_limit(replies.next());
            let first = peeked(key, replies.next());
            let slots = match (limit, first) {
                // A mutex, as nearly every lock is: its one slot says it all. (Not a shared
                // group's value: its holders are the shares, read below.)
                (Some(limit), Some(first))
                    if limit <= 1 && slot_limit(first.as_ref()) <= 1 && !is_group_slot(&first) =>
                {
                    Ok(first.into_iter().collect())
                }
                _ => read_lock(link, key).map_err(|err| format!("{err:#}")),
            };
            let failed = slots.is_err();
            read.push(slots);
            if failed {
                let err = read.last().cloned().unwrap_or(Err(String::new()));
                read.resize(keys.len(), err);
                return read;
            }
        }
    }
    read
}

/// A `peek.lua` reply from a pipeline: `Some(slot or none)`, or `None` when it is to be
/// read again on its own (an error reply, such as `NOSCRIPT`).
fn peeked(key: &Key, reply: Option<redis::RedisResult<redis::Value>>) -> Option<Option<Slot>> {
    let reply = PeekReply::from_redis_value(reply?.ok()?).ok()?;
    Some(read_peek(key, reply))
}

/// The limit a semaphore's `{K}:limit` key declares, from `GET`: 1 without one; `None`
/// for a reply to read again the usual way (a key of another type).
fn declared_limit(reply: Option<redis::RedisResult<redis::Value>>) -> Option<u64> {
    match reply?.ok()? {
        redis::Value::Nil => Some(1),
        redis::Value::BulkString(text) => Some(
            std::str::from_utf8(&text)
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .unwrap_or(1),
        ),
        _ => None,
    }
}

/// Whether slot 1 holds a shared group's value (`--shared`), whose shares are the holders.
fn is_group_slot(first: &Option<Slot>) -> bool {
    first
        .as_ref()
        .and_then(|slot| slot.value.as_deref())
        .is_some_and(is_group)
}

/// The limit the holder of slot 1 took the lock with (1 for a mutex or a foreign value).
fn slot_limit(first: Option<&Slot>) -> u64 {
    first
        .and_then(|slot| slot.holder.as_ref()?.limit)
        .unwrap_or(1)
}

/// Each of `keys`' counters on `link`, as `Inspector::counters` reads them one by one.
pub(super) fn read_counters_of(link: &mut Link, keys: &[Key]) -> Vec<Result<NodeCounters, String>> {
    let mut read = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(BATCH) {
        let commands = chunk
            .iter()
            .map(|key| evalsha(&read_counters(key)))
            .collect();
        let replies = match link.call(None, |session| session.pipelined(commands)) {
            Ok(replies) => replies,
            Err(err) => {
                read.resize(keys.len(), Err(format!("{err:#}")));
                return read;
            }
        };
        for (key, reply) in chunk.iter().zip(replies) {
            let parsed = reply
                .ok()
                .and_then(|value| CountersReply::from_redis_value(value).ok());
            let counters = match parsed {
                Some(reply) => Ok(reply),
                None => {
                    let call = read_counters(key);
                    link.call(None, |session| session.run(&call))
                }
            };
            match counters {
                Ok(reply) => read.push(Ok(NodeCounters::read(key, reply))),
                Err(err) => {
                    read.resize(keys.len(), Err(format!("{err:#}")));
                    return read;
                }
            }
        }
    }
    read
}
