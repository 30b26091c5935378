//! One run from start to end: take the lock (waiting if need be), start the command, hand
//! the lease to the renewal thread and the command to the supervisor, release, and say how
//! it ended. The order here is the safety argument: the command starts only once the lock
//! is ours, and the lock is released only once the command's whole process group is gone.
//!
//! This file holds that order; each phase's details are in a file of their own: taking the
//! lock (`acquire`), readying and starting the command (`start`), ending the hold and the
//! run's outcome (`end`), and what the run did, for its summary and pings (`record`). The
//! next lock shapes (shared locks, pools, several keys per run) bring the run's key set:
//! taken in `acquire`, released in `end`, its keys named in `backend/layout/`.

mod acquire;
mod end;
mod record;
mod start;

use std::time::Instant;

use anyhow::Result;

use crate::backend;
use crate::config::Config;
use crate::exit::Outcome;
use crate::ping::Pinger;
use crate::process::{self, ReadyGuardian};
use crate::renew::{self, Renewer};
use crate::report;
use crate::supervise;

use acquire::{acquire, pending_signal, Acquisition};
use end::{end_hold, ran_outcome, Ran};
use record::{end_ping, summarize, RunRecord};
use start::{cannot_run, command_env, limits, prepare, ready_guardian};

/// Runs the configured command under the lock. Every failure is reported here, once.
pub fn run(config: &Config) -> Outcome {
    report::set_verbosity(config.verbosity);
    report::set_key(&config.key);
    let started = Instant::now();
    let mut record = RunRecord {
        pinger: config
            .ping
            .as_ref()
            .map(|ping| Pinger::new(ping.url.clone())),
        ..RunRecord::default()
    };
    let outcome = run_checked(config, &mut record).unwrap_or_else(|err| {
        report::error(&err);
        Outcome::Failed
    });
    summarize(&record, started, &outcome);
    // Only now, the lock released: a ping never holds it up.
    if let Some(pinger) = record.pinger.take() {
        if let Some(end) = end_ping(config, &record, &outcome) {
            pinger.finish(end);
        }
    }
    outcome
}

/// The safety order, on one screen: the lock, then its lease renewed, then the guardian,
/// then the command on a lease that still holds; and once the command's whole process
/// group is gone (or it never started), the one release.
fn run_checked(config: &Config, record: &mut RunRecord) -> Result<Outcome> {
    let mut prepared = match prepare(config)? {
        Ok(prepared) => prepared,
        Err(outcome) => return Ok(outcome),
    };
    let lock = config.lock_request();
    let token = lock.token.clone();
    let backend = match config.locks.mode {
        Some(mode) => backend::open_set(
            &config.redis,
            config.redis_timeout,
            lock,
            &config.locks.keys,
            mode,
            config.eviction,
        )?,
        None => backend::open(&config.redis, config.redis_timeout, lock, config.eviction)?,
    };
    report::verbose(format_args!(
        "taking {} at {}",
        config.locks,
        backend.describe()
    ));
    let held = match acquire(backend, config, &prepared.events, &mut record.skip)? {
        Acquisition::Held(held) => held,
        Acquisition::Ended(outcome) => return Ok(outcome),
    };
    record.acquired = Some(Instant::now());
    report::set_fence(held.fence);
    report::verbose_as(
        report::LogEvent::Acquired,
        format_args!("lock taken, token {token}, fence {}", held.fence),
    );
    let env = command_env(config, token, held.fence, &*held.backend);
    let mut lease = config.timing.lease_from(held.sent_at);
    let events = &prepared.events;
    let mut renewer = Renewer::new(held.backend, lease, events.reporter());

    // From here to the release, nothing returns: every way out goes through it.
    let ran = 'command: {
        // A signal that came while the lock was being taken stops us before the command
        // starts; whatever the release finds, no command ran on the lock.
        if let Some(signal) = pending_signal(events) {
            break 'command Ran::NotStarted(Outcome::Interrupted { signal });
        }
        let ready_guardian = ready_guardian(held.guardian, config);
        // The command starts only on a lease that still holds: checked again right before
        // its `exec`, since this process may be paused anywhere until then; by then its
        // process has named its group to the guardian.
        let spawned = process::spawn(
            &mut prepared.command,
            &env,
            lease.valid_until(),
            ready_guardian.as_ref(),
        );
        let mut child = match spawned {
            Ok(child) => child,
            Err(err) => break 'command Ran::NotStarted(cannot_run(config, err)),
        };
        events.watch_child(child.pid());
        record.command_started(child.pid());
        // A renewal that finished since the command's process named its lease reaches the
        // guardian through the supervisor.
        let guardian = ready_guardian.map(ReadyGuardian::armed);
        let supervised = supervise::supervise(
            &mut child,
            guardian.as_ref(),
            events,
            &mut renewer,
            &mut lease,
            &config.key,
            limits(config),
        );
        Ran::Supervised {
            supervised,
            lent_terminal: child.lends_terminal(),
            guardian,
        }
    };

    // The one release: the command's whole process group is gone, or it never started.
    let backend = renewer.stop();
    supervise::catch_up(events, &mut lease);
    let found = end_hold(&mut **renew::lock_backend(&backend), config, &lease, &ran);
    record.released = Some(Instant::now());
    record.renewals = lease.renewals();
    // Only now: the guardian, woken, would compete with the release for the CPUs. Until it
    // is dismissed it finds the group gone and does nothing to it.
    ran.dismiss_guardian();
    ran_outcome(config, ran, found)
}
