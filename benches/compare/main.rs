//! `cargo bench --bench compare` (the documented entry point is `scripts/bench`): measures
//! redlock-run against flock(1) and `etcdctl lock` in one run on one machine, and prints
//! every figure next to the target set for redlock-run.
//!
//! It builds the release binary itself (`cargo build --release`), starts a throwaway
//! redis-server and etcd on free loopback ports in a temporary directory, and tears both
//! down on exit, on error and on panic (Drop guards; each server also runs under a small
//! guard process that kills it when this harness dies, however it dies). Every loop is
//! bounded in count and time, and every process it starts is killed if it outlives its
//! time limit.
//!
//! The commands run under the locks are this same executable in a helper mode
//! (`compare __compare_helper MODE ...`): it writes a CLOCK_REALTIME nanosecond stamp,
//! increments a counter file, or holds for a while. No `sh -c` and no `date` fork, and the
//! same helper for every tool, so the tools are compared on equal terms.
//!
//! Standard library only: JSON, RESP and HTTP are written by hand. A number that misses its
//! target is reported, never turned into a failing exit status; the exit status is non-zero
//! only when the harness itself could not run.
//!
//! This file owns the order of one run: build, start the servers, run each measurement,
//! hand the results to the report. How each figure is taken lives in `measure/`, how it is
//! shown and judged in `report/`.
//!
//! ```text
//! opts.rs      the command line (--quick, --target, ...) and its caps
//! helper.rs    helper mode: the commands run under the locks, and the server guard
//! procs.rs     child processes with a time limit, and the watchdog that enforces it
//! servers.rs   the temporary directory, redis-server and etcd on loopback, plain HTTP
//! resp.rs      the harness's own small Redis client
//! tools.rs     the tools compared and the argv that runs a command under each one's lock
//! host.rs      building redlock-run, and describing the build and the machine
//! stats.rs     samples and percentiles; json.rs the hand-written JSON value
//! measure/     one module per measurement
//! report/      the printed table, redlock-run's targets with PASS/FAIL, the JSON file
//! ```

mod helper;
mod host;
mod json;
mod measure;
mod opts;
mod procs;
mod report;
mod resp;
mod servers;
mod stats;
mod tools;

use std::collections::BTreeMap;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Instant;

use crate::helper::HELPER;
use crate::measure::waiting::{self, Waiting};
use crate::measure::{contended, handoff, phase, rss, startup, Results};
use crate::opts::{Opts, USAGE};
use crate::report::Report;
use crate::servers::TempDir;
use crate::tools::{Bench, Tool, TOOLS};

type Result<T> = std::result::Result<T, String>;

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(HELPER) {
        std::process::exit(helper::run(&args[1..]));
    }
    let opts = match Opts::parse(&args) {
        Ok(Some(opts)) => opts,
        Ok(None) => return,
        Err(err) => {
            eprintln!("compare: {err}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(err) = run(&opts) {
        eprintln!("compare: {err}");
        std::process::exit(1);
    }
}

fn run(opts: &Opts) -> Result<()> {
    let exe = env::current_exe().map_err(|err| format!("cannot find myself: {err}"))?;
    let redlock = match &opts.redlock_bin {
        Some(path) => path.clone(),
        None => host::build_release(opts.target.as_deref())?,
    };
    let began = Instant::now();
    if !redlock.is_file() {
        return Err(format!("{redlock:?} does not exist"));
    }
    if !host::have("redis-server") || !host::have("flock") {
        return Err("redis-server and flock are needed (scripts/bench installs them)".into());
    }
    // Cargo's target directory itself, not the per-target one the binaries are in.
    let target_dir = env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    );
    let json_path = opts
        .json
        .clone()
        .unwrap_or_else(|| target_dir.join("bench").join("compare.json"));

    // Declared first, dropped last: the servers (whose data lives here) stop before it goes.
    let temp = TempDir::new()?;
    phase("starting redis-server and etcd on loopback");
    let (_redis, redis_port) = servers::start_redis(&exe, &temp.0)?;
    let mut etcd_missing = String::new();
    let etcd = if !host::have("etcd") || !host::have("etcdctl") {
        etcd_missing =
            "etcd/etcdctl not installed (apt-get install etcd-server etcd-client)".into();
        None
    } else {
        match servers::start_etcd(&exe, &temp.0) {
            Ok(started) => Some(started),
            Err(err) => {
                eprintln!("compare: {err}");
                etcd_missing = "etcd did not start".into();
                None
            }
        }
    };
    let bench = Bench {
        exe: exe.clone(),
        dir: temp.0.clone(),
        redlock: redlock.clone(),
        redis_port,
        etcd_port: etcd.as_ref().map(|(_, port)| *port),
        etcd_missing,
        have_time: Path::new("/usr/bin/time").is_file(),
    };

    let machine = host::machine();
    let versions = [
        (
            "redlock-run",
            host::first_line(&redlock.display().to_string(), &["--version"]),
        ),
        (
            "redlock-run build",
            host::build_of(&redlock, opts.target.as_deref()),
        ),
        ("flock", host::first_line("flock", &["--version"])),
        ("etcdctl", host::first_line("etcdctl", &["version"])),
        ("etcd", host::first_line("etcd", &["--version"])),
        (
            "redis-server",
            host::first_line("redis-server", &["--version"]),
        ),
    ];

    let mut results: [Results; 3] = Default::default();

    let mut starts = BTreeMap::new();
    startup::versions(&bench, opts.overhead_samples, &mut starts);
    for tool in TOOLS {
        results[tool as usize].version = starts.get(tool.name()).cloned();
    }
    let bare_version = starts.get("true").cloned().unwrap_or_default();

    let (bare, overhead) = startup::overhead(&bench, opts.overhead_samples);
    for tool in TOOLS {
        results[tool as usize].overhead = overhead.get(tool.name()).cloned();
    }

    for tool in bench.tools() {
        results[tool as usize].contended =
            Some(contended::measure(&bench, tool, opts.clients, opts.cycles));
    }

    handoff::measure(&bench, opts.handoff_samples, opts.hold, &mut results);

    phase("starting 4 more redis-servers for a 5-node Redlock quorum");
    let mut quorum_servers = Vec::new();
    let mut ports = vec![redis_port];
    for _ in 0..4 {
        match servers::start_redis(&exe, &temp.0) {
            Ok((server, port)) => {
                quorum_servers.push(server);
                ports.push(port);
            }
            Err(err) => eprintln!("compare: {err}"),
        }
    }
    let quorum = (ports.len() == 5).then(|| startup::quorum(&bench, &ports, opts.overhead_samples));
    drop(quorum_servers);

    let rss_floor = if bench.have_time {
        let (peaks, floor) = rss::measure(&bench, 3);
        for tool in TOOLS {
            results[tool as usize].rss_kib = peaks.get(tool.name()).copied();
        }
        Some(floor)
    } else {
        None
    };

    phase(&format!(
        "waiting: {} waiters behind a holder, {} s window (redis and etcd side by side)",
        opts.waiters,
        opts.wait_window.as_secs()
    ));
    let (redis_waiting, etcd_waiting) = thread::scope(|scope| {
        let etcd = scope.spawn(|| {
            bench
                .available(Tool::Etcd)
                .then(|| waiting::etcd(&bench, opts.waiters, opts.wait_window))
        });
        let redis = waiting::redis(&bench, opts.waiters, opts.wait_window);
        (redis, etcd.join().unwrap_or(None))
    });
    results[Tool::Redlock as usize].waiting =
        Some(redis_waiting.unwrap_or_else(|err| Waiting::NotApplicable(format!("failed: {err}"))));
    results[Tool::Etcd as usize].waiting = Some(match etcd_waiting {
        Some(Ok(waiting)) => waiting,
        Some(Err(err)) => Waiting::NotApplicable(format!("failed: {err}")),
        None => Waiting::NotApplicable(bench.etcd_missing.clone()),
    });
    results[Tool::Flock as usize].waiting = Some(Waiting::NotApplicable(
        "no server: waiters sleep in flock(2) in the kernel".into(),
    ));

    let elapsed = began.elapsed();
    let report = Report {
        opts,
        bench: &bench,
        machine,
        versions: versions.to_vec(),
        results: &results,
        bare,
        bare_version,
        rss_floor,
        quorum,
        elapsed,
    };
    print!("{}", report.table());
    let json = report.json();
    if let Some(parent) = json_path.parent() {
        fs::create_dir_all(parent).map_err(|err| format!("{parent:?}: {err}"))?;
    }
    let mut text = String::new();
    json.write(&mut text, 0);
    text.push('\n');
    fs::write(&json_path, text).map_err(|err| format!("{json_path:?}: {err}"))?;
    println!("JSON: {}", json_path.display());
    drop(etcd);
    Ok(())
}
