//! The run's flags that decide whether its command runs at all: giving way to a newer run,
//! taking over from the holder, work already done. Checked in `config::policies`.

use clap::Args;

#[derive(Debug, Args)]
pub struct Policies {
    /// While waiting, give way to a newer --supersede run of the same lock: exit 77
    ///
    /// A waiting run with --supersede exits 77 without running its command as soon as a
    /// newer run with --supersede starts waiting for the same key (newer: later to arrive
    /// at the Redis server, whatever the hosts' clocks), within a second of its arrival,
    /// and says which run (host, pid, label) took its place. The holder is never
    /// superseded, and waiters without --supersede are never dropped and drop no one: one
    /// key can serve deploys that coalesce and migrations that queue. With --fair the
    /// others keep their order; with --limit N the newest superseding waiter of the key
    /// survives. With several servers (Redlock) a majority of them decides. Refused with
    /// --no-wait and with --replace.
    #[arg(long)]
    pub supersede: bool,

    /// Take over from the current holder: ask it to stop, and be served next
    ///
    /// The holder's redlock-run (on any host) gets the request within a second: it sends
    /// its command SIGTERM (SIGKILL after its own --kill-after), releases the lock and exits
    /// 77. This run is served before every other waiter, and then runs its command as usual.
    /// Its command never starts before the old one has exited, or, when the holder cannot
    /// act (its host gone, stopped, a foreign client), before the old lease has run out.
    /// --wait bounds the whole takeover (then 75). With --once or --once-per, a run whose
    /// work is already done exits 0 and replaces nobody. Refused with --no-wait, with a
    /// --limit above 1 and with --supersede.
    #[arg(long)]
    pub replace: bool,

    /// Run the command only if no run of KEY with this ID has succeeded yet (within
    /// --remember); otherwise exit 0 without running it
    ///
    /// A run whose command exits 0 records "done ID" for the key in the same step as its
    /// release. A later run of the key with the same ID that finds the record, when it
    /// arrives or when its turn comes after a wait, does not run its command: it prints
    /// when and by which host and label the work was done, and exits 0. A run that fails
    /// (non-zero exit, signal, lost lock, --max-runtime) records nothing, so the next one
    /// runs the command again. Runs with another ID, or without --once, are not affected.
    /// ID: 1 to 256 bytes of UTF-8 text (a release, a commit, a date). Refused with
    /// --limit above 1. With several servers (Redlock), a majority of them decides.
    #[arg(long, value_name = "ID")]
    pub once: Option<std::ffi::OsString>,

    /// Run the command only if no run of KEY with --once-per succeeded whose arrival lies
    /// within DUR/2 of this one's, by the Redis server's clock; otherwise exit 0 without
    /// running it
    ///
    /// Each run is stamped with the Redis server's clock when it first reaches it, never
    /// this host's, so the same crontab line on hosts whose clocks differ by less than DUR/2
    /// runs once per firing, and the next firing, DUR later, runs again. DUR: a duration as
    /// for --ttl, at least 1s, at most ten years (usually the schedule's period). Refused
    /// with --limit above 1. With several servers (Redlock), each judges by its own clock
    /// and a majority decides.
    #[arg(long, value_name = "DUR")]
    pub once_per: Option<String>,

    /// How long the record of a --once or --once-per run lasts [default: 7d]
    ///
    /// A duration as for --ttl, above zero and at most ten years. A --once ID recorded
    /// longer ago than DUR counts as not done. Refused without --once or --once-per.
    #[arg(long, value_name = "DUR")]
    pub remember: Option<String>,
}
