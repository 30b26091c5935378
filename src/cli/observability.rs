//! The run's flags about what others see of it: the events kept in Redis, the label shown
//! to waiters and `status`, the dead-man ping and its alarm on skipped runs. What it writes
//! on stderr is `output`'s. Checked in `config::observability`.

use clap::Args;

#[derive(Debug, Args)]
pub struct Observability {
    /// Keep the last N events of the lock in Redis, with its counters; 0 records nothing
    ///
    /// Each run appends its events (acquired, released, busy, timeout, lost, expired, ...)
    /// to the stream {KEY}:history, capped at N entries, and counts them in the hash
    /// {KEY}:stats, inside the scripts it runs anyway: no extra round trip. Nothing secret
    /// goes there: the host, pid, program name and label that `status` shows. Memory, per
    /// lock: about 42 kB for the default 100 events (0.4 kB an event) and 0.6 kB for the
    /// counters (MEMORY USAGE on Redis 7.0). 0 writes neither key. At most 1000000.
    #[arg(
        long,
        value_name = "N",
        env = "REDLOCK_HISTORY",
        default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(0..=1_000_000),
    )]
    pub history: u32,

    /// What waiters and `status` show of this holder besides its host, pid and program's
    /// name (a pipeline URL, "deploy of v1.2 by alice"); at most 256 bytes. The command's
    /// arguments are never shown to others
    ///
    /// Stored in the lock's value beside the holder's host, pid and program name, and
    /// printed with control and invisible characters escaped. It must not hold secrets:
    /// anyone who can read the key can read it.
    #[arg(long, value_name = "TEXT", env = "REDLOCK_LABEL")]
    pub label: Option<String>,

    /// Dead-man pings (Healthchecks.io style): GET URL/start when the command starts, URL
    /// when it exits 0, URL/N when it fails with status N, URL/fail when the lock was lost
    /// or the command could not be run
    ///
    /// Only http:// and https:// (the system's root certificates). A skipped run (busy,
    /// --wait ran out, superseded) pings nothing, except with --max-skips; so does one that
    /// finds the work already done (--once, --once-per), which is not a skip.
    /// "Could not be run" is any exit 125, 126 or 127 of redlock-run (Redis unreachable,
    /// refused, the command not found or not executable), and a lease that ran out before
    /// the command could start. A --replace takeover (77) and a signal before the command
    /// started ping nothing; a command ended by a signal or --max-runtime pings URL/N. The
    /// end ping is sent after the lock is released, within 5s (2s an attempt, one retry);
    /// a ping never changes the exit status, and all the failed pings of a run make one
    /// warning. The URL holds the check's key: it is never printed or logged, hidden from
    /// ps when typed, and REDLOCK_PING is removed from the command's environment.
    #[arg(long, value_name = "URL", env = "REDLOCK_PING", hide_env_values = true)]
    pub ping: Option<String>,

    /// Whether --ping was typed on the command line (not taken from REDLOCK_PING): set by
    /// `Cli::parse_from_args`.
    #[arg(skip)]
    pub ping_typed: bool,

    /// With --ping: the N-th consecutive run that skipped its command (busy, --wait ran out,
    /// superseded), and every one after it, pings URL/fail
    ///
    /// The POST body names the holder (host, pid, program, label, held since) and the count.
    /// The count is kept in Redis per key and reset by a successful run; a failed run leaves
    /// it. From 1 to 1000000; refused without --ping.
    #[arg(long, value_name = "N")]
    pub max_skips: Option<u64>,
}
