//! A lock value: what a holder writes after its identity (`{"token":"…"`) and how it is
//! read back ([`Holder`]), and the JSON pieces both take. Not the keys it is stored under,
//! nor the request that carries it (`layout`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// This process as a JSON object, `{"host":…,"pid":…,"program":"redlock-run"}`: who
/// forced a release (`release --force`), in the lock's history.
pub fn process_metadata() -> String {
    format!(
        "{{\"host\":{},\"pid\":{},\"program\":\"redlock-run\"}}",
        json_string(&hostname()),
        std::process::id()
    )
}

/// Who wrote a lock value, the same on every node: its identity `{"token":"…"` for a value
/// of ours, the whole value for anyone else's.
pub fn identity_in(value: &[u8]) -> &[u8] {
    let end = value.windows(2).position(|pair| pair == b"\",");
    match end {
        Some(end) if value.starts_with(b"{\"token\":\"") => &value[..=end],
        _ => value,
    }
}

pub(super) fn identity_of(token: &str) -> String {
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
    pub fn parse(value: &[u8]) -> Option<Holder> {
        let serde_json::Value::Object(fields) = serde_json::from_slice(value).ok()? else {
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
pub(super) fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A JSON string literal; a label may contain anything.
pub(super) fn json_string(text: &str) -> String {
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

pub(super) fn hostname() -> String {
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
