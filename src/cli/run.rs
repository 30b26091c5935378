//! Running a command under the lock (the form without a subcommand): the lock's name, the
//! command and what it receives, and the groups of the run's own options, one file each (a
//! flag goes with what it changes). `ORDER` keeps their place in --help and the completions.

use clap::{ArgMatches, Args, Command, FromArgMatches};

use super::connection::Connection;
use super::lease::Lease;
use super::observability::Observability;
use super::output::Output;
use super::policies::Policies;
use super::waiting::Waiting;

/// Running a command under the lock (the form without a subcommand).
#[derive(Debug)]
pub struct RunArgs {
    pub job: Job,
    pub connection: Connection,
    pub waiting: Waiting,
    pub lease: Lease,
    pub policies: Policies,
    pub observability: Observability,
    pub output: Output,
}

/// What runs under which lock: the lock's name, the command, and what the command receives.
#[derive(Debug, Args)]
pub struct Job {
    /// Lock name; the Redis key is PREFIX + KEY (1 to 1024 bytes)
    ///
    /// Any bytes make a name. Every process that runs with the same KEY, the same --prefix
    /// and the same Redis excludes the others. A redlock-run started by the command for the
    /// same key on the same Redis exits 125 at once, naming the outer run, since it would
    /// wait for its own parent for ever.
    ///
    /// Given several times, the run holds every one of them while its command runs (taken
    /// in one fixed order, all or none), or with --any the first free one among them. The
    /// command gets each in REDLOCK_KEYS and REDLOCK_FENCES, one a line (a name with a line
    /// feed is refused then). See docs/resources.md.
    #[arg(short, long, value_name = "KEY", required = true, action = clap::ArgAction::Append)]
    pub key: Vec<std::ffi::OsString>,

    /// With several -k: take the first free lock among them, in the order given (a pool)
    ///
    /// The command runs while holding that one; REDLOCK_KEY is its Redis key and
    /// REDLOCK_NAME its name as given to -k. Waiting, a release of any of them wakes the
    /// run; with --no-wait and every one busy it exits 75, naming each one's holder.
    #[arg(long)]
    pub any: bool,

    /// Take the lock in shared mode: any number of shared holders hold KEY together
    ///
    /// An exclusive holder (the default, -x) excludes every other holder, shared or
    /// exclusive. Once an exclusive run waits, new shared runs wait behind it (with --no-wait
    /// they exit 75, naming it), so a writer is never starved; its release wakes every shared
    /// waiter at once. Each shared holder has its own token, fence and lease, and loses only
    /// its own share. The command gets REDLOCK_MODE=shared (else exclusive). Not with --limit
    /// above 1, several -k, several --redis, --replace, --supersede, --fair, --once-per or
    /// --dry-run. See docs/resources.md.
    #[arg(short = 's', long)]
    pub shared: bool,

    /// Take the lock in exclusive mode: the default, for scripts that spell it out
    ///
    /// The holder excludes every other holder, shared (--shared) or exclusive, as flock -x
    /// does. The command gets REDLOCK_MODE=exclusive. Refused together with --shared.
    #[arg(short = 'x', long)]
    pub exclusive: bool,

    /// Leave REDLOCK_REDIS and REDLOCK_PASSWORD in the command's environment; by default
    /// they are removed from it when they hold a password
    ///
    /// For a command that runs redlock-run itself (a nested lock on another key), or that
    /// needs the same Redis. Variables without a password are always left.
    #[arg(long)]
    pub pass_redis_env: bool,

    /// Run CMD with /bin/sh -c instead of -- COMMAND ARGS
    ///
    /// For a pipeline or a redirection: --shell 'a | b > out'. The shell and everything it
    /// starts run in the command's process group, so all of it is signalled together.
    /// Cannot be combined with -- COMMAND.
    #[arg(short = 'c', long, value_name = "CMD", conflicts_with = "command")]
    pub shell: Option<String>,

    /// The command to run and its arguments (after --)
    ///
    /// Run directly, not through a shell, in a process group of its own; it receives
    /// REDLOCK_KEY, REDLOCK_NAME, REDLOCK_TOKEN, REDLOCK_FENCE, REDLOCK_SLOT, REDLOCK_MODE
    /// and REDLOCK_TTL_MS (with several -k, REDLOCK_KEYS and REDLOCK_FENCES too). Put it after -- so that
    /// its own options are not read as redlock-run's, and to run a program named like a
    /// subcommand (status, list, release, history, metrics, check, serve).
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// The run's options in the order `--help`, the man page and the shells' completions list
/// them: clap lists options in the order they were added, and a group flattened as a whole
/// would move its options together.
const ORDER: [&str; 35] = [
    "key",
    "any",
    "shared",
    "exclusive",
    "redis",
    "password_file",
    "prefix",
    "redis_timeout",
    "ttl",
    "renew_every",
    "wait",
    "no_wait",
    "conflict_exit_code",
    "kill_after",
    "limit",
    "history",
    "fair",
    "supersede",
    "replace",
    "min_hold",
    "once",
    "once_per",
    "remember",
    "max_runtime",
    "stop_timeout",
    "label",
    "allow_eviction",
    "ping",
    "max_skips",
    "dry_run",
    "pass_redis_env",
    "shell",
    "quiet",
    "verbose",
    "command",
];

/// Each part's options on a command of its own, as its derive adds them (`update`: as
/// `augment_args_for_update` adds them).
fn parts(update: bool) -> [Command; 7] {
    fn part<T: Args>(update: bool) -> Command {
        let own = Command::new("part");
        if update {
            T::augment_args_for_update(own)
        } else {
            T::augment_args(own)
        }
    }
    [
        part::<Job>(update),
        part::<Connection>(update),
        part::<Waiting>(update),
        part::<Lease>(update),
        part::<Policies>(update),
        part::<Observability>(update),
        part::<Output>(update),
    ]
}

/// `command` with the parts' options added in `ORDER` (one that `ORDER` does not name, last)
/// and the parts' groups.
fn in_order(mut command: Command, parts: [Command; 7]) -> Command {
    let mut args: Vec<clap::Arg> = parts
        .iter()
        .flat_map(Command::get_arguments)
        .cloned()
        .collect();
    args.sort_by_key(|arg| {
        ORDER
            .iter()
            .position(|id| arg.get_id() == id)
            .unwrap_or(ORDER.len())
    });
    for arg in args {
        // Numbered by its part's command: here it takes its place among all the options.
        command = command.arg(arg.display_order(None));
    }
    for group in parts.iter().flat_map(Command::get_groups) {
        command = command.group(group.clone());
    }
    command
}

impl Args for RunArgs {
    fn augment_args(command: Command) -> Command {
        in_order(command, parts(false))
    }

    fn augment_args_for_update(command: Command) -> Command {
        in_order(command, parts(true))
    }
}

impl FromArgMatches for RunArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<RunArgs, clap::Error> {
        Ok(RunArgs {
            job: Job::from_arg_matches(matches)?,
            connection: Connection::from_arg_matches(matches)?,
            waiting: Waiting::from_arg_matches(matches)?,
            lease: Lease::from_arg_matches(matches)?,
            policies: Policies::from_arg_matches(matches)?,
            observability: Observability::from_arg_matches(matches)?,
            output: Output::from_arg_matches(matches)?,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.job.update_from_arg_matches(matches)?;
        self.connection.update_from_arg_matches(matches)?;
        self.waiting.update_from_arg_matches(matches)?;
        self.lease.update_from_arg_matches(matches)?;
        self.policies.update_from_arg_matches(matches)?;
        self.observability.update_from_arg_matches(matches)?;
        self.output.update_from_arg_matches(matches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ORDER` names every option of the run once, and nothing else.
    #[test]
    fn order_names_every_option_once() {
        let mut ids: Vec<String> = parts(false)
            .iter()
            .flat_map(Command::get_arguments)
            .map(|arg| arg.get_id().to_string())
            .collect();
        ids.sort();
        let mut named: Vec<String> = ORDER.iter().map(ToString::to_string).collect();
        named.sort();
        assert_eq!(ids, named);
    }
}
