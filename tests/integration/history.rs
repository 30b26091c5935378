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
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::{live_in_group, pid_alive, wait_until, TempDir};

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
// Records and intervals: pure functions, unit-tested below

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

// ---------------------------------------------------------------------------------------------
// The history file and its watcher

/// A history file in a test's directory, with a watcher thread that writes `dead` lines for
/// sections whose processes are gone without an `end`. The watcher stops on drop.
pub struct History {
    path: PathBuf,
    state: Arc<Mutex<Tail>>,
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
}

/// What the watcher has read of the file so far.
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
    /// Sections started and not yet ended or seen dead, with the pid from their id.
    open: BTreeMap<String, Option<i32>>,
}

impl History {
    /// An empty history at `dir/history`, watched from now on.
    pub fn new(dir: &TempDir) -> History {
        let path = dir.join("history");
        fs::write(&path, "").unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        let state = Arc::new(Mutex::new(Tail {
            path: path.clone(),
            offset: 0,
            partial: String::new(),
            open: BTreeMap::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (watched, stopped) = (Arc::clone(&state), Arc::clone(&stop));
        let watcher = thread::Builder::new()
            .name("history-watch".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    lock(&watched).sweep();
                    thread::sleep(POLL);
                }
            })
            .expect("starting the history watcher");
        History {
            path,
            state,
            stop,
            watcher: Some(watcher),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes an executable script that runs `body` as a recorded critical section: `start`
    /// on entry, `end` after `body` (whose status becomes the script's). A `body` that exits
    /// or is killed leaves the section unterminated, for the watcher to close. `label` names
    /// the section in the history and must be a word without `-` or `.`.
    pub fn section(&self, dir: &TempDir, label: &str, body: &str) -> PathBuf {
        assert!(
            !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric()),
            "label {label:?} must be alphanumeric"
        );
        let script = format!(
            "H='{history}'\n\
             ID=\"{label}-$(printf %.8s \"$REDLOCK_TOKEN\").$$\"\n\
             echo \"start $(date +%s%N) $ID\" >> \"$H\"\n\
             {body}\n\
             rc=$?\n\
             echo \"end $(date +%s%N) $ID\" >> \"$H\"\n\
             exit $rc",
            history = self.path.display()
        );
        dir.script(&format!("section-{label}"), &script)
    }

    /// Reads the history as it is now, closing unterminated sections per the module doc with
    /// the end of the test at this moment.
    pub fn check(&self) -> Checked {
        let mut tail = lock(&self.state);
        tail.sweep();
        let end_of_test = now_ns();
        let text = fs::read_to_string(&self.path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.path.display()));
        let checked = parse(&text)
            .and_then(|records| Checked::from_records(&records, end_of_test))
            .unwrap_or_else(|e| panic!("{e}\nhistory:\n{text}"));
        drop(tail);
        checked
    }

    /// Waits until the one section labelled `label` has ended, by its own `end` or seen
    /// dead, and returns it.
    #[track_caller]
    pub fn wait_closed(&self, label: &str, limit: Duration) -> Interval {
        let mut found = None;
        wait_until(limit, &format!("section {label:?} to end"), || {
            let checked = self.check();
            found = checked
                .labelled(label)
                .first()
                .filter(|interval| interval.ending != Ending::Open)
                .map(|interval| (*interval).clone());
            found.is_some()
        });
        found.expect("found when the wait ends")
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
    }
}

fn lock(state: &Mutex<Tail>) -> MutexGuard<'_, Tail> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Tail {
    /// Reads what was appended since the last look and notes starts and ends.
    fn read_new(&mut self) {
        let Ok(mut file) = fs::File::open(&self.path) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        let Ok(n) = file.read_to_end(&mut bytes) else {
            return;
        };
        self.offset += n as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        // A line being written can be seen half-done: keep the unfinished tail for next time.
        let complete = match self.partial.rfind('\n') {
            Some(last) => self.partial.drain(..=last).collect::<String>(),
            None => return,
        };
        for record in complete.lines().filter_map(parse_line) {
            match record.kind {
                Kind::Start => {
                    let pid = pid_of(&record.id);
                    self.open.insert(record.id, pid);
                }
                Kind::End | Kind::Dead => {
                    self.open.remove(&record.id);
                }
            }
        }
    }

    /// One look: any open section whose processes are all gone gets its `dead` line.
    fn sweep(&mut self) {
        self.read_new();
        let candidates: Vec<(String, i32)> = self
            .open
            .iter()
            .filter_map(|(id, pid)| Some((id.clone(), (*pid)?)))
            .collect();
        for (id, pid) in candidates {
            if section_alive(pid) {
                continue;
            }
            // It is gone; an `end` written just before it exited may have landed since the
            // last read: look again before declaring it dead.
            self.read_new();
            if !self.open.contains_key(&id) {
                continue;
            }
            let line = format!("dead {} {id}\n", now_ns());
            OpenOptions::new()
                .append(true)
                .open(&self.path)
                .and_then(|mut file| file.write_all(line.as_bytes()))
                .unwrap_or_else(|e| panic!("appending to {}: {e}", self.path.display()));
            self.open.remove(&id);
        }
    }
}

/// Whether the section run by shell `pid` may still be working: the shell lives, or some
/// process of its group (`pid` leads it) does.
fn section_alive(pid: i32) -> bool {
    pid_alive(pid) || !live_in_group(pid).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn records(text: &str) -> Vec<Record> {
        parse(text).expect("valid history")
    }

    #[test]
    fn disjoint_and_touching_sections_pass() {
        let history = records(
            "start 1000 a-1.10\nend 2000 a-1.10\n\
             start 2000 b-2.11\nend 3000 b-2.11\n\
             start 3500 c-3.12\nend 4000 c-3.12\n",
        );
        let checked = Checked::from_records(&history, 10_000).unwrap();
        assert_eq!(checked.intervals.len(), 3);
        assert!(checked.overlaps.is_empty(), "{:?}", checked.overlaps);
        checked.assert_no_overlap().assert_all_recorded();
    }

    #[test]
    fn an_overlap_is_found_with_both_sections() {
        let history = records(
            "start 1000 a-1.10\nstart 1500 b-2.11\nend 2000 a-1.10\nend 3000 b-2.11\n\
             start 5000 c-3.12\nend 6000 c-3.12\n",
        );
        let checked = Checked::from_records(&history, 10_000).unwrap();
        assert_eq!(checked.overlaps.len(), 1);
        let overlap = &checked.overlaps[0];
        assert_eq!(overlap.first.id, "a-1.10");
        assert_eq!(overlap.second.id, "b-2.11");
        assert_eq!(overlap.ns, 500);
        // What assert_no_overlap prints: both sections, with their times.
        let text = checked.describe_overlaps();
        assert!(text.contains("overlap of 0.0ms between"), "{text}");
        assert!(text.contains("a-1.10") && text.contains("b-2.11"), "{text}");
    }

    #[test]
    fn a_section_inside_another_overlaps_for_its_whole_length() {
        let history =
            records("start 0 a-1.10\nstart 100 b-2.11\nend 200 b-2.11\nend 1000 a-1.10\n");
        let checked = Checked::from_records(&history, 10_000).unwrap();
        assert_eq!(checked.overlaps.len(), 1);
        assert_eq!(checked.overlaps[0].ns, 100);
    }

    #[test]
    fn every_overlapping_pair_is_reported() {
        let history = records(
            "start 0 a-1.1\nstart 10 b-1.2\nstart 20 c-1.3\nend 30 a-1.1\nend 40 b-1.2\nend 50 c-1.3\n",
        );
        let checked = Checked::from_records(&history, 100).unwrap();
        let pairs: Vec<(&str, &str)> = checked
            .overlaps
            .iter()
            .map(|o| (o.first.id.as_str(), o.second.id.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [("a-1.1", "b-1.2"), ("a-1.1", "c-1.3"), ("b-1.2", "c-1.3")]
        );
    }

    #[test]
    fn an_unterminated_section_lasts_until_seen_dead() {
        // The holder was killed (no end); the watcher saw it gone at 2.5s. A contender that
        // started at 3s is fine, one that started at 2s overlaps by 0.5s.
        let killed = "start 0 holder-1.10\ndead 2500000000 holder-1.10\n";
        let later = format!("{killed}start 3000000000 c-2.11\nend 3100000000 c-2.11\n");
        let checked = Checked::from_records(&records(&later), 10_000 * MS).unwrap();
        checked.assert_no_overlap();
        assert_eq!(checked.intervals[0].ending, Ending::SeenDead);
        assert_eq!(checked.intervals[0].end, 2_500 * MS);

        let early = format!("{killed}start 2000000000 c-2.11\nend 2100000000 c-2.11\n");
        let checked = Checked::from_records(&records(&early), 10_000 * MS).unwrap();
        assert_eq!(checked.overlaps.len(), 1);
        assert_eq!(checked.overlaps[0].ns, 100 * MS);
        assert!(checked.overlaps[0].involves("holder"));
    }

    #[test]
    fn an_unterminated_section_never_seen_dead_lasts_until_the_end_of_the_test() {
        let history = records("start 0 holder-1.10\nstart 5000 c-2.11\nend 6000 c-2.11\n");
        let checked = Checked::from_records(&history, 9000).unwrap();
        let holder = &checked.labelled("holder")[0];
        assert_eq!(holder.ending, Ending::Open);
        assert_eq!(holder.end, 9000);
        assert_eq!(checked.overlaps.len(), 1);
        assert_eq!(checked.overlaps[0].ns, 1000);
    }

    #[test]
    fn a_recorded_end_wins_over_a_late_death_notice() {
        let history = records("start 0 a-1.10\nend 100 a-1.10\ndead 500 a-1.10\n");
        let checked = Checked::from_records(&history, 9000).unwrap();
        assert_eq!(checked.intervals[0].end, 100);
        assert_eq!(checked.intervals[0].ending, Ending::Recorded);
    }

    #[test]
    fn inconsistent_histories_are_errors() {
        for (text, why) in [
            ("start 1 a-1.1\nstart 2 a-1.1\n", "twice"),
            ("end 1 a-1.1\n", "without a start"),
            ("start 5 a-1.1\nend 4 a-1.1\n", "before its start"),
        ] {
            let err = Checked::from_records(&records(text), 100).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
        assert!(parse("start x a\n").is_err());
        assert!(parse("begin 1 a\n").is_err());
        assert!(parse("start 1 a extra\n").is_err());
    }

    #[test]
    fn ids_carry_label_and_pid() {
        let interval = Interval {
            id: "holder-1a2b3c4d.4242".into(),
            start: 0,
            end: 1,
            ending: Ending::Recorded,
        };
        assert_eq!(interval.label(), "holder");
        assert_eq!(interval.pid(), Some(4242));
    }

    /// The real thing end to end: a section that ends, one killed with SIGKILL (its `dead`
    /// comes from the watcher, close to the kill), and the file the shell writes parses.
    #[test]
    fn the_watcher_closes_a_killed_section() {
        let dir = TempDir::new("history");
        let history = History::new(&dir);
        let done = history.section(&dir, "done", "true");
        let status = std::process::Command::new(&done).status().unwrap();
        assert!(status.success());

        let killed = history.section(&dir, "killed", "sleep 100");
        // A group of its own, as redlock-run gives it, so that the watcher follows the group.
        let mut child = {
            use std::os::unix::process::CommandExt;
            std::process::Command::new(&killed)
                .process_group(0)
                .spawn()
                .unwrap()
        };
        wait_until(Duration::from_secs(10), "both sections to start", || {
            fs::read_to_string(history.path())
                .unwrap()
                .matches("start")
                .count()
                == 2
        });
        let pid = child.id() as i32;
        // SAFETY: killpg takes plain integers; the group is the child's own.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
        let killed_at = now_ns();
        child.wait().unwrap();
        wait_until(Duration::from_secs(10), "the watcher's dead line", || {
            fs::read_to_string(history.path()).unwrap().contains("dead")
        });
        let checked = history.check();
        checked.assert_count(2).assert_no_overlap();
        assert_eq!(checked.labelled("done")[0].ending, Ending::Recorded);
        let killed = checked.labelled("killed")[0];
        assert_eq!(killed.ending, Ending::SeenDead);
        assert_eq!(killed.pid(), Some(pid));
        let late = killed.end - killed_at;
        assert!(
            (0..1_000 * MS).contains(&late),
            "death noted {:.1}ms after the kill",
            ms(late)
        );
    }
}
