//! `release.lua`'s contract: [`Release`], its KEYS and ARGV from named fields, and
//! [`ReleaseReply`], its answer read.

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::common::{split_recorded, OnceArgs, RecordArgs, Recorded};
use super::{flag, millis, number, Call, LuaScript, RELEASE};
use crate::backend::key::Key;
use crate::backend::layout::Channels;
use crate::backend::Released;

/// `release.lua`: delete the lock if it is still this holder's, and wake one waiter.
pub(in crate::backend) struct Release {
    /// The slot this holder has.
    pub slot: Key,
    pub queue: Key,
    pub woken: Key,
    /// Where a `--replace` run's takeover stands: deleted with its requester when the
    /// wake-up finds that one gone.
    pub replace_key: Key,
    /// The `--once` IDs by when they were recorded, which bound `{K}:done`.
    pub done_ids_key: Key,
    /// With a semaphore (a limit above 1): its limit key and every slot.
    pub semaphore: Option<(Key, Vec<Key>)>,
    pub identity: String,
    /// Where waiters are woken and releases announced.
    pub channels: Channels,
    /// What is left of --min-hold: the key is kept that long instead (`None`: deleted now).
    pub keep_for: Option<Duration>,
    pub limit: u32,
    /// The message announcing this release; empty to wake no one.
    pub notice: String,
    /// How long a woken waiter has to try.
    pub grace: Duration,
    /// Whether the command succeeded: the work is then recorded as done.
    pub record: bool,
    pub once: OnceArgs,
    pub recording: RecordArgs,
    /// The number of the slot (1 for the lock's own key).
    pub slot_number: u32,
    /// How the hold ended, for the history; `None`: an attempt letting go of what it took,
    /// recorded as `abandoned` where it still holds the key (nothing elsewhere).
    pub ending: Option<crate::backend::HoldEnd>,
    /// A renewal already recorded this holder's loss on this server.
    pub lost_recorded: bool,
    /// This holder's value as it wrote it here; empty when unknown.
    pub value: String,
}

impl Call for Release {
    type Reply = ReleaseReply;
    const SCRIPT: &'static LuaScript = &RELEASE;
    const KEYS: &'static [&'static str] = &[
        "1 slot",
        "2 queue",
        "3 woken",
        "4 done",
        "5 done_per",
        "6 replace",
        "7 history",
        "8 stats",
        "9 done_ids",
        "10 limit",
        "11.. slots",
    ];
    const ARGV: &'static [&'static str] = &[
        "identity",
        "release_channel",
        "keep_ms",
        "limit",
        "notice",
        "wake_prefix",
        "grace_ms",
        "sharded",
        "record",
        "once_id",
        "stamp_ms",
        "remember_ms",
        "history",
        "slot",
        "event",
        "exit_code",
        "success",
        "lost_recorded",
        "value",
    ];

    fn keys(&self) -> Vec<Key> {
        let mut keys = vec![
            self.slot.clone(),
            self.queue.clone(),
            self.woken.clone(),
            self.once.done_key.clone(),
            self.once.done_per_key.clone(),
            self.replace_key.clone(),
            self.recording.history_key.clone(),
            self.recording.stats_key.clone(),
            self.done_ids_key.clone(),
        ];
        if let Some((limit_key, slots)) = &self.semaphore {
            keys.push(limit_key.clone());
            keys.extend(slots.iter().cloned());
        }
        keys
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        // 0 is "no --min-hold": a remainder that rounds down to it is kept for 1 ms.
        let keep_ms = self.keep_for.map_or(0, |keep| keep.as_millis().max(1));
        vec![
            self.identity.clone().into_bytes(),
            self.channels.release.as_bytes().to_vec(),
            number(keep_ms),
            number(self.limit),
            self.notice.clone().into_bytes(),
            self.channels.wake_prefix.as_bytes().to_vec(),
            millis(self.grace),
            self.channels.sharded_arg().to_vec(),
            flag(self.record),
            self.once.id.clone().into_bytes(),
            number(self.once.stamp_ms.unwrap_or(0)),
            millis(self.once.remember),
            number(self.recording.max),
            number(self.slot_number),
            match self.ending {
                None => b"abandoned".to_vec(),
                Some(ending) if ending.replaced => b"replaced".to_vec(),
                Some(_) => b"released".to_vec(),
            },
            self.ending
                .and_then(|ending| ending.exit_code)
                .map_or_else(Vec::new, number),
            flag(self.ending.is_some_and(|ending| ending.success)),
            flag(self.lost_recorded),
            self.value.clone().into_bytes(),
        ]
    }
}

/// What `release.lua` answered.
#[derive(Debug)]
pub(in crate::backend) struct ReleaseReply {
    pub released: Released,
    /// As [`AcquireReply::repaired`](super::AcquireReply::repaired).
    pub repaired: u32,
    /// As [`AcquireReply::foreign`](super::AcquireReply::foreign): nothing was recorded there.
    pub foreign: u32,
    pub recorded: Recorded,
}

impl FromRedisValue for ReleaseReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        let mut items: Vec<Value> = redis::from_redis_value(value)?;
        let (_, recorded) = split_recorded(&mut items, 3, false);
        let foreign: u32 = match items.len() {
            3 => redis::from_redis_value(items.pop().unwrap_or(Value::Nil))?,
            _ => 0,
        };
        let (released, repaired): (i64, u32) = redis::from_redis_value(Value::Array(items))?;
        let released = match released {
            1 => Released::Deleted,
            2 => Released::KeptUntilMinHold,
            3 => Released::DeletedUnannounced,
            _ => Released::NotOurs,
        };
        Ok(ReleaseReply {
            released,
            repaired,
            foreign,
            recorded,
        })
    }
}
