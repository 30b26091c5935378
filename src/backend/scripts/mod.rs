//! The Lua scripts, all in one place: each is a `.lua` file beside this one, pulled in with
//! `include_str!` after the shared `prelude.lua`, and run by SHA (`connection::Session::eval`). A server that lacks one (a
//! fresh, restarted or flushed Redis) gets every script loaded at once, so that a holder's
//! first renewal never needs a round trip of its own to load its script on a short lease.
//!
//! Each script's contract is a type here: a [`Call`] names its KEYS and ARGV in the order
//! of the script's header (a test reads the headers and holds the two in step), and builds
//! them from named fields; its reply is decoded into a type of its own, never matched by
//! position at the call site. A new argument is a new field, not a slot number.

use std::time::Duration;

use anyhow::Result;
use redis::{FromRedisValue, ParsingError, Value};

use super::key::Key;
use super::layout::Channels;
use super::Released;

/// A script and the SHA-1 that Redis knows it by, both fixed at build time: hashing the
/// sources when the program starts cost every run about 0.1 ms before its first request.
#[derive(Debug)]
pub(super) struct LuaScript {
    /// `scripts/prelude.lua` (`call`, which names a command the ACL refuses, and `read`),
    /// then the script's own file.
    pub source: &'static str,
    pub sha1: &'static str,
}

// One `LuaScript` per `scripts/*.lua` file but the prelude, named after it (`acquire.lua`
// is `ACQUIRE`), and `ALL`: written by build.rs, which computes the digests.
include!(concat!(env!("OUT_DIR"), "/scripts.rs"));

/// One script's contract: its KEYS and ARGV, named as its header names them, built from
/// named fields, and the type its reply is read into.
pub(super) trait Call {
    /// What the script answers, read without a panic whatever the server sends.
    type Reply: FromRedisValue;
    /// The script.
    const SCRIPT: &'static LuaScript;
    /// Its KEYS in order, as `<index> <name>` the way the header writes them: `1..n slots`
    /// for a run of keys, `n+1 limit` for the one after it.
    const KEYS: &'static [&'static str];
    /// Its ARGV names in order, `ARGV[1]` first.
    const ARGV: &'static [&'static str];

    fn keys(&self) -> Vec<Key>;
    /// The values of [`Call::ARGV`], in that order.
    fn argv(&self) -> Vec<Vec<u8>>;
}

/// A flag as the scripts take it: `'1'` or `'0'`.
fn flag(on: bool) -> Vec<u8> {
    if on { b"1" } else { b"0" }.to_vec()
}

/// A number as the scripts take it: its decimal digits.
fn number(n: impl ToString) -> Vec<u8> {
    n.to_string().into_bytes()
}

fn millis(duration: Duration) -> Vec<u8> {
    number(duration.as_millis())
}

/// `acquire.lua`: take one of the lock's slots, or learn who has them and queue.
pub(super) struct Acquire {
    /// Every slot of the lock, slot 1 (the lock's own key) first.
    pub slots: Vec<Key>,
    pub limit_key: Key,
    pub fence_key: Key,
    pub queue: Key,
    pub woken: Key,
    /// Where a `--replace` run's takeover stands.
    pub replace_key: Key,
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

/// What the scripts take of the lock's history (`{K}:history`) and counters
/// (`{K}:stats`): both keys, and `--history`, the stream's cap (0: nothing is recorded).
#[derive(Debug, Clone, Default)]
pub(super) struct RecordArgs {
    pub history_key: Key,
    pub stats_key: Key,
    pub max: u32,
}

/// What the scripts take of `--once` and `--once-per`.
#[derive(Debug, Clone, Default)]
pub(super) struct OnceArgs {
    pub done_key: Key,
    pub done_per_key: Key,
    /// `--once ID`; empty without.
    pub id: String,
    /// `--once-per DUR`; zero without.
    pub per: Duration,
    /// This run's arrival by this server's clock, once the server told it.
    pub stamp_ms: Option<u64>,
    /// `--remember`.
    pub remember: Duration,
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
        "n+9 history",
        "n+10 stats",
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

/// What became of a script's recording to the lock's history and counters: all went in
/// when `flags` is 0. A refusal never changes what the script did to the lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// [`Recorded::HISTORY_REFUSED`] and the others, added.
    pub flags: u32,
    /// The commands refused (other than for a key's type), separated by spaces.
    pub refused: String,
}

impl Recorded {
    /// A command on `{K}:history` was refused (the ACL, or another error).
    pub const HISTORY_REFUSED: u32 = 1;
    /// A command on `{K}:stats` was refused.
    pub const STATS_REFUSED: u32 = 2;
    /// `{K}:history` holds another type than a stream.
    pub const HISTORY_WRONG_TYPE: u32 = 4;
    /// `{K}:stats` holds another type than a hash.
    pub const STATS_WRONG_TYPE: u32 = 8;

    /// Reads the two trailing elements of a reply, `flags` and `refused`; anything
    /// unreadable counts as nothing to say.
    fn read(flags: Option<Value>, refused: Option<Value>) -> Recorded {
        Recorded {
            flags: flags
                .and_then(|flags| redis::from_redis_value::<u32>(flags).ok())
                .unwrap_or(0)
                & 15,
            refused: refused
                .and_then(|refused| redis::from_redis_value::<String>(refused).ok())
                .unwrap_or_default(),
        }
    }
}

/// A count of skips as a script returns it: -1 (or anything not a count) for none.
fn skips_in(value: Option<Value>) -> Option<u64> {
    value
        .and_then(|value| redis::from_redis_value::<i64>(value).ok())
        .and_then(|skips| u64::try_from(skips).ok())
}

/// Splits the recording's trailing elements (`extra` of them: skips when 3, then flags and
/// refused) off a reply of `base + extra` elements; a shorter reply has none.
fn split_recorded(
    items: &mut Vec<Value>,
    base: usize,
    with_skips: bool,
) -> (Option<u64>, Recorded) {
    let extra = if with_skips { 3 } else { 2 };
    if items.len() < base + extra {
        return (None, Recorded::default());
    }
    let refused = items.pop();
    let flags = items.pop();
    let skips = if with_skips {
        skips_in(items.pop())
    } else {
        None
    };
    (skips, Recorded::read(flags, refused))
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

/// `renew.lua`: extend the lease if the key is still this holder's.
pub(super) struct Renew {
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

/// `release.lua`: delete the lock if it is still this holder's, and wake one waiter.
pub(super) struct Release {
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
    pub ending: Option<super::HoldEnd>,
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
pub(super) struct ReleaseReply {
    pub released: Released,
    /// As [`AcquireReply::repaired`].
    pub repaired: u32,
    /// As [`AcquireReply::foreign`]: nothing was recorded there.
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

/// `leave_queue.lua`: a waiter gives up its place, and any wake-up it was owed.
pub(super) struct LeaveQueue {
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
}

impl Call for LeaveQueue {
    type Reply = Left;
    const SCRIPT: &'static LuaScript = &LEAVE_QUEUE;
    const KEYS: &'static [&'static str] =
        &["1 queue", "2 woken", "3 replace", "4 history", "5 stats"];
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
pub(super) struct Left {
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

/// `force_release.lua`: `release --force`, of exactly the value just read.
pub(super) struct ForceRelease {
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
pub(super) struct ForceReply {
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

/// `peek.lua`: a key as `status` and `list` show it, in one step.
pub(super) struct Peek {
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

/// `raise_fence.lua`: raise the fence counter to at least `fence`.
pub(super) struct RaiseFence {
    pub fence_key: Key,
    pub fence: u64,
}

impl Call for RaiseFence {
    type Reply = FenceAtLeast;
    const SCRIPT: &'static LuaScript = &RAISE_FENCE;
    const KEYS: &'static [&'static str] = &["1 fence"];
    const ARGV: &'static [&'static str] = &["fence"];

    fn keys(&self) -> Vec<Key> {
        vec![self.fence_key.clone()]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        vec![number(self.fence)]
    }
}

/// What `raise_fence.lua` answered: 1 raised, 0 already there; either way the counter is
/// at least the fence now, which is all the quorum needs.
#[derive(Debug)]
pub(super) struct FenceAtLeast;

impl FromRedisValue for FenceAtLeast {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        redis::from_redis_value::<i64>(value)?;
        Ok(FenceAtLeast)
    }
}

/// `counters.lua`: a lock's counters, its waiters and the server's clock, in one step.
pub(super) struct ReadCounters {
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

/// `dry_run.lua`: whether the user's ACL allows what a real run would send, and the
/// `--once` record it would find; it writes nothing.
pub(super) struct DryRun {
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

#[cfg(test)]
mod tests;
