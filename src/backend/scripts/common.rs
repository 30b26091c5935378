//! What several scripts share besides the [`Call`](super::Call) machinery: the `--once`
//! and recording arguments, and [`Recorded`], the recording's tail of a reply. Not any one
//! script's own types, which sit beside its `.lua` file.

use std::time::Duration;

use redis::Value;

use crate::backend::key::Key;

/// What the scripts take of the lock's history (`{K}:history`) and counters
/// (`{K}:stats`): both keys, and `--history`, the stream's cap (0: nothing is recorded).
#[derive(Debug, Clone, Default)]
pub(in crate::backend) struct RecordArgs {
    pub history_key: Key,
    pub stats_key: Key,
    pub max: u32,
}

/// What the scripts take of `--once` and `--once-per`.
#[derive(Debug, Clone, Default)]
pub(in crate::backend) struct OnceArgs {
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
pub(super) fn split_recorded(
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
