//! How a lock is held in Redis, behind one small interface. This is the only place that knows
//! keys, values, scripts and channels; the rest of the program sees `LockBackend` and never a
//! Redis connection. It knows nothing of processes or signals.
//!
//! Data layout, for a lock named `K` (the full key, prefix included):
//! - `K`: a string, the lock itself (with `--limit N`, the first of N slots). Its value
//!   starts with the holder's identity, `{"token":"<uuid>"`, then the fence and metadata:
//!   `{"token":"…","fence":118,"host":"web-3","pid":4242,"cmd":"./deploy.sh","since":"…Z",
//!   "since_ms":…,"ttl_ms":30000,"limit":1}`. With `--prefix ''` and the default limit this
//!   is the standard `SET K token NX PX ttl` lock, shared with other tools that use it.
//! - `{K}:slot:2` … `{K}:slot:N`: the other slots of a semaphore, strings like `K`.
//! - `{K}:limit`: while a semaphore has holders, its N (so a run with another `--limit`
//!   is refused even when the slots it would look at are free); it lives as long as the
//!   longest lease and goes with the last release.
//! - `{K}:fence`: a counter, incremented in the same script that takes a slot.
//! - `{K}:queue` and `{K}:queue:alive`: with `--fair`, sorted sets of waiting tokens by
//!   arrival and by heartbeat expiry (server time, ms).
//!
//! The braces are a Redis Cluster hash tag: every key of one lock lives in one hash slot,
//! so each script stays single-slot. (When `K` already holds a tag, the suffix is simply
//! appended, which keeps `K`'s tag.) Every script compares the leading identity bytes, so a
//! key whose value we did not write (another holder's, another tool's, another
//! application's hash) is never renewed or deleted. Waiters listen on
//! `redlock-run:released:K`; each message is the releasing holder's identity and a
//! release number.

pub mod endpoint;
pub mod inspect;
pub mod quorum;
pub mod single;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;

use crate::config::RedisTarget;

/// The backend for `targets`: one Redis deployment, or a Redlock quorum over several
/// independent masters. Nothing is connected yet.
pub fn open(
    targets: &[RedisTarget],
    timeout: Duration,
    lock: LockRequest,
) -> Result<Box<dyn LockBackend>> {
    Ok(match targets {
        [single] => Box::new(single::SingleRedis::new(single, timeout, lock)?),
        nodes => Box::new(quorum::Quorum::new(nodes, timeout, lock)?),
    })
}

/// How much a lease of `ttl` is cut short to allow for the server's clock running at
/// another rate than ours: 1% of the TTL plus 2 ms, as in the Redis distributed-lock spec.
pub fn clock_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Waiters listen on this channel prefix + the full key for a release.
pub const RELEASE_CHANNEL_PREFIX: &str = "redlock-run:released:";

/// What we want to hold: the key, for how long, how many may share it, and the value that
/// says it is ours.
#[derive(Debug, Clone)]
pub struct LockRequest {
    pub key: String,
    pub token: String,
    /// The value after the identity and the fence: `,"host":…}`.
    pub metadata: String,
    pub ttl: Duration,
    pub limit: u32,
    /// With `--fair`: how long a waiter stays queued without a heartbeat.
    pub fair_heartbeat_timeout: Option<Duration>,
}

impl LockRequest {
    /// A new request with a fresh 128-bit random token and this process's metadata.
    pub fn new(
        key: String,
        ttl: Duration,
        limit: u32,
        fair_heartbeat_timeout: Option<Duration>,
        command_line: &str,
    ) -> LockRequest {
        let token = crate::random::uuid_v4().to_string();
        let now = SystemTime::now();
        let since_ms = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis());
        let metadata = format!(
            ",\"host\":{host},\"pid\":{pid},\"cmd\":{cmd},\"since\":\"{since}\",\"since_ms\":{since_ms},\"ttl_ms\":{ttl_ms},\"limit\":{limit}}}",
            host = json_string(&hostname()),
            pid = std::process::id(),
            cmd = json_string(command_line),
            since = humantime::format_rfc3339_seconds(now),
            ttl_ms = ttl.as_millis(),
        );
        LockRequest {
            key,
            token,
            metadata,
            ttl,
            limit,
            fair_heartbeat_timeout,
        }
    }

    /// The leading bytes of the value that identify this holder.
    pub fn identity(&self) -> String {
        identity_of(&self.token)
    }

    pub fn release_channel(&self) -> String {
        release_channel(&self.key)
    }

    /// The key of slot `slot` (1-based; slot 1 is the lock's own key).
    pub fn slot_key(&self, slot: u32) -> String {
        slot_key(&self.key, slot)
    }
}

/// The channel waiters for `key` listen on.
pub fn release_channel(key: &str) -> String {
    format!("{RELEASE_CHANNEL_PREFIX}{key}")
}

/// The key of slot `slot` of lock `key` (1-based; slot 1 is `key` itself).
pub fn slot_key(key: &str, slot: u32) -> String {
    if slot == 1 {
        key.to_string()
    } else {
        sibling_key(key, &format!(":slot:{slot}"))
    }
}

/// The key that records a semaphore's limit while it has holders.
pub fn limit_key(key: &str) -> String {
    sibling_key(key, ":limit")
}

/// The suffixes of the keys that belong to a lock without being locks themselves.
const INTERNAL_SUFFIXES: [&str; 4] = [":fence", ":limit", ":queue", ":queue:alive"];

/// When `name` is one of a lock's own bookkeeping keys (fence, limit, queue, a slot past
/// the first), the lock's key; `None` for anything else.
pub fn lock_of_internal_key(name: &str) -> Option<String> {
    let slot_stem = name.rsplit_once(":slot:").and_then(|(stem, number)| {
        let slot: u32 = number.parse().ok()?;
        (slot >= 2 && !number.starts_with('0')).then(|| (stem, format!(":slot:{number}")))
    });
    let suffixed = INTERNAL_SUFFIXES
        .iter()
        .filter_map(|suffix| Some((name.strip_suffix(suffix)?, suffix.to_string())));
    for (stem, suffix) in slot_stem.into_iter().chain(suffixed) {
        // Untagged locks wrap their name in braces: `{K}:fence`.
        let lock = match stem
            .strip_prefix('{')
            .and_then(|inner| inner.strip_suffix('}'))
        {
            Some(inner) if !has_hash_tag(inner) => inner,
            _ => stem,
        };
        if sibling_key(lock, &suffix) == name {
            return Some(lock.to_string());
        }
    }
    None
}

/// A key that lives in the same Redis Cluster hash slot as `key`.
pub fn sibling_key(key: &str, suffix: &str) -> String {
    if has_hash_tag(key) {
        format!("{key}{suffix}")
    } else {
        format!("{{{key}}}{suffix}")
    }
}

/// Whether Redis Cluster would hash only part of `key`: a `{` followed later by a `}`
/// with at least one byte between them.
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

/// Who wrote a lock value, the same on every node: its identity `{"token":"…"` for a value
/// of ours, the whole value for anyone else's.
pub fn identity_in(value: &str) -> &str {
    match value.find("\",") {
        Some(end) if value.starts_with("{\"token\":\"") => &value[..=end],
        _ => value,
    }
}

fn identity_of(token: &str) -> String {
    format!("{{\"token\":\"{token}\"")
}

/// The result of one attempt to take the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Ours. The lease runs for the TTL from `sent_at` at the earliest: the moment the
    /// successful command left this machine, before Redis could start the clock. `fence`
    /// is this acquisition's number, larger than any before it for this lock.
    Acquired { sent_at: Instant, fence: u64 },
    /// Someone else holds it, for `holder_ttl` more at most if they do not renew; `None`
    /// when the key never expires (not a lock of ours, or a holder that set no TTL).
    /// `holder` is a holder's value, when it is a string.
    Busy {
        holder_ttl: Option<Duration>,
        holder: Option<String>,
        /// With `--fair`: how many waiters are queued before this one.
        ahead: u32,
        /// No one holds a majority of the Redlock nodes: contenders split them, and each
        /// will let go. Retry after a short random pause, not on the next release notice,
        /// so that contenders do not collide again in lockstep.
        split: bool,
    },
}

/// The result of one renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Extended by a command sent at `sent_at`: the lease now runs from then.
    Extended { sent_at: Instant },
    /// The key is gone or holds someone else's value: the lock is lost for sure.
    NotOurs,
}

/// The result of a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    Deleted,
    /// Left to expire at the `--min-hold` mark.
    KeptUntilMinHold,
    /// The key was gone or someone else's; nothing was touched.
    NotOurs,
}

/// What the subscription to release notices reports.
#[derive(Debug)]
pub enum Notice {
    /// A holder released the lock: try now. `by` names the release (the holder's identity
    /// and a release number), the same on every Redlock node.
    Released { by: String },
    /// The subscription broke; no notice will come through it any more.
    Broken(anyhow::Error),
}

/// Where release notices go: called from the subscription's thread with each notice;
/// returns false once nobody listens any more.
pub type NoticeSink = Box<dyn FnMut(Notice) -> bool + Send>;

/// An active subscription to release notices. Dropping it ends the subscription (its
/// thread notices within a second and closes the connection).
pub struct Subscription {
    stopped: Arc<AtomicBool>,
    /// With several Redlock nodes: one subscription per node, added as each comes up.
    parts: Option<SubscriptionParts>,
}

/// The node subscriptions of a combined one, shared with the threads that make them:
/// `None` once the whole has ended, so that a part that comes up late ends at once.
#[derive(Clone)]
pub struct SubscriptionParts(Arc<Mutex<Option<Vec<Subscription>>>>);

impl SubscriptionParts {
    pub fn new() -> SubscriptionParts {
        SubscriptionParts(Arc::new(Mutex::new(Some(Vec::new()))))
    }

    /// Keeps `part` for as long as the whole lives.
    pub fn add(&self, part: Subscription) {
        let mut parts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(parts) = parts.as_mut() {
            parts.push(part);
        }
        // Otherwise `part` is dropped here: nobody listens any more.
    }
}

impl Default for SubscriptionParts {
    fn default() -> Self {
        SubscriptionParts::new()
    }
}

impl Subscription {
    pub fn new() -> Subscription {
        Subscription {
            stopped: Arc::new(AtomicBool::new(false)),
            parts: None,
        }
    }

    /// One subscription made of several (late ones included), ended together.
    pub fn combined(parts: SubscriptionParts) -> Subscription {
        Subscription {
            stopped: Arc::new(AtomicBool::new(false)),
            parts: Some(parts),
        }
    }

    /// The flag the listening side checks to learn that nobody listens any more.
    pub fn stopped_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stopped)
    }
}

impl Default for Subscription {
    fn default() -> Self {
        Subscription::new()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Relaxed);
        if let Some(parts) = &self.parts {
            let ended = parts.0.lock().unwrap_or_else(|p| p.into_inner()).take();
            drop(ended);
        }
    }
}

/// A lock in some Redis deployment. Each call is bounded in time: by the configured Redis
/// timeout, and by `deadline` where one is given.
pub trait LockBackend: Send {
    /// One attempt to take the lock. Errors are transport or server failures.
    fn try_acquire(&mut self) -> Result<Attempt>;

    /// Extend the lease, giving up at `deadline`.
    fn renew(&mut self, deadline: Instant) -> Result<Renewal>;

    /// Delete the lock if it is still ours and wake the waiters, or, with `keep_for`, leave
    /// it to expire that much later (`--min-hold`). Gives up at `deadline`.
    fn release(&mut self, keep_for: Option<Duration>, deadline: Instant) -> Result<Released>;

    /// Stop waiting: leave the fair queue, if in it. Best effort, bounded by the timeout.
    fn abandon(&mut self);

    /// Subscribe to release notices, passed to `sink` as they come. Returns once the
    /// subscription is active, so a release after this call returns is never missed.
    fn subscribe(&mut self, sink: NoticeSink) -> Result<Subscription>;

    /// Where the lock lives, safe to print.
    fn describe(&self) -> &str;
}

/// A failed request to a Redis deployment, with a flag telling a passing network fault
/// (worth retrying: the waiter keeps waiting, the acquire retries once) from a refusal that
/// will not change (authentication, a server error).
#[derive(Debug)]
pub struct BackendError {
    pub message: String,
    pub transient: bool,
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BackendError {}

/// Whether retrying the same request may succeed (the network or server was briefly away).
pub fn is_transient(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<BackendError>())
        .any(|cause| cause.transient)
}

/// A JSON string literal; metadata holds a command line, which may contain anything.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ch if u32::from(ch) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(ch))),
            ch => out.push(ch),
        }
    }
    out.push('"');
    out
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call; gethostname
    // writes at most `len` bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::from("unknown");
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(command: &str) -> LockRequest {
        LockRequest::new("k".into(), Duration::from_secs(1), 3, None, command)
    }

    #[test]
    fn metadata_is_json_after_the_fence() {
        let request = request("echo \"hi\"\n");
        assert_eq!(request.token.len(), 36);
        assert!(request.metadata.starts_with(",\"host\":"));
        assert!(request.metadata.contains(r#""cmd":"echo \"hi\"\n""#));
        assert!(request.metadata.ends_with(",\"limit\":3}"));
        assert_eq!(
            request.identity(),
            format!("{{\"token\":\"{}\"", request.token)
        );
    }

    #[test]
    fn tokens_differ() {
        assert_ne!(request("x").token, request("x").token);
    }

    #[test]
    fn sibling_keys_share_the_hash_slot() {
        assert_eq!(sibling_key("redlock:a", ":fence"), "{redlock:a}:fence");
        assert_eq!(sibling_key("x{tag}y", ":fence"), "x{tag}y:fence");
        assert_eq!(slot_key("redlock:a", 1), "redlock:a");
        assert_eq!(slot_key("redlock:a", 2), "{redlock:a}:slot:2");
    }

    #[test]
    fn bookkeeping_keys_are_recognised() {
        let owner = |name: &str| lock_of_internal_key(name);
        assert_eq!(owner("{redlock:a}:fence").as_deref(), Some("redlock:a"));
        assert_eq!(owner("{redlock:a}:slot:3").as_deref(), Some("redlock:a"));
        assert_eq!(
            owner("{redlock:a}:queue:alive").as_deref(),
            Some("redlock:a")
        );
        assert_eq!(
            owner("redlock:job{a}:fence").as_deref(),
            Some("redlock:job{a}")
        );
        assert_eq!(
            owner("redlock:job{a}:slot:2").as_deref(),
            Some("redlock:job{a}")
        );
        assert_eq!(
            owner("redlock:job{a}:limit").as_deref(),
            Some("redlock:job{a}")
        );
        // Locks whose names merely look like that.
        assert_eq!(owner("redlock:a:fence"), None);
        assert_eq!(owner("redlock:job{a}:slot:1"), None);
        assert_eq!(owner("redlock:deploy"), None);
    }

    #[test]
    fn identities_are_read_back() {
        let request = request("x");
        let value = format!("{}{}", request.identity(), request.metadata);
        assert_eq!(identity_in(&value), request.identity());
        assert_eq!(identity_in("someone else's"), "someone else's");
        assert_eq!(identity_in("{\"token\":\"a\""), "{\"token\":\"a\"");
    }

    #[test]
    fn json_escapes_control_characters() {
        assert_eq!(json_string("a\u{1}b"), r#""a\u0001b""#);
    }
}
