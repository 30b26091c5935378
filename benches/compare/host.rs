//! The binary under test and the machine it runs on: building redlock-run in release mode
//! (or for `--target`), what that build is (static or dynamic), the versions of the peers,
//! and the machine's CPU, memory and load. It owns the description printed above the
//! table; it measures nothing.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;

use crate::measure::phase;
use crate::Result;

/// `cargo build --release` (for `target` when given), then the path of the redlock-run
/// executable it reports.
pub fn build_release(target: Option<&str>) -> Result<PathBuf> {
    let target_args = match target {
        Some(target) => vec!["--target", target],
        None => vec![],
    };
    phase(&format!(
        "cargo build --release --bin redlock-run {}",
        target_args.join(" ")
    ));
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest_dir = env!("CARGO_MANIFEST_DIR");
    let output = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--bin",
            "redlock-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(&target_args)
        .current_dir(manifest_dir)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|err| format!("cannot run cargo: {err}"))?;
    if !output.status.success() {
        return Err(format!("cargo build --release failed ({})", output.status));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let exe = stdout
        .lines()
        .filter(|line| line.contains("\"name\":\"redlock-run\"") && line.contains("\"bin\""))
        .find_map(|line| {
            let start = line.find("\"executable\":\"")? + "\"executable\":\"".len();
            let end = start + line[start..].find('"')?;
            Some(PathBuf::from(&line[start..end]))
        })
        .ok_or("cargo did not report the redlock-run executable")?;
    Ok(exe)
}

pub fn first_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .env("ETCDCTL_API", "3")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "not installed".into())
}

/// How the benched redlock-run was built: the target asked for, and whether the executable
/// names a dynamic loader (an ELF PT_INTERP program header) or is linked statically.
pub fn build_of(exe: &Path, target: Option<&str>) -> String {
    const PT_INTERP: u32 = 3;
    let linking = fs::read(exe).ok().and_then(|elf| {
        let field = |at: usize, len: usize| -> Option<u64> {
            let bytes = elf.get(at..at + len)?;
            Some(
                bytes
                    .iter()
                    .rev()
                    .fold(0, |acc, &b| acc << 8 | u64::from(b)),
            )
        };
        // 64-bit little-endian ELF only, which is all this bench runs on.
        if elf.get(..6)? != b"\x7fELF\x02\x01" {
            return None;
        }
        let (phoff, phentsize, phnum) = (field(0x20, 8)?, field(0x36, 2)?, field(0x38, 2)?);
        let interp = (0..phnum)
            .any(|i| field((phoff + i * phentsize) as usize, 4) == Some(u64::from(PT_INTERP)));
        Some(if interp {
            "dynamically linked"
        } else {
            "statically linked"
        })
    });
    format!(
        "{}, {}",
        target.unwrap_or("host target from .cargo/config.toml"),
        linking.unwrap_or("linking unknown")
    )
}

pub fn have(program: &str) -> bool {
    env::var_os("PATH")
        .is_some_and(|paths| env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

pub fn machine() -> Vec<(&'static str, String)> {
    let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let mem = read("/proc/meminfo")
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:").map(|v| v.trim().to_string()))
        .unwrap_or_default();
    vec![
        (
            "nproc",
            thread::available_parallelism().map_or("?".into(), |n| n.to_string()),
        ),
        ("cpu", cpu),
        (
            "kernel",
            read("/proc/sys/kernel/osrelease").trim().to_string(),
        ),
        ("memory", mem),
        ("loadavg_start", loadavg()),
    ]
}

pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split(' ')
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Redis `maxclients` for `waiters` waiting processes: a few connections each (a redlock-run
/// waiter may hold a command connection and a subscription), and never below Redis's own
/// default. Redis lowers it to its open-file limit, which it inherits from this process, so
/// a limit too low for that is said at once, with the way to raise it.
pub fn check_open_files(waiters: usize) -> usize {
    let wanted = (waiters * 3 + 100).max(10_000);
    let soft = fs::read_to_string("/proc/self/limits")
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix("Max open files")?;
            rest.split_whitespace().next()?.parse::<usize>().ok()
        });
    if let Some(soft) = soft.filter(|&soft| soft < waiters * 3 + 132) {
        eprintln!(
            "compare: the open-file limit ({soft}) is low for {waiters} waiters: Redis may \
             refuse connections; raise it first (ulimit -n {})",
            waiters * 3 + 132
        );
    }
    wanted
}
