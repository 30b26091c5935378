//! `renew.lua`'s contract: [`Renew`], its KEYS and ARGV from named fields, and
//! [`RenewReply`] with [`Extended`], its answer read.

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::common::{split_recorded, RecordArgs, Recorded};
use super::{flag, millis, number, Call, LuaScript, RENEW};
use crate::backend::key::Key;

/// `renew.lua`: extend the lease if the key is still this holder's.
pub(in crate::backend) struct Renew {
    /// The slot this holder has.
    pub slot: Key,
    /// Where a `--replace` run's takeover stands, when it is looked for.
    pub replace_key: Option<Key>,
    /// With a semaphore (a limit above 1), its limit key.
    pub limit_key: Option<Key>,
    pub identity: String,
    pub ttl: Duration,
    pub limit: u32,
    /// Where a loss found is recorded; `None`: not recorded (already done, or in a Redis
    /// Cluster, where a key named that does not exist fails the script while its slot
    /// migrates: the release records it instead).
    pub recording: Option<RecordArgs>,
    /// The number of the slot (1 for the lock's own key).
    pub slot_number: u32,
    /// This holder's value as it wrote it here.
    pub value: String,
}

impl Call for Renew {
    type Reply = RenewReply;
    const SCRIPT: &'static LuaScript = &RENEW;
    const KEYS: &'static [&'static str] =
        &["1 slot", "2 limit", "3 replace", "4 history", "5 stats"];
    const ARGV: &'static [&'static str] = &[
        "identity", "ttl_ms", "limit", "takeover", "history", "slot", "value",
    ];

    fn keys(&self) -> Vec<Key> {
        [
            Some(self.slot.clone()),
            self.limit_key.clone(),
            self.replace_key.clone(),
        ]
        .into_iter()
        .flatten()
        .chain(
            self.recording
                .iter()
                .flat_map(|recording| [recording.history_key.clone(), recording.stats_key.clone()]),
        )
        .collect()
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        vec![
            self.identity.clone().into_bytes(),
            millis(self.ttl),
            number(self.limit),
            flag(self.replace_key.is_some()),
            number(self.recording.as_ref().map_or(0, |recording| recording.max)),
            number(self.slot_number),
            self.value.clone().into_bytes(),
        ]
    }
}

/// What `renew.lua` answered: the renewal, and what became of the recording of a loss.
#[derive(Debug)]
pub(crate) struct RenewReply {
    pub extended: Extended,
    pub recorded: Recorded,
}

impl FromRedisValue for RenewReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let mut items: Vec<Value> = redis::from_redis_value(value)?;
        let (_, recorded) = split_recorded(&mut items, 2, false);
        Ok(RenewReply {
            extended: redis::from_redis_value(Value::Array(items))?,
            recorded,
        })
    }
}

/// What `renew.lua` answered: whether the lease was extended (else the key is gone or
/// someone else's), and the takeover another run asked for (`--replace`), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Extended(pub bool, pub Option<Vec<u8>>);

impl FromRedisValue for Extended {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let mut items: Vec<Value> = redis::from_redis_value(value)?;
        items.truncate(2);
        let (extended, request): (i64, Vec<u8>) = redis::from_redis_value(Value::Array(items))?;
        Ok(Extended(
            extended == 1,
            Some(request).filter(|request| !request.is_empty()),
        ))
    }
}
