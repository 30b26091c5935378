//! What the command needs to start: readied before the lock is asked for, its variables,
//! the guardian, the supervisor's limits, and why it could not start. No Redis here.

use std::os::unix::ffi::OsStrExt;

use anyhow::Result;

use crate::backend::{LockBackend, MemberState};
use crate::config::Config;
use crate::event::Events;
use crate::exit::Outcome;
use crate::process::{self, ReadyGuardian, SpawnError};
use crate::{report, signals, supervise};

use super::acquire::not_acquired_outcome;

/// The variables a run gives its command (README, "Environment given to the command"),
/// replacing any it inherited. (Those of ours that hold a password are left out too:
/// `Config::hidden_env`.)
const RUN_VARIABLES: [&str; 9] = [
    "REDLOCK_KEY",
    "REDLOCK_TOKEN",
    "REDLOCK_FENCE",
    "REDLOCK_TTL_MS",
    "REDLOCK_NAME",
    "REDLOCK_SLOT",
    "REDLOCK_MODE",
    "REDLOCK_KEYS",
    "REDLOCK_FENCES",
];

/// What a run readies before it asks for the lock.
pub(super) struct Prepared {
    /// The loop's inputs: the run's signals, the command's exit, the threads' reports.
    pub(super) events: Events,
    pub(super) command: process::Command,
}

/// Readies the run before the lock is asked for: its signals, the loop's inputs, and the
/// command (its argv, PATH candidates and environment), so that a run that waits has them
/// ready when the lock comes free. No thread: the renewal thread starts when the first
/// renewal is due, and the command's exit is a SIGCHLD. `Ok(Err(outcome))`: the command
/// cannot be run.
pub(super) fn prepare(config: &Config) -> Result<Result<Prepared, Outcome>> {
    // First, on the main thread before any other: the run's signals are blocked in every
    // thread from here on, and wait in the loop's descriptor, so that none is missed.
    let (signals, _forwarded) = signals::listen()?;
    // Before anything can make a child: SIGCHLD must be at its default.
    process::prepare();
    let events = Events::new(signals, process::is_init())?;
    let left_out: Vec<&str> = RUN_VARIABLES
        .iter()
        .chain(&config.hidden_env)
        .copied()
        .collect();
    Ok(
        // No handler to reset in the command: the run's signals have none (they are read
        // from a signalfd), only a blocked mask, which the command's process clears.
        match process::command(&config.command, &left_out, &[]) {
            Ok(command) => Ok(Prepared { events, command }),
            Err(err) => Err(cannot_run(config, err)),
        },
    )
}

/// The time limits the supervisor enforces.
pub(super) fn limits(config: &Config) -> supervise::Limits {
    supervise::Limits {
        kill_after: config.timing.kill_after,
        max_runtime: config.max_runtime,
        stop_timeout: config.stop_timeout,
    }
}

/// The variables a run gives its command (`RUN_VARIABLES`), with their values: those of
/// the lock held (a pool's member), or of the first named (several keys held), and with
/// several keys, every key held and its fence, one a line, in the order named.
pub(super) fn command_env(
    config: &Config,
    token: String,
    fence: u64,
    backend: &dyn LockBackend,
) -> Vec<(&'static str, Vec<u8>)> {
    let held: Vec<(usize, u64)> = backend
        .members()
        .iter()
        .enumerate()
        .filter_map(|(index, state)| match state {
            MemberState::Held { fence } => Some((index, *fence)),
            _ => None,
        })
        .collect();
    let locks = &config.locks;
    let (first, fence) = held.first().copied().unwrap_or((0, fence));
    let mut values = vec![
        locks.keys[first].as_bytes().to_vec(),
        token.into_bytes(),
        fence.to_string().into_bytes(),
        config.timing.ttl.as_millis().to_string().into_bytes(),
        locks.names[first].as_bytes().to_vec(),
        backend.slot().to_string().into_bytes(),
        if config.shared {
            &b"shared"[..]
        } else {
            &b"exclusive"[..]
        }
        .to_vec(),
    ];
    if locks.mode.is_some() {
        let lines = |each: &dyn Fn(usize, u64) -> Vec<u8>| {
            let lines: Vec<Vec<u8>> = held
                .iter()
                .map(|&(index, fence)| each(index, fence))
                .collect();
            lines.join(&b'\n')
        };
        values.push(lines(&|index, _| locks.keys[index].as_bytes().to_vec()));
        values.push(lines(&|_, fence| fence.to_string().into_bytes()));
    }
    RUN_VARIABLES.into_iter().zip(values).collect()
}

/// The guardian must be there before the command can run (its process names its group to
/// it): forked while waiting, or now. Not earlier: every page this process writes after a
/// fork is copied, and the taking of the lock writes plenty (measured: forked on a thread
/// of its own at the start, `redlock-run -- true` took 0.3-0.7 ms longer).
pub(super) fn ready_guardian(
    waited: Option<ReadyGuardian>,
    config: &Config,
) -> Option<ReadyGuardian> {
    let ready = match waited {
        Some(ready) => Ok(ready),
        None => ReadyGuardian::fork(config.timing.kill_after),
    };
    match ready {
        Ok(ready) => Some(ready),
        Err(err) => {
            report::warn(format_args!(
                "cannot start the guardian process ({err}); if redlock-run is killed or \
                 stopped, only the command's first process gets SIGTERM"
            ));
            None
        }
    }
}

/// Reports why the command could not start; the outcome says with which exit code.
pub(super) fn cannot_run(config: &Config, err: SpawnError) -> Outcome {
    let program = config.command[0].to_string_lossy();
    let (outcome, err) = match err {
        SpawnError::NotFound(err) => (Outcome::NotFound, err),
        SpawnError::CannotExecute(err) => (Outcome::CannotExecute, err),
        SpawnError::NoProcess(err) => {
            report::error(&anyhow::anyhow!("cannot start {program}: {err}"));
            return Outcome::Failed;
        }
        SpawnError::LeaseEnded => {
            report::error_as(
                report::LogEvent::NotStarted,
                &anyhow::anyhow!(
                    "the lease on {} ran out before {program} could start (redlock-run was paused \
                 or starved of CPU after taking the lock); it was not started, and another \
                 holder may have the lock now",
                    config.key
                ),
            );
            return not_acquired_outcome(config);
        }
    };
    report::error(&anyhow::anyhow!("cannot run {program}: {err}"));
    outcome
}
