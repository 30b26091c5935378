//! One run from start to end: take the lock (waiting if need be), start the command, hand
//! the lease to the renewal thread and the command to the supervisor, release, and say how
//! it ended. The order here is the safety argument: the command starts only once the lock
//! is ours, and the lock is released only once the command's whole process group is gone.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::backend::{self, is_try_later, Attempt, HoldEnd, LockBackend, Released};
use crate::config::{Config, Wait};
use crate::event::{Event, Events};
use crate::exit::{self, Outcome};
use crate::holder::{self, Blocker};
use crate::lease::{self, Lease};
use crate::ping::{self, End, Pinger};
use crate::process::{self, Guardian, ReadyGuardian, SpawnError};
use crate::renew::{self, Renewer};
use crate::supervise::{self, Ending, Supervised};
use crate::wait::{self, WaitPlan, Waited};
use crate::{report, signals};

/// The variables a run gives its command (README, "Environment given to the command"),
/// replacing any it inherited. (Those of ours that hold a password are left out too:
/// `Config::hidden_env`.)
const RUN_VARIABLES: [&str; 4] = [
    "REDLOCK_KEY",
    "REDLOCK_TOKEN",
    "REDLOCK_FENCE",
    "REDLOCK_TTL_MS",
];

/// Runs the configured command under the lock. Every failure is reported here, once.
pub fn run(config: &Config) -> Outcome {
    report::set_verbosity(config.verbosity);
    report::set_key(&config.key);
    if config.dry_run {
        return crate::dry_run::run(config);
    }
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

/// What a run did, for its summary line (`-v`) and its end ping.
#[derive(Default)]
struct RunRecord {
    /// When the lock was ours, and when it no longer was.
    acquired: Option<Instant>,
    released: Option<Instant>,
    renewals: u32,
    /// Whether the command was started (and the start ping sent).
    started: bool,
    /// The run skipped its command: why, and the count the backend returned.
    skip: Option<Skip>,
    /// `--ping`.
    pinger: Option<Pinger>,
}

impl RunRecord {
    /// The command started, as process `pid`: the start ping goes out.
    fn command_started(&mut self, pid: libc::pid_t) {
        self.started = true;
        if let Some(pinger) = self.pinger.as_mut() {
            pinger.started();
        }
        report::verbose_as(
            report::LogEvent::Started,
            format_args!("command started, pid {pid}"),
        );
    }
}

/// A skipped run, for the `--max-skips` alarm.
struct Skip {
    /// busy, timeout, superseded.
    reason: &'static str,
    /// Who held the lock or took this run's place, as a phrase that reads alone: `held by
    /// …`, `superseded by …`.
    holder: String,
    /// The consecutive skips of the lock, this one included, if known.
    count: Option<u64>,
}

impl Skip {
    fn new(reason: &'static str, holder: String, count: Option<u64>) -> Skip {
        Skip {
            reason,
            holder,
            count,
        }
    }
}

/// Which end ping the run's outcome calls for (`--ping`'s help is the table); `None`: none.
fn end_ping(config: &Config, record: &RunRecord, outcome: &Outcome) -> Option<End> {
    let code = outcome.exit_code();
    match outcome {
        Outcome::Command { .. } if code == 0 => Some(End::Success),
        Outcome::Command { .. } | Outcome::MaxRuntime => Some(End::Status(code)),
        // Stopped by a signal: a failure if its command ran, nothing if it never did.
        Outcome::Interrupted { .. } => record.started.then_some(End::Status(code)),
        Outcome::LockLost | Outcome::CannotExecute | Outcome::NotFound | Outcome::Failed => {
            Some(End::Fail)
        }
        // The lease ran out between taking the lock and the command's start.
        Outcome::NotAcquired { .. } if record.acquired.is_some() => Some(End::Fail),
        // Replaced by a --replace run, which pings for itself.
        Outcome::Superseded if record.acquired.is_some() => None,
        Outcome::NotAcquired { .. } | Outcome::Superseded | Outcome::AlreadyDone => {
            skip_alarm(config, record.skip.as_ref()?)
        }
        Outcome::Done | Outcome::Free | Outcome::Plugin(_) => None,
    }
}

/// The `--max-skips`-th consecutive skip and every later one: `URL/fail`, naming the holder.
fn skip_alarm(config: &Config, skip: &Skip) -> Option<End> {
    let max = config.ping.as_ref()?.max_skips?;
    let Some(count) = skip.count else {
        report::verbose(format_args!(
            "--max-skips: the count of consecutive skips is not known; no alarm"
        ));
        return None;
    };
    (count >= max).then(|| End::SkipAlarm {
        body: ping::skip_alarm_body(&config.key.to_string(), count, skip.reason, &skip.holder),
    })
}

/// `finished: waited 0s, held 2.5s, renewed 3 times, exit 0`, with `-v`; in JSON with the
/// same numbers as fields, for log collectors and monitors.
fn summarize(record: &RunRecord, started: Instant, outcome: &Outcome) {
    if !report::is_verbose() {
        return;
    }
    let exit_code = u64::from(outcome.exit_code());
    let waited = record.acquired.unwrap_or_else(Instant::now) - started;
    let held = record
        .acquired
        .map(|acquired| record.released.unwrap_or_else(Instant::now) - acquired);
    let millis = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    let mut fields = vec![("waited_ms", millis(waited))];
    let what = match held {
        Some(held) => {
            fields.push(("held_ms", millis(held)));
            fields.push(("renewals", u64::from(record.renewals)));
            format!(
                "held {}, renewed {} time{}",
                report::duration(held),
                record.renewals,
                if record.renewals == 1 { "" } else { "s" }
            )
        }
        None => String::from("the lock was not taken"),
    };
    fields.push(("exit_code", exit_code));
    report::say(
        report::Level::Debug,
        report::LogEvent::Summary,
        &fields,
        format_args!(
            "finished: waited {}, {what}, exit {exit_code}",
            report::duration(waited)
        ),
    );
}

/// Where taking the lock got us.
enum Acquisition {
    Held(Held),
    Ended(Outcome),
}

/// The lock, taken.
struct Held {
    backend: Box<dyn LockBackend>,
    /// When the request that took it was sent: the lease counts from then.
    sent_at: Instant,
    fence: u64,
    /// Forked while waiting, if the lock was busy.
    guardian: Option<ReadyGuardian>,
}

/// What became of the command once the lock was ours.
enum Ran {
    /// It never started (a signal came first, or it could not be run): this is the run's
    /// outcome.
    NotStarted(Outcome),
    /// It ran, and it and its process group are gone (or supervision failed and nothing
    /// more can be done for them).
    Supervised {
        supervised: Result<Supervised>,
        lent_terminal: bool,
        guardian: Option<Guardian>,
    },
}

impl Ran {
    /// Tells the guardian, if there is one, that the command's group is gone.
    fn dismiss_guardian(&self) {
        if let Ran::Supervised {
            guardian: Some(guardian),
            ..
        } = self
        {
            guardian.dismiss();
        }
    }
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
    let backend = backend::open(&config.redis, config.redis_timeout, lock, config.eviction)?;
    report::verbose(format_args!(
        "taking {} at {}",
        config.key,
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
    let env = command_env(config, token, held.fence);
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

/// What a run readies before it asks for the lock.
struct Prepared {
    /// The loop's inputs: the run's signals, the command's exit, the threads' reports.
    events: Events,
    command: process::Command,
}

/// Readies the run before the lock is asked for: its signals, the loop's inputs, and the
/// command (its argv, PATH candidates and environment), so that a run that waits has them
/// ready when the lock comes free. No thread: the renewal thread starts when the first
/// renewal is due, and the command's exit is a SIGCHLD. `Ok(Err(outcome))`: the command
/// cannot be run.
fn prepare(config: &Config) -> Result<Result<Prepared, Outcome>> {
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
fn limits(config: &Config) -> supervise::Limits {
    supervise::Limits {
        kill_after: config.timing.kill_after,
        max_runtime: config.max_runtime,
        stop_timeout: config.stop_timeout,
    }
}

/// The variables a run gives its command (`RUN_VARIABLES`), with their values.
fn command_env(config: &Config, token: String, fence: u64) -> Vec<(&'static str, Vec<u8>)> {
    let values = [
        config.key.as_bytes().to_vec(),
        token.into_bytes(),
        fence.to_string().into_bytes(),
        config.timing.ttl.as_millis().to_string().into_bytes(),
    ];
    RUN_VARIABLES.into_iter().zip(values).collect()
}

/// The guardian must be there before the command can run (its process names its group to
/// it): forked while waiting, or now. Not earlier: every page this process writes after a
/// fork is copied, and the taking of the lock writes plenty (measured: forked on a thread
/// of its own at the start, `redlock-run -- true` took 0.3-0.7 ms longer).
fn ready_guardian(waited: Option<ReadyGuardian>, config: &Config) -> Option<ReadyGuardian> {
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

/// Ends the hold: records what the lock's history and `--once` need, in the release's own
/// script, then releases.
fn end_hold(backend: &mut dyn LockBackend, config: &Config, lease: &Lease, ran: &Ran) -> Found {
    if let Ran::Supervised { supervised, .. } = ran {
        // Only a command that exited 0 on its own, the lock held throughout as far as the
        // supervisor saw, has its work recorded (`--once`); the release script records it
        // only if the key is still ours. One told to stop (a SIGTERM, SIGINT, SIGHUP or
        // SIGQUIT redlock-run passed on) did not finish its work, even when it exits 0 on
        // the signal, as a trap or `--stop-timeout`'s grace lets it: a signal records
        // nothing.
        let succeeded = supervised
            .as_ref()
            .is_ok_and(|s| s.ending == Ending::Exited && !s.asked_to_stop && s.status.success());
        if succeeded && config.once.is_on() {
            backend.record_success();
        }
        // The lock's history records how the hold ended.
        backend.end_hold(HoldEnd {
            exit_code: supervised
                .as_ref()
                .ok()
                .map(|s| exit::status_code(s.status)),
            success: succeeded,
            replaced: supervised
                .as_ref()
                .is_ok_and(|s| s.ending == Ending::Replaced),
        });
    }
    // After a loss this finds nothing of ours, or a lease that has run out: a no-op.
    release(backend, config, lease)
}

/// The run's outcome, from how the command ended and what the release found.
fn ran_outcome(config: &Config, ran: Ran, found: Found) -> Result<Outcome> {
    let (supervised, lent_terminal) = match ran {
        Ran::NotStarted(outcome) => return Ok(outcome),
        Ran::Supervised {
            supervised,
            lent_terminal,
            ..
        } => (supervised?, lent_terminal),
    };
    if found == Found::Lost && supervised.ending != Ending::LockLost {
        // No renewal came between the loss and the command's end (most short jobs end
        // before their first renewal): the release is the first to see it.
        report::error_as(
            report::LogEvent::Lost,
            &anyhow::anyhow!(
                "lock lost: {} was gone from Redis or held by someone else when the command \
                 ended, before its lease could have run out; the command may have run \
                 without the lock",
                config.key
            ),
        );
        return Ok(Outcome::LockLost);
    }
    if found == Found::Late && supervised.ending != Ending::LockLost {
        // The supervisor found that the command ended while the lease surely held: its
        // status stands. Only the release came too late to hand the lock on early.
        report::warn(format_args!(
            "the command ended inside its lease, but redlock-run could not release {} \
             before the lease ran out (it was stopped, or starved of CPU); the key expired \
             by its TTL",
            config.key
        ));
    }
    Ok(match supervised.ending {
        Ending::LockLost => Outcome::LockLost,
        Ending::MaxRuntime => Outcome::MaxRuntime,
        // As if the signal had ended redlock-run, which it asked to.
        Ending::Stopped { signal } => Outcome::Interrupted { signal },
        // Another run took over (--replace): 77, as a superseded waiter.
        Ending::Replaced => Outcome::Superseded,
        Ending::Exited => Outcome::Command {
            status: supervised.status,
            lent_terminal,
        },
    })
}

/// Reports why the command could not start; the outcome says with which exit code.
fn cannot_run(config: &Config, err: SpawnError) -> Outcome {
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

/// Takes the lock, waiting for it per `--wait` if it is busy.
fn acquire(
    mut backend: Box<dyn LockBackend>,
    config: &Config,
    events: &Events,
    skip: &mut Option<Skip>,
) -> Result<Acquisition> {
    let started = Instant::now();
    let mut waiting = Waiting::default();
    let took = match first_try(&mut *backend, config)? {
        FirstTry::Ended(waited) => Took::Ended(Ok(waited)),
        FirstTry::Busy {
            blocker: Some(blocker),
            skips,
        } if config.wait == Wait::For(Duration::ZERO) => Took::Busy { blocker, skips },
        FirstTry::Busy { blocker, .. } => {
            report::verbose(format_args!("{} is busy; waiting", config.key));
            waiting = Waiting {
                // Forked now, so that the fork is off the path from the holder's release to
                // our command's start. If it fails, it is tried again before the command
                // starts, and warned of.
                guardian: ReadyGuardian::fork(config.timing.kill_after).ok(),
                // Who held the lock when this run arrived: the one a skip alarm names.
                first_holder: blocker.as_ref().map(Blocker::phrase),
            };
            let plan = WaitPlan {
                deadline: match config.wait {
                    Wait::For(limit) => Some(started + limit),
                    Wait::Forever => None,
                },
                announce: !report::is_quiet()
                    && (report::is_verbose() || std::io::stderr().is_terminal()),
                redis_timeout: config.redis_timeout,
                takeover: config.replace,
            };
            let about = wait::About {
                redis: &config.redis,
                limit: config.limit,
                fair: config.fair,
                wait: match config.wait {
                    Wait::For(limit) => Some(limit),
                    Wait::Forever => None,
                },
            };
            let waited =
                wait::wait_for_lock(&mut *backend, &config.key, plan, about, blocker, events)
                    .with_context(|| format!("cannot wait for {}", config.key));
            Took::Ended(waited)
        }
    };
    settle(backend, took, waiting, config, started, skip)
}

/// What the first try found, before any wait.
enum FirstTry {
    /// Taken, or not to be taken: superseded, or the work already done.
    Ended(Waited),
    /// Busy because of `blocker`, or (`None`) at a server that answered "not now"; `skips`:
    /// the consecutive skips the script counted (only when this try is the run's last).
    Busy {
        blocker: Option<Blocker>,
        skips: Option<u64>,
    },
}

fn first_try(backend: &mut dyn LockBackend, config: &Config) -> Result<FirstTry> {
    let waits = config.wait != Wait::For(Duration::ZERO);
    Ok(match backend.try_acquire(None) {
        Ok(Attempt::Acquired { sent_at, fence }) => {
            FirstTry::Ended(Waited::Acquired { sent_at, fence })
        }
        // Only a waiter that has arrived is superseded; handled as in the wait all the same.
        Ok(Attempt::Superseded { newer, skips }) => {
            FirstTry::Ended(Waited::Superseded { newer, skips })
        }
        Ok(Attempt::Done { record, .. }) => FirstTry::Ended(Waited::Done { record }),
        Ok(Attempt::Busy {
            holder,
            ahead,
            skips,
            ..
        }) => {
            let blocker = Blocker { holder, ahead };
            refuse_nested(config, &blocker)?;
            FirstTry::Busy {
                blocker: Some(blocker),
                skips,
            }
        }
        // A server that answers "not now" (loading, at its client limit, failing over) is
        // waited out within --wait, like a busy lock. One that cannot be reached at all
        // fails the run at once: waiting for ever on a wrong URL helps no one.
        Err(err) if waits && is_try_later(&err) => FirstTry::Busy {
            blocker: None,
            skips: None,
        },
        Err(err) => return Err(err.context(format!("cannot take {}", config.key))),
    })
}

/// How taking the lock came out: of the first try, or of the wait (`Err`: it failed).
enum Took {
    Ended(Result<Waited>),
    /// Busy, and the run does not wait; `skips` as counted by the script.
    Busy {
        blocker: Blocker,
        skips: Option<u64>,
    },
}

/// What a run that waited keeps for after the wait.
#[derive(Default)]
struct Waiting {
    guardian: Option<ReadyGuardian>,
    first_holder: Option<String>,
}

/// Maps how taking the lock came out to the run's next step: the lock held, or the run's
/// outcome, with the skip it records.
fn settle(
    mut backend: Box<dyn LockBackend>,
    took: Took,
    waiting: Waiting,
    config: &Config,
    started: Instant,
    skip: &mut Option<Skip>,
) -> Result<Acquisition> {
    // The one place a run leaves the waiters' queue without the lock. Not when done (the
    // script left the queue, handing on any wake-up), nor when the wait ran out (the
    // timeout's own script leaves it), nor when Redis is out of reach (leaving politely
    // would take another Redis timeout past --wait, and a waiter whose connections close
    // is dropped from the queue at the next release).
    let leaves = matches!(
        took,
        Took::Busy { .. }
            | Took::Ended(Err(_) | Ok(Waited::Superseded { .. } | Waited::Interrupted { .. }))
    );
    if leaves {
        backend.abandon();
    }
    match took {
        Took::Ended(Ok(Waited::Acquired { sent_at, fence })) => Ok(Acquisition::Held(Held {
            backend,
            sent_at,
            fence,
            guardian: waiting.guardian,
        })),
        Took::Ended(Err(err)) => Err(err),
        Took::Busy { blocker, skips } => {
            *skip = Some(Skip::new("busy", blocker.phrase(), skips));
            report::info_as(
                report::LogEvent::Busy,
                &[("exit_code", u64::from(config.conflict_exit_code))],
                format_args!("{} is {}; not waiting", config.key, blocker.phrase()),
            );
            Ok(not_acquired(config))
        }
        // Not a skip: the work this run was for is done (no --max-skips alarm, and the
        // script counted no consecutive skip).
        Took::Ended(Ok(Waited::Done { record, .. })) => Ok(already_done(config, &record)),
        Took::Ended(Ok(Waited::TimedOut { blocker })) => {
            // Leaves the queue and records the timeout (a skip) in the same script.
            let count = backend.give_up();
            let holder = waiting
                .first_holder
                .unwrap_or_else(|| String::from("held by an unknown holder"));
            *skip = Some(Skip::new("--wait ran out", holder, count));
            // Named as the --no-wait message names it: who held it at the last look.
            let still = blocker.map_or_else(
                || String::from("held by another process"),
                |blocker| blocker.phrase(),
            );
            report::info_as(
                report::LogEvent::WaitTimeout,
                &[("exit_code", u64::from(config.conflict_exit_code))],
                format_args!(
                    "{} is still {still} after {}; giving up",
                    config.key,
                    report::duration(started.elapsed())
                ),
            );
            Ok(not_acquired(config))
        }
        Took::Ended(Ok(Waited::Unreachable(err))) => {
            drop(backend);
            Err(err.context(format!(
                "cannot take {}: gave up after {}",
                config.key,
                report::duration(started.elapsed())
            )))
        }
        Took::Ended(Ok(Waited::Superseded { newer, skips })) => {
            let by = format!("superseded by {}", holder::newer_run(newer.as_deref()));
            *skip = Some(Skip::new("superseded", by, skips));
            Ok(superseded(config, newer.as_deref()))
        }
        Took::Ended(Ok(Waited::Interrupted { signal })) => {
            report::verbose(format_args!(
                "{} while waiting; giving up",
                signals::name(signal)
            ));
            Ok(Acquisition::Ended(Outcome::Interrupted { signal }))
        }
    }
}

/// `--once`, `--once-per`: the work is done; the command does not run, and the run
/// succeeds, as the command did.
fn already_done(config: &Config, record: &[u8]) -> Acquisition {
    let (when, by) = crate::holder::done_by(record);
    let mut fields = vec![("exit_code", 0)];
    if let Some(when) = when {
        fields.push(("done_at_ms", when));
    }
    let what = match &config.once.id {
        Some(id) => format!("--once {}", report::escape(id)),
        None => String::from("--once-per"),
    };
    report::info_as(
        report::LogEvent::AlreadyDone,
        &fields,
        format_args!(
            "{} already done ({what}) {by}; not running the command",
            config.key
        ),
    );
    Acquisition::Ended(Outcome::AlreadyDone)
}

/// A run started by the command of the run that holds this very lock (its token holds the
/// key here) would wait for its own parent for ever: refused, naming that run.
fn refuse_nested(config: &Config, blocker: &Blocker) -> Result<()> {
    let Some(outer) = &config.outer_token else {
        return Ok(());
    };
    if blocker.identity().0.as_ref() != Some(outer) {
        return Ok(());
    }
    anyhow::bail!(
        "{} is held by the run of redlock-run whose command started this one ({}, token \
         {outer}, from REDLOCK_TOKEN): a nested run of the same lock would wait for it for \
         ever; not waiting",
        config.key,
        blocker.phrase()
    )
}

/// A newer `--supersede` run arrived: this one gives way, its command never run. One line
/// naming the newer run (host, pid, label), unless -q.
fn superseded(config: &Config, newer: Option<&[u8]>) -> Acquisition {
    report::info_as(
        report::LogEvent::Superseded,
        &[("exit_code", u64::from(exit::SUPERSEDED))],
        format_args!(
            "superseded on {} by {}; not running the command",
            config.key,
            holder::newer_run(newer)
        ),
    );
    Acquisition::Ended(Outcome::Superseded)
}

fn not_acquired(config: &Config) -> Acquisition {
    Acquisition::Ended(not_acquired_outcome(config))
}

/// The lock was not had for the command: the `--conflict-exit-code`.
fn not_acquired_outcome(config: &Config) -> Outcome {
    Outcome::NotAcquired {
        exit_code: config.conflict_exit_code,
    }
}

/// The first signal waiting in the queue, if any; other events are dropped (none can be
/// pending before the command starts).
fn pending_signal(events: &Events) -> Option<libc::c_int> {
    events.try_iter().find_map(|event| match event {
        Event::Signal { signal, .. } => Some(signal),
        _ => None,
    })
}

/// What the release found of the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Ours, or nothing to tell: released, kept until `--min-hold`, or not reached.
    Held,
    /// Not ours any more although the lease still held: the lock was lost before the
    /// release (deleted, flushed, evicted, released by force, lost in a failover).
    Lost,
    /// Not looked for: the lease had run out before the release could be sent.
    Late,
}

/// Deletes the key if it is still ours, waking waiters; with `--min-hold`, leaves it to
/// expire at the mark instead if that is still ahead. Past the lease's end there is nothing
/// left to release; if Redis cannot be reached the key expires by its TTL.
fn release(backend: &mut dyn LockBackend, config: &Config, lease: &Lease) -> Found {
    let now = Instant::now();
    let Some(deadline) = lease::release_deadline(now, lease.valid_until(), config.redis_timeout)
    else {
        report::verbose(format_args!("the lease has ended; nothing to release"));
        return Found::Late;
    };
    let keep_for = lease::min_hold_left(config.min_hold, lease.acquired_at(), now);
    let released = backend.release(keep_for, deadline);
    // "Not ours" proves a loss only if the key surely outlived the answer; after the
    // lease's end (a late reply) it may just have expired, and nothing can be told.
    if released.as_ref().is_ok_and(|r| *r == Released::NotOurs)
        && Instant::now() < lease.valid_until()
    {
        return Found::Lost;
    }
    match released {
        Ok(Released::Deleted) => {
            report::verbose_as(report::LogEvent::Released, format_args!("lock released"))
        }
        Ok(Released::DeletedUnannounced) => report::warn(format_args!(
            "released {}, but Redis refused to announce it: this user may not publish on \
             the release channel, so waiters find the lock free only when they next look \
             (see docs/security.md)",
            config.key
        )),
        Ok(Released::KeptUntilMinHold) => report::verbose(format_args!(
            "lock kept until the --min-hold mark, {} from now",
            report::duration(keep_for.unwrap_or_default())
        )),
        Ok(Released::NotOurs) => report::verbose(format_args!(
            "{} was no longer ours, but its lease had run out by the answer; nothing released",
            config.key
        )),
        Err(err) => report::warn(format_args!(
            "cannot release {}: {err:#}; unless the release reached Redis unanswered, it \
             will expire by its TTL",
            config.key
        )),
    }
    Found::Held
}
