//! What the many-waiters section prints and writes to target/bench/waiters.json: the
//! machine, one row per case and N with the ratios to flock's figures at the same N, the
//! waiting figures, redlock-run's targets for the section with PASS/FAIL, and notes on
//! method. It owns wording, layout and the JSON fields (an interface, like compare.json's);
//! the targets are `targets.rs`'s.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::host::loadavg;
use crate::json::Json;
use crate::measure::many::{Case, Figures, Many, CASES, CRITICAL, LIMIT};
use crate::procs::KILLED;
use crate::report::json::{machine_json, targets_json, versions_json};
use crate::stats::millis;

use super::targets_table;

pub struct ManyReport<'a> {
    pub machine: Vec<(&'static str, String)>,
    pub versions: Vec<(&'static str, String)>,
    pub many: &'a Many,
    /// The section alone, and since the servers started.
    pub elapsed: Duration,
    pub since_start: Duration,
}

/// Nearest-rank percentile of the handoff gaps, ms.
pub(super) fn gap(f: &Figures, p: f64) -> Option<f64> {
    f.gaps.pct(p).map(millis)
}

impl ManyReport<'_> {
    pub(super) fn get(&self, case: Case, n: usize) -> Option<&Figures> {
        self.many.get(case, n)
    }

    /// `case`'s figure over flock's at the same N.
    pub(super) fn vs_flock(
        &self,
        case: Case,
        n: usize,
        figure: impl Fn(&Figures) -> Option<f64>,
    ) -> Option<f64> {
        let own = figure(self.get(case, n)?)?;
        let flock = figure(self.get(Case::Flock, n)?)?;
        (flock > 0.0).then(|| own / flock)
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        let o = &mut out;
        let many = self.many;
        let _ = writeln!(
            o,
            "\n== many waiters: one holder, N waiters on one key, each {} ms under the lock; \
             same run, same machine ==",
            CRITICAL.as_millis()
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
            "{:<14} {} s (this section; {} s since the servers started)",
            "elapsed",
            self.elapsed.as_secs(),
            self.since_start.as_secs()
        );
        let _ = writeln!(o);

        let na = || "n/a".to_string();
        let num = |x: Option<f64>, places: usize| x.map_or_else(na, |x| format!("{x:.places$}"));
        let header = format!(
            "{:<22}{:>5}{:>6}{:>5}{:>5}{:>9}{:>9}{:>8}{:>8}{:>8}{:>8}{:>9}{:>8}{:>8}{:>7}",
            "case",
            "N",
            "ran",
            "fail",
            "ovl",
            "req/hof",
            "cmds/hof",
            "gap p50",
            "p90",
            "p99",
            "xflock",
            "drain s",
            "xflock",
            "max/avg",
            "order"
        );
        let _ = writeln!(o, "{header}");
        let _ = writeln!(o, "{}", "-".repeat(header.len()));
        for &n in &many.ns {
            for case in CASES {
                let Some(run) = many.runs.iter().find(|r| r.case == case && r.n == n) else {
                    continue;
                };
                let f = match &run.figures {
                    Ok(f) => f,
                    Err(why) => {
                        let _ = writeln!(o, "{:<22}{n:>5}  {why}", case.label());
                        continue;
                    }
                };
                let order = if f.order.arrival_known {
                    if f.order.out_of_order == 0 {
                        "exact".to_string()
                    } else {
                        format!("{} off", f.order.out_of_order)
                    }
                } else {
                    format!("({})", f.order.out_of_order)
                };
                let _ =
                    writeln!(
                    o,
                    "{:<22}{n:>5}{:>6}{:>5}{:>5}{:>9}{:>9}{:>8}{:>8}{:>8}{:>8}{:>9}{:>8}{:>8}{:>7}",
                    case.label(),
                    f.ran,
                    f.failed,
                    f.overlaps,
                    num(f.requests_per_handoff, 1),
                    num(f.executed_per_handoff, 1),
                    num(gap(f, 50.0), 2),
                    num(gap(f, 90.0), 2),
                    num(gap(f, 99.0), 2),
                    num(self.vs_flock(case, n, |f| gap(f, 50.0)), 2),
                    num(f.drain.map(|d| d.as_secs_f64()), 2),
                    num(self.vs_flock(case, n, |f| f.drain.map(|d| d.as_secs_f64())), 2),
                    num(f.wait_max_over_mean, 2),
                    order
                );
            }
        }
        let _ = writeln!(o);
        let header = format!(
            "{:<34}{:>5}{:>14}{:>13}{:>17}{:>12}{:>11}",
            "while waiting",
            "N",
            "req/waiter/s",
            "conn/waiter",
            "peak RSS/waiter",
            "PSS/waiter",
            "processes"
        );
        let _ = writeln!(o, "{header}");
        let _ = writeln!(o, "{}", "-".repeat(header.len()));
        let mib = |kib: Option<f64>| kib.map_or_else(na, |k| format!("{:.2} MiB", k / 1024.0));
        for &n in &many.ns {
            for case in CASES {
                let Some(f) = many.get(case, n) else {
                    continue;
                };
                let w = &f.waiting;
                let requests = match (w.requests_per_waiter_per_s, case) {
                    (Some(rate), _) => format!("{rate:.4}"),
                    (None, Case::Flock) => "0 (kernel)".into(),
                    (None, _) => "-".into(),
                };
                let _ = writeln!(
                    o,
                    "{:<34}{n:>5}{requests:>14}{:>13}{:>17}{:>12}{:>11}",
                    case.label(),
                    num(w.connections_per_waiter, 2),
                    mib(w.peak_rss_kib_per_waiter),
                    mib(w.pss_kib_per_waiter),
                    w.processes
                );
            }
        }

        let _ = writeln!(o);
        targets_table(
            o,
            ("target for redlock-run, many waiters", 66),
            ("measured (worst case)", 30),
            self.targets(),
        );
        let _ = writeln!(o);
        let _ = writeln!(o, "notes:");
        for note in self.method_notes() {
            let _ = writeln!(o, "- {note}");
        }
        for note in &many.notes {
            let _ = writeln!(o, "- {note}");
        }
        let killed = KILLED.load(Ordering::Relaxed);
        if killed > 0 {
            let _ = writeln!(
                o,
                "- {killed} processes were killed for running over their time limit"
            );
        }
        out
    }

    fn method_notes(&self) -> Vec<String> {
        let many = self.many;
        vec![
            format!(
                "each case: {} on a fresh key ({} with --limit {LIMIT}) holds until told to \
                 stop; N waiters are spawned (all at once; with --fair one by one, each after \
                 the fair queue's ZCARD counted it); once their connections stop growing \
                 and 1 s more, the waiting figures are read; then the holders stop and the \
                 queue drains. Each waiter's command (this bench executable) stamps its \
                 start, sleeps {} ms, stamps its end, and appends both (CLOCK_REALTIME ns) \
                 to one O_APPEND file",
                "one holder",
                LIMIT,
                CRITICAL.as_millis()
            ),
            "ovl: starts at which more commands ran than the lock allows (1, or 3 with \
             --limit 3); fail: processes that exited non-zero or were killed, plus waiters \
             that never ran"
                .into(),
            "gap: the k-th waiter's start minus the k-th end of any command (holders' \
             included), ms: with one slot, one holder's end to the next one's start; xflock: \
             over flock's figure at the same N"
                .into(),
            "drain: the holder's end to the last waiter's end, s".into(),
            "req/hof: server requests from the holder's release to the last waiter's exit, per \
             waiter that ran. Redis: requests sent by clients, counted per connection \
             with MONITOR (markers in its stream bound the span exactly; commands that \
             scripts run are not requests); cmds/hof: INFO commandstats calls in the same \
             span, scripts' commands included. etcd: grpc_server_msg_received_total"
                .into(),
            "max/avg: the longest wait (spawn to start of the waiter's command) over the \
             mean; all N are queued before the release, so every waiting order gives about \
             (settle + drain) / (settle + drain/2), under 2: it cannot show starvation by \
             overtaking, only a waiter left behind"
                .into(),
            "order: 'exact' or 'K off' where arrival order is known (--fair): waiters whose \
             place among the starts differs from their place in arrival; '(K)' where it is \
             not (spawned back to back), for information"
                .into(),
            format!(
                "while waiting: req/waiter/s counted over {} s at the largest N of each case \
                 (Redis: the waiters' requests only, holders' renewals left out; etcd: all \
                 gRPC messages, its holder's lease keep-alives included); conn/waiter: new \
                 established TCP connections to the server's port (/proc/net/tcp) over N; \
                 peak RSS/waiter: the sum of VmHWM over each waiting process and its \
                 children (redlock-run's guardian) over N; PSS shares shared pages out",
                many.window.as_secs()
            ),
            format!(
                "etcdctl lock runs up to N = {} (--many-etcd-max): each waiter is a Go \
                 process of about 25 MB",
                many.etcd_max
            ),
            "MONITOR costs Redis a few microseconds per command; it slows each case in \
             proportion to its request count, and does not touch flock or etcd"
                .into(),
        ]
    }

    pub fn json(&self) -> Json {
        let many = self.many;
        let opt = Json::opt_num;
        let case_json = |case: Case, n: usize| -> Json {
            let Some(run) = many.runs.iter().find(|r| r.case == case && r.n == n) else {
                return Json::Null;
            };
            let f = match &run.figures {
                Ok(f) => f,
                Err(why) => return Json::obj([("not_measured", Json::str(why.clone()))]),
            };
            let counts = |map: &std::collections::BTreeMap<String, u64>| {
                Json::Obj(
                    map.iter()
                        .map(|(k, v)| (k.clone(), Json::Int(*v as i64)))
                        .collect(),
                )
            };
            let w = &f.waiting;
            Json::obj([
                ("n", Json::Int(f.n as i64)),
                ("ran", Json::Int(f.ran as i64)),
                ("failed", Json::Int(f.failed as i64)),
                ("overlaps", Json::Int(f.overlaps as i64)),
                ("max_concurrent", Json::Int(f.max_concurrent as i64)),
                ("slots", Json::Int(case.slots() as i64)),
                ("requests_per_handoff", opt(f.requests_per_handoff)),
                (
                    "commandstats_calls_per_handoff",
                    opt(f.executed_per_handoff),
                ),
                ("script_commands_per_handoff", opt(f.scripted_per_handoff)),
                ("drain_requests_by_command", counts(&f.requests_by_command)),
                ("gap", f.gaps.json()),
                (
                    "gap_p50_vs_flock",
                    opt(self.vs_flock(case, n, |f| gap(f, 50.0))),
                ),
                ("drain_s", opt(f.drain.map(|d| d.as_secs_f64()))),
                (
                    "drain_vs_flock",
                    opt(self.vs_flock(case, n, |f| f.drain.map(|d| d.as_secs_f64()))),
                ),
                ("spawn_s", Json::Num(f.spawn_time.as_secs_f64())),
                ("wait", f.waits.json()),
                ("wait_max_over_mean", opt(f.wait_max_over_mean)),
                (
                    "order",
                    Json::obj([
                        ("out_of_order", Json::Int(f.order.out_of_order as i64)),
                        ("arrival_known", Json::Bool(f.order.arrival_known)),
                        ("method", Json::str(f.order.method)),
                    ]),
                ),
                (
                    "waiting",
                    Json::obj([
                        ("connections_per_waiter", opt(w.connections_per_waiter)),
                        ("peak_rss_kib_per_waiter", opt(w.peak_rss_kib_per_waiter)),
                        ("pss_kib_per_waiter", opt(w.pss_kib_per_waiter)),
                        ("processes", Json::Int(w.processes as i64)),
                        ("window_s", opt(w.window_s)),
                        (
                            "requests_per_waiter_per_s",
                            opt(w.requests_per_waiter_per_s),
                        ),
                        ("window_requests_by_command", counts(&w.window_by_command)),
                    ]),
                ),
            ])
        };
        Json::obj([
            ("machine", machine_json(&self.machine)),
            ("versions", versions_json(&self.versions)),
            (
                "config",
                Json::obj([
                    (
                        "n",
                        Json::Arr(many.ns.iter().map(|&n| Json::Int(n as i64)).collect()),
                    ),
                    ("critical_ms", Json::Num(millis(CRITICAL))),
                    ("window_s", Json::Num(many.window.as_secs_f64())),
                    ("etcd_max_n", Json::Int(many.etcd_max as i64)),
                    ("limit", Json::Int(LIMIT as i64)),
                    ("elapsed_s", Json::Num(self.elapsed.as_secs_f64())),
                    (
                        "method",
                        Json::Arr(self.method_notes().into_iter().map(Json::Str).collect()),
                    ),
                ]),
            ),
            (
                "cases",
                Json::Obj(
                    CASES
                        .iter()
                        .map(|&case| {
                            let per_n = many
                                .ns
                                .iter()
                                .map(|&n| (n.to_string(), case_json(case, n)))
                                .collect();
                            (case.slug().to_string(), Json::Obj(per_n))
                        })
                        .collect(),
                ),
            ),
            ("targets", targets_json(self.targets())),
            (
                "notes",
                Json::Arr(many.notes.iter().cloned().map(Json::Str).collect()),
            ),
        ])
    }
}
