//! Every process the harness starts for a measurement gets a time limit here, and a
//! watchdog thread kills it when it runs over, so that no loop can hang the run. It owns
//! spawning, waiting and timing one process; what the process is and what its time means
//! belong to the caller. The servers are not started here: `servers.rs` guards them.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::thread;
use std::time::{Duration, Instant};

use crate::Result;

/// Pid and deadline of every process still running; the watchdog reads it.
static ARMED: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());
/// A kill is a hint that a figure is off, so the report says how many there were.
pub static KILLED: AtomicUsize = AtomicUsize::new(0);
static WATCHDOG: Once = Once::new();

/// A thread that panicked while holding a lock must not stop the watchdog or the report:
/// the data behind these locks stays usable.
pub fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Kills (with `kill -KILL`, std has no kill by pid) any armed process past its deadline.
fn watchdog() {
    loop {
        thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        locked(&ARMED).retain(|&(pid, deadline)| {
            if now < deadline {
                return true;
            }
            eprintln!("compare: pid {pid} ran over its time limit; killing it");
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            KILLED.fetch_add(1, Ordering::Relaxed);
            false
        });
    }
}

/// A child process with a time limit; killed and reaped if dropped before `wait`.
pub struct Proc {
    child: Child,
    started: Instant,
    reaped: bool,
}

impl Proc {
    pub fn spawn(command: &mut Command, limit: Duration) -> Result<Proc> {
        WATCHDOG.call_once(|| {
            thread::spawn(watchdog);
        });
        let started = Instant::now();
        let child = command
            .spawn()
            .map_err(|err| format!("cannot start {:?}: {err}", command.get_program()))?;
        locked(&ARMED).push((child.id(), started + limit));
        Ok(Proc {
            child,
            started,
            reaped: false,
        })
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Moves the time limit: the process is killed if it still runs at `deadline`.
    pub fn deadline(&self, deadline: Instant) {
        let pid = self.child.id();
        for armed in locked(&ARMED).iter_mut().filter(|(armed, _)| *armed == pid) {
            armed.1 = deadline;
        }
    }

    /// Waits for the exit; returns the status and the time from spawn to exit.
    pub fn wait(&mut self) -> Result<(ExitStatus, Duration)> {
        let status = self.child.wait().map_err(|err| format!("wait: {err}"))?;
        let elapsed = self.started.elapsed();
        self.reaped = true;
        let pid = self.child.id();
        locked(&ARMED).retain(|&(armed, _)| armed != pid);
        Ok((status, elapsed))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.wait();
        }
    }
}

/// Runs a command to its end; returns whether it succeeded and how long it took.
pub fn timed(command: &mut Command, limit: Duration) -> Result<(bool, Duration)> {
    let (status, elapsed) = Proc::spawn(command, limit)?.wait()?;
    Ok((status.success(), elapsed))
}

pub fn wait_until(limit: Duration, step: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        thread::sleep(step);
    }
}
