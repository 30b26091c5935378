//! redlock-run's targets, as one table per section: each row names the figure it checks,
//! the bound and which side of it passes, and how the figure is printed. The reports and
//! the JSON files iterate `TARGETS` and `MANY_TARGETS`, so a new target is one row here. This module owns judging a figure;
//! taking it is `measure/`'s, and the layout around the rows is `report/mod.rs`'s.

use crate::measure::contended::Contended;
use crate::stats::{millis, Samples};
use crate::tools::Tool::{self, Etcd, Flock, Redlock};

use super::many::{gap, ManyReport};
use super::Report;
use crate::measure::many::{Case, Figures};

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
enum Bound {
    AtMost(f64),
    AtLeast(f64),
    Below(f64),
}

impl Bound {
    fn holds(&self, x: f64) -> bool {
        match *self {
            AtMost(limit) => x <= limit,
            AtLeast(limit) => x >= limit,
            Below(limit) => x < limit,
        }
    }
}

/// How the figure reads in the `measured` column.
enum Shown {
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
    const fn num(before: &'static str, places: usize, after: &'static str) -> Shown {
        Shown::Num {
            before,
            places,
            after,
        }
    }
}

pub enum Verdict {
    Pass,
    Fail,
    NotApplicable,
}

impl Verdict {
    fn of(check: Option<bool>) -> Verdict {
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
        match *shown {
            Shown::Num {
                before,
                places,
                after,
            } => format!("{before}{x:.places$}{after}"),
            Shown::MsOverTrue => match self.bare_version.p50().map(millis) {
                Some(floor) => format!("{x:.3} ms ({:+.3} vs true)", x - floor),
                None => format!("{x:.3} ms"),
            },
        }
    }
}

/// The many-waiters section's targets. Each row is judged once for each redlock-run mode
/// in `cases`, on the worst N among those it speaks of; a figure from a case in which a
/// process failed, or a waiter never ran, does not pass.
const MANY_TARGETS: [ManyTarget; 10] = [
    ManyTarget {
        id: "many_requests_per_handoff",
        goal: "Redis requests per handoff <= 4, every N",
        figure: ManyFigure::RequestsPerHandoff,
        ns: Ns::All,
        bound: AtMost(4.0),
        shown: Shown::num("", 1, " /handoff"),
        cases: &REDLOCK_MODES,
    },
    ManyTarget {
        id: "many_gap_p50_vs_flock",
        goal: "handoff gap p50 <= 1.3x flock's, every N",
        figure: ManyFigure::GapP50VsFlock,
        ns: Ns::All,
        bound: AtMost(1.3),
        shown: Shown::num("", 2, "x flock's"),
        cases: &REDLOCK_MODES,
    },
    ManyTarget {
        id: "many_gap_p99",
        goal: "handoff gap p99 < 10 ms, N <= 300",
        figure: ManyFigure::GapP99,
        ns: Ns::UpTo(300),
        bound: Below(10.0),
        shown: Shown::num("", 2, " ms"),
        cases: &REDLOCK_MODES,
    },
    ManyTarget {
        id: "many_drain_vs_flock",
        goal: "drain <= 1.25x flock's, N = 300 and 1000",
        figure: ManyFigure::DrainVsFlock,
        ns: Ns::From(300),
        bound: AtMost(1.25),
        shown: Shown::num("", 2, "x flock's"),
        cases: &REDLOCK_MODES,
    },
    ManyTarget {
        id: "many_waiting_requests",
        goal: "waiting: <= 0.1 Redis requests/waiter/s",
        figure: ManyFigure::WaitingRequests,
        ns: Ns::All,
        bound: AtMost(0.1),
        shown: Shown::num("", 3, " /waiter/s"),
        cases: &REDLOCK_MODES,
    },
    ManyTarget {
        id: "many_waiting_rss",
        goal: "waiting: peak RSS <= 3.5 MiB per waiter",
        figure: ManyFigure::PeakRssMib,
        ns: Ns::All,
        bound: AtMost(3.5),
        shown: Shown::num("", 2, " MiB"),
        cases: &REDLOCK_MODES,
    },
    ManyTarget {
        id: "many_waiting_connections",
        goal: "waiting: <= 1 Redis connection per waiter",
        figure: ManyFigure::Connections,
        ns: Ns::All,
        bound: AtMost(1.0),
        shown: Shown::num("", 2, " /waiter"),
        cases: &REDLOCK_MODES,
    },
    ManyTarget {
        id: "many_wait_spread",
        goal: "N = 300: longest wait <= 3x the mean",
        figure: ManyFigure::WaitSpread,
        ns: Ns::Only(300),
        bound: AtMost(3.0),
        shown: Shown::num("", 2, "x the mean"),
        cases: &[Case::Redlock],
    },
    ManyTarget {
        id: "many_fair_order",
        goal: "N = 300: starts in arrival order",
        figure: ManyFigure::OutOfOrder,
        ns: Ns::Only(300),
        bound: AtMost(0.0),
        shown: Shown::num("", 0, " out of place"),
        cases: &[Case::RedlockFair],
    },
    ManyTarget {
        id: "many_mutual_exclusion",
        goal: "no overlap, every N",
        figure: ManyFigure::Overlaps,
        ns: Ns::All,
        bound: AtMost(0.0),
        shown: Shown::num("", 0, " overlaps"),
        cases: &REDLOCK_MODES,
    },
];

const REDLOCK_MODES: [Case; 3] = [Case::Redlock, Case::RedlockLimit, Case::RedlockFair];

struct ManyTarget {
    /// The JSON key is this plus the case, e.g. `many_gap_p99_redlock-run-fair`.
    id: &'static str,
    goal: &'static str,
    figure: ManyFigure,
    ns: Ns,
    bound: Bound,
    shown: Shown,
    cases: &'static [Case],
}

/// One case's figure at one N, in the unit the goal speaks of; higher is worse for all.
#[derive(Clone, Copy)]
enum ManyFigure {
    RequestsPerHandoff,
    GapP50VsFlock,
    /// ms.
    GapP99,
    DrainVsFlock,
    WaitingRequests,
    PeakRssMib,
    Connections,
    /// Longest wait over the mean.
    WaitSpread,
    /// Waiters out of arrival order; none when arrival order is not known.
    OutOfOrder,
    Overlaps,
}

/// Which N a target speaks of.
enum Ns {
    All,
    UpTo(usize),
    From(usize),
    Only(usize),
}

impl Ns {
    fn covers(&self, n: usize) -> bool {
        match *self {
            Ns::All => true,
            Ns::UpTo(most) => n <= most,
            Ns::From(least) => n >= least,
            Ns::Only(only) => n == only,
        }
    }
}

impl ManyReport<'_> {
    pub(super) fn targets(&self) -> Vec<TargetLine> {
        MANY_TARGETS
            .iter()
            .flat_map(|target| target.cases.iter().map(move |&case| (target, case)))
            .map(|(target, case)| self.judge(target, case))
            .collect()
    }

    fn judge(&self, target: &ManyTarget, case: Case) -> TargetLine {
        // (value, N, whether the case ran clean) at each N the target speaks of.
        let values: Vec<(f64, usize, bool)> = self
            .many
            .ns
            .iter()
            .filter(|&&n| target.ns.covers(n))
            .filter_map(|&n| {
                let f = self.get(case, n)?;
                let clean = f.failed == 0;
                Some((self.many_figure(target.figure, case, f)?, n, clean))
            })
            .collect();
        let worst = values.iter().copied().max_by(|a, b| a.0.total_cmp(&b.0));
        let clean = values.iter().all(|v| v.2);
        let measured = worst.map_or_else(
            || "n/a".to_string(),
            |(x, n, _)| {
                let failed = if clean { "" } else { ", with failures" };
                format!("{} at N={n}{failed}", self.show(&target.shown, x))
            },
        );
        TargetLine {
            id: format!("{}_{}", target.id, case.slug()),
            goal: format!("{}: {}", case.label(), target.goal),
            measured,
            value: worst.map(|w| w.0),
            verdict: Verdict::of(worst.map(|(x, _, _)| target.bound.holds(x) && clean)),
        }
    }

    fn many_figure(&self, figure: ManyFigure, case: Case, f: &Figures) -> Option<f64> {
        let w = &f.waiting;
        match figure {
            ManyFigure::RequestsPerHandoff => f.requests_per_handoff,
            ManyFigure::GapP50VsFlock => self.vs_flock(case, f.n, |f| gap(f, 50.0)),
            ManyFigure::GapP99 => gap(f, 99.0),
            ManyFigure::DrainVsFlock => {
                self.vs_flock(case, f.n, |f| f.drain.map(|d| d.as_secs_f64()))
            }
            ManyFigure::WaitingRequests => w.requests_per_waiter_per_s,
            ManyFigure::PeakRssMib => w.peak_rss_kib_per_waiter.map(|kib| kib / 1024.0),
            ManyFigure::Connections => w.connections_per_waiter,
            ManyFigure::WaitSpread => f.wait_max_over_mean,
            ManyFigure::OutOfOrder => f.order.arrival_known.then_some(f.order.out_of_order as f64),
            ManyFigure::Overlaps => Some(f.overlaps as f64),
        }
    }

    fn show(&self, shown: &Shown, x: f64) -> String {
        match *shown {
            Shown::Num {
                before,
                places,
                after,
            } => format!("{before}{x:.places$}{after}"),
            Shown::MsOverTrue => format!("{x:.3} ms"),
        }
    }
}
