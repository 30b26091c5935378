//! Taking the lock: the first try, the wait if it is busy, and what each way it comes out
//! means for the run (held, or the run's outcome and the skip it records). No command here.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::backend::keyset::Mode;
use crate::backend::{is_try_later, Attempt, Key, LockBackend, MemberState};
use crate::config::{Config, Wait};
use crate::event::{Event, Events};
use crate::exit::{self, Outcome};
use crate::holder::{self, Blocker};
use crate::process::ReadyGuardian;
use crate::wait::{self, WaitPlan, Waited};
use crate::{report, signals};

use super::record::Skip;

/// Where taking the lock got us.
pub(super) enum Acquisition {
    Held(Held),
    Ended(Outcome),
}

/// The lock, taken.
pub(super) struct Held {
    pub(super) backend: Box<dyn LockBackend>,
    /// When the request that took it was sent: the lease counts from then.
    pub(super) sent_at: Instant,
    pub(super) fence: u64,
    /// Forked while waiting, if the lock was busy.
    pub(super) guardian: Option<ReadyGuardian>,
}

/// Takes the lock, waiting for it per `--wait` if it is busy.
pub(super) fn acquire(
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
            report::verbose(format_args!("{} is busy; waiting", config.locks));
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
            let several_keys = config.locks.keys.len() > 1;
            let about = wait::About {
                redis: &config.redis,
                limit: config.limit,
                fair: config.fair,
                wait: match config.wait {
                    Wait::For(limit) => Some(limit),
                    Wait::Forever => None,
                },
                several_keys,
            };
            // What the wait is named after: every key it waits for, not the first alone.
            let waited_for = if several_keys {
                Key::from(config.locks.to_string().as_str())
            } else {
                config.key.clone()
            };
            let waited =
                wait::wait_for_lock(&mut *backend, &waited_for, plan, about, blocker, events)
                    .with_context(|| format!("cannot wait for {}", config.locks));
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
            let (what, phrase) = busy_phrase(&*backend, config, &blocker);
            *skip = Some(Skip::new("busy", blocker.phrase(), skips));
            report::info_as(
                report::LogEvent::Busy,
                &[("exit_code", u64::from(config.conflict_exit_code))],
                format_args!("{what} is {phrase}; not waiting"),
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
            let (what, still) = match blocker {
                Some(blocker) => busy_phrase(&*backend, config, &blocker),
                None => (
                    config.key.to_string(),
                    String::from("held by another process"),
                ),
            };
            report::info_as(
                report::LogEvent::WaitTimeout,
                &[("exit_code", u64::from(config.conflict_exit_code))],
                format_args!(
                    "{what} is still {still} after {}; giving up",
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

/// What a busy attempt found, for its message: the lock and its holder; with several keys
/// the one found busy; with a pool each member and its holder (`s1 held by …; s2 held by …`).
fn busy_phrase(backend: &dyn LockBackend, config: &Config, blocker: &Blocker) -> (String, String) {
    let members = backend.members();
    let busy_key = members
        .iter()
        .zip(&config.locks.keys)
        .find(|(state, _)| matches!(state, MemberState::Busy { .. }))
        .map(|(_, key)| key.clone());
    let busy: Vec<String> = members
        .into_iter()
        .zip(&config.locks.keys)
        .filter_map(|(state, key)| match state {
            MemberState::Busy { holder } => {
                Some(format!("{key} {}", Blocker { holder, ahead: 0 }.phrase()))
            }
            _ => None,
        })
        .collect();
    match (config.locks.mode, busy.is_empty()) {
        (Some(Mode::Any), false) => (
            format!("every lock of the pool ({})", busy.len()),
            format!("busy: {}", busy.join("; ")),
        ),
        // Taken in order, up to the first busy key: that one is named, with its holder.
        (Some(Mode::All), false) => {
            let key = busy_key.unwrap_or_else(|| config.key.clone());
            (key.to_string(), blocker.phrase())
        }
        _ => (config.key.to_string(), blocker.phrase()),
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
pub(super) fn not_acquired_outcome(config: &Config) -> Outcome {
    Outcome::NotAcquired {
        exit_code: config.conflict_exit_code,
    }
}

/// The first signal waiting in the queue, if any; other events are dropped (none can be
/// pending before the command starts).
pub(super) fn pending_signal(events: &Events) -> Option<libc::c_int> {
    events.try_iter().find_map(|event| match event {
        Event::Signal { signal, .. } => Some(signal),
        _ => None,
    })
}
