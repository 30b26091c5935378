//! Start-up costs, each as spawn-to-exit (or spawn-to-command-start) from this harness:
//! `--version` of each tool, `TOOL -- true` against bare `true`, and redlock-run's time to
//! start its command against one Redis and against a Redlock quorum. Tools are interleaved
//! sample by sample so that drift in the machine's load hits each alike. It owns taking
//! these samples, not judging them.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::time::Duration;

use crate::helper::realtime_ns;
use crate::measure::{phase, RUN_LIMIT};
use crate::procs::timed;
use crate::stats::Samples;
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
pub fn overhead(bench: &Bench, samples: usize) -> (Samples, BTreeMap<&'static str, Samples>) {
    phase("overhead: TOOL -- true vs true");
    let tools = bench.tools();
    let mut bare = Samples::default();
    let mut per_tool: BTreeMap<&'static str, Samples> = BTreeMap::new();
    let true_argv = os(&["true"]);
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
    (bare, per_tool)
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
