//! The run's flags about what it writes on stderr and whether it acts at all (`--dry-run`
//! says what would happen instead). The log format is every form's, in `Cli`.

use clap::Args;

#[derive(Debug, Args)]
pub struct Output {
    /// Connect, run every check a real run makes and read the lock's state, then say what
    /// would happen; write nothing to Redis and run nothing
    ///
    /// Checks the credentials, the server's role, the eviction policy (as without
    /// --allow-eviction, unless given), the user's ACL permissions for every command a run
    /// sends (on Redis 7 and later, by redis.acl_check_cmd in a read-only script; Redis 6.2
    /// cannot be asked without writing, and the output says they were not checked), the
    /// --once/--once-per record, the nested-run rule, and with several URLs every node.
    /// Exit 0 if the command would run now, 75 (or -E's code) if the lock is busy (with
    /// --wait too: it would wait), 0 if --once found the work already done, 125 if a check
    /// fails. Sends no ping.
    #[arg(long)]
    pub dry_run: bool,

    /// Print only errors on stderr
    ///
    /// Hides the info and warning lines (a busy lock, the holder a waiter waits for);
    /// errors are always printed, and the exit status still tells what happened. Cannot be
    /// combined with --verbose.
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Print each step (connect, acquire, renew, release) on stderr
    ///
    /// And one summary line at the end: `finished: waited 1ms, held 3m 12s, renewed 19
    /// times, exit 0`. A waiter with -v names the holder it waits for, as one whose stderr
    /// is a terminal does after a second.
    #[arg(short, long)]
    pub verbose: bool,
}
