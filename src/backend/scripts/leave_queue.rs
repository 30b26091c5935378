//! `leave_queue.lua`'s contract: [`LeaveQueue`], its KEYS and ARGV from named fields,
//! and [`Left`], its answer read.

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::common::{split_recorded, RecordArgs, Recorded};
use super::{flag, millis, number, Call, LuaScript, LEAVE_QUEUE};
use crate::backend::key::Key;
use crate::backend::layout::Channels;

/// `leave_queue.lua`: a waiter gives up its place, and any wake-up it was owed.
pub(in crate::backend) struct LeaveQueue {
    pub queue: Key,
    pub woken: Key,
    /// Where a `--replace` run's takeover stands: this waiter's ends with its wait.
    pub replace_key: Key,
    pub token: String,
    /// This waiter's identity, the first bytes of a takeover it asked for.
    pub identity: String,
    /// Where waiters are woken.
    pub channels: Channels,
    /// How long a woken waiter has to try.
    pub grace: Duration,
    pub recording: RecordArgs,
    /// The wait ran out: recorded as `timeout`, a skip.
    pub timed_out: bool,
    /// The rest of this waiter's value, after the fence.
    pub metadata: String,
    /// How long it waited (client-measured, the same on every node).
    pub waited: Duration,
    /// The lock's own key, K: whether it is free or a shared group's.
    pub lock: Key,
}

impl Call for LeaveQueue {
    type Reply = Left;
    const SCRIPT: &'static LuaScript = &LEAVE_QUEUE;
    const KEYS: &'static [&'static str] = &[
        "1 queue",
        "2 woken",
        "3 replace",
        "4 history",
        "5 stats",
        "6 lock",
    ];
    const ARGV: &'static [&'static str] = &[
        "token",
        "wake_prefix",
        "grace_ms",
        "sharded",
        "identity",
        "history",
        "timed_out",
        "metadata",
        "waited_ms",
    ];

    fn keys(&self) -> Vec<Key> {
        vec![
            self.queue.clone(),
            self.woken.clone(),
            self.replace_key.clone(),
            self.recording.history_key.clone(),
            self.recording.stats_key.clone(),
            self.lock.clone(),
        ]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        vec![
            self.token.clone().into_bytes(),
            self.channels.wake_prefix.as_bytes().to_vec(),
            millis(self.grace),
            self.channels.sharded_arg().to_vec(),
            self.identity.clone().into_bytes(),
            number(self.recording.max),
            flag(self.timed_out),
            self.metadata.clone().into_bytes(),
            millis(self.waited),
        ]
    }
}

/// What `leave_queue.lua` answered: after a timeout recorded, the consecutive skips now.
#[derive(Debug)]
pub(in crate::backend) struct Left {
    pub skips: Option<u64>,
    pub recorded: Recorded,
}

impl FromRedisValue for Left {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let mut items: Vec<Value> = redis::from_redis_value(value)?;
        let (skips, recorded) = split_recorded(&mut items, 1, true);
        Ok(Left { skips, recorded })
    }
}
