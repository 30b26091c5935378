//! The many-waiters section: one holder (one per slot with `--limit 3`) and N waiters on one
//! key, for N in `--many-n`, each waiter running a 5 ms command under the lock; flock,
//! etcdctl lock (up to `--many-etcd-max`) and redlock-run in its three modes, one after
//! the other for each N. It owns the plan (which cases, in which order, within which time
//! budget) and the figures' types; one case is `case.rs`, the readings `observe.rs`, the
//! arithmetic over the stamps `stamps.rs`, and judging them `report/`.

mod case;
mod observe;
mod stamps;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::measure::phase;
use crate::stats::Samples;
use crate::tools::{Bench, Tool};

pub use case::CRITICAL;
pub use observe::commandstats_calls;

/// A tool in one mode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Case {
    Flock,
    Etcd,
    Redlock,
    RedlockLimit,
    RedlockFair,
}

/// The `--limit` the semaphore case runs with.
pub const LIMIT: usize = 3;

/// In the order each N runs them.
pub const CASES: [Case; 5] = [
    Case::Flock,
    Case::Etcd,
    Case::Redlock,
    Case::RedlockLimit,
    Case::RedlockFair,
];

impl Case {
    pub fn label(self) -> &'static str {
        match self {
            Case::Flock => "flock",
            Case::Etcd => "etcdctl lock",
            Case::Redlock => "redlock-run",
            Case::RedlockLimit => "redlock-run --limit 3",
            Case::RedlockFair => "redlock-run --fair",
        }
    }

    /// Used in file and key names and as the JSON key.
    pub fn slug(self) -> &'static str {
        match self {
            Case::Flock => "flock",
            Case::Etcd => "etcdctl",
            Case::Redlock => "redlock-run",
            Case::RedlockLimit => "redlock-run-limit3",
            Case::RedlockFair => "redlock-run-fair",
        }
    }

    pub fn tool(self) -> Tool {
        match self {
            Case::Flock => Tool::Flock,
            Case::Etcd => Tool::Etcd,
            Case::Redlock | Case::RedlockLimit | Case::RedlockFair => Tool::Redlock,
        }
    }

    fn options(self) -> &'static [&'static str] {
        match self {
            Case::RedlockLimit => &["--limit", "3"],
            Case::RedlockFair => &["--fair"],
            _ => &[],
        }
    }

    /// How many may hold at once.
    pub fn slots(self) -> usize {
        if self == Case::RedlockLimit {
            LIMIT
        } else {
            1
        }
    }
}

/// The order in which the waiters started, against the order in which they arrived.
pub struct Order {
    /// Waiters whose place among the starts is not their place in spawn order.
    pub out_of_order: usize,
    /// Whether spawn order is known to be the order in which they joined the queue.
    pub arrival_known: bool,
    pub method: &'static str,
}

/// Figures taken while the N waiters wait behind the holder.
pub struct Waiting {
    /// New TCP connections to the server, per waiter (from /proc/net/tcp).
    pub connections_per_waiter: Option<f64>,
    /// Sum of VmHWM over the waiters and their descendants, per waiter.
    pub peak_rss_kib_per_waiter: Option<f64>,
    /// The same for Pss (shared pages shared out).
    pub pss_kib_per_waiter: Option<f64>,
    pub processes: usize,
    /// Only at the largest N of each case.
    pub window_s: Option<f64>,
    pub requests_per_waiter_per_s: Option<f64>,
    pub window_by_command: BTreeMap<String, u64>,
}

/// One case at one N.
pub struct Figures {
    pub n: usize,
    pub ran: usize,
    /// Processes that exited non-zero or were killed, plus waiters that never ran.
    pub failed: usize,
    /// Starts at which more held the lock than it allows.
    pub overlaps: usize,
    pub max_concurrent: usize,
    pub gaps: Samples,
    pub drain: Option<Duration>,
    pub spawn_time: Duration,
    /// Spawn to start of each waiter's command.
    pub waits: Samples,
    pub wait_max_over_mean: Option<f64>,
    pub order: Order,
    /// Server requests from the holders' release to the last waiter's exit, per waiter
    /// run. Redis: client requests (MONITOR); etcd: gRPC messages received.
    pub requests_per_handoff: Option<f64>,
    /// Redis: `INFO commandstats` calls in the same span, scripts' commands included.
    pub executed_per_handoff: Option<f64>,
    /// Redis: commands run by scripts (MONITOR's "lua" lines), per handoff.
    pub scripted_per_handoff: Option<f64>,
    pub requests_by_command: BTreeMap<String, u64>,
    pub waiting: Waiting,
}

pub struct Run {
    pub case: Case,
    pub n: usize,
    pub figures: Result<Figures, String>,
}

/// The whole section.
pub struct Many {
    pub ns: Vec<usize>,
    pub window: Duration,
    pub etcd_max: usize,
    pub runs: Vec<Run>,
    pub notes: Vec<String>,
}

impl Many {
    pub fn get(&self, case: Case, n: usize) -> Option<&Figures> {
        self.runs
            .iter()
            .find(|run| run.case == case && run.n == n)
            .and_then(|run| run.figures.as_ref().ok())
    }
}

/// The longest a drain may take before its waiters are killed (and counted as failed).
const DRAIN_LIMIT: Duration = Duration::from_secs(240);

pub fn run(
    bench: &Bench,
    ns: &[usize],
    window: Duration,
    etcd_max: usize,
    budget: Duration,
) -> Many {
    let began = Instant::now();
    let mut notes = Vec::new();
    let mut monitor = match observe::Monitor::start(bench.redis_port) {
        Ok(monitor) => Some(monitor),
        Err(err) => {
            notes.push(format!("Redis requests not counted: {err}"));
            None
        }
    };
    let largest = ns.iter().copied().max().unwrap_or(0);
    let etcd_largest = ns.iter().copied().filter(|&n| n <= etcd_max).max();
    let mut runs = Vec::new();
    for &n in ns {
        for case in CASES {
            let skip = |why: String| Run {
                case,
                n,
                figures: Err(why),
            };
            if case == Case::Etcd && !bench.available(Tool::Etcd) {
                runs.push(skip(format!("n/a: {}", bench.etcd_missing)));
                continue;
            }
            if case == Case::Etcd && n > etcd_max {
                runs.push(skip(format!(
                    "not run: N > {etcd_max} (--many-etcd-max; each waiter is a Go \
                     process of about 25 MB)"
                )));
                continue;
            }
            if began.elapsed() > budget {
                runs.push(skip(format!(
                    "not run: the section's time budget ({} s) was spent",
                    budget.as_secs()
                )));
                continue;
            }
            let windowed = match case {
                Case::Etcd => etcd_largest == Some(n),
                Case::Flock => false,
                _ => n == largest,
            };
            let window = windowed.then_some(window);
            phase(&format!(
                "many waiters: {} x {n}{}",
                case.label(),
                window.map_or(String::new(), |w| format!(
                    ", waiting counted for {} s",
                    w.as_secs()
                ))
            ));
            let mut server = match (case.tool(), monitor.as_mut()) {
                (Tool::Redlock, Some(monitor)) => case::Server::Redis(monitor),
                (Tool::Etcd, _) => case::Server::Etcd(bench.etcd_port.unwrap_or(0)),
                _ => case::Server::None,
            };
            let started = Instant::now();
            let figures = case::run(bench, &mut server, case, n, window, DRAIN_LIMIT);
            match &figures {
                Ok(f) => eprintln!(
                    "compare:   {} of {n} ran, {} failed, {} overlaps, drain {}, in {:.1} s",
                    f.ran,
                    f.failed,
                    f.overlaps,
                    f.drain
                        .map_or("n/a".into(), |d| format!("{:.2} s", d.as_secs_f64())),
                    started.elapsed().as_secs_f64()
                ),
                Err(err) => eprintln!("compare:   {} x {n} failed: {err}", case.label()),
            }
            runs.push(Run { case, n, figures });
        }
    }
    Many {
        ns: ns.to_vec(),
        window,
        etcd_max,
        runs,
        notes,
    }
}
