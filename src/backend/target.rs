//! Where the locks live, as the user named it: the `--redis` URLs (or `REDLOCK_REDIS`),
//! split, checked and given a printable form with every password replaced by `***`. One
//! URL is one deployment (a server, the master a set of Sentinels names, a cluster);
//! several are the independent masters of a Redlock quorum. Nothing is connected here:
//! `backend::open` and `inspect::Inspector::open` connect on first use.

use anyhow::{anyhow, bail, Result};

use super::endpoint::Endpoint;

/// Most Redlock nodes one run talks to (one thread and connection each).
pub const MAX_NODES: usize = 15;

/// One URL: as given (it may hold a password) and a form safe to print.
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

/// One Redis deployment, or the nodes of a Redlock quorum; checked, not connected.
#[derive(Debug, Clone)]
pub struct Deployment {
    targets: Vec<RedisTarget>,
}

impl Deployment {
    /// Checks each URL (an entry may hold several, comma-separated, as `REDLOCK_REDIS`
    /// does). Errors name a URL only in its redacted form.
    pub fn parse(entries: &[String]) -> Result<Deployment> {
        let mut targets: Vec<RedisTarget> = Vec::new();
        for url in entries.iter().flat_map(|text| split_urls(text)) {
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
        Ok(Deployment { targets })
    }

    pub fn targets(&self) -> &[RedisTarget] {
        &self.targets
    }

    /// Several independent masters, held by majority.
    pub fn is_quorum(&self) -> bool {
        self.targets.len() > 1
    }

    /// Each URL with its printable form, for redacting text that may hold one.
    pub fn secrets(&self) -> Vec<(String, String)> {
        self.targets
            .iter()
            .map(|target| (target.url.clone(), target.display.clone()))
            .collect()
    }
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
        .map_err(|err| anyhow!("invalid --redis URL {}: {}", target.display, err))
}

/// The URL with any password replaced by `***`: in `user:password@` and in a `pass=`,
/// `password=` or `sentinel_password=` query parameter (the unix-socket and Sentinel
/// forms). Works on text, so it also covers URLs that fail to parse. The user part runs to
/// the *last* `@`: a password may hold `/`, `?`, `#` or `@` unescaped.
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
    fn urls_split_where_a_new_one_starts() {
        assert_eq!(
            split_urls("redis://a:1,rediss://:p,w@b:2/1, redis://c:3"),
            ["redis://a:1", "rediss://:p,w@b:2/1", "redis://c:3"]
        );
        // A comma inside one URL (a host list) does not split it.
        assert_eq!(
            split_urls("redis+sentinel://h1:26379,h2:26379/m"),
            ["redis+sentinel://h1:26379,h2:26379/m"]
        );
    }
}
