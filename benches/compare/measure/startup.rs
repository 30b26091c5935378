//! Start-up costs, each as spawn-to-exit (or spawn-to-command-start) from this harness:
//! `--version` of each tool, `TOOL -- true` against bare `true` (with, for redlock-run, the
//! Redis commands and connections each uncontended run costs, from the server's own
//! counters), and redlock-run's time to start its command against one Redis and against a
//! Redlock quorum. Tools are interleaved sample by sample so that drift in the machine's
//! load hits each alike. It owns taking these samples, not judging them.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::time::Duration;

use crate::helper::realtime_ns;
use crate::measure::many::commandstats_calls;
use crate::measure::{phase, RUN_LIMIT};
use crate::procs::timed;
use crate::resp::Redis;
use crate::stats::{millis, Samples};
use crate::tools::{os, Bench, Tool};

/// `--version` (and the peers' equivalents) started from this process, with bare `true`
/// as the floor of what spawning anything costs here.
pub fn versions(bench: &Bench, samples: usize, out: &mut BTreeMap<&'static str, Samples>) {
    phase("startup: --version");
    let mut argvs: Vec<(&'static str, Tool, Vec<OsString>)> = vec![
        ("true", Tool::Flock, os(&["true"])),
        (
            "redlock-run",
            Tool::Redlock,
            vec![bench.redlock.clone().into(), "--version".into()],
        ),
        ("flock", Tool::Flock, os(&["flock", "--version"])),
    ];
    if bench.available(Tool::RedlockGlibc) {
        argvs.push((
            Tool::RedlockGlibc.name(),
            Tool::RedlockGlibc,
            vec![bench.binary(Tool::RedlockGlibc).into(), "--version".into()],
        ));
    }
    if bench.available(Tool::Etcd) {
        argvs.push(("etcdctl", Tool::Etcd, os(&["etcdctl", "version"])));
    }
    for _ in 0..samples {
        for (name, tool, argv) in &argvs {
            let result = timed(&mut bench.plain(*tool, argv), RUN_LIMIT);
            let (ok, elapsed) = result.unwrap_or((false, Duration::ZERO));
            out.entry(name).or_default().push(ok, elapsed);
        }
    }
}

/// `TOOL -- true` against bare `true`, interleaved so that drift hits every tool alike.
pub struct Overhead {
    pub bare: Samples,
    pub per_tool: BTreeMap<&'static str, Samples>,
    /// None when the server's counters could not be read (the reason is printed).
    pub redis: Option<RedisPerRun>,
    pub recording: RecordingCost,
}

/// `redlock-run -- true` with the lock's history and counters recorded (the default) and
/// with `--history 0`, interleaved: what recording adds to an uncontended run.
#[derive(Default)]
pub struct RecordingCost {
    pub on: Samples,
    pub off: Samples,
}

impl RecordingCost {
    /// p50 with recording minus p50 without, in ms.
    pub fn delta_ms(&self) -> Option<f64> {
        Some(millis(self.on.p50()?) - millis(self.off.p50()?))
    }
}

/// What one uncontended `redlock-run -- true` costs its Redis, from the server's counters
/// before and after the overhead loop (no other client uses that server meanwhile: flock
/// and etcdctl do not touch it), less the harness's own reading, divided by the runs.
#[derive(Clone, Copy)]
pub struct RedisPerRun {
    pub runs: usize,
    /// `INFO commandstats` calls, the commands run by scripts included.
    pub commands: f64,
    /// `INFO stats` `total_connections_received`.
    pub connections: f64,
}

/// A server's running totals of commands run and connections accepted.
struct Counters {
    commands: u64,
    connections: u64,
}

impl Counters {
    fn read(redis: &mut Redis) -> io::Result<Counters> {
        let info = redis.info()?;
        let connections = info
            .get("total_connections_received")
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| io::Error::other("INFO stats: no total_connections_received"))?;
        Ok(Counters {
            commands: commandstats_calls(&info),
            connections,
        })
    }
}

pub fn overhead(bench: &Bench, samples: usize) -> Overhead {
    phase("overhead: TOOL -- true vs true");
    let tools = bench.tools();
    let mut bare = Samples::default();
    let mut per_tool: BTreeMap<&'static str, Samples> = BTreeMap::new();
    let true_argv = os(&["true"]);
    // Connected before the first reading, so the harness adds no connection in between.
    let before = Redis::connect(bench.redis_port).and_then(|mut redis| {
        let counters = Counters::read(&mut redis)?;
        Ok((redis, counters))
    });
    for _ in 0..samples {
        let result = timed(&mut bench.plain(Tool::Flock, &true_argv), RUN_LIMIT);
        let (ok, elapsed) = result.unwrap_or((false, Duration::ZERO));
        bare.push(ok, elapsed);
        for &tool in &tools {
            let mut command = bench.command(tool, "overhead", &true_argv);
            let (ok, elapsed) = timed(&mut command, RUN_LIMIT).unwrap_or((false, Duration::ZERO));
            per_tool.entry(tool.name()).or_default().push(ok, elapsed);
        }
    }
    let redis = before.and_then(|(mut redis, before)| {
        let after = Counters::read(&mut redis)?;
        // The harness's own: the first INFO (a command is counted once it has run, so the
        // second is not in its own reply).
        let commands = after.commands.saturating_sub(before.commands + 1);
        let connections = after.connections.saturating_sub(before.connections);
        // Both builds run against this server when both are benched.
        let builds = tools.iter().filter(|tool| tool.is_redlock()).count().max(1);
        let runs = (samples * builds).max(1);
        Ok(RedisPerRun {
            runs,
            commands: commands as f64 / runs as f64,
            connections: connections as f64 / runs as f64,
        })
    });
    let redis = redis
        .map_err(|err| eprintln!("compare: overhead: reading redis's counters: {err}"))
        .ok();
    // After the counters were read, so that the commands per run above stay the default's.
    phase("overhead: redlock-run -- true, history on vs --history 0");
    let mut recording = RecordingCost::default();
    let on = bench.argv(Tool::Redlock, "overhead-history", &true_argv);
    let off = bench.argv_with(
        Tool::Redlock,
        "overhead-no-history",
        &["--history", "0"],
        &true_argv,
    );
    for _ in 0..samples {
        for (argv, into) in [(&on, &mut recording.on), (&off, &mut recording.off)] {
            let result = timed(&mut bench.plain(Tool::Redlock, argv), RUN_LIMIT);
            let (ok, elapsed) = result.unwrap_or((false, Duration::ZERO));
            into.push(ok, elapsed);
        }
    }
    Overhead {
        bare,
        per_tool,
        redis,
        recording,
    }
}

/// Time from starting redlock-run to its command starting, against one Redis and against
/// a Redlock quorum of `nodes.len()` (the one plus others), interleaved.
pub struct QuorumStart {
    pub nodes: usize,
    pub one: Samples,
    pub quorum: Samples,
}

pub fn quorum(bench: &Bench, ports: &[u16], samples: usize) -> QuorumStart {
    phase(&format!(
        "redlock: time to command start, 1 node vs {} nodes, {samples} runs each",
        ports.len()
    ));
    let stamp = bench.path("quorum-stamp");
    let command = bench.helper(&["stamp", &stamp]);
    let argv = |ports: &[u16]| {
        let mut argv: Vec<OsString> = vec![bench.redlock.clone().into()];
        for port in ports {
            argv.push("-r".into());
            argv.push(format!("redis://127.0.0.1:{port}").into());
        }
        argv.extend(["-k".into(), "quorum".into(), "--".into()]);
        argv.extend(command.iter().cloned());
        argv
    };
    let (one_argv, quorum_argv) = (argv(&ports[..1]), argv(ports));
    let mut result = QuorumStart {
        nodes: ports.len(),
        one: Samples::default(),
        quorum: Samples::default(),
    };
    let once = |argv: &[OsString]| -> Option<Duration> {
        let _ = fs::remove_file(&stamp);
        let spawned = realtime_ns();
        let (ok, _) = timed(&mut bench.plain(Tool::Redlock, argv), RUN_LIMIT).ok()?;
        let started: u128 = fs::read_to_string(&stamp).ok()?.trim().parse().ok()?;
        (ok && started >= spawned).then(|| Duration::from_nanos((started - spawned) as u64))
    };
    for _ in 0..samples {
        for (argv, samples) in [
            (&one_argv, &mut result.one),
            (&quorum_argv, &mut result.quorum),
        ] {
            match once(argv) {
                Some(elapsed) => samples.push(true, elapsed),
                None => samples.push(false, Duration::ZERO),
            }
        }
    }
    result
}
