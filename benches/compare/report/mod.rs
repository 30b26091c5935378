//! What the run prints: the machine and versions, one row per figure with a column per
//! tool, redlock-run's targets with PASS/FAIL, and notes on method. It owns wording and
//! layout; the targets themselves live in `targets.rs`, and the JSON file's fields
//! are `json.rs`'s. A missed target is printed, never turned into an exit status.

mod json;
mod many;
mod many_targets;
mod targets;

pub use many::ManyReport;

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::helper::STAMP_NOTE;
use crate::host::loadavg;
use crate::measure::startup::{QuorumStart, RecordingCost, RedisPerRun};
use crate::measure::waiting::Waiting;
use crate::measure::Results;
use crate::opts::Opts;
use crate::procs::KILLED;
use crate::stats::{fmt_ms, millis, Samples};
use crate::tools::{Bench, Tool, TOOLS};

pub struct Report<'a> {
    pub opts: &'a Opts,
    pub bench: &'a Bench,
    pub machine: Vec<(&'static str, String)>,
    pub versions: Vec<(&'static str, String)>,
    pub results: &'a [Results; 4],
    pub bare: Samples,
    pub bare_version: Samples,
    pub rss_floor: Option<u64>,
    pub quorum: Option<QuorumStart>,
    /// `redlock-run -- true` with history and counters, and with `--history 0`.
    pub recording: RecordingCost,
    pub elapsed: Duration,
}

impl Report<'_> {
    fn r(&self, tool: Tool) -> &Results {
        &self.results[tool as usize]
    }

    /// Overhead p50: p50 of `TOOL -- true` minus p50 of bare `true`.
    fn overhead(&self, tool: Tool) -> Option<f64> {
        let tool_p50 = self.r(tool).overhead.as_ref()?.p50()?;
        Some(millis(tool_p50) - millis(self.bare.p50()?))
    }

    fn rate(&self, tool: Tool) -> Option<f64> {
        let contended = self.r(tool).contended.as_ref()?;
        (contended.ok_cycles > 0).then(|| contended.rate())
    }

    fn handoff(&self, tool: Tool, p: f64) -> Option<f64> {
        Some(millis(self.r(tool).handoff.as_ref()?.pct(p)?))
    }

    fn waiting(&self, tool: Tool) -> Option<f64> {
        match self.r(tool).waiting.as_ref()? {
            Waiting::Measured {
                per_waiter_per_s, ..
            } => Some(*per_waiter_per_s),
            Waiting::NotApplicable(_) => None,
        }
    }

    /// The glibc build's figures against flock's and etcdctl's from the same run, as the
    /// targets put the shipped build's: (JSON key, label, value, unit).
    pub fn glibc_ratios(&self) -> Vec<(&'static str, &'static str, Option<f64>, &'static str)> {
        let g = Tool::RedlockGlibc;
        let ratio = |a: Option<f64>, b: Option<f64>| Some(a? / b?).filter(|r| r.is_finite());
        vec![
            (
                "overhead_vs_flock",
                "overhead p50 vs flock's",
                ratio(self.overhead(g), self.overhead(Tool::Flock)),
                "x",
            ),
            (
                "overhead_below_etcdctl",
                "overhead p50, etcdctl's over it",
                ratio(self.overhead(Tool::Etcd), self.overhead(g)),
                "x",
            ),
            (
                "contended_vs_flock",
                "contended locks/s vs flock's",
                ratio(self.rate(g), self.rate(Tool::Flock)),
                "x",
            ),
            (
                "contended_vs_etcdctl",
                "contended locks/s vs etcdctl's",
                ratio(self.rate(g), self.rate(Tool::Etcd)),
                "x",
            ),
            (
                "handoff_p50_vs_flock",
                "handoff p50 vs flock's",
                ratio(self.handoff(g, 50.0), self.handoff(Tool::Flock, 50.0)),
                "x",
            ),
            (
                "peak_rss_mib",
                "peak RSS, MiB",
                self.r(g).rss_kib.map(|kib| kib as f64 / 1024.0),
                " MiB",
            ),
        ]
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        let o = &mut out;
        let _ = writeln!(
            o,
            "\n== redlock-run vs flock(1) vs etcdctl lock: same run, same machine =="
        );
        for (key, value) in &self.machine {
            let _ = writeln!(o, "{key:<14} {value}");
        }
        let _ = writeln!(o, "{:<14} {}", "loadavg_end", loadavg());
        for (key, value) in &self.versions {
            let _ = writeln!(o, "{key:<14} {value}");
        }
        let _ = writeln!(
            o,
            "{:<14} {} s (servers and measurements, after the build)",
            "elapsed",
            self.elapsed.as_secs()
        );
        let _ = writeln!(o, "{:<14} {STAMP_NOTE}", "command");
        let _ = writeln!(o);

        const W: usize = 44;
        const C: usize = 17;
        let header = format!(
            "{:<W$}{:>C$}{:>C$}{:>C$}{:>C$}{:>11}{:>10}",
            "metric", "redlock-run", "flock", "etcdctl", "glibc build", "redis-poll", "cronlock"
        );
        let _ = writeln!(o, "{header}");
        let _ = writeln!(o, "{}", "-".repeat(header.len()));
        let mut row = |label: &str, cell: &dyn Fn(Tool) -> String| {
            let _ = writeln!(
                o,
                "{label:<W$}{:>C$}{:>C$}{:>C$}{:>C$}{:>11}{:>10}",
                cell(Tool::Redlock),
                cell(Tool::Flock),
                cell(Tool::Etcd),
                cell(Tool::RedlockGlibc),
                "n/a",
                "n/a"
            );
        };
        let na = || "n/a".to_string();
        let ms = |v: Option<f64>| {
            v.map_or_else(na, |x| fmt_ms(Duration::from_secs_f64(x.max(0.0) / 1e3)))
        };
        let bare_p50 = self.bare.p50().map_or_else(na, fmt_ms);
        row("overhead p50 (TOOL -- true) - (true)", &|t| {
            ms(self.overhead(t))
        });
        row(
            &format!("  raw p50 of TOOL -- true (true: {bare_p50})"),
            &|t| {
                self.r(t)
                    .overhead
                    .as_ref()
                    .and_then(Samples::p50)
                    .map_or_else(na, fmt_ms)
            },
        );
        let redis = |per_run: fn(&RedisPerRun) -> f64| {
            move |t: Tool| {
                self.r(t)
                    .overhead_redis
                    .as_ref()
                    .map_or_else(na, |r| format!("{:.2}", per_run(r)))
            }
        };
        row(
            "  Redis commands per uncontended run",
            &redis(|r| r.commands),
        );
        row(
            "  connections per uncontended run",
            &redis(|r| r.connections),
        );
        let history = |text: String| {
            move |t: Tool| match t {
                Tool::Redlock => text.clone(),
                _ => na(),
            }
        };
        let p50 = |samples: &Samples| samples.p50().map_or_else(na, fmt_ms);
        row(
            "  p50 history on / --history 0",
            &history(format!(
                "{} / {}",
                p50(&self.recording.on),
                p50(&self.recording.off)
            )),
        );
        row(
            "  history's cost (target <= 0.1ms)",
            &history(ms(self.recording.delta_ms())),
        );
        row(
            &format!(
                "contended {}x{} cycles, locks/s",
                self.opts.clients, self.opts.cycles
            ),
            &|t| self.rate(t).map_or_else(na, |x| format!("{x:.1}")),
        );
        row("  mutual exclusion: counter/expected", &|t| {
            self.r(t).contended.as_ref().map_or_else(na, |c| {
                let mark = if c.correct() { "ok" } else { "WRONG" };
                format!("{}/{} {mark}", c.count, c.expected)
            })
        });
        let n = self.opts.handoff_samples;
        row(&format!("handoff p50 (n={n})"), &|t| {
            ms(self.handoff(t, 50.0))
        });
        row(&format!("handoff p99 (nearest rank, n={n})"), &|t| {
            ms(self.handoff(t, 99.0))
        });
        row("  handoff failed / overlapping samples", &|t| {
            let r = self.r(t);
            r.handoff.as_ref().map_or_else(na, |h| {
                format!(
                    "{} / {}",
                    h.failures - r.handoff_negative,
                    r.handoff_negative
                )
            })
        });
        row(
            &format!("waiting: server requests/waiter/s ({})", self.opts.waiters),
            &|t| match self.r(t).waiting.as_ref() {
                Some(Waiting::Measured {
                    per_waiter_per_s, ..
                }) => format!("{per_waiter_per_s:.4}"),
                _ if t == Tool::Flock => "none (kernel)".into(),
                _ => na(),
            },
        );
        row(
            "  startup requests per waiter",
            &|t| match self.r(t).waiting.as_ref() {
                Some(Waiting::Measured {
                    startup_per_waiter, ..
                }) => format!("{startup_per_waiter:.1}"),
                _ => na(),
            },
        );
        let floor = self
            .rss_floor
            .map_or_else(na, |kib| format!("{:.2} MiB", kib as f64 / 1024.0));
        row(&format!("peak RSS, wrapper (sleep alone: {floor})"), &|t| {
            self.r(t)
                .rss_kib
                .map_or_else(na, |kib| format!("{:.2} MiB", kib as f64 / 1024.0))
        });
        let bare_version = self.bare_version.p50().map_or_else(na, fmt_ms);
        row(
            &format!("--version startup p50 (true: {bare_version})"),
            &|t| {
                self.r(t)
                    .version
                    .as_ref()
                    .and_then(Samples::p50)
                    .map_or_else(na, fmt_ms)
            },
        );
        if let Some(quorum) = &self.quorum {
            let one = quorum.one.p50().map_or_else(na, fmt_ms);
            let many = quorum.quorum.p50().map_or_else(na, fmt_ms);
            row("time to command start p50, 1 Redis", &|t| match t {
                Tool::Redlock => one.clone(),
                _ => na(),
            });
            row(
                &format!("  with {} Redlock nodes", quorum.nodes),
                &|t| match t {
                    Tool::Redlock => many.clone(),
                    _ => na(),
                },
            );
        }
        let _ = writeln!(o);
        targets_table(
            o,
            ("target for redlock-run", 42),
            ("measured", 26),
            self.targets(),
        );
        if self.bench.available(Tool::RedlockGlibc) {
            let _ = writeln!(o);
            let _ = writeln!(
                o,
                "{:<42}{:<26}",
                "glibc build, same run (not judged)", "measured"
            );
            let _ = writeln!(o, "{}", "-".repeat(74));
            for (_, label, value, unit) in self.glibc_ratios() {
                let shown = value.map_or_else(|| "n/a".into(), |v| format!("{v:.2}{unit}"));
                let _ = writeln!(o, "{label:<42}{shown:<26}");
            }
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "notes:");
        let _ = writeln!(
            o,
            "- redlock-run is the build the packages ship (musl unless --target or \
             --redlock-bin said otherwise), and the targets are judged on it; the glibc \
             build column, when shown, ran in the same run, interleaved with it"
        );
        let _ = writeln!(
            o,
            "- overhead/startup: spawn-to-exit from this harness, {} runs each, tools \
             interleaved; handoff: holder's command stamps just before it exits, the \
             waiter's command stamps as it starts (CLOCK_REALTIME), holder holds {}",
            self.opts.overhead_samples,
            fmt_ms(self.opts.hold)
        );
        let _ = writeln!(
            o,
            "- Redis commands and connections per uncontended run: the server's INFO \
             commandstats calls (scripts' commands included) and total_connections_received \
             over the overhead runs, less the harness's one INFO, per redlock-run -- true"
        );
        let leads: Vec<String> = TOOLS
            .iter()
            .filter_map(|&t| Some(format!("{} {}", t.name(), fmt_ms(self.r(t).waiter_lead?))))
            .collect();
        let _ = writeln!(
            o,
            "- handoff waiters were started at least this long before the holder let go \
             (time to queue up): {}",
            leads.join(", ")
        );
        let _ = writeln!(
            o,
            "- contended: each cycle is TOOL -- (read counter file, write +1); a tool is \
             WRONG unless the count equals clients x cycles and no cycle failed"
        );
        for tool in [Tool::Redlock, Tool::Etcd] {
            match self.r(tool).waiting.as_ref() {
                Some(Waiting::Measured { note, .. }) => {
                    let _ = writeln!(o, "- waiting, {note}");
                }
                Some(Waiting::NotApplicable(why)) => {
                    let _ = writeln!(o, "- waiting, {}: n/a: {why}", tool.name());
                }
                None => {}
            }
        }
        let _ = writeln!(
            o,
            "- peak RSS: /usr/bin/time %M (wait4 ru_maxrss) of the wrapper as holder \
             (-- sleep 0.3) and as waiter (-- true), max of 3 runs each"
        );
        if !self.bench.available(Tool::Etcd) {
            let _ = writeln!(o, "- etcdctl: n/a: {}", self.bench.etcd_missing);
        }
        let _ = writeln!(
            o,
            "- redis-cli poll and cronlock columns: not measured (n/a)"
        );
        let killed = KILLED.load(Ordering::Relaxed);
        if killed > 0 {
            let _ = writeln!(
                o,
                "- {killed} processes were killed for running over their time limit"
            );
        }
        out
    }
}

/// The targets' rows as a table: goal, measured and result columns, the first two of the
/// widths given with their headings.
pub(super) fn targets_table(
    o: &mut String,
    (goal, goal_width): (&str, usize),
    (measured, measured_width): (&str, usize),
    lines: Vec<targets::TargetLine>,
) {
    let _ = writeln!(o, "{goal:<goal_width$}{measured:<measured_width$}result");
    let _ = writeln!(o, "{}", "-".repeat(goal_width + measured_width + 6));
    for line in lines {
        let _ = writeln!(
            o,
            "{:<goal_width$}{:<measured_width$}{}",
            line.goal,
            line.measured,
            line.verdict.word()
        );
    }
}
