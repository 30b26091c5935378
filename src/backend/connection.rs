//! The connection layer: `Link` holds the connections to one deployment (made on demand
//! through `endpoint`, dropped after any failure), and a `Session` is one call's use of
//! them. Every command a session sends gets the time left before the call's deadline (or
//! the configured timeout, if sooner) for its write and its read; cluster redirections
//! (`MOVED`, `ASK`) are followed; a script the server lacks (`NOSCRIPT`) is loaded with all
//! the others and run in the same round trip; an acquisition's first command on a
//! connection carries `vetting`'s questions in the same write. What the commands mean is
//! `protocol`'s and `inspect`'s business.
//!
//! Every failure drops the connection it happened on (a timed-out reply may still arrive
//! and would be read as the answer to the next command); the next call reconnects.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use redis::{
    Cmd, Connection, ConnectionLike, ErrorKind, FromRedisValue, RedisError, RedisResult,
    ServerErrorKind,
};

use super::endpoint::{Endpoint, Target};
use super::error::{describe_error, is_permission_error, time_left, tls_unanswered, BackendError};
use super::key::Key;
use super::polled::SubscribedWire;
use super::scripts::{self, Call, LuaScript};
use super::target::RedisTarget;
use super::vetting::{self, Facts, Prelude};

/// How many `MOVED`/`ASK` redirections one command follows: a slot moves once per
/// resharding step, so more means the cluster is in flux, and the caller retries later.
const MAX_REDIRECTS: usize = 5;

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
    /// Whether the next command is to carry `vetting::questions` on a connection that has
    /// not been asked them yet (an acquisition: see `vetting`).
    vet: bool,
    /// What the server the last command went to said of itself, if it was asked.
    pub facts: Option<Facts>,
}

impl Session<'_> {
    /// From now on, the first command on each connection also asks the server what
    /// `vetting` needs to know, in the same write; `facts` then holds the answer.
    pub fn vet(&mut self) {
        self.vet = true;
    }

    /// Sends `command` and reads its reply.
    pub fn query<T: FromRedisValue>(&mut self, command: &Cmd) -> Result<T> {
        let reply = self.send(None, |connection, asking| {
            if !asking {
                return command.query(connection);
            }
            let (reply,): (T,) = with_asking(command).query(connection)?;
            Ok(reply)
        })?;
        reply.map_err(|(err, node)| self.describe(err, &node))
    }

    /// Sends `command`, which names `key`, to the server that holds `key` (a cluster's
    /// master of its slot) and reads its reply. The outer error is a failure to reach a
    /// server, already described; the inner one is the command's own error reply (such as
    /// `WRONGTYPE`), with the server's name, for the caller to word.
    pub fn query_keyed<T: FromRedisValue>(
        &mut self,
        key: &Key,
        command: &Cmd,
    ) -> Result<std::result::Result<T, (RedisError, String)>> {
        self.send(Some(key.as_bytes()), |connection, asking| {
            if !asking {
                return command.query(connection);
            }
            let (reply,): (T,) = with_asking(command).query(connection)?;
            Ok(reply)
        })
    }

    /// Runs `script` by SHA. A server that does not have it gets every script loaded and
    /// this one run in a single round trip; a user who may not load scripts gets this one
    /// sent whole.
    pub fn eval<T: FromRedisValue>(
        &mut self,
        script: &LuaScript,
        keys: &[&Key],
        args: &[&[u8]],
    ) -> Result<T> {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(script.sha1).arg(keys.len()).arg(keys).arg(args);
        // Every key of one lock shares a hash slot: the first one routes the script.
        let key = keys.first().map(|key| key.as_bytes());
        let run = |connection: &mut dyn ConnectionLike, asking: bool| {
            if !asking {
                return evalsha.query(connection);
            }
            let (reply,): (T,) = with_asking(&evalsha).query(connection)?;
            Ok(reply)
        };
        match self.send(key, run)? {
            Err((err, _)) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {}
            other => return other.map_err(|(err, node)| self.describe(err, &node)),
        }
        let load_and_run = |connection: &mut dyn ConnectionLike, asking: bool| {
            let mut pipe = redis::pipe();
            for loaded in scripts::ALL {
                pipe.cmd("SCRIPT").arg("LOAD").arg(loaded.source).ignore();
            }
            if asking {
                pipe.cmd("ASKING").ignore();
            }
            pipe.add_command(evalsha.clone()).query(connection)
        };
        match self.send(key, load_and_run)? {
            // SCRIPT LOAD is refused to this user ("no permissions to run the 'script|load'
            // command", or 'script' on Redis 6): send the script itself (EVAL, which also
            // leaves it in the server's cache).
            Err((err, _)) if is_permission_error(&err) && err.to_string().contains("'script") => {}
            reply => {
                let (reply,): (T,) = reply.map_err(|(err, node)| self.describe(err, &node))?;
                return Ok(reply);
            }
        }
        let mut eval = redis::cmd("EVAL");
        eval.arg(script.source).arg(keys.len()).arg(keys).arg(args);
        let run_source = |connection: &mut dyn ConnectionLike, asking: bool| {
            if !asking {
                return eval.query(connection);
            }
            let (reply,): (T,) = with_asking(&eval).query(connection)?;
            Ok(reply)
        };
        self.send(key, run_source)?
            .map_err(|(err, node)| self.describe(err, &node))
    }

    /// How long the next command may take: until the call's deadline, or the configured
    /// timeout if sooner.
    pub fn time_left(&self) -> Duration {
        time_left(self.timeout, self.deadline).unwrap_or_default()
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
        key: Option<&[u8]>,
        mut command: impl FnMut(&mut dyn ConnectionLike, bool) -> RedisResult<T>,
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
            // Connecting took some of the time.
            let limit = match time_left(self.timeout, self.deadline) {
                Ok(limit) => limit,
                Err(err) => return Err(describe_error(err, &self.display())),
            };
            let mut guard = None;
            let connection = node.connection.wire(&mut guard);
            let armed = connection.set_limit(limit);
            let asking = matches!(redirect, Some((_, true)));
            let questions = (self.vet && node.facts.is_none()).then(vetting::questions);
            let mut connection = Prelude::new(connection, questions.as_ref().map(|q| &q[..]));
            self.sent_at = Some(Instant::now());
            let result = armed.and_then(|()| command(&mut connection, asking));
            // Answered even when the command itself failed (NOSCRIPT, MOVED): not asked again.
            let result = match connection.answers.take() {
                Some(answers) => match vetting::facts_from(&answers, connection.inner) {
                    Ok(facts) => {
                        node.facts = Some(facts);
                        result
                    }
                    // No verdict: the try fails as one whose reply was lost, unless it
                    // failed already (its own error says more: a server that turned an
                    // unauthenticated client away, then hung up).
                    Err(lost) => result.and(Err(lost)),
                },
                None => result,
            };
            drop(guard);
            if self.vet {
                self.facts = node.facts.clone();
            }
            self.node = Some(address.clone());
            self.replicas = node_replicas;
            let err = match result {
                Ok(reply) => return Ok(Ok(reply)),
                Err(err) => unpiped(err),
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
        Err(anyhow::Error::new(BackendError::transient(format!(
            "{} redirected a command more than {MAX_REDIRECTS} times (slots are moving)",
            self.display()
        ))))
    }

    fn display(&self) -> String {
        self.endpoint.describe_node("")
    }

    /// A command's failure at `node`, described; a TLS server that did not answer within
    /// the Redis timeout is hinted at as a plain one behind `rediss://`.
    fn describe(&self, err: RedisError, node: &str) -> anyhow::Error {
        let unanswered = err.is_timeout() && self.endpoint.is_tls();
        let described = describe_error(err, node);
        if unanswered {
            tls_unanswered(described, self.timeout)
        } else {
            described
        }
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
            vet: false,
            facts: None,
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

    /// A connection of its own, not shared with commands and with no read or write timeout,
    /// to the server that holds `key` (in a cluster: or to the node at `at`, where a
    /// redirection said the key is now), made by `until`: for a subscription, which borrows
    /// it for as long as it lives.
    pub fn open_subscriber(
        &mut self,
        key: &Key,
        at: Option<&str>,
        until: Instant,
    ) -> Result<Connection> {
        self.endpoint.open_for(key.as_bytes(), at, until)
    }

    /// From now on, commands go over `subscribed`, a waiter's subscription that can carry
    /// them, while it lives (`Endpoint::lend`).
    pub fn lend(&mut self, subscribed: &SubscribedWire) {
        self.endpoint.lend(subscribed);
    }

    /// The lock was just taken: a subscription that carried the acquisition stops
    /// listening and carries the holder's commands (`Endpoint::taken_over_subscription`).
    pub fn taken_over_subscription(&mut self) {
        self.endpoint.taken_over_subscription();
    }

    /// Where a subscription may be read by the loop itself (`polled`): the one server's
    /// address and credentials; `None` for any other deployment.
    pub fn pollable(&self) -> Option<redis::ConnectionInfo> {
        self.endpoint.pollable()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether this is a Redis Cluster (notices are then sharded, see `layout::Channels`).
    pub fn is_cluster(&self) -> bool {
        self.endpoint.is_cluster()
    }

    /// A redirection came back from outside `call` (a subscription): the slot map is out of
    /// date.
    pub fn moved(&mut self) {
        self.endpoint.moved();
    }

    /// Closes the command connection until the next call (`Endpoint::rest`).
    pub fn rest(&mut self) {
        self.endpoint.rest();
    }

    /// Whether the last call got as far as sending a command (it may have taken effect).
    pub fn sent(&self) -> bool {
        self.sent
    }

    /// Every server that holds keys, for `call_on`: one, or each master of a cluster.
    pub fn masters(&mut self) -> Result<Vec<String>> {
        let until = Instant::now() + self.timeout;
        self.endpoint.masters(until)
    }
}

/// The error of the one command that failed in a pipeline (`ASKING` then a script, or the
/// scripts loaded then one run) as that command's own: a redirection in it (`MOVED` after a
/// slot moved, with its address) is then followed like any other, instead of ending the call
/// as a pipeline failure that names no node. Anything else is left as it is.
fn unpiped(err: RedisError) -> RedisError {
    match err.clone().into_server_errors().as_deref() {
        Some([(_, only)]) => RedisError::from(only.clone()),
        _ => err,
    }
}

/// `command` preceded by `ASKING`, whose reply is dropped.
fn with_asking(command: &Cmd) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").ignore().add_command(command.clone());
    pipe
}

impl Session<'_> {
    /// Sends `commands` in one write and reads every reply (a pipeline), to the session's
    /// node: for reads of many locks on one server, never a cluster (whose keys live on
    /// many nodes, and which redirects). A command's own error reply (`NOSCRIPT`,
    /// `WRONGTYPE`) is its entry's and fails none of the others.
    pub(super) fn pipelined(
        &mut self,
        commands: Vec<Cmd>,
    ) -> Result<Vec<RedisResult<redis::Value>>> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for command in commands {
            pipe.add_command(command);
        }
        self.send(None, |connection, _| pipe.query(connection))?
            .map_err(|(err, node)| self.describe(err, &node))
    }

    /// Runs the script of `call` with its keys and arguments, and reads its reply.
    pub(super) fn run<C: Call>(&mut self, call: &C) -> Result<C::Reply> {
        let keys = call.keys();
        // A script with no run of keys (`1..n`) takes at most those its header names.
        let runs = C::KEYS.iter().any(|key| key.contains(".."));
        debug_assert!(runs || keys.len() <= C::KEYS.len(), "{:?}", C::KEYS);
        let keys: Vec<&Key> = keys.iter().collect();
        let argv = call.argv();
        debug_assert_eq!(argv.len(), C::ARGV.len(), "{:?}", C::ARGV);
        let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        self.eval(C::SCRIPT, &keys, &argv)
    }
}
