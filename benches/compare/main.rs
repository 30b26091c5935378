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
//! A second section, many waiters (`--many-waiters` alone, `--all` after the rest), runs
//! one holder and N = 10 ... 1000 waiters on one key under each tool and mode, and reports
//! requests per handoff, handoff gaps, drain time, fairness and the cost of waiting, to
//! target/bench/waiters.json. It takes up to ten minutes, so the default run leaves it out.
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
use crate::opts::{Opts, SHIPPED_TARGET, USAGE};
use crate::report::{ManyReport, Report};
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
    // The shipped (musl) build, and the glibc build beside it, unless told otherwise.
    let shipped_target = match (&opts.redlock_bin, &opts.target) {
        (Some(_), _) => None,
        (None, Some(target)) => Some(target.clone()),
        (None, None) => Some(SHIPPED_TARGET.to_string()),
    };
    let redlock = match &opts.redlock_bin {
        Some(path) => path.clone(),
        None => host::build_release(shipped_target.as_deref())?,
    };
    // The many-waiters section runs the shipped build alone.
    let redlock_glibc = match (&opts.glibc_bin, opts.glibc && opts.compare) {
        (_, false) => None,
        (Some(path), true) => Some(path.clone()),
        (None, true) => Some(host::build_release(None)?),
    };
    let began = Instant::now();
    for binary in [Some(&redlock), redlock_glibc.as_ref()]
        .into_iter()
        .flatten()
    {
        if !binary.is_file() {
            return Err(format!("{binary:?} does not exist"));
        }
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

    // Redis's own default, or what the many-waiters section needs (3 per waiter).
    let maxclients = if opts.many {
        host::check_open_files(opts.many_n.iter().copied().max().unwrap_or(0))
    } else {
        10_000
    };

    // Declared first, dropped last: the servers (whose data lives here) stop before it goes.
    let temp = TempDir::new()?;
    phase("starting redis-server and etcd on loopback");
    let (_redis, redis_port) = servers::start_redis(&exe, &temp.0, maxclients)?;
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
        redlock_glibc: redlock_glibc.clone(),
        redis_port,
        etcd_port: etcd.as_ref().map(|(_, port)| *port),
        etcd_missing,
        have_time: Path::new("/usr/bin/time").is_file(),
    };

    let machine = host::machine();
    let mut versions = vec![
        (
            "redlock-run",
            host::first_line(&redlock.display().to_string(), &["--version"]),
        ),
        (
            "redlock-run build",
            format!(
                "{} (shipped; the targets are judged on it)",
                host::build_of(&redlock, shipped_target.as_deref())
            ),
        ),
        ("flock", host::first_line("flock", &["--version"])),
        ("etcdctl", host::first_line("etcdctl", &["version"])),
        ("etcd", host::first_line("etcd", &["--version"])),
        (
            "redis-server",
            host::first_line("redis-server", &["--version"]),
        ),
    ];
    if let Some(glibc) = &redlock_glibc {
        versions.insert(
            2,
            (
                "glibc build",
                format!(
                    "{} (beside it: the glibc column)",
                    host::build_of(glibc, None)
                ),
            ),
        );
    }

    let context = Context {
        opts,
        bench: &bench,
        machine,
        versions,
        began,
    };
    if opts.compare {
        compare(&context, &temp, json_path.clone())?;
    }
    if opts.many {
        let path = json_path.with_file_name("waiters.json");
        many(
            &context,
            opts.json.clone().filter(|_| !opts.compare).unwrap_or(path),
        )?;
    }
    drop(etcd);
    Ok(())
}

/// What every section's report shows beside its figures.
struct Context<'a> {
    opts: &'a Opts,
    bench: &'a Bench,
    machine: Vec<(&'static str, String)>,
    versions: Vec<(&'static str, String)>,
    began: Instant,
}

/// The usual sections: overhead, contended, handoff, quorum, RSS, waiting.
fn compare(context: &Context, temp: &TempDir, json_path: PathBuf) -> Result<()> {
    let Context {
        opts,
        bench,
        ref machine,
        ref versions,
        began,
    } = *context;
    let exe = &bench.exe;
    let mut results: [Results; 4] = Default::default();

    let mut starts = BTreeMap::new();
    startup::versions(bench, opts.overhead_samples, &mut starts);
    for tool in TOOLS {
        results[tool as usize].version = starts.get(tool.name()).cloned();
    }
    let bare_version = starts.get("true").cloned().unwrap_or_default();

    let overhead = startup::overhead(bench, opts.overhead_samples);
    for tool in TOOLS {
        results[tool as usize].overhead = overhead.per_tool.get(tool.name()).cloned();
    }
    results[Tool::Redlock as usize].overhead_redis = overhead.redis;
    let bare = overhead.bare;
    let recording = overhead.recording;

    for tool in bench.tools() {
        results[tool as usize].contended =
            Some(contended::measure(bench, tool, opts.clients, opts.cycles));
    }

    handoff::measure(bench, opts.handoff_samples, opts.hold, &mut results);

    phase("starting 4 more redis-servers for a 5-node Redlock quorum");
    let mut quorum_servers = Vec::new();
    let mut ports = vec![bench.redis_port];
    for _ in 0..4 {
        match servers::start_redis(exe, &temp.0, 10_000) {
            Ok((server, port)) => {
                quorum_servers.push(server);
                ports.push(port);
            }
            Err(err) => eprintln!("compare: {err}"),
        }
    }
    let quorum = (ports.len() == 5).then(|| startup::quorum(bench, &ports, opts.overhead_samples));
    drop(quorum_servers);

    let rss_floor = if bench.have_time {
        let (peaks, floor) = rss::measure(bench, 3);
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
                .then(|| waiting::etcd(bench, opts.waiters, opts.wait_window))
        });
        let redis = waiting::redis(bench, opts.waiters, opts.wait_window);
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
        bench,
        machine: machine.clone(),
        versions: versions.clone(),
        results: &results,
        bare,
        bare_version,
        rss_floor,
        quorum,
        recording,
        elapsed,
    };
    print!("{}", report.table());
    write_json(&json_path, &report.json())?;
    Ok(())
}

/// The many-waiters section.
fn many(context: &Context, json_path: PathBuf) -> Result<()> {
    let opts = context.opts;
    let began = Instant::now();
    let many = measure::many::run(
        context.bench,
        &opts.many_n,
        opts.many_window,
        opts.many_etcd_max,
        opts.many_budget,
    );
    let report = ManyReport {
        machine: context.machine.clone(),
        versions: context.versions.clone(),
        many: &many,
        elapsed: began.elapsed(),
        since_start: context.began.elapsed(),
    };
    print!("{}", report.table());
    write_json(&json_path, &report.json())
}

fn write_json(path: &Path, json: &json::Json) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|err| format!("{parent:?}: {err}"))?;
    }
    let mut text = String::new();
    json.write(&mut text, 0);
    text.push('\n');
    fs::write(path, text).map_err(|err| format!("{path:?}: {err}"))?;
    println!("JSON: {}", path.display());
    Ok(())
}
