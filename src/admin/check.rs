//! `check -k KEY`: one lock judged as a monitoring plugin (Nagios, Icinga, Sensu) reports:
//! one line on stdout, `REDLOCK <STATE> - <key>: <summary> | <performance data>`, and the
//! plugins' exit codes (`exit::PluginState`). Everything that is not a verdict, a usage
//! error included, is UNKNOWN (3), never redlock-run's 125.
//!
//! The levels: the holder's age and the time since the last success are over a level when
//! longer than it; the consecutive skips when they reach it (the N-th skip is the alarm, as
//! a run's `--max-skips` pings it), so the performance data carry N-1, the most that are
//! still fine, as the plugin guidelines read a threshold. A lock that never succeeded is
//! over every `--*-since-success` level: a job that never ran, or a name that none ever
//! used (a typo), is what such a check is there to catch.

use std::time::Duration;

use super::metrics::{oldest_holder, seconds, warn_notes, Oldest};
use crate::backend::counters::LockCounters;
use crate::backend::inspect::{Inspector, Verdict};
use crate::backend::Key;
use crate::config::{AdminConfig, Levels, Thresholds};
use crate::describe::print;
use crate::exit::{Outcome, PluginState};
use crate::report;

/// Judges the lock at `key` and prints the plugin line.
pub fn run(config: &AdminConfig, key: &Key, thresholds: &Thresholds) -> Outcome {
    let (state, text) = match judge(config, key, thresholds) {
        Ok(verdict) => verdict,
        Err(err) => (PluginState::Unknown, format!("{key}: {err:#}")),
    };
    plugin_line(state, &text)
}

/// The line, and the outcome, of a usage error: the command line could not be read.
pub fn usage_unknown(message: &str) -> Outcome {
    let mut lines = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty());
    let first = lines.next().unwrap_or("bad usage");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    // clap's "the following required arguments were not provided:" names them on the
    // next line.
    match lines.next().filter(|_| first.ends_with(':')) {
        Some(next) => plugin_line(PluginState::Unknown, &format!("{first} {next}")),
        None => plugin_line(PluginState::Unknown, first),
    }
}

/// Prints `REDLOCK STATE - text` on stdout: one line, whatever the text holds (a `|` in it
/// would start the performance data, so it is escaped as well).
fn plugin_line(state: PluginState, text: &str) -> Outcome {
    let (summary, perfdata) = match text.split_once(PERFDATA) {
        Some((summary, perfdata)) => (summary, Some(perfdata)),
        None => (text, None),
    };
    let summary = report::escape(summary).replace('|', "\\x7c");
    let line = match perfdata {
        Some(perfdata) => format!("REDLOCK {} - {summary} | {perfdata}", state.word()),
        None => format!("REDLOCK {} - {summary}", state.word()),
    };
    if let Err(err) = print(&line) {
        report::error(&err);
    }
    Outcome::Plugin(state)
}

/// Separates the summary from the performance data in the text `judge` returns; never in
/// text from outside, which is escaped.
const PERFDATA: &str = "\u{0}perf\u{0}";

fn judge(
    config: &AdminConfig,
    key: &Key,
    thresholds: &Thresholds,
) -> anyhow::Result<(PluginState, String)> {
    let mut inspector = Inspector::open(&config.redis, config.redis_timeout)?;
    let view = inspector.read(key);
    if let [node] = view.nodes.as_slice() {
        if let Err(err) = &node.slots {
            anyhow::bail!("cannot read the lock: {err}");
        }
    }
    if view.verdict() == Verdict::Unknown {
        anyhow::bail!("too few Redis nodes answered to tell whether the lock is held");
    }
    let nodes = inspector.counters(std::slice::from_ref(key)).remove(0);
    warn_notes(&nodes);
    let counters = LockCounters::merge(&nodes)
        .map_err(|err| anyhow::anyhow!("cannot read the counters: {err}"))?;
    // Named on the plugin's line too: a monitoring system shows stdout, seldom stderr.
    let unreadable = nodes
        .iter()
        .flatten()
        .find(|node| !node.recorded && !node.notes.is_empty())
        .map(|node| node.notes[0].as_str());
    if let Some(why) = unreadable {
        if thresholds.skips != Levels::default() || thresholds.since_success != Levels::default() {
            anyhow::bail!("the counters are not readable: {why}");
        }
    }
    let c = &counters.counters;
    let mut state = PluginState::Ok;
    let mut parts = Vec::new();

    let oldest = oldest_holder(&view, &counters);
    let ahead = oldest.as_ref().and_then(|o| o.ahead);
    if let Some(ahead) = ahead.filter(|_| thresholds.held != Levels::default()) {
        anyhow::bail!(
            "the holder's start is recorded {} in the future of the server's clock (a clock \
             stepped back, or a value not written by redlock-run): no age to judge",
            human(ahead)
        );
    }
    let held = oldest.as_ref().filter(|o| o.ahead.is_none()).map(|o| o.age);
    let level = over(thresholds.held, held, |age, level| age > level);
    state = state.max(level);
    parts.push(match &oldest {
        Some(Oldest {
            ahead: Some(ahead),
            who,
            ..
        }) => format!(
            "held by {who} since {} in the future (a clock stepped back, or a value not \
             written by redlock-run)",
            human(*ahead)
        ),
        Some(oldest) => format!(
            "held by {} for {}{}",
            oldest.who,
            human(oldest.age),
            breach(level, thresholds.held, "over", exact)
        ),
        None if super::metrics::holders(&view) > 0 => String::from("held"),
        None => String::from("free"),
    });

    let level = over(thresholds.skips, Some(c.skips), |skips, level| {
        skips >= level
    });
    state = state.max(level);
    parts.push(format!(
        "{} consecutive skip{}{}",
        c.skips,
        if c.skips == 1 { "" } else { "s" },
        breach(level, thresholds.skips, "at", |n| format!("{n}"))
    ));

    let recorded = c
        .last_success()
        .map(|at| crate::backend::counters::age(counters.now_ms, at));
    let success_ahead = recorded.and_then(Result::err);
    if let Some(ahead) = success_ahead.filter(|_| thresholds.since_success != Levels::default()) {
        anyhow::bail!(
            "the last success is recorded {} in the future of the server's clock (a clock \
             stepped back, or counters not written by redlock-run): no age to judge",
            human(ahead)
        );
    }
    let since = recorded.and_then(Result::ok);
    let level = match recorded {
        Some(_) => over(thresholds.since_success, since, |since, level| {
            since > level
        }),
        None if thresholds.since_success.crit.is_some() => PluginState::Critical,
        None if thresholds.since_success.warn.is_some() => PluginState::Warning,
        None => PluginState::Ok,
    };
    state = state.max(level);
    parts.push(match (since, success_ahead) {
        (Some(since), _) => format!(
            "last success {} ago{}",
            human(since),
            breach(level, thresholds.since_success, "over", exact)
        ),
        (None, Some(ahead)) => format!(
            "last success {} in the future (a clock stepped back, or counters not written by \
             redlock-run)",
            human(ahead)
        ),
        (None, None) => format!(
            "never succeeded{}",
            if level == PluginState::Ok {
                ""
            } else {
                " (no success on record)"
            }
        ),
    });

    parts.push(format!(
        "{} waiter{}",
        counters.waiters,
        if counters.waiters == 1 { "" } else { "s" }
    ));

    let perfdata = [
        match ahead {
            Some(_) => String::from("'held'=U"),
            None => format!(
                "'held'={}s;{}",
                seconds(held.unwrap_or_default().as_millis() as u64),
                levels(thresholds.held, |d| seconds(d.as_millis() as u64))
            ),
        },
        format!(
            "'skips'={};{}",
            c.skips,
            levels(thresholds.skips, |n| (n - 1).to_string())
        ),
        match since {
            Some(since) => format!(
                "'since_success'={}s;{}",
                seconds(since.as_millis() as u64),
                levels(thresholds.since_success, |d| seconds(d.as_millis() as u64))
            ),
            None => String::from("'since_success'=U"),
        },
        format!("'waiters'={};;;0;", counters.waiters),
    ]
    .join(" ");
    Ok((
        state,
        format!("{key}: {}{PERFDATA}{perfdata}", parts.join(", ")),
    ))
}

/// Which level `value` is over (`exceeds(value, level)`), if any.
fn over<T: Copy>(
    levels: Levels<T>,
    value: Option<T>,
    exceeds: impl Fn(T, T) -> bool,
) -> PluginState {
    let Some(value) = value else {
        return PluginState::Ok;
    };
    if levels.crit.is_some_and(|level| exceeds(value, level)) {
        PluginState::Critical
    } else if levels.warn.is_some_and(|level| exceeds(value, level)) {
        PluginState::Warning
    } else {
        PluginState::Ok
    }
}

/// ` (CRITICAL: over 1h)` after the part that crossed a level.
fn breach<T: Copy>(
    state: PluginState,
    levels: Levels<T>,
    relation: &str,
    show: impl Fn(T) -> String,
) -> String {
    let level = match state {
        PluginState::Critical => levels.crit,
        PluginState::Warning => levels.warn,
        _ => None,
    };
    level.map_or_else(String::new, |level| {
        format!(" ({}: {relation} {})", state.word(), show(level))
    })
}

/// `warn;crit;0;` of the performance data, each empty when not given.
fn levels<T: Copy>(levels: Levels<T>, show: impl Fn(T) -> String) -> String {
    let show = |level: Option<T>| level.map(&show).unwrap_or_default();
    format!("{};{};0;", show(levels.warn), show(levels.crit))
}

/// An age, to the second.
fn human(duration: Duration) -> String {
    report::duration(Duration::from_secs(duration.as_secs())).to_string()
}

/// A level, as given: `--max-held 100ms` is over 100ms, not over 0s.
fn exact(duration: Duration) -> String {
    report::duration(duration).to_string()
}
