//! The Lua scripts, all in one place: each is a `.lua` file beside this one, pulled in with
//! `include_str!` after the shared `prelude.lua`, and run by SHA (`connection::Session::eval`). A server that lacks one (a
//! fresh, restarted or flushed Redis) gets every script loaded at once, so that a holder's
//! first renewal never needs a round trip of its own to load its script on a short lease.
//!
//! Each script's contract is a type here: a [`Call`] names its KEYS and ARGV in the order
//! of the script's header (a test reads the headers and holds the two in step), and builds
//! them from named fields; its reply is decoded into a type of its own, never matched by
//! position at the call site. A new argument is a new field, not a slot number.
//!
//! Those types sit beside their script, `acquire.rs` next to `acquire.lua`, so a new script
//! or a new argument is one place; this file holds what every script shares ([`Call`],
//! [`LuaScript`], the argument encodings), `common.rs` the arguments and reply tail several share.

use std::time::Duration;

use redis::FromRedisValue;

use super::key::Key;

mod acquire;
mod common;
mod counters;
mod dry_run;
mod force_release;
mod leave_queue;
mod peek;
mod raise_fence;
mod release;
mod renew;
mod shared;

pub(in crate::backend) use acquire::Acquire;
pub(crate) use acquire::{AcquireReply, Acquisition};
pub use common::Recorded;
pub(in crate::backend) use common::{OnceArgs, RecordArgs};
pub(crate) use counters::CountersReply;
pub(in crate::backend) use counters::ReadCounters;
pub(in crate::backend) use dry_run::DryRun;
pub(in crate::backend) use force_release::ForceRelease;
pub use force_release::Forced;
pub(in crate::backend) use leave_queue::LeaveQueue;
pub(in crate::backend) use peek::{Peek, PeekShares};
pub(crate) use peek::{PeekReply, SharesReply};
pub(in crate::backend) use raise_fence::RaiseFence;
pub(in crate::backend) use release::{Release, ReleaseReply};
pub(crate) use renew::Extended;
pub(in crate::backend) use renew::Renew;
pub(in crate::backend) use shared::{AcquireShared, ReleaseShared, RenewShared};

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

/// `EVALSHA` of `call`'s script with its keys and arguments, to be sent in a pipeline
/// (`Session::pipelined`); a server that lacks the script answers `NOSCRIPT` to it alone.
pub(super) fn evalsha<C: Call>(call: &C) -> redis::Cmd {
    let keys = call.keys();
    let mut command = redis::cmd("EVALSHA");
    command
        .arg(C::SCRIPT.sha1)
        .arg(keys.len())
        .arg(&keys)
        .arg(call.argv());
    command
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

#[cfg(test)]
mod tests;
