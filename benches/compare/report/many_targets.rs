//! The many-waiters section's targets (`scripts/bench --many-waiters`): each judged on
//! the worst N it speaks of, for each redlock-run mode, in the same form as the other
//! section's (`targets.rs`).

use super::many::{gap, ManyReport};
use super::targets::{Bound, Shown, TargetLine, Verdict};
use crate::measure::many::{Case, Figures};

use Bound::{AtMost, Below};

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
                format!("{} at N={n}{failed}", target.shown.plain(x))
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
}
