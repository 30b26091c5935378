//! `dry_run.lua`'s contract: [`DryRun`], its KEYS and ARGV from named fields, and
//! [`DryRunReply`], its answer read.

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::common::OnceArgs;
use super::{flag, millis, number, Call, LuaScript, DRY_RUN};
use crate::backend::key::Key;
use crate::backend::layout::Channels;

/// `dry_run.lua`: whether the user's ACL allows what a real run would send, and the
/// `--once` record it would find; it writes nothing.
pub(in crate::backend) struct DryRun {
    /// The lock's own key.
    pub slot: Key,
    pub limit_key: Key,
    pub fence_key: Key,
    pub queue: Key,
    pub woken: Key,
    pub supersede_key: Key,
    pub replace_key: Key,
    /// A token such as a run would have.
    pub token: String,
    pub channels: Channels,
    pub limit: u32,
    pub ttl: Duration,
    /// The records and what a run would look for in them (`stamp_ms` unused: now).
    pub once: OnceArgs,
    pub supersede: bool,
    pub replace: bool,
}

impl Call for DryRun {
    type Reply = DryRunReply;
    const SCRIPT: &'static LuaScript = &DRY_RUN;
    const KEYS: &'static [&'static str] = &[
        "1 slot",
        "2 limit",
        "3 fence",
        "4 queue",
        "5 woken",
        "6 supersede",
        "7 done",
        "8 done_per",
        "9 replace",
    ];
    const ARGV: &'static [&'static str] = &[
        "token",
        "wake_prefix",
        "sharded",
        "limit",
        "ttl_ms",
        "once_id",
        "once_per_ms",
        "remember_ms",
        "supersede",
        "replace",
    ];

    fn keys(&self) -> Vec<Key> {
        vec![
            self.slot.clone(),
            self.limit_key.clone(),
            self.fence_key.clone(),
            self.queue.clone(),
            self.woken.clone(),
            self.supersede_key.clone(),
            self.once.done_key.clone(),
            self.once.done_per_key.clone(),
            self.replace_key.clone(),
        ]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        vec![
            self.token.clone().into_bytes(),
            self.channels.wake_prefix.as_bytes().to_vec(),
            self.channels.sharded_arg().to_vec(),
            number(self.limit),
            millis(self.ttl),
            self.once.id.clone().into_bytes(),
            millis(self.once.per),
            millis(self.once.remember),
            flag(self.supersede),
            flag(self.replace),
        ]
    }
}

/// What `dry_run.lua` answered (a refused command is an error, naming it).
#[derive(Debug, Clone)]
pub(crate) struct DryRunReply {
    /// Whether the server could judge the ACL without running anything (Redis 7, Valkey).
    pub checked: bool,
    /// The record of the work already done (`--once`, `--once-per`): `<when> <value>`.
    pub done: Option<Vec<u8>>,
    /// The other `--limit` the lock is in use with, which refuses a real run (0: not a
    /// number, a value redlock-run did not write).
    pub other_limit: Option<u64>,
}

impl FromRedisValue for DryRunReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let (checked, done, other): (i64, Vec<u8>, i64) = redis::from_redis_value(value)?;
        Ok(DryRunReply {
            checked: checked == 1,
            done: Some(done).filter(|done| !done.is_empty()),
            other_limit: u64::try_from(other).ok(),
        })
    }
}
