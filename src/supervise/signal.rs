//! The supervisor's handling of signals: one to redlock-run, forwarded to the command's
//! group (and `--stop-timeout`'s budget it starts, and spends), and the command stopped by
//! job control. The loop, and when each of these runs, is in `mod.rs`.

use std::time::Instant;

use super::{told, Ending, Supervisor, LEFTOVER_POLL};
use crate::{report, signals};

impl Supervisor<'_> {
    pub(super) fn forward(&mut self, signal: libc::c_int, from_terminal: bool) {
        // Whether or not it is forwarded (the terminal may have delivered it already), the
        // command was asked to stop, and the budget starts.
        self.start_stop_budget(signal);
        if matches!(
            signal,
            libc::SIGINT | libc::SIGTERM | libc::SIGHUP | libc::SIGQUIT
        ) {
            self.asked_to_stop = true;
        }
        // A terminal signals its foreground group only: once the command's group holds the
        // terminal, what is typed there reaches the command and not redlock-run. So a Ctrl-C
        // or Ctrl-\ that did reach redlock-run was typed before the hand-over, and is heard
        // only now: the command never got it, and it is forwarded (it used to be dropped
        // here, and the Ctrl-C lost). A hangup is the exception: it signals the session's
        // leader as well as the foreground group.
        if from_terminal && signal == libc::SIGHUP && self.child.has_terminal() {
            report::verbose(format_args!(
                "{} came from the terminal, which delivered it to the command already",
                signals::name(signal)
            ));
        } else {
            report::verbose(format_args!(
                "forwarding {} to the command",
                signals::name(signal)
            ));
            told(signal, self.child.signal_group(signal));
            // A stopped command would keep a terminating signal pending for ever.
            if matches!(
                signal,
                libc::SIGINT | libc::SIGTERM | libc::SIGHUP | libc::SIGQUIT
            ) {
                let _ = self.child.signal_group(libc::SIGCONT);
            }
        }
    }

    /// `--stop-timeout`: the first terminating signal sets when the group is killed if it
    /// is still there; later ones do not move it. Not bounded by the lease's end as it is
    /// now: renewals go on meanwhile. If they fail, the lease's own timer ends the command
    /// by the lease's end (a lost lock), sooner than this.
    fn start_stop_budget(&mut self, signal: libc::c_int) {
        let Some(budget) = self.limits.stop_timeout else {
            return;
        };
        if self.stop.is_some()
            || self.killed_at.is_some()
            || !matches!(signal, libc::SIGTERM | libc::SIGINT | libc::SIGHUP)
        {
            return;
        }
        self.stop = Some((signal, Instant::now() + budget));
    }

    /// Kills the group once the `--stop-timeout` budget has run out.
    pub(super) fn stop_due(&mut self, now: Instant) {
        let Some((signal, _)) = self.stop.filter(|&(_, at)| now >= at) else {
            return;
        };
        if self.killed_at.is_some() {
            return;
        }
        if self.reaped.is_none() && self.child.has_exited() {
            // Its first process has ended and its exit is about to be heard: only then can
            // the group be told apart from that process's remains. Looked at again shortly.
            self.stop = Some((signal, now + LEFTOVER_POLL));
            return;
        }
        // Signal first: reporting could block on a full stderr pipe.
        let sent = self.child.signal_group(libc::SIGKILL);
        self.killed_at = Some(now);
        if self.ending == Ending::Exited {
            self.ending = Ending::Stopped { signal };
        }
        // Its exit status, unless a lost lock or --max-runtime decided it first.
        let exit_code = [("exit_code", u64::from(128 + signal.unsigned_abs()))];
        let fields: &[(&str, u64)] = match self.ending {
            Ending::Stopped { .. } => &exit_code,
            _ => &[],
        };
        report::say(
            report::Level::Warn,
            report::LogEvent::StopTimeout,
            fields,
            format_args!(
                "--stop-timeout of {} ran out after {}; killing the command's process group \
                 (SIGKILL) and releasing {}",
                report::duration(self.limits.stop_timeout.unwrap_or_default()),
                signals::name(signal),
                self.key
            ),
        );
        told(libc::SIGKILL, sent);
    }

    pub(super) fn stopped(&mut self, signal: libc::c_int) {
        if self.kill_at.is_some() {
            return;
        }
        if !self.child.lends_terminal() {
            if matches!(signal, libc::SIGTTIN | libc::SIGTTOU) {
                report::warn(format_args!(
                    "the command is stopped by {}: it tried to use a terminal that belongs \
                     to another process group; it keeps the lock until it is continued or \
                     ended (a signal to redlock-run ends it)",
                    signals::name(signal)
                ));
            }
            return;
        }
        self.child.stop_with_command();
        // Continued. While we were stopped nothing renewed the lease: resume the command
        // only if the lease still holds; the renewal thread, running again, renews at once.
        if Instant::now() >= self.lease.valid_until() {
            report::error_as(
                report::LogEvent::Lost,
                &anyhow::anyhow!(
                    "lock lost: {} expired while the command was stopped; killing it",
                    self.key
                ),
            );
            told(libc::SIGKILL, self.child.signal_group(libc::SIGKILL));
            self.kill_at = Some(Instant::now());
            self.killed_at = Some(Instant::now());
            self.ending = Ending::LockLost;
        } else {
            self.child.resume();
        }
    }
}
