//! What a failure to talk to Redis is, at the bottom of the backend: one line that names
//! the server (never with a password), and whether trying again may help. Every layer above
//! (endpoint discovery, the connection, the lock protocol, the quorum) describes its
//! failures here, so that "transient" means the same everywhere.

use std::time::{Duration, Instant};

use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};

/// A failed request to a Redis deployment, with its [`Failure`]: a passing fault worth
/// retrying (the waiter keeps waiting, the acquire retries once), or a refusal that will not
/// change.
#[derive(Debug)]
pub struct BackendError {
    pub message: String,
    pub failure: Failure,
}

/// What kind of failure a [`BackendError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The network or the server was briefly away: retrying may succeed.
    Transient,
    /// The server answered, but asked to be asked later: it is loading its data, busy with
    /// a script, cut off from its master, failing over, or at its client limit. Transient
    /// too.
    TryLater,
    /// The user's ACL refused a command, key or channel.
    Permission,
    /// A refusal that will not change (authentication, a server error, a name no sentinel
    /// knows).
    Permanent,
}

impl BackendError {
    pub fn new(message: String, failure: Failure) -> BackendError {
        BackendError { message, failure }
    }

    /// A failure that may pass.
    pub fn transient(message: String) -> BackendError {
        BackendError::new(message, Failure::Transient)
    }

    /// A transient failure when `transient`, else a permanent one.
    pub fn transient_if(transient: bool, message: String) -> BackendError {
        let failure = if transient {
            Failure::Transient
        } else {
            Failure::Permanent
        };
        BackendError::new(message, failure)
    }

    fn is_transient(&self) -> bool {
        matches!(self.failure, Failure::Transient | Failure::TryLater)
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BackendError {}

/// Whether retrying the same request may succeed (the network or server was briefly away).
pub fn is_transient(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<BackendError>())
        .any(BackendError::is_transient)
}

/// Whether the server answered "not now" (see [`Failure::TryLater`]).
pub fn is_try_later(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<BackendError>())
        .any(|cause| cause.failure == Failure::TryLater)
}

/// Whether the user's ACL refused something redlock-run asked for.
pub fn is_refused_by_acl(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<BackendError>())
        .any(|cause| cause.failure == Failure::Permission)
}

/// How long the next step may take: `timeout`, or less if `deadline` is sooner. Once the
/// deadline has passed, a timeout error, as a read that waited too long would give, so that
/// `endpoint`'s searches describe it like one. A call here passes it on as a plain message
/// (`anyhow::Error::msg`: `{:#}` would repeat the I/O error under it).
pub(super) fn time_left(timeout: Duration, deadline: Option<Instant>) -> RedisResult<Duration> {
    let Some(deadline) = deadline else {
        return Ok(timeout);
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_millis(1) {
        let out = std::io::Error::new(std::io::ErrorKind::TimedOut, "no time left to reach Redis");
        return Err(out.into());
    }
    Ok(left.min(timeout))
}

/// Turns a Redis error into one line that says what failed and where, never with a password.
pub(super) fn describe_error(err: RedisError, display: &str) -> anyhow::Error {
    let message = match err.kind() {
        _ if needs_credentials(&err) => format!(
            "authentication required at {display}: the server wants a password (in the URL, \
             REDLOCK_PASSWORD or --password-file), and a user name if it uses ACL users"
        ),
        _ if is_permission_error(&err) => format!(
            "{display} refused a command redlock-run needs: {}; see docs/security.md \
             for the ACL rules a user of redlock-run needs",
            permission_detail(&err)
        ),
        _ if is_auth_error(&err) => format!("authentication failed at {display}: {err}"),
        ErrorKind::Io if err.is_connection_refusal() => {
            format!("cannot connect to {display}: {err}")
        }
        // The OS says "Resource temporarily unavailable" for a read that timed out.
        ErrorKind::Io if err.is_timeout() => format!("no answer in time from {display}"),
        ErrorKind::Io => format!("connection to {display} failed: {err}"),
        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask) => {
            format!("{display} is a Redis Cluster node ({err}): use a redis+cluster:// URL")
        }
        ErrorKind::Server(_) => format!("{display} answered with an error: {err}"),
        // The reply is not in Redis's protocol at all (an HTTP server's "HTTP/1.1 400"):
        // the parser's own words, bytes by number, would only puzzle.
        ErrorKind::Parse if err.to_string().contains("Parse error at") => format!(
            "{display} is not a Redis server: it answered in another protocol (is the host \
             and port right?)"
        ),
        _ => format!("request to {display} failed: {err}"),
    };
    // READONLY: the server was the master and is a replica now (a failover); the others: it
    // is starting, cut off from its master, or its cluster is re-forming. Another try, on a
    // new connection, may find the right server.
    let failing_over = matches!(
        err.code(),
        Some("READONLY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN")
    );
    // Try later: a script running too long (BUSY), or the server at its client limit.
    let busy = err.code() == Some("BUSY") || err.to_string().contains("max number of clients");
    // A permission error is a server's reply, never an I/O fault, a timeout or one of the
    // codes above: the order of these tests decides nothing.
    let failure = if failing_over || busy {
        Failure::TryLater
    } else if err.is_io_error() || err.is_timeout() || err.is_connection_dropped() {
        Failure::Transient
    } else if is_permission_error(&err) {
        Failure::Permission
    } else {
        Failure::Permanent
    };
    anyhow::Error::new(BackendError::new(message, failure))
}

/// A TLS connection whose server did not answer in time (`waited`): most often a plain
/// server behind a `rediss://` URL, which reads the TLS handshake as the start of a command
/// and waits for its end. Said so, with how long it waited, not only "no answer in time".
pub(super) fn tls_unanswered(mut err: anyhow::Error, waited: Duration) -> anyhow::Error {
    if let Some(described) = err.downcast_mut::<BackendError>() {
        described.message = format!(
            "{} within {}: if that server does not use TLS, use a redis:// URL, not rediss://",
            described.message,
            crate::report::duration(waited)
        );
    }
    err
}

/// Whether the server turned our credentials, or what they allow, down: a refusal that
/// retrying will not change.
pub(super) fn is_auth_error(err: &RedisError) -> bool {
    err.kind() == ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS"))
        || needs_credentials(err)
        || is_permission_error(err)
}

/// Whether the server wants credentials we did not give: `NOAUTH`, or the protocol error
/// Redis 7 answers an unauthenticated client's longer request with.
fn needs_credentials(err: &RedisError) -> bool {
    err.code() == Some("NOAUTH") || err.to_string().contains("unauthenticated")
}

/// Whether the user's ACL forbids a command, key or channel: `NOPERM` from the server, or
/// raised by a script of ours (`scripts/prelude.lua`) as `... NOPERM <what> ...`.
pub(super) fn is_permission_error(err: &RedisError) -> bool {
    err.code() == Some("NOPERM") || err.to_string().contains("NOPERM ")
}

/// What the ACL refused, from a permission error: the text from `NOPERM` on, without the
/// script's name and line that Redis adds.
fn permission_detail(err: &RedisError) -> String {
    let text = err.detail().map_or_else(|| err.to_string(), str::to_string);
    let text = match text.find("NOPERM ") {
        Some(at) => &text[at + "NOPERM ".len()..],
        None => text.as_str(),
    };
    let text = text.split(" script: ").next().unwrap_or(text);
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(line: &str) -> RedisError {
        let reply = redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap();
        reply.extract_error().unwrap_err()
    }

    #[test]
    fn refused_credentials_are_auth_errors_however_they_come() {
        // The handshake's own failure (a bad password at connect) and a server's refusal
        // afterwards are both permanent: no retry, no waiting.
        let at_connect = RedisError::from((ErrorKind::AuthenticationFailed, "bad password"));
        assert!(is_auth_error(&at_connect));
        for line in [
            "NOAUTH Authentication required.",
            "WRONGPASS invalid",
            "NOPERM no",
            "ERR user_script:1: NOPERM the ACL does not allow GET script: 62cd, on @user_script:1.",
        ] {
            assert!(is_auth_error(&server_error(line)), "{line}");
        }
        assert!(!is_auth_error(&server_error("READONLY replica")));
        let described = describe_error(at_connect, "redis://h:1");
        assert!(!is_transient(&described), "{described:#}");
        assert!(format!("{described:#}").starts_with("authentication failed at redis://h:1"));
    }

    #[test]
    fn each_failure_has_one_kind() {
        let kind = |line: &str| {
            let described = describe_error(server_error(line), "R");
            (
                is_transient(&described),
                is_try_later(&described),
                is_refused_by_acl(&described),
            )
        };
        assert_eq!(kind("READONLY replica"), (true, true, false));
        assert_eq!(kind("BUSY script"), (true, true, false));
        assert_eq!(kind("NOPERM no"), (false, false, true));
        assert_eq!(kind("ERR wrong"), (false, false, false));
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let described = describe_error(io, "R");
        assert!(is_transient(&described) && !is_try_later(&described));
        let quorum = anyhow::Error::new(BackendError::transient_if(false, String::from("no")));
        assert!(!is_transient(&quorum));
    }

    #[test]
    fn each_refusal_is_named_for_what_it_is() {
        let described = |line: &str| format!("{:#}", describe_error(server_error(line), "R"));
        assert!(described("NOAUTH Authentication required.")
            .starts_with("authentication required at R: the server wants a password"));
        assert!(
            described("ERR Protocol error: unauthenticated multibulk length")
                .starts_with("authentication required at R")
        );
        assert_eq!(
            described(
                "ERR Error running script (call to f_d3): @user_script:1: user_script:1: \
                 NOPERM the ACL of this user does not allow PEXPIRE, which redlock-run needs"
            ),
            "R refused a command redlock-run needs: the ACL of this user does not allow \
             PEXPIRE, which redlock-run needs; see docs/security.md for the ACL rules a \
             user of redlock-run needs"
        );
        assert!(described(
            "NOPERM this user has no permissions to access one of the keys used as arguments"
        )
        .contains("refused a command redlock-run needs: this user has no permissions to access"));
        assert!(described("WRONGPASS invalid").starts_with("authentication failed at R"));
    }

    #[test]
    fn a_reply_in_another_protocol_is_not_redis() {
        let err = redis::parse_redis_value(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap_err();
        let described = format!("{:#}", describe_error(err, "redis://:***@h:80"));
        assert_eq!(
            described,
            "redis://:***@h:80 is not a Redis server: it answered in another protocol (is the \
             host and port right?)"
        );
        // A reply of another type than expected is Redis's, and says so.
        let typed =
            RedisError::from(redis::from_redis_value::<i64>(redis::Value::Nil).unwrap_err());
        assert!(!format!("{:#}", describe_error(typed, "R")).contains("not a Redis server"));
    }

    #[test]
    fn time_left_is_the_sooner_of_timeout_and_deadline() {
        let second = Duration::from_secs(1);
        assert_eq!(time_left(second, None).unwrap(), second);
        let soon = Instant::now() + Duration::from_millis(200);
        assert!(time_left(second, Some(soon)).unwrap() <= Duration::from_millis(200));
        let far = Instant::now() + Duration::from_secs(60);
        assert_eq!(time_left(second, Some(far)).unwrap(), second);
        let past = time_left(second, Some(Instant::now())).unwrap_err();
        assert!(past.is_timeout(), "{past}");
        // Described like any read that waited too long: worth another try.
        assert!(is_transient(&describe_error(past, "redis://h:1")));
    }
}

/// A server without the subscription commands: no release notice can be heard from it,
/// so a waiter looks often instead, as it does when its ACL refuses the channel.
#[derive(Debug)]
pub struct NoSubscription(String);

impl std::fmt::Display for NoSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoSubscription {}

/// Whether `err` says the server cannot carry a subscription at all.
pub fn cannot_subscribe(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|cause| cause.downcast_ref::<NoSubscription>().is_some())
}

/// A failed subscription, described: `NoSubscription` for a server that lacks the
/// command, as `describe_error` says otherwise.
pub(super) fn subscription_error(err: RedisError, display: &str) -> anyhow::Error {
    if is_unknown_command(&err) {
        return anyhow::Error::new(NoSubscription(format!(
            "{display} does not know SUBSCRIBE (renamed away in its configuration?)"
        )));
    }
    describe_error(err, display)
}

/// The server does not know the command: it was renamed away (`rename-command SUBSCRIBE
/// ""`), or this is not Redis itself but something that speaks its protocol.
pub(super) fn is_unknown_command(err: &RedisError) -> bool {
    err.to_string()
        .to_ascii_lowercase()
        .contains("unknown command")
}

/// A fence counter no run counted to (see `acquire.lua`): the fence it would give is
/// 10^18 or more. Named with its value; a Redlock quorum goes on without that node, and
/// never copies the counter to the others.
#[derive(Debug)]
pub struct FenceTooLarge(pub String);

impl std::fmt::Display for FenceTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FenceTooLarge {}

/// Whether `err` is a [`FenceTooLarge`].
pub fn is_fence_too_large(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|cause| cause.downcast_ref::<FenceTooLarge>().is_some())
}
