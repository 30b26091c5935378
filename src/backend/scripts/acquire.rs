//! `acquire.lua`'s contract: [`Acquire`], its KEYS and ARGV from named fields, and
//! [`AcquireReply`], its answer read. What several scripts share is in `common.rs`.

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::common::{split_recorded, OnceArgs, RecordArgs, Recorded};
use super::{flag, millis, number, Call, LuaScript, ACQUIRE};
use crate::backend::key::Key;
use crate::backend::layout::Channels;

/// `acquire.lua`: take one of the lock's slots, or learn who has them and queue.
pub(in crate::backend) struct Acquire {
    /// Every slot of the lock, slot 1 (the lock's own key) first.
    pub slots: Vec<Key>,
    pub limit_key: Key,
    pub fence_key: Key,
    pub queue: Key,
    pub woken: Key,
    /// Where a `--replace` run's takeover stands.
    pub replace_key: Key,
    /// The queued waiters' values (`{K}:queue:who`).
    pub waiting_key: Key,
    /// The value's first bytes, which identify this holder.
    pub identity: String,
    /// The rest of the value, after the fence.
    pub metadata: String,
    pub ttl: Duration,
    pub limit: u32,
    pub fair: bool,
    pub token: String,
    /// Where waiters are woken and releases announced.
    pub channels: Channels,
    /// Whether this waiter listens for its own wake-up, and so may join the queue.
    pub listening: bool,
    /// When this waiter joined, the same on every Redlock node; `None`: now, by the server.
    pub arrival_ms: Option<u64>,
    /// Whether to return the server's `run_id`.
    pub want_run_id: bool,
    /// The newest `--supersede` waiter's key.
    pub supersede_key: Key,
    /// `--supersede`.
    pub supersede: bool,
    /// Whether an earlier attempt of this waiter was answered by this server.
    pub arrived: bool,
    /// The --once and --once-per records, and what this run looks for in them.
    pub once: OnceArgs,
    /// `--replace`: ask the holder to stop, and be served next.
    pub replace: bool,
    /// Where the lock's history and counters go.
    pub recording: RecordArgs,
    /// How long this run has waited so far (client-measured, the same on every node).
    pub waited: Duration,
    /// Whether a busy answer is this run's last (it does not wait): recorded as `busy`.
    pub final_try: bool,
}

impl Call for Acquire {
    type Reply = AcquireReply;
    const SCRIPT: &'static LuaScript = &ACQUIRE;
    const KEYS: &'static [&'static str] = &[
        "1..n slots",
        "n+1 limit",
        "n+2 fence",
        "n+3 queue",
        "n+4 woken",
        "n+5 supersede",
        "n+6 done",
        "n+7 done_per",
        "n+8 replace",
        "n+9 waiting",
        "n+10 history",
        "n+11 stats",
    ];
    const ARGV: &'static [&'static str] = &[
        "identity",
        "metadata",
        "ttl_ms",
        "limit",
        "fair",
        "token",
        "wake_prefix",
        "listening",
        "arrival_ms",
        "sharded",
        "want_run_id",
        "supersede",
        "arrived",
        "once_id",
        "once_per_ms",
        "stamp_ms",
        "remember_ms",
        "replace",
        "history",
        "waited_ms",
        "final",
    ];

    fn keys(&self) -> Vec<Key> {
        let mut keys = self.slots.clone();
        keys.extend([
            self.limit_key.clone(),
            self.fence_key.clone(),
            self.queue.clone(),
            self.woken.clone(),
            self.supersede_key.clone(),
            self.once.done_key.clone(),
            self.once.done_per_key.clone(),
            self.replace_key.clone(),
            self.waiting_key.clone(),
            self.recording.history_key.clone(),
            self.recording.stats_key.clone(),
        ]);
        keys
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        vec![
            self.identity.clone().into_bytes(),
            self.metadata.clone().into_bytes(),
            millis(self.ttl),
            number(self.limit),
            flag(self.fair),
            self.token.clone().into_bytes(),
            self.channels.wake_prefix.as_bytes().to_vec(),
            flag(self.listening),
            number(self.arrival_ms.unwrap_or(0)),
            self.channels.sharded_arg().to_vec(),
            flag(self.want_run_id),
            flag(self.supersede),
            flag(self.arrived),
            self.once.id.clone().into_bytes(),
            millis(self.once.per),
            number(self.once.stamp_ms.unwrap_or(0)),
            millis(self.once.remember),
            flag(self.replace),
            number(self.recording.max),
            millis(self.waited),
            flag(self.final_try),
        ]
    }
}

/// What `acquire.lua` answered.
#[derive(Debug)]
pub(crate) struct AcquireReply {
    pub outcome: Acquisition,
    /// How many entries of the woken waiters' record were not wake-up times and were taken
    /// out (see `woken_since` in `prelude.lua`).
    pub repaired: u32,
    /// Which `--once` record keys hold another type (1: `{K}:done`, 2: `{K}:done:per`,
    /// added): read as no record.
    pub foreign: u32,
    /// The server's `run_id` when asked for and allowed; empty otherwise.
    pub run_id: String,
    /// With --once-per: this run's arrival by the server's clock.
    pub stamp_ms: Option<u64>,
    /// After a skip recorded (a final busy answer, superseded; not work already done): the
    /// consecutive skips now (`{K}:stats` field `skips`).
    pub skips: Option<u64>,
    /// What became of the recording.
    pub recorded: Recorded,
}

/// The first four elements of `acquire.lua`'s reply.
#[derive(Debug)]
pub(crate) enum Acquisition {
    /// This holder has slot `slot`, with fence `fence` (`None`: the counter holds something
    /// that is not a number redlock-run can read).
    Acquired { slot: u32, fence: Option<u64> },
    /// Every slot is taken: the soonest one may free up in `holder_ttl` (`None`: none will
    /// by itself); `holder` is one holder's value; `ahead` the live waiters before this one
    /// (with --fair).
    Busy {
        holder_ttl: Option<Duration>,
        holder: Option<Vec<u8>>,
        ahead: u32,
    },
    /// The key is used with another limit: `other`, or 0 for a value redlock-run did not write.
    OtherLimit { other: i64 },
    /// A slot is free, but the fence counter holds `counter`, from which the fence would be
    /// 10^18 or more: not counted to by any run, and not handed out. Nothing was taken.
    FenceTooLarge { counter: String },
    /// A newer `--supersede` waiter arrived; `newer` is its value (identity and metadata).
    /// This waiter has left the queue.
    Superseded { newer: Option<Vec<u8>> },
    /// The work is already done (--once, --once-per): `record` says when and by whom.
    Done { record: Vec<u8> },
}

impl FromRedisValue for AcquireReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        // The seventh element, the --once-per stamp, and the eighth, the foreign record
        // keys, are read when there (scripts of this version always send them).
        let mut items: Vec<Value> = redis::from_redis_value(value)?;
        let (skips, recorded) = split_recorded(&mut items, 8, true);
        let foreign: u32 = match items.len() {
            8 => redis::from_redis_value(items.pop().unwrap_or(Value::Nil))?,
            _ => 0,
        };
        let stamp: String = match items.len() {
            7 => redis::from_redis_value(items.pop().unwrap_or(Value::Nil))?,
            _ => String::new(),
        };
        let (status, number, third, ahead, repaired, run_id): (i64, i64, Value, u32, u32, String) =
            redis::from_redis_value(Value::Array(items))?;
        let outcome = match status {
            1 => Acquisition::Acquired {
                slot: u32::try_from(number)
                    .map_err(|_| ParsingError::from(format!("no slot numbered {number}")))?,
                fence: redis::from_redis_value(third).ok(),
            },
            0 => Acquisition::Busy {
                holder_ttl: u64::try_from(number).ok().map(Duration::from_millis),
                holder: redis::from_redis_value(third)
                    .ok()
                    .filter(|value: &Vec<u8>| !value.is_empty()),
                ahead,
            },
            2 => Acquisition::Superseded {
                newer: redis::from_redis_value(third)
                    .ok()
                    .filter(|value: &Vec<u8>| !value.is_empty()),
            },
            3 => Acquisition::Done {
                record: redis::from_redis_value(third)?,
            },
            4 => Acquisition::FenceTooLarge {
                counter: redis::from_redis_value(third)?,
            },
            _ => Acquisition::OtherLimit { other: number },
        };
        Ok(AcquireReply {
            outcome,
            repaired,
            foreign,
            run_id,
            stamp_ms: stamp.parse().ok().filter(|&stamp: &u64| stamp > 0),
            skips,
            recorded,
        })
    }
}
