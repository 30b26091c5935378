//! Everything redlock-run itself says, on stderr, one line at a time, prefixed
//! `redlock-run:`. stdout belongs to the command. The verbosity is set once at start.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

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
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
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
    }));
}
