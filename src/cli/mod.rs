//! The command line as clap sees it: raw strings and flags, no validation beyond syntax and
//! no I/O. `config` turns this into a `Config` the rest of the program trusts. The `///`
//! comments are the `--help` text.
//!
//! Here: `Cli`, the footer of `--help`, the `Admin` subcommands and the reading of a command
//! line as a whole (a misspelt subcommand, words before `--`, `--wait` with `--no-wait`).
//! The options themselves live beside their help, one file per subcommand and one per
//! concern of a run (`run` and the groups it flattens); `connection` is every form's.

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub mod check;
pub mod connection;
pub mod history;
pub mod lease;
pub mod list;
pub mod metrics;
pub mod observability;
pub mod output;
pub mod policies;
pub mod release;
pub mod run;
pub mod serve;
pub mod status;
pub mod waiting;

pub use connection::Connection;
pub use run::RunArgs;

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

The command receives REDLOCK_KEY (the full Redis key), REDLOCK_NAME (its name as given
to -k), REDLOCK_TOKEN (this holder's token), REDLOCK_FENCE (a number that grows with every
acquisition of this lock), REDLOCK_SLOT (which --limit slot, from 1), REDLOCK_MODE (shared or
exclusive) and REDLOCK_TTL_MS in its environment; with several -k, REDLOCK_KEYS and REDLOCK_FENCES too, one a line.

Subcommands take their options after their name: redlock-run status -r URL -k KEY.
To run a program named like a subcommand (status, list, release, history, metrics,
check, serve), put it after --. `check` exits as a monitoring plugin does: 0 OK, 1 WARNING,
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
                      redlock-run <status|list|release|history|metrics|check|serve> [OPTIONS]"
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
    /// replaced, stop_timeout, usage, error, warning, internal_error, step; serve's
    /// listening and stopped), key and fence
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
            stray_words_before_separator(&args, &cli.run.job.command)?;
        }
        let (connection, used) = match &mut cli.admin {
            Some(admin) => {
                let used = matches.subcommand().map_or(&matches, |(_, used)| used);
                (admin.connection_mut(), used)
            }
            None => (&mut cli.run.connection, &matches),
        };
        connection.typed = used.value_source("redis") == Some(ValueSource::CommandLine);
        cli.run.observability.ping_typed =
            matches.value_source("ping") == Some(ValueSource::CommandLine);
        if cli.run.waiting.no_wait {
            match matches.value_source("wait") {
                Some(ValueSource::CommandLine) => {
                    return Err(Cli::command().error(
                        ErrorKind::ArgumentConflict,
                        "the argument '--no-wait' cannot be used with '--wait <DUR>'",
                    ))
                }
                _ => cli.run.waiting.wait = None,
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
const SUBCOMMANDS: [&str; 7] = [
    "status", "list", "release", "history", "metrics", "check", "serve",
];

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
    Status(status::Status),
    /// List every lock under the prefix (SCAN, never KEYS), one line each
    ///
    /// Each line is what `status` prints for that lock. Exit 0, or 125 on error.
    List(list::List),
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
    Release(release::Release),
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
    Metrics(metrics::Metrics),
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
    Check(check::Check),
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
    History(history::History),
    /// A read-only HTTP server over every lock under the prefix: a board in the browser
    /// (/), its JSON (/api/locks), /metrics for Prometheus and /healthz; runs until SIGTERM
    /// or SIGINT (exit 0), or exits 125 when it cannot listen
    ///
    /// /metrics has the families and labels of `redlock-run metrics`, read when scraped.
    /// Requests that come together are served from one read of Redis (SCAN, then pipelined
    /// reads), reused for up to a second. Nothing can be changed through it. See
    /// docs/monitoring.md for the routes, the JSON and the limits.
    Serve(serve::Serve),
}

impl Admin {
    /// The subcommand's connection options.
    fn connection_mut(&mut self) -> &mut Connection {
        match self {
            Admin::Status(args) => &mut args.connection,
            Admin::List(args) => &mut args.connection,
            Admin::Release(args) => &mut args.connection,
            Admin::Metrics(args) => &mut args.connection,
            Admin::Check(args) => &mut args.connection,
            Admin::History(args) => &mut args.connection,
            Admin::Serve(args) => &mut args.connection,
        }
    }
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
mod tests;
