//! One Redis server: SET NX PX through a Lua script, compare-and-PEXPIRE, compare-and-DEL plus
//! PUBLISH. One connection carries acquire, renew and release; a second one, opened only
//! when the lock is busy, carries the subscription to release notices.
//!
//! Every failure drops the connection it happened on (a timed-out reply may still arrive and
//! would be read as the answer to the next command); the next call reconnects.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use redis::{
    Client, Cmd, Connection, ErrorKind, FromRedisValue, IntoConnectionInfo, RedisError, Script,
    ServerErrorKind,
};

use super::{
    is_transient, limit_key, sibling_key, Attempt, BackendError, LockBackend, LockRequest, Notice,
    NoticeSink, Released, Renewal, Subscription,
};
use crate::config::RedisTarget;

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

pub struct SingleRedis {
    link: Link,
    lock: LockRequest,
    identity: String,
    /// The slot key this holder has, once it has one.
    held: Option<String>,
}

/// The connection to the server, made on demand and dropped after any failure.
pub struct Link {
    client: Client,
    display: String,
    timeout: Duration,
    connection: Option<Connection>,
    /// Whether the last call got as far as sending a command (it may have taken effect).
    sent: bool,
}

/// One call's use of the connection: every command it sends gets the time left before the
/// call's deadline (or the configured timeout, if sooner) for its write and its read, and the
/// moment the last command was sent is kept, since a lease starts no earlier than that.
pub struct Session<'a> {
    connection: &'a mut Connection,
    deadline: Option<Instant>,
    timeout: Duration,
    display: &'a str,
    /// When the last command left this machine.
    pub sent_at: Option<Instant>,
}

impl Session<'_> {
    /// Sends `command` and reads its reply.
    pub fn query<T: FromRedisValue>(&mut self, command: &Cmd) -> Result<T> {
        self.arm()?;
        command
            .query(self.connection)
            .map_err(|err| describe_error(err, self.display))
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
        self.arm()?;
        match evalsha.query(self.connection) {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {}
            other => return other.map_err(|err| describe_error(err, self.display)),
        }
        let mut load_and_run = redis::pipe();
        for source in ALL_SCRIPTS {
            load_and_run.cmd("SCRIPT").arg("LOAD").arg(source).ignore();
        }
        load_and_run.add_command(evalsha);
        self.arm()?;
        let (reply,): (T,) = load_and_run
            .query(self.connection)
            .map_err(|err| describe_error(err, self.display))?;
        Ok(reply)
    }

    /// Sets the timeouts for the next command and notes when it leaves.
    fn arm(&mut self) -> Result<()> {
        let limit = time_left(self.timeout, self.deadline)?;
        self.connection
            .set_read_timeout(Some(limit))
            .and_then(|()| self.connection.set_write_timeout(Some(limit)))
            .map_err(|err| describe_error(err, self.display))?;
        self.sent_at = Some(Instant::now());
        Ok(())
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
        loop {
            let reply: Result<((i64, i64, redis::Value, u32), Instant)> =
                self.link.call(deadline, |session| {
                    let reply = session.eval(&ACQUIRE, &keys, &args)?;
                    Ok((reply, session.sent_at.unwrap_or_else(Instant::now)))
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
        if target.url.starts_with("rediss://") {
            // rustls wants one process-wide crypto provider; only TLS runs pay for it.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let info = target
            .url
            .as_str()
            .into_connection_info()
            .map_err(|err| anyhow!("invalid Redis URL {}: {}", target.display, err))?;
        // Requests are small and each waits for its reply: Nagle's delay would only add
        // latency. CLIENT SETINFO would add a command to every connection for no use of ours.
        let nodelay = info.tcp_settings().clone().set_nodelay(true);
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_tcp_settings(nodelay).set_redis_settings(settings);
        let client = Client::open(info)
            .map_err(|err| anyhow!("invalid Redis URL {}: {}", target.display, err))?;
        Ok(Link {
            client,
            display: target.display.clone(),
            timeout,
            connection: None,
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
        self.sent = false;
        let limit = time_left(self.timeout, deadline)?;
        let mut connection = match self.connection.take() {
            Some(connection) => connection,
            None => connect(&self.client, &self.display, limit)?,
        };
        let mut session = Session {
            connection: &mut connection,
            deadline,
            timeout: self.timeout,
            display: &self.display,
            sent_at: None,
        };
        let result = commands(&mut session);
        self.sent = session.sent_at.is_some();
        // After a failure the connection may hold a late reply: it is not used again.
        if result.is_ok() {
            self.connection = Some(connection);
        }
        result
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
        let args = [self.identity.as_str(), &channel, &keep_ms, &limit];
        let released: i64 = self.link.call(Some(deadline), |session| {
            session.eval(&RELEASE, &keys, &args)
        })?;
        Ok(match released {
            1 => Released::Deleted,
            2 => Released::KeptUntilMinHold,
            _ => Released::NotOurs,
        })
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
        let link = &self.link;
        let mut connection = connect(&link.client, &link.display, link.timeout)?;
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

fn connect(client: &Client, display: &str, limit: Duration) -> Result<Connection> {
    client
        .get_connection_with_timeout(limit)
        .map_err(|err| describe_error(err, display))
}

/// How long the next read or write may take: the configured timeout, or less if the
/// deadline is sooner. An error once the deadline has passed.
fn time_left(timeout: Duration, deadline: Option<Instant>) -> Result<Duration> {
    let Some(deadline) = deadline else {
        return Ok(timeout);
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_millis(1) {
        return Err(anyhow!("no time left to reach Redis"));
    }
    Ok(left.min(timeout))
}

/// Turns a Redis error into one line that says what failed and where, never with a password.
fn describe_error(err: RedisError, display: &str) -> anyhow::Error {
    let message = match err.kind() {
        ErrorKind::AuthenticationFailed => format!("authentication failed at {display}: {err}"),
        ErrorKind::Server(_) if is_auth_error(&err) => {
            format!("authentication failed at {display}: {err}")
        }
        ErrorKind::Io if err.is_connection_refusal() => {
            format!("cannot connect to {display}: {err}")
        }
        // The OS says "Resource temporarily unavailable" for a read that timed out.
        ErrorKind::Io if err.is_timeout() => format!("no answer in time from {display}"),
        ErrorKind::Io => format!("connection to {display} failed: {err}"),
        ErrorKind::Server(_) => format!("{display} answered with an error: {err}"),
        _ => format!("request to {display} failed: {err}"),
    };
    anyhow::Error::new(BackendError {
        message,
        transient: err.is_io_error() || err.is_timeout() || err.is_connection_dropped(),
    })
}

fn is_auth_error(err: &RedisError) -> bool {
    matches!(err.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}
