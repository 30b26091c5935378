//! Everything redlock-run itself says, on stderr, one line at a time, prefixed
//! `redlock-run:`, with the control characters of text from outside escaped; written by a
//! thread of its own, so that a stderr nobody reads cannot stop the run. stdout belongs to
//! the command. The verbosity is set once at start.

use std::io::Write;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How much redlock-run says on stderr: `-q`, the default, `-v`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

static VERBOSITY: AtomicU8 = AtomicU8::new(Verbosity::Normal as u8);

pub fn set_verbosity(verbosity: Verbosity) {
    VERBOSITY.store(verbosity as u8, Ordering::Relaxed);
}

fn enabled(level: Verbosity) -> bool {
    VERBOSITY.load(Ordering::Relaxed) >= level as u8
}

/// A failure that ends the run; always shown. `{:#}` prints the whole context chain.
pub fn error(err: &anyhow::Error) {
    line(format_args!("{err:#}"));
}

/// Something the user should know even in cron mail, such as a release that failed. Hidden
/// by `-q`. (Losing the lock is an error and goes through `error`.)
pub fn warn(message: std::fmt::Arguments<'_>) {
    if enabled(Verbosity::Normal) {
        line(format_args!("warning: {message}"));
    }
}

/// Plain news at normal verbosity, such as why the lock was not obtained. Hidden by `-q`.
pub fn info(message: std::fmt::Arguments<'_>) {
    if enabled(Verbosity::Normal) {
        line(message);
    }
}

/// A line the caller has already decided to show (it checked the verbosity itself).
pub fn line_anyway(message: std::fmt::Arguments<'_>) {
    line(message);
}

/// Whether `-q` was given.
pub fn is_quiet() -> bool {
    !enabled(Verbosity::Normal)
}

/// Steps worth seeing with `-v`.
pub fn verbose(message: std::fmt::Arguments<'_>) {
    if enabled(Verbosity::Verbose) {
        line(message);
    }
}

pub fn is_verbose() -> bool {
    enabled(Verbosity::Verbose)
}

fn line(message: std::fmt::Arguments<'_>) {
    // One line per message, whatever the message holds (some server errors span lines), and
    // one write per line so that lines from threads never interleave. Any other control
    // character is escaped: messages quote keys, values and replies from outside.
    let message = message.to_string();
    let folded: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let text = format!("redlock-run: {}\n", escape(&folded.join(" ")));
    stderr_writer().send(text.into_bytes());
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
        std::thread::Builder::new()
            .name("stderr".into())
            .spawn(move || {
                for line in queue {
                    let _ = std::io::stderr().lock().write_all(&line);
                    written.fetch_sub(1, Ordering::SeqCst);
                }
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
    if !text.chars().any(char::is_control) {
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
            ch if ch.is_control() => out.push_str(&format!("\\u{{{:x}}}", ch as u32)),
            ch => out.push(ch),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A duration rounded to milliseconds, for messages.
pub fn duration(duration: std::time::Duration) -> humantime::FormattedDuration {
    humantime::format_duration(std::time::Duration::from_millis(duration.as_millis() as u64))
}

/// A command-line error from clap, folded onto one line: `redlock-run: <what>; try --help`.
pub fn usage_error(rendered: &str) {
    let message: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more"))
        .filter(|line| !line.is_empty())
        .collect();
    let message = message.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    line(format_args!("{message}; try --help"));
}

/// Makes a panic message print each secret text as its safe form instead (a Redis URL
/// without its password), should a bug ever put it there.
pub fn redact_panics(pairs: Vec<(String, String)>) {
    std::panic::set_hook(Box::new(move |info| {
        let text = pairs
            .iter()
            .fold(info.to_string(), |text, (secret, shown)| {
                text.replace(secret, shown)
            });
        line(format_args!("internal error: {text}"));
        flush();
    }));
}
