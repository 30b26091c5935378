//! `Cli` (raw strings) -> `Config` (checked values and the runtime objects built from
//! them: the Redis deployment, the lease's timing). Every user-facing validation error
//! lives here, so that bad input is refused before anything touches Redis or runs a
//! command. The rules themselves belong to their owners (`lease` for time, `backend` for
//! URLs, key names and limits); this module knows nothing of the redis crate.
//!
//! One file per concern, as the command line's groups in `cli`: `key`, `connection`,
//! `waiting`, `lease`, `policies`, `observability`, and the subcommands' `admin` and
//! `check`. Each refuses the values of its options; `Config::from_args` takes the run's
//! steps in the order its refusals have always come, so that of two mistakes on one
//! command line the same one is reported.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::backend::{Deployment, Eviction, Key, LockRequest, Once, Recording};
use crate::cli::{Cli, RunArgs};
use crate::lease::Timing;
use crate::ping::PingConfig;
use crate::report::{self, Verbosity};

pub use admin::{AdminAction, AdminConfig};
pub use check::{Levels, Thresholds};
pub(crate) use durations::parse_duration;
pub use observability::MAX_SKIPS;
pub use waiting::Wait;

mod admin;
mod check;
mod connection;
mod durations;
mod key;
mod lease;
mod locks;
mod observability;
mod policies;
mod serve;
mod waiting;

pub use locks::Locks;
pub use serve::ServeConfig;

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
    /// `-s/--shared`: a share of the lock (docs/resources.md).
    pub shared: bool,
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

/// What the command line asks for.
#[derive(Debug)]
pub enum Task {
    Run(Box<Config>),
    Admin(Box<AdminConfig>),
    /// `serve`: a server of its own (`crate::serve`).
    Serve(Box<ServeConfig>),
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
            Task::Serve(config) => (&config.redis, None),
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
        if let crate::cli::Admin::Serve(args) = admin {
            return ServeConfig::from_args(args).map(|config| Task::Serve(Box::new(config)));
        }
        AdminConfig::from_admin(admin).map(|config| Task::Admin(Box::new(config)))
    }
}

impl Config {
    pub fn from_args(args: RunArgs) -> Result<Config> {
        let names = if args.job.key.is_empty() {
            vec![OsString::new()]
        } else {
            args.job.key.clone()
        };
        let keys = names
            .iter()
            .map(|name| key::lock_key(&args.connection.prefix, name))
            .collect::<Result<Vec<Key>>>()?;
        let asked = locks::Asked {
            any: args.job.any,
            limit: args.waiting.limit,
            replace: args.policies.replace,
            supersede: args.policies.supersede,
            fair: args.waiting.fair,
            once: args.policies.once.is_some() || args.policies.once_per.is_some(),
            once_per: args.policies.once_per.is_some(),
            dry_run: args.output.dry_run,
            shared: args.job.shared,
            exclusive: args.job.exclusive,
        };
        locks::shared(keys.len(), &asked)?;
        let locks = locks::locks(names, keys, &asked)?;
        let key = locks.keys[0].clone();
        let (ttl, renew_every) = lease::ttl_and_renewal(&args.lease)?;
        let wait = waiting::wait(&args.waiting)?;
        policies::supersede_needs_a_wait(&args.policies, wait)?;
        let kill_after = lease::kill_after(&args.lease)?;
        waiting::limit(&args.waiting)?;
        let lease::Bounds {
            min_hold,
            max_runtime,
            stop_timeout,
        } = lease::bounds(&args.lease)?;
        let once = Box::new(policies::once(
            &args.policies.once,
            &args.policies.once_per,
            &args.policies.remember,
            args.waiting.limit,
        )?);
        let (redis, redis_timeout) = connection::check_connection(&args.connection)?;
        waiting::limit_fits(&args.waiting, &redis)?;
        if args.job.shared && redis.is_quorum() {
            bail!(
                "--shared needs a single Redis deployment: it is not supported over a Redlock \
                 quorum (several --redis)"
            );
        }
        for key in &locks.keys {
            key::fits_cluster(key, &redis)?;
        }
        policies::takeover(&args.policies, args.waiting.limit, wait)?;
        waiting::fair_fits(&args.waiting, &redis)?;

        let command = match args.job.shell {
            Some(script) => vec!["/bin/sh".into(), "-c".into(), script.into()],
            None if args.job.command.is_empty() => {
                bail!("no command given: add `-- COMMAND [ARGS]` or `--shell CMD`")
            }
            None => args.job.command,
        };

        observability::label(&args.observability)?;

        let ping = observability::ping(
            args.observability.ping.as_deref(),
            args.observability.max_skips,
            args.observability.ping_typed,
        )?;
        let outer_token = locks.keys.iter().find_map(key::outer_token);
        let verbosity = if args.output.quiet {
            Verbosity::Quiet
        } else if args.output.verbose {
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
            conflict_exit_code: args.waiting.conflict_exit_code,
            redis_timeout,
            limit: args.waiting.limit,
            history: args.observability.history,
            fair: args.waiting.fair,
            shared: args.job.shared,
            supersede: args.policies.supersede,
            replace: args.policies.replace,
            min_hold,
            max_runtime,
            stop_timeout,
            once,
            command,
            label: args.observability.label,
            eviction: lease::eviction(&args.lease),
            // The ping URL holds the check's key: never the command's, whatever
            // --pass-redis-env says.
            hidden_env: if args.job.pass_redis_env {
                vec!["REDLOCK_PING"]
            } else {
                connection::secret_variables()
            },
            verbosity,
            outer_token,
            ping,
            dry_run: args.output.dry_run,
        })
    }

    /// What this run asks of the lock, with a fresh token: the key and its lease, the
    /// policies (`--limit`, `--fair`, `--supersede`, `--once`, `--replace`), what the
    /// scripts record, and how the holder is shown to others.
    pub fn lock_request(&self) -> LockRequest {
        let request = LockRequest {
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
        };
        if self.shared {
            request.in_shared_mode()
        } else {
            request
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

#[cfg(test)]
mod tests;
