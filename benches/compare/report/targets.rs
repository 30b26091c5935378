//! redlock-run's targets, as one table per section: each row names the figure it checks,
//! the bound and which side of it passes, and how the figure is printed. The reports and
//! the JSON files iterate `TARGETS` and `MANY_TARGETS`, so a new target is one row here. This module owns judging a figure;
//! taking it is `measure/`'s, and the layout around the rows is `report/mod.rs`'s.

use crate::measure::contended::Contended;
use crate::stats::{millis, Samples};
use crate::tools::Tool::{self, Etcd, Flock, Redlock};

use super::Report;

use Bound::{AtLeast, AtMost, Below};
use Figure::{Own, Ratio};
use Measure::{
    Handoff, LocksPerS, Overhead, PeakRssMib, StartOneNode, StartQuorum, VersionMs, WaitingRequests,
};

/// `goal` is the wording printed and written to the JSON; keep it in step with `bound`.
const TARGETS: [Target; 10] = [
    Target {
        id: "overhead_vs_flock",
        goal: "overhead p50 <= 1.3x flock's",
        figure: Ratio(Overhead(Redlock), Overhead(Flock)),
        bound: AtMost(1.3),
        shown: Shown::num("", 2, "x flock's"),
        exclusive: false,
    },
    Target {
        id: "overhead_vs_etcdctl",
        goal: "overhead p50 >= 10x below etcdctl's",
        figure: Ratio(Overhead(Etcd), Overhead(Redlock)),
        bound: AtLeast(10.0),
        shown: Shown::num("etcdctl's is ", 1, "x"),
        exclusive: false,
    },
    Target {
        id: "contended_vs_flock",
        goal: "contended locks/s >= 0.7x flock's",
        figure: Ratio(LocksPerS(Redlock), LocksPerS(Flock)),
        bound: AtLeast(0.7),
        shown: Shown::num("", 2, "x flock's"),
        exclusive: true,
    },
    Target {
        id: "contended_vs_etcdctl",
        goal: "contended locks/s >= 3x etcdctl's",
        figure: Ratio(LocksPerS(Redlock), LocksPerS(Etcd)),
        bound: AtLeast(3.0),
        shown: Shown::num("", 2, "x etcdctl's"),
        exclusive: true,
    },
    Target {
        id: "handoff_p50_vs_flock",
        goal: "handoff p50 <= 1.3x flock's",
        figure: Ratio(Handoff(Redlock, 50.0), Handoff(Flock, 50.0)),
        bound: AtMost(1.3),
        shown: Shown::num("", 2, "x flock's"),
        exclusive: false,
    },
    Target {
        id: "handoff_p99",
        goal: "handoff p99 < 10 ms",
        figure: Own(Handoff(Redlock, 99.0)),
        bound: Below(10.0),
        shown: Shown::num("", 3, " ms"),
        exclusive: false,
    },
    Target {
        id: "waiting_requests",
        goal: "waiting <= 0.1 Redis requests/waiter/s",
        figure: Own(WaitingRequests(Redlock)),
        bound: AtMost(0.1),
        shown: Shown::num("", 4, " /waiter/s"),
        exclusive: false,
    },
    Target {
        id: "peak_rss",
        goal: "peak RSS <= 5 MiB",
        figure: Own(PeakRssMib(Redlock)),
        bound: AtMost(5.0),
        shown: Shown::num("", 2, " MiB"),
        exclusive: false,
    },
    Target {
        id: "redlock5_start_vs_single",
        goal: "5 Redlock nodes: start p50 <= 1.5x 1 node",
        figure: Ratio(StartQuorum, StartOneNode),
        bound: AtMost(1.5),
        shown: Shown::num("", 2, "x 1 node's"),
        exclusive: false,
    },
    Target {
        id: "version_p50",
        goal: "--version startup p50 < 1 ms",
        figure: Own(VersionMs(Redlock)),
        bound: Below(1.0),
        shown: Shown::MsOverTrue,
        exclusive: false,
    },
];

struct Target {
    /// The key in the JSON's `targets`; scripts comparing runs match on it.
    id: &'static str,
    goal: &'static str,
    figure: Figure,
    bound: Bound,
    shown: Shown,
    /// A rate only counts if the contended counter came out right: passing on speed
    /// alone would reward a lock that does not exclude.
    exclusive: bool,
}

/// One figure taken from the results, in the unit the goal speaks of.
#[derive(Clone, Copy)]
enum Measure {
    /// p50 of `TOOL -- true` minus p50 of bare `true`, ms.
    Overhead(Tool),
    LocksPerS(Tool),
    /// A nearest-rank percentile of the handoff gap, ms.
    Handoff(Tool, f64),
    WaitingRequests(Tool),
    PeakRssMib(Tool),
    /// `--version` p50, ms.
    VersionMs(Tool),
    /// redlock-run's time to command start p50 against one Redis, ms.
    StartOneNode,
    /// The same against the Redlock quorum.
    StartQuorum,
}

enum Figure {
    Own(Measure),
    /// The first measure over the second: targets against a peer are relative, because
    /// absolute times say more about the machine than about the tool.
    Ratio(Measure, Measure),
}

/// Which side of the limit passes.
pub(super) enum Bound {
    AtMost(f64),
    AtLeast(f64),
    Below(f64),
}

impl Bound {
    pub(super) fn holds(&self, x: f64) -> bool {
        match *self {
            AtMost(limit) => x <= limit,
            AtLeast(limit) => x >= limit,
            Below(limit) => x < limit,
        }
    }
}

/// How the figure reads in the `measured` column.
pub(super) enum Shown {
    Num {
        before: &'static str,
        places: usize,
        after: &'static str,
    },
    /// Milliseconds, with the difference from bare `true`'s `--version` p50 beside them:
    /// the part of the start that is not the cost of starting any program here.
    MsOverTrue,
}

impl Shown {
    pub(super) const fn num(before: &'static str, places: usize, after: &'static str) -> Shown {
        Shown::Num {
            before,
            places,
            after,
        }
    }

    /// `x` as the `measured` column shows it, without the comparison with bare `true`.
    pub(super) fn plain(&self, x: f64) -> String {
        match *self {
            Shown::Num {
                before,
                places,
                after,
            } => format!("{before}{x:.places$}{after}"),
            Shown::MsOverTrue => format!("{x:.3} ms"),
        }
    }
}

pub enum Verdict {
    Pass,
    Fail,
    NotApplicable,
}

impl Verdict {
    pub(super) fn of(check: Option<bool>) -> Verdict {
        match check {
            Some(true) => Verdict::Pass,
            Some(false) => Verdict::Fail,
            None => Verdict::NotApplicable,
        }
    }

    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::NotApplicable => "n/a",
        }
    }
}

/// One target judged against this run.
pub struct TargetLine {
    pub id: String,
    pub goal: String,
    pub measured: String,
    pub value: Option<f64>,
    pub verdict: Verdict,
}

impl Report<'_> {
    pub(super) fn targets(&self) -> Vec<TargetLine> {
        TARGETS.iter().map(|target| self.judge(target)).collect()
    }

    fn judge(&self, target: &Target) -> TargetLine {
        let value = match target.figure {
            Own(measure) => self.measure(measure),
            Ratio(a, b) => match (self.measure(a), self.measure(b)) {
                (Some(a), Some(b)) if b > 0.0 && a.is_finite() => Some(a / b),
                _ => None,
            },
        };
        let excluded = || {
            let contended = self.r(Redlock).contended.as_ref();
            contended.map(Contended::correct) == Some(true)
        };
        let passes = |x: f64| target.bound.holds(x) && (!target.exclusive || excluded());
        TargetLine {
            id: target.id.to_string(),
            goal: target.goal.to_string(),
            measured: value.map_or_else(|| "n/a".to_string(), |x| self.show(&target.shown, x)),
            value,
            verdict: Verdict::of(value.map(passes)),
        }
    }

    fn measure(&self, measure: Measure) -> Option<f64> {
        let p50_ms = |samples: &Samples| samples.p50().map(millis);
        match measure {
            Overhead(tool) => self.overhead(tool),
            LocksPerS(tool) => self.rate(tool),
            Handoff(tool, p) => self.handoff(tool, p),
            WaitingRequests(tool) => self.waiting(tool),
            PeakRssMib(tool) => self.r(tool).rss_kib.map(|kib| kib as f64 / 1024.0),
            VersionMs(tool) => self.r(tool).version.as_ref().and_then(p50_ms),
            StartOneNode => p50_ms(&self.quorum.as_ref()?.one),
            StartQuorum => p50_ms(&self.quorum.as_ref()?.quorum),
        }
    }

    fn show(&self, shown: &Shown, x: f64) -> String {
        match (shown, self.bare_version.p50().map(millis)) {
            (Shown::MsOverTrue, Some(floor)) => format!("{x:.3} ms ({:+.3} vs true)", x - floor),
            _ => shown.plain(x),
        }
    }
}
