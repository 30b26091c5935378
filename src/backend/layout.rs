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

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest lock name accepted, in bytes (the Redis key is the prefix plus this).
pub const MAX_KEY_LEN: usize = 1024;
/// The most holders `--limit` accepts; each is a key the acquire script looks at.
pub const MAX_LIMIT: u32 = 1000;
/// Longest `--label`, in bytes: what a holder shows its waiters stays small.
pub const MAX_LABEL_LEN: usize = 256;
/// The program's name is cut to this many bytes in the value (a file name is at most 255).
const MAX_PROGRAM_LEN: usize = 255;

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
    /// A new request with a fresh 128-bit random token and this process's metadata: the
    /// host, the pid, the program's name (never its arguments, which may hold secrets) and
    /// the holder's `label`, if it gave one.
    pub fn new(
        key: String,
        ttl: Duration,
        limit: u32,
        fair_heartbeat_timeout: Option<Duration>,
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

/// The fence counter of lock `key`.
pub fn fence_key(key: &str) -> String {
    sibling_key(key, ":fence")
}

/// The fair queue of lock `key` and its heartbeats.
pub fn queue_keys(key: &str) -> [String; 2] {
    [sibling_key(key, ":queue"), sibling_key(key, ":queue:alive")]
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

/// The metadata of one holder. Every field is optional: a value written by another version,
/// or by hand, may lack some.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holder {
    pub token: Option<String>,
    pub host: Option<String>,
    pub pid: Option<u64>,
    /// The program's name, without its arguments.
    pub program: Option<String>,
    /// What the holder wants waiters to see (`--label`).
    pub label: Option<String>,
    /// When it took the lock, in milliseconds since the Unix epoch (its own clock).
    pub since_ms: Option<u64>,
    pub fence: Option<u64>,
    pub limit: Option<u64>,
}

impl Holder {
    /// Reads a lock value; `None` when it is not a JSON object with a token, i.e. not
    /// written by redlock-run.
    pub fn parse(value: &str) -> Option<Holder> {
        let serde_json::Value::Object(fields) = serde_json::from_str(value).ok()? else {
            return None;
        };
        let text = |name: &str| fields.get(name)?.as_str().map(str::to_string);
        let number = |name: &str| fields.get(name)?.as_u64();
        let holder = Holder {
            token: text("token"),
            host: text("host"),
            pid: number("pid"),
            program: text("program"),
            label: text("label"),
            since_ms: number("since_ms"),
            fence: number("fence"),
            limit: number("limit"),
        };
        holder.token.is_some().then_some(holder)
    }

    /// How long it has held the lock, by this machine's clock (clocks may differ a little).
    pub fn held_for(&self) -> Option<Duration> {
        // A value from outside may hold any number: one past the clock's range is no time.
        let since = UNIX_EPOCH.checked_add(Duration::from_millis(self.since_ms?))?;
        Some(
            SystemTime::now()
                .duration_since(since)
                .unwrap_or(Duration::ZERO),
        )
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A JSON string literal; a label may contain anything.
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

    fn request(label: &str) -> LockRequest {
        LockRequest::new(
            "k".into(),
            Duration::from_secs(1),
            3,
            None,
            "job",
            Some(label),
        )
    }

    #[test]
    fn metadata_is_json_after_the_fence() {
        let request = request("echo \"hi\"\n");
        assert_eq!(request.token.len(), 36);
        assert!(request.metadata.starts_with(",\"host\":"));
        assert!(request
            .metadata
            .contains(r#""program":"job","label":"echo \"hi\"\n""#));
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
