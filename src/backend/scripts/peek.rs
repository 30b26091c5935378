//! `peek.lua`'s contract: [`Peek`], its one key, and [`PeekReply`], its answer read.

use redis::{FromRedisValue, ParsingError, Value};

use super::{Call, LuaScript, PEEK};
use crate::backend::key::Key;

/// `peek.lua`: a key as `status` and `list` show it, in one step.
pub(in crate::backend) struct Peek {
    pub key: Key,
}

impl Call for Peek {
    type Reply = PeekReply;
    const SCRIPT: &'static LuaScript = &PEEK;
    const KEYS: &'static [&'static str] = &["1 key"];
    const ARGV: &'static [&'static str] = &[];

    fn keys(&self) -> Vec<Key> {
        vec![self.key.clone()]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
}

/// What `peek.lua` answered.
#[derive(Debug, Clone)]
pub(crate) struct PeekReply {
    /// The key's Redis type; `none` when there is no such key.
    pub kind: String,
    pub pttl: i64,
    /// The value of a string; empty for another type.
    pub value: Vec<u8>,
}

impl FromRedisValue for PeekReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let (kind, pttl, value) = redis::from_redis_value(value)?;
        Ok(PeekReply { kind, pttl, value })
    }
}
