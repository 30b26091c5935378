//! The one message type the reporting threads send to the loop that decides: the signal
//! thread, the child watcher, the renewal thread and the subscription to release notices.
//! Threads only report; `wait.rs` (while the lock is busy) and `supervise.rs` (while the
//! command runs) receive, in the order things happened, and act.

use std::time::{Duration, Instant};

use crate::backend::Notice;

/// What the reporting threads say.
pub enum Event {
    /// A signal arrived; `from_terminal` when the terminal driver generated it.
    Signal {
        signal: libc::c_int,
        from_terminal: bool,
    },
    /// The command's first process exited (not yet reaped), by `at` at the latest: when
    /// its watcher heard of it, which may be long after if this process was stopped.
    ChildExited { at: Instant },
    /// A child of this process changed state (SIGCHLD): an orphan of the command's that
    /// came back to this process may wait to be reaped.
    ChildrenChanged,
    /// The command's first process was stopped, by `signal` (Ctrl-Z: SIGTSTP).
    ChildStopped { signal: libc::c_int },
    /// A renewal succeeded: the lease now surely holds until `valid_until`.
    Renewed { valid_until: Instant },
    /// The renewal thread could not keep the lock.
    LockLost(Loss),
    /// A release notice (only while waiting for a busy lock).
    Notice(Notice),
    /// A `--replace` run asked to take over (with Redlock, on a majority of the nodes):
    /// `by` is its lock value, without a fence.
    ReplaceRequested { by: Vec<u8> },
}

/// Why the lock was lost.
#[derive(Debug, Clone)]
pub enum Loss {
    /// Redis answered: the key is gone or holds someone else's value.
    NotOurs,
    /// Redis did not confirm in time; the lease is running out.
    Unconfirmed { last_error: String },
    /// The lease's end passed `ago` before this process could act on it (it was stopped,
    /// or starved of CPU): someone else may have held the lock since.
    Expired { ago: Duration },
    /// The guardian killed the command at the lease's end as it knew it, while this
    /// process could not act.
    Guardian,
}
