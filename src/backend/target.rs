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

    /// The URLs typed on the command line that hold a secret, each with its masked form (the
    /// same length, secrets as `*`): every local user can read them in `ps` until they are
    /// overwritten.
    pub fn typed_secrets(&self) -> Vec<(String, String)> {
        self.typed
            .iter()
            .map(|typed| (typed.clone(), mask_url(typed)))
            .filter(|(typed, masked)| typed != masked)
            .collect()
    }
}

/// Whether `text` (a URL, or a comma-separated list of them) holds a password or a user
/// part that may be one.
pub fn holds_secret(text: &str) -> bool {
    !secret_ranges(text).is_empty()
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
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        // Forms that once went through in clear.
        assert_eq!(
            redact_url("redis+unix://:s3cret@/run/redis.sock"),
            "redis+unix://:***@/run/redis.sock"
        );
        assert_eq!(redact_url("redis://s3cret@host:1"), "redis://***@host:1");
        assert_eq!(
            redact_url("unix://s3cret@/run/r.sock"),
            "unix://***@/run/r.sock"
        );
        assert_eq!(redact_url("s3cret@host"), "***@host");
        assert_eq!(redact_url("bogus://u:p@"), "bogus://u:***@");
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
        // Found by a property test: a parameter before the user part's `:` was shown.
        assert_eq!(redact_url("redis://?pass=Qx:Zv&@h"), "redis://?pass=***@h");
        assert_eq!(mask_url("redis://?pass=Qx:Zv&@h"), "redis://?pass=******@h");
    }

    #[test]
    fn a_password_given_apart_goes_where_the_url_has_none() {
        let pw = "p@ss/w:rd";
        let escaped = "p%40ss%2Fw%3Ard";
        assert_eq!(
            with_password("redis://h:1/2", pw),
            format!("redis://:{escaped}@h:1/2")
        );
        assert_eq!(
            with_password("rediss://alice@h:1", pw),
            format!("rediss://alice:{escaped}@h:1")
        );
        assert_eq!(with_password("redis://a:own@h", pw), "redis://a:own@h");
        assert_eq!(
            with_password("redis+unix:///run/r.sock?db=1", pw),
            format!("redis+unix:///run/r.sock?db=1&pass={escaped}")
        );
        assert_eq!(
            with_password("redis+sentinel://s1,s2/m?sentinel_password=x", pw),
            format!("redis+sentinel://:{escaped}@s1,s2/m?sentinel_password=x")
        );
        let deployment = Deployment::parse(
            &["redis://h:1".into()],
            Sources {
                password: Some(Password(pw.into())),
                typed: false,
            },
        )
        .unwrap();
        assert_eq!(deployment.targets()[0].display, "redis://h:1");
        let info =
            redis::IntoConnectionInfo::into_connection_info(deployment.targets()[0].url.as_str())
                .unwrap();
        assert_eq!(info.redis_settings().password(), Some(pw));
        assert!(deployment
            .secrets()
            .contains(&(pw.to_string(), "***".to_string())));
    }

    #[test]
    fn typed_urls_are_masked_in_place() {
        let typed = "redis://u:s3cr3t@h:1";
        assert_eq!(mask_url(typed), "redis://u:******@h:1");
        let deployment = Deployment::parse(
            &[typed.into(), "redis://other:2".into()],
            Sources {
                password: None,
                typed: true,
            },
        )
        .unwrap();
        assert_eq!(
            deployment.typed_secrets(),
            [(typed.to_string(), "redis://u:******@h:1".to_string())]
        );
        assert!(holds_secret(typed) && !holds_secret("redis://h:1"));
        // Found by fuzzing: the debug form once listed the typed URLs as they were.
        let debug = format!("{deployment:?}");
        assert!(!debug.contains("s3cr3t"), "{debug}");
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

    /// Pieces of URLs: every character that ends or starts a part, some text beyond ASCII.
    const PIECE: &str = "[a-z0-9:/?#@&=,.%é+_ \\[\\]-]{0,10}";
    const SCHEMES: [&str; 10] = [
        "redis",
        "rediss",
        "redis+unix",
        "unix",
        "redis+sentinel",
        "rediss+sentinel",
        "redis+cluster",
        "rediss+cluster",
        "bogus",
        "",
    ];

    /// A password: marked, so that no other part of a URL or of a message can hold it, with
    /// what may end a part in the middle. What the redaction rule reads otherwise is left
    /// out: a `pass=` parameter inside the password itself; `://` (an entry is split where
    /// another URL seems to start); `*` (the masking character).
    fn password(forbidden: &'static str) -> impl Strategy<Value = String> {
        PIECE
            .prop_filter("a password the rule can tell", move |middle| {
                !middle.contains("pass=")
                    && !middle.contains("password=")
                    && !middle.contains("://")
                    && !middle.contains(|c| forbidden.contains(c))
            })
            .prop_map(|middle| format!("Qx{middle}Zv"))
    }

    /// Where a password sits in `url`, it is masked byte for byte, left out of the
    /// redacted form, and in no error or debug form that `Deployment::parse` gives.
    fn assert_hidden(url: &str, password: &str) -> Result<(), TestCaseError> {
        let at = url.find(password).expect("the password is in the URL");
        let masked = mask_url(url);
        prop_assert!(
            masked.as_bytes()[at..at + password.len()]
                .iter()
                .all(|&b| b == b'*'),
            "{} masked as {}",
            url,
            masked
        );
        prop_assert!(holds_secret(url));
        let redacted = redact_url(url);
        prop_assert!(
            !redacted.contains(password),
            "{} shown as {}",
            url,
            redacted
        );
        let sources = Sources {
            password: None,
            typed: true,
        };
        let shown = match Deployment::parse(&[url.to_string()], sources) {
            Ok(deployment) => format!("{deployment:?} {:?}", deployment.typed_secrets()[0].1),
            Err(err) => format!("{err:#}"),
        };
        prop_assert!(!shown.contains(password), "{} gave {}", url, shown);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn any_text_is_redacted_or_refused_without_a_panic(text in "\\PC{0,40}|[a-z:/?@&=,]{0,40}") {
            let masked = mask_url(&text);
            prop_assert_eq!(masked.len(), text.len());
            prop_assert!(holds_secret(&text) || (redact_url(&text) == text && masked == text));
            let _ = Deployment::parse(std::slice::from_ref(&text), Sources::default());
            for url in split_urls(&text) {
                prop_assert!(text.contains(&url));
            }
        }

        #[test]
        fn a_user_part_password_is_hidden(
            scheme in prop::sample::select(&SCHEMES[..]),
            user in PIECE,
            password in password(""),
            rest in PIECE,
        ) {
            assert_hidden(&format!("{scheme}://{user}:{password}@{rest}"), &password)?;
        }

        /// (Unless a `:` and another `@` follow: the user part then runs on to that `@`, and
        /// the text before its `:` is a user name.)
        #[test]
        fn a_user_part_without_a_colon_is_hidden(
            scheme in prop::sample::select(&SCHEMES[..]),
            secret in password(":"),
            rest in PIECE.prop_filter("no user name", |rest| {
                rest.rsplit_once('@').is_none_or(|(before, _)| !before.contains(':'))
            }),
        ) {
            assert_hidden(&format!("{scheme}://{secret}@{rest}"), &secret)?;
        }

        #[test]
        fn a_password_parameter_is_hidden(
            scheme in prop::sample::select(&SCHEMES[..]),
            before in PIECE,
            name in prop::sample::select(&["pass", "password", "sentinel_password"][..]),
            password in password("&"),
            after in PIECE,
        ) {
            let url = format!("{scheme}://{before}?{name}={password}&{after}");
            assert_hidden(&url, &password)?;
        }

        #[test]
        fn a_password_given_apart_is_never_shown(
            scheme in prop::sample::select(&SCHEMES[..]),
            rest in PIECE,
            password in password(""),
        ) {
            let sources = Sources {
                password: Some(Password(password.clone())),
                typed: true,
            };
            let shown = match Deployment::parse(&[format!("{scheme}://{rest}")], sources) {
                Ok(deployment) => format!("{deployment:?}"),
                Err(err) => format!("{err:#}"),
            };
            prop_assert!(!shown.contains(&password), "{}", shown);
        }
    }
}
