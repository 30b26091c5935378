//! redlock-run's targets: each one's figure, bound and verdict. The report and the JSON
//! both print what `targets` returns. This module owns judging a figure; taking it is
//! `measure/`'s, and the layout around the rows is `report/mod.rs`'s.

use crate::measure::contended::Contended;
use crate::stats::{millis, Samples};
use crate::tools::Tool;

use super::Report;

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

pub struct TargetLine {
    pub id: &'static str,
    pub goal: &'static str,
    pub measured: String,
    pub value: Option<f64>,
    pub verdict: Verdict,
}

impl Report<'_> {
    pub(super) fn targets(&self) -> Vec<TargetLine> {
        let (rl, fl, et) = (Tool::Redlock, Tool::Flock, Tool::Etcd);
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 && a.is_finite() => Some(a / b),
            _ => None,
        };
        let show = |value: Option<f64>, text: &dyn Fn(f64) -> String| {
            value.map_or_else(|| "n/a".to_string(), text)
        };
        let mut lines = Vec::new();

        let v = ratio(self.overhead(rl), self.overhead(fl));
        lines.push(TargetLine {
            id: "overhead_vs_flock",
            goal: "overhead p50 <= 1.3x flock's",
            measured: show(v, &|x| format!("{x:.2}x flock's")),
            value: v,
            verdict: Verdict::of(v.map(|x| x <= 1.3)),
        });
        let v = ratio(self.overhead(et), self.overhead(rl));
        lines.push(TargetLine {
            id: "overhead_vs_etcdctl",
            goal: "overhead p50 >= 10x below etcdctl's",
            measured: show(v, &|x| format!("etcdctl's is {x:.1}x")),
            value: v,
            verdict: Verdict::of(v.map(|x| x >= 10.0)),
        });
        let correct = self.r(rl).contended.as_ref().map(Contended::correct);
        let v = ratio(self.rate(rl), self.rate(fl));
        lines.push(TargetLine {
            id: "contended_vs_flock",
            goal: "contended locks/s >= 0.7x flock's",
            measured: show(v, &|x| format!("{x:.2}x flock's")),
            value: v,
            verdict: Verdict::of(v.map(|x| x >= 0.7 && correct == Some(true))),
        });
        let v = ratio(self.rate(rl), self.rate(et));
        lines.push(TargetLine {
            id: "contended_vs_etcdctl",
            goal: "contended locks/s >= 3x etcdctl's",
            measured: show(v, &|x| format!("{x:.2}x etcdctl's")),
            value: v,
            verdict: Verdict::of(v.map(|x| x >= 3.0 && correct == Some(true))),
        });
        let v = ratio(self.handoff(rl, 50.0), self.handoff(fl, 50.0));
        lines.push(TargetLine {
            id: "handoff_p50_vs_flock",
            goal: "handoff p50 <= 1.3x flock's",
            measured: show(v, &|x| format!("{x:.2}x flock's")),
            value: v,
            verdict: Verdict::of(v.map(|x| x <= 1.3)),
        });
        let v = self.handoff(rl, 99.0);
        lines.push(TargetLine {
            id: "handoff_p99",
            goal: "handoff p99 < 10 ms",
            measured: show(v, &|x| format!("{x:.3} ms")),
            value: v,
            verdict: Verdict::of(v.map(|x| x < 10.0)),
        });
        let v = self.waiting(rl);
        lines.push(TargetLine {
            id: "waiting_requests",
            goal: "waiting <= 0.1 Redis requests/waiter/s",
            measured: show(v, &|x| format!("{x:.4} /waiter/s")),
            value: v,
            verdict: Verdict::of(v.map(|x| x <= 0.1)),
        });
        let v = self.r(rl).rss_kib.map(|kib| kib as f64 / 1024.0);
        lines.push(TargetLine {
            id: "peak_rss",
            goal: "peak RSS <= 5 MiB",
            measured: show(v, &|x| format!("{x:.2} MiB")),
            value: v,
            verdict: Verdict::of(v.map(|x| x <= 5.0)),
        });
        let v = self
            .quorum
            .as_ref()
            .and_then(|q| ratio(q.quorum.p50().map(millis), q.one.p50().map(millis)));
        lines.push(TargetLine {
            id: "redlock5_start_vs_single",
            goal: "5 Redlock nodes: start p50 <= 1.5x 1 node",
            measured: show(v, &|x| format!("{x:.2}x 1 node's")),
            value: v,
            verdict: Verdict::of(v.map(|x| x <= 1.5)),
        });
        let v = self
            .r(rl)
            .version
            .as_ref()
            .and_then(Samples::p50)
            .map(millis);
        let floor = self.bare_version.p50().map(millis);
        lines.push(TargetLine {
            id: "version_p50",
            goal: "--version startup p50 < 1 ms",
            measured: show(v, &|x| match floor {
                Some(floor) => format!("{x:.3} ms ({:+.3} vs true)", x - floor),
                None => format!("{x:.3} ms"),
            }),
            value: v,
            verdict: Verdict::of(v.map(|x| x < 1.0)),
        });
        lines
    }
}
