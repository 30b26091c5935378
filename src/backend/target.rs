//! Where the locks live, as the user named it: the `--redis` URLs (or `REDLOCK_REDIS`),
//! split, checked and given a printable form with every password replaced by `***`. One
//! URL is one deployment (a server, the master a set of Sentinels names, a cluster);
//! several are the independent masters of a Redlock quorum. Nothing is connected here:
//! `backend::open` and `inspect::Inspector::open` connect on first use.

use std::ops::Range;

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
#[derive(Clone)]
pub struct Deployment {
    targets: Vec<RedisTarget>,
    /// The password given apart from the URLs (a file, the environment), if any.
    password: Option<Password>,
    /// The entries as typed on this process's command line (not from the environment).
    typed: Vec<String>,
}

/// Printed with the URLs' safe forms only: the entries as typed hold the passwords.
impl std::fmt::Debug for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deployment")
            .field("targets", &self.targets)
            .field("password", &self.password)
            .finish_non_exhaustive()
    }
}

/// Where the URLs and a password came from.
#[derive(Clone, Default)]
pub struct Sources {
    /// The password from `--password-file` or `REDLOCK_PASSWORD`, for every URL that has
    /// none of its own.
    pub password: Option<Password>,
    /// The URLs were typed on the command line, where every local user can read them.
    pub typed: bool,
}

/// A password, never printed (its `Debug` says `***`).
#[derive(Clone)]
pub struct Password(pub String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl Deployment {
    /// Checks each URL (an entry may hold several, comma-separated, as `REDLOCK_REDIS`
    /// does), and gives `sources.password` to each that has no password of its own. Errors
    /// name a URL only in its redacted form.
    pub fn parse(entries: &[String], sources: Sources) -> Result<Deployment> {
        let mut targets: Vec<RedisTarget> = Vec::new();
        for url in entries.iter().flat_map(|text| split_urls(text)) {
            let display = redact_url(&url);
            let url = match &sources.password {
                Some(password) => with_password(&url, &password.0),
                None => url,
            };
            let target = RedisTarget { display, url };
            check_redis_url(&target)?;
            targets.push(target);
        }
        if targets.len() > MAX_NODES {
            bail!("too many --redis URLs: at most {MAX_NODES} Redlock nodes are supported");
        }
        if targets.len() > 1 {
            refuse_repeated_servers(&targets)?;
        }
        Ok(Deployment {
            targets,
            password: sources.password,
            typed: if sources.typed {
                entries.to_vec()
            } else {
                Vec::new()
            },
        })
    }

    pub fn targets(&self) -> &[RedisTarget] {
        &self.targets
    }

    /// Whether a node is a Redis Cluster, where one script's keys must share a hash slot.
    pub fn has_cluster(&self) -> bool {
        self.targets.iter().any(|target| {
            let scheme = target.url.split("://").next().unwrap_or_default();
            scheme.ends_with("+cluster")
        })
    }

    /// Several independent masters, held by majority.
    pub fn is_quorum(&self) -> bool {
        self.targets.len() > 1
    }

    /// Each secret text with its printable form, for redacting text that may hold one: every
    /// URL, and a password given apart.
    pub fn secrets(&self) -> Vec<(String, String)> {
        let urls = self
            .targets
            .iter()
            .map(|target| (target.url.clone(), target.display.clone()));
        let password = self
            .password
            .iter()
            .map(|password| (password.0.clone(), String::from("***")));
        urls.chain(password).collect()
    }

    /// The URLs typed on the command line that hold a password, each with its redacted
    /// form: every local user can read them in `ps` until they are overwritten. With a
    /// password given apart (a file, the environment), a user part without `:` is the
    /// user's name, not a password: the password is put after it.
    pub fn typed_secrets(&self) -> Vec<(String, String)> {
        let password_apart = self.password.is_some();
        self.typed
            .iter()
            .filter(|typed| match password_apart {
                false => holds_secret(typed),
                true => split_urls(typed)
                    .iter()
                    .any(|url| holds_password_beside(url)),
            })
            .map(|typed| (typed.clone(), redact_url(typed)))
            .collect()
    }
}

/// Whether `text` (a URL, or a comma-separated list of them) holds a password or a user
/// part that may be one.
pub fn holds_secret(text: &str) -> bool {
    !secret_ranges(text).is_empty()
}

/// Whether `url`, typed while a password is given apart, holds one of its own: the part
/// that `with_password` would put the password into (`user@host` names a user) is not one.
fn holds_password_beside(url: &str) -> bool {
    secret_ranges(&with_password(url, ""))
        .iter()
        .any(|range| !range.is_empty())
}

/// `url` with `password` as its password, unless it has one: in the user part for a TCP,
/// Sentinel or Cluster URL (`redis://user:PASSWORD@host`), as `pass=` for a unix socket.
/// Percent-escaped, as a URL's password is read.
fn with_password(url: &str, password: &str) -> String {
    let escaped: String = password
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            byte => format!("%{byte:02X}"),
        })
        .collect();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    if scheme.ends_with("unix") {
        if rest.contains("pass=") {
            return url.to_string();
        }
        let joiner = if rest.contains('?') { '&' } else { '?' };
        return format!("{url}{joiner}pass={escaped}");
    }
    // Only the part before the host list or path can be a user part.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((userinfo, _)) if userinfo.contains(':') => url.to_string(),
        Some((user, host)) => format!(
            "{scheme}://{user}:{escaped}@{host}{}",
            &rest[authority_end..]
        ),
        None => format!("{scheme}://:{escaped}@{rest}"),
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
pub(crate) fn split_urls(text: &str) -> Vec<String> {
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
/// forms). A user part without a `:` is hidden whole (`***@`): some clients read
/// `redis://SECRET@host` as a password. Works on text, so it also covers URLs that fail to
/// parse, and every scheme, `redis+unix://:pw@/path` included.
pub fn redact_url(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut from = 0;
    for range in secret_ranges(url) {
        out.push_str(&url[from..range.start]);
        out.push_str("***");
        from = range.end;
    }
    out.push_str(&url[from..]);
    out
}

/// The URL with every byte of its secrets replaced by `*`, keeping its length: for text
/// that must be overwritten in place (this process's command line).
pub fn mask_url(url: &str) -> String {
    let mut out = url.as_bytes().to_vec();
    for range in secret_ranges(url) {
        out[range].fill(b'*');
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Where `url`'s secrets are, in order: the values of password-like query parameters, up to
/// the next `&`; and the password of the user part, or the whole user part when it has no
/// `:`. The user part runs to the *last* `@` outside those values: a password may hold
/// `/`, `?`, `#` or `@` unescaped (a socket path with an `@` is hidden too: better too much
/// than too little).
fn secret_ranges(url: &str) -> Vec<Range<usize>> {
    let start = url.find("://").map_or(0, |at| at + 3);
    let mut ranges = Vec::new();
    let mut at = start;
    while let Some(found) = url[at..].find(['?', '&']) {
        at += found + 1;
        let secret = ["pass=", "password=", "sentinel_password="]
            .into_iter()
            .find(|name| url[at..].starts_with(name));
        if let Some(name) = secret {
            let value = at + name.len();
            let end = url[value..].find('&').map_or(url.len(), |end| value + end);
            ranges.push(value..end);
            at = end;
        }
    }
    let in_a_value = |pos: usize| ranges.iter().any(|range| range.contains(&pos));
    let user_end = url[start..]
        .match_indices('@')
        .map(|(pos, _)| start + pos)
        .rfind(|&pos| !in_a_value(pos));
    if let Some(end) = user_end {
        let secret_start = url[start..end].find(':').map_or(start, |c| start + c + 1);
        ranges.push(secret_start..end);
    }
    // The user part's secret swallows any query value inside it, and joins one it overlaps
    // (`redis://?pass=a:b@h`: both readings of the text are hidden).
    ranges.sort_by_key(|range| range.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    merged
}

#[cfg(test)]
mod tests;
