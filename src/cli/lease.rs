//! The run's flags about time under the lock: the lease and its renewal, how long the lock
//! is kept or the command may run, how it is stopped, and whether a Redis that may evict
//! the lease is trusted. Checked in `config::lease`; the rules of time live in `lease`.

use clap::Args;

#[derive(Debug, Args)]
pub struct Lease {
    /// Lease length: 500ms, 30s, 5m; a bare number is seconds (at least 100ms)
    ///
    /// How long the lock outlives a holder that stops renewing it (killed, frozen, cut off
    /// from Redis): from 100ms to a year. The command receives it as REDLOCK_TTL_MS.
    #[arg(
        short,
        long,
        value_name = "DUR",
        env = "REDLOCK_TTL",
        default_value = "30s"
    )]
    pub ttl: String,

    /// How often the lease is renewed while the command runs, at least 10ms [default: TTL/3]
    ///
    /// A duration as for --ttl, at most half of what the lease surely lasts,
    /// (TTL - TTL/100 - 2ms) / 2, so that a failed renewal can be retried before the lease
    /// runs out; anything else exits 125 with the limit in the message.
    #[arg(long, value_name = "DUR")]
    pub renew_every: Option<String>,

    /// After the lock is lost: SIGTERM, then SIGKILL after DUR (sooner if the lease would
    /// expire on the server first)
    ///
    /// A duration as for --ttl, at most ten years. The same grace applies to processes the
    /// command left running in its process group when it exited, and to --max-runtime. A
    /// process still there 5s after its SIGKILL is stuck in the kernel; the lock is then
    /// released with a warning.
    #[arg(long, value_name = "DUR", default_value = "10s")]
    pub kill_after: String,

    /// Keep the lock until DUR after it was taken, even if the command ends sooner (so the
    /// same cron line on hosts with skewed clocks runs once)
    ///
    /// A duration as for --ttl, above zero and at most ten years. At release, if DUR has
    /// not passed since the lock was taken, the key is left to expire at that mark instead
    /// of being deleted, and nobody is woken before it. Renewal goes on as usual if the
    /// command outlives the mark.
    #[arg(long, value_name = "DUR")]
    pub min_hold: Option<String>,

    /// Terminate the command after DUR (SIGTERM, SIGKILL after --kill-after) and exit 124
    ///
    /// A duration as for --ttl, above zero and at most ten years, counted from the
    /// command's start. 124 is what timeout(1) reports; if the lock was lost first, the
    /// exit status is 76 instead.
    #[arg(long, value_name = "DUR")]
    pub max_runtime: Option<String>,

    /// After a SIGTERM, SIGINT or SIGHUP to redlock-run: SIGKILL the command's process group
    /// if it is still there DUR later, release the lock and exit 128+N
    ///
    /// A duration as for --ttl, at most ten years; 0 kills at once. The signal is passed on
    /// to the command as always; the budget counts from the first such signal while the
    /// command runs, so that a container or service stopped with a grace period (docker
    /// stop, Kubernetes, systemd's TimeoutStopSec) ends with the lock released rather than
    /// held until its TTL: give a DUR about 1s shorter than that grace. The exit status is
    /// 128+N for that signal N (143 for SIGTERM) once the SIGKILL was needed; a command that
    /// ends in time exits with its own status. The lease is renewed meanwhile, so DUR may be
    /// longer than --ttl; a lost lock (76) or --max-runtime (124) that ended the command
    /// first keeps its exit status. Without it, redlock-run waits for the command as long as
    /// it runs.
    #[arg(long, value_name = "DUR")]
    pub stop_timeout: Option<String>,

    /// Take the lock even on a Redis that may evict it (maxmemory set with a
    /// maxmemory-policy other than noeviction): Redis may then delete a held lock under
    /// memory pressure and let a second holder in. Without it, such a server is refused
    ///
    /// Before taking a lock, redlock-run reads INFO memory (CONFIG GET where INFO is refused)
    /// and exits 125 naming the policy; a server that will not say is refused too. Every
    /// node of a Redlock quorum is checked, the master found by Sentinel, the master of the
    /// lock's slot in a Cluster. REDLOCK_ALLOW_EVICTION takes true, yes, on, 1 (or false,
    /// no, off, 0).
    #[arg(
        long,
        env = "REDLOCK_ALLOW_EVICTION",
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::SetTrue,
    )]
    pub allow_eviction: bool,
}
