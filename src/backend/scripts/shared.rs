//! The shared-mode scripts' contracts (`--shared`): [`AcquireShared`], [`RenewShared`] and
//! [`ReleaseShared`], beside `acquire_shared.lua`, `renew_shared.lua` and
//! `release_shared.lua`. Their replies have the shape of the exclusive scripts' and are read
//! into the same types.

use std::time::Duration;

use super::common::{OnceArgs, RecordArgs};
use super::renew::RenewReply;
use super::{flag, millis, number, Call, LuaScript};
use super::{AcquireReply, ReleaseReply, ACQUIRE_SHARED, RELEASE_SHARED, RENEW_SHARED};
use crate::backend::key::Key;
use crate::backend::layout::Channels;

/// `acquire_shared.lua`: take a share, or learn who keeps it from us and queue (shared).
pub(in crate::backend) struct AcquireShared {
    pub lock: Key,
    /// `{K}:shares`, `{K}:shares:exp`, `{K}:queue:shared`.
    pub shared_keys: [Key; 3],
    pub fence_key: Key,
    pub queue: Key,
    pub woken: Key,
    /// The queued waiters' values (`{K}:queue:who`).
    pub waiting_key: Key,
    pub identity: String,
    pub metadata: String,
    pub ttl: Duration,
    pub token: String,
    pub channels: Channels,
    pub listening: bool,
    pub arrival_ms: Option<u64>,
    /// Where the lock's history and counters go.
    pub recording: RecordArgs,
    /// How long this run has waited so far.
    pub waited: Duration,
    /// Whether a busy answer is this run's last (it does not wait): recorded as `busy`.
    pub final_try: bool,
    /// `--once` (`--once-per` is refused with `--shared`).
    pub once: OnceArgs,
    /// `{K}:limit`: a semaphore's key is refused.
    pub limit_key: Key,
}

impl Call for AcquireShared {
    type Reply = AcquireReply;
    const SCRIPT: &'static LuaScript = &ACQUIRE_SHARED;
    const KEYS: &'static [&'static str] = &[
        "1 lock",
        "2 shares",
        "3 expiries",
        "4 fence",
        "5 queue",
        "6 woken",
        "7 queue_shared",
        "8 waiting",
        "9 history",
        "10 stats",
        "11 done",
        "12 limit",
    ];
    const ARGV: &'static [&'static str] = &[
        "identity",
        "metadata",
        "ttl_ms",
        "token",
        "wake_prefix",
        "listening",
        "arrival_ms",
        "sharded",
        "history",
        "waited_ms",
        "final",
        "once_id",
        "remember_ms",
    ];

    fn keys(&self) -> Vec<Key> {
        let [shares, expiries, queue_shared] = self.shared_keys.clone();
        vec![
            self.lock.clone(),
            shares,
            expiries,
            self.fence_key.clone(),
            self.queue.clone(),
            self.woken.clone(),
            queue_shared,
            self.waiting_key.clone(),
            self.recording.history_key.clone(),
            self.recording.stats_key.clone(),
            self.once.done_key.clone(),
            self.limit_key.clone(),
        ]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        vec![
            self.identity.clone().into_bytes(),
            self.metadata.clone().into_bytes(),
            millis(self.ttl),
            self.token.clone().into_bytes(),
            self.channels.wake_prefix.as_bytes().to_vec(),
            flag(self.listening),
            number(self.arrival_ms.unwrap_or(0)),
            self.channels.sharded_arg().to_vec(),
            number(self.recording.max),
            millis(self.waited),
            flag(self.final_try),
            self.once.id.clone().into_bytes(),
            millis(self.once.remember),
        ]
    }
}

/// `renew_shared.lua`: extend this holder's share if it is still the group's.
pub(in crate::backend) struct RenewShared {
    pub lock: Key,
    pub shared_keys: [Key; 3],
    pub identity: String,
    pub ttl: Duration,
    pub token: String,
}

impl Call for RenewShared {
    type Reply = RenewReply;
    const SCRIPT: &'static LuaScript = &RENEW_SHARED;
    const KEYS: &'static [&'static str] = &["1 lock", "2 shares", "3 expiries"];
    const ARGV: &'static [&'static str] = &["identity", "ttl_ms", "token"];

    fn keys(&self) -> Vec<Key> {
        let [shares, expiries, _] = self.shared_keys.clone();
        vec![self.lock.clone(), shares, expiries]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        vec![
            self.identity.clone().into_bytes(),
            millis(self.ttl),
            self.token.clone().into_bytes(),
        ]
    }
}

/// `release_shared.lua`: give up this holder's share; the last one wakes the queue's head.
pub(in crate::backend) struct ReleaseShared {
    pub lock: Key,
    pub shared_keys: [Key; 3],
    pub queue: Key,
    pub woken: Key,
    pub replace_key: Key,
    pub identity: String,
    pub token: String,
    pub channels: Channels,
    pub keep_for: Option<Duration>,
    pub notice: String,
    pub grace: Duration,
    /// Where the lock's history and counters go.
    pub recording: RecordArgs,
    /// What ended the share, recorded: `released`, `forced`; empty records nothing.
    pub event: &'static str,
    /// The command's status, when known.
    pub exit_code: Option<u8>,
    /// This holder's value, for a loss's record.
    pub value: String,
    /// `--once`: its record key and ID, and `--remember`.
    pub once: OnceArgs,
    /// Whether the command succeeded: its work is recorded as done (`--once`).
    pub record: bool,
}

impl Call for ReleaseShared {
    type Reply = ReleaseReply;
    const SCRIPT: &'static LuaScript = &RELEASE_SHARED;
    const KEYS: &'static [&'static str] = &[
        "1 lock",
        "2 shares",
        "3 expiries",
        "4 queue",
        "5 woken",
        "6 queue_shared",
        "7 replace",
        "8 history",
        "9 stats",
        "10 done",
    ];
    const ARGV: &'static [&'static str] = &[
        "identity",
        "token",
        "release_channel",
        "keep_ms",
        "notice",
        "wake_prefix",
        "grace_ms",
        "sharded",
        "history",
        "event",
        "exit_code",
        "value",
        "once_id",
        "remember_ms",
    ];

    fn keys(&self) -> Vec<Key> {
        let [shares, expiries, queue_shared] = self.shared_keys.clone();
        vec![
            self.lock.clone(),
            shares,
            expiries,
            self.queue.clone(),
            self.woken.clone(),
            queue_shared,
            self.replace_key.clone(),
            self.recording.history_key.clone(),
            self.recording.stats_key.clone(),
            self.once.done_key.clone(),
        ]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        // 0 is "no --min-hold": a remainder that rounds down to it is kept for 1 ms.
        let keep_ms = self.keep_for.map_or(0, |keep| keep.as_millis().max(1));
        vec![
            self.identity.clone().into_bytes(),
            self.token.clone().into_bytes(),
            self.channels.release.as_bytes().to_vec(),
            number(keep_ms),
            self.notice.clone().into_bytes(),
            self.channels.wake_prefix.as_bytes().to_vec(),
            millis(self.grace),
            self.channels.sharded_arg().to_vec(),
            number(self.recording.max),
            self.event.as_bytes().to_vec(),
            self.exit_code.map_or_else(Vec::new, number),
            self.value.clone().into_bytes(),
            if self.record {
                self.once.id.clone().into_bytes()
            } else {
                Vec::new()
            },
            millis(self.once.remember),
        ]
    }
}
