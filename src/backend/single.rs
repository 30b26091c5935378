//! One Redis server: SET NX PX through a Lua script, compare-and-PEXPIRE, compare-and-DEL plus
//! PUBLISH. One connection carries acquire, renew and release; a second one, opened only
//! when the lock is busy, carries the subscription to release notices.
//!
//! Every failure drops the connection it happened on (a timed-out reply may still arrive and
//! would be read as the answer to the next command); the next call reconnects.
//!
//! "One server" may be the master that Sentinels name or, in a Redis Cluster, the master of
//! the lock's hash slot: `endpoint` finds it; here a `MOVED` or `ASK` is followed. On
//! such a master with replicas, an acquisition waits (`WAIT 1`, briefly) for a replica to
//! have it, so that a failover right after it is unlikely to lose the key and the fence.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use redis::{
    Cmd, Connection, ErrorKind, FromRedisValue, RedisError, RedisResult, Script, ServerErrorKind,
};

use super::endpoint::{Endpoint, Target};
use super::{
    is_transient, limit_key, sibling_key, Attempt, BackendError, LockBackend, LockRequest, Notice,
    NoticeSink, Released, Renewal, Subscription,
};
use crate::config::RedisTarget;
use crate::report;

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_LUA));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
static LEAVE_QUEUE: LazyLock<Script> = LazyLock::new(|| Script::new(LEAVE_QUEUE_LUA));
pub(super) static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(FORCE_RELEASE_LUA));
pub(super) static PEEK: LazyLock<Script> = LazyLock::new(|| Script::new(PEEK_LUA));
static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(RAISE_FENCE_LUA));

const ACQUIRE_LUA: &str = include_str!("scripts/acquire.lua");
const RENEW_LUA: &str = include_str!("scripts/renew.lua");
const RELEASE_LUA: &str = include_str!("scripts/release.lua");
const LEAVE_QUEUE_LUA: &str = include_str!("scripts/leave_queue.lua");
const FORCE_RELEASE_LUA: &str = include_str!("scripts/force_release.lua");
const PEEK_LUA: &str = include_str!("scripts/peek.lua");
const RAISE_FENCE_LUA: &str = include_str!("scripts/raise_fence.lua");

/// Every script, loaded together the first time a server says it lacks one (a fresh,
/// restarted or flushed Redis): a holder's first renewal must not need a round trip of its
/// own to load its script, on a lease that may be short.
const ALL_SCRIPTS: [&str; 7] = [
    ACQUIRE_LUA,
    RENEW_LUA,
    RELEASE_LUA,
    LEAVE_QUEUE_LUA,
    FORCE_RELEASE_LUA,
    PEEK_LUA,
    RAISE_FENCE_LUA,
];

/// How often an idle subscriber thread looks up to see whether it is still wanted. It only
/// checks a flag: no Redis command is sent.
const SUBSCRIBER_CHECK: Duration = Duration::from_secs(1);

/// How many `MOVED`/`ASK` redirections one command follows: a slot moves once per
/// resharding step, so more means the cluster is in flux, and the caller retries later.
const MAX_REDIRECTS: usize = 5;

pub struct SingleRedis {
    link: Link,
    lock: LockRequest,
    identity: String,
    /// The slot key this holder has, once it has one.
    held: Option<String>,
}

/// The connections to the server (or the cluster's masters), made on demand and dropped
/// after any failure.
pub struct Link {
    endpoint: Endpoint,
    display: String,
    timeout: Duration,
    /// Whether the last call got as far as sending a command (it may have taken effect).
    sent: bool,
}

/// One call's use of the connections: every command it sends gets the time left before the
/// call's deadline (or the configured timeout, if sooner) for its write and its read, and the
/// moment the last command was sent is kept, since a lease starts no earlier than that.
pub struct Session<'a> {
    endpoint: &'a mut Endpoint,
    /// Where a command that names no key goes: the node the call was made for, or else the
    /// one the last command went to (so `WAIT` follows the write it waits for).
    node: Option<String>,
    deadline: Option<Instant>,
    timeout: Duration,
    /// When the last command left this machine.
    pub sent_at: Option<Instant>,
    /// How many replicas the master the last command went to had when connected; `None`
    /// when not known (a plain server is not asked).
    pub replicas: Option<usize>,
    /// A reply may still be on its way although the call succeeded: drop the connections.
    spoiled: bool,
}

impl Session<'_> {
    /// Sends `command` and reads its reply.
    pub fn query<T: FromRedisValue>(&mut self, command: &Cmd) -> Result<T> {
        let reply = self.send(None, |connection, asking| {
            if !asking {
                return command.query(connection);
            }
            let (reply,): (T,) = with_asking(command).query(connection)?;
            Ok(reply)
        })?;
        reply.map_err(|(err, node)| describe_error(err, &node))
    }

    /// Runs `script` by SHA. A server that does not have it gets every script loaded and
    /// this one run in a single round trip.
    pub fn eval<T: FromRedisValue>(
        &mut self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        // Every key of one lock shares a hash slot: the first one routes the script.
        let key = keys.first().copied();
        let run = |connection: &mut Connection, asking: bool| {
            if !asking {
                return evalsha.query(connection);
            }
            let (reply,): (T,) = with_asking(&evalsha).query(connection)?;
            Ok(reply)
        };
        match self.send(key, run)? {
            Err((err, _)) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {}
            other => return other.map_err(|(err, node)| describe_error(err, &node)),
        }
        let load_and_run = |connection: &mut Connection, asking: bool| {
            let mut pipe = redis::pipe();
            for source in ALL_SCRIPTS {
                pipe.cmd("SCRIPT").arg("LOAD").arg(source).ignore();
            }
            if asking {
                pipe.cmd("ASKING").ignore();
            }
            pipe.add_command(evalsha.clone()).query(connection)
        };
        let reply = self.send(key, load_and_run)?;
        let (reply,): (T,) = reply.map_err(|(err, node)| describe_error(err, &node))?;
        Ok(reply)
    }

    /// The connections are not to be used again after this call, although it succeeded.
    pub fn spoil(&mut self) {
        self.spoiled = true;
    }

    /// Runs `command` on the server for `key` (or, without one, the session's node),
    /// following cluster redirections; after an `ASK`, `command` is told to send `ASKING`
    /// right before its keyed command (the flag lasts one command). The outer error is a
    /// failure to reach a server, already described; the inner one is the command's own,
    /// with the server's name.
    fn send<T>(
        &mut self,
        key: Option<&str>,
        mut command: impl FnMut(&mut Connection, bool) -> RedisResult<T>,
    ) -> Result<std::result::Result<T, (RedisError, String)>> {
        let mut redirect: Option<(String, bool)> = None;
        for _ in 0..=MAX_REDIRECTS {
            // No time left is a timeout like any other (described so: worth another try).
            let limit = time_left(self.timeout, self.deadline)
                .map_err(|err| describe_error(err, &self.display()))?;
            let target = match (&redirect, key, &self.node) {
                (Some((address, _)), _, _) => Target::Node(address),
                (None, Some(key), _) => Target::Key(key),
                (None, None, Some(node)) => Target::Node(node),
                (None, None, None) => Target::Any,
            };
            let (address, node) = self.endpoint.node(target, Instant::now() + limit)?;
            let node_replicas = node.replicas;
            let connection = &mut node.connection;
            // Connecting took some of the time.
            let limit = match time_left(self.timeout, self.deadline) {
                Ok(limit) => limit,
                Err(err) => return Err(describe_error(err, &self.display())),
            };
            let armed = connection
                .set_read_timeout(Some(limit))
                .and_then(|()| connection.set_write_timeout(Some(limit)));
            let asking = matches!(redirect, Some((_, true)));
            self.sent_at = Some(Instant::now());
            let result = armed.and_then(|()| command(connection, asking));
            self.node = Some(address.clone());
            self.replicas = node_replicas;
            let err = match result {
                Ok(reply) => return Ok(Ok(reply)),
                Err(err) => err,
            };
            let redirected = match err.kind() {
                ErrorKind::Server(ServerErrorKind::Moved) => Some(false),
                ErrorKind::Server(ServerErrorKind::Ask) => Some(true),
                _ => None,
            };
            match (redirected, err.redirect_node()) {
                (Some(asking), Some((to, _slot))) if self.endpoint.is_cluster() => {
                    if !asking {
                        self.endpoint.moved();
                    }
                    redirect = Some((to.to_string(), asking));
                }
                _ => return Ok(Err((err, self.endpoint.describe_node(&address)))),
            }
        }
        Err(anyhow::Error::new(BackendError {
            message: format!(
                "{} redirected a command more than {MAX_REDIRECTS} times (slots are moving)",
                self.display()
            ),
            transient: true,
        }))
    }

    fn display(&self) -> String {
        self.endpoint.describe_node("")
    }
}

impl SingleRedis {
    /// Prepares the client; connects on first use.
    pub fn new(target: &RedisTarget, timeout: Duration, lock: LockRequest) -> Result<SingleRedis> {
        Ok(SingleRedis {
            link: Link::new(target, timeout)?,
            identity: lock.identity(),
            lock,
            held: None,
        })
    }

    /// The key this holder renews and releases: its slot, or the lock's key before it has
    /// one (nothing of ours is there then, and the scripts find nothing to touch).
    fn held_key(&self) -> &str {
        self.held.as_deref().unwrap_or(&self.lock.key)
    }

    /// One attempt to take the lock, as `LockBackend::try_acquire`, giving up at `deadline`
    /// (a Redlock node must answer within the acquisition's round).
    pub fn try_acquire_until(&mut self, deadline: Option<Instant>) -> Result<Attempt> {
        let limit = self.lock.limit;
        let mut keys: Vec<String> = (1..=limit).map(|slot| self.lock.slot_key(slot)).collect();
        keys.push(limit_key(&self.lock.key));
        keys.push(sibling_key(&self.lock.key, ":fence"));
        keys.extend(self.queue_keys());
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let heartbeat_ms = self
            .lock
            .fair_heartbeat_timeout
            .map_or(0, |t| t.as_millis())
            .to_string();
        let ttl_ms = self.lock.ttl.as_millis().to_string();
        let limit_arg = limit.to_string();
        let args = [
            self.identity.as_str(),
            &self.lock.metadata,
            &ttl_ms,
            &limit_arg,
            &heartbeat_ms,
            &self.lock.token,
        ];
        // A reply lost on the wire leaves us unsure whether the SET landed: try once more on
        // a fresh connection. The script recognises our own value and counts it as acquired.
        // A failure to connect sent nothing, and is not retried here.
        let mut retried = false;
        let replica_wait = (self.lock.ttl / 10).min(self.link.timeout / 2);
        let key = self.lock.key.as_str();
        loop {
            let reply: Result<((i64, i64, redis::Value, u32), Instant)> =
                self.link.call(deadline, |session| {
                    let reply: (i64, i64, redis::Value, u32) =
                        session.eval(&ACQUIRE, &keys, &args)?;
                    let sent_at = session.sent_at.unwrap_or_else(Instant::now);
                    if reply.0 == 1 {
                        confirm_replicated(session, replica_wait, key);
                    }
                    Ok((reply, sent_at))
                });
            match reply {
                Ok(((1, slot, fence, _), sent_at)) => {
                    self.held = Some(self.lock.slot_key(slot as u32));
                    let fence = redis::from_redis_value(fence).unwrap_or(0);
                    return Ok(Attempt::Acquired { sent_at, fence });
                }
                Ok(((0, pttl, holder, ahead), _)) => {
                    let holder_ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
                    let holder: Option<String> = redis::from_redis_value(holder)
                        .ok()
                        .filter(|value: &String| !value.is_empty());
                    return Ok(Attempt::Busy {
                        holder_ttl,
                        holder,
                        ahead,
                        split: false,
                    });
                }
                Ok(((_, other, _, _), _)) => {
                    let other = match other {
                        0 => String::from("a value redlock-run did not write"),
                        n => format!("--limit {n}"),
                    };
                    return Err(anyhow!(
                        "{} is in use with {other}, not --limit {limit}; every user of a lock must \
                         pass the same --limit",
                        self.lock.key
                    ));
                }
                Err(err) if retried || !self.link.sent || !is_transient(&err) => return Err(err),
                Err(_) => retried = true,
            }
        }
    }

    /// Raises this server's fence counter to `fence` if it is lower (Redlock: the fence
    /// handed out must be on a majority, so that every later majority has it).
    pub fn raise_fence(&mut self, fence: u64, deadline: Instant) -> Result<()> {
        let key = sibling_key(&self.lock.key, ":fence");
        let fence = fence.to_string();
        self.link.call(Some(deadline), |session| {
            session.eval::<i64>(&RAISE_FENCE, &[&key], &[&fence])
        })?;
        Ok(())
    }

    /// Deletes the lock if it is still ours, as `LockBackend::release`, and announces the
    /// release to waiters with `notice`: the same text on every node of one Redlock release
    /// and different for each release, so that a waiter listening on several nodes acts on
    /// each release once. An empty `notice` wakes no one.
    pub fn release_announcing(
        &mut self,
        keep_for: Option<Duration>,
        deadline: Instant,
        notice: &str,
    ) -> Result<Released> {
        let mut keys = vec![self.held_key().to_string()];
        if self.lock.limit > 1 {
            keys.push(limit_key(&self.lock.key));
            keys.extend((1..=self.lock.limit).map(|slot| self.lock.slot_key(slot)));
        }
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let channel = self.lock.release_channel();
        let keep_ms = keep_for
            .map_or(0, |keep| keep.as_millis().max(1))
            .to_string();
        let limit = self.lock.limit.to_string();
        let args = [self.identity.as_str(), &channel, &keep_ms, &limit, notice];
        let released: i64 = self.link.call(Some(deadline), |session| {
            session.eval(&RELEASE, &keys, &args)
        })?;
        Ok(match released {
            1 => Released::Deleted,
            2 => Released::KeptUntilMinHold,
            _ => Released::NotOurs,
        })
    }

    fn queue_keys(&self) -> [String; 2] {
        [
            sibling_key(&self.lock.key, ":queue"),
            sibling_key(&self.lock.key, ":queue:alive"),
        ]
    }
}

impl Link {
    /// Prepares the client; connects on first use.
    pub fn new(target: &RedisTarget, timeout: Duration) -> Result<Link> {
        if target.url.starts_with("rediss") {
            // rustls wants one process-wide crypto provider; only TLS runs pay for it.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let endpoint = Endpoint::new(&target.url, &target.display)
            .map_err(|err| anyhow!("invalid Redis URL {}: {}", target.display, err))?;
        Ok(Link {
            endpoint,
            display: target.display.clone(),
            timeout,
            sent: false,
        })
    }

    /// Where the connection goes, safe to print.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// Runs `command` on the lock connection, connecting first if need be; reads and writes
    /// give up at `deadline` or after the configured timeout, whichever is sooner.
    pub fn call<T>(
        &mut self,
        deadline: Option<Instant>,
        commands: impl FnOnce(&mut Session<'_>) -> Result<T>,
    ) -> Result<T> {
        self.call_on(None, deadline, commands)
    }

    /// Like `call`, but commands that name no key go to `node`, one of `masters()`.
    pub fn call_on<T>(
        &mut self,
        node: Option<&str>,
        deadline: Option<Instant>,
        commands: impl FnOnce(&mut Session<'_>) -> Result<T>,
    ) -> Result<T> {
        self.sent = false;
        time_left(self.timeout, deadline).map_err(|err| describe_error(err, &self.display))?;
        let mut session = Session {
            endpoint: &mut self.endpoint,
            node: node.map(str::to_string),
            deadline,
            timeout: self.timeout,
            sent_at: None,
            replicas: None,
            spoiled: false,
        };
        let result = commands(&mut session);
        self.sent = session.sent_at.is_some();
        // After a failure a connection may hold a late reply, or lead to a server that is no
        // longer the master: none is used again.
        if result.is_err() || session.spoiled {
            self.endpoint.disconnect();
        }
        result
    }

    /// Every server that holds keys, for `call_on`: one, or each master of a cluster.
    pub fn masters(&mut self) -> Result<Vec<String>> {
        let until = Instant::now() + self.timeout;
        self.endpoint.masters(until)
    }
}

impl LockBackend for SingleRedis {
    fn try_acquire(&mut self) -> Result<Attempt> {
        self.try_acquire_until(None)
    }

    fn renew(&mut self, deadline: Instant) -> Result<Renewal> {
        let mut keys = vec![self.held_key().to_string()];
        if self.lock.limit > 1 {
            keys.push(limit_key(&self.lock.key));
        }
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let ttl_ms = self.lock.ttl.as_millis().to_string();
        let limit = self.lock.limit.to_string();
        let args = [self.identity.as_str(), &ttl_ms, &limit];
        let (extended, sent_at): (i64, Instant) = self.link.call(Some(deadline), |session| {
            let extended = session.eval(&RENEW, &keys, &args)?;
            Ok((extended, session.sent_at.unwrap_or_else(Instant::now)))
        })?;
        Ok(if extended == 1 {
            Renewal::Extended { sent_at }
        } else {
            Renewal::NotOurs
        })
    }

    fn release(&mut self, keep_for: Option<Duration>, deadline: Instant) -> Result<Released> {
        // One process releases once, so any fixed suffix keeps its notices distinct.
        let notice = format!("{}#0", self.identity);
        self.release_announcing(keep_for, deadline, &notice)
    }

    fn abandon(&mut self) {
        if self.lock.fair_heartbeat_timeout.is_none() {
            return;
        }
        let [queue, alive] = self.queue_keys();
        let token = self.lock.token.as_str();
        let _: Result<i64> = self.link.call(None, |session| {
            session.eval(&LEAVE_QUEUE, &[&queue, &alive], &[token])
        });
    }

    fn subscribe(&mut self, sink: NoticeSink) -> Result<Subscription> {
        let link = &mut self.link;
        let until = Instant::now() + link.timeout;
        // In a cluster, a PUBLISH reaches every node; the lock's own master is as good as any.
        let mut connection = link.endpoint.open_for(&self.lock.key, until)?;
        let channel = self.lock.release_channel();
        let display = link.display.clone();
        let timeout = link.timeout;
        let (ready_tx, ready_rx) = mpsc::channel();
        let subscription = Subscription::new();
        let stopped = subscription.stopped_flag();
        // The subscription borrows its connection for as long as it lives, so it lives on a
        // thread of its own and passes notices on.
        std::thread::Builder::new()
            .name("release-notices".into())
            .spawn(move || {
                let mut pubsub = connection.as_pubsub();
                let subscribed = pubsub
                    .set_read_timeout(Some(timeout))
                    .and_then(|()| pubsub.subscribe(&channel))
                    .and_then(|()| pubsub.set_read_timeout(Some(SUBSCRIBER_CHECK)));
                if let Err(err) = subscribed {
                    let _ = ready_tx.send(Err(describe_error(err, &display)));
                    return;
                }
                let _ = ready_tx.send(Ok(()));
                listen(pubsub, sink, &stopped, &display);
            })
            .context("cannot start a thread")?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(subscription),
            Ok(Err(err)) => Err(err.context("cannot subscribe to release notices")),
            Err(_) => Err(anyhow!("cannot subscribe to release notices")),
        }
    }

    fn describe(&self) -> &str {
        self.link.display()
    }
}

/// `command` preceded by `ASKING`, whose reply is dropped.
fn with_asking(command: &Cmd) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").ignore().add_command(command.clone());
    pipe
}

/// After taking the lock on a master that has replicas (Sentinel, Cluster), waits up to
/// `wait` for one of them to confirm the write. Replication is asynchronous: a failover to a
/// replica that never saw the lock loses it (and the fence number), and a second holder can
/// take it before this one's next renewal finds it gone. Waiting makes that unlikely; it
/// cannot rule it out, and a master without a replica in time is only reported: refusing to
/// run would turn a degraded replica into an outage of every job.
fn confirm_replicated(session: &mut Session<'_>, wait: Duration, key: &str) {
    match session.replicas {
        None => return,
        Some(0) => {
            report::verbose(format_args!(
                "the master has no replica: a failover now would lose {key}"
            ));
            return;
        }
        Some(_) => {}
    }
    let mut command = redis::cmd("WAIT");
    command.arg(1).arg(wait.as_millis().max(1) as u64);
    match session.query::<i64>(&command) {
        Ok(0) => report::warn(format_args!(
            "no replica confirmed {key} within {}; if the master fails over now, the lock \
             may be lost",
            report::duration(wait)
        )),
        Ok(_) => {}
        Err(err) => {
            session.spoil();
            report::warn(format_args!(
                "cannot confirm that a replica has {key}: {err:#}"
            ));
        }
    }
}

/// Passes each message on the subscription on as `Notice::Released` until the subscription
/// is dropped or the connection breaks.
fn listen(
    mut pubsub: redis::PubSub<'_>,
    mut sink: NoticeSink,
    stopped: &AtomicBool,
    display: &str,
) {
    loop {
        let notice = match pubsub.get_message() {
            Ok(message) => Notice::Released {
                by: message.get_payload().unwrap_or_default(),
            },
            // Nobody released; this wake-up only checks whether the waiter still listens.
            Err(err) if err.is_timeout() => {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                continue;
            }
            Err(err) => Notice::Broken(describe_error(err, display)),
        };
        let broken = matches!(notice, Notice::Broken(_));
        if !sink(notice) || broken || stopped.load(Ordering::Relaxed) {
            return;
        }
    }
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
        _ => format!("request to {display} failed: {err}"),
    };
    // READONLY: the server was the master and is a replica now (a failover); the others: it
    // is starting, cut off from its master, or its cluster is re-forming. Another try, on a
    // new connection, may find the right server.
    let failing_over = matches!(
        err.code(),
        Some("READONLY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN")
    );
    anyhow::Error::new(BackendError {
        message,
        transient: err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || failing_over,
    })
}

/// Whether the server turned our credentials down: a refusal that retrying will not change.
pub(super) fn is_auth_error(err: &RedisError) -> bool {
    err.kind() == ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
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
        ] {
            assert!(is_auth_error(&server_error(line)), "{line}");
        }
        assert!(!is_auth_error(&server_error("READONLY replica")));
        let described = describe_error(at_connect, "redis://h:1");
        assert!(!is_transient(&described), "{described:#}");
        assert!(format!("{described:#}").starts_with("authentication failed at redis://h:1"));
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
