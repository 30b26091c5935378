//! The run's flags about waiting for a busy lock: how long, in which order, how many may
//! hold it at once, and the exit status when it is not obtained. Checked in
//! `config::waiting`.

use clap::Args;

#[derive(Debug, Args)]
pub struct Waiting {
    /// How long to wait for a busy lock: a duration, or 'forever' [default: forever]
    ///
    /// A duration as for --ttl, at most ten years. When it runs out, redlock-run exits 75
    /// (or -E's code) without running the command. A waiter is woken through pub/sub when
    /// a redlock-run holder releases, and polls a lock held by another client. --wait on
    /// the command line beats REDLOCK_WAIT; --wait and --no-wait both typed are refused.
    #[arg(short, long, value_name = "DUR", env = "REDLOCK_WAIT")]
    pub wait: Option<String>,

    /// Fail at once when the lock is busy (same as --wait 0)
    ///
    /// Exits 75 (or -E's code) and says who holds the lock: how a cron job skips a run
    /// while the previous one is still going. Beats REDLOCK_WAIT.
    #[arg(short = 'n', long)]
    pub no_wait: bool,

    /// Exit status when the lock was not obtained
    ///
    /// 0 to 255; 75 is EX_TEMPFAIL from sysexits.h, "try again later". It applies when the
    /// lock was busy with --no-wait, when --wait ran out, and when the lease ran out before
    /// the command could start. The command itself may exit 75 too: pick another code if 75
    /// must mean only "lock busy".
    #[arg(short = 'E', long, value_name = "N", default_value_t = 75)]
    pub conflict_exit_code: u8,

    /// Let up to N holders run at once (a semaphore); every user of the key must pass the
    /// same N
    ///
    /// Each holder takes the first free slot (the key itself, then {KEY}:slot:2 to
    /// {KEY}:slot:N) and renews and releases only its own. A run with another --limit on
    /// the same key is refused (exit 125) rather than admit more holders than one side
    /// expects. Refused with several servers (Redlock).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub limit: u32,

    /// Take the lock in the order the waiters arrived (first come, first served)
    ///
    /// Every waiter is queued in Redis; a --fair one goes ahead only when fewer live waiters
    /// are queued before it than there are free slots. A waiter that gives up leaves the
    /// queue. Waiters without --fair on the same key may overtake the queue, but never
    /// overlap with a holder. Refused with several servers (Redlock).
    #[arg(long)]
    pub fair: bool,
}
