//! `Cli` (raw strings) -> `Config` (checked values). Every user-facing validation error lives
//! here, so that bad input is refused before anything touches Redis or runs a command.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::backend::endpoint::Endpoint;
use crate::cli::{Admin, Cli, Connection, RunArgs};

/// Longest lock name accepted, in bytes (the Redis key is the prefix plus this).
pub const MAX_KEY_LEN: usize = 1024;
/// Shortest lease: below this, one slow round trip would eat the whole lease.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Most Redlock nodes one run talks to (one thread and connection each).
pub const MAX_NODES: usize = 15;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Forever,
    /// Zero means "do not wait" (`--no-wait`).
    For(Duration),
}

/// Where the lock lives: the URL as given (it may hold a password) and a form safe to print.
#[derive(Clone)]
pub struct RedisTarget {
    pub url: String,
    pub display: String,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// One server (or deployment), or the independent masters of a Redlock quorum.
    pub redis: Vec<RedisTarget>,
    /// The full Redis key: prefix + lock name.
    pub key: String,
    pub ttl: Duration,
    pub renew_every: Duration,
    pub wait: Wait,
    pub conflict_exit_code: u8,
    pub kill_after: Duration,
    pub redis_timeout: Duration,
    /// How many holders may hold the lock at once (1: a mutex).
    pub limit: u32,
    /// Waiters take the lock in arrival order.
    pub fair: bool,
    /// The lock is kept at least this long after it was taken.
    pub min_hold: Option<Duration>,
    /// The command is terminated after this long.
    pub max_runtime: Option<Duration>,
    /// Program and arguments; `--shell CMD` becomes `/bin/sh -c CMD`.
    pub command: Vec<OsString>,
    pub verbosity: Verbosity,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Task {
    Run(Config),
    Admin(AdminConfig),
}

/// `status`, `list` or `release`.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub redis: Vec<RedisTarget>,
    pub prefix: String,
    pub redis_timeout: Duration,
    pub action: AdminAction,
}

#[derive(Debug, Clone)]
pub enum AdminAction {
    /// `key` is the full Redis key.
    Status {
        key: String,
        json: bool,
    },
    List {
        json: bool,
    },
    Release {
        key: String,
        force: bool,
    },
}

/// The most holders `--limit` accepts; each is a key the acquire script looks at.
pub const MAX_LIMIT: u32 = 1000;

impl Task {
    pub fn from_cli(cli: Cli) -> Result<Task> {
        let Some(admin) = cli.admin else {
            return Config::from_args(cli.run).map(Task::Run);
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
                (connection, AdminAction::Release { key, force })
            }
        };
        let (redis, redis_timeout) = check_connection(&connection)?;
        Ok(Task::Admin(AdminConfig {
            redis,
            prefix: connection.prefix,
            redis_timeout,
            action,
        }))
    }
}

impl Config {
    pub fn from_args(args: RunArgs) -> Result<Config> {
        let name = args.key.unwrap_or_default();
        let key = full_key(&args.connection.prefix, &name)?;

        let ttl = parse_duration(&args.ttl).context("invalid --ttl")?;
        if ttl < MIN_TTL {
            bail!(
                "invalid --ttl: {} is shorter than the minimum of 100ms",
                humantime::format_duration(ttl)
            );
        }
        let renew_every = match &args.renew_every {
            Some(text) => parse_duration(text).context("invalid --renew-every")?,
            None => ttl / 3,
        };
        if renew_every.is_zero() || renew_every >= ttl {
            bail!("invalid --renew-every: it must be above 0 and shorter than --ttl");
        }

        let wait = match (&args.wait, args.no_wait) {
            (_, true) => Wait::For(Duration::ZERO),
            (None, false) => Wait::Forever,
            (Some(text), false) if matches!(text.trim(), "forever" | "inf" | "infinity") => {
                Wait::Forever
            }
            (Some(text), false) => Wait::For(parse_duration(text).context("invalid --wait")?),
        };

        let kill_after = parse_duration(&args.kill_after).context("invalid --kill-after")?;
        if args.limit == 0 || args.limit > MAX_LIMIT {
            bail!("invalid --limit: it must be from 1 to {MAX_LIMIT}");
        }
        let min_hold = optional_positive(&args.min_hold, "--min-hold")?;
        let max_runtime = optional_positive(&args.max_runtime, "--max-runtime")?;
        let (redis, redis_timeout) = check_connection(&args.connection)?;
        if redis.len() > 1 && args.limit > 1 {
            bail!(
                "--limit needs a single Redis deployment: over a Redlock quorum, holders that \
                 each hold a majority of the nodes can still be more than the limit"
            );
        }
        if redis.len() > 1 && args.fair {
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

        let verbosity = if args.quiet {
            Verbosity::Quiet
        } else if args.verbose {
            Verbosity::Verbose
        } else {
            Verbosity::Normal
        };

        Ok(Config {
            key,
            redis,
            ttl,
            renew_every,
            wait,
            conflict_exit_code: args.conflict_exit_code,
            kill_after,
            redis_timeout,
            limit: args.limit,
            fair: args.fair,
            min_hold,
            max_runtime,
            command,
            verbosity,
        })
    }

    /// The command line as one string, for holder metadata and messages.
    pub fn command_line(&self) -> String {
        let words: Vec<_> = self.command.iter().map(|w| w.to_string_lossy()).collect();
        words.join(" ")
    }
}

/// PREFIX + KEY, after checking the lock name.
fn full_key(prefix: &str, name: &str) -> Result<String> {
    if name.is_empty() {
        bail!("--key must not be empty");
    }
    if name.len() > MAX_KEY_LEN {
        bail!(
            "--key is {} bytes long; the limit is {MAX_KEY_LEN}",
            name.len()
        );
    }
    Ok(format!("{prefix}{name}"))
}

fn check_connection(connection: &Connection) -> Result<(Vec<RedisTarget>, Duration)> {
    let redis_timeout =
        parse_duration(&connection.redis_timeout).context("invalid --redis-timeout")?;
    if redis_timeout < Duration::from_millis(10) {
        bail!("invalid --redis-timeout: it must be at least 10ms");
    }
    let mut targets: Vec<RedisTarget> = Vec::new();
    for url in connection.redis.iter().flat_map(|text| split_urls(text)) {
        let target = RedisTarget {
            display: redact_url(&url),
            url,
        };
        check_redis_url(&target)?;
        targets.push(target);
    }
    if targets.len() > MAX_NODES {
        bail!("too many --redis URLs: at most {MAX_NODES} Redlock nodes are supported");
    }
    if targets.len() > 1 {
        refuse_repeated_servers(&targets)?;
    }
    Ok((targets, redis_timeout))
}

/// Refuses a Redlock node list that names one server twice, which would count twice
/// towards the majority: by address (other databases of one server included; `localhost`
/// is taken as the loopback addresses), or by URL for Sentinel sets and clusters. No name
/// is looked up in DNS (a start-up cost on every run), so one server under two DNS names
/// is not caught.
fn refuse_repeated_servers(targets: &[RedisTarget]) -> Result<()> {
    let places: Vec<Vec<String>> = targets.iter().map(server_places).collect();
    for (later, place) in places.iter().enumerate() {
        if let Some(earlier) = places[..later]
            .iter()
            .position(|other| other.iter().any(|address| place.contains(address)))
        {
            bail!(
                "--redis {} and {} are the same server: each Redlock node must be a separate \
                 server",
                targets[earlier].display,
                targets[later].display
            );
        }
    }
    Ok(())
}

/// Where a URL leads, as comparable text: `ip:port` (or `host:port` for a DNS name), the
/// socket path, or (Sentinel, Cluster) the URL itself.
fn server_places(target: &RedisTarget) -> Vec<String> {
    use redis::{ConnectionAddr, IntoConnectionInfo};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let Ok(info) = target.url.as_str().into_connection_info() else {
        return vec![target.display.clone()];
    };
    let (host, port) = match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            (host.clone(), *port)
        }
        other => return vec![other.to_string()],
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ips: Vec<IpAddr> = if host.eq_ignore_ascii_case("localhost") {
        vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()]
    } else {
        host.parse().into_iter().collect()
    };
    if ips.is_empty() {
        return vec![format!("{}:{port}", host.to_ascii_lowercase())];
    }
    ips.into_iter().map(|ip| format!("{ip}:{port}")).collect()
}

/// Splits a list of URLs (`REDLOCK_REDIS=redis://a,redis://b`) at each comma that starts
/// another URL: a comma inside one URL (a Sentinel's host list) stays.
fn split_urls(text: &str) -> Vec<String> {
    let mut urls = Vec::new();
    let mut start = 0;
    for (comma, _) in text.match_indices(',') {
        let next = text[comma + 1..].trim_start();
        let starts_url = next.split_once("://").is_some_and(|(scheme, _)| {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.')
        });
        if starts_url {
            urls.push(text[start..comma].trim().to_string());
            start = comma + 1;
        }
    }
    urls.push(text[start..].trim().to_string());
    urls
}

fn optional_positive(text: &Option<String>, flag: &str) -> Result<Option<Duration>> {
    let Some(text) = text else {
        return Ok(None);
    };
    let duration = parse_duration(text).with_context(|| format!("invalid {flag}"))?;
    if duration.is_zero() {
        bail!("invalid {flag}: it must be above 0");
    }
    Ok(Some(duration))
}

/// A humantime duration (`500ms`, `30s`, `1m 30s`), or a bare number of seconds as flock -w
/// takes it (`30`, `0.5`).
pub fn parse_duration(text: &str) -> Result<Duration> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds)
            .with_context(|| format!("{text:?} is not a duration"));
    }
    humantime::parse_duration(text).with_context(|| {
        format!("{text:?} is not a duration (use e.g. 500ms, 30s, 5m, or seconds as a number)")
    })
}

fn check_redis_url(target: &RedisTarget) -> Result<()> {
    let supported = [
        "redis://",
        "rediss://",
        "redis+unix://",
        "unix://",
        "redis+sentinel://",
        "rediss+sentinel://",
        "redis+cluster://",
        "rediss+cluster://",
    ];
    if !supported
        .iter()
        .any(|scheme| target.url.starts_with(scheme))
    {
        bail!(
            "invalid --redis URL {}: it must start with redis://, rediss://, redis+unix://, \
             redis+sentinel:// or redis+cluster://",
            target.display
        );
    }
    Endpoint::new(&target.url, &target.display)
        .map(drop)
        .map_err(|err| anyhow::anyhow!("invalid --redis URL {}: {}", target.display, err))
}

/// The URL with any password replaced by `***`: in `user:password@` and in a `pass=`,
/// `password=` or `sentinel_password=` query parameter (the unix-socket and Sentinel forms). Works on text, so it also covers URLs that fail to parse.
/// The user part runs to the *last* `@`: a password may hold `/`, `?`, `#` or `@` unescaped.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    // Passwords given as query parameters go first: their values may hold an `@`, which
    // would otherwise pass for the end of a user part.
    let rest = redact_query_passwords(rest);
    // A socket path has no user part; its password is a query parameter.
    let has_userinfo = !scheme.contains("unix");
    let (userinfo, rest) = match rest.rsplit_once('@').filter(|_| has_userinfo) {
        Some((userinfo, rest)) => (Some(userinfo), rest),
        None => (None, rest.as_str()),
    };
    let userinfo = match userinfo {
        Some(userinfo) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@"),
            None => format!("{userinfo}@"),
        },
        None => String::new(),
    };
    format!("{scheme}{userinfo}{rest}")
}

/// `text` with the value of every password-like query parameter (`pass`, `password`,
/// `sentinel_password`) replaced by `***`, up to the next `&`.
fn redact_query_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['?', '&']) {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let secret = ["pass=", "password=", "sentinel_password="]
            .into_iter()
            .find(|name| rest.starts_with(name));
        if let Some(name) = secret {
            out.push_str(name);
            out.push_str("***");
            rest = &rest[name.len()..];
            rest = &rest[rest.find('&').unwrap_or(rest.len())..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn config(args: &[&str]) -> Result<Config> {
        let mut argv = vec!["redlock-run"];
        argv.extend_from_slice(args);
        match Task::from_cli(Cli::try_parse_from(argv).expect("clap accepts"))? {
            Task::Run(config) => Ok(config),
            Task::Admin(admin) => panic!("parsed as {admin:?}"),
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("rediss://user:pw@redis.internal:6380/2"),
            "rediss://user:***@redis.internal:6380/2"
        );
        assert_eq!(
            redact_url("redis://:p@ss@host:1"),
            "redis://:***@host:1",
            "an unescaped @ in the password still hides all of it"
        );
        for tricky in ["s3cr/et", "s3cr?et", "s3cr#et", "a@b/c?d"] {
            let url = format!("redis://user:{tricky}@127.0.0.1:6379/2");
            let shown = redact_url(&url);
            assert_eq!(shown, "redis://user:***@127.0.0.1:6379/2", "{url}");
        }
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?pass=se@cret"),
            "redis+unix:///run/redis.sock?pass=***"
        );
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=1&pass=secret"),
            "redis+unix:///run/redis.sock?db=1&pass=***"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        // An `@` in a query password is not the end of a user part.
        assert_eq!(
            redact_url("redis+sentinel://s1/m?sentinel_password=p@ss"),
            "redis+sentinel://s1/m?sentinel_password=***"
        );
        assert_eq!(
            redact_url("redis+sentinel://u:pw@s1,s2/m?db=1&sentinel_password=p@ss&x=1"),
            "redis+sentinel://u:***@s1,s2/m?db=1&sentinel_password=***&x=1"
        );
        assert_eq!(
            redact_url("redis+sentinel://:pw@s1:26379,s2/mymaster/1?sentinel_password=spw"),
            "redis+sentinel://:***@s1:26379,s2/mymaster/1?sentinel_password=***"
        );
        assert_eq!(
            redact_url("redis+sentinel://s1,s2/m?sentinel_username=u&sentinel_password=s/p"),
            "redis+sentinel://s1,s2/m?sentinel_username=u&sentinel_password=***"
        );
        assert_eq!(
            redact_url("rediss+cluster://app:p@ss/w?rd@h1:7000,h2:7001"),
            "rediss+cluster://app:***@h1:7000,h2:7001"
        );
    }

    #[test]
    fn sentinel_and_cluster_urls() {
        for good in [
            "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
            "redis+sentinel://:pw@s1/mymaster/2?sentinel_password=x",
            "rediss+sentinel://s1,s2,s3/mymaster",
            "redis+cluster://127.0.0.1:7000",
            "rediss+cluster://user:pw@h1:7000,h2:7001,[::1]:7002",
        ] {
            assert!(
                config(&["-k", "j", "-r", good, "--", "true"]).is_ok(),
                "refused {good}"
            );
        }
        for bad in [
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:port/m",
            "redis+sentinel://s1/m?db=2",
            "redis+cluster://h1/3",
            "redis+cluster://h1,,h2",
            "redis+replica://h1",
        ] {
            let err = config(&["-k", "j", "-r", bad, "--", "true"]).unwrap_err();
            assert!(
                format!("{err:#}").starts_with("invalid --redis URL"),
                "{bad}: {err:#}"
            );
        }
    }

    #[test]
    fn defaults() {
        let config = config(&["-k", "job", "--", "true"]).unwrap();
        assert_eq!(config.key, "redlock:job");
        assert_eq!(config.ttl, Duration::from_secs(30));
        assert_eq!(config.renew_every, Duration::from_secs(10));
        assert_eq!(config.wait, Wait::Forever);
        assert_eq!(config.conflict_exit_code, 75);
        assert_eq!(config.kill_after, Duration::from_secs(10));
    }

    #[test]
    fn shell_and_prefix() {
        let config = config(&["-k", "job", "--prefix", "", "-c", "a | b"]).unwrap();
        assert_eq!(config.key, "job");
        assert_eq!(config.command_line(), "/bin/sh -c a | b");
    }

    #[test]
    fn bad_input_is_refused() {
        for args in [
            &["-k", "", "--", "true"][..],
            &["-k", "j", "-t", "0", "--", "true"],
            &["-k", "j", "-t", "50ms", "--", "true"],
            &["-k", "j", "-t", "1s", "--renew-every", "1s", "--", "true"],
            &["-k", "j", "-r", "http://x", "--", "true"],
            &["-k", "j", "-w", "soon", "--", "true"],
            &["-k", "j"],
        ] {
            assert!(config(args).is_err(), "accepted {args:?}");
        }
        let long_key = "k".repeat(MAX_KEY_LEN + 1);
        assert!(config(&["-k", &long_key, "--", "true"]).is_err());
        let longest_key = "k".repeat(MAX_KEY_LEN);
        assert!(config(&["-k", &longest_key, "--", "true"]).is_ok());
    }

    #[test]
    fn several_urls_make_a_quorum() {
        assert_eq!(
            split_urls("redis://a:1,rediss://:p,w@b:2/1, redis://c:3"),
            ["redis://a:1", "rediss://:p,w@b:2/1", "redis://c:3"]
        );
        // A comma inside one URL (a host list) does not split it.
        assert_eq!(
            split_urls("redis+sentinel://h1:26379,h2:26379/m"),
            ["redis+sentinel://h1:26379,h2:26379/m"]
        );
        let three = ["-r", "redis://a:1", "-r", "redis://b:1,redis://c:1"];
        let quorum = config(&[&three[..], &["-k", "j", "--", "true"]].concat()).unwrap();
        let shown: Vec<&str> = quorum.redis.iter().map(|t| t.display.as_str()).collect();
        assert_eq!(shown, ["redis://a:1", "redis://b:1", "redis://c:1"]);
        for refused in [
            &[
                "-r",
                "redis://a:1",
                "-r",
                "redis://127.0.0.1:1",
                "-r",
                "redis://a:1/0",
            ][..],
            &["-r", "redis://a:1", "-r", "redis://b:1", "--limit", "2"],
            &["-r", "redis://a:1", "-r", "redis://b:1", "--fair"],
            // One server under two databases, or as localhost and 127.0.0.1.
            &["-r", "redis://127.0.0.1:1/0", "-r", "redis://127.0.0.1:1/1"],
            &["-r", "redis://localhost:7", "-r", "redis://127.0.0.1:7"],
            &["-r", "redis://[::1]:7", "-r", "redis://LOCALHOST:7"],
        ] {
            let args = [refused, &["-k", "j", "--", "true"]].concat();
            assert!(config(&args).is_err(), "accepted {refused:?}");
        }
        let distinct = ["-r", "redis://127.0.0.1:1", "-r", "redis://127.0.0.1:2"];
        assert!(config(&[&distinct[..], &["-k", "j", "--", "true"]].concat()).is_ok());
    }

    #[test]
    fn waiting() {
        let no_wait = config(&["-k", "j", "-n", "--", "true"]).unwrap();
        assert_eq!(no_wait.wait, Wait::For(Duration::ZERO));
        let zero = config(&["-k", "j", "-w", "0", "--", "true"]).unwrap();
        assert_eq!(zero.wait, Wait::For(Duration::ZERO));
        let forever = config(&["-k", "j", "-w", "forever", "--", "true"]).unwrap();
        assert_eq!(forever.wait, Wait::Forever);
    }
}
