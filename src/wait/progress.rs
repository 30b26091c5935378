//! Progress while waiting (issue 33): what a wait says of itself while the lock stays busy.
//! On a terminal, one status line, redrawn in place every second from the first second
//! on (`indicatif` draws it, through `report`'s writer, so that it never blocks the wait and
//! every other line goes above it): the lock, the time waited of `--wait`, the holder and
//! how long it has held the lock (or the slots held, `--limit`), the place in the `--fair`
//! queue or how many other runs wait, and an estimate of the time left. When the wait ends, the line is cleared and
//! the announcer's one line (`waiting for KEY: held by …`) takes its place. Elsewhere
//! (a pipe, a CI log, `TERM=dumb`, `--log-format json`) no line is redrawn: a plain
//! `still waiting for KEY: …` line (a `waiting` event in JSON) every minute after the
//! first (every 10 s on a dumb terminal). `-q`: nothing.
//!
//! Cost: the line shows only what the waiter's own tries found, and the lock's history and
//! queue's size, read only for a line about to be shown: when it first is, when the holder
//! changed (at most every `READ_EVERY`), and otherwise every `READ_STILL`. Nothing here
//! exists before the lock was found busy (the `Waiter` makes it).

use std::io::{IsTerminal, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::backend::history::{Entry, History};
use crate::backend::{Deployment, Holder, Key};
use crate::holder::Blocker;
use crate::report::{self, LogEvent};

/// How long a wait lasts before the status line appears (as the announcer's line).
const SHOW_AFTER: Duration = Duration::from_secs(1);
/// How often the status line is redrawn.
const REDRAW: Duration = Duration::from_secs(1);
/// The plain line's period off a terminal: cron mail of a short wait stays as it was.
const PLAIN_EVERY: Duration = Duration::from_secs(60);
/// The plain line's period on a terminal that cannot redraw (`TERM=dumb` or unset).
const DUMB_EVERY: Duration = Duration::from_secs(10);
/// The lock's history (and queue) is read at most this often, when the holder changed (a
/// release: the median may have changed)...
const READ_EVERY: Duration = Duration::from_secs(5);
/// ... and otherwise this often (the queue's size changes meanwhile)...
const READ_STILL: Duration = Duration::from_secs(30);
/// ... and, after a read that failed (no right to `XREVRANGE`, Redis away), not again
/// before this.
const READ_AGAIN_AFTER_FAILURE: Duration = Duration::from_secs(60);
/// The events read back (newest first), and the released runs among them the median is
/// taken of.
const EVENTS_READ: usize = 50;
const RUNS_MEASURED: usize = 10;
/// A history read never holds up the wait longer than this.
const READ_TIMEOUT: Duration = Duration::from_secs(1);

/// What the line says besides what the waiter's tries find.
#[derive(Clone, Copy)]
pub struct About<'a> {
    /// Where the lock's history is read.
    pub redis: &'a Deployment,
    /// `--limit`: the slots.
    pub limit: u32,
    /// `--fair`: the place in the queue is shown.
    pub fair: bool,
    /// `--wait`'s limit (`None`: forever), which the deadline ends.
    pub wait: Option<Duration>,
    /// The wait is for several keys (`-k a -k b`, a pool): no one key's history tells how
    /// long it lasts, so none is read (the estimate is "unknown", no waiters are counted).
    pub several_keys: bool,
}

/// How the progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    /// One status line, redrawn.
    Redrawn,
    /// A plain line each `every`.
    Plain {
        every: Duration,
    },
}

impl Mode {
    /// `-q` says nothing; JSON and anything but a terminal that can redraw get plain lines.
    fn pick(quiet: bool, json: bool, terminal: bool, term: Option<&str>) -> Mode {
        let dumb = term.is_none_or(|term| term.is_empty() || term == "dumb");
        match (quiet, json, terminal, dumb) {
            (true, ..) => Mode::Off,
            (false, false, true, false) => Mode::Redrawn,
            (false, false, true, true) => Mode::Plain {
                every: test_or(DUMB_EVERY),
            },
            _ => Mode::Plain {
                every: test_or(PLAIN_EVERY),
            },
        }
    }
}

/// `every` (the plain line's period, `READ_STILL`), but in debug builds (the test suite's),
/// where `REDLOCK_TEST_PROGRESS_EVERY_MS` sets it, so that a test sees the plain lines, or a
/// history read again, without waiting a minute. Release builds never read it: no user has
/// this knob (see CONTRIBUTING.md).
fn test_or(every: Duration) -> Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("REDLOCK_TEST_PROGRESS_EVERY_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    {
        return Duration::from_millis(ms).max(Duration::from_millis(1));
    }
    every
}

/// The wait's progress: see the module's doc.
pub(super) struct Progress<'a> {
    mode: Mode,
    about: About<'a>,
    key: &'a Key,
    started: Instant,
    limit: Option<Duration>,
    /// When the line is next drawn or written.
    due: Instant,
    bar: Option<ProgressBar>,
    /// What the status line last showed, for the line that replaces it.
    shown: Option<Blocker>,
    holds: Holds<'a>,
}

impl<'a> Progress<'a> {
    pub(super) fn new(
        about: About<'a>,
        key: &'a Key,
        started: Instant,
        deadline: Option<Instant>,
        redis_timeout: Duration,
    ) -> Progress<'a> {
        let mode = Mode::pick(
            report::is_quiet(),
            report::is_json(),
            std::io::stderr().is_terminal(),
            std::env::var("TERM").ok().as_deref(),
        );
        // Counted from the run's start, as the limit is.
        let started = deadline
            .zip(about.wait)
            .and_then(|(deadline, wait)| deadline.checked_sub(wait))
            .map_or(started, |start| start.min(started));
        let due = started
            + match mode {
                Mode::Plain { every } => every,
                _ => SHOW_AFTER,
            };
        Progress {
            mode,
            about,
            key,
            started,
            limit: about.wait,
            due,
            bar: None,
            shown: None,
            holds: Holds {
                redis: about.redis,
                key,
                timeout: redis_timeout.min(READ_TIMEOUT),
                history: None,
                median: None,
                waiters: None,
                fair: about.fair,
                several_keys: about.several_keys,
                last_read: None,
                next_read: None,
            },
        }
    }

    /// Whether a status line replaces the announcer's line.
    pub(super) fn redraws(&self) -> bool {
        self.mode == Mode::Redrawn
    }

    /// When it next needs to wake up to draw or write, if ever.
    pub(super) fn due_at(&self) -> Option<Instant> {
        (self.mode != Mode::Off).then_some(self.due)
    }

    /// Draws the status line or writes the plain line, if due; `blocker`: what the last
    /// try that reached Redis found (`None` before one did).
    pub(super) fn tick(&mut self, blocker: Option<&Blocker>, now: Instant) {
        if self.mode == Mode::Off || now < self.due {
            return;
        }
        let period = match self.mode {
            Mode::Plain { every } => every,
            _ => REDRAW,
        };
        while self.due <= now {
            self.due += period;
        }
        let Line {
            state,
            progress,
            fields,
        } = self.line(blocker, now);
        let key = self.key;
        if self.mode == Mode::Redrawn {
            // What changes first, the holder's details last: a narrow terminal cuts the
            // line at its width.
            let message = format!("redlock-run: waiting for {key}: {progress}; {state}");
            let message = report::escape(&message).into_owned();
            self.bar.get_or_insert_with(status_bar).set_message(message);
            self.shown = blocker.cloned();
        } else {
            report::info_as(
                LogEvent::Waiting,
                &fields,
                format_args!("still waiting for {key}: {state}, {progress}"),
            );
        }
    }

    fn line(&mut self, blocker: Option<&Blocker>, now: Instant) -> Line {
        let waited = now.saturating_duration_since(self.started);
        let holder = blocker
            .and_then(|blocker| blocker.holder.as_deref())
            .and_then(Holder::parse);
        let held = holder.as_ref().and_then(Holder::age).and_then(Result::ok);
        let ahead = blocker.map_or(0, |blocker| blocker.ahead);
        let median = if blocker.is_some() {
            self.holds.median(now, blocker.map(Blocker::identity))
        } else {
            None
        };
        // Without the holder's start (another client's key), no estimate.
        let left = median
            .zip(held)
            .map(|(median, held)| estimate(median, held, ahead, self.about.limit));
        let mut fields = vec![("waited_ms", waited.as_millis() as u64)];
        if let Some(limit) = self.limit {
            fields.push(("limit_ms", limit.as_millis() as u64));
        }
        if let Some(held) = held {
            fields.push(("held_ms", held.as_millis() as u64));
        }
        if self.about.fair {
            fields.push(("ahead", u64::from(ahead)));
        }
        let waiters = self.holds.waiters.filter(|_| blocker.is_some());
        if let Some(waiters) = waiters {
            fields.push(("waiters", waiters));
        }
        if let Some(Some(left)) = left {
            fields.push(("left_ms", left.as_millis() as u64));
        }
        let mut progress = format!("waited {}", seconds(waited));
        if let Some(limit) = self.limit {
            progress.push_str(&format!(" of {}", seconds(limit)));
        }
        match (left, median) {
            (Some(Some(left)), _) => {
                progress.push_str(&format!(", time left: about {}", seconds(left)))
            }
            (Some(None), Some(median)) => progress.push_str(&format!(
                ", time left: any moment now (runs usually hold it {})",
                seconds(median)
            )),
            _ => progress.push_str(", time left: unknown"),
        }
        let mut state = state(blocker, self.about.limit, self.about.fair);
        match waiters.map(|waiters| waiters.saturating_sub(1)) {
            Some(1) => state.push_str(", 1 other run waiting"),
            Some(others) if others > 1 => state.push_str(&format!(", {others} other runs waiting")),
            _ => {}
        }
        Line {
            state,
            progress,
            fields,
        }
    }

    /// The wait is over: the status line is cleared, and the announcer's line takes its
    /// place.
    pub(super) fn finish(&mut self) {
        let Some(bar) = self.bar.take() else {
            return;
        };
        bar.finish_and_clear();
        report::show_status(None);
        if let Some(blocker) = self.shown.take() {
            report::waiting(format_args!(
                "waiting for {}: {}",
                self.key,
                blocker.phrase()
            ));
        }
    }
}

impl Drop for Progress<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Who or what holds the lock (`limit`: the slots), and the place in the fair queue.
fn state(blocker: Option<&Blocker>, limit: u32, fair: bool) -> String {
    let Some(blocker) = blocker else {
        return String::from("holder not known (Redis not reached yet)");
    };
    let mut state = match &blocker.holder {
        Some(holder) if limit > 1 => format!(
            "all {limit} slots held, one by {}",
            crate::holder::describe(Some(holder))
        ),
        _ => blocker.phrase(),
    };
    if fair && blocker.holder.is_some() {
        match blocker.ahead {
            0 => state.push_str(", next in the fair queue"),
            ahead => state.push_str(&format!(
                ", place {} in the fair queue",
                u64::from(ahead) + 1
            )),
        }
    }
    state
}

/// One line of progress: who holds the lock, the time waited and left, and the numbers
/// for JSON.
struct Line {
    state: String,
    progress: String,
    fields: Vec<(&'static str, u64)>,
}

/// A duration in whole seconds, for people.
fn seconds(duration: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(duration.as_secs()))
}

/// The time left: what the median hold leaves of the current hold (`held`), plus a median
/// hold for each `slots` waiters ahead in the fair queue; `None` when the holder has held it
/// longer than runs usually do and nobody is ahead.
fn estimate(median: Duration, held: Duration, ahead: u32, slots: u32) -> Option<Duration> {
    // The median may be any number a client wrote: saturated, never overflowing.
    let queue = median
        .checked_mul(ahead)
        .map_or(Duration::MAX, |queue| queue / slots.max(1));
    let left = median.saturating_sub(held).saturating_add(queue);
    (!left.is_zero()).then_some(left)
}

/// The median hold of the last released runs among `events` (oldest first).
fn median_hold(events: &[Entry]) -> Option<Duration> {
    let mut holds: Vec<u64> = events
        .iter()
        .rev()
        .filter(|entry| entry.get("event") == Some(b"released".as_slice()))
        .filter_map(|entry| {
            std::str::from_utf8(entry.get("held_ms")?)
                .ok()?
                .parse()
                .ok()
        })
        .take(RUNS_MEASURED)
        .collect();
    if holds.is_empty() {
        return None;
    }
    holds.sort_unstable();
    let middle = holds.len() / 2;
    // Any client may write to the stream: no sum of two of its numbers may overflow.
    let ms = if holds.len().is_multiple_of(2) {
        ((u128::from(holds[middle - 1]) + u128::from(holds[middle])) / 2) as u64
    } else {
        holds[middle]
    };
    Some(Duration::from_millis(ms))
}

/// The lock's history, read for the median hold (and the queue's size): opened on first
/// use, read again when the holder changed or `READ_STILL` passed.
struct Holds<'a> {
    redis: &'a Deployment,
    key: &'a Key,
    timeout: Duration,
    history: Option<History>,
    median: Option<Duration>,
    /// How many runs wait, this one included; not read with `--fair`, which tells the place.
    waiters: Option<u64>,
    fair: bool,
    several_keys: bool,
    /// When the last read was, and the holder then.
    last_read: Option<(Instant, Option<Identity>)>,
    /// Not read again before then.
    next_read: Option<Instant>,
}

/// Who held the lock (see `Blocker::identity`).
type Identity = (Option<String>, bool);

impl Holds<'_> {
    fn median(&mut self, now: Instant, holder: Option<Identity>) -> Option<Duration> {
        let due = match (&self.last_read, self.next_read) {
            (None, _) => true,
            (_, Some(next)) if now < next => false,
            (Some((at, read_for)), _) => {
                *read_for != holder || now.saturating_duration_since(*at) >= test_or(READ_STILL)
            }
        };
        if due {
            self.last_read = Some((now, holder));
            self.next_read = Some(match self.read() {
                Ok(median) => {
                    self.median = median;
                    now + READ_EVERY
                }
                Err(err) => {
                    report::verbose(format_args!(
                        "cannot read the history of {} for an estimate: {err:#}",
                        self.key
                    ));
                    self.history = None;
                    now + READ_AGAIN_AFTER_FAILURE
                }
            });
        }
        self.median
    }

    fn read(&mut self) -> anyhow::Result<Option<Duration>> {
        if self.several_keys {
            return Ok(None);
        }
        let history = match &mut self.history {
            Some(history) => history,
            None => self
                .history
                .insert(History::open(self.redis, self.timeout, self.key)?),
        };
        if !self.fair {
            // A user that may not ZCARD the queue still gets the estimate.
            self.waiters = history.waiters().ok();
        }
        Ok(median_hold(&history.again(EVENTS_READ)?.events))
    }
}

/// The status line, drawn on stderr through `report`'s writer (see `Queued`).
fn status_bar() -> ProgressBar {
    let term = console::Term::read_write_pair(std::io::stdin(), Queued);
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::term(term, 4));
    bar.set_style(
        ProgressStyle::with_template("{wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    report::show_status(Some(bar.clone()));
    bar
}

/// What the status line writes, queued behind the lines said so far on `report`'s writer:
/// the wait never blocks on a terminal that does not read (Ctrl-S), and lines never cut
/// into the status line. Its descriptor, stderr's, tells the terminal and its width.
#[derive(Debug)]
struct Queued;

impl Write for Queued {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        report::raw(bytes.to_vec());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Queued {
    fn as_raw_fd(&self) -> RawFd {
        std::io::stderr().as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn released(held_ms: &str) -> Entry {
        Entry::for_tests(
            "1-0",
            Some(1),
            vec![
                (b"event".to_vec(), b"released".to_vec()),
                (b"held_ms".to_vec(), held_ms.as_bytes().to_vec()),
            ],
        )
    }

    #[test]
    fn the_median_is_of_the_last_released_runs_only() {
        assert_eq!(median_hold(&[]), None);
        let acquired = Entry::for_tests(
            "1-0",
            Some(1),
            vec![(b"event".to_vec(), b"acquired".to_vec())],
        );
        assert_eq!(median_hold(std::slice::from_ref(&acquired)), None);
        let events = [
            released("1000"),
            acquired,
            released("junk"),
            released("3000"),
            released("2000"),
        ];
        assert_eq!(median_hold(&events), Some(Duration::from_secs(2)));
        let even = [released("1000"), released("2000")];
        assert_eq!(median_hold(&even), Some(Duration::from_millis(1500)));
        let huge = [
            released("18446744073709551615"),
            released("18446744073709551615"),
        ];
        assert_eq!(median_hold(&huge), Some(Duration::from_millis(u64::MAX)));
        // Only the last RUNS_MEASURED: ten short runs after many long ones.
        let mut many: Vec<Entry> = (0..20).map(|_| released("100000")).collect();
        many.extend((0..RUNS_MEASURED).map(|_| released("10")));
        assert_eq!(median_hold(&many), Some(Duration::from_millis(10)));
    }

    #[test]
    fn the_estimate_is_what_the_median_leaves_plus_the_queue_ahead() {
        let min = Duration::from_secs(60);
        assert_eq!(estimate(min, min / 4, 0, 1), Some(min * 3 / 4));
        assert_eq!(estimate(min, min * 2, 0, 1), None, "overdue");
        assert_eq!(estimate(min, min, 2, 1), Some(min * 2));
        assert_eq!(estimate(min, min, 2, 2), Some(min));
        let huge = Duration::from_millis(u64::MAX);
        assert_eq!(estimate(huge, min, u32::MAX, 0), Some(Duration::MAX));
    }

    #[test]
    fn the_holder_the_slots_and_the_queue_are_said() {
        let value = br#"{"token":"t","host":"web-3","pid":42,"label":"v1"}"#.to_vec();
        let held = Blocker {
            holder: Some(value),
            ahead: 0,
        };
        assert_eq!(state(Some(&held), 1, false), "held by web-3 pid 42 (v1)");
        assert_eq!(
            state(Some(&held), 3, true),
            "all 3 slots held, one by web-3 pid 42 (v1), next in the fair queue"
        );
        let behind = Blocker {
            ahead: u32::MAX,
            ..held
        };
        assert!(state(Some(&behind), 1, true).ends_with(", place 4294967296 in the fair queue"));
        let queued = Blocker {
            holder: None,
            ahead: 2,
        };
        assert_eq!(
            state(Some(&queued), 1, true),
            "free, but 2 waiters are ahead in the fair queue"
        );
        assert!(state(None, 1, false).contains("not known"));
    }

    #[test]
    fn only_a_terminal_that_can_redraw_gets_the_status_line() {
        assert_eq!(Mode::pick(false, false, true, Some("xterm")), Mode::Redrawn);
        assert_eq!(Mode::pick(true, false, true, Some("xterm")), Mode::Off);
        assert_eq!(Mode::pick(true, true, false, None), Mode::Off);
        for (json, terminal, term) in [
            (false, true, Some("dumb")),
            (false, true, None),
            (false, false, Some("xterm")),
            (true, true, Some("xterm")),
        ] {
            assert!(
                matches!(Mode::pick(false, json, terminal, term), Mode::Plain { .. }),
                "{json} {terminal} {term:?}"
            );
        }
    }
}
