//! `force_release.lua`'s contract: [`ForceRelease`], its KEYS and ARGV from named
//! fields, and [`ForceReply`] with [`Forced`], its answer read.

use redis::{FromRedisValue, ParsingError, Value};

use super::common::{split_recorded, RecordArgs, Recorded};
use super::{number, Call, LuaScript, FORCE_RELEASE};
use crate::backend::key::Key;
use crate::backend::layout::Channels;

/// `force_release.lua`: `release --force`, of exactly the value just read.
pub(in crate::backend) struct ForceRelease {
    /// The lock key, or one of its slots.
    pub slot: Key,
    pub queue: Key,
    pub woken: Key,
    /// The value read a moment ago.
    pub value: Vec<u8>,
    /// Where waiters are woken and releases announced.
    pub channels: Channels,
    /// Where the `forced` event goes (only where the lock's runs record already).
    pub recording: RecordArgs,
    /// The number of the slot (1 for the lock's own key).
    pub slot_number: u32,
    /// The forcing process's metadata, a JSON object.
    pub by: String,
}

impl Call for ForceRelease {
    type Reply = ForceReply;
    const SCRIPT: &'static LuaScript = &FORCE_RELEASE;
    const KEYS: &'static [&'static str] = &["1 slot", "2 queue", "3 woken", "4 history", "5 stats"];
    const ARGV: &'static [&'static str] = &[
        "value",
        "release_channel",
        "wake_prefix",
        "sharded",
        "history",
        "slot",
        "by",
    ];

    fn keys(&self) -> Vec<Key> {
        vec![
            self.slot.clone(),
            self.queue.clone(),
            self.woken.clone(),
            self.recording.history_key.clone(),
            self.recording.stats_key.clone(),
        ]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        vec![
            self.value.clone(),
            self.channels.release.as_bytes().to_vec(),
            self.channels.wake_prefix.as_bytes().to_vec(),
            self.channels.sharded_arg().to_vec(),
            number(self.recording.max),
            number(self.slot_number),
            self.by.clone().into_bytes(),
        ]
    }
}

/// What `force_release.lua` answered.
#[derive(Debug)]
pub(in crate::backend) struct ForceReply {
    pub forced: Forced,
    pub recorded: Recorded,
}

impl FromRedisValue for ForceReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let mut items: Vec<Value> = match value {
            Value::Array(items) => items,
            other => vec![other],
        };
        let (_, recorded) = split_recorded(&mut items, 1, false);
        let forced = redis::from_redis_value(items.into_iter().next().unwrap_or(Value::Nil))?;
        Ok(ForceReply { forced, recorded })
    }
}

/// How a forced release went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forced {
    /// Deleted, and the waiters told.
    Deleted,
    /// Deleted, but the server refused to tell the waiters (the user may not publish).
    DeletedUnannounced,
    /// It changed or vanished since it was read: nothing deleted.
    Changed,
}

impl FromRedisValue for Forced {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        Ok(match redis::from_redis_value::<i64>(value)? {
            1 => Forced::Deleted,
            2 => Forced::DeletedUnannounced,
            _ => Forced::Changed,
        })
    }
}
