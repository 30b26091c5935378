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

/// The signals whose disposition the signal tests depend on: those redlock-run forwards.
const FORWARDED: [(libc::c_int, &str); 6] = [
    (libc::SIGINT, "SIGINT"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGQUIT, "SIGQUIT"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGUSR2, "SIGUSR2"),
];

/// Gives what `cmd` starts the default action for every forwarded signal. An ignored signal
/// survives `exec`: a suite started under `nohup` (SIGHUP ignored) or as a background job of
/// a script, as cron and CI runners do (SIGINT and SIGQUIT ignored), would otherwise hand
/// that to every redlock-run it starts, which then rightly leaves it ignored, and the signal
/// tests would wait in vain. A test about ignored signals ignores them itself, in the shell
/// that execs redlock-run (`Wrapper::via_shell`).
pub fn with_default_signals(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls signal(2),
    // which is async-signal-safe, allocates nothing and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            for (signal, _) in FORWARDED {
                if libc::signal(signal, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        })
    }
}

/// For a failure message: which forwarded signals `pid` ignores, read from `SigIgn` in
/// `/proc/PID/status` ("" when none, or when the process is gone).
pub fn ignored_signals_note(pid: i32) -> String {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let ignored: Vec<&str> = FORWARDED
        .iter()
        .filter(|(signal, _)| mask & (1 << (signal - 1)) != 0)
        .map(|&(_, name)| name)
        .collect();
    if ignored.is_empty() {
        return String::new();
    }
    format!(
        "\nnote: pid {pid} ignores {}: a test that sends these signals cannot pass while they \
         are ignored (was the suite started under nohup, or as a background job, and did a \
         fixture skip `with_default_signals`?)",
        ignored.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The note names the ignored signals of a live process, and nothing for one that
    /// ignores none.
    #[test]
    fn the_note_names_ignored_signals() {
        // Both start from the default actions, whatever the suite inherited (nohup, a
        // background job): only the shell's own traps may show.
        let mut ignoring = with_default_signals(&mut std::process::Command::new("/bin/sh"))
            .args(["-c", "trap '' HUP INT; exec sleep 30"])
            .spawn()
            .unwrap();
        let mut plain = with_default_signals(&mut std::process::Command::new("sleep"))
            .arg("30")
            .spawn()
            .unwrap();
        let pid = ignoring.id() as i32;
        let note = || ignored_signals_note(pid);
        crate::support::wait_until(
            std::time::Duration::from_secs(10),
            "the shell to exec sleep",
            || note().contains("SIGHUP"),
        );
        assert!(note().contains("ignores SIGINT, SIGHUP:"), "{}", note());
        assert_eq!(ignored_signals_note(plain.id() as i32), "");
        for child in [&mut ignoring, &mut plain] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}
