//! `counters.lua`'s contract: [`ReadCounters`], its KEYS and ARGV from named fields,
//! and [`CountersReply`], its answer read.

use redis::{FromRedisValue, ParsingError, Value};

use super::{Call, LuaScript, COUNTERS};
use crate::backend::key::Key;

/// `counters.lua`: a lock's counters, its waiters and the server's clock, in one step.
pub(in crate::backend) struct ReadCounters {
    pub stats: Key,
    pub queue: Key,
    /// The lock's own key (slot 1).
    pub lock: Key,
    /// Slot i > 1 is this followed by i.
    pub slot_prefix: Key,
}

impl Call for ReadCounters {
    type Reply = CountersReply;
    const SCRIPT: &'static LuaScript = &COUNTERS;
    const KEYS: &'static [&'static str] = &["1 stats", "2 queue"];
    const ARGV: &'static [&'static str] = &["lock", "slot_prefix"];

    fn keys(&self) -> Vec<Key> {
        vec![self.stats.clone(), self.queue.clone()]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        vec![
            self.lock.as_bytes().to_vec(),
            self.slot_prefix.as_bytes().to_vec(),
        ]
    }
}

/// What `counters.lua` answered.
#[derive(Debug, Clone)]
pub(crate) struct CountersReply {
    /// The Redis type of `{K}:stats`; `none` when there is none.
    pub kind: String,
    /// Its fields and values, when it is a hash.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub waiters: u64,
    /// The server's clock, ms since the epoch.
    pub now_ms: u64,
    /// The `slot:<i>` fields whose slot no longer holds the value recorded there.
    pub stale: Vec<Vec<u8>>,
}

impl FromRedisValue for CountersReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let (kind, flat, waiters, now_ms, stale): (String, Vec<Vec<u8>>, u64, u64, Vec<Vec<u8>>) =
            redis::from_redis_value(value)?;
        let mut fields = Vec::with_capacity(flat.len() / 2);
        let mut flat = flat.into_iter();
        while let (Some(name), Some(value)) = (flat.next(), flat.next()) {
            fields.push((name, value));
        }
        Ok(CountersReply {
            kind,
            fields,
            waiters,
            now_ms,
            stale,
        })
    }
}
