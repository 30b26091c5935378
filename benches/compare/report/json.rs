//! The JSON written to target/bench/compare.json: every figure per tool, the machine, the
//! configuration and the judged targets. Its field names are an interface (runs are
//! compared by script across commits), so they change only on purpose. It owns the fields;
//! the syntax is `crate::json`'s.

use crate::helper::STAMP_NOTE;
use crate::host::loadavg;
use crate::json::Json;
use crate::measure::waiting::Waiting;
use crate::stats::{millis, Samples};
use crate::tools::Tool;

use super::Report;

impl Report<'_> {
    pub fn json(&self) -> Json {
        let tool_json = |tool: Tool| -> Json {
            if !self.bench.available(tool) {
                return Json::obj([
                    ("available", Json::Bool(false)),
                    ("reason", Json::str(self.bench.etcd_missing.clone())),
                ]);
            }
            let r = self.r(tool);
            let samples = |s: &Option<Samples>| s.as_ref().map_or(Json::Null, Samples::json);
            let contended = r.contended.as_ref().map_or(Json::Null, |c| {
                Json::obj([
                    ("clients", Json::Int(self.opts.clients as i64)),
                    ("cycles_per_client", Json::Int(self.opts.cycles as i64)),
                    ("elapsed_s", Json::Num(c.elapsed.as_secs_f64())),
                    ("locks_per_s", Json::opt_num(self.rate(tool))),
                    ("failed_cycles", Json::Int(c.failed_cycles as i64)),
                    ("counter", Json::Int(c.count as i64)),
                    ("expected", Json::Int(c.expected as i64)),
                    ("mutual_exclusion_ok", Json::Bool(c.correct())),
                ])
            });
            let waiting = match &r.waiting {
                Some(Waiting::Measured {
                    per_waiter_per_s,
                    startup_per_waiter,
                    detail,
                    ..
                }) => Json::obj([
                    ("requests_per_waiter_per_s", Json::Num(*per_waiter_per_s)),
                    (
                        "startup_requests_per_waiter",
                        Json::Num(*startup_per_waiter),
                    ),
                    ("detail", detail.clone()),
                ]),
                Some(Waiting::NotApplicable(why)) => Json::obj([
                    ("requests_per_waiter_per_s", Json::Null),
                    ("reason", Json::str(why.clone())),
                ]),
                None => Json::Null,
            };
            Json::obj([
                ("available", Json::Bool(true)),
                ("overhead_p50_ms", Json::opt_num(self.overhead(tool))),
                ("tool_true", samples(&r.overhead)),
                (
                    "redis_per_uncontended_run",
                    r.overhead_redis.map_or(Json::Null, |per_run| {
                        Json::obj([
                            ("runs", Json::Int(per_run.runs as i64)),
                            ("commandstats_calls", Json::Num(per_run.commands)),
                            ("connections", Json::Num(per_run.connections)),
                        ])
                    }),
                ),
                ("contended", contended),
                ("handoff", samples(&r.handoff)),
                ("handoff_overlaps", Json::Int(r.handoff_negative as i64)),
                (
                    "handoff_min_waiter_lead_ms",
                    Json::opt_num(r.waiter_lead.map(millis)),
                ),
                ("waiting", waiting),
                (
                    "peak_rss_kib",
                    r.rss_kib.map_or(Json::Null, |k| Json::Int(k as i64)),
                ),
                ("startup", samples(&r.version)),
            ])
        };
        let not_measured = || {
            Json::obj([
                ("available", Json::Bool(false)),
                ("reason", Json::str("not measured")),
            ])
        };
        Json::obj([
            ("machine", machine_json(&self.machine)),
            ("versions", versions_json(&self.versions)),
            (
                "config",
                Json::obj([
                    (
                        "overhead_samples",
                        Json::Int(self.opts.overhead_samples as i64),
                    ),
                    (
                        "handoff_samples",
                        Json::Int(self.opts.handoff_samples as i64),
                    ),
                    ("hold_ms", Json::Num(millis(self.opts.hold))),
                    ("clients", Json::Int(self.opts.clients as i64)),
                    ("cycles", Json::Int(self.opts.cycles as i64)),
                    ("waiters", Json::Int(self.opts.waiters as i64)),
                    (
                        "wait_window_s",
                        Json::Num(self.opts.wait_window.as_secs_f64()),
                    ),
                    ("command", Json::str(STAMP_NOTE)),
                    ("elapsed_s", Json::Num(self.elapsed.as_secs_f64())),
                ]),
            ),
            ("bare_true", self.bare.json()),
            (
                "redlock_history_cost",
                Json::obj([
                    ("history_on", self.recording.on.json()),
                    ("history_off", self.recording.off.json()),
                    ("delta_p50_ms", Json::opt_num(self.recording.delta_ms())),
                    ("target_ms", Json::Num(0.1)),
                ]),
            ),
            ("bare_true_startup", self.bare_version.json()),
            (
                "redlock_time_to_start",
                self.quorum.as_ref().map_or(Json::Null, |q| {
                    Json::obj([
                        ("nodes", Json::Int(q.nodes as i64)),
                        ("one_node", q.one.json()),
                        ("quorum", q.quorum.json()),
                    ])
                }),
            ),
            (
                "rss_floor_kib",
                self.rss_floor.map_or(Json::Null, |k| Json::Int(k as i64)),
            ),
            (
                "tools",
                Json::obj([
                    ("redlock-run", tool_json(Tool::Redlock)),
                    ("flock", tool_json(Tool::Flock)),
                    ("etcdctl", tool_json(Tool::Etcd)),
                    ("redlock-run-glibc", tool_json(Tool::RedlockGlibc)),
                    ("redis-cli-poll", not_measured()),
                    ("cronlock", not_measured()),
                ]),
            ),
            ("targets", targets_json(self.targets())),
            (
                "glibc_build",
                if self.bench.available(Tool::RedlockGlibc) {
                    Json::Obj(
                        self.glibc_ratios()
                            .into_iter()
                            .map(|(key, _, value, _)| (key.to_string(), Json::opt_num(value)))
                            .collect(),
                    )
                } else {
                    Json::Null
                },
            ),
        ])
    }
}

/// The machine's figures, and the load average as the run ends: the head of every JSON
/// report.
pub fn machine_json(machine: &[(&'static str, String)]) -> Json {
    Json::Obj(
        machine
            .iter()
            .map(|(k, v)| (k.to_string(), Json::str(v.clone())))
            .chain([("loadavg_end".to_string(), Json::str(loadavg()))])
            .collect(),
    )
}

/// The tools' versions, as every JSON report gives them.
pub fn versions_json(versions: &[(&'static str, String)]) -> Json {
    Json::Obj(
        versions
            .iter()
            .map(|(k, v)| (k.to_string(), Json::str(v.clone())))
            .collect(),
    )
}

/// The targets' rows, as every JSON report gives them.
pub fn targets_json(lines: Vec<super::targets::TargetLine>) -> Json {
    Json::Arr(
        lines
            .into_iter()
            .map(|line| {
                Json::obj([
                    ("id", Json::str(line.id)),
                    ("goal", Json::str(line.goal)),
                    ("value", Json::opt_num(line.value)),
                    ("measured", Json::str(line.measured)),
                    ("result", Json::str(line.verdict.word())),
                ])
            })
            .collect(),
    )
}
