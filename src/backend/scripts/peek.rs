//! `peek.lua`'s contract: [`Peek`], its one key, and [`PeekReply`], its answer read; and
//! `peek_shares.lua`'s, [`PeekShares`] and [`SharesReply`] (`--shared`).

use redis::{FromRedisValue, ParsingError, Value};

use super::{Call, LuaScript, PEEK, PEEK_SHARES};
use crate::backend::key::Key;
#[cfg(doc)]
use crate::backend::layout::MAX_VALUE_LEN;

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
    /// The value of a string, at most its first [`MAX_VALUE_LEN`] bytes; empty for
    /// another type.
    pub value: Vec<u8>,
    /// The string's whole length (0 for another type).
    pub length: u64,
}

impl FromRedisValue for PeekReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let (kind, pttl, value, length) = redis::from_redis_value(value)?;
        Ok(PeekReply {
            kind,
            pttl,
            value,
            length,
        })
    }
}

/// `peek_shares.lua`: a shared group's live shares, as `status` and `list` show them.
pub(in crate::backend) struct PeekShares {
    pub shares: Key,
    pub expiries: Key,
}

impl Call for PeekShares {
    type Reply = SharesReply;
    const SCRIPT: &'static LuaScript = &PEEK_SHARES;
    const KEYS: &'static [&'static str] = &["1 shares", "2 expiries"];
    const ARGV: &'static [&'static str] = &[];

    fn keys(&self) -> Vec<Key> {
        vec![self.shares.clone(), self.expiries.clone()]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
}

/// What `peek_shares.lua` answered: each live share's value (empty when longer than
/// [`MAX_VALUE_LEN`]), the time left of its lease in ms and the value's length, the soonest
/// end first; `None` when the group's keys are of a type
/// redlock-run never writes there (another application's keys).
#[derive(Debug, Clone)]
pub(crate) struct SharesReply(pub Option<Vec<(Vec<u8>, i64, u64)>>);

impl FromRedisValue for SharesReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let items: Vec<Value> = redis::from_redis_value(value)?;
        let mut shares = Vec::with_capacity(items.len() / 2);
        let mut items = items.into_iter();
        let ok: i64 = match items.next() {
            Some(ok) => redis::from_redis_value(ok)?,
            None => 0,
        };
        if ok != 1 {
            return Ok(SharesReply(None));
        }
        while let (Some(value), Some(left), Some(length)) =
            (items.next(), items.next(), items.next())
        {
            shares.push((
                redis::from_redis_value(value)?,
                redis::from_redis_value(left)?,
                redis::from_redis_value(length)?,
            ));
        }
        Ok(SharesReply(Some(shares)))
    }
}
