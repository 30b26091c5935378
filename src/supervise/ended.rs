//! The supervisor's handling of the command's end: its first process reaped, what it left
//! in its group ended and waited out, and the run's result once nothing is left. The loop,
//! and when each of these runs, is in `mod.rs`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{told, Ending, Reaped, Supervised, Supervisor};
use crate::event::Loss;
use crate::process::{Group, Guardian};
use crate::report;

/// How long processes may outlive `SIGKILL` before the lock is released all the same: one
/// stuck in the kernel (uninterruptible I/O) dies only when its system call returns, which
/// may be never, and waiting longer would only delay the release.
const UNKILLABLE_WAIT: Duration = Duration::from_secs(5);

impl Supervisor<'_> {
    /// The command's first process has exited: reaped at once, and what it left in its
    /// group told to end (`finished` waits for it).
    pub(super) fn exited(&mut self) {
        // Read while the first process is unreaped, so that its pid is still its own: the
        // guardian notes a kill before it sends it.
        let guardian_killed = self.guardian.is_some_and(Guardian::killed);
        // Even when the status cannot be had, the group is ended before anything else.
        let status = self.child.reap();
        // Orphans that died while it was unreaped were behind it (see `reap_orphans`). A
        // few system calls; any other run has nothing there but what `group` reaps.
        self.child.reap_orphans();
        let left = self.child.group() != Group::Gone;
        let left_processes = left && self.kill_at.is_none();
        let now = Instant::now();
        let valid_until = self.lease.valid_until();
        if guardian_killed {
            // Its status is not its own, whenever it came. (`lost` ends what is left.)
            self.lost(Loss::Guardian);
        } else if self.ending != Ending::LockLost && now >= valid_until && left {
            // The first process ended in time, but what it left running outlived the lease.
            self.lost(Loss::Expired {
                ago: now - valid_until,
            });
        } else if left {
            let at = self.kill_due(Instant::now());
            told(libc::SIGTERM, self.child.terminate_group());
            self.kill_at = Some(at);
        }
        self.reaped = Some(Reaped {
            status,
            left_processes,
        });
    }

    /// Once the command's first process has been reaped: `Some` when nothing is left of its
    /// group, or nothing more can be done for what is (see the module doc).
    pub(super) fn finished(&mut self) -> Result<Option<Supervised>> {
        if self.reaped.is_none() {
            return Ok(None);
        }
        let ended = match self.child.group() {
            Group::Gone => true,
            Group::Unreachable => {
                if !self.told_unreachable {
                    self.told_unreachable = true;
                    self.tell_unreachable();
                }
                return Ok(None);
            }
            Group::Present => match self.killed_at {
                Some(at) if at.elapsed() >= UNKILLABLE_WAIT => {
                    report::warn(format_args!(
                        "processes of the command's group are still there {} after SIGKILL \
                         (stuck in the kernel, in uninterruptible sleep): releasing {} while \
                         they exist; they die when their system call returns",
                        report::duration(UNKILLABLE_WAIT),
                        self.key
                    ));
                    false
                }
                _ => return Ok(None),
            },
        };
        let Some(reaped) = self.reaped.take() else {
            return Ok(None);
        };
        if self.told_unreachable {
            report::verbose(format_args!(
                "the command's processes out of redlock-run's reach have ended"
            ));
        } else if reaped.left_processes && ended {
            report::warn(format_args!(
                "the command left processes running in its process group; \
                 terminated them before releasing the lock"
            ));
        }
        self.child.return_terminal();
        let status = reaped
            .status
            .context("cannot collect the command's status")?;
        report::verbose(format_args!("command ended: {status}"));
        Ok(Some(Supervised {
            status,
            ending: self.ending,
            asked_to_stop: self.asked_to_stop,
        }))
    }

    /// The group's processes all run as another user: no signal reaches them, and the lock
    /// is not released under them.
    fn tell_unreachable(&self) {
        if self.ending == Ending::LockLost {
            report::warn(format_args!(
                "the command's processes that run as another user run on without {}, out of \
                 redlock-run's reach; waiting for them to end",
                self.key
            ));
        } else {
            report::warn(format_args!(
                "the command's processes that run as another user (sudo, a setuid program) \
                 are out of redlock-run's reach, which may not signal them; keeping {} until \
                 they end",
                self.key
            ));
        }
    }
}
