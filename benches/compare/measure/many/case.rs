//! One many-waiters case: one tool in one mode with N waiters on a fresh key. The holders
//! (one per slot) take the lock and hold it; the N waiters are spawned and queue behind
//! them; once every waiter is connected and quiet, the waiting figures are read (and, at the
//! largest N, counted over a window); then the holders let go and the queue drains, each
//! waiter running a 5 ms command that stamps its interval. It owns this order and the time
//! limits on it; the readings are `observe.rs`'s and the arithmetic `stamps.rs`'s.

use std::ffi::OsString;
use std::fs::File;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::helper::realtime_ns;
use crate::measure::many::observe::{self, Counts, Monitor, TreeMemory};
use crate::measure::many::stamps::{self, Analysis};
use crate::measure::many::{Case, Figures, Order, Waiting};
use crate::procs::{wait_until, Proc};
use crate::tools::{Bench, Tool};
use crate::Result;

/// The command every waiter runs under the lock, as the issue has it.
pub const CRITICAL: Duration = Duration::from_millis(5);
/// With `--fair`: how long one waiter may take to show up in the queue before the order
/// is no longer taken as known.
const JOIN_LIMIT: Duration = Duration::from_secs(3);
/// After the last connection opened, how long the waiters get to finish queueing (their
/// first attempt, the subscription) before anything is read.
const QUIET: Duration = Duration::from_millis(1000);

/// Where a case reads server requests.
pub enum Server<'a> {
    Redis(&'a mut Monitor),
    Etcd(u16),
    None,
}

impl Server<'_> {
    fn counts(&mut self) -> Result<Option<Counts>> {
        match self {
            Server::Redis(monitor) => monitor.mark().map(Some),
            Server::Etcd(port) => observe::etcd_messages(*port).map(Some),
            Server::None => Ok(None),
        }
    }

    fn port(&self, bench: &Bench) -> Option<u16> {
        match self {
            Server::Redis(_) => Some(bench.redis_port),
            Server::Etcd(port) => Some(*port),
            Server::None => None,
        }
    }
}

pub fn run(
    bench: &Bench,
    server: &mut Server,
    case: Case,
    n: usize,
    window: Option<Duration>,
    drain_limit: Duration,
) -> Result<Figures> {
    let tag = format!("{}-{n}", case.slug());
    let key = format!("many-{tag}");
    let stamps_path = bench.path(&format!("many-stamps-{tag}"));
    let release = bench.path(&format!("many-release-{tag}"));
    let tool = case.tool();
    let command = |args: &[&str]| -> Vec<OsString> {
        bench.argv_with(tool, &key, case.options(), &bench.helper(args))
    };
    let proc_limit = Duration::from_secs(180) + window.unwrap_or_default() + drain_limit;

    // The holders, one per slot, each told to hold until `release` appears.
    let mut holders = Vec::new();
    let mut markers = Vec::new();
    for h in 1..=case.slots() {
        let marker = bench.path(&format!("many-held-{tag}-{h}"));
        let argv = command(&[
            "crit-until",
            &stamps_path,
            &format!("-{h}"),
            &marker,
            &release,
            &proc_limit.as_millis().to_string(),
        ]);
        holders.push(Proc::spawn(&mut bench.plain(tool, &argv), proc_limit)?);
        let held = wait_until(Duration::from_secs(10), Duration::from_millis(2), || {
            Path::new(&marker).exists()
        });
        if !held {
            return Err(format!(
                "holder {h} never got the lock:\n    {}",
                bench.log_tail(tool)
            ));
        }
        markers.push(marker);
    }
    if let Server::Redis(monitor) = server {
        thread::sleep(Duration::from_millis(50));
        monitor.holders_are_connected_now()?;
    }
    let port = server.port(bench);
    let base_connections = port.map(observe::connections_to);

    // The waiters: all at once, or with --fair one by one, each in the queue before the
    // next is started, so that spawn order is arrival order.
    let spawning = Instant::now();
    let mut spawned = Vec::with_capacity(n);
    let mut waiters = Vec::with_capacity(n);
    let mut order_known = case == Case::RedlockFair;
    let mut unconfirmed = 0;
    let queue = format!("{{redlock:{key}}}:queue");
    for i in 0..n {
        let argv = command(&["crit", &stamps_path, &i.to_string(), &millis(CRITICAL)]);
        spawned.push(realtime_ns());
        waiters.push(Proc::spawn(&mut bench.plain(tool, &argv), proc_limit)?);
        if let (true, Server::Redis(monitor)) = (order_known, &mut *server) {
            let joined = wait_until(JOIN_LIMIT, Duration::from_millis(1), || {
                monitor
                    .redis
                    .call(&["ZCARD", &queue])
                    .ok()
                    .and_then(|n| n.parse::<usize>().ok())
                    .is_some_and(|queued| queued > i)
            });
            if !joined {
                unconfirmed += 1;
                // The queue is not where this harness looks: stop waiting on it.
                order_known = i > 0;
            }
        }
    }
    let spawn_time = spawning.elapsed();

    // Queued: every waiter connected (the count of connections has stopped growing at N or
    // more), then QUIET more; flock's waiters are in the kernel as soon as they run.
    let settle_limit = Duration::from_secs(10) + Duration::from_millis(20) * n as u32;
    match port {
        Some(port) => {
            let base = base_connections.unwrap_or(0);
            let (mut last, mut since) = (0, Instant::now());
            wait_until(settle_limit, Duration::from_millis(50), || {
                let now = observe::connections_to(port).saturating_sub(base);
                if now != last {
                    (last, since) = (now, Instant::now());
                }
                now >= n && since.elapsed() >= Duration::from_millis(300)
            });
        }
        None => thread::sleep(Duration::from_millis(300) + Duration::from_millis(n as u64)),
    }
    thread::sleep(QUIET);

    // While waiting.
    let pids: Vec<u32> = waiters.iter().map(Proc::id).collect();
    let per_waiter = |x: f64| x / n as f64;
    let connections = |port: Option<u16>| {
        port.map(|port| {
            per_waiter(
                observe::connections_to(port).saturating_sub(base_connections.unwrap_or(0)) as f64,
            )
        })
    };
    let mut memory = observe::tree_memory(&pids);
    let mut conns = connections(port);
    let mut window_figures = None;
    if let Some(window) = window {
        let before = server.counts()?;
        let opened = Instant::now();
        thread::sleep(window);
        let after = server.counts()?;
        let seconds = opened.elapsed().as_secs_f64();
        let later = observe::tree_memory(&pids);
        memory = TreeMemory {
            processes: memory.processes.max(later.processes),
            peak_rss_kib: memory.peak_rss_kib.max(later.peak_rss_kib),
            pss_kib: memory.pss_kib.max(later.pss_kib),
        };
        conns = match (conns, connections(port)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if let (Some(before), Some(after)) = (before, after) {
            let counted = after.since(&before);
            window_figures = Some((
                seconds,
                per_waiter(counted.waiters as f64) / seconds,
                counted,
            ));
        }
    }

    // The drain.
    let info_before = match server {
        Server::Redis(monitor) => Some(monitor.info("commandstats")?),
        _ => None,
    };
    let before = server.counts()?;
    File::create(&release).map_err(|err| format!("{release}: {err}"))?;
    let deadline = Instant::now() + drain_limit;
    let mut failed = 0;
    for proc in holders.iter_mut().chain(waiters.iter_mut()) {
        proc.deadline(deadline);
        failed += usize::from(!matches!(proc.wait(), Ok((status, _)) if status.success()));
    }
    let after = server.counts()?;
    let executed = match (server, info_before) {
        (Server::Redis(monitor), Some(info_before)) => {
            let info_after = monitor.info("commandstats")?;
            // Less the harness's own: one INFO and two ECHO markers in between.
            Some(
                (observe::commandstats_calls(&info_after))
                    .saturating_sub(observe::commandstats_calls(&info_before) + 3),
            )
        }
        _ => None,
    };
    if failed > 0 {
        eprintln!(
            "compare: {}: {failed} processes failed; log ends:\n    {}",
            case.label(),
            bench.log_tail(tool)
        );
    }

    let intervals = stamps::read(&stamps_path)?;
    let Analysis {
        ran,
        overlaps,
        max_concurrent,
        gaps,
        drain,
        waits,
        out_of_order,
    } = stamps::analyse(&intervals, &spawned, case.slots());
    let wait_max_over_mean = waits
        .mean()
        .zip(waits.pct(100.0))
        .filter(|(mean, _)| !mean.is_zero())
        .map(|(mean, max)| max.as_secs_f64() / mean.as_secs_f64());
    let requests = before
        .zip(after)
        .map(|(before, after)| after.since(&before));
    Ok(Figures {
        n,
        ran,
        failed: failed + n.saturating_sub(ran),
        overlaps,
        max_concurrent,
        gaps,
        drain,
        spawn_time,
        waits,
        wait_max_over_mean,
        order: Order {
            out_of_order,
            arrival_known: order_known && unconfirmed == 0,
            method: if case == Case::RedlockFair {
                "spawned one by one, each after ZCARD of the fair queue counted it"
            } else {
                "spawned back to back; arrival order not confirmed"
            },
        },
        requests_per_handoff: requests
            .as_ref()
            .map(|r| r.requests() as f64 / ran.max(1) as f64),
        executed_per_handoff: executed.map(|e| e as f64 / ran.max(1) as f64),
        scripted_per_handoff: requests
            .as_ref()
            .and_then(|r| (tool == Tool::Redlock).then(|| r.scripted as f64 / ran.max(1) as f64)),
        requests_by_command: requests.map(|r| r.by_command).unwrap_or_default(),
        waiting: Waiting {
            connections_per_waiter: conns,
            peak_rss_kib_per_waiter: (memory.processes > 0)
                .then(|| per_waiter(memory.peak_rss_kib as f64)),
            pss_kib_per_waiter: (memory.processes > 0).then(|| per_waiter(memory.pss_kib as f64)),
            processes: memory.processes,
            window_s: window_figures.as_ref().map(|w| w.0),
            requests_per_waiter_per_s: window_figures.as_ref().map(|w| w.1),
            window_by_command: window_figures.map(|w| w.2.by_command).unwrap_or_default(),
        },
    })
}

fn millis(d: Duration) -> String {
    d.as_millis().to_string()
}
