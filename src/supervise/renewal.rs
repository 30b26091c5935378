//! The supervisor's handling of what the renewal thread reports (and the lease's own
//! timer): a renewal, a takeover asked for by a `--replace` run, a lost lock. The loop, and
//! when each of these runs, is in `mod.rs`.

use std::time::Instant;

use super::{told, Ending, Supervisor};
use crate::event::Loss;
use crate::report;

impl Supervisor<'_> {
    pub(super) fn renewed(&mut self, valid_until: Instant) {
        self.lease.renewed_until(valid_until);
        if let Some(guardian) = self.guardian {
            guardian.extend(self.lease.valid_until());
        }
    }

    /// A `--replace` run asked to take over: the command is terminated as for
    /// `--max-runtime`, and the lock is released once its group is gone, not before, so
    /// that the new command never runs beside it. A command already ending, or already
    /// being terminated (a lost lock, `--max-runtime`, or a stop signal redlock-run
    /// received and forwarded), is left to that: the first reason to end it decides the
    /// exit status. A stop signal that comes after still starts `--stop-timeout`'s budget.
    pub(super) fn replace_requested(&mut self, by: &[u8]) {
        // A command that has exited, its exit not heard yet (its SIGCHLD and the renewal
        // thread's report race), ended on its own: asked of the kernel, as for
        // `--max-runtime`, so that a takeover that comes just after a success leaves it a
        // success (exit 0, its `--once` work recorded), and the replacing run finds it so.
        if self.ended_by.is_none() && self.reaped.is_none() && self.child.has_exited() {
            self.command_ended(Instant::now());
        }
        if self.kill_at.is_some()
            || self.ended_by.is_some()
            || self.reaped.is_some()
            || self.asked_to_stop
        {
            return;
        }
        let sent = self.child.terminate_group();
        self.kill_at = Some(Instant::now() + self.limits.kill_after);
        self.ending = Ending::Replaced;
        report::info_as(
            report::LogEvent::Replaced,
            &[],
            format_args!(
                "replaced by {}; terminating the command (SIGTERM now, SIGKILL in {})",
                crate::holder::replacing_run(by),
                report::duration(self.limits.kill_after)
            ),
        );
        told(libc::SIGTERM, sent);
    }

    /// A loss the renewal thread reported (or the lease's timer). "Not ours" is a loss
    /// whenever it comes; a lease that ran out, or renewals that failed, are none of the
    /// command's if it ended while the lease surely held: its status is its own.
    pub(super) fn reported_lost(&mut self, loss: Loss) {
        if !matches!(loss, Loss::NotOurs) && self.ended_in_time(Instant::now()) {
            return;
        }
        self.lost(loss);
    }

    pub(super) fn lost(&mut self, loss: Loss) {
        if self.ending == Ending::LockLost {
            return;
        }
        self.ending = Ending::LockLost;
        let now = Instant::now();
        let key = self.key;
        // The guardian ended it at the lease's end: it did not run on past it.
        let run_on = !matches!(loss, Loss::Guardian);
        let why = match loss {
            Loss::NotOurs => format!("{key} is gone from Redis or now held by someone else"),
            Loss::Unconfirmed { last_error } => {
                format!("Redis did not confirm {key} in time ({last_error})")
            }
            Loss::Expired { ago } => format!(
                "the lease on {key} ran out {} ago, while redlock-run could not act (it was \
                 stopped, or starved of CPU)",
                report::duration(ago)
            ),
            Loss::Guardian => format!(
                "the guardian process killed the command at the end of the lease on {key} \
                 as it knew it, while redlock-run could not act (it was stopped, or starved \
                 of CPU)"
            ),
        };
        let at = self.kill_due(now);
        // Signal first: reporting could block on a full stderr pipe. (After the first
        // process's end this reaches what it left running.)
        let sent = self.child.terminate_group();
        self.kill_at = Some(at);
        if self.ended_by.is_some() {
            let tail = if run_on {
                "; the command, which has ended, may have run without it"
            } else {
                ""
            };
            report::error_as(
                report::LogEvent::Lost,
                &anyhow::anyhow!("lock lost: {why}{tail}"),
            );
            told(libc::SIGTERM, sent);
            return;
        }
        report::error_as(
            report::LogEvent::Lost,
            &anyhow::anyhow!(
                "lock lost: {why}; terminating the command (SIGTERM now, SIGKILL in {})",
                report::duration(at.saturating_duration_since(now))
            ),
        );
        told(libc::SIGTERM, sent);
    }
}
