//! The command line as clap sees it: raw strings and flags, no validation beyond syntax and
//! no I/O. `config.rs` turns this into a `Config` the rest of the program trusts. The `///`
//! comments are the `--help` text.

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// Text shown after the options in `--help`: the exit-code table README documents too.
pub const AFTER_HELP: &str = "\
Exit status:
  N        the command's own status; 128+S if it died from signal S
  75       lock not obtained: busy with --no-wait, --wait ran out, or the lease ran
           out before the command could start (see -E)
  76       the lock was lost while the command ran; the command was terminated (or
           had ended before the loss was seen, by the release)
  124      --max-runtime ran out; the command was terminated (76 if the lock was lost)
  125      redlock-run itself failed and the command never ran (usage, Redis, auth,
           an ACL permission, TLS, no process for the command)
  126      the command could not be executed
  127      the command was not found

The command receives REDLOCK_KEY (the full Redis key), REDLOCK_TOKEN (this holder's
token), REDLOCK_FENCE (a number that grows with every acquisition of this lock) and
REDLOCK_TTL_MS in its environment.

Subcommands take their options after their name: redlock-run status -r URL -k KEY.
To run a program named like a subcommand (status, list, release), put it after --.";

/// Run a command while holding a named lock in Redis.
///
/// The lock is taken with SET NX PX, renewed in the background while the command runs,
/// and released with an atomic compare-and-delete when it exits. Waiters are woken by
/// pub/sub the moment the holder releases.
#[derive(Debug, Parser)]
#[command(
    name = "redlock-run",
    version,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    override_usage = "redlock-run [OPTIONS] --key <KEY> -- <COMMAND> [ARGS]...\n       \
                      redlock-run [OPTIONS] --key <KEY> --shell <CMD>\n       \
                      redlock-run <status|list|release> [OPTIONS]"
)]
pub struct Cli {
    #[command(subcommand)]
    pub admin: Option<Admin>,

    #[command(flatten)]
    pub run: RunArgs,

    /// What redlock-run writes on stderr: lines of text, or one JSON object a line (time,
    /// level, event, key, fence, message) for log collectors
    #[arg(
        long,
        value_name = "FORMAT",
        env = "REDLOCK_LOG_FORMAT",
        default_value = "text",
        value_parser = ["text", "json"],
        global = true
    )]
    pub log_format: String,
}

/// Whether `args` (this process's command line) or the environment ask for JSON logs: for
/// a command line that clap refused, whose error must still be written in the format asked
/// for. Looks only for `--log-format json`, `--log-format=json` or `REDLOCK_LOG_FORMAT=json`.
pub fn json_logs_requested<I, T>(args: I) -> bool
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let mut typed = None;
    for (i, arg) in args.iter().enumerate() {
        if arg == "--" {
            break;
        }
        if arg == "--log-format" {
            typed = args.get(i + 1).map(|value| value == "json");
        } else if let Some(value) = arg.to_str().and_then(|a| a.strip_prefix("--log-format=")) {
            typed = Some(value == "json");
        }
    }
    typed.unwrap_or_else(|| std::env::var_os("REDLOCK_LOG_FORMAT").is_some_and(|v| v == "json"))
}

/// Where the locks live; shared by every form of the command.
#[derive(Debug, Args)]
pub struct Connection {
    /// Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db;
    /// redis+sentinel://HOST:PORT,…/MASTER for the master that Sentinels name;
    /// redis+cluster://HOST:PORT,… for a Redis Cluster. Repeat it (or comma-separate URLs
    /// in REDLOCK_REDIS) for a Redlock quorum over independent masters; 3 or 5 are usual
    #[arg(
        short,
        long,
        value_name = "URL",
        env = "REDLOCK_REDIS",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379",
        action = clap::ArgAction::Append
    )]
    pub redis: Vec<String>,

    /// Read the Redis password from the first line of FILE, for every URL that has none of
    /// its own (a password in a URL on the command line is visible to every local user in
    /// ps; REDLOCK_PASSWORD is the other way to keep it off the command line)
    #[arg(long, value_name = "FILE", env = "REDLOCK_PASSWORD_FILE")]
    pub password_file: Option<std::path::PathBuf>,

    /// Whether the URLs were typed on the command line (not taken from REDLOCK_REDIS or the
    /// default): set by `Cli::parse_from_args`.
    #[arg(skip)]
    pub typed: bool,

    /// Prefix of the Redis key; '' uses KEY as is
    #[arg(
        long,
        value_name = "P",
        env = "REDLOCK_PREFIX",
        default_value = "redlock:"
    )]
    pub prefix: std::ffi::OsString,

    /// Time limit for connecting to Redis and for each Redis command (taking the lock: up
    /// to twice this, as an attempt whose answer is lost is made once more)
    #[arg(
        long,
        value_name = "DUR",
        env = "REDLOCK_REDIS_TIMEOUT",
        default_value = "5s"
    )]
    pub redis_timeout: String,
}

/// Running a command under the lock (the form without a subcommand).
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Lock name; the Redis key is PREFIX + KEY (1 to 1024 bytes)
    #[arg(short, long, value_name = "KEY", required = true)]
    pub key: Option<std::ffi::OsString>,

    #[command(flatten)]
    pub connection: Connection,

    /// Lease length: 500ms, 30s, 5m; a bare number is seconds (at least 100ms)
    #[arg(
        short,
        long,
        value_name = "DUR",
        env = "REDLOCK_TTL",
        default_value = "30s"
    )]
    pub ttl: String,

    /// How often the lease is renewed while the command runs, at least 10ms [default: TTL/3]
    #[arg(long, value_name = "DUR")]
    pub renew_every: Option<String>,

    /// How long to wait for a busy lock: a duration, or 'forever' [default: forever]
    #[arg(short, long, value_name = "DUR", env = "REDLOCK_WAIT")]
    pub wait: Option<String>,

    /// Fail at once when the lock is busy (same as --wait 0)
    #[arg(short = 'n', long)]
    pub no_wait: bool,

    /// Exit status when the lock was not obtained
    #[arg(short = 'E', long, value_name = "N", default_value_t = 75)]
    pub conflict_exit_code: u8,

    /// After the lock is lost: SIGTERM, then SIGKILL after DUR (sooner if the lease would
    /// expire on the server first)
    #[arg(long, value_name = "DUR", default_value = "10s")]
    pub kill_after: String,

    /// Let up to N holders run at once (a semaphore); every user of the key must pass the
    /// same N
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub limit: u32,

    /// Take the lock in the order the waiters arrived (first come, first served)
    #[arg(long)]
    pub fair: bool,

    /// Keep the lock until DUR after it was taken, even if the command ends sooner (so the
    /// same cron line on hosts with skewed clocks runs once)
    #[arg(long, value_name = "DUR")]
    pub min_hold: Option<String>,

    /// Terminate the command after DUR (SIGTERM, SIGKILL after --kill-after) and exit 124
    #[arg(long, value_name = "DUR")]
    pub max_runtime: Option<String>,

    /// What waiters and `status` show of this holder besides its host, pid and program's
    /// name (a pipeline URL, "deploy of v1.2 by alice"); at most 256 bytes. The command's
    /// arguments are never shown to others
    #[arg(long, value_name = "TEXT", env = "REDLOCK_LABEL")]
    pub label: Option<String>,

    /// Take the lock even on a Redis that may evict it (maxmemory set with a
    /// maxmemory-policy other than noeviction): Redis may then delete a held lock under
    /// memory pressure and let a second holder in. Without it, such a server is refused
    #[arg(
        long,
        env = "REDLOCK_ALLOW_EVICTION",
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::SetTrue
    )]
    pub allow_eviction: bool,

    /// Leave REDLOCK_REDIS and REDLOCK_PASSWORD in the command's environment; by default
    /// they are removed from it when they hold a password
    #[arg(long)]
    pub pass_redis_env: bool,

    /// Run CMD with /bin/sh -c instead of -- COMMAND ARGS
    #[arg(short = 'c', long, value_name = "CMD", conflicts_with = "command")]
    pub shell: Option<String>,

    /// Print only errors on stderr
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Print each step (connect, acquire, renew, release) on stderr
    #[arg(short, long)]
    pub verbose: bool,

    /// The command to run and its arguments (after --)
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<std::ffi::OsString>,
}

impl Cli {
    /// The command line of this process. A flag always beats the environment: `--no-wait`
    /// overrides a `REDLOCK_WAIT` default, while `--wait` and `--no-wait` both typed on
    /// the command line contradict each other.
    pub fn parse_args() -> Result<Cli, clap::Error> {
        Cli::parse_from_args(std::env::args_os())
    }

    pub fn parse_from_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = Cli::command().try_get_matches_from(args)?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        let (connection, used) = match &mut cli.admin {
            Some(Admin::Status { connection, .. })
            | Some(Admin::List { connection, .. })
            | Some(Admin::Release { connection, .. }) => {
                let used = matches.subcommand().map_or(&matches, |(_, used)| used);
                (connection, used)
            }
            None => (&mut cli.run.connection, &matches),
        };
        connection.typed = used.value_source("redis") == Some(ValueSource::CommandLine);
        if cli.run.no_wait {
            match matches.value_source("wait") {
                Some(ValueSource::CommandLine) => {
                    return Err(Cli::command().error(
                        ErrorKind::ArgumentConflict,
                        "the argument '--no-wait' cannot be used with '--wait <DUR>'",
                    ))
                }
                _ => cli.run.wait = None,
            }
        }
        Ok(cli)
    }
}

/// Looking at and clearing locks.
#[derive(Debug, Subcommand)]
pub enum Admin {
    /// Show who holds a lock; exit 0 when held, 1 when free, 125 on error
    Status {
        /// Lock name
        #[arg(short, long, value_name = "KEY")]
        key: std::ffi::OsString,

        /// Print one JSON object instead of a line
        #[arg(long)]
        json: bool,

        #[command(flatten)]
        connection: Connection,
    },
    /// List every lock under the prefix (SCAN, never KEYS), one line each
    List {
        /// Print a JSON array instead of lines
        #[arg(long)]
        json: bool,

        #[command(flatten)]
        connection: Connection,
    },
    /// Remove a stuck lock, saying whose it was; its holder's command is then terminated
    /// at the holder's next renewal
    Release {
        /// Lock name
        #[arg(short, long, value_name = "KEY")]
        key: std::ffi::OsString,

        /// Required: releasing someone else's lock lets a second holder in
        #[arg(long)]
        force: bool,

        #[command(flatten)]
        connection: Connection,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_duration, Config, Task, Wait};
    use crate::lease;
    use proptest::prelude::*;
    use std::time::Duration;

    /// Options, values of each kind, and stray text, as a command line may hold them.
    fn argument() -> impl Strategy<Value = String> {
        const OPTIONS: [&str; 29] = [
            "-k",
            "--key",
            "-r",
            "--redis",
            "-t",
            "--ttl",
            "--renew-every",
            "-w",
            "--wait",
            "-n",
            "-E",
            "--kill-after",
            "--limit",
            "--fair",
            "--min-hold",
            "--max-runtime",
            "--label",
            "-c",
            "-q",
            "-v",
            "--",
            "status",
            "list",
            "release",
            "--json",
            "--force",
            "--prefix",
            "--redis-timeout",
            "--pass-redis-env",
        ];
        prop_oneof![
            prop::sample::select(&OPTIONS[..]).prop_map(String::from),
            "[0-9]{1,4}(ms|s|m|h)?",
            "redis(s)?(\\+sentinel|\\+cluster|\\+unix)?://[a-z0-9:@/,?=&.]{0,16}",
            "\\PC{0,12}",
        ]
    }

    /// A duration as someone may write one, or not quite.
    fn duration() -> impl Strategy<Value = String> {
        prop_oneof![
            "[0-9]{1,3}(ms|s|m|h)?",
            "[0-9]{1,25}(\\.[0-9]{0,3})?(ns|us|ms|s|m|h|d|w|y)?",
            "-?[0-9.e+]{1,8}|inf|NaN|forever|[0-9]+ ?(s|m) [0-9]+(s|ms)",
            "\\PC{0,8}",
        ]
    }

    fn parse(args: &[String]) -> Option<Config> {
        let argv = std::iter::once("redlock-run").chain(args.iter().map(String::as_str));
        match Task::from_cli(Cli::parse_from_args(argv).ok()?).ok()? {
            Task::Run(config) => Some(config),
            Task::Admin(_) => None,
        }
    }

    fn assert_within_limits(config: &Config) {
        let timing = config.timing;
        assert!((lease::MIN_TTL..=lease::MAX_TTL).contains(&timing.ttl));
        assert!(timing.renew_every >= lease::MIN_RENEWAL_PERIOD);
        assert!(timing.renew_every <= lease::max_renewal_period(timing.ttl));
        assert!(timing.kill_after <= lease::MAX_DURATION);
        let redis_timeout = lease::MIN_REDIS_TIMEOUT..=lease::MAX_REDIS_TIMEOUT;
        assert!(redis_timeout.contains(&config.redis_timeout));
        if let Wait::For(wait) = config.wait {
            assert!(wait <= lease::MAX_DURATION);
        }
        for bound in [config.min_hold, config.max_runtime].into_iter().flatten() {
            assert!(!bound.is_zero() && bound <= lease::MAX_DURATION);
        }
        // The lease's arithmetic stays in range.
        let now = std::time::Instant::now();
        let lease = timing.lease_from(now);
        assert!(lease.renewal_due() < lease.valid_until());
        assert!(lease.give_up_at() <= lease.valid_until());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_command_line_is_parsed_or_refused(args in prop::collection::vec(argument(), 0..10)) {
            if let Some(config) = parse(&args) {
                assert_within_limits(&config);
            }
        }

        #[test]
        fn any_duration_is_parsed_or_refused(text in duration()) {
            if let Ok(duration) = parse_duration(&text) {
                prop_assert!(duration < Duration::MAX);
            }
        }

        /// Every duration option keeps what it accepts within its limits.
        #[test]
        fn accepted_durations_are_within_their_limits(values in prop::collection::vec(duration(), 7)) {
            let flags = [
                "--ttl", "--renew-every", "--wait", "--kill-after", "--min-hold", "--max-runtime",
                "--redis-timeout",
            ];
            let mut args: Vec<String> = vec!["-k".into(), "job".into()];
            for (flag, value) in flags.iter().zip(&values) {
                args.push(format!("{flag}={value}"));
            }
            args.extend(["--".into(), "true".into()]);
            if let Some(config) = parse(&args) {
                assert_within_limits(&config);
            }
        }
    }
}
