//! `history`: a lock's last events, then (`--follow`) new ones as they come, one line each
//! (text, or a JSON object). The reading, and a quorum's merging, is
//! `backend::history`'s; this is only the wording. Every entry came from outside (any
//! client may write to the stream): a field that is missing or does not read as it should
//! is left out or named, never trusted, and all text is escaped as `status` escapes it.

use std::io::Write;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

use crate::backend::history::{Entry, History, Step};
use crate::backend::{shown, Deployment, Holder, Key};
use crate::exit::Outcome;
use crate::report;

/// What `history` was asked for.
pub struct Request<'a> {
    /// The lock's full key.
    pub key: &'a Key,
    /// How many past events (0 with `follow`: none).
    pub lines: usize,
    pub json: bool,
    pub follow: bool,
}

/// Exit 0 with events shown, 1 when there were none (and no `--follow`); a follower ends by
/// the signal that interrupts it (it installs no handler), or 125 when Redis stops
/// answering.
pub fn show(deployment: &Deployment, timeout: Duration, request: &Request<'_>) -> Result<Outcome> {
    let key = request.key;
    let mut history = History::open(deployment, timeout, key)?;
    let recent = history.recent(request.lines)?;
    for (display, err) in &recent.unread {
        report::warn(format_args!(
            "could not read the history of {key} on {display}: {err}"
        ));
    }
    for entry in &recent.events {
        if !emit(&render(entry, key, request.json))? {
            return Ok(Outcome::Done);
        }
    }
    if !request.follow {
        if recent.events.is_empty() {
            if !request.json {
                emit(&format!("no history for {key}"))?;
            }
            return Ok(Outcome::Free);
        }
        return Ok(Outcome::Done);
    }
    if stdout_goes_nowhere() {
        // As on a closed pipe: nobody reads what a follower would print.
        report::warn(format_args!(
            "not following the history of {key}: stdout is closed or /dev/null"
        ));
        return Ok(Outcome::Done);
    }
    let mut follower = history.follow();
    loop {
        match follower.next()? {
            Step::Events(events) => {
                for entry in &events {
                    if !emit(&render(entry, key, request.json))? {
                        return Ok(Outcome::Done);
                    }
                }
            }
            Step::NodeFailed { display, error } => report::warn(format_args!(
                "stopped following the history of {key} on {display}: {error}"
            )),
        }
    }
}

/// A line on stdout; `false` once stdout is closed (`| head`), which ends a follower.
fn emit(text: &str) -> Result<bool> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(err) => Err(err).context("cannot write to stdout"),
    }
}

/// Whether stdout goes nowhere: `/dev/null`, which is also what a closed stdout (`>&-`)
/// becomes, as Rust's runtime reopens closed standard descriptors on `/dev/null` before
/// `main`. A follower writing there would follow for ever, unheard.
fn stdout_goes_nowhere() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(null) = std::fs::metadata("/dev/null") else {
        return false;
    };
    let stdout = std::io::stdout();
    let Ok(fd) = stdout.as_fd().try_clone_to_owned() else {
        return true;
    };
    // The device, not the node: a container's /dev/null is a node of its own.
    std::fs::File::from(fd)
        .metadata()
        .is_ok_and(|out| out.file_type().is_char_device() && out.rdev() == null.rdev())
}

fn render(entry: &Entry, key: &Key, json: bool) -> String {
    let event = Event::read(entry);
    if json {
        event.json(key).to_string()
    } else {
        event.line()
    }
}

/// 10000-01-01T00:00:00Z in ms since the epoch: the first instant RFC 3339 cannot write.
const LAST_RFC3339_MS: u64 = 253_402_300_800_000;

/// A field meant to hold a number.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Number {
    Absent,
    Is(u64),
    /// Present, but not a number redlock-run would write: shown escaped.
    Not(String),
}

impl Number {
    fn read(value: Option<&[u8]>) -> Number {
        let Some(value) = value else {
            return Number::Absent;
        };
        let digits = !value.is_empty() && value.iter().all(u8::is_ascii_digit);
        match std::str::from_utf8(value)
            .ok()
            .and_then(|text| text.parse().ok())
        {
            Some(number) if digits => Number::Is(number),
            _ => Number::Not(shown(value)),
        }
    }
}

/// One entry as people and machines read it.
struct Event<'a> {
    entry: &'a Entry,
    /// The event's name, shown; `None` for an entry without one (not redlock-run's).
    name: Option<String>,
    fence: Number,
    exit_code: Number,
    waited_ms: Number,
    held_ms: Number,
    /// The run, when its `holder` reads as redlock-run writes it.
    holder: Option<Holder>,
    /// A `holder` field that does not read as one.
    holder_unread: bool,
    /// The run held (or asked for) a share of the lock (`--shared`): its value says so.
    shared: bool,
}

/// How a shared holder's value says so (`--shared`).
const SHARED_MODE: &[u8] = br#","mode":"shared","#;

impl<'a> Event<'a> {
    fn read(entry: &'a Entry) -> Event<'a> {
        let holder = entry.get("holder").and_then(Holder::parse);
        Event {
            entry,
            name: entry.get("event").map(shown),
            fence: Number::read(entry.get("fence")),
            exit_code: Number::read(entry.get("exit_code")),
            waited_ms: Number::read(entry.get("waited_ms")),
            held_ms: Number::read(entry.get("held_ms")),
            holder_unread: entry.get("holder").is_some() && holder.is_none(),
            shared: holder.is_some()
                && entry.get("holder").is_some_and(|value| {
                    value
                        .windows(SHARED_MODE.len())
                        .any(|window| window == SHARED_MODE)
                }),
            holder,
        }
    }

    /// The numeric fields by name.
    fn numbers(&self) -> [(&'static str, &Number); 4] {
        [
            ("fence", &self.fence),
            ("exit_code", &self.exit_code),
            ("waited_ms", &self.waited_ms),
            ("held_ms", &self.held_ms),
        ]
    }

    /// `2026-11-26T00:19:05.123Z released: fence 118, web-3 pid 4242 `deploy.sh` (v1.2),
    /// exit 0, held 3s 333ms`.
    fn line(&self) -> String {
        let time = self
            .time()
            .unwrap_or_else(|| format!("(unknown time, ID {})", report::escape(&self.entry.id)));
        let Some(name) = &self.name else {
            return format!(
                "{time} an entry redlock-run did not write: {}",
                self.fields()
            );
        };
        let mut parts = Vec::new();
        match &self.fence {
            Number::Absent => {}
            Number::Is(fence) => parts.push(format!("fence {fence}")),
            Number::Not(text) => parts.push(format!("fence \"{text}\" (not a number)")),
        }
        match (&self.holder, self.holder_unread) {
            (Some(holder), _) if self.shared => parts.push(format!("{} (shared)", run_of(holder))),
            (Some(holder), _) => parts.push(run_of(holder)),
            (None, true) => parts.push(String::from(
                "an unknown run (a value redlock-run did not write)",
            )),
            (None, false) => {}
        }
        let durations = [
            ("exit", &self.exit_code, false),
            ("waited", &self.waited_ms, true),
            ("held", &self.held_ms, true),
        ];
        for (what, number, is_ms) in durations {
            match number {
                Number::Absent => {}
                Number::Is(n) if is_ms => parts.push(format!(
                    "{what} {}",
                    report::duration(Duration::from_millis(*n))
                )),
                Number::Is(n) => parts.push(format!("{what} {n}")),
                Number::Not(text) => parts.push(format!("{what} \"{text}\" (not a number)")),
            }
        }
        if let Some(by) = self.entry.get("by") {
            parts.push(match name.as_str() {
                "forced" => format!("forced by {}", by_whom(by)),
                "expired" => format!("found by the run {}", shown(by)),
                _ => format!("by {}", by_whom(by)),
            });
        }
        if parts.is_empty() {
            format!("{time} {name}")
        } else {
            format!("{time} {name}: {}", parts.join(", "))
        }
    }

    /// The entry's fields, for one that is not an event of ours: `a="1", b="2"`, each value
    /// cut short.
    fn fields(&self) -> String {
        if self.entry.fields.is_empty() {
            return String::from("no fields");
        }
        let fields: Vec<String> = self
            .entry
            .fields
            .iter()
            .map(|(field, value)| format!("{}=\"{}\"", shown(cut(field)), shown(cut(value))))
            .collect();
        fields.join(", ")
    }

    /// RFC 3339, UTC, milliseconds, as the JSON logs write times.
    fn time(&self) -> Option<String> {
        let ms = self.entry.ms.filter(|&ms| ms < LAST_RFC3339_MS)?;
        let time = UNIX_EPOCH.checked_add(Duration::from_millis(ms))?;
        Some(humantime::format_rfc3339_millis(time).to_string())
    }

    fn json(&self, key: &Key) -> Value {
        let mut object = Map::new();
        object.insert("time".into(), json!(self.time()));
        object.insert("time_ms".into(), json!(self.entry.ms));
        object.insert("id".into(), json!(self.entry.id));
        object.insert("event".into(), json!(self.name));
        object.insert("key".into(), json!(key.to_string()));
        let mut ill_formed = Vec::new();
        for (name, number) in self.numbers() {
            match number {
                Number::Absent => {}
                Number::Is(n) => {
                    object.insert(name.into(), json!(n));
                }
                Number::Not(_) => ill_formed.push(name),
            }
        }
        if let Some(token) = self.entry.get("token") {
            object.insert("token".into(), json!(shown(token)));
        }
        if let Some(holder) = &self.holder {
            for (name, value) in [
                ("host", json!(holder.host)),
                ("pid", json!(holder.pid)),
                ("program", json!(holder.program)),
                ("label", json!(holder.label)),
            ] {
                if !value.is_null() {
                    object.insert(name.into(), value);
                }
            }
        }
        if self.shared {
            object.insert("mode".into(), json!("shared"));
        }
        if self.holder_unread {
            ill_formed.push("holder");
        }
        if let Some(by) = self.entry.get("by") {
            object.insert("by".into(), by_json(by));
        }
        if self.name.is_none() {
            let fields: Map<String, Value> = self
                .entry
                .fields
                .iter()
                .map(|(field, value)| (shown(field), json!(shown(value))))
                .collect();
            object.insert("fields".into(), Value::Object(fields));
        }
        if !ill_formed.is_empty() {
            object.insert("ill_formed".into(), json!(ill_formed));
        }
        Value::Object(object)
    }
}

/// One entry as `history --json` prints it, for `serve`.
pub(crate) fn event_json(entry: &Entry, key: &Key) -> Value {
    Event::read(entry).json(key)
}

/// A run's host, pid, program and label (its start time says nothing here).
fn run_of(holder: &Holder) -> String {
    Holder {
        since_ms: None,
        ..holder.clone()
    }
    .to_string()
}

/// Who forced a release: the forcing process's metadata (a JSON object), or the text as it
/// is.
fn by_whom(by: &[u8]) -> String {
    match serde_json::from_slice::<Value>(by) {
        Ok(Value::Object(fields)) => {
            let text = |name: &str| fields.get(name)?.as_str().map(str::to_string);
            run_of(&Holder {
                host: text("host"),
                pid: fields.get("pid").and_then(Value::as_u64),
                program: text("program"),
                label: text("label"),
                ..Holder::default()
            })
        }
        _ => format!("\"{}\"", shown(cut(by))),
    }
}

/// `by` in JSON: the forcing process's host, pid, program and label, or the text.
fn by_json(by: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(by) {
        Ok(Value::Object(fields)) => {
            let kept: Map<String, Value> = ["host", "pid", "program", "label"]
                .into_iter()
                .filter_map(|name| {
                    let value = fields.get(name)?;
                    let value = match value {
                        Value::String(text) => json!(text),
                        Value::Number(number) => json!(number.as_u64()?),
                        _ => return None,
                    };
                    Some((name.to_string(), value))
                })
                .collect();
            Value::Object(kept)
        }
        _ => json!(shown(by)),
    }
}

/// At most 200 bytes of a value from outside, for a line that stays readable.
fn cut(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.len().min(200)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(id: &str, ms: Option<u64>, fields: &[(&[u8], &[u8])]) -> Entry {
        Entry::for_tests(
            id,
            ms,
            fields
                .iter()
                .map(|(f, v)| (f.to_vec(), v.to_vec()))
                .collect(),
        )
    }

    const HOLDER: &[u8] = br#"{"token":"t1","fence":118,"host":"web-3","pid":4242,"program":"deploy.sh","label":"v1.2","since_ms":1}"#;

    #[test]
    fn a_release_is_one_line_with_its_numbers() {
        let entry = entry(
            "1764116345123-0",
            Some(1_764_116_345_123),
            &[
                (b"event", b"released"),
                (b"token", b"t1"),
                (b"fence", b"118"),
                (b"holder", HOLDER),
                (b"exit_code", b"0"),
                (b"held_ms", b"3333"),
            ],
        );
        let event = Event::read(&entry);
        assert_eq!(
            event.line(),
            "2025-11-26T00:19:05.123Z released: fence 118, web-3 pid 4242 `deploy.sh` (v1.2), \
             exit 0, held 3s 333ms"
        );
        let json = event.json(&Key::from("redlock:job"));
        assert_eq!(json["time"], "2025-11-26T00:19:05.123Z");
        assert_eq!(json["fence"], 118);
        assert_eq!(json["exit_code"], 0);
        assert_eq!(json["held_ms"], 3333);
        assert_eq!(json["host"], "web-3");
        assert_eq!(json["key"], "redlock:job");
        assert!(json.get("ill_formed").is_none(), "{json}");
    }

    #[test]
    fn a_fence_past_2_to_the_53_stays_exact() {
        let entry = entry(
            "1-0",
            Some(1),
            &[(b"event", b"acquired"), (b"fence", b"18446744073709551615")],
        );
        let json = Event::read(&entry).json(&Key::from("k")).to_string();
        assert!(json.contains("\"fence\":18446744073709551615"), "{json}");
    }

    #[test]
    fn ill_formed_and_foreign_entries_are_named_not_trusted() {
        let entry = entry(
            "1-0",
            Some(1),
            &[
                (b"event", b"lost\x1b[2J"),
                (b"fence", b"-3"),
                (b"held_ms", b"99999999999999999999999"),
                (b"holder", b"not json"),
            ],
        );
        let event = Event::read(&entry);
        let line = event.line();
        assert!(line.contains("lost\\x1b[2J"), "{line}");
        assert!(line.contains("fence \"-3\" (not a number)"), "{line}");
        assert!(line.contains("an unknown run"), "{line}");
        let json = event.json(&Key::from("k"));
        assert_eq!(json["ill_formed"], json!(["fence", "held_ms", "holder"]));
        let foreign = super::tests::entry("2-0", Some(2), &[(b"x\xff", b"y\n")]);
        let event = Event::read(&foreign);
        assert_eq!(
            event.line(),
            "1970-01-01T00:00:00.002Z an entry redlock-run did not write: x\\xff=\"y\\n\""
        );
        assert_eq!(event.json(&Key::from("k"))["event"], Value::Null);
    }

    #[test]
    fn a_time_past_year_9999_is_unknown() {
        let entry = entry(
            "18446744073709551615-0",
            Some(u64::MAX),
            &[(b"event", b"busy")],
        );
        let line = Event::read(&entry).line();
        assert!(
            line.starts_with("(unknown time, ID 18446744073709551615-0) busy"),
            "{line}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever another client wrote, an entry is one plain line, and valid JSON.
        #[test]
        fn any_entry_is_one_plain_line(
            ms in proptest::option::of(any::<u64>()),
            fields in proptest::collection::vec(
                (
                    prop_oneof![
                        Just(b"event".to_vec()), Just(b"fence".to_vec()),
                        Just(b"holder".to_vec()), Just(b"by".to_vec()),
                        Just(b"held_ms".to_vec()), Just(b"exit_code".to_vec()),
                        any::<Vec<u8>>(),
                    ],
                    prop_oneof![
                        any::<Vec<u8>>(),
                        "[0-9]{1,30}".prop_map(String::into_bytes),
                        Just(HOLDER.to_vec()),
                        Just(br#"{"host":"a\u001b","pid":-1}"#.to_vec()),
                    ],
                ),
                0..8,
            ),
        ) {
            let fields: Vec<(&[u8], &[u8])> =
                fields.iter().map(|(f, v)| (f.as_slice(), v.as_slice())).collect();
            let entry = entry("1-0", ms, &fields);
            let event = Event::read(&entry);
            let line = event.line();
            prop_assert!(!line.chars().any(char::is_control), "{:?}", line);
            let json = event.json(&Key::from("k")).to_string();
            prop_assert!(!json.contains('\n'));
            prop_assert!(serde_json::from_str::<Value>(&json).is_ok());
        }
    }
}
