//! Processes as the tests see them from outside: programs looked up on PATH, signals sent,
//! and `/proc` read for liveness, parents and process groups.
//!
//! What this module does not own: starting processes (each fixture starts its own) or
//! waiting for them (see `wait`).

use std::fs;
use std::path::PathBuf;

/// Looks a program up on PATH.
fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(prog))
        .find(|p| p.is_file())
}

/// A program the tests cannot do without. A missing one fails the test with an install hint
/// rather than skipping it, so that a green run always means the suite really ran.
#[track_caller]
pub fn require(prog: &str, needed_for: &str, install: &str) -> PathBuf {
    which(prog).unwrap_or_else(|| {
        panic!("{prog} not found on PATH: {needed_for}.\nInstall it, e.g. {install}.")
    })
}

/// Sends `sig` to `pid`, failing the test if that is impossible.
#[track_caller]
pub fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// Fields of `/proc/PID/stat` after the command name: state, ppid, pgrp, ...
fn proc_stat(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Zombies count as dead: they have exited, and in a container nobody may reap them.
fn is_live(stat: &[String]) -> bool {
    !matches!(stat.first().map(String::as_str), Some("Z" | "X" | "x"))
}

/// Whether `pid` is a live process (not a zombie).
pub fn pid_alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|stat| is_live(&stat))
}

fn all_pids() -> Vec<i32> {
    fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Direct children of `pid`.
pub fn children_of(pid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&p| {
            proc_stat(p).and_then(|f| f.get(1).and_then(|s| s.parse::<i32>().ok())) == Some(pid)
        })
        .collect()
}

/// Live (non-zombie) processes in process group `pgid`.
pub fn live_in_group(pgid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&p| {
            proc_stat(p).is_some_and(|f| {
                f.get(2).and_then(|s| s.parse::<i32>().ok()) == Some(pgid) && is_live(&f)
            })
        })
        .collect()
}

/// The process group of `pid`.
pub fn pgid_of(pid: i32) -> Option<i32> {
    proc_stat(pid)?.get(2)?.parse().ok()
}
