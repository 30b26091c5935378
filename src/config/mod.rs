//! `Cli` (raw strings) -> `Config` (checked values and the runtime objects built from
//! them: the Redis deployment, the lease's timing). Every user-facing validation error
//! lives here, so that bad input is refused before anything touches Redis or runs a
//! command. The rules themselves belong to their owners (`lease` for time, `backend` for
//! URLs, key names and limits); this module knows nothing of the redis crate.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::backend::{
    colocates, holds_secret, lock_of_internal_key, shares_keys_with, Deployment, Eviction, Key,
    LockRequest, Once, Password, Recording, Sources, MAX_KEY_LEN, MAX_LABEL_LEN, MAX_LIMIT,
};
use crate::cli::{Admin, Cli, Connection, RunArgs};
use crate::lease::{self, Timing};
use crate::ping::{PingConfig, PingUrl};
use crate::report::{self, Verbosity};

pub(crate) use durations::parse_duration;
use durations::{bounded, optional_positive};

mod durations;
mod keys;

pub use keys::Locks;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Forever,
    /// Zero means "do not wait" (`--no-wait`).
    For(Duration),
}

#[derive(Debug)]
pub struct Config {
    /// One server (or deployment), or the independent masters of a Redlock quorum.
    pub redis: Deployment,
    /// The full Redis key: prefix + lock name (with several `-k`, the first's).
    pub key: Key,
    /// Every lock the run names (`-k`), and how several are held.
    pub locks: Locks,
    /// TTL, renewal period and `--kill-after`.
    pub timing: Timing,
    pub wait: Wait,
    pub conflict_exit_code: u8,
    pub redis_timeout: Duration,
    /// How many holders may hold the lock at once (1: a mutex).
    pub limit: u32,
    /// `--history N`: the events kept in the lock's history; 0 records nothing.
    pub history: u32,
    /// Waiters take the lock in arrival order.
    pub fair: bool,
    /// `--supersede`: a newer superseding waiter ends this one's wait (exit 77).
    pub supersede: bool,
    /// `--replace`: take over from the current holder.
    pub replace: bool,
    /// The lock is kept at least this long after it was taken.
    pub min_hold: Option<Duration>,
    /// The command is terminated after this long.
    pub max_runtime: Option<Duration>,
    /// After a terminating signal to redlock-run, its command's group is killed this long
    /// after (`--stop-timeout`).
    pub stop_timeout: Option<Duration>,
    /// `--once`, `--once-per`, `--remember` (boxed: most runs pass none, and `Task` stays
    /// small).
    pub once: Box<Once>,
    /// Program and arguments; `--shell CMD` becomes `/bin/sh -c CMD`.
    pub command: Vec<OsString>,
    /// What waiters see of this holder besides its host, pid and program's name.
    pub label: Option<String>,
    /// Whether a Redis that may evict the lock is used anyway (`--allow-eviction`).
    pub eviction: Eviction,
    /// Variables of ours left out of the command's environment: those that hold a password.
    pub hidden_env: Vec<&'static str>,
    pub verbosity: Verbosity,
    /// When this run is started by the command of a run of the same key (its `REDLOCK_KEY`
    /// is ours): that run's `REDLOCK_TOKEN`. Whether it is the same lock, Redis says: the
    /// key holds that token there or not.
    pub outer_token: Option<String>,
    /// `--ping URL` and `--max-skips N`.
    pub ping: Option<Box<PingConfig>>,
    /// `--dry-run`: check and look, write nothing, run nothing.
    pub dry_run: bool,
}

/// The most consecutive skips `--max-skips` (a run's and `check`'s) and `--warn-skips` take:
/// a higher count is a mistake, not a schedule.
pub const MAX_SKIPS: u64 = 1_000_000;

/// What the command line asks for.
#[derive(Debug)]
pub enum Task {
    Run(Box<Config>),
    Admin(Box<AdminConfig>),
}

/// `status`, `list` or `release`.
#[derive(Debug)]
pub struct AdminConfig {
    pub redis: Deployment,
    pub prefix: Key,
    pub redis_timeout: Duration,
    pub action: AdminAction,
}

#[derive(Debug, Clone)]
pub enum AdminAction {
    /// `key` is the full Redis key.
    Status {
        key: Key,
        json: bool,
    },
    List {
        json: bool,
    },
    Release {
        key: Key,
        force: bool,
    },
    Metrics,
    /// `check`: `key` is the full Redis key.
    Check {
        key: Key,
        thresholds: Thresholds,
    },
    /// `lines`: how many past events, at most `MAX_HISTORY_LINES` (0 only with `follow`).
    History {
        key: Key,
        lines: usize,
        json: bool,
        follow: bool,
    },
}

/// The levels of `check`: each a (warning, critical) pair, either or both absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Thresholds {
    pub held: Levels<Duration>,
    pub skips: Levels<u64>,
    pub since_success: Levels<Duration>,
}

/// A warning level and a critical level; a warning is never above the critical level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Levels<T> {
    pub warn: Option<T>,
    pub crit: Option<T>,
}

impl Task {
    /// Done first, before anything connects: keeps the Redis password out of core files, of
    /// `ps` (a password typed on the command line is overwritten, with a warning) and of
    /// any panic message.
    pub fn protect_secrets(&self) -> Result<()> {
        let (redis, ping) = match self {
            Task::Run(config) => {
                report::set_verbosity(config.verbosity);
                (&config.redis, config.ping.as_ref())
            }
            Task::Admin(config) => (&config.redis, None),
        };
        // The ping URL, hidden like a password: from panics always, from `ps` when typed.
        let ping_pair = ping.map(|ping| (ping.url.as_given().to_string(), String::from("***")));
        let mut secrets = redis.secrets();
        secrets.extend(ping_pair.clone());
        report::redact_panics(secrets);
        let typed = redis.typed_secrets();
        let mut hidden = typed.clone();
        hidden.extend(ping_pair.filter(|_| ping.is_some_and(|ping| ping.typed)));
        crate::process::protect_secrets(&hidden)
            .context("cannot protect the Redis password and the ping URL")?;
        if !typed.is_empty() {
            report::warn(format_args!(
                "a Redis password given on the command line can be read by other users of \
                 this machine until redlock-run hides it; use REDLOCK_PASSWORD, \
                 --password-file or REDLOCK_REDIS instead"
            ));
        }
        Ok(())
    }

    pub fn from_cli(cli: Cli) -> Result<Task> {
        let Some(admin) = cli.admin else {
            return Config::from_args(cli.run).map(|config| Task::Run(Box::new(config)));
        };
        let (connection, action) = match admin {
            Admin::Status {
                key,
                json,
                connection,
            } => {
                let key = full_key(&connection.prefix, &key)?;
                (connection, AdminAction::Status { key, json })
            }
            Admin::List { json, connection } => {
                if connection.prefix.is_empty() {
                    bail!("list needs a --prefix: with '' it would list every key in the database");
                }
                (connection, AdminAction::List { json })
            }
            Admin::Release {
                key,
                force,
                connection,
            } => {
                let key = full_key(&connection.prefix, &key)?;
                refuse_bookkeeping(&key)?;
                (connection, AdminAction::Release { key, force })
            }
            Admin::Metrics { connection } => {
                if connection.prefix.is_empty() {
                    bail!(
                        "metrics needs a --prefix: with '' it would read every key in the \
                         database"
                    );
                }
                (connection, AdminAction::Metrics)
            }
            Admin::Check {
                key,
                max_held,
                warn_held,
                max_skips,
                warn_skips,
                max_since_success,
                warn_since_success,
                connection,
            } => {
                let key = full_key(&connection.prefix, &key)?;
                let thresholds = Thresholds {
                    held: duration_levels(("--warn-held", &warn_held), ("--max-held", &max_held))?,
                    skips: levels(
                        ("--warn-skips", &warn_skips),
                        ("--max-skips", &max_skips),
                        skips,
                    )?,
                    since_success: duration_levels(
                        ("--warn-since-success", &warn_since_success),
                        ("--max-since-success", &max_since_success),
                    )?,
                };
                (connection, AdminAction::Check { key, thresholds })
            }
            Admin::History {
                key,
                lines,
                json,
                follow,
                connection,
            } => {
                let key = full_key(&connection.prefix, &key)?;
                let lines = history_lines(&lines, follow)?;
                (
                    connection,
                    AdminAction::History {
                        key,
                        lines,
                        json,
                        follow,
                    },
                )
            }
        };
        let (redis, redis_timeout) = check_connection(&connection)?;
        Ok(Task::Admin(Box::new(AdminConfig {
            redis,
            prefix: Key::new(connection.prefix.as_bytes()),
            redis_timeout,
            action,
        })))
    }
}

impl Config {
    pub fn from_args(args: RunArgs) -> Result<Config> {
        let names = if args.key.is_empty() {
            vec![OsString::new()]
        } else {
            args.key.clone()
        };
        let mut keys = Vec::with_capacity(names.len());
        for name in &names {
            let key = full_key(&args.connection.prefix, name)?;
            if let Some(other) = shares_keys_with(&key) {
                bail!(
                    "invalid --key: {key} would share its keys (lock, fence counter, queue, \
                     semaphore slots or --once records) with the lock {other}, and the two \
                     would block each other; choose another name"
                );
            }
            keys.push(key);
        }
        let locks = keys::locks(
            names,
            keys,
            &keys::Asked {
                any: args.any,
                limit: args.limit,
                replace: args.replace,
                supersede: args.supersede,
                fair: args.fair,
                once: args.once.is_some() || args.once_per.is_some(),
                dry_run: args.dry_run,
            },
        )?;
        let key = locks.keys[0].clone();

        let ttl = bounded("--ttl", &args.ttl, lease::MIN_TTL, lease::MAX_TTL)?;
        let renew_every = match &args.renew_every {
            Some(text) => bounded(
                "--renew-every",
                text,
                lease::MIN_RENEWAL_PERIOD,
                lease::MAX_TTL,
            )?,
            None => lease::default_renewal_period(ttl),
        };
        let longest = lease::max_renewal_period(ttl);
        if renew_every > longest {
            bail!(
                "invalid --renew-every: with --ttl {} it must be at least {} and at most {}, half \
                 of what the lease surely lasts (the TTL less the clock-drift allowance), so \
                 that a failed renewal can be retried before the lease runs out",
                humantime::format_duration(ttl),
                humantime::format_duration(lease::MIN_RENEWAL_PERIOD),
                report::duration(longest)
            );
        }

        // --no-wait wins over a REDLOCK_WAIT in the environment; given together on the
        // command line, the later of --wait and --no-wait wins (see cli.rs).
        let wait = match (&args.wait, args.no_wait) {
            (_, true) => Wait::For(Duration::ZERO),
            (None, false) => Wait::Forever,
            (Some(text), false) if matches!(text.trim(), "forever" | "inf" | "infinity") => {
                Wait::Forever
            }
            (Some(text), false) => Wait::For(bounded(
                "--wait",
                text,
                Duration::ZERO,
                lease::MAX_DURATION,
            )?),
        };

        // Superseding is something that happens to a waiter: a run that never waits cannot
        // give way, and asking for both is a mistake worth saying (REDLOCK_WAIT=0 too).
        if args.supersede && wait == Wait::For(Duration::ZERO) {
            bail!(
                "--supersede cannot be used with --no-wait (or a --wait of 0): only a run that \
                 waits for the lock can be superseded by a newer one"
            );
        }

        let kill_after = bounded(
            "--kill-after",
            &args.kill_after,
            Duration::ZERO,
            lease::MAX_DURATION,
        )?;
        if args.limit == 0 || args.limit > MAX_LIMIT {
            bail!("invalid --limit: it must be from 1 to {MAX_LIMIT}");
        }
        let min_hold = optional_positive(&args.min_hold, "--min-hold")?;
        let max_runtime = optional_positive(&args.max_runtime, "--max-runtime")?;
        // Zero is allowed: a caller whose grace period is shorter than any command's
        // clean-up may want the group killed at once.
        let stop_timeout = args
            .stop_timeout
            .as_deref()
            .map(|text| bounded("--stop-timeout", text, Duration::ZERO, lease::MAX_DURATION))
            .transpose()?;
        let once = Box::new(once(
            &args.once,
            &args.once_per,
            &args.remember,
            args.limit,
        )?);
        let (redis, redis_timeout) = check_connection(&args.connection)?;
        if redis.is_quorum() && args.limit > 1 {
            bail!(
                "--limit needs a single Redis deployment: over a Redlock quorum, holders that \
                 each hold a majority of the nodes can still be more than the limit"
            );
        }
        if let Some(key) = locks
            .keys
            .iter()
            .find(|key| redis.has_cluster() && !colocates(key))
        {
            bail!(
                "invalid --key for Redis Cluster: {key} has a '}}' but no hash tag, so its \
                 fence, slots and queue cannot share its hash slot; use a name without braces, \
                 or with a tag such as {{deploy}}"
            );
        }
        // A replacing run is served next, ahead of every waiter, and has asked the holder to
        // stop: a newer run that dropped it would have ended that command for nothing, and
        // a run that is first in line has nobody to overtake. Either alone is clear.
        if args.supersede && args.replace {
            bail!(
                "--supersede cannot be used with --replace: a replacing run is served next and \
                 has already asked the holder to stop, so no newer run may drop it; use \
                 --replace to stop the running command, or --supersede to coalesce waiters"
            );
        }
        if args.replace && args.limit > 1 {
            bail!(
                "--replace needs --limit 1: with several holders there is no one holder to \
                 take over from"
            );
        }
        if args.replace && wait == Wait::For(Duration::ZERO) {
            bail!(
                "--replace needs to wait for the holder to let go: give --wait DUR (or none, to \
                 wait as long as it takes) instead of --no-wait or --wait 0"
            );
        }
        if redis.is_quorum() && args.fair {
            bail!(
                "--fair needs a single Redis deployment: each Redlock node keeps its own queue, \
                 and waiters at the head of different queues would block each other for ever"
            );
        }

        let command = match args.shell {
            Some(script) => vec!["/bin/sh".into(), "-c".into(), script.into()],
            None if args.command.is_empty() => {
                bail!("no command given: add `-- COMMAND [ARGS]` or `--shell CMD`")
            }
            None => args.command,
        };

        if let Some(label) = &args.label {
            if label.len() > MAX_LABEL_LEN {
                bail!(
                    "invalid --label: it is {} bytes long; the limit is {MAX_LABEL_LEN}",
                    label.len()
                );
            }
        }

        let ping = ping(args.ping.as_deref(), args.max_skips, args.ping_typed)?;
        let outer_token = outer_token(&key);
        let verbosity = if args.quiet {
            Verbosity::Quiet
        } else if args.verbose {
            Verbosity::Verbose
        } else {
            Verbosity::Normal
        };

        Ok(Config {
            key,
            locks,
            redis,
            timing: Timing {
                ttl,
                renew_every,
                kill_after,
            },
            wait,
            conflict_exit_code: args.conflict_exit_code,
            redis_timeout,
            limit: args.limit,
            history: args.history,
            fair: args.fair,
            supersede: args.supersede,
            replace: args.replace,
            min_hold,
            max_runtime,
            stop_timeout,
            once,
            command,
            label: args.label,
            eviction: if args.allow_eviction {
                Eviction::Allowed
            } else {
                Eviction::Refused
            },
            // The ping URL holds the check's key: never the command's, whatever
            // --pass-redis-env says.
            hidden_env: if args.pass_redis_env {
                vec!["REDLOCK_PING"]
            } else {
                secret_variables()
            },
            verbosity,
            outer_token,
            ping,
            dry_run: args.dry_run,
        })
    }

    /// What this run asks of the lock, with a fresh token: the key and its lease, the
    /// policies (`--limit`, `--fair`, `--supersede`, `--once`, `--replace`), what the
    /// scripts record, and how the holder is shown to others.
    pub fn lock_request(&self) -> LockRequest {
        LockRequest {
            supersede: self.supersede,
            once: (*self.once).clone(),
            replace: self.replace,
            recording: Recording {
                history: self.history,
                final_try: self.wait == Wait::For(Duration::ZERO),
                ..Recording::default()
            },
            ..LockRequest::new(
                self.key.clone(),
                self.timing.ttl,
                self.limit,
                self.fair,
                &self.program_name(),
                self.label.as_deref(),
            )
        }
    }

    /// The program's name, as others may see it: the last part of its path, without the
    /// arguments (they may hold secrets).
    pub fn program_name(&self) -> String {
        let program = std::path::Path::new(&self.command[0]);
        program
            .file_name()
            .unwrap_or(program.as_os_str())
            .to_string_lossy()
            .into_owned()
    }
}

/// The `REDLOCK_TOKEN` of the run whose command started this one, if that run holds `key`
/// by name (the variables a run gives its command, README, "Environment given to the
/// command").
/// Longest `--once` ID, in bytes: it is stored as a field beside the lock.
pub const MAX_ONCE_ID_LEN: usize = 256;
/// How long a `--once` record lasts without `--remember`.
const DEFAULT_REMEMBER: Duration = Duration::from_secs(7 * 24 * 3600);

/// `--once`, `--once-per` and `--remember`, checked.
fn once(
    id: &Option<OsString>,
    per: &Option<String>,
    remember: &Option<String>,
    limit: u32,
) -> Result<Once> {
    let id = match id {
        None => None,
        Some(id) => {
            let Some(text) = id.to_str() else {
                bail!(
                    "invalid --once: it is not valid UTF-8; an ID is 1 to {MAX_ONCE_ID_LEN} \
                     bytes of UTF-8 text"
                );
            };
            if text.is_empty() || text.len() > MAX_ONCE_ID_LEN {
                bail!(
                    "invalid --once: it is {} bytes long; an ID is 1 to {MAX_ONCE_ID_LEN} bytes \
                     of UTF-8 text",
                    text.len()
                );
            }
            Some(text.to_string())
        }
    };
    let per = match per {
        None => None,
        Some(text) => Some(bounded(
            "--once-per",
            text,
            Duration::from_secs(1),
            lease::MAX_DURATION,
        )?),
    };
    let once = Once {
        id,
        per,
        remember: optional_positive(remember, "--remember")?.unwrap_or(DEFAULT_REMEMBER),
    };
    if remember.is_some() && !once.is_on() {
        bail!("--remember needs --once or --once-per: it says how long their record lasts");
    }
    if let (Some(per), true) = (once.per, remember.is_some()) {
        if once.remember < per {
            bail!(
                "--remember must be at least --once-per's DUR ({}): a shorter record would be \
                 forgotten before the runs of the same firing have looked for it",
                humantime::format_duration(per)
            );
        }
    }
    if once.is_on() && limit > 1 {
        bail!(
            "--once and --once-per need --limit 1: with several holders at once, the same \
             work could run twice before either records it"
        );
    }
    Ok(once)
}

/// `--ping` and `--max-skips`, checked; no error quotes the URL.
fn ping(url: Option<&str>, max_skips: Option<u64>, typed: bool) -> Result<Option<Box<PingConfig>>> {
    if let Some(n) = max_skips {
        if !(1..=MAX_SKIPS).contains(&n) {
            bail!("invalid --max-skips: it must be from 1 to {MAX_SKIPS}");
        }
    }
    // An empty REDLOCK_PING is no ping, as an empty REDLOCK_PASSWORD is no password.
    let Some(url) = url.filter(|url| !url.is_empty()) else {
        if max_skips.is_some() {
            bail!(
                "--max-skips needs --ping (or REDLOCK_PING): it says when a skipped run pings \
                 URL/fail"
            );
        }
        return Ok(None);
    };
    Ok(Some(Box::new(PingConfig {
        url: PingUrl::parse(url)?,
        max_skips,
        typed,
    })))
}

fn outer_token(key: &Key) -> Option<String> {
    let outer_key = std::env::var_os("REDLOCK_KEY")?;
    if outer_key.as_bytes() != key.as_bytes() {
        return None;
    }
    std::env::var("REDLOCK_TOKEN")
        .ok()
        .filter(|token| !token.is_empty())
}

/// Our variables that hold a password: REDLOCK_PASSWORD, and REDLOCK_REDIS when one of
/// its URLs has one (or a user part that may be one). Left to the command, they would hand
/// it, and whatever it runs, the password to the lock server.
fn secret_variables() -> Vec<&'static str> {
    let mut names = vec!["REDLOCK_PASSWORD", "REDLOCK_PING"];
    if std::env::var_os("REDLOCK_REDIS").is_some_and(|urls| holds_secret(&urls.to_string_lossy())) {
        names.push("REDLOCK_REDIS");
    }
    names
}

/// A warning and a critical level of `check`, each read by `parse`, the warning never
/// above the critical one.
fn levels<T: PartialOrd + Copy>(
    (warn_flag, warn): (&str, &Option<String>),
    (crit_flag, crit): (&str, &Option<String>),
    parse: impl Fn(&str, &str) -> Result<T>,
) -> Result<Levels<T>> {
    let warn = warn
        .as_deref()
        .map(|text| parse(warn_flag, text))
        .transpose()?;
    let crit = crit
        .as_deref()
        .map(|text| parse(crit_flag, text))
        .transpose()?;
    if let (Some(w), Some(c)) = (warn, crit) {
        if w > c {
            bail!("invalid {warn_flag}: the warning level is above {crit_flag}, the critical one");
        }
    }
    Ok(Levels { warn, crit })
}

fn duration_levels(
    warn: (&str, &Option<String>),
    crit: (&str, &Option<String>),
) -> Result<Levels<Duration>> {
    levels(warn, crit, |flag, text| {
        Ok(optional_positive(&Some(text.to_string()), flag)?.unwrap_or_default())
    })
}

/// A count of consecutive skips, 1 to [`MAX_SKIPS`].
fn skips(flag: &str, text: &str) -> Result<u64> {
    let count: u64 = text.trim().parse().map_err(|_| {
        anyhow::anyhow!(
            "invalid {flag}: {:?} is not a whole number of skips",
            report::escape(text)
        )
    })?;
    if !(1..=MAX_SKIPS).contains(&count) {
        bail!("invalid {flag}: {count} is not from 1 to {MAX_SKIPS}");
    }
    Ok(count)
}

/// PREFIX + KEY, after checking the lock name.
fn full_key(prefix: &OsStr, name: &OsStr) -> Result<Key> {
    if name.is_empty() {
        bail!("--key must not be empty");
    }
    if name.len() > MAX_KEY_LEN {
        bail!(
            "--key is {} bytes long; the limit is {MAX_KEY_LEN}",
            name.len()
        );
    }
    Ok(Key::new(prefix.as_bytes()).followed_by(name.as_bytes()))
}

/// `release` takes locks, not their bookkeeping: deleting a fence counter could let fences
/// repeat, and a limit, queue or slot key is the lock's to manage.
/// `history -n`: 1 to `MAX_EVENTS`, or 0 with `--follow` (only new events).
fn history_lines(text: &str, follow: bool) -> Result<usize> {
    let max = crate::backend::history::MAX_EVENTS;
    let lines: usize = match text.trim().parse() {
        Ok(lines) => lines,
        Err(_) if !text.trim().is_empty() && text.trim().bytes().all(|b| b.is_ascii_digit()) => {
            usize::MAX
        }
        Err(_) => bail!(
            "invalid -n {:?}: it must be a number of events, from 1 to {max}",
            report::escape(text)
        ),
    };
    if lines > max {
        bail!("invalid -n {}: at most {max} events are shown", text.trim());
    }
    if lines == 0 && !follow {
        bail!(
            "invalid -n 0: it shows nothing; give 1 to {max}, or -n 0 with --follow for new \
             events only"
        );
    }
    Ok(lines)
}

fn refuse_bookkeeping(key: &Key) -> Result<()> {
    if let Some(lock) = lock_of_internal_key(key) {
        bail!(
            "{key} is bookkeeping of the lock {lock} (its fence counter, limit, queue or a \
             slot), not a lock; deleting it could let fences repeat. Release {lock} instead"
        );
    }
    Ok(())
}

fn check_connection(connection: &Connection) -> Result<(Deployment, Duration)> {
    let redis_timeout = bounded(
        "--redis-timeout",
        &connection.redis_timeout,
        lease::MIN_REDIS_TIMEOUT,
        lease::MAX_REDIS_TIMEOUT,
    )?;
    let password = match &connection.password_file {
        Some(file) => Some(read_password(file)?),
        None => std::env::var("REDLOCK_PASSWORD")
            .ok()
            .filter(|password| !password.is_empty())
            .map(Password),
    };
    let sources = Sources {
        password,
        typed: connection.typed,
    };
    Ok((
        Deployment::parse(&connection.redis, sources)?,
        redis_timeout,
    ))
}

/// The most read of a `--password-file`: far more than any password, little enough that
/// `/dev/zero` or a log file given by mistake costs nothing.
const PASSWORD_FILE_LIMIT: u64 = 64 * 1024;
/// How long a `--password-file` that is not a regular file (a FIFO, `<(vault read ...)`)
/// may take to give its first line.
const PASSWORD_PIPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The first line of `file`, without its line ending: at most [`PASSWORD_FILE_LIMIT`] bytes
/// read, within [`PASSWORD_PIPE_TIMEOUT`] when it is not a regular file (a FIFO nobody
/// writes to would block for ever), and a warning when every user may read it.
fn read_password(file: &std::path::Path) -> Result<Password> {
    use std::os::unix::fs::PermissionsExt;

    let shown = file.display();
    let metadata = std::fs::metadata(file)
        .with_context(|| format!("cannot read the --password-file {shown}"))?;
    if metadata.is_dir() {
        bail!("cannot read the --password-file {shown}: it is a directory");
    }
    let mode = metadata.permissions().mode();
    if metadata.is_file() && mode & 0o004 != 0 {
        report::warn(format_args!(
            "the --password-file {shown} can be read by every user of this machine (mode \
             {:04o}); make it readable by its owner only: chmod 600 {shown}",
            mode & 0o7777
        ));
    }
    let bytes = if metadata.is_file() {
        first_line(file)
    } else {
        let owned = file.to_path_buf();
        let (sent, received) = std::sync::mpsc::channel();
        // A reader that may block for ever (in `open` or `read`) on a thread of its own: on
        // timeout the run ends with an error, and the thread with the process.
        // Before the run's signals are blocked, and it may outlive the run's start: it
        // takes no signal (see `signals::spawn_deaf`).
        crate::signals::spawn_deaf(|| {
            std::thread::Builder::new()
                .name("password-file".into())
                .spawn(move || sent.send(first_line(&owned)))
        })
        .with_context(|| format!("cannot read the --password-file {shown}"))?;
        received.recv_timeout(PASSWORD_PIPE_TIMEOUT).map_err(|_| {
            anyhow::anyhow!(
                "cannot read the --password-file {shown}: nothing came from it within {} \
                 (a FIFO that nobody writes to?)",
                humantime::format_duration(PASSWORD_PIPE_TIMEOUT)
            )
        })?
    }
    .with_context(|| format!("cannot read the --password-file {shown}"))?;
    let line = match bytes {
        FirstLine::Line(line) => line,
        FirstLine::TooLong => bail!(
            "the --password-file {shown} has no line ending in its first {} KiB: its first \
             line is the password",
            PASSWORD_FILE_LIMIT / 1024
        ),
    };
    let line = String::from_utf8(line).map_err(|_| {
        anyhow::anyhow!("the --password-file {shown} does not hold UTF-8 text in its first line")
    })?;
    if line.is_empty() {
        bail!("the --password-file {shown} is empty: its first line is the password");
    }
    if line.contains(|c: char| c.is_control()) {
        bail!(
            "the --password-file {shown} has a control character (a NUL, say) in its first \
             line: its first line is the password, as text"
        );
    }
    Ok(Password(line))
}

/// A file's first line, or the sign that it had none within the limit.
enum FirstLine {
    Line(Vec<u8>),
    TooLong,
}

/// Reads `file` up to its first line ending (`\n` or `\r\n`) or its end, at most
/// [`PASSWORD_FILE_LIMIT`] bytes.
fn first_line(file: &std::path::Path) -> std::io::Result<FirstLine> {
    use std::io::{BufRead, Read};

    let mut reader = std::io::BufReader::new(std::fs::File::open(file)?.take(PASSWORD_FILE_LIMIT));
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    match line.strip_suffix(b"\n") {
        Some(ended) => line.truncate(ended.strip_suffix(b"\r").unwrap_or(ended).len()),
        None if line.len() as u64 >= PASSWORD_FILE_LIMIT => return Ok(FirstLine::TooLong),
        None => {}
    }
    Ok(FirstLine::Line(line))
}

#[cfg(test)]
mod tests;
