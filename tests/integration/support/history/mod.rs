//! The history checker: every protected command in the fault tests records its own critical
//! section in a shared file, and this module reads the file back and fails on any two
//! sections that overlap, printing both. It judges only what the commands recorded; it knows
//! nothing of Redis or of how redlock-run works.
//!
//! # The file
//! One event per line, each appended with `O_APPEND` in a single write, so lines from
//! concurrent writers never interleave:
//! - `start <ns> <id>`: written by the command as it enters its critical section;
//! - `end <ns> <id>`: written by the command as it leaves it;
//! - `dead <ns> <id>`: written by this module's watcher, never by a command, at the moment it
//!   found the process group of a section without an `end` gone.
//!
//! `<ns>` is `CLOCK_REALTIME` in nanoseconds: `date +%s%N` in the shell, `SystemTime` here.
//! Writers and checker share one machine and so one clock. `<id>` is
//! `<label>-<token prefix>.<pid>`: unique per run (the token prefix) and naming the shell that
//! runs the section, which is the leader of the command's process group (redlock-run puts the
//! command in a group of its own).
//!
//! # Sections that never end
//! A command killed with SIGKILL, or by a SIGTERM it does not trap, writes no `end`. Its
//! section is taken to last until the first moment its work was certainly over:
//! - the watcher's `dead` line: the first poll that found the shell *and every other live
//!   process of its group* gone. The group, because the shell's children (a foreground job, a
//!   pipeline, a `sleep`) carry on its work and may outlive a killed shell;
//! - failing that, the moment of the check, the end of the test: a section still running
//!   then, or whose process could not be watched, counts as running all along.
//!
//! Both ends lie at or after the true end, never before it: an unterminated section can only
//! be made longer. The checker may therefore report an overlap that was in truth shorter by up
//! to one poll of the watcher ([`POLL`], plus scheduling delay), but never miss one. A `dead`
//! line for a section that did write its `end` (the watcher can read the file a moment before
//! the `end` lands) is ignored: the command's own `end` is exact.
//!
//! A recorded section starts when the command writes `start`, after it was spawned, and ends
//! when it writes `end`, before it exits: the checker holds the commands to what they claim
//! to protect, which is what a user's job would rely on.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod watcher;

pub use watcher::History;

/// How often the watcher looks for sections whose processes are gone.
pub const POLL: Duration = Duration::from_millis(2);

/// Now, as nanoseconds of `CLOCK_REALTIME` (the clock `date +%s%N` reads).
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos() as i64
}

/// Milliseconds, for messages.
pub fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

// ---------------------------------------------------------------------------------------------
// Records and intervals: pure functions, tested in `tests`

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Start,
    End,
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub ns: i64,
    pub id: String,
}

/// Parses one line; `None` for anything that is not `<kind> <ns> <id>`.
fn parse_line(line: &str) -> Option<Record> {
    let mut fields = line.split_whitespace();
    let kind = match fields.next()? {
        "start" => Kind::Start,
        "end" => Kind::End,
        "dead" => Kind::Dead,
        _ => return None,
    };
    let ns = fields.next()?.parse().ok()?;
    let id = fields.next()?.to_string();
    if fields.next().is_some() {
        return None;
    }
    Some(Record { kind, ns, id })
}

/// Parses a whole history; a malformed line is an error (writes are atomic, so it would be a
/// bug in the test's command).
pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            parse_line(line).ok_or_else(|| format!("history line {}: malformed: {line:?}", n + 1))
        })
        .collect()
}

/// How a section's end is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The command wrote `end`.
    Recorded,
    /// No `end`: the watcher saw its process group gone.
    SeenDead,
    /// No `end` and not seen dead: lasts until the end of the test.
    Open,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    pub id: String,
    pub start: i64,
    pub end: i64,
    pub ending: Ending,
}

impl Interval {
    pub fn label(&self) -> &str {
        self.id.split(['-', '.']).next().unwrap_or(&self.id)
    }

    /// The pid in `<label>-<token>.<pid>`, if there is one.
    pub fn pid(&self) -> Option<i32> {
        pid_of(&self.id)
    }
}

fn pid_of(id: &str) -> Option<i32> {
    id.rsplit_once('.')?.1.parse().ok()
}

/// Pairs each `start` with its `end` (or `dead`, or `end_of_test`), in order of start.
pub fn intervals(records: &[Record], end_of_test: i64) -> Result<Vec<Interval>, String> {
    /// The times of a section's start, end and death notice, as far as recorded.
    #[derive(Default)]
    struct Seen {
        start: Option<i64>,
        end: Option<i64>,
        dead: Option<i64>,
    }
    let mut by_id: BTreeMap<&str, Seen> = BTreeMap::new();
    for record in records {
        let seen = by_id.entry(&record.id).or_default();
        let slot = match record.kind {
            Kind::Start => &mut seen.start,
            Kind::End => &mut seen.end,
            Kind::Dead => &mut seen.dead,
        };
        if slot.is_some() {
            return Err(format!(
                "{:?} recorded twice for {}",
                record.kind, record.id
            ));
        }
        *slot = Some(record.ns);
    }
    let mut out = Vec::with_capacity(by_id.len());
    for (id, Seen { start, end, dead }) in by_id {
        let start = start.ok_or_else(|| format!("{id}: an end or death without a start"))?;
        let (end, ending) = match (end, dead) {
            (Some(end), _) => (end, Ending::Recorded),
            (None, Some(dead)) => (dead, Ending::SeenDead),
            (None, None) => (end_of_test.max(start), Ending::Open),
        };
        if end < start {
            return Err(format!("{id}: ends at {end}, before its start at {start}"));
        }
        out.push(Interval {
            id: id.to_string(),
            start,
            end,
            ending,
        });
    }
    out.sort_by_key(|interval| (interval.start, interval.end));
    Ok(out)
}

/// Two sections that were both running for `ns` nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    pub first: Interval,
    pub second: Interval,
    pub ns: i64,
}

impl Overlap {
    pub fn involves(&self, label: &str) -> bool {
        self.first.label() == label || self.second.label() == label
    }
}

/// Every pair of intervals that share a moment. Touching ends (one ends at the nanosecond the
/// other starts) do not overlap.
pub fn overlaps(sorted: &[Interval]) -> Vec<Overlap> {
    let mut found = Vec::new();
    for (i, first) in sorted.iter().enumerate() {
        for second in sorted[i + 1..]
            .iter()
            .take_while(|second| second.start < first.end)
        {
            found.push(Overlap {
                first: first.clone(),
                second: second.clone(),
                ns: first.end.min(second.end) - second.start,
            });
        }
    }
    found
}

/// The outcome of one check: every section and every overlap.
#[derive(Debug)]
pub struct Checked {
    pub intervals: Vec<Interval>,
    pub overlaps: Vec<Overlap>,
    /// Time zero for printed times: the first start, or the check itself.
    origin: i64,
}

impl Checked {
    pub fn from_records(records: &[Record], end_of_test: i64) -> Result<Checked, String> {
        let intervals = intervals(records, end_of_test)?;
        let overlaps = overlaps(&intervals);
        let origin = intervals.first().map_or(end_of_test, |first| first.start);
        Ok(Checked {
            intervals,
            overlaps,
            origin,
        })
    }

    /// The sections whose label (the part of the id before `-`) is `label`.
    pub fn labelled(&self, label: &str) -> Vec<&Interval> {
        self.intervals
            .iter()
            .filter(|interval| interval.label() == label)
            .collect()
    }

    /// Fails the test on any overlap, printing both sections of each.
    #[track_caller]
    pub fn assert_no_overlap(&self) -> &Checked {
        assert!(
            self.overlaps.is_empty(),
            "{} overlapping pairs of critical sections:\n{}\nfull history:\n{}",
            self.overlaps.len(),
            self.describe_overlaps(),
            self.describe()
        );
        self
    }

    /// Fails unless every section wrote its own `end`.
    #[track_caller]
    pub fn assert_all_recorded(&self) -> &Checked {
        let unended: Vec<_> = self
            .intervals
            .iter()
            .filter(|interval| interval.ending != Ending::Recorded)
            .collect();
        assert!(
            unended.is_empty(),
            "sections without an end: {unended:?}\n{}",
            self.describe()
        );
        self
    }

    #[track_caller]
    pub fn assert_count(&self, expected: usize) -> &Checked {
        assert_eq!(
            self.intervals.len(),
            expected,
            "number of critical sections in the history\n{}",
            self.describe()
        );
        self
    }

    /// Each overlap, both sections with their times.
    pub fn describe_overlaps(&self) -> String {
        let mut out = String::new();
        for overlap in &self.overlaps {
            let _ = writeln!(out, "overlap of {:.1}ms between", ms(overlap.ns));
            for interval in [&overlap.first, &overlap.second] {
                let _ = writeln!(out, "  {}", self.describe_one(interval));
            }
        }
        out
    }

    /// Every section, one line each, times relative to the first start.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for interval in &self.intervals {
            let _ = writeln!(out, "  {}", self.describe_one(interval));
        }
        if self.intervals.is_empty() {
            out.push_str("  (no sections)\n");
        }
        out
    }

    fn describe_one(&self, interval: &Interval) -> String {
        let ending = match interval.ending {
            Ending::Recorded => "end",
            Ending::SeenDead => "seen dead",
            Ending::Open => "still open at the check",
        };
        format!(
            "{:<32} {:>10.1}ms .. {:>10.1}ms ({ending}), {:.1}ms",
            interval.id,
            ms(interval.start - self.origin),
            ms(interval.end - self.origin),
            ms(interval.end - interval.start)
        )
    }
}

#[cfg(test)]
mod tests;
