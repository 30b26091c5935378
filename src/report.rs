//! Everything redlock-run itself says, on stderr, one line at a time, with the control
//! characters of text from outside escaped; written by a thread of its own, so that a
//! stderr nobody reads cannot stop the run. stdout belongs to the command. The verbosity and
//! the format are set once at start: text (`redlock-run: <message>`), or one JSON object a
//! line (`--log-format json`) with the same message and the same escaping, plus what a
//! machine reading the log needs (time, level, event, the lock's key and fence, and the
//! numbers of an ending).

use std::fmt::{self, Write as _};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// How much redlock-run says on stderr: `-q`, the default, `-v`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

static VERBOSITY: AtomicU8 = AtomicU8::new(Verbosity::Normal as u8);
static JSON: AtomicBool = AtomicBool::new(false);

pub fn set_verbosity(verbosity: Verbosity) {
    VERBOSITY.store(verbosity as u8, Ordering::Relaxed);
}

/// `--log-format json`: every line becomes one JSON object.
pub fn set_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
}

fn enabled(level: Verbosity) -> bool {
    VERBOSITY.load(Ordering::Relaxed) >= level as u8
}

/// How serious a line is: `error` always shows, `warn` and `info` unless `-q`, `debug`
/// only with `-v`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    fn shown(self) -> bool {
        match self {
            Level::Error => true,
            Level::Warn | Level::Info => enabled(Verbosity::Normal),
            Level::Debug => enabled(Verbosity::Verbose),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

/// What a line is about, for a machine reading the log: JSON's `event`. Lines without a
/// more precise one are `error`, `warning`, `info` or `step` by their level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEvent {
    Error,
    Warning,
    Info,
    Step,
    /// The lock is ours.
    Acquired,
    /// Busy with `--no-wait`: the run is skipped.
    Busy,
    /// `--wait` ran out: the run is skipped.
    WaitTimeout,
    /// `--supersede`: a newer superseding run arrived; this one is skipped.
    Superseded,
    /// The lease ran out before the command could start: the run is skipped.
    NotStarted,
    /// Waiting for the lock, and who holds it.
    Waiting,
    /// `--once`, `--once-per`: the work was already done; the command is not run.
    AlreadyDone,
    Started,
    Renewed,
    /// The lock was lost while the command ran.
    Lost,
    MaxRuntime,
    /// `--stop-timeout` ran out after a signal: the command's group was killed.
    StopTimeout,
    /// A `--replace` run took over: the command is terminated.
    Replaced,
    Released,
    /// The end of a run, with its numbers (`-v`).
    Summary,
    /// The command line was refused.
    Usage,
    /// A bug: a panic's message.
    InternalError,
    /// `serve` listens, at this address.
    Listening,
    /// `serve` stopped.
    Stopped,
}

impl LogEvent {
    pub fn name(self) -> &'static str {
        match self {
            LogEvent::Error => "error",
            LogEvent::Warning => "warning",
            LogEvent::Info => "info",
            LogEvent::Step => "step",
            LogEvent::Acquired => "acquired",
            LogEvent::Busy => "busy",
            LogEvent::WaitTimeout => "wait_timeout",
            LogEvent::Superseded => "superseded",
            LogEvent::NotStarted => "not_started",
            LogEvent::Waiting => "waiting",
            LogEvent::AlreadyDone => "already_done",
            LogEvent::Started => "started",
            LogEvent::Renewed => "renewed",
            LogEvent::Lost => "lost",
            LogEvent::MaxRuntime => "max_runtime",
            LogEvent::StopTimeout => "stop_timeout",
            LogEvent::Replaced => "replaced",
            LogEvent::Released => "released",
            LogEvent::Summary => "summary",
            LogEvent::Usage => "usage",
            LogEvent::InternalError => "internal_error",
            LogEvent::Listening => "listening",
            LogEvent::Stopped => "stopped",
        }
    }
}

/// What every JSON line of a run carries once it is known.
struct Context {
    /// The lock's full key, as shown (escaped).
    key: Option<String>,
    fence: Option<u64>,
}

static CONTEXT: Mutex<Context> = Mutex::new(Context {
    key: None,
    fence: None,
});

/// The lock this run or command is about, from now on in every JSON line.
pub fn set_key(key: &dyn fmt::Display) {
    CONTEXT.lock().unwrap_or_else(|p| p.into_inner()).key = Some(key.to_string());
}

/// The fence of the lock this run holds, from now on in every JSON line.
pub fn set_fence(fence: u64) {
    CONTEXT.lock().unwrap_or_else(|p| p.into_inner()).fence = Some(fence);
}

/// One line, if its level is shown: `fields` are numbers a machine wants as such (JSON
/// only; the message says them for people).
pub fn say(level: Level, event: LogEvent, fields: &[(&str, u64)], message: fmt::Arguments<'_>) {
    if level.shown() {
        line(level, event, fields, message);
    }
}

/// A failure that ends the run; always shown. `{:#}` prints the whole context chain.
pub fn error(err: &anyhow::Error) {
    error_as(LogEvent::Error, err);
}

pub fn error_as(event: LogEvent, err: &anyhow::Error) {
    say(Level::Error, event, &[], format_args!("{err:#}"));
}

/// Something the user should know even in cron mail, such as a release that failed. Hidden
/// by `-q`. (Losing the lock is an error and goes through `error`.)
pub fn warn(message: fmt::Arguments<'_>) {
    say(Level::Warn, LogEvent::Warning, &[], message);
}

/// Plain news at normal verbosity, such as why the lock was not obtained. Hidden by `-q`.
pub fn info_as(event: LogEvent, fields: &[(&str, u64)], message: fmt::Arguments<'_>) {
    say(Level::Info, event, fields, message);
}

/// Who holds the lock we wait for: the caller has already decided to show it (on a
/// terminal, or with `-v`).
pub fn waiting(message: fmt::Arguments<'_>) {
    line(Level::Info, LogEvent::Waiting, &[], message);
}

/// Whether `--log-format json` was given.
pub fn is_json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// The status line a wait redraws on a terminal (`wait::progress`), while it is shown:
/// every line is written above it.
static STATUS: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// Shows `bar` below the lines from now on (`None`: no more).
pub fn show_status(bar: Option<indicatif::ProgressBar>) {
    *STATUS.lock().unwrap_or_else(|p| p.into_inner()) = bar;
}

/// What the status line writes (its text and the terminal's controls), queued behind the
/// lines said so far.
pub fn raw(bytes: Vec<u8>) {
    stderr_writer().send(bytes);
}

/// A line for stderr: above the status line, if one is shown.
fn send(text: Vec<u8>) {
    let status = STATUS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match status {
        Some(bar) => bar.suspend(|| stderr_writer().send(text)),
        None => stderr_writer().send(text),
    }
}

/// Whether `-q` was given.
pub fn is_quiet() -> bool {
    !enabled(Verbosity::Normal)
}

/// Steps worth seeing with `-v`.
pub fn verbose(message: fmt::Arguments<'_>) {
    verbose_as(LogEvent::Step, message);
}

pub fn verbose_as(event: LogEvent, message: fmt::Arguments<'_>) {
    say(Level::Debug, event, &[], message);
}

pub fn is_verbose() -> bool {
    enabled(Verbosity::Verbose)
}

fn line(level: Level, event: LogEvent, fields: &[(&str, u64)], message: fmt::Arguments<'_>) {
    // One line per message, whatever the message holds (some server errors span lines), and
    // one write per line so that lines from threads never interleave. Any other control
    // character is escaped: messages quote keys, values and replies from outside.
    let message = message.to_string();
    let folded: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let message = escape(&folded.join(" ")).into_owned();
    let text = if JSON.load(Ordering::Relaxed) {
        json_line(level, event, fields, &message)
    } else if level == Level::Warn {
        format!("redlock-run: warning: {message}\n")
    } else {
        format!("redlock-run: {message}\n")
    };
    send(text.into_bytes());
}

/// `{"time":…,"level":…,"event":…,"key":…,"fence":…,<fields>,"message":…}`, keys in that
/// order, `key` and `fence` once known.
fn json_line(level: Level, event: LogEvent, fields: &[(&str, u64)], message: &str) -> String {
    let quote = |text: &str| serde_json::Value::from(text).to_string();
    let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    let mut out = format!(
        "{{\"time\":{},\"level\":{},\"event\":{}",
        quote(&time),
        quote(level.name()),
        quote(event.name())
    );
    {
        let context = CONTEXT.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(key) = &context.key {
            let _ = write!(out, ",\"key\":{}", quote(key));
        }
        if let Some(fence) = context.fence {
            let _ = write!(out, ",\"fence\":{fence}");
        }
    }
    for (name, value) in fields {
        let _ = write!(out, ",{}:{value}", quote(name));
    }
    let _ = writeln!(out, ",\"message\":{}}}", quote(message));
    out
}

/// How many lines may wait for a slow stderr before more are dropped.
const WAITING_LINES: usize = 256;
/// How long the end of a run waits for its last lines to reach stderr.
const FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// Writes the lines on stderr from a thread of its own, started with the first line, so
/// that a stderr nobody reads (a full pipe) can never hold up the run: the loop that must
/// stop a command on a lost lock, or act on a SIGTERM, never blocks in `write`. Lines keep
/// their order; past `WAITING_LINES` unwritten ones, new lines are dropped.
struct StderrWriter {
    lines: SyncSender<Vec<u8>>,
    /// Lines sent and not yet written.
    pending: Arc<AtomicUsize>,
}

impl StderrWriter {
    fn start() -> Option<StderrWriter> {
        let (lines, queue) = mpsc::sync_channel::<Vec<u8>>(WAITING_LINES);
        let pending = Arc::new(AtomicUsize::new(0));
        let written = Arc::clone(&pending);
        // Possibly before a run's signals are blocked (a warning about the configuration):
        // this thread takes none.
        crate::signals::spawn_deaf(|| {
            std::thread::Builder::new()
                .name("stderr".into())
                .spawn(move || {
                    for line in queue {
                        let _ = std::io::stderr().lock().write_all(&line);
                        written.fetch_sub(1, Ordering::SeqCst);
                    }
                })
        })
        .ok()?;
        Some(StderrWriter { lines, pending })
    }

    fn send(&self, line: Vec<u8>) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        if self.lines.try_send(line).is_err() {
            self.pending.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The writer, started on first use.
static WRITER: OnceLock<Writer> = OnceLock::new();

/// The writer; if no thread can be started, each line is written by the thread that says it.
fn stderr_writer() -> &'static Writer {
    WRITER.get_or_init(|| match StderrWriter::start() {
        Some(writer) => Writer::Thread(writer),
        None => Writer::Direct,
    })
}

enum Writer {
    Thread(StderrWriter),
    Direct,
}

impl Writer {
    fn send(&self, line: Vec<u8>) {
        match self {
            Writer::Thread(writer) => writer.send(line),
            Writer::Direct => {
                let _ = std::io::stderr().lock().write_all(&line);
            }
        }
    }
}

/// Waits (a little) for the lines said so far to reach stderr: at the end of the run, so
/// that its last words are not lost, unless nobody reads them.
pub fn flush() {
    let Some(Writer::Thread(writer)) = WRITER.get() else {
        return;
    };
    let until = std::time::Instant::now() + FLUSH_LIMIT;
    while writer.pending.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `text` with every control character (C0, DEL, C1) escaped, `\n` and `\x1b` style, so
/// that text from outside (a key, another holder's value, a server's reply) can neither
/// start a line of its own nor send escape sequences to the reader's terminal.
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for ch in text.chars() {
        match ch {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ch if (ch as u32) < 0x80 && ch.is_control() => {
                out.push_str(&format!("\\x{:02x}", ch as u32))
            }
            ch if hidden(ch) => out.push_str(&format!("\\u{{{:x}}}", ch as u32)),
            ch => out.push(ch),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Characters that act on a terminal or on how a line reads rather than showing as
/// themselves: control characters, and the invisible format characters that reorder or
/// hide text (bidirectional overrides and isolates, zero-width spaces and joiners, the byte
/// order mark), with which a holder's name could be made to read as something else.
fn hidden(ch: char) -> bool {
    ch.is_control()
        || matches!(
            ch,
            '\u{61c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}'
        )
}

/// A duration rounded to milliseconds, for messages.
pub fn duration(duration: std::time::Duration) -> humantime::FormattedDuration {
    humantime::format_duration(std::time::Duration::from_millis(duration.as_millis() as u64))
}

/// A command-line error from clap. In text, clap's lines as clap renders them (the error,
/// its tips, the usage), the first as `redlock-run: <error>`: folded onto one line they
/// ran together. In JSON, one object as for every message: the error and its tips, without
/// the usage, `; try --help` at the end.
pub fn usage_error(rendered: &str) {
    let mut lines = rendered.lines();
    let first = lines.next().unwrap_or_default().trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    if JSON.load(Ordering::Relaxed) {
        let tips = lines
            .map(str::trim)
            .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more"))
            .filter(|line| !line.is_empty());
        let message: Vec<&str> = std::iter::once(first).chain(tips).collect();
        line(
            Level::Error,
            LogEvent::Usage,
            &[],
            format_args!("{}; try --help", message.join("; ")),
        );
        return;
    }
    // clap quotes the arguments it refused: escaped like any text from outside.
    let mut text = format!("redlock-run: {}\n", escape(first));
    for rest in lines {
        text.push_str(&escape(rest.trim_end()));
        text.push('\n');
    }
    send(text.into_bytes());
}

/// Makes a panic message print each secret text as its safe form instead (a Redis URL
/// without its password), should a bug ever put it there.
pub fn redact_panics(pairs: Vec<(String, String)>) {
    std::panic::set_hook(Box::new(move |info| {
        // The panic may have come from drawing the status line, with its lock held.
        if let Ok(mut status) = STATUS.try_lock() {
            status.take();
        }
        let text = pairs
            .iter()
            .fold(info.to_string(), |text, (secret, shown)| {
                text.replace(secret, shown)
            });
        line(
            Level::Error,
            LogEvent::InternalError,
            &[],
            format_args!("internal error: {text}"),
        );
        flush();
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_acts_on_a_terminal_or_reorders_a_line_is_escaped() {
        assert_eq!(escape("plain: ünïcode"), "plain: ünïcode");
        assert_eq!(escape("a\nb\x1b[2J\u{9b}"), "a\\nb\\x1b[2J\\u{9b}");
        // "evil\u{202e}txt.exe" would read as "evilexe.txt".
        assert_eq!(escape("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(
            escape("a\u{200b}b\u{2066}c\u{feff}"),
            "a\\u{200b}b\\u{2066}c\\u{feff}"
        );
    }
}
