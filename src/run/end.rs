//! Ending the hold: how the command came out, what the release records and finds of the
//! lock, and the run's outcome from both. The order of the release itself is in `mod.rs`.

use std::time::Instant;

use anyhow::Result;

use crate::backend::{HoldEnd, LockBackend, Released};
use crate::config::Config;
use crate::exit::{self, Outcome};
use crate::lease::{self, Lease};
use crate::process::Guardian;
use crate::report;
use crate::supervise::{Ending, Supervised};

/// What became of the command once the lock was ours.
pub(super) enum Ran {
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
    pub(super) fn dismiss_guardian(&self) {
        if let Ran::Supervised {
            guardian: Some(guardian),
            ..
        } = self
        {
            guardian.dismiss();
        }
    }
}

/// Ends the hold: records what the lock's history and `--once` need, in the release's own
/// script, then releases.
pub(super) fn end_hold(
    backend: &mut dyn LockBackend,
    config: &Config,
    lease: &Lease,
    ran: &Ran,
) -> Found {
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
pub(super) fn ran_outcome(config: &Config, ran: Ran, found: Found) -> Result<Outcome> {
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

/// What the release found of the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
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
