//! Waiting cost: how many requests clients queued behind a holder make to the server per
//! second, counted on the server (Redis through MONITOR, etcd through its gRPC metrics) so
//! that no tool's own account of itself is trusted. It owns the holder/waiters set-up and
//! both counts; flock has no server and is reported as such by the caller.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::net::Shutdown;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::json::Json;
use crate::procs::{locked, wait_until, Proc};
use crate::resp::Redis;
use crate::servers::http_get;
use crate::tools::{os, Bench, Tool};
use crate::Result;

/// Server requests made by waiting clients.
pub enum Waiting {
    Measured {
        per_waiter_per_s: f64,
        startup_per_waiter: f64,
        detail: Json,
        note: String,
    },
    NotApplicable(String),
}

/// Starts a holder of `key` under `tool` that holds until `release` appears; waits until its
/// command runs.
fn start_holder(bench: &Bench, tool: Tool, key: &str) -> Result<(Proc, String)> {
    let (marker, release) = (
        bench.path(&format!("wait-held-{}", tool.name())),
        bench.path(&format!("wait-release-{}", tool.name())),
    );
    let command = bench.helper(&["hold-until", &marker, &release, "240000"]);
    let holder = Proc::spawn(
        &mut bench.command(tool, key, &command),
        Duration::from_secs(250),
    )?;
    let held = wait_until(Duration::from_secs(10), Duration::from_millis(5), || {
        Path::new(&marker).exists()
    });
    if !held {
        return Err(format!(
            "{}: the holder never got the lock:\n    {}",
            tool.name(),
            bench.log_tail(tool)
        ));
    }
    Ok((holder, release))
}

/// Releases the holder and waits for it and every waiter to finish; returns failures.
fn finish_waiting(
    bench: &Bench,
    tool: Tool,
    release: &str,
    holder: Proc,
    waiters: Vec<Proc>,
) -> usize {
    let _ = File::create(release);
    let mut failed = 0;
    for mut proc in std::iter::once(holder).chain(waiters) {
        match proc.wait() {
            Ok((status, _)) if status.success() => {}
            _ => failed += 1,
        }
    }
    if failed > 0 {
        eprintln!(
            "compare: {} waiting test: {failed} processes failed; log ends:\n    {}",
            tool.name(),
            bench.log_tail(tool)
        );
    }
    failed
}

/// Time for the waiters to start and queue up before the window opens, so that their
/// start-up requests are counted apart from the steady waiting ones.
const SETTLE: Duration = Duration::from_secs(2);

/// Redis: every request is attributed to its connection through MONITOR, so the holder's
/// renewals and the harness's own INFO calls are left out exactly; the INFO
/// total_commands_processed delta over the same window is reported beside it.
pub fn redis(bench: &Bench, waiters: usize, window: Duration) -> Result<Waiting> {
    let tool = Tool::Redlock;
    let port = bench.redis_port;
    let mut info = Redis::connect(port).map_err(|err| err.to_string())?;
    let mut monitor = Redis::connect(port).map_err(|err| err.to_string())?;
    monitor.writer.set_read_timeout(None).ok();
    let harness_addrs: HashSet<String> = [info.local_addr(), monitor.local_addr()].into();
    monitor
        .call(&["MONITOR"])
        .map_err(|err| format!("MONITOR: {err}"))?;
    let stopper = monitor.writer.try_clone().map_err(|err| err.to_string())?;
    let events: Arc<Mutex<Vec<(Instant, String, String)>>> = Arc::default();
    let sink = Arc::clone(&events);
    let reader = thread::spawn(move || {
        while let Ok(line) = monitor.line() {
            if let Some((addr, command)) = parse_monitor(&line) {
                locked(&sink).push((Instant::now(), addr, command));
            }
        }
    });
    let key = "waiting";
    let measured = (|| {
        let (holder, release) = start_holder(bench, tool, key)?;
        thread::sleep(Duration::from_millis(200));
        let clients = info
            .call(&["CLIENT", "LIST"])
            .map_err(|err| err.to_string())?;
        let holder_addrs: HashSet<String> = clients
            .lines()
            .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("addr=")))
            .map(str::to_string)
            .filter(|addr| !harness_addrs.contains(addr))
            .collect();
        let spawned = Instant::now();
        let mut procs = Vec::new();
        for _ in 0..waiters {
            let mut command = bench.command(tool, key, &os(&["true"]));
            procs.push(Proc::spawn(&mut command, window + Duration::from_secs(60))?);
        }
        thread::sleep(SETTLE);
        let before = info.info().map_err(|err| err.to_string())?;
        let start = Instant::now();
        thread::sleep(window);
        let end = Instant::now();
        let after = info.info().map_err(|err| err.to_string())?;
        let failed = finish_waiting(bench, tool, &release, holder, procs);
        Ok::<_, String>((holder_addrs, spawned, start, end, before, after, failed))
    })();
    let _ = stopper.shutdown(Shutdown::Both);
    let _ = reader.join();
    let (holder_addrs, spawned, start, end, before, after, failed) = measured?;
    let seconds = (end - start).as_secs_f64();
    let events = locked(&events);
    let mut startup = 0usize;
    let mut in_window: BTreeMap<String, usize> = BTreeMap::new();
    let mut holder_in_window: BTreeMap<String, usize> = BTreeMap::new();
    let mut lua_in_window = 0usize;
    for (at, addr, command) in events.iter() {
        if *at < spawned || harness_addrs.contains(addr) {
            continue;
        }
        let inside = *at >= start && *at < end;
        if addr == "lua" {
            lua_in_window += usize::from(inside);
        } else if holder_addrs.contains(addr) {
            if inside {
                *holder_in_window.entry(command.clone()).or_default() += 1;
            }
        } else if inside {
            *in_window.entry(command.clone()).or_default() += 1;
        } else if *at < start {
            startup += 1;
        }
    }
    let waiter_requests: usize = in_window.values().sum();
    let holder_requests: usize = holder_in_window.values().sum();
    let counts = |map: &BTreeMap<String, usize>| {
        Json::Obj(
            map.iter()
                .map(|(command, n)| (command.clone(), Json::Int(*n as i64)))
                .collect(),
        )
    };
    let total = |map: &BTreeMap<String, String>| -> i64 {
        map.get("total_commands_processed")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let info_delta = total(&after) - total(&before);
    let per_waiter_per_s = waiter_requests as f64 / waiters as f64 / seconds;
    Ok(Waiting::Measured {
        per_waiter_per_s,
        startup_per_waiter: startup as f64 / waiters as f64,
        note: format!(
            "redis: {waiter_requests} requests from {waiters} waiters in {seconds:.1} s \
             (MONITOR, per connection); cross-check: INFO total_commands_processed delta \
             {info_delta} - 1 INFO - {holder_requests} holder - {lua_in_window} Lua-internal \
             = {} ({}); holder and waiters at default --ttl 30s{}",
            info_delta - 1 - (holder_requests + lua_in_window) as i64,
            if info_delta - 1 - (holder_requests + lua_in_window) as i64 == waiter_requests as i64 {
                "agrees"
            } else {
                "DIFFERS"
            },
            if window < Duration::from_secs(30) {
                "; NOTE: a window under 30 s may end before a waiter's first retry"
            } else {
                ""
            }
        ),
        detail: Json::obj([
            (
                "method",
                Json::str("MONITOR attribution per connection; INFO delta beside"),
            ),
            ("waiters", Json::Int(waiters as i64)),
            ("window_s", Json::Num(seconds)),
            ("waiter_requests", Json::Int(waiter_requests as i64)),
            ("waiter_requests_by_command", counts(&in_window)),
            ("holder_requests", Json::Int(holder_requests as i64)),
            ("holder_requests_by_command", counts(&holder_in_window)),
            ("lua_internal_calls", Json::Int(lua_in_window as i64)),
            ("info_total_commands_processed_delta", Json::Int(info_delta)),
            ("startup_requests", Json::Int(startup as i64)),
            ("failed_processes", Json::Int(failed as i64)),
        ]),
    })
}

/// `[db addr] "command"` out of a MONITOR line; addr is "lua" for calls made by scripts.
fn parse_monitor(line: &str) -> Option<(String, String)> {
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let addr = line[open + 1..close].split_once(' ')?.1.to_string();
    let rest = &line[close + 1..];
    let q1 = rest.find('"')? + 1;
    let q2 = q1 + rest[q1..].find('"')?;
    Some((addr, rest[q1..q2].to_ascii_lowercase()))
}

/// Sum of etcd's grpc_server_msg_received_total, total and by method.
pub fn etcd_messages(port: u16) -> Result<(f64, BTreeMap<String, f64>)> {
    let body = http_get(port, "/metrics").map_err(|err| format!("etcd /metrics: {err}"))?;
    let mut total = 0.0;
    let mut by_method = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("grpc_server_msg_received_total") else {
            continue;
        };
        let Some(value) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let method = rest
            .split("grpc_method=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("?");
        total += value;
        *by_method.entry(method.to_string()).or_insert(0.0) += value;
    }
    Ok((total, by_method))
}

/// etcd: its metrics cannot tell clients apart, so the holder alone is measured first and
/// its rate subtracted.
pub fn etcd(bench: &Bench, waiters: usize, window: Duration) -> Result<Waiting> {
    let tool = Tool::Etcd;
    let port = bench.etcd_port.ok_or("etcd is not running")?;
    let baseline = Duration::from_secs(10).min(window);
    let key = "waiting";
    let (holder, release) = start_holder(bench, tool, key)?;
    let measured = (|| {
        thread::sleep(Duration::from_millis(500));
        let (c0, t0) = (etcd_messages(port)?, Instant::now());
        thread::sleep(baseline);
        let (c1, t1) = (etcd_messages(port)?, Instant::now());
        let mut procs = Vec::new();
        for _ in 0..waiters {
            let mut command = bench.command(tool, key, &os(&["true"]));
            procs.push(Proc::spawn(&mut command, window + Duration::from_secs(60))?);
        }
        thread::sleep(SETTLE);
        let (c2, t2) = (etcd_messages(port)?, Instant::now());
        thread::sleep(window);
        let (c3, t3) = (etcd_messages(port)?, Instant::now());
        Ok::<_, String>((procs, [(c0, t0), (c1, t1), (c2, t2), (c3, t3)]))
    })();
    let (procs, points) = match measured {
        Ok(measured) => measured,
        Err(err) => {
            let _ = finish_waiting(bench, tool, &release, holder, Vec::new());
            return Err(err);
        }
    };
    let failed = finish_waiting(bench, tool, &release, holder, procs);
    let [(c0, t0), (c1, t1), (c2, t2), (c3, t3)] = points;
    let holder_rate = (c1.0 - c0.0) / (t1 - t0).as_secs_f64();
    let window_s = (t3 - t2).as_secs_f64();
    let waiter_msgs = (c3.0 - c2.0) - holder_rate * window_s;
    let per_waiter_per_s = waiter_msgs / waiters as f64 / window_s;
    let startup = ((c2.0 - c1.0) - holder_rate * (t2 - t1).as_secs_f64()) / waiters as f64;
    let by_method = Json::Obj(
        c3.1.iter()
            .map(|(method, v)| {
                let delta = v - c2.1.get(method).copied().unwrap_or(0.0);
                (method.clone(), Json::Num(delta))
            })
            .filter(|(_, v)| matches!(v, Json::Num(x) if *x > 0.0))
            .collect(),
    );
    Ok(Waiting::Measured {
        per_waiter_per_s,
        startup_per_waiter: startup,
        note: format!(
            "etcd: grpc_server_msg_received_total delta {:.0} in {window_s:.1} s minus the \
             holder's {holder_rate:.2}/s (measured alone for {:.0} s first); default \
             etcdctl lock --ttl 10 (lease keepalive every ttl/3); HTTP/2 PINGs \
             (--keepalive-time 2s) are not gRPC messages and not counted",
            c3.0 - c2.0,
            baseline.as_secs_f64()
        ),
        detail: Json::obj([
            (
                "method",
                Json::str(
                    "etcd /metrics grpc_server_msg_received_total, holder baseline subtracted",
                ),
            ),
            ("waiters", Json::Int(waiters as i64)),
            ("window_s", Json::Num(window_s)),
            ("window_messages", Json::Num(c3.0 - c2.0)),
            ("window_messages_by_method", by_method),
            ("holder_messages_per_s", Json::Num(holder_rate)),
            ("failed_processes", Json::Int(failed as i64)),
        ]),
    })
}
