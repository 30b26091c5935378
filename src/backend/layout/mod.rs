//! The data layout: the names of a lock's keys and channel, the value a holder writes and
//! how it is read back, and the limits on both. Every other part of the backend takes key
//! names and values from here; the scripts (`scripts/*.lua`) take them as arguments.
//!
//! For a lock named `K` (the full key, prefix included):
//! - `K`: a string, the lock itself (with `--limit N`, the first of N slots). Its value
//!   starts with the holder's identity, `{"token":"<uuid>"`, then the fence and metadata:
//!   `{"token":"…","fence":118,"host":"web-3","pid":4242,"program":"deploy.sh",
//!   "label":"deploy of v1.2","since":"…Z","since_ms":…,"ttl_ms":30000,"limit":1}`. The
//!   command's arguments are never stored (they may hold secrets), so the value stays small
//!   whatever the command; `label` is there only when the holder gave one. With `--prefix ''` and the default limit this
//!   is the standard `SET K token NX PX ttl` lock, shared with other tools that use it.
//! - `{K}:slot:2` … `{K}:slot:N`: the other slots of a semaphore, strings like `K`.
//! - `{K}:limit`: while a semaphore has holders, its N (so a run with another `--limit`
//!   is refused even when the slots it would look at are free); it lives as long as the
//!   longest lease and goes with the last release.
//! - `{K}:fence`: a counter, incremented in the same script that takes a slot; when
//!   missing, started from the server's clock in microseconds, so a fence never goes back
//!   when the server forgets it.
//! - `{K}:queue`: the waiters, a sorted set of tokens by arrival (server time, ms); each
//!   listens for its own wake-up on `redlock-run:wake:<token>` (in a cluster,
//!   `redlock-run:wake:{K}:<token>`, see `Channels`). A release wakes the first live one;
//!   with `--fair`, only the first ones may take a free slot.
//! - `{K}:supersede`: with `--supersede`, the newest superseding waiter's identity and
//!   metadata (a string, the JSON of a lock value without its fence): a waiter that
//!   finds another's there once it has arrived was overtaken, and exits 77. It has no
//!   TTL, like the fence counter: a waiter that missed its wake-up finds it however late
//!   it wakes.
//! - `{K}:queue:woken`: a hash of the waiters woken and not yet tried since, by when
//!   (server time, ms): one that does not try within a lease's length counts as gone. An
//!   entry that is not such a time is removed, with a warning (`woken_since`).
//! - `{K}:done`: with `--once`, a hash of the IDs whose work succeeded: ID ->
//!   `<when, server ms> <the value of the holder that did it>`; `{K}:done:per`: with
//!   `--once-per`, a sorted set of the same records by the successful run's arrival (server
//!   ms). Both last `--remember`, and are written by the release that ends the run;
//!   `{K}:done:ids`, a sorted set of `{K}:done`'s IDs by when recorded (server ms), keeps
//!   `{K}:done` to the newest 1000 IDs (`MAX_ONCE_IDS` in release.lua).
//! - `{K}:replace`: with `--replace`, the takeover a run asked for while the lock was held:
//!   its identity and metadata (a string, the JSON of a lock value without its fence). While
//!   it stands, nobody else takes a free slot; the holder's renewals find it, and it ends
//!   when the replacing run takes the lock or leaves (or runs out, 3 leases after its last
//!   attempt).
//! - With `--shared`: while a group of shared holders holds the lock, `K` holds a group
//!   value, `{"token":"<first share's token>:shared","fence":…,<first share's metadata>}`
//!   (no holder's identity: nobody takes it for theirs, and `SET K v NX` fails), kept alive
//!   as long as the longest share; `{K}:shares`, a hash of the shares (token -> that
//!   share's lock value); `{K}:shares:exp`, a sorted set of when each share's lease ends
//!   (server ms); `{K}:queue:shared`, a hash of the queued tokens that wait in shared mode
//!   (any other queued token is exclusive); `{K}:queue:who`, a hash of the queued waiters'
//!   values (token -> identity and metadata), so that a shared run kept out by a waiting
//!   exclusive one names it. It lasts as long as the queue.
//! - `{K}:stats`: the lock's counters, a hash (acquisitions, skips, the last success, each
//!   current holder's `slot:<i>` with when it took the slot); `{K}:history`: its events, a
//!   stream. Read by `metrics`, `check` and `status` (see `counters`).
//!
//! The braces are a Redis Cluster hash tag: every key of one lock lives in one hash slot,
//! so each script stays single-slot. (When `K` already holds a tag, the suffix is simply
//! appended, which keeps `K`'s tag; a name that is another lock's key, or would share
//! one, is refused: see `shares_keys_with`.) Every script compares the leading identity bytes, so a
//! key whose value we did not write (another holder's, another tool's, another
//! application's hash) is never renewed or deleted. Waiters also listen on
//! `redlock-run:released:K` (in a cluster `redlock-run:released:{K}`), where a release is
//! announced when nobody is queued (for waiters of older versions); each message is the
//! releasing holder's identity and a release number.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use super::key::Key;

mod value;

use value::{cut, hostname, identity_of, json_string};
pub use value::{identity_in, process_metadata, Holder};

/// Longest lock name accepted, in bytes (the Redis key is the prefix plus this).
pub const MAX_KEY_LEN: usize = 1024;
/// The most holders `--limit` accepts; each is a key the acquire script looks at.
pub const MAX_LIMIT: u32 = 1000;
/// Longest `--label`, in bytes: what a holder shows its waiters stays small.
pub const MAX_LABEL_LEN: usize = 256;
/// The longest lock value `status`, `list` and `serve` read (`peek.lua`,
/// `peek_shares.lua` cut it there): ours is far shorter even with a label, program and host
/// of control characters (each escaped as six bytes), about 4 KiB at worst; a longer
/// value is another application's.
pub const MAX_VALUE_LEN: u64 = 8192;
/// The program's name is cut to this many bytes in the value (a file name is at most 255).
const MAX_PROGRAM_LEN: usize = 255;

/// Waiters listen on this channel prefix + the full key for a release.
pub const RELEASE_CHANNEL_PREFIX: &str = "redlock-run:released:";
/// A queued waiter is woken on this channel prefix + its token.
pub const WAKE_CHANNEL_PREFIX: &str = "redlock-run:wake:";

/// What we want to hold: the key, for how long, how many may share it, and the value that
/// says it is ours.
#[derive(Debug, Clone)]
pub struct LockRequest {
    pub key: Key,
    pub token: String,
    /// The value after the identity and the fence: `,"host":…}`.
    pub metadata: String,
    pub ttl: Duration,
    pub limit: u32,
    /// `--fair`: only the first waiters in the queue may take a free slot.
    pub fair: bool,
    /// Where this waiter stands in a queue: when it joined, in ms since the epoch, by the
    /// server's clock (`None`), or by this machine's for a Redlock quorum, whose nodes must
    /// all order their queues alike: each wakes its first waiter at a release, and a
    /// release that woke a different waiter on each node would set them all against each
    /// other.
    pub arrival_ms: Option<u64>,
    /// `--supersede`: a newer superseding waiter ends this one's wait.
    pub supersede: bool,
    /// `--once`, `--once-per`: the work done once per ID or per firing.
    pub once: Once,
    /// `--replace`: while the lock is held, ask its holder to stop, and be served next.
    pub replace: bool,
    /// What the scripts record in the lock's history and counters.
    pub recording: Recording,
    /// `--shared`: a share of the lock, beside other shared holders (docs/design.md).
    pub shared: bool,
}

/// What a run records in the lock's history (`{K}:history`) and counters (`{K}:stats`).
#[derive(Debug, Clone, Copy)]
pub struct Recording {
    /// `--history N`: the stream's cap; 0 records nothing, neither history nor counters.
    pub history: u32,
    /// When the run started: an acquisition or a timeout records the time waited since.
    pub started: std::time::Instant,
    /// The run does not wait: a busy answer is its last, recorded as `busy`.
    pub final_try: bool,
}

impl Recording {
    /// `--history`'s default.
    pub const DEFAULT_HISTORY: u32 = 100;
}

impl Default for Recording {
    fn default() -> Self {
        Recording {
            history: Recording::DEFAULT_HISTORY,
            started: std::time::Instant::now(),
            final_try: false,
        }
    }
}

/// What `--once ID` and `--once-per DUR` ask of a run: not to run its command when a run of
/// the same key already succeeded with the same ID, or arrived within `per / 2` of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Once {
    pub id: Option<String>,
    pub per: Option<Duration>,
    /// `--remember`: how long a record lasts.
    pub remember: Duration,
}

impl Once {
    /// Whether either flag was given.
    pub fn is_on(&self) -> bool {
        self.id.is_some() || self.per.is_some()
    }
}

impl LockRequest {
    /// A new request with a fresh 128-bit random token and this process's metadata: the
    /// host, the pid, the program's name (never its arguments, which may hold secrets) and
    /// the holder's `label`, if it gave one.
    pub fn new(
        key: Key,
        ttl: Duration,
        limit: u32,
        fair: bool,
        program: &str,
        label: Option<&str>,
    ) -> LockRequest {
        let token = crate::random::uuid_v4().to_string();
        let now = SystemTime::now();
        let since_ms = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis());
        let label = label
            .map(|label| format!(",\"label\":{}", json_string(label)))
            .unwrap_or_default();
        let metadata = format!(
            ",\"host\":{host},\"pid\":{pid},\"program\":{program}{label},\"since\":\"{since}\",\"since_ms\":{since_ms},\"ttl_ms\":{ttl_ms},\"limit\":{limit}}}",
            host = json_string(&hostname()),
            pid = std::process::id(),
            program = json_string(cut(program, MAX_PROGRAM_LEN)),
            since = humantime::format_rfc3339_seconds(now),
            ttl_ms = ttl.as_millis(),
        );
        LockRequest {
            key,
            token,
            metadata,
            ttl,
            limit,
            fair,
            arrival_ms: None,
            supersede: false,
            once: Once::default(),
            replace: false,
            recording: Recording::default(),
            shared: false,
        }
    }

    /// This request in shared mode (`--shared`): its value says so (`"mode":"shared"`,
    /// before the limit, which stays last).
    #[must_use]
    pub fn in_shared_mode(mut self) -> LockRequest {
        if let Some(at) = self.metadata.rfind(",\"limit\":") {
            self.metadata.insert_str(at, ",\"mode\":\"shared\"");
        }
        self.shared = true;
        self
    }

    /// The leading bytes of the value that identify this holder.
    pub fn identity(&self) -> String {
        identity_of(&self.token)
    }

    /// The key of slot `slot` (1-based; slot 1 is the lock's own key).
    pub fn slot_key(&self, slot: u32) -> Key {
        slot_key(&self.key, slot)
    }
}

/// Where the waiters of one lock hear of its releases: each on its own wake-up channel (the
/// prefix, then its token), and all on the release channel when nobody is queued.
///
/// In a Redis Cluster the notices are sharded (`SPUBLISH`, `SSUBSCRIBE`, Redis 7): a
/// sharded channel lives in a hash slot like a key, and only the master of that slot and its
/// replicas carry it, instead of every node of the cluster. Both channels then carry the
/// lock's hash tag (`redlock-run:wake:{K}:<token>`, `redlock-run:released:{K}`), so they
/// share the lock's slot: a script may publish only on its own slot, and when the slot
/// moves, its subscribers are told (`sunsubscribe`) and subscribe again on the new master.
/// Elsewhere they are the plain channels of earlier versions, `redlock-run:wake:<token>`
/// and `redlock-run:released:K`.
#[derive(Debug, Clone)]
pub struct Channels {
    pub release: Key,
    pub wake_prefix: Key,
    pub sharded: bool,
}

impl Channels {
    pub fn of(key: &Key, sharded: bool) -> Channels {
        if sharded {
            Channels {
                release: Key::from(RELEASE_CHANNEL_PREFIX)
                    .followed_by(sibling_key(key, b"").as_bytes()),
                wake_prefix: Key::from(WAKE_CHANNEL_PREFIX)
                    .followed_by(sibling_key(key, b":").as_bytes()),
                sharded,
            }
        } else {
            Channels {
                release: Key::from(RELEASE_CHANNEL_PREFIX).followed_by(key.as_bytes()),
                wake_prefix: Key::from(WAKE_CHANNEL_PREFIX),
                sharded,
            }
        }
    }

    /// The channel the waiter with `token` is woken on.
    pub fn wake(&self, token: &str) -> Key {
        self.wake_prefix.followed_by(token.as_bytes())
    }

    /// How the scripts are told which way to publish: `'1'` sharded, `'0'` plain.
    pub fn sharded_arg(&self) -> &'static [u8] {
        if self.sharded {
            b"1"
        } else {
            b"0"
        }
    }
}

/// The key of slot `slot` of lock `key` (1-based; slot 1 is `key` itself).
pub fn slot_key(key: &Key, slot: u32) -> Key {
    if slot == 1 {
        key.clone()
    } else {
        sibling_key(key, format!(":slot:{slot}").as_bytes())
    }
}

/// The key that records a semaphore's limit while it has holders.
pub fn limit_key(key: &Key) -> Key {
    sibling_key(key, b":limit")
}

/// The fence counter of lock `key`.
pub fn fence_key(key: &Key) -> Key {
    sibling_key(key, b":fence")
}

/// The newest `--supersede` waiter of lock `key` (see the module doc).
pub fn supersede_key(key: &Key) -> Key {
    sibling_key(key, b":supersede")
}

/// The records of work done of lock `key`: `--once`'s, `--once-per`'s.
pub fn done_keys(key: &Key) -> [Key; 2] {
    [sibling_key(key, b":done"), sibling_key(key, b":done:per")]
}

/// The order of `--once`'s record of lock `key`: its IDs by when they were recorded, which
/// keeps `{K}:done` bounded (see the module doc).
pub fn done_ids_key(key: &Key) -> Key {
    sibling_key(key, b":done:ids")
}

/// The waiters' queue of lock `key` and the record of those woken (see the module doc).
pub fn queue_keys(key: &Key) -> [Key; 2] {
    [
        sibling_key(key, b":queue"),
        sibling_key(key, b":queue:woken"),
    ]
}

/// A shared group's keys of lock `key` (`--shared`): its shares (hash: token -> value),
/// when each share's lease ends (sorted set), and the queued waiters that wait in shared
/// mode (hash: token -> '1'), as docs/design.md describes.
pub fn shared_keys(key: &Key) -> [Key; 3] {
    [
        sibling_key(key, b":shares"),
        sibling_key(key, b":shares:exp"),
        sibling_key(key, b":queue:shared"),
    ]
}

/// The queued waiters' values of lock `key` (hash: token -> identity and metadata), so that
/// a shared run kept out by a waiting exclusive one can name it.
pub fn waiting_key(key: &Key) -> Key {
    sibling_key(key, b":queue:who")
}

/// The takeover asked for by a `--replace` run of lock `key`, while it stands.
pub fn replace_key(key: &Key) -> Key {
    sibling_key(key, b":replace")
}

/// The number of the slot `slot` of the lock `key` (1 for the key itself, N for
/// `{K}:slot:N`); 1 for anything else.
pub fn slot_number(key: &Key, slot: &Key) -> u32 {
    let stem = sibling_key(key, b":slot:");
    slot.as_bytes()
        .strip_prefix(stem.as_bytes())
        .and_then(|digits| std::str::from_utf8(digits).ok()?.parse().ok())
        .unwrap_or(1)
}

/// The lock's history (a stream) and counters (a hash): `{K}:history`, `{K}:stats`.
pub fn record_keys(key: &Key) -> [Key; 2] {
    [sibling_key(key, b":history"), sibling_key(key, b":stats")]
}

/// The suffixes of the keys that belong to a lock without being locks themselves
/// (`:queue:alive` held fair waiters' heartbeats in earlier versions).
const INTERNAL_SUFFIXES: [&[u8]; 16] = [
    b":fence",
    b":supersede",
    b":done",
    b":done:per",
    b":done:ids",
    b":limit",
    b":queue",
    b":queue:woken",
    b":queue:alive",
    b":replace",
    b":history",
    b":stats",
    b":shares",
    b":shares:exp",
    b":queue:shared",
    b":queue:who",
];

/// When `name` is one of a lock's own bookkeeping keys (fence, limit, queue, a slot past
/// the first), the lock's key; `None` for anything else.
pub fn lock_of_internal_key(name: &Key) -> Option<Key> {
    let name = name.as_bytes();
    let slot_stem = rsplit_once(name, b":slot:").and_then(|(stem, number)| {
        let digits = std::str::from_utf8(number).ok()?;
        let slot: u32 = digits.parse().ok()?;
        (slot >= 2 && !digits.starts_with('0')).then(|| (stem, [b":slot:", number].concat()))
    });
    let suffixed = INTERNAL_SUFFIXES
        .iter()
        .filter_map(|suffix| Some((name.strip_suffix(*suffix)?, suffix.to_vec())));
    for (stem, suffix) in slot_stem.into_iter().chain(suffixed) {
        // Untagged locks wrap their name in braces: `{K}:fence`.
        let lock = match stem
            .strip_prefix(b"{")
            .and_then(|inner| inner.strip_suffix(b"}"))
        {
            Some(inner) if !has_hash_tag(inner) => inner,
            _ => stem,
        };
        let lock = Key::new(lock);
        if sibling_key(&lock, &suffix).as_bytes() == name {
            return Some(lock);
        }
    }
    None
}

/// When a lock named `key` cannot have keys of its own, the lock it would share them with:
/// `key` is one of that lock's bookkeeping keys (`job{t}:fence` is the fence counter of
/// `job{t}`), or `key` is `{J}` around a name without a tag, whose bookkeeping keys would
/// be `J`'s (`{J}:fence`). Two such locks would wedge each other (a fence counter held as
/// a lock without a TTL, a queue taken for a lock's value), so such a name is refused.
/// Every other pair of names has no key in common (see the tests).
pub fn shares_keys_with(key: &Key) -> Option<Key> {
    if let Some(lock) = lock_of_internal_key(key) {
        return Some(lock);
    }
    let inner = key
        .as_bytes()
        .strip_prefix(b"{")
        .and_then(|inner| inner.strip_suffix(b"}"))
        .filter(|inner| !inner.is_empty() && !has_hash_tag(inner))?;
    Some(Key::new(inner))
}

/// A key that lives in the same Redis Cluster hash slot as `key` (see `colocates`).
pub fn sibling_key(key: &Key, suffix: &[u8]) -> Key {
    if has_hash_tag(key.as_bytes()) {
        key.followed_by(suffix)
    } else {
        Key::from("{")
            .followed_by(key.as_bytes())
            .followed_by(b"}")
            .followed_by(suffix)
    }
}

/// Whether a lock named `key` can keep all its keys in one Redis Cluster hash slot, as
/// its scripts need there. Yes when it holds a hash tag (its siblings keep it), or when it
/// holds no `}` (`{K}` is then a tag that hashes as `K` does); a name such as `a}b`, `{}`
/// or `x{}y` cannot, and is refused for a cluster (it works on any other deployment).
pub fn colocates(key: &Key) -> bool {
    has_hash_tag(key.as_bytes()) || !key.as_bytes().contains(&b'}')
}

/// Whether Redis Cluster would hash only part of `key`: a `{` followed later by a `}`
/// with at least one byte between them.
fn has_hash_tag(key: &[u8]) -> bool {
    key.iter()
        .position(|&b| b == b'{')
        .and_then(|open| key[open + 1..].iter().position(|&b| b == b'}'))
        .is_some_and(|len| len > 0)
}

fn rsplit_once<'a>(text: &'a [u8], separator: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    let at = text
        .windows(separator.len())
        .rposition(|window| window == separator)?;
    Some((&text[..at], &text[at + separator.len()..]))
}

#[cfg(test)]
mod tests;
