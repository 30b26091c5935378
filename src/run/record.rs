//! What one run did, for its `-v` summary line and its end ping: the record kept along the
//! run, the skip it made, and which ping its outcome calls for. Sends nothing itself.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::exit::Outcome;
use crate::ping::{self, End, Pinger};
use crate::report;

/// What a run did, for its summary line (`-v`) and its end ping.
#[derive(Default)]
pub(super) struct RunRecord {
    /// When the lock was ours, and when it no longer was.
    pub(super) acquired: Option<Instant>,
    pub(super) released: Option<Instant>,
    pub(super) renewals: u32,
    /// Whether the command was started (and the start ping sent).
    pub(super) started: bool,
    /// The run skipped its command: why, and the count the backend returned.
    pub(super) skip: Option<Skip>,
    /// `--ping`.
    pub(super) pinger: Option<Pinger>,
}

impl RunRecord {
    /// The command started, as process `pid`: the start ping goes out.
    pub(super) fn command_started(&mut self, pid: libc::pid_t) {
        self.started = true;
        if let Some(pinger) = self.pinger.as_mut() {
            pinger.started();
        }
        report::verbose_as(
            report::LogEvent::Started,
            format_args!("command started, pid {pid}"),
        );
    }
}

/// A skipped run, for the `--max-skips` alarm.
pub(super) struct Skip {
    /// busy, timeout, superseded.
    reason: &'static str,
    /// Who held the lock or took this run's place, as a phrase that reads alone: `held by
    /// …`, `superseded by …`.
    holder: String,
    /// The consecutive skips of the lock, this one included, if known.
    count: Option<u64>,
}

impl Skip {
    pub(super) fn new(reason: &'static str, holder: String, count: Option<u64>) -> Skip {
        Skip {
            reason,
            holder,
            count,
        }
    }
}

/// Which end ping the run's outcome calls for (`--ping`'s help is the table); `None`: none.
pub(super) fn end_ping(config: &Config, record: &RunRecord, outcome: &Outcome) -> Option<End> {
    let code = outcome.exit_code();
    match outcome {
        Outcome::Command { .. } if code == 0 => Some(End::Success),
        Outcome::Command { .. } | Outcome::MaxRuntime => Some(End::Status(code)),
        // Stopped by a signal: a failure if its command ran, nothing if it never did.
        Outcome::Interrupted { .. } => record.started.then_some(End::Status(code)),
        Outcome::LockLost | Outcome::CannotExecute | Outcome::NotFound | Outcome::Failed => {
            Some(End::Fail)
        }
        // The lease ran out between taking the lock and the command's start.
        Outcome::NotAcquired { .. } if record.acquired.is_some() => Some(End::Fail),
        // Replaced by a --replace run, which pings for itself.
        Outcome::Superseded if record.acquired.is_some() => None,
        Outcome::NotAcquired { .. } | Outcome::Superseded | Outcome::AlreadyDone => {
            skip_alarm(config, record.skip.as_ref()?)
        }
        Outcome::Done | Outcome::Free | Outcome::Plugin(_) => None,
    }
}

/// The `--max-skips`-th consecutive skip and every later one: `URL/fail`, naming the holder.
fn skip_alarm(config: &Config, skip: &Skip) -> Option<End> {
    let max = config.ping.as_ref()?.max_skips?;
    let Some(count) = skip.count else {
        report::verbose(format_args!(
            "--max-skips: the count of consecutive skips is not known; no alarm"
        ));
        return None;
    };
    (count >= max).then(|| End::SkipAlarm {
        body: ping::skip_alarm_body(&config.key.to_string(), count, skip.reason, &skip.holder),
    })
}

/// `finished: waited 0s, held 2.5s, renewed 3 times, exit 0`, with `-v`; in JSON with the
/// same numbers as fields, for log collectors and monitors.
pub(super) fn summarize(record: &RunRecord, started: Instant, outcome: &Outcome) {
    if !report::is_verbose() {
        return;
    }
    let exit_code = u64::from(outcome.exit_code());
    let waited = record.acquired.unwrap_or_else(Instant::now) - started;
    let held = record
        .acquired
        .map(|acquired| record.released.unwrap_or_else(Instant::now) - acquired);
    let millis = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    let mut fields = vec![("waited_ms", millis(waited))];
    let what = match held {
        Some(held) => {
            fields.push(("held_ms", millis(held)));
            fields.push(("renewals", u64::from(record.renewals)));
            format!(
                "held {}, renewed {} time{}",
                report::duration(held),
                record.renewals,
                if record.renewals == 1 { "" } else { "s" }
            )
        }
        None => String::from("the lock was not taken"),
    };
    fields.push(("exit_code", exit_code));
    report::say(
        report::Level::Debug,
        report::LogEvent::Summary,
        &fields,
        format_args!(
            "finished: waited {}, {what}, exit {exit_code}",
            report::duration(waited)
        ),
    );
}
