//! Waiting for events: a condition, a line in a file, a pid written by a script, a process's
//! death. Every wait has a limit and fails the test when it runs out, saying what it waited
//! for; tests wait on events like these rather than sleep for a guessed time.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::pid_alive;

/// Polls `cond` every 10ms until it holds; fails the test after `limit`. Returns how long it
/// took.
#[track_caller]
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if cond() {
            return start.elapsed();
        }
        if start.elapsed() > limit {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a file to appear and have non-empty content ending in a newline (a complete
/// `echo` to it), then returns that content trimmed.
#[track_caller]
fn wait_for_line(path: &Path, limit: Duration) -> String {
    let mut content = String::new();
    wait_until(limit, &format!("a line in {}", path.display()), || {
        content = fs::read_to_string(path).unwrap_or_default();
        content.ends_with('\n')
    });
    content.trim().to_string()
}

/// Waits for `pid` to be gone (or a zombie).
#[track_caller]
pub fn wait_for_death(pid: i32, limit: Duration) -> Duration {
    wait_until(limit, &format!("process {pid} to die"), || !pid_alive(pid))
}

/// Reads a pid written by a script with `echo $$ > file`.
#[track_caller]
pub fn read_pid(path: &Path) -> i32 {
    let s = wait_for_line(path, Duration::from_secs(10));
    s.parse()
        .unwrap_or_else(|_| panic!("{} holds {s:?}, not a pid", path.display()))
}
