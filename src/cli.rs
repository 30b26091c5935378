//! The command line as clap sees it: raw strings and flags, no validation beyond syntax and
//! no I/O. `config.rs` turns this into a `Config` the rest of the program trusts. The `///`
//! comments are the `--help` text.

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// Text shown after the options in `--help`: the exit-code table README documents too.
pub const AFTER_HELP: &str = "\
Exit status:
  N        the command's own status; 128+S if it died from signal S, or if
           redlock-run got signal S and --stop-timeout ran out (the command's
           group was killed)
  0        also: --once or --once-per found the work already done; the command did
           not run
  75       lock not obtained: busy with --no-wait, --wait ran out, or the lease ran
           out before the command could start (see -E)
  76       the lock was lost while the command ran; the command was terminated (or
           had ended before the loss was seen, by the release)
  77       superseded or replaced: a newer --supersede run started waiting for
           the lock (the command never ran), or a --replace run took over (the
           command was terminated and the lock handed on)
  124      --max-runtime ran out; the command was terminated (76 if the lock was lost)
  125      redlock-run itself failed and the command never ran (usage, Redis, auth,
           an ACL permission, TLS, no process for the command)
  126      the command could not be executed
  127      the command was not found

The command receives REDLOCK_KEY (the full Redis key), REDLOCK_TOKEN (this holder's
token), REDLOCK_FENCE (a number that grows with every acquisition of this lock) and
REDLOCK_TTL_MS in its environment.

Subcommands take their options after their name: redlock-run status -r URL -k KEY.
To run a program named like a subcommand (status, list, release, history, metrics,
check), put it after --. `check` exits as a monitoring plugin does: 0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN (see redlock-run check --help).";

/// Run a command while holding a named lock in Redis.
///
/// The lock is taken with SET NX PX, renewed in the background while the command runs,
/// and released with an atomic compare-and-delete when it exits. A waiter is woken through
/// pub/sub the moment a redlock-run holder releases; a lock held by another client (a
/// value redlock-run did not write) announces nothing, so a waiter polls it instead.
#[derive(Debug, Parser)]
#[command(
    name = "redlock-run",
    version,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    override_usage = "redlock-run [OPTIONS] --key <KEY> -- <COMMAND> [ARGS]...\n       \
                      redlock-run [OPTIONS] --key <KEY> --shell <CMD>\n       \
                      redlock-run <status|list|release|history|metrics|check> [OPTIONS]"
)]
pub struct Cli {
    #[command(subcommand)]
    pub admin: Option<Admin>,

    #[command(flatten)]
    pub run: RunArgs,

    /// What redlock-run writes on stderr: lines of text, or one JSON object a line (time,
    /// level, event, key, fence, message) for log collectors
    ///
    /// text (the default): `redlock-run: <message>`, one line per message. json: one JSON
    /// object a line with the fields time (RFC 3339, UTC, milliseconds), level (error,
    /// warn, info, debug), event (acquired, started, renewed, released, summary, busy,
    /// wait_timeout, superseded, not_started, already_done, waiting, lost, max_runtime,
    /// replaced, stop_timeout, usage, error, warning, internal_error, step), key and fence
    /// once known, exit_code,
    /// waited_ms, held_ms and renewals where they apply, and message, the text line without
    /// its prefix. Both are redacted and escaped alike: no password, and control characters
    /// from outside only as \n, \x1b, …. A command line that cannot be parsed is reported
    /// in JSON when --log-format json or REDLOCK_LOG_FORMAT=json can be read from it. stdout
    /// stays the command's.
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
    ///
    /// A URL's password is redacted wherever it is printed. Typed on the command line, it is
    /// visible to every local user in ps (redlock-run warns): prefer REDLOCK_REDIS,
    /// REDLOCK_PASSWORD or --password-file. With several URLs the lock is held while a
    /// majority of the masters holds it; Sentinel and Cluster URLs cannot be mixed with
    /// others. A flag on the command line beats REDLOCK_REDIS.
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
    ///
    /// REDLOCK_PASSWORD (not a flag) holds the password itself, for every URL that has none
    /// of its own. Neither is passed to the command; REDLOCK_REDIS and REDLOCK_PASSWORD are
    /// removed from the command's environment when they hold a password (see
    /// --pass-redis-env).
    #[arg(long, value_name = "FILE", env = "REDLOCK_PASSWORD_FILE")]
    pub password_file: Option<std::path::PathBuf>,

    /// Whether the URLs were typed on the command line (not taken from REDLOCK_REDIS or the
    /// default): set by `Cli::parse_from_args`.
    #[arg(skip)]
    pub typed: bool,

    /// Prefix of the Redis key; '' uses KEY as is
    ///
    /// The lock's Redis key is PREFIX + KEY, given to the command as REDLOCK_KEY. Every user
    /// of a lock must use the same prefix; `list` shows the locks under it.
    #[arg(
        long,
        value_name = "P",
        env = "REDLOCK_PREFIX",
        default_value = "redlock:"
    )]
    pub prefix: std::ffi::OsString,

    /// Time limit for connecting to Redis and for each Redis command (taking the lock: up
    /// to twice this, as an attempt whose answer is lost is made once more)
    ///
    /// From 10ms to an hour; a bare number is seconds. A connection that timed out is
    /// dropped, never reused. A renewal that times out is retried while the lease surely
    /// lasts. An attempt to take the lock that got no answer is made once more on a new
    /// connection (only that tells whether it took the lock), even past a --wait deadline:
    /// against a server that stops answering, taking the lock gives up after twice this,
    /// and a wait ends up to this much past its deadline.
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

    #[command(flatten)]
    pub connection: Connection,

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

    /// After the lock is lost: SIGTERM, then SIGKILL after DUR (sooner if the lease would
    /// expire on the server first)
    ///
    /// A duration as for --ttl, at most ten years. The same grace applies to processes the
    /// command left running in its process group when it exited, and to --max-runtime. A
    /// process still there 5s after its SIGKILL is stuck in the kernel; the lock is then
    /// released with a warning.
    #[arg(long, value_name = "DUR", default_value = "10s")]
    pub kill_after: String,

    /// Let up to N holders run at once (a semaphore); every user of the key must pass the
    /// same N
    ///
    /// Each holder takes the first free slot (the key itself, then {KEY}:slot:2 to
    /// {KEY}:slot:N) and renews and releases only its own. A run with another --limit on
    /// the same key is refused (exit 125) rather than admit more holders than one side
    /// expects. Refused with several servers (Redlock).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub limit: u32,

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
        value_parser = clap::value_parser!(u32).range(0..=1_000_000)
    )]
    pub history: u32,

    /// Take the lock in the order the waiters arrived (first come, first served)
    ///
    /// Every waiter is queued in Redis; a --fair one goes ahead only when fewer live waiters
    /// are queued before it than there are free slots. A waiter that gives up leaves the
    /// queue. Waiters without --fair on the same key may overtake the queue, but never
    /// overlap with a holder. Refused with several servers (Redlock).
    #[arg(long)]
    pub fair: bool,

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

    /// Keep the lock until DUR after it was taken, even if the command ends sooner (so the
    /// same cron line on hosts with skewed clocks runs once)
    ///
    /// A duration as for --ttl, above zero and at most ten years. At release, if DUR has
    /// not passed since the lock was taken, the key is left to expire at that mark instead
    /// of being deleted, and nobody is woken before it. Renewal goes on as usual if the
    /// command outlives the mark.
    #[arg(long, value_name = "DUR")]
    pub min_hold: Option<String>,

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

    /// What waiters and `status` show of this holder besides its host, pid and program's
    /// name (a pipeline URL, "deploy of v1.2 by alice"); at most 256 bytes. The command's
    /// arguments are never shown to others
    ///
    /// Stored in the lock's value beside the holder's host, pid and program name, and
    /// printed with control and invisible characters escaped. It must not hold secrets:
    /// anyone who can read the key can read it.
    #[arg(long, value_name = "TEXT", env = "REDLOCK_LABEL")]
    pub label: Option<String>,

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
        action = clap::ArgAction::SetTrue
    )]
    pub allow_eviction: bool,

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

    /// The command to run and its arguments (after --)
    ///
    /// Run directly, not through a shell, in a process group of its own; it receives
    /// REDLOCK_KEY, REDLOCK_TOKEN, REDLOCK_FENCE and REDLOCK_TTL_MS. Put it after -- so that
    /// its own options are not read as redlock-run's, and to run a program named like a
    /// subcommand (status, list, release, history, metrics, check).
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
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let matches = Cli::command()
            .try_get_matches_from(&args)
            .map_err(|err| misspelt_subcommand(&args).unwrap_or(err))?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        if cli.admin.is_none() {
            stray_words_before_separator(&args, &cli.run.command)?;
        }
        let (connection, used) = match &mut cli.admin {
            Some(Admin::Status { connection, .. })
            | Some(Admin::List { connection, .. })
            | Some(Admin::Release { connection, .. })
            | Some(Admin::History { connection, .. })
            | Some(Admin::Metrics { connection, .. })
            | Some(Admin::Check { connection, .. }) => {
                let used = matches.subcommand().map_or(&matches, |(_, used)| used);
                (connection, used)
            }
            None => (&mut cli.run.connection, &matches),
        };
        connection.typed = used.value_source("redis") == Some(ValueSource::CommandLine);
        cli.run.ping_typed = matches.value_source("ping") == Some(ValueSource::CommandLine);
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

/// A word typed before `--` that clap took as the command's start (`--wait 5 minutes -- job`
/// would run `minutes`): with `--` on the line, the command is what follows it, and a word
/// before it is a mistake, most often a value that needed quotes.
fn stray_words_before_separator(
    args: &[std::ffi::OsString],
    command: &[std::ffi::OsString],
) -> Result<(), clap::Error> {
    let Some(separator) = args.iter().skip(1).position(|arg| arg == "--") else {
        return Ok(());
    };
    let after = args.len() - separator - 2;
    if command.len() <= after {
        return Ok(());
    }
    let stray = &command[..command.len() - after];
    let stray = stray
        .iter()
        .filter(|word| *word != "--")
        .map(|word| format!("'{}'", word.to_string_lossy()))
        .collect::<Vec<_>>();
    Err(Cli::command().error(
        ErrorKind::UnknownArgument,
        format!(
            "unexpected {} before '--': the command goes after '--' (a value with spaces \
             needs quotes, as in --wait '5 minutes')",
            stray.join(" ")
        ),
    ))
}

/// The subcommands' names, for a misspelt one.
const SUBCOMMANDS: [&str; 6] = ["status", "list", "release", "history", "metrics", "check"];

/// A first word that is one or two letters off a subcommand's name (`stauts -k x`), which
/// clap takes for a command to run and then asks for --key: the subcommand is suggested
/// instead. A command after `--` is never looked at.
fn misspelt_subcommand(args: &[std::ffi::OsString]) -> Option<clap::Error> {
    let word = args.get(1)?.to_str()?;
    if word.starts_with('-') || SUBCOMMANDS.contains(&word) {
        return None;
    }
    // One letter off for short words, two (a swap) for longer ones: `test` is not `list`.
    let most = if word.chars().count() <= 4 { 1 } else { 2 };
    let name = SUBCOMMANDS
        .iter()
        .find(|name| edit_distance(word, name) <= most)?;
    Some(Cli::command().error(
        ErrorKind::InvalidSubcommand,
        format!(
            "unrecognized subcommand '{word}'; did you mean '{name}'? (to run a program \
             of that name, put it after --)"
        ),
    ))
}

/// Levenshtein distance, for names of a few letters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// Looking at and clearing locks.
#[derive(Debug, Subcommand)]
pub enum Admin {
    /// Show who holds a lock; exit 0 when held, 1 when free, 125 on error
    ///
    /// Prints the holder's host, pid, program name, label, how long it has held the lock,
    /// the time left on its lease and its fence; then, once a run has succeeded or been
    /// skipped, a line with the time of the last success and the consecutive skips
    /// (busy, --wait ran out, superseded; work found already done is not one) since. A value redlock-run did not
    /// write is shown as held by an unknown holder. Names and values from outside are printed with control
    /// and invisible characters escaped.
    Status {
        /// Lock name
        ///
        /// As given to --key when the lock was taken; the Redis key is PREFIX + KEY.
        #[arg(short, long, value_name = "KEY")]
        key: std::ffi::OsString,

        /// Print one JSON object instead of a line
        ///
        /// {"held": …, "key": …, "holders": [{"host", "pid", "program", "label", "token",
        /// "fence", "held_for_ms", "since_ms", "ttl_ms", "known", …}]}; "known" is false for
        /// a value redlock-run did not write. When runs keep counters for the lock:
        /// "last_success_ms" (server time; null before the first success) and
        /// "consecutive_skips".
        #[arg(long)]
        json: bool,

        #[command(flatten)]
        connection: Connection,
    },
    /// List every lock under the prefix (SCAN, never KEYS), one line each
    ///
    /// Each line is what `status` prints for that lock. Exit 0, or 125 on error.
    List {
        /// Print a JSON array instead of lines
        ///
        /// One object per lock, each as `status --json` prints it.
        #[arg(long)]
        json: bool,

        #[command(flatten)]
        connection: Connection,
    },
    /// Remove a stuck lock, saying whose it was; a redlock-run holder's command is then
    /// terminated at the holder's next renewal
    ///
    /// Without --force it refuses and says who holds the lock. With --force it deletes only
    /// the value it just read (compare-and-delete: a lock that changed hands meanwhile is
    /// left alone), never another application's data, and announces the release so waiters
    /// start at once. A redlock-run holder finds its lock gone at its next renewal and
    /// terminates its command (or at its release, if the command ended first): exit 76. A
    /// holder that is another client, not redlock-run, is not told: it runs on. Exit 0 when
    /// released, 1 when there was nothing to release, 125 on error or refusal.
    Release {
        /// Lock name
        ///
        /// As given to --key when the lock was taken; the Redis key is PREFIX + KEY.
        #[arg(short, long, value_name = "KEY")]
        key: std::ffi::OsString,

        /// Required: releasing someone else's lock lets a second holder in
        ///
        /// The holder may still be running its command when the next one starts. Leftovers
        /// of a failed or lost attempt (nobody holds the lock) are deleted only with --force.
        #[arg(long)]
        force: bool,

        #[command(flatten)]
        connection: Connection,
    },
    /// Print every lock's counters under the prefix in the Prometheus text format, for
    /// node_exporter's textfile collector; exit 0, or 125 on error
    ///
    /// One sample per lock of each family, labelled key="NAME" (the name given to -k,
    /// without the prefix): redlock_run_acquired_total, redlock_run_not_acquired_total
    /// (reason="busy", "timeout", "superseded" or "already_done"), redlock_run_lost_total,
    /// redlock_run_expired_total (holders that ended without a release, counted by the run
    /// that found them, and those not found yet), redlock_run_wait_seconds and
    /// redlock_run_hold_seconds (summaries: _sum and _count), redlock_run_holders,
    /// redlock_run_waiters, redlock_run_holder_age_seconds (the oldest current holder, by
    /// the server's clock; absent when the lock is free),
    /// redlock_run_last_success_timestamp_seconds (absent when no run has succeeded) and
    /// redlock_run_consecutive_skips. The counters are kept in Redis by the runs themselves
    /// ({KEY}:stats). A name that is not UTF-8 is shown with each byte that is not UTF-8
    /// written \xNN and each backslash doubled, and its samples carry key_escaped="true". Locks are
    /// found with SCAN, never KEYS. With several servers (Redlock) each value is the highest
    /// that a majority of them reached. Nothing is printed on stdout when Redis cannot be
    /// read (exit 125): write to a temporary file and rename it only on success.
    Metrics {
        #[command(flatten)]
        connection: Connection,
    },
    /// A monitoring plugin (Nagios, Icinga, Sensu) for one lock: exit 0 OK, 1 WARNING,
    /// 2 CRITICAL, 3 UNKNOWN, with one line on stdout
    ///
    /// The line is `REDLOCK OK - KEY: summary | perfdata`, where the summary names what
    /// crossed a threshold (the holder's host:pid and how long it has held the lock, the
    /// skips, the time since the last success) and the performance data are 'held' (s),
    /// 'skips', 'since_success' (s; U when no run has succeeded) and 'waiters'. UNKNOWN (3)
    /// is everything that is not a verdict: Redis unreachable, bad credentials, too few
    /// Redlock nodes answering, counters of another type, a bad option or threshold (usage
    /// errors too exit 3 here, not 125). Without thresholds, the check is always OK and
    /// only reports. The counters are kept in Redis by the runs themselves ({KEY}:stats).
    Check {
        /// Lock name
        ///
        /// As given to --key when the lock was taken; the Redis key is PREFIX + KEY.
        #[arg(short, long, value_name = "KEY")]
        key: std::ffi::OsString,

        /// CRITICAL when the current holder has held the lock longer than DUR
        ///
        /// A duration as for --ttl (500ms, 30s, 2h; a bare number is seconds), above 0 and
        /// at most ten years; measured by the Redis server's clock from the acquisition.
        #[arg(long, value_name = "DUR", allow_negative_numbers = true)]
        max_held: Option<String>,

        /// WARNING when the current holder has held the lock longer than DUR
        ///
        /// As --max-held; with both, it must not be longer than --max-held.
        #[arg(long, value_name = "DUR", allow_negative_numbers = true)]
        warn_held: Option<String>,

        /// CRITICAL at the N-th consecutive run that skipped its command (busy, --wait ran
        /// out, superseded; work found already done is not a skip)
        ///
        /// 1 to 1000000. The count is reset by a successful run; a failed run neither adds
        /// to it nor resets it. N is the same as --max-skips of a run's dead-man ping: the
        /// N-th consecutive skip is the alarm (so the performance data's threshold is N-1,
        /// the most skips that are still fine).
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        max_skips: Option<String>,

        /// WARNING at the N-th consecutive run that did not run its command
        ///
        /// As --max-skips; with both, it must not be above --max-skips.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        warn_skips: Option<String>,

        /// CRITICAL when no run of the lock has succeeded for longer than DUR (or none ever
        /// has)
        ///
        /// A duration as for --max-held. A success is a run whose command exited 0 with the
        /// lock intact, at its release, by the Redis server's clock. A lock that no run has
        /// ever succeeded with (or a name no run ever used: a typo) is CRITICAL, "never
        /// succeeded".
        #[arg(long, value_name = "DUR", allow_negative_numbers = true)]
        max_since_success: Option<String>,

        /// WARNING when no run of the lock has succeeded for longer than DUR (or none ever
        /// has)
        ///
        /// As --max-since-success; with both, it must not be longer than
        /// --max-since-success.
        #[arg(long, value_name = "DUR", allow_negative_numbers = true)]
        warn_since_success: Option<String>,

        #[command(flatten)]
        connection: Connection,
    },
    /// Show a lock's last events, newest last, one line each: acquired, released, lost,
    /// expired, forced, abandoned, busy, timeout, superseded, replaced, already_done
    ///
    /// Each line gives the event's time (the Redis server's clock, UTC), the event, the
    /// fence, the run's host, pid, program name and label, and where they apply its exit
    /// status and how long it waited or held the lock. Runs record their events in
    /// {KEY}:history, a Redis Stream capped by their --history. With several servers
    /// (Redlock), an event is shown once a majority of them recorded it. Names and values
    /// from outside are printed with control and invisible characters escaped; entries
    /// another client wrote are shown as far as they can be read. Exit 0 when there are
    /// events, 1 when the lock has no history, 125 on error; --follow runs until
    /// interrupted, and dies of that signal (as tail -f does: 130 after Ctrl-C, 143 after
    /// SIGTERM).
    History {
        /// Lock name
        ///
        /// As given to --key when the lock was taken; the Redis key is PREFIX + KEY, its
        /// history {PREFIX + KEY}:history.
        #[arg(short, long, value_name = "KEY")]
        key: std::ffi::OsString,

        /// How many of the last events to show, 1 to 10000
        ///
        /// 0 only with --follow: no past events, only new ones (as tail -n 0 -f). A history
        /// keeps no more events than its runs' --history allows (100 by default).
        #[arg(
            short = 'n',
            long,
            value_name = "N",
            default_value = "20",
            allow_negative_numbers = true
        )]
        lines: String,

        /// Print one JSON object a line instead of text
        ///
        /// Each with time (RFC 3339, UTC, milliseconds, as the JSON logs), time_ms, id (the
        /// stream entry's ID), event, key, and where they apply fence, exit_code, waited_ms,
        /// held_ms (numbers), token, host, pid, program, label and by. An entry another
        /// client wrote without an event has "event": null and its "fields"; fields that do
        /// not read as they should are named in "ill_formed".
        #[arg(long)]
        json: bool,

        /// After the last events, keep printing new ones as they are recorded, until
        /// interrupted
        ///
        /// A blocking read on each server (XREAD BLOCK), never polling; each read waits a
        /// little less than --redis-timeout before it is sent again. Ends with an error
        /// (125) when the server stops answering (with Redlock, when too few of them do).
        #[arg(short, long)]
        follow: bool,

        #[command(flatten)]
        connection: Connection,
    },
}

/// Whether `args` (this process's command line, as clap refused it) asks for the `check`
/// plugin: its first argument that is neither an option nor an option's value is `check`,
/// and no `-k`/`--key` (a run's) or `--` came before it. A plugin reports even a command
/// line it cannot parse as UNKNOWN (3), not as redlock-run's 125: `redlock-run -r URL check
/// -k KEY` too, whose options before the subcommand's name clap refuses.
pub fn check_requested<I, T>(args: I) -> bool
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString>,
{
    let command = Cli::command();
    let takes_value =
        |found: Option<&clap::Arg>| found.is_some_and(|arg| arg.get_action().takes_values());
    let long = |name: &str| {
        command.get_arguments().find(|arg| {
            arg.get_long() == Some(name)
                || arg
                    .get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&name))
        })
    };
    let short = |letter: char| {
        command.get_arguments().find(|arg| {
            arg.get_short() == Some(letter)
                || arg
                    .get_all_short_aliases()
                    .is_some_and(|aliases| aliases.contains(&letter))
        })
    };
    let is_key = |found: Option<&clap::Arg>| found.is_some_and(|arg| arg.get_id() == "key");
    let mut args = args.into_iter().map(Into::into).skip(1);
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if text == "--" {
            return false;
        }
        if let Some(name) = text.strip_prefix("--") {
            let (name, attached) = match name.split_once('=') {
                Some((name, _)) => (name, true),
                None => (name, false),
            };
            let found = long(name);
            if is_key(found) {
                return false;
            }
            if !attached && takes_value(found) {
                args.next();
            }
        } else if let Some(letters) = text.strip_prefix('-').filter(|rest| !rest.is_empty()) {
            // `-vk KEY`, `-rURL`: the first letter that takes a value takes the rest, or
            // the next argument.
            for (at, letter) in letters.char_indices() {
                let found = short(letter);
                if is_key(found) {
                    return false;
                }
                if takes_value(found) {
                    if at + letter.len_utf8() == letters.len() {
                        args.next();
                    }
                    break;
                }
            }
        } else {
            return arg == "check";
        }
    }
    false
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
        const OPTIONS: [&str; 45] = [
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
            "--supersede",
            "--once",
            "--once-per",
            "--remember",
            "--min-hold",
            "--max-runtime",
            "--stop-timeout",
            "--label",
            "-c",
            "-q",
            "-v",
            "--",
            "status",
            "list",
            "release",
            "history",
            "--follow",
            "--lines",
            "--json",
            "--force",
            "--prefix",
            "--redis-timeout",
            "--pass-redis-env",
            "--ping",
            "--max-skips",
            "--dry-run",
            "metrics",
            "check",
            "--max-held",
            "--warn-skips",
            "--max-since-success",
        ];
        prop_oneof![
            prop::sample::select(&OPTIONS[..]).prop_map(String::from),
            "[0-9]{1,4}(ms|s|m|h)?",
            "(https?|HTTP|ftp)?(://)?[a-z0-9:@/.?=&#%]{0,16}",
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

    type Documented = (String, String, String, Option<String>);

    /// Every argument of every form of the command, with the command's name, as
    /// (command, argument id, short help, long help); clap's own --help and --version left
    /// out, since their text is clap's.
    fn documented_arguments() -> Vec<Documented> {
        fn walk(command: &clap::Command, out: &mut Vec<Documented>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") || arg.is_hide_set() {
                    continue;
                }
                out.push((
                    command.get_name().to_string(),
                    id.to_string(),
                    arg.get_help().map(ToString::to_string).unwrap_or_default(),
                    arg.get_long_help().map(ToString::to_string),
                ));
            }
            for sub in command.get_subcommands() {
                walk(sub, out);
            }
        }
        let mut command = Cli::command();
        command.build();
        let mut out = Vec::new();
        walk(&command, &mut out);
        out
    }

    /// The man page is the full option reference: every argument has, besides its one-line
    /// help (what -h shows), a long help (what --help and the man page show) that says more.
    #[test]
    fn every_argument_has_a_long_help() {
        let arguments = documented_arguments();
        assert!(arguments.len() > 20, "{arguments:?}");
        for (command, id, short, long) in arguments {
            assert!(!short.trim().is_empty(), "{command} {id}: no help");
            let long = long.unwrap_or_else(|| panic!("{command} {id}: no long help"));
            assert!(
                long.starts_with(&short) && long.len() > short.len() + 20,
                "{command} {id}: the long help adds nothing to {short:?}:\n{long}"
            );
        }
    }

    /// The texts that list the subcommands a program after -- may be named like (the
    /// COMMAND argument's help, the footer of --help) name every one of them.
    #[test]
    fn every_subcommand_is_named_where_the_subcommands_are_listed() {
        let mut command = Cli::command();
        command.build();
        let command_help = command
            .get_arguments()
            .find(|arg| arg.get_id() == "command")
            .and_then(|arg| arg.get_long_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        let footer = command
            .get_after_help()
            .map(ToString::to_string)
            .unwrap_or_default();
        for sub in command.get_subcommands() {
            let name = sub.get_name();
            if name == "help" {
                continue;
            }
            for (what, text) in [("COMMAND's help", &command_help), ("the footer", &footer)] {
                assert!(
                    text.contains(name),
                    "{what} does not name the subcommand {name}:\n{text}"
                );
            }
        }
    }

    fn parse(args: &[String]) -> Option<Config> {
        let argv = std::iter::once("redlock-run").chain(args.iter().map(String::as_str));
        match Task::from_cli(Cli::parse_from_args(argv).ok()?).ok()? {
            Task::Run(config) => Some(*config),
            Task::Admin(_) => None,
        }
    }

    fn assert_within_limits(config: &Config) {
        if let Some(ping) = &config.ping {
            let skips = 1..=crate::config::MAX_SKIPS;
            assert!(ping.max_skips.is_none_or(|max| skips.contains(&max)));
            assert_eq!(format!("{:?}", ping.url), "PingUrl(***)");
        }
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
        assert!(config
            .stop_timeout
            .is_none_or(|dur| dur <= lease::MAX_DURATION));
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

        /// `--ping`, `--max-skips` and `--dry-run` with values of every kind: accepted only
        /// with an http(s) URL and a count in range; no error quotes the URL's path.
        #[test]
        fn ping_options_are_parsed_or_refused(
            scheme in "(https?|HTTPS|ftp|)(://)?",
            rest in "[a-z0-9:@/.?=&#% ]{0,12}",
            skips in prop::option::of("-?[0-9]{0,9}|\\PC{0,4}"),
            dry_run in any::<bool>(),
        ) {
            let url = format!("{scheme}h.example/s3cret{rest}");
            let mut args: Vec<String> = vec!["-k".into(), "job".into(), "--ping".into(), url.clone()];
            if let Some(skips) = &skips {
                args.extend(["--max-skips".into(), skips.clone()]);
            }
            if dry_run {
                args.push("--dry-run".into());
            }
            args.extend(["--".into(), "true".into()]);
            let argv = std::iter::once("redlock-run").chain(args.iter().map(String::as_str));
            let parsed = Cli::parse_from_args(argv).map_err(|err| err.to_string());
            match parsed.and_then(|cli| Task::from_cli(cli).map_err(|err| format!("{err:#}"))) {
                Ok(Task::Run(config)) => {
                    assert_within_limits(&config);
                    prop_assert!(config.ping.is_some());
                    prop_assert!(url.to_ascii_lowercase().starts_with("http"));
                    prop_assert_eq!(config.dry_run, dry_run);
                }
                Ok(Task::Admin(_)) => prop_assert!(false, "{args:?} is not an admin command"),
                // clap quotes a value that does not fit its type (--max-skips), never the URL.
                Err(err) => prop_assert!(!err.contains("s3cret"), "{err}"),
            }
        }

        /// Every duration option keeps what it accepts within its limits.
        #[test]
        fn accepted_durations_are_within_their_limits(values in prop::collection::vec(duration(), 8)) {
            let flags = [
                "--ttl", "--renew-every", "--wait", "--kill-after", "--min-hold", "--max-runtime",
                "--redis-timeout", "--stop-timeout",
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
