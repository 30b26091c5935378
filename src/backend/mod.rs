//! How a lock is held in Redis, behind one small interface. This is the only place that knows
//! keys, values, scripts and channels; the rest of the program sees `LockBackend` and never a
//! Redis connection. It knows nothing of processes or signals.
//!
//! A lock is one string key. Its value starts with the holder's identity, `{"token":"<uuid>"`,
//! and goes on with metadata (host, pid, command, start time) for people and later tools:
//! `{"token":"…","host":"web-3","pid":4242,"cmd":"./deploy.sh","since":"2026-…Z","since_ms":…}`.
//! Every script compares the leading identity bytes, so a key whose value we did not write
//! (another holder's, another tool's, another application's hash) is never renewed or deleted.

pub mod single;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;

/// Waiters listen on this channel prefix + the full key for a release.
pub const RELEASE_CHANNEL_PREFIX: &str = "redlock-run:released:";

/// What we want to hold: the key, for how long, and the value that says it is ours.
#[derive(Debug, Clone)]
pub struct LockRequest {
    pub key: String,
    pub token: String,
    /// The full value written to the key: identity then metadata.
    pub value: String,
    pub ttl: Duration,
}

impl LockRequest {
    /// A new request with a fresh 128-bit random token and this process's metadata.
    pub fn new(key: String, ttl: Duration, command_line: &str) -> LockRequest {
        let token = uuid::Uuid::new_v4().to_string();
        let now = SystemTime::now();
        let since_ms = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis());
        let value = format!(
            "{identity},\"host\":{host},\"pid\":{pid},\"cmd\":{cmd},\"since\":\"{since}\",\"since_ms\":{since_ms}}}",
            identity = identity_of(&token),
            host = json_string(&hostname()),
            pid = std::process::id(),
            cmd = json_string(command_line),
            since = humantime::format_rfc3339_seconds(now),
        );
        LockRequest {
            key,
            token,
            value,
            ttl,
        }
    }

    /// The leading bytes of the value that identify this holder.
    pub fn identity(&self) -> String {
        identity_of(&self.token)
    }

    pub fn release_channel(&self) -> String {
        format!("{RELEASE_CHANNEL_PREFIX}{}", self.key)
    }
}

fn identity_of(token: &str) -> String {
    format!("{{\"token\":\"{token}\"")
}

/// The result of one attempt to take the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Ours. The lease runs for the TTL from `sent_at` at the earliest: the moment the
    /// successful command left this machine, before Redis could start the clock.
    Acquired { sent_at: Instant },
    /// Someone else holds it, for `holder_ttl` more at most if they do not renew; `None`
    /// when the key never expires (not a lock of ours, or a holder that set no TTL).
    Busy { holder_ttl: Option<Duration> },
}

/// The result of one renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Extended,
    /// The key is gone or holds someone else's value: the lock is lost for sure.
    NotOurs,
}

/// What the subscription to release notices reports.
#[derive(Debug)]
pub enum Notice {
    /// A holder released the lock: try now.
    Released,
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
}

impl Subscription {
    pub fn new() -> Subscription {
        Subscription {
            stopped: Arc::new(AtomicBool::new(false)),
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
    }
}

/// A lock in some Redis deployment. Each call is bounded in time: by the configured Redis
/// timeout, and by `deadline` where one is given.
pub trait LockBackend: Send {
    /// One attempt to take the lock. Errors are transport or server failures.
    fn try_acquire(&mut self) -> Result<Attempt>;

    /// Extend the lease, giving up at `deadline`.
    fn renew(&mut self, deadline: Instant) -> Result<Renewal>;

    /// Delete the lock if it is still ours and wake the waiters; `Ok(false)` when it was not
    /// ours any more. Gives up at `deadline`.
    fn release(&mut self, deadline: Instant) -> Result<bool>;

    /// Subscribe to release notices, passed to `sink` as they come. Returns once the
    /// subscription is active, so a release after this call returns is never missed.
    fn subscribe(&mut self, sink: NoticeSink) -> Result<Subscription>;

    /// Where the lock lives, safe to print.
    fn describe(&self) -> &str;
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

    #[test]
    fn value_starts_with_identity() {
        let request = LockRequest::new("k".into(), Duration::from_secs(1), "echo \"hi\"\n");
        assert!(request.value.starts_with(&request.identity()));
        assert_eq!(request.token.len(), 36);
        assert!(request.value.contains(r#""cmd":"echo \"hi\"\n""#));
        assert!(request.value.ends_with('}'));
    }

    #[test]
    fn tokens_differ() {
        let a = LockRequest::new("k".into(), Duration::from_secs(1), "x");
        let b = LockRequest::new("k".into(), Duration::from_secs(1), "x");
        assert_ne!(a.token, b.token);
    }

    #[test]
    fn json_escapes_control_characters() {
        assert_eq!(json_string("a\u{1}b"), r#""a\u0001b""#);
    }
}
