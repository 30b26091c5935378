//! Which server a command goes to, and the connections to it: one server (`redis://`,
//! `rediss://`, `redis+unix://`), the master that a set of Sentinels names
//! (`redis+sentinel://`, see `sentinel`), or, in a Redis Cluster (`redis+cluster://`, see
//! `cluster`), the master that owns a key's hash slot. `connection.rs` sends the commands
//! and `error.rs` decides what a failure means; this module only finds servers and opens
//! connections to them. It owns the public face (`Endpoint`, `Target`, `Node`) and the connection rules
//! every search shares; `url` takes the multi-server URLs apart.
//!
//! Sentinel and Cluster are handled here on plain connections rather than with the redis
//! crate's own clients, because every network step must end within `--redis-timeout` (and a
//! renewal's deadline): the crate's sync Sentinel client connects without a time limit, and
//! its `ClusterConnection` pings a new node with no read timeout and sleeps and retries on
//! its own schedule. Here each connect and each question gets the time left before the
//! step's end, and nothing is retried behind the caller's back, so a renewal's timing stays
//! `lease.rs`'s and `renew.rs`'s to decide.
//!
//! A search over several servers (the sentinels, or the nodes that may have a slot map)
//! gives each one only its share of that time (`share`): a host that is blackholed or
//! frozen accepts a connection and never answers, and would otherwise take all of every
//! search, so that after a failover the new master is never found. Each search also starts
//! with the server that answered last and leaves those that just failed for the end.
//!
//! On masters that have replicas (Sentinel and Cluster), connecting also asks `ROLE` for how
//! many are attached, so that an acquisition can wait for one of them (see `protocol`).

mod cluster;
mod sentinel;
mod url;

pub use cluster::key_slot;
pub(crate) use cluster::parse_slots;
pub(crate) use sentinel::master_address;

use std::collections::HashMap;
use std::sync::Weak;
use std::time::{Duration, Instant};

use anyhow::Result;
use redis::{
    Client, Connection, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisError,
    RedisResult, Role,
};

use super::error::{describe_error, time_left};
use super::polled::{self, SharedWire, SubscribedWire};
use super::vetting::Facts;
use super::wire::Wire;
use cluster::Cluster;
use sentinel::Sentinels;

/// The deployment behind a URL, with the connections open to it.
pub struct Endpoint {
    kind: Kind,
    display: String,
    /// Open connections by node address; a plain server or a Sentinel-found master has one,
    /// under "".
    connections: HashMap<String, Node>,
    /// What each server said of itself (`vetting`) on a connection closed by `rest`, and
    /// when: the same server, asked again on every try of a waiter, would only cost it two
    /// commands. Trusted for `FACTS_KEPT` at most: a wait may last hours, and a policy
    /// changed meanwhile (`CONFIG SET maxmemory-policy`) must be seen before a lock is taken.
    rested: HashMap<String, (Facts, Instant)>,
    /// A waiter's subscription to the one server that commands may be sent over (RESP3,
    /// see `polled`), while it lives: used instead of opening a connection of its own.
    lent: Option<Weak<SharedWire>>,
    /// The URL asks for TLS (`rediss`, `valkeys`): a server's silence may mean it has none.
    tls: bool,
}

/// How long what a server said of itself is trusted for a waiter's later tries.
const FACTS_KEPT: Duration = Duration::from_secs(60);

/// `FACTS_KEPT`, but in debug builds (the test suite's), where `REDLOCK_TEST_FACTS_KEPT_MS`
/// sets it, so that a test sees the server asked again without waiting a minute. Release
/// builds never read it: no user has this knob (see CONTRIBUTING.md).
fn facts_kept() -> Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("REDLOCK_TEST_FACTS_KEPT_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    {
        return Duration::from_millis(ms);
    }
    FACTS_KEPT
}

/// An open connection to one server.
pub struct Node {
    pub connection: NodeConnection,
    /// How many replicas this master had when connected; `None` when not asked (a plain
    /// server: nothing would fail over to them by itself).
    pub replicas: Option<usize>,
    /// What the server said of itself on this connection (`vetting`), once asked.
    pub facts: Option<Facts>,
}

/// What a node's commands travel over.
pub enum NodeConnection {
    /// A connection of its own.
    Own(Connection),
    /// A waiter's subscription, lent (`Endpoint::lend`): its acquisitions go where its
    /// release notices come from, with no connection made between the two. Once a try over
    /// it took the lock and it stopped listening (`SubscribedWire::carries_commands`), the
    /// lock is renewed and released over it while this node lives.
    Subscription(SubscribedWire),
}

impl NodeConnection {
    /// The wire, for as long as `guard` lives.
    pub fn wire<'g, 'a: 'g>(
        &'a mut self,
        guard: &'g mut Option<polled::WireGuard<'a>>,
    ) -> &'g mut dyn Wire {
        match self {
            NodeConnection::Own(connection) => connection,
            NodeConnection::Subscription(subscribed) => &mut **guard.insert(subscribed.lock()),
        }
    }
}

impl From<Connection> for NodeConnection {
    fn from(connection: Connection) -> NodeConnection {
        NodeConnection::Own(connection)
    }
}

/// Where a command should go.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// Wherever: a plain server, the master, any cluster node.
    Any,
    /// The server that holds this key.
    Key(&'a [u8]),
    /// A cluster node by address (a redirection, or one master of a scan); "" elsewhere.
    Node(&'a str),
}

enum Kind {
    Server(Client),
    Sentinel(Sentinels),
    Cluster(Cluster),
}

/// Requests are small and each waits for its reply: Nagle's delay would only add latency.
/// CLIENT SETINFO would add a command to every connection for no use of ours.
pub fn tune(info: ConnectionInfo) -> ConnectionInfo {
    let nodelay = info.tcp_settings().clone().set_nodelay(true);
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_tcp_settings(nodelay).set_redis_settings(settings)
}

impl Endpoint {
    /// Takes the URL apart; connects on first use. The error says what is wrong with the
    /// URL, never the URL itself (it may hold a password).
    pub fn new(url: &str, display: &str) -> Result<Endpoint, String> {
        let (scheme, rest) = url.split_once("://").unwrap_or((url, ""));
        let kind = match scheme {
            "redis+sentinel" => Kind::Sentinel(Sentinels::parse(rest, false)?),
            "rediss+sentinel" => Kind::Sentinel(Sentinels::parse(rest, true)?),
            "redis+cluster" => Kind::Cluster(Cluster::parse(rest, false)?),
            "rediss+cluster" => Kind::Cluster(Cluster::parse(rest, true)?),
            _ => {
                url::known_parameters_only(scheme, rest)?;
                let info = url.into_connection_info().map_err(|err| err.to_string())?;
                // Each connection's protocol is redlock-run's to choose: the commands' and the
                // holders' notices are read as RESP2 replies (on RESP3 a notice is a push that
                // a plain subscription never hears), while a waiter's own subscription asks
                // for RESP3 itself where the server has it.
                if info.redis_settings().protocol() != ProtocolVersion::RESP2 {
                    return Err(String::from(
                        "protocol=resp3 (RESP3) is not supported: redlock-run chooses the \
                         protocol of each connection itself (RESP3 for a waiter's subscription \
                         where the server has it); remove the protocol parameter",
                    ));
                }
                Kind::Server(Client::open(tune(info)).map_err(|err| err.to_string())?)
            }
        };
        Ok(Endpoint {
            kind,
            display: display.to_string(),
            connections: HashMap::new(),
            rested: HashMap::new(),
            lent: None,
            tls: scheme.starts_with("rediss") || scheme.starts_with("valkeys"),
        })
    }

    /// Whether connections go over TLS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Whether keys live on several masters (and `MOVED` and `ASK` mean something).
    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster(_))
    }

    /// The connection for `target`, opened if need be; connecting and finding the server
    /// end by `until`. Returns the node's address with it.
    pub fn node(&mut self, target: Target<'_>, until: Instant) -> Result<(String, &mut Node)> {
        let address = match &mut self.kind {
            Kind::Server(_) | Kind::Sentinel(_) => String::new(),
            Kind::Cluster(cluster) => match target {
                Target::Node(address) => address.to_string(),
                Target::Key(key) => cluster.owner(key_slot(key), until, &self.display)?,
                Target::Any => match self.connections.keys().next() {
                    Some(address) => address.clone(),
                    None => cluster.owner(0, until, &self.display)?,
                },
            },
        };
        // A subscription that ended, or may carry no command now, is not sent one.
        if let Some(Node {
            connection: NodeConnection::Subscription(subscribed),
            ..
        }) = self.connections.get(&address)
        {
            if !subscribed.carries_commands(until) {
                self.connections.remove(&address);
            }
        }
        if !self.connections.contains_key(&address) {
            let lent = self.lent.as_ref().and_then(SubscribedWire::from_weak);
            let lent =
                lent.filter(|subscribed| address.is_empty() && subscribed.carries_commands(until));
            let mut node = match lent {
                Some(subscribed) => Node {
                    connection: NodeConnection::Subscription(subscribed),
                    replicas: None,
                    facts: None,
                },
                None => self.open(&address, until, true)?,
            };
            node.facts = self
                .rested
                .get(&address)
                .filter(|(_, at)| at.elapsed() < facts_kept())
                .map(|(facts, _)| facts.clone());
            self.connections.insert(address.clone(), node);
        }
        let node = self
            .connections
            .get_mut(&address)
            .expect("the connection was just made");
        Ok((address, node))
    }

    /// A new connection of its own (not shared with commands) to the server that holds
    /// `key`, with no read or write timeout set; for a subscription. In a cluster it goes to
    /// `at` when given (where a redirection sent it), and speaks RESP3, in which everything
    /// the server sends unasked (a message, or word that the slot moved away and took the
    /// subscription with it) comes as a push.
    pub fn open_for(&mut self, key: &[u8], at: Option<&str>, until: Instant) -> Result<Connection> {
        let connection = match &mut self.kind {
            Kind::Cluster(cluster) => {
                let address = match at {
                    Some(address) => address.to_string(),
                    None => cluster.owner(key_slot(key), until, &self.display)?,
                };
                let display = format!("{} (node {address})", self.display);
                let opened = cluster
                    .info(&address)
                    .map(|info| {
                        let resp3 = info
                            .redis_settings()
                            .clone()
                            .set_protocol(ProtocolVersion::RESP3);
                        info.set_redis_settings(resp3)
                    })
                    .and_then(|info| connect(info, until));
                opened.map_err(|err| describe_error(err, &display))?
            }
            Kind::Server(_) | Kind::Sentinel(_) => match self.open("", until, false)?.connection {
                NodeConnection::Own(connection) => connection,
                // `open` makes a connection of its own; no panic if that ever changed.
                NodeConnection::Subscription(_) => {
                    return Err(anyhow::anyhow!(
                        "{}: no connection of its own for a subscription",
                        self.display
                    ))
                }
            },
        };
        let clear = connection
            .set_read_timeout(None)
            .and_then(|()| connection.set_write_timeout(None));
        clear.map_err(|err| describe_error(err, &self.display))?;
        Ok(connection)
    }

    /// The one server's address and credentials, where a subscription to it may be read by
    /// the loop itself (`polled::can_poll`); `None` otherwise.
    pub fn pollable(&self) -> Option<ConnectionInfo> {
        match &self.kind {
            Kind::Server(client) => Some(client.get_connection_info())
                .filter(|info| super::polled::can_poll(info))
                .cloned(),
            Kind::Sentinel(_) | Kind::Cluster(_) => None,
        }
    }

    /// From now on, commands to the one server go over `subscribed` (a waiter's RESP3
    /// subscription, see `polled`) while it lives, instead of a connection of their own; the
    /// command connection is closed at once (`rest`), so that a waiter holds one connection.
    pub fn lend(&mut self, subscribed: &SubscribedWire) {
        if matches!(self.kind, Kind::Server(_)) {
            self.rest();
            self.lent = Some(subscribed.downgrade());
        }
    }

    /// The lock was just taken: if a subscription carried the acquisition, it stops
    /// listening, so that the holder's commands can go over it
    /// (`SubscribedWire::unsubscribe`). It is lent no more: the wait that lent it is over.
    pub fn taken_over_subscription(&mut self) {
        self.lent = None;
        if let Some(Node {
            connection: NodeConnection::Subscription(subscribed),
            ..
        }) = self.connections.get("")
        {
            subscribed.unsubscribe();
        }
    }

    /// The address of every server that holds keys: "" for a plain server or a Sentinel's
    /// master, every master of a cluster (from a fresh map).
    pub fn masters(&mut self, until: Instant) -> Result<Vec<String>> {
        match &mut self.kind {
            Kind::Server(_) | Kind::Sentinel(_) => Ok(vec![String::new()]),
            Kind::Cluster(cluster) => cluster.masters(until, &self.display),
        }
    }

    /// A `MOVED` came back: the slot map is out of date.
    pub fn moved(&mut self) {
        if let Kind::Cluster(cluster) = &mut self.kind {
            cluster.mark_stale();
        }
    }

    /// Drops every connection (after a failure, one of them may hold a late reply, or lead
    /// to a server that is no longer the master); the next call reconnects.
    pub fn disconnect(&mut self) {
        // A subscription lent for commands stays lent: a failure of its own (a timeout, a
        // reply not in the protocol) has ended it already, and an error reply on it is a
        // whole answer, after which it is as good as before. Ending it for that would make
        // the waiter subscribe again, and try at once, at every `LOADING`.
        self.connections.clear();
        self.rested.clear();
        if let Kind::Cluster(cluster) = &mut self.kind {
            cluster.mark_stale();
        }
    }

    /// Closes the command connections while nothing is to be sent for a while (a waiter
    /// between tries): the next call connects again, which to a plain server or a cluster
    /// node (whose map is kept) is one TCP handshake. A Sentinel's master is kept: finding
    /// it again means asking the sentinels.
    pub fn rest(&mut self) {
        if !matches!(self.kind, Kind::Sentinel(_)) {
            for (address, node) in self.connections.drain() {
                if let Some(facts) = node.facts {
                    let asked = self
                        .rested
                        .get(&address)
                        .filter(|(kept, _)| *kept == facts)
                        .map_or_else(Instant::now, |&(_, at)| at);
                    self.rested.insert(address, (facts, asked));
                }
            }
        }
    }

    /// How an error at `address` names the server, safe to print.
    pub fn describe_node(&self, address: &str) -> String {
        if address.is_empty() {
            self.display.clone()
        } else {
            format!("{} (node {address})", self.display)
        }
    }

    fn open(&mut self, address: &str, until: Instant, ask_role: bool) -> Result<Node> {
        let display = self.describe_node(address);
        match &mut self.kind {
            Kind::Server(client) => {
                let limit = time_left(Duration::MAX, Some(until))
                    .map_err(|err| describe_error(err, &display))?;
                let tls = self.tls;
                let connection = client.get_connection_with_timeout(limit).map_err(|err| {
                    let unanswered = tls && err.is_timeout();
                    let described = describe_error(err, &display);
                    if unanswered {
                        super::error::tls_unanswered(described, limit)
                    } else {
                        described
                    }
                })?;
                Ok(Node {
                    connection: connection.into(),
                    replicas: None,
                    facts: None,
                })
            }
            Kind::Sentinel(sentinels) => sentinels.master(until, &self.display),
            Kind::Cluster(cluster) => {
                let opened = cluster.info(address).and_then(|info| connect(info, until));
                let mut connection = opened.map_err(|err| describe_error(err, &display))?;
                let replicas = if ask_role {
                    match role(&mut connection) {
                        Ok(Role::Primary { replicas, .. }) => Some(replicas.len()),
                        Ok(_) => None,
                        Err(err) => return Err(describe_error(err, &display)),
                    }
                } else {
                    None
                };
                Ok(Node {
                    connection: connection.into(),
                    replicas,
                    facts: None,
                })
            }
        }
    }
}

/// The least time one server of a search is given, however many are left to ask: enough to
/// connect and ask across a network, when the time left would make equal parts too small.
const MIN_SHARE: Duration = Duration::from_millis(50);

/// How long the next of `candidates` servers still to be asked may take, out of `left`: an
/// equal part, so that one that never answers leaves the others their turn; no less than
/// `MIN_SHARE` unless less is left. A server that answers sooner leaves its unused time to
/// those after it.
fn share(left: Duration, candidates: usize) -> Duration {
    let parts = u32::try_from(candidates.max(1)).unwrap_or(u32::MAX);
    (left / parts).max(MIN_SHARE).min(left)
}

/// The moment by which the next of `candidates` servers must have answered, out of the time
/// before `until`; a timeout error once none is left.
fn share_until(until: Instant, candidates: usize) -> RedisResult<Instant> {
    let left = time_left(Duration::MAX, Some(until))?;
    Ok(Instant::now() + share(left, candidates))
}

/// Why one server of a search did not help, for the message when none did. A read that
/// timed out says "Resource temporarily unavailable".
fn reason(err: &RedisError) -> String {
    if err.is_timeout() {
        String::from("no answer in time")
    } else {
        err.to_string()
    }
}

/// Connects with what is left of the time until `until`, and leaves that as the read and
/// write timeout for the questions that follow.
fn connect(info: ConnectionInfo, until: Instant) -> RedisResult<Connection> {
    let limit = time_left(Duration::MAX, Some(until))?;
    let connection = Client::open(info)?.get_connection_with_timeout(limit)?;
    let limit = time_left(Duration::MAX, Some(until))?;
    connection.set_read_timeout(Some(limit))?;
    connection.set_write_timeout(Some(limit))?;
    Ok(connection)
}

fn role(connection: &mut Connection) -> RedisResult<Role> {
    redis::cmd("ROLE").query(connection)
}

#[cfg(test)]
pub(super) mod tests;
