//! `metrics`: every lock under the prefix in the Prometheus text exposition format
//! (version 0.0.4), for node_exporter's textfile collector or anything that serves a file.
//! What is counted, and how a quorum's nodes are merged, is `backend::counters`'; this
//! module owns the names, the help texts and the format: each family's `# HELP` and
//! `# TYPE` once, its samples together, one per lock (and reason), labelled with the name
//! given to `-k`.
//!
//! Decisions the format leaves open: a lock's name that is not UTF-8 becomes text with each
//! byte that is not written `\xNN` and each backslash doubled, and its samples carry
//! `key_escaped="true"`, so that no two locks ever share a series; the holder's age is
//! absent while the lock is free, and the last success's time while no run has succeeded
//! (a 0 would read as "just now" or "1970"). There is no `up` gauge: a failure to read
//! prints nothing on stdout and exits 125, so a textfile written through a rename keeps its
//! last good content, and node_exporter's `node_textfile_mtime_seconds` shows its age.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::backend::counters::{age, LockCounters, NodeCounters};
use crate::backend::inspect::{Inspector, LockView, Verdict};
use crate::backend::{Holder, Key};
use crate::describe::print;
use crate::exit::Outcome;
use crate::report;

/// Prints the exposition of every lock under `prefix`.
pub fn metrics(inspector: &mut Inspector, prefix: &Key) -> Result<Outcome> {
    let names = super::lock_names(inspector, prefix, true)?;
    let views = inspector.read_all(&names);
    let counters = inspector.counters(&names);
    for nodes in &counters {
        warn_notes(nodes);
    }
    print(exposition(prefix, &views, &counters)?.trim_end())?;
    Ok(Outcome::Done)
}

/// The exposition of the locks read (`views`, and each one's `counters` per node), as
/// `metrics` prints it and `serve` answers `/metrics`: a lock with no holder, no counters
/// and nobody waiting is left out.
pub(crate) fn exposition(
    prefix: &Key,
    views: &[LockView],
    counters: &[Vec<Result<NodeCounters, String>>],
) -> Result<String> {
    let mut locks = Vec::with_capacity(views.len());
    for (view, nodes) in views.iter().zip(counters) {
        let merged = LockCounters::merge(nodes)
            .map_err(|err| anyhow::anyhow!("cannot read the counters of {}: {err}", view.key))?;
        if view.verdict() == Verdict::Unknown {
            bail!(
                "cannot read {}: too few Redis nodes answered to tell whether it is held",
                view.key
            );
        }
        let lock = Lock::new(prefix, view, merged);
        if lock.holders > 0 || lock.counters.recorded || lock.counters.waiters > 0 {
            locks.push(lock);
        }
    }
    Ok(render(&locks))
}

/// Warns once about each thing the nodes could not read of one lock's counters.
pub(crate) fn warn_notes(nodes: &[Result<NodeCounters, String>]) {
    let mut said: Vec<&str> = Vec::new();
    for note in nodes.iter().flatten().flat_map(|node| &node.notes) {
        if !said.contains(&note.as_str()) {
            report::warn(format_args!("{note}"));
            said.push(note);
        }
    }
}

/// What the exposition shows of one lock.
struct Lock {
    /// `key="…"` and, for a name that is not UTF-8, `key_escaped="true"`.
    labels: String,
    counters: LockCounters,
    holders: u64,
    oldest: Option<Oldest>,
}

impl Lock {
    fn new(prefix: &Key, view: &LockView, counters: LockCounters) -> Lock {
        let name = view
            .key
            .as_bytes()
            .strip_prefix(prefix.as_bytes())
            .unwrap_or(view.key.as_bytes());
        Lock {
            labels: key_labels(name),
            holders: holders(view),
            oldest: oldest_holder(view, &counters),
            counters,
        }
    }
}

/// How many hold the lock: on one server, its held slots; over a quorum, 1 when a holder
/// has a majority of the nodes.
pub(crate) fn holders(view: &LockView) -> u64 {
    if view.is_quorum() {
        return u64::from(matches!(view.verdict(), Verdict::Held { .. }));
    }
    view.nodes
        .first()
        .and_then(|node| node.slots.as_ref().ok())
        .map_or(0, |slots| slots.len() as u64)
}

/// The oldest current holder: how long it has held the lock, and who it is.
pub(crate) struct Oldest {
    /// 0 when `ahead`.
    pub age: Duration,
    /// Its start lies this far in the future of the server's clock (see
    /// `counters::age`): a clock stepped back, or a value redlock-run did not write.
    pub ahead: Option<Duration>,
    /// `host:pid`, or what is known of it.
    pub who: String,
}

/// The oldest current holder, by the server's clock: from when it recorded that it took
/// its slot (`{K}:stats`); for a holder that recorded nothing (recording off, an older
/// version), from the time in its value, by its own clock. None when free, or held only by
/// values that say nothing of when (another client's). A holder whose start lies in the
/// future comes first: it is to be named, not taken for one that just started.
pub(crate) fn oldest_holder(view: &LockView, counters: &LockCounters) -> Option<Oldest> {
    if holders(view) == 0 {
        return None;
    }
    if let Some((ahead, value)) = &counters.ahead {
        return Some(Oldest {
            age: Duration::ZERO,
            ahead: Some(Duration::from_millis(*ahead)),
            who: who(Holder::parse(value).as_ref()),
        });
    }
    if let Some((age, value)) = &counters.oldest {
        return Some(Oldest {
            age: Duration::from_millis(*age),
            ahead: None,
            who: who(Holder::parse(value).as_ref()),
        });
    }
    let slots: Vec<_> = match view.verdict() {
        Verdict::Held { identity, .. } if view.is_quorum() => {
            view.holder_slot(&identity).into_iter().collect()
        }
        _ => view
            .nodes
            .first()
            .and_then(|node| node.slots.as_ref().ok())
            .map(|slots| slots.iter().collect())
            .unwrap_or_default(),
    };
    slots
        .into_iter()
        .filter_map(|slot| {
            let holder = slot.holder.as_ref()?;
            let (age, ahead) = match age(counters.now_ms, holder.since_ms?) {
                Ok(age) => (age, None),
                Err(ahead) => (Duration::ZERO, Some(ahead)),
            };
            Some(Oldest {
                age,
                ahead,
                who: who(Some(holder)),
            })
        })
        .max_by_key(|oldest| (oldest.ahead, oldest.age))
}

/// `host:pid` of a holder, escaped.
fn who(holder: Option<&Holder>) -> String {
    let Some(holder) = holder else {
        return String::from("an unknown holder");
    };
    let host = report::escape(holder.host.as_deref().unwrap_or("unknown host"));
    match holder.pid {
        Some(pid) => format!("{host}:{pid}"),
        None => host.into_owned(),
    }
}

/// The labels that name a lock: `key="NAME"`, escaped as the format wants (backslash,
/// double quote, line feed). A name that is not UTF-8 is written with each byte that is not
/// as `\xNN` and each backslash doubled (so that two names never give the same text), and
/// `key_escaped="true"` tells it from a name that is that text.
fn key_labels(name: &[u8]) -> String {
    match std::str::from_utf8(name) {
        Ok(text) => format!("key=\"{}\"", label_value(text)),
        Err(_) => {
            let mut text = String::with_capacity(name.len() + 8);
            for chunk in name.utf8_chunks() {
                text.push_str(&chunk.valid().replace('\\', "\\\\"));
                for byte in chunk.invalid() {
                    let _ = write!(text, "\\x{byte:02x}");
                }
            }
            format!("key=\"{}\",key_escaped=\"true\"", label_value(&text))
        }
    }
}

/// A label value as the text format writes it.
fn label_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            ch => out.push(ch),
        }
    }
    out
}

/// Milliseconds as seconds, exactly: `1.500`.
pub(crate) fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// One metric family being written: its header, then its samples.
struct Family<'a> {
    out: &'a mut String,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &str, kind: &str, help: &str) -> Family<'a> {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        Family { out }
    }

    fn sample(&mut self, name: &str, labels: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.out, "{name}{{{labels}}} {value}");
    }
}

/// The whole exposition: the families in a fixed order, each lock's samples within them.
fn render(locks: &[Lock]) -> String {
    let mut out = String::new();
    type Value = fn(&Lock) -> Option<String>;
    let simple: [(&str, &str, &str, Value); 3] = [
        (
            "redlock_run_acquired_total",
            "counter",
            "Times the lock was taken.",
            |l| Some(l.counters.counters.acquired.to_string()),
        ),
        (
            "redlock_run_lost_total",
            "counter",
            "Times a holder lost the lock while its command ran.",
            |l| Some(l.counters.counters.lost.to_string()),
        ),
        (
            "redlock_run_expired_total",
            "counter",
            "Holders whose lease ended without a release (the holder died), found or not yet.",
            |l| Some((l.counters.counters.expired + l.counters.stale).to_string()),
        ),
    ];
    let (acquired, rest) = simple.split_at(1);
    for (name, kind, help, value) in acquired {
        family(&mut out, locks, name, kind, help, *value);
    }
    let mut not_acquired = Family::new(
        &mut out,
        "redlock_run_not_acquired_total",
        "counter",
        "Runs that did not take the lock and did not run their command, by reason.",
    );
    for lock in locks {
        let c = &lock.counters.counters;
        for (reason, count) in [
            ("busy", c.busy),
            ("timeout", c.timeout),
            ("superseded", c.superseded),
            ("already_done", c.already_done),
        ] {
            not_acquired.sample(
                "redlock_run_not_acquired_total",
                &format!("{},reason=\"{reason}\"", lock.labels),
                count,
            );
        }
    }
    for (name, kind, help, value) in rest {
        family(&mut out, locks, name, kind, help, *value);
    }
    for (name, help, sum, count) in [
        (
            "redlock_run_wait_seconds",
            "Time waited before taking the lock.",
            (|c| c.wait_ms_sum) as fn(&crate::backend::counters::Counters) -> u64,
            (|c| c.wait_count) as fn(&crate::backend::counters::Counters) -> u64,
        ),
        (
            "redlock_run_hold_seconds",
            "Time the lock was held, by ended holds.",
            |c| c.hold_ms_sum,
            |c| c.hold_count,
        ),
    ] {
        let mut family = Family::new(&mut out, name, "summary", help);
        for lock in locks {
            let c = &lock.counters.counters;
            family.sample(&format!("{name}_sum"), &lock.labels, seconds(sum(c)));
            family.sample(&format!("{name}_count"), &lock.labels, count(c));
        }
    }
    let gauges: [(&str, &str, Value); 5] = [
        ("redlock_run_holders", "Current holders of the lock.", |l| {
            Some(l.holders.to_string())
        }),
        (
            "redlock_run_waiters",
            "Runs queued waiting for the lock.",
            |l| Some(l.counters.waiters.to_string()),
        ),
        (
            "redlock_run_holder_age_seconds",
            "How long the oldest current holder has held the lock (absent when free; \
             negative when its start is recorded in the future of the server's clock).",
            |l| {
                let oldest = l.oldest.as_ref()?;
                Some(match oldest.ahead {
                    Some(ahead) => format!("-{}", seconds(ahead.as_millis() as u64)),
                    None => seconds(oldest.age.as_millis() as u64),
                })
            },
        ),
        (
            "redlock_run_last_success_timestamp_seconds",
            "When a run last succeeded (its command exited 0, the lock intact), Unix time.",
            |l| Some(seconds(l.counters.counters.last_success()?)),
        ),
        (
            "redlock_run_consecutive_skips",
            "Consecutive runs that skipped their command (busy, timed out, superseded; work found \
             already done is not a skip), since the last success.",
            |l| Some(l.counters.counters.skips.to_string()),
        ),
    ];
    for (name, help, value) in gauges {
        family(&mut out, locks, name, "gauge", help, value);
    }
    out
}

fn family(
    out: &mut String,
    locks: &[Lock],
    name: &str,
    kind: &str,
    help: &str,
    value: fn(&Lock) -> Option<String>,
) {
    let mut family = Family::new(out, name, kind, help);
    for lock in locks {
        if let Some(value) = value(lock) {
            family.sample(name, &lock.labels, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_label_values_that_never_collide() {
        assert_eq!(key_labels(b"job"), "key=\"job\"");
        assert_eq!(key_labels(b"a\"b\\c\nd"), "key=\"a\\\"b\\\\c\\nd\"");
        assert_eq!(
            key_labels(b"a\\\xff"),
            "key=\"a\\\\\\\\\\\\xff\",key_escaped=\"true\""
        );
        assert_ne!(key_labels(b"\\xff\xfe"), key_labels(b"\xff\xfe"));
    }

    #[test]
    fn milliseconds_are_exact_seconds() {
        assert_eq!(seconds(0), "0.000");
        assert_eq!(seconds(1500), "1.500");
        assert_eq!(seconds(u64::MAX), "18446744073709551.615");
    }
}
