//! Who holds a lock, said in one line for people: `web-3 pid 4242 `deploy.sh` (v1.2) for
//! 3m12s`. The value is read back by `backend::layout`; this is only its wording, for the
//! waiting messages and for `status`, `list` and `release`.

use std::fmt;
use std::time::Duration;

use crate::backend::Holder;
use crate::report::escape;

/// Every text in a holder's value came from outside (another host, or anyone who can write
/// to Redis): control characters are escaped, so that it can neither forge lines nor send
/// escape sequences to the reader's terminal.
impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = self.host.as_deref().unwrap_or("unknown host");
        f.write_str(&escape(host))?;
        if let Some(pid) = self.pid {
            write!(f, " pid {pid}")?;
        }
        if let Some(program) = &self.program {
            write!(f, " `{}`", escape(program))?;
        }
        if let Some(label) = &self.label {
            write!(f, " ({})", escape(label))?;
        }
        match self.age() {
            Some(Ok(held_for)) => {
                let seconds = Duration::from_secs(held_for.as_secs());
                write!(f, " for {}", humantime::format_duration(seconds))?;
            }
            Some(Err(ahead)) => {
                let seconds = Duration::from_secs(ahead.as_secs());
                write!(
                    f,
                    " since {} in the future of this machine's clock (clocks differ, or a \
                     value redlock-run did not write)",
                    humantime::format_duration(seconds)
                )?;
            }
            None => {}
        }
        Ok(())
    }
}

impl Holder {
    /// How long it has held the lock, by this machine's clock; `Err` with how far ahead its
    /// start lies when that is in the future by more than clocks may differ (see
    /// `counters::age`). `None` when the value says nothing of when.
    pub fn age(&self) -> Option<Result<Duration, Duration>> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |now| now.as_millis() as u64);
        Some(crate::backend::counters::age(now_ms, self.since_ms?))
    }
}

/// One line about whoever holds a value: the holder, or "an unknown holder" for a value
/// redlock-run did not write.
pub fn describe(value: Option<&[u8]>) -> String {
    match value.and_then(Holder::parse) {
        Some(holder) => holder.to_string(),
        None => String::from("an unknown holder (a value redlock-run did not write)"),
    }
}

/// The newer `--supersede` run that ended a wait, from its value: `web-3 pid 4242
/// `deploy.sh` (v1.2)`, or "a newer run" when the value cannot be read.
pub fn newer_run(value: Option<&[u8]>) -> String {
    match value.and_then(Holder::parse) {
        // Its start time says nothing useful here: it has not held the lock.
        Some(holder) => Holder {
            since_ms: None,
            ..holder
        }
        .to_string(),
        None => String::from("a newer run"),
    }
}

/// The `--replace` run that asked to take over, from its request (a lock value without a
/// fence): its start time says nothing useful here either, as it has not held the lock.
pub fn replacing_run(value: &[u8]) -> String {
    match Holder::parse(value) {
        Some(holder) => Holder {
            since_ms: None,
            ..holder
        }
        .to_string(),
        None => String::from("a run of another version or tool"),
    }
}

/// 10000-01-01T00:00:00Z, in seconds since the epoch: the first instant RFC 3339 cannot write.
pub(crate) const LAST_RFC3339_SECOND: u64 = 253_402_300_800;

/// Who did the work a `--once` or `--once-per` record holds (`<when, server ms> <that
/// holder's value>`), and when: `at 2026-11-25T03:00:01Z by web-3 (nightly report)`, and
/// that time in ms since the epoch by the server's clock.
pub fn done_by(record: &[u8]) -> (Option<u64>, String) {
    let (when, value) = match record.iter().position(|&byte| byte == b' ') {
        Some(space) => (&record[..space], &record[space + 1..]),
        None => (record, &[][..]),
    };
    let when: Option<u64> = std::str::from_utf8(when)
        .ok()
        .and_then(|when| when.parse().ok());
    // RFC 3339 ends with year 9999 (humantime's Display then fails, and `format!` would
    // panic): a time past it, or past what the clock can hold, is not a time we can name.
    let at = when
        .and_then(|ms| std::time::UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
        .filter(|&time| time < std::time::UNIX_EPOCH + Duration::from_secs(LAST_RFC3339_SECOND))
        .map_or_else(
            || String::from("at an unknown time"),
            |time| format!("at {}", humantime::format_rfc3339_seconds(time)),
        );
    let by = match Holder::parse(value) {
        Some(holder) => {
            let host = escape(holder.host.as_deref().unwrap_or("an unknown host")).into_owned();
            match &holder.label {
                Some(label) => format!("{host} ({})", escape(label)),
                None => host,
            }
        }
        None => String::from("an unknown holder"),
    };
    (when, format!("{at} by {by}"))
}

/// Whether `value` is a shared group's (`--shared`): its token ends with `:shared`.
fn is_shared_group(value: &[u8]) -> bool {
    Holder::parse(value)
        .and_then(|holder| holder.token)
        .is_some_and(|token| token.ends_with(":shared"))
}

/// What stands between a waiter and the lock, as the last attempt found it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Blocker {
    /// One holder's value, when a slot is held by a string value.
    pub holder: Option<Vec<u8>>,
    /// With `--fair`: waiters queued before this one.
    pub ahead: u32,
}

impl Blocker {
    /// `held by web-3 pid 4242 …`, or, for a fair waiter with free slots but others queued
    /// first, `free, but 2 waiters are ahead in the fair queue`.
    pub fn phrase(&self) -> String {
        match (&self.holder, self.ahead) {
            (None, 1) => String::from("free, but 1 waiter is ahead in the fair queue"),
            (None, ahead) if ahead > 1 => {
                format!("free, but {ahead} waiters are ahead in the fair queue")
            }
            // --shared: kept out by an exclusive run queued first (acquire_shared.lua).
            (Some(holder), _) if holder.starts_with(br#"{"waiting":"exclusive","#) => format!(
                "kept for an exclusive run that is waiting: {}",
                newer_run(Some(holder))
            ),
            // A shared group's value (`--shared`): its first share's metadata.
            (Some(holder), _) if is_shared_group(holder) => format!(
                "held by shared holders (the first: {})",
                describe(Some(holder))
            ),
            (holder, _) => format!("held by {}", describe(holder.as_deref())),
        }
    }

    /// What a change of is worth a new line: another holder (by token), or the queue.
    pub fn identity(&self) -> (Option<String>, bool) {
        let token = self
            .holder
            .as_deref()
            .and_then(Holder::parse)
            .and_then(|holder| holder.token);
        (token, self.holder.is_none() && self.ahead > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_record_dated_past_year_9999_names_no_time_and_does_not_panic() {
        for when in [
            "253402300799999",
            "253402300800000",
            "999999999999999",
            "18446744073709551615",
        ] {
            let record = format!(r#"{when} {{"token":"x"}}"#);
            let (ms, line) = done_by(record.as_bytes());
            assert_eq!(ms, when.parse().ok());
            assert!(line.starts_with("at "), "{line}");
        }
        let (_, line) = done_by(b"253402300800000 junk");
        assert_eq!(line, "at an unknown time by an unknown holder");
        let (_, line) = done_by(b"253402300799999 junk");
        assert!(line.starts_with("at 9999-12-31T23:59:59Z"), "{line}");
    }

    proptest! {
        #[test]
        fn done_by_takes_any_bytes(record in proptest::collection::vec(any::<u8>(), 0..64), ms in any::<u64>()) {
            done_by(&record);
            let mut dated = ms.to_string().into_bytes();
            dated.push(b' ');
            dated.extend(&record);
            done_by(&dated);
        }
    }

    #[test]
    fn a_replacing_run_is_named_in_one_line() {
        let request = br#"{"token":"t","host":"web\n2","pid":811,"program":"report.sh","label":"v2","since_ms":5}"#;
        let line = replacing_run(request);
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(line.contains("pid 811") && line.contains("(v2)"), "{line}");
        assert_eq!(
            replacing_run(b"foreign"),
            "a run of another version or tool"
        );
    }

    #[test]
    fn reads_what_redlock_run_writes() {
        let value = r#"{"token":"t-1","fence":7,"host":"web-3","pid":4242,"program":"deploy.sh","label":"prod","since":"2026-01-01T00:00:00Z","since_ms":1000,"ttl_ms":30000,"limit":1}"#;
        let holder = Holder::parse(value.as_bytes()).unwrap();
        assert_eq!(holder.token.as_deref(), Some("t-1"));
        assert_eq!(holder.fence, Some(7));
        assert_eq!(holder.pid, Some(4242));
        let line = holder.to_string();
        assert!(
            line.starts_with("web-3 pid 4242 `deploy.sh` (prod) for "),
            "{line}"
        );
    }

    #[test]
    fn what_others_wrote_cannot_reach_the_terminal() {
        let value = "{\"token\":\"t\",\"host\":\"h\\u001b[2J\",\"program\":\"a\\nb\",\
                     \"label\":\"\\r\\u009b\"}";
        let line = Holder::parse(value.as_bytes()).unwrap().to_string();
        assert_eq!(line, "h\\x1b[2J `a\\nb` (\\r\\u{9b})");
        let forged = Holder {
            since_ms: Some(u64::MAX),
            ..Holder::parse(value.as_bytes()).unwrap()
        };
        assert_eq!(
            forged.held_for(),
            Some(Duration::ZERO),
            "a holder from the future"
        );
        // Named when shown, not "for 0s" (issue 30).
        let shown = forged.to_string();
        assert!(shown.contains(" in the future of "), "{shown}");
        assert!(!shown.contains(" for "), "{shown}");
    }

    #[test]
    fn a_queue_is_not_a_holder() {
        let queued = Blocker {
            holder: None,
            ahead: 2,
        };
        assert_eq!(
            queued.phrase(),
            "free, but 2 waiters are ahead in the fair queue"
        );
        let foreign = Blocker {
            holder: Some(b"thief".to_vec()),
            ahead: 0,
        };
        assert!(foreign.phrase().starts_with("held by an unknown holder"));
    }

    #[test]
    fn other_values_are_unknown() {
        assert_eq!(Holder::parse(b"thief"), None);
        assert_eq!(Holder::parse(br#"{"host":"x"}"#), None);
        assert_eq!(Holder::parse(b"{\"token\":\"\xff\"}"), None, "not UTF-8");
        assert!(describe(Some(b"thief")).starts_with("an unknown holder"));
        assert!(describe(None).starts_with("an unknown holder"));
    }

    fn text() -> impl Strategy<Value = Option<String>> {
        proptest::option::of("\\PC{0,12}|.{0,12}|[\n\r\u{1b}\u{9b}\u{85}]{1,3}")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Whatever a value holds, its holder is said on one line of plain text.
        #[test]
        fn any_holder_is_one_plain_line(
            token in text(), host in text(), program in text(), label in text(),
            pid in proptest::option::of(any::<u64>()),
            since_ms in proptest::option::of(any::<u64>()),
            fence in proptest::option::of(any::<u64>()),
        ) {
            let holder = Holder { token, host, pid, program, label, since_ms, fence, limit: None };
            let line = holder.to_string();
            prop_assert!(!line.chars().any(char::is_control), "{:?}", line);
        }

        #[test]
        fn any_value_is_described_on_one_line(value in any::<Vec<u8>>(), ahead in any::<u32>()) {
            let line = describe(Some(&value));
            prop_assert!(!line.chars().any(char::is_control), "{:?}", line);
            let blocker = Blocker { holder: Some(value), ahead };
            prop_assert!(!blocker.phrase().chars().any(char::is_control));
        }
    }
}
