//! Dead-man pings (`--ping URL`), in the Healthchecks.io convention: `URL/start` when the
//! command starts, `URL` when it exits 0, `URL/<status>` when it fails, `URL/fail` when the
//! lock was lost or the command could not be run, and `URL/fail` with a body naming the
//! holder at the `--max-skips`-th consecutive skip.
//!
//! A ping never holds up the lock: the start ping goes from a thread of its own, the end
//! ping only after the release, within [`END_BUDGET`] (one attempt and one retry, each at
//! most [`ATTEMPT_TIMEOUT`]), and neither changes the exit status. All the failures of a
//! run's pings make one warning, at its end.
//!
//! The URL is a secret (it holds the check's key): [`PingUrl`] never shows it, not in
//! `Debug` either, and an HTTP error is reported by its kind only, never by the HTTP
//! crate's own message (which may quote the URL). This module knows nothing of Redis or
//! processes: what to send is decided by `run`.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::report;

/// How long one ping may take: connecting, sending and reading the answer.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the end of a run may spend on its ping after the release: the start ping's
/// last moments (so that the end never arrives first), one attempt and one retry.
pub const END_BUDGET: Duration = Duration::from_secs(5);
/// The least time left that is still worth a retry.
const LEAST_RETRY: Duration = Duration::from_millis(200);
/// The most of an answer read: a ping's answer is `OK`.
const ANSWER_LIMIT: u64 = 4096;

/// A ping URL, checked: `http://` or `https://`, with a host. Shown nowhere.
#[derive(Clone)]
pub struct PingUrl {
    /// Everything before the query, without a trailing `/`.
    base: String,
    /// `?…`, or empty.
    query: String,
    https: bool,
    /// As given, to hide it from `ps` and panics.
    given: String,
}

impl fmt::Debug for PingUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PingUrl(***)")
    }
}

impl PingUrl {
    /// Checks `text`; the error never quotes it.
    pub fn parse(text: &str) -> Result<PingUrl> {
        const HIDDEN: &str = "(the URL is not shown: it holds the check's key)";
        let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
        let https = lower.starts_with("https://");
        if !https && !lower.starts_with("http://") {
            bail!("invalid --ping: the URL must start with http:// or https:// {HIDDEN}");
        }
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            bail!("invalid --ping: the URL has a space or a control character {HIDDEN}");
        }
        let uri: ureq::http::Uri = match text.parse() {
            Ok(uri) => uri,
            Err(_) => bail!("invalid --ping: the URL cannot be read as a URL {HIDDEN}"),
        };
        if uri.host().is_none_or(str::is_empty) {
            bail!("invalid --ping: the URL has no host {HIDDEN}");
        }
        // The URL parser reads a port of 99999 as no port at all: it would only fail at the
        // ping, and as a host name that could not be resolved.
        let authority = uri.authority().map_or("", |authority| authority.as_str());
        let host_port = authority
            .rsplit_once('@')
            .map_or(authority, |(_, rest)| rest);
        let port = match host_port.rsplit_once(':') {
            Some((_, port)) if !host_port.ends_with(']') && !port.is_empty() => Some(port),
            _ => None,
        };
        if port.is_some_and(|port| !matches!(port.parse::<u16>(), Ok(1..))) {
            bail!("invalid --ping: the URL's port is not a number from 1 to 65535 {HIDDEN}");
        }
        // A fragment is never sent; the query goes after the path we add.
        let text_without_fragment = text.split('#').next().unwrap_or(text);
        let (base, query) = match text_without_fragment.split_once('?') {
            Some((base, query)) => (base, format!("?{query}")),
            None => (text_without_fragment, String::new()),
        };
        Ok(PingUrl {
            base: base.trim_end_matches('/').to_string(),
            query,
            https,
            given: text.to_string(),
        })
    }

    /// The URL as given: for hiding it (`ps`, panics) only.
    pub fn as_given(&self) -> &str {
        &self.given
    }

    fn with_path(&self, path: &str) -> String {
        format!("{}{path}{}", self.base, self.query)
    }

    /// Removes every form of this URL from `text` (defence in depth, for error texts).
    fn scrub(&self, text: &str) -> String {
        let mut text = text.replace(&self.given, "***");
        if let Some((_, path)) = self
            .base
            .split_once("://")
            .and_then(|(_, r)| r.split_once('/'))
        {
            if !path.is_empty() {
                text = text.replace(path, "***");
            }
        }
        if self.query.len() > 1 {
            text = text.replace(&self.query[1..], "***");
        }
        text
    }
}

/// What `--ping` and `--max-skips` ask for.
#[derive(Debug, Clone)]
pub struct PingConfig {
    pub url: PingUrl,
    /// The consecutive skip that raises the alarm, and every later one.
    pub max_skips: Option<u64>,
    /// Typed on the command line (hidden from `ps`), not taken from `REDLOCK_PING`.
    pub typed: bool,
}

/// How a run ended, for its end ping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The command exited 0: `URL`.
    Success,
    /// The run failed with this exit status: `URL/<status>`.
    Status(u8),
    /// The lock was lost, or the command could not be run: `URL/fail`.
    Fail,
    /// The `--max-skips`-th consecutive skip (or a later one): `URL/fail`, with a body.
    SkipAlarm { body: String },
}

/// One run's pings.
pub struct Pinger {
    url: PingUrl,
    /// The start ping on its way, with the client it made.
    start: Option<JoinHandle<(Agent, Option<String>)>>,
}

type Agent = Arc<ureq::Agent>;

impl Pinger {
    pub fn new(url: PingUrl) -> Pinger {
        Pinger { url, start: None }
    }

    /// `URL/start`, from a thread: the command does not wait for it.
    pub fn started(&mut self) {
        let url = self.url.clone();
        let sent = std::thread::Builder::new()
            .name("ping".into())
            .spawn(move || {
                let agent = make_agent(&url);
                let failed = send(
                    &agent,
                    &url,
                    "/start",
                    None,
                    Instant::now() + ATTEMPT_TIMEOUT,
                )
                .err()
                .map(|why| format!("the start ping failed ({why})"));
                (agent, failed)
            });
        match sent {
            Ok(handle) => self.start = Some(handle),
            Err(_) => report::warn(format_args!(
                "cannot send the --ping start ping: no thread could be started for it"
            )),
        }
    }

    /// The end ping, after the release: waits for the start ping to be done (so that the
    /// end never comes first), then sends, retrying once, all within [`END_BUDGET`]. Warns
    /// once for every failure of the run's pings.
    pub fn finish(mut self, end: End) {
        let deadline = Instant::now() + END_BUDGET;
        let mut failures = Vec::new();
        let mut agent = None;
        if let Some(start) = self.start.take() {
            // The start thread ends within ATTEMPT_TIMEOUT of its start, inside the budget.
            match start.join() {
                Ok((made, failed)) => {
                    agent = Some(made);
                    failures.extend(failed);
                }
                Err(_) => failures.push(String::from("the start ping failed")),
            }
        }
        let agent = agent.unwrap_or_else(|| make_agent(&self.url));
        let (path, body) = match &end {
            End::Success => ("", None),
            End::Status(code) => (&*format!("/{code}"), None),
            End::Fail => ("/fail", None),
            End::SkipAlarm { body } => ("/fail", Some(body.as_str())),
        };
        let path = path.to_string();
        let mut outcome = send(&agent, &self.url, &path, body, deadline);
        if outcome.is_err() && deadline.saturating_duration_since(Instant::now()) >= LEAST_RETRY {
            outcome = send(&agent, &self.url, &path, body, deadline);
        }
        if let Err(why) = outcome {
            failures.push(format!("the end ping failed twice ({why})"));
        }
        if !failures.is_empty() {
            report::warn(format_args!(
                "--ping: {}; the run's exit status is unchanged",
                self.url.scrub(&failures.join("; "))
            ));
        }
    }
}

/// A client with our timeouts, and for HTTPS the system's roots through rustls with ring
/// (the TLS stack of `rediss://`).
fn make_agent(url: &PingUrl) -> Agent {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(ATTEMPT_TIMEOUT))
        .user_agent(concat!("redlock-run/", env!("CARGO_PKG_VERSION")));
    if url.https {
        let roots = rustls_native_certs::load_native_certs();
        let certs: Vec<ureq::tls::Certificate<'static>> = roots
            .certs
            .iter()
            .map(|der| ureq::tls::Certificate::from_der(der.as_ref()).to_owned())
            .collect();
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .build();
        config = config.tls_config(tls);
    }
    Arc::new(config.build().new_agent())
}

/// One request, given up at `deadline` (and after [`ATTEMPT_TIMEOUT`] in any case). The
/// error says what failed, never where.
fn send(
    agent: &ureq::Agent,
    url: &PingUrl,
    path: &str,
    body: Option<&str>,
    deadline: Instant,
) -> std::result::Result<(), String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(String::from("no time left"));
    }
    let timeout = Some(left.min(ATTEMPT_TIMEOUT));
    let target = url.with_path(path);
    let answer = match body {
        None => agent
            .get(&target)
            .config()
            .timeout_global(timeout)
            .build()
            .call(),
        Some(body) => agent
            .post(&target)
            .config()
            .timeout_global(timeout)
            .build()
            .content_type("text/plain; charset=utf-8")
            .send(body),
    };
    match answer {
        Ok(mut response) => {
            let status = response.status().as_u16();
            // Read (a little of) the answer so that the server sees a complete exchange.
            let _ = response
                .body_mut()
                .with_config()
                .limit(ANSWER_LIMIT)
                .read_to_vec();
            if (200..300).contains(&status) {
                Ok(())
            } else {
                Err(format!("HTTP status {status}"))
            }
        }
        Err(err) => Err(describe(&err)),
    }
}

/// An HTTP error by its kind: the HTTP crate's own messages may quote the URL.
fn describe(err: &ureq::Error) -> String {
    use ureq::Error;
    match err {
        Error::StatusCode(status) => format!("HTTP status {status}"),
        Error::Timeout(_) => String::from("timed out"),
        Error::HostNotFound => String::from("host not found"),
        Error::ConnectionFailed => String::from("connection failed"),
        // The resolver's failure is an I/O error of no kind ("uncategorized"): its text
        // (std's, which names no host) says what failed.
        Error::Io(io) if io.to_string().starts_with("failed to lookup address") => {
            String::from("the host name could not be resolved")
        }
        Error::Io(io) => format!("{}", io.kind()),
        Error::Tls(what) => format!("TLS: {what}"),
        Error::Rustls(_) => String::from("TLS handshake failed"),
        Error::TooManyRedirects | Error::RedirectFailed => String::from("redirected"),
        _ => String::from("the request failed"),
    }
}

/// The body of the skip alarm: how many runs in a row skipped, and who stood in the way
/// (`held by …`, `superseded by …`, `done at … by …`).
pub fn skip_alarm_body(key: &str, skips: u64, reason: &str, who: &str) -> String {
    format!(
        "redlock-run: {key}: {skips} consecutive runs did not run their command (this one: \
         {reason}); {who}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_are_taken_and_none_is_quoted() {
        for bad in [
            "ftp://h/secret-path",
            "hc-ping.com/secret-path",
            "http:///secret-path",
            "http://h/secret path",
            "",
            "http://",
            "\u{202e}http://h/secret-path",
        ] {
            let err = PingUrl::parse(bad).expect_err(bad);
            let text = format!("{err:#}");
            assert!(!text.contains("secret"), "{text}");
            assert!(text.starts_with("invalid --ping"), "{text}");
        }
        let url = PingUrl::parse("HTTPS://hc.example/ping/abc-secret/?create=1#x").unwrap();
        assert!(url.https);
        assert_eq!(
            url.with_path("/start"),
            "HTTPS://hc.example/ping/abc-secret/start?create=1"
        );
        assert_eq!(format!("{url:?}"), "PingUrl(***)");
        let url = PingUrl::parse("http://127.0.0.1:8000/x").unwrap();
        assert_eq!(url.with_path(""), "http://127.0.0.1:8000/x");
        assert_eq!(url.with_path("/3"), "http://127.0.0.1:8000/x/3");
    }

    /// A name the resolver cannot find (`.invalid` never resolves) is said as such, not as
    /// an "uncategorized error", and the name is not shown.
    #[test]
    fn an_unresolved_host_is_named_as_such() {
        let url = PingUrl::parse("http://secret-name.invalid/ping/abc-secret").unwrap();
        let agent = make_agent(&url);
        let why = send(&agent, &url, "", None, Instant::now() + ATTEMPT_TIMEOUT).unwrap_err();
        // (Where no resolver answers at all, the attempt times out instead.)
        assert!(
            [
                "the host name could not be resolved",
                "host not found",
                "timed out"
            ]
            .contains(&why.as_str()),
            "{why}"
        );
    }

    #[test]
    fn scrubbed_texts_hold_no_part_of_the_url() {
        let url = PingUrl::parse("https://h.example/ping/abc-secret?k=val-secret").unwrap();
        let text = url.scrub(
            "GET https://h.example/ping/abc-secret/start?k=val-secret failed: ping/abc-secret",
        );
        assert!(!text.contains("secret"), "{text}");
    }
}
