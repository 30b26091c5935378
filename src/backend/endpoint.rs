//! Which server a command goes to, and the connections to it: one server (`redis://`,
//! `rediss://`, `redis+unix://`), the master that a set of Sentinels names
//! (`redis+sentinel://`), or, in a Redis Cluster (`redis+cluster://`), the master that owns
//! a key's hash slot. `single.rs` sends the commands and decides what a failure means; this
//! module only finds servers and opens connections to them.
//!
//! Sentinel and Cluster are handled here on plain connections rather than with the redis
//! crate's own clients, because every network step must end within `--redis-timeout` (and a
//! renewal's deadline): the crate's sync Sentinel client connects without a time limit, and
//! its `ClusterConnection` pings a new node with no read timeout and sleeps and retries on
//! its own schedule. Here each connect, each question to a sentinel and each slot-map
//! refresh gets the time left before the step's end, and nothing is retried behind the
//! caller's back, so a renewal's timing stays `renew.rs`'s to decide.
//!
//! - Sentinel: on every (re)connect the sentinels are asked in turn for the master's address
//!   (`SENTINEL GET-MASTER-ADDR-BY-NAME`), starting with the one that answered last, and the
//!   server named must say `ROLE` master: right after a failover a sentinel may still name
//!   the old master, now a replica. A connection is dropped after any failure, including the
//!   `READONLY` a demoted master answers to writes, so the next call finds the new master.
//! - Cluster: `CLUSTER SLOTS` from any reachable node (the URL's seeds, then the nodes last
//!   seen) maps slots to masters; a command with keys goes to the owner of its first key's
//!   slot (every key of one lock shares a hash tag, so one slot). `MOVED` and `ASK` are
//!   followed by `single.rs`; a `MOVED` or any failure makes the next call refresh the map.
//!
//! On masters that have replicas (Sentinel and Cluster), connecting also asks `ROLE` for how
//! many are attached, so that an acquisition can wait for one of them (see `single.rs`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use redis::{Client, Connection, ConnectionInfo, IntoConnectionInfo, RedisResult, Role, Value};

use super::single::{describe_error, is_auth_error, time_left};
use super::BackendError;

/// Where a `redis+sentinel://` host without a port listens.
const SENTINEL_PORT: u16 = 26379;
/// Where a `redis+cluster://` host without a port listens.
const REDIS_PORT: u16 = 6379;
/// How many hash slots Redis Cluster has.
const SLOTS: u16 = 16384;

/// The deployment behind a URL, with the connections open to it.
pub struct Endpoint {
    kind: Kind,
    display: String,
    /// Open connections by node address; a plain server or a Sentinel-found master has one,
    /// under "".
    connections: HashMap<String, Node>,
}

/// An open connection to one server.
pub struct Node {
    pub connection: Connection,
    /// How many replicas this master had when connected; `None` when not asked (a plain
    /// server: nothing would fail over to them by itself).
    pub replicas: Option<usize>,
}

/// Where a command should go.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// Wherever: a plain server, the master, any cluster node.
    Any,
    /// The server that holds this key.
    Key(&'a str),
    /// A cluster node by address (a redirection, or one master of a scan); "" elsewhere.
    Node(&'a str),
}

enum Kind {
    Server(Client),
    Sentinel(Sentinels),
    Cluster(Cluster),
}

struct Sentinels {
    /// Each sentinel's address and how to connect to it.
    sentinels: Vec<(String, ConnectionInfo)>,
    /// The master's name in the sentinels' configuration.
    service: String,
    master: NodeUrl,
    /// The sentinel that answered last: asked first next time.
    preferred: usize,
}

struct Cluster {
    seeds: Vec<String>,
    nodes: NodeUrl,
    /// Slot ranges (first, last, master's address), from the last refresh.
    slots: Vec<(u16, u16, String)>,
    /// Whether the map may be out of date (a redirection or a failure since the refresh).
    stale: bool,
}

/// How to reach a server at some address with the scheme, credentials, database and options
/// the URL gave: a URL for the redis crate to parse, so that TLS and percent-escapes work as
/// they do for a `redis://` URL.
#[derive(Clone)]
struct NodeUrl {
    scheme: &'static str,
    /// `user:password@`, or empty.
    userinfo: String,
    /// `/db`, or empty.
    path: String,
    /// `#insecure` and the like, or empty.
    fragment: String,
}

impl NodeUrl {
    fn info(&self, address: &str) -> RedisResult<ConnectionInfo> {
        let url = format!(
            "{}://{}{}{}{}",
            self.scheme, self.userinfo, address, self.path, self.fragment
        );
        url.as_str().into_connection_info().map(tune)
    }
}

/// Requests are small and each waits for its reply: Nagle's delay would only add latency.
/// CLIENT SETINFO would add a command to every connection for no use of ours.
pub fn tune(info: ConnectionInfo) -> ConnectionInfo {
    let nodelay = info.tcp_settings().clone().set_nodelay(true);
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    info.set_tcp_settings(nodelay).set_redis_settings(settings)
}

/// A `redis+sentinel://` or `redis+cluster://` URL taken apart.
struct MultiUrl {
    tls: bool,
    userinfo: String,
    /// `host:port` of each server listed.
    hosts: Vec<String>,
    path: String,
    query: Vec<(String, String)>,
    fragment: String,
}

impl MultiUrl {
    fn parse(rest: &str, tls: bool, default_port: u16) -> Result<MultiUrl, String> {
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, fragment)) => (rest, format!("#{fragment}")),
            None => (rest, String::new()),
        };
        // The user part runs to the last `@`, as in `redact_url`.
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => (format!("{userinfo}@"), rest),
            None => (String::new(), rest),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hosts, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], rest[slash..].to_string()),
            None => (rest, String::new()),
        };
        let hosts = hosts
            .split(',')
            .map(|host| with_port(host, default_port))
            .collect::<Result<Vec<_>, _>>()?;
        let query = query
            .split('&')
            .filter(|param| !param.is_empty())
            .map(|param| {
                let (name, value) = param.split_once('=').unwrap_or((param, ""));
                (name.to_string(), value.to_string())
            })
            .collect();
        Ok(MultiUrl {
            tls,
            userinfo,
            hosts,
            path,
            query,
            fragment,
        })
    }

    fn node_url(&self, path: String) -> NodeUrl {
        NodeUrl {
            scheme: if self.tls { "rediss" } else { "redis" },
            userinfo: self.userinfo.clone(),
            path,
            fragment: self.fragment.clone(),
        }
    }
}

/// `host:port` for a host written with or without its port (IPv6 in brackets).
fn with_port(host: &str, default_port: u16) -> Result<String, String> {
    if host.is_empty() {
        return Err(String::from("a host is missing from the list"));
    }
    let has_port = match host.rfind(']') {
        Some(bracket) => host[bracket..].contains(':'),
        None => host.contains(':'),
    };
    if !has_port {
        return Ok(format!("{host}:{default_port}"));
    }
    let (name, port) = host.rsplit_once(':').unwrap_or((host, ""));
    match port.parse::<u16>() {
        Ok(_) if !name.is_empty() => Ok(host.to_string()),
        _ => Err(format!("{host:?} is not host:port")),
    }
}

/// `host:port`, with an IPv6 host in brackets, as URLs and our connection map write it.
fn address(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
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
                let info = url.into_connection_info().map_err(|err| err.to_string())?;
                Kind::Server(Client::open(tune(info)).map_err(|err| err.to_string())?)
            }
        };
        Ok(Endpoint {
            kind,
            display: display.to_string(),
            connections: HashMap::new(),
        })
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
                Target::Key(key) => {
                    cluster.owner(key_slot(key.as_bytes()), until, &self.display)?
                }
                Target::Any => match self.connections.keys().next() {
                    Some(address) => address.clone(),
                    None => cluster.owner(0, until, &self.display)?,
                },
            },
        };
        if !self.connections.contains_key(&address) {
            let node = self.open(&address, until, true)?;
            self.connections.insert(address.clone(), node);
        }
        let node = self
            .connections
            .get_mut(&address)
            .expect("the connection was just made");
        Ok((address, node))
    }

    /// A new connection of its own (not shared with commands) to the server that holds
    /// `key`, with no read or write timeout set; for a subscription.
    pub fn open_for(&mut self, key: &str, until: Instant) -> Result<Connection> {
        let address = match &mut self.kind {
            Kind::Cluster(cluster) => {
                cluster.owner(key_slot(key.as_bytes()), until, &self.display)?
            }
            Kind::Server(_) | Kind::Sentinel(_) => String::new(),
        };
        let node = self.open(&address, until, false)?;
        let clear = node
            .connection
            .set_read_timeout(None)
            .and_then(|()| node.connection.set_write_timeout(None));
        clear.map_err(|err| describe_error(err, &self.display))?;
        Ok(node.connection)
    }

    /// The address of every server that holds keys: "" for a plain server or a Sentinel's
    /// master, every master of a cluster (from a fresh map).
    pub fn masters(&mut self, until: Instant) -> Result<Vec<String>> {
        match &mut self.kind {
            Kind::Server(_) | Kind::Sentinel(_) => Ok(vec![String::new()]),
            Kind::Cluster(cluster) => {
                cluster.refresh(until, &self.display)?;
                let mut masters: Vec<String> = cluster
                    .slots
                    .iter()
                    .map(|(_, _, address)| address.clone())
                    .collect();
                masters.sort();
                masters.dedup();
                Ok(masters)
            }
        }
    }

    /// A `MOVED` came back: the slot map is out of date.
    pub fn moved(&mut self) {
        if let Kind::Cluster(cluster) = &mut self.kind {
            cluster.stale = true;
        }
    }

    /// Drops every connection (after a failure, one of them may hold a late reply, or lead
    /// to a server that is no longer the master); the next call reconnects.
    pub fn disconnect(&mut self) {
        self.connections.clear();
        if let Kind::Cluster(cluster) = &mut self.kind {
            cluster.stale = true;
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
                let connection = client
                    .get_connection_with_timeout(
                        time_left(Duration::MAX, Some(until))
                            .map_err(|e| describe_error(e, &display))?,
                    )
                    .map_err(|err| describe_error(err, &display))?;
                Ok(Node {
                    connection,
                    replicas: None,
                })
            }
            Kind::Sentinel(sentinels) => sentinels.master(until, &self.display),
            Kind::Cluster(cluster) => {
                let opened = cluster
                    .nodes
                    .info(address)
                    .and_then(|info| connect(info, until));
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
                    connection,
                    replicas,
                })
            }
        }
    }
}

impl Sentinels {
    /// `[user:password@]host[:port][,host[:port]…]/master-name[/db][?sentinel_username=…&sentinel_password=…]`
    fn parse(rest: &str, tls: bool) -> Result<Sentinels, String> {
        let url = MultiUrl::parse(rest, tls, SENTINEL_PORT)?;
        let mut path = url.path.trim_start_matches('/').splitn(2, '/');
        let service = path.next().unwrap_or_default().to_string();
        if service.is_empty() {
            return Err(String::from(
                "the master's name is missing: redis+sentinel://HOST:PORT[,HOST:PORT…]/NAME",
            ));
        }
        let db = match path.next() {
            Some(db) => format!("/{db}"),
            None => String::new(),
        };
        let (mut user, mut password) = (String::new(), None);
        for (name, value) in &url.query {
            match name.as_str() {
                "sentinel_username" => user = value.clone(),
                "sentinel_password" => password = Some(value.clone()),
                other => return Err(format!("unknown parameter {other:?}")),
            }
        }
        // Sentinels keep their own credentials (often none): those in the user part are the
        // master's.
        let sentinel_userinfo = match password {
            Some(password) => format!("{user}:{password}@"),
            None if !user.is_empty() => format!("{user}@"),
            None => String::new(),
        };
        let to_sentinel = NodeUrl {
            userinfo: sentinel_userinfo,
            ..url.node_url(String::new())
        };
        let sentinels = url
            .hosts
            .iter()
            .map(|host| Ok((host.clone(), to_sentinel.info(host)?)))
            .collect::<RedisResult<Vec<_>>>()
            .map_err(|err| err.to_string())?;
        let master = url.node_url(db);
        // Checked now, so that a bad database number or password escape is a usage error.
        master.info(&url.hosts[0]).map_err(|err| err.to_string())?;
        Ok(Sentinels {
            sentinels,
            service,
            master,
            preferred: 0,
        })
    }

    /// Asks the sentinels for the master and connects to it, all by `until`.
    fn master(&mut self, until: Instant, display: &str) -> Result<Node> {
        let count = self.sentinels.len();
        let mut unknown = 0;
        let mut last = String::from("no sentinel answered");
        for step in 0..count {
            let index = (self.preferred + step) % count;
            let (sentinel, info) = &self.sentinels[index];
            let address = match ask_sentinel(info, &self.service, until) {
                Ok(Some(address)) => address,
                Ok(None) => {
                    unknown += 1;
                    last = format!("sentinel {sentinel} knows no master {:?}", self.service);
                    continue;
                }
                Err(err) => {
                    last = format!("sentinel {sentinel}: {err}");
                    continue;
                }
            };
            let opened = self.master.info(&address).and_then(|info| {
                let mut connection = connect(info, until)?;
                let role = role(&mut connection)?;
                Ok((connection, role))
            });
            match opened {
                Ok((connection, Role::Primary { replicas, .. })) => {
                    self.preferred = index;
                    return Ok(Node {
                        connection,
                        replicas: Some(replicas.len()),
                    });
                }
                Ok(_) => {
                    last = format!(
                        "{address}, which sentinel {sentinel} names as the master, is not a \
                         master (a failover is under way)"
                    );
                }
                Err(err) if is_auth_error(&err) => {
                    return Err(describe_error(
                        err,
                        &format!("{display} (master {address})"),
                    ));
                }
                Err(err) => last = format!("master {address} from sentinel {sentinel}: {err}"),
            }
        }
        let message = format!("cannot find the master of {display}: {last}");
        // Every sentinel answered and none knows the name: a typo, not an outage.
        let transient = unknown < count;
        Err(anyhow::Error::new(BackendError { message, transient }))
    }
}

/// The master's address by one sentinel; `None` when it knows no master by that name.
fn ask_sentinel(
    info: &ConnectionInfo,
    service: &str,
    until: Instant,
) -> RedisResult<Option<String>> {
    let mut connection = connect(info.clone(), until)?;
    let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(service)
        .query(&mut connection)?;
    Ok(reply.map(|(host, port)| address(&host, port)))
}

impl Cluster {
    /// `[user:password@]host[:port][,host[:port]…][/0]`
    fn parse(rest: &str, tls: bool) -> Result<Cluster, String> {
        let url = MultiUrl::parse(rest, tls, REDIS_PORT)?;
        if !matches!(url.path.as_str(), "" | "/" | "/0") {
            return Err(String::from("Redis Cluster has only database 0"));
        }
        if let Some((name, _)) = url.query.first() {
            return Err(format!("unknown parameter {name:?}"));
        }
        let nodes = url.node_url(String::new());
        nodes.info(&url.hosts[0]).map_err(|err| err.to_string())?;
        Ok(Cluster {
            seeds: url.hosts,
            nodes,
            slots: Vec::new(),
            stale: true,
        })
    }

    /// The address of the master that serves `slot`, refreshing the map first if it may be
    /// out of date.
    fn owner(&mut self, slot: u16, until: Instant, display: &str) -> Result<String> {
        if self.stale || self.slots.is_empty() {
            self.refresh(until, display)?;
        }
        let owner = self
            .slots
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot));
        match owner {
            Some((_, _, address)) => Ok(address.clone()),
            None => Err(anyhow::Error::new(BackendError {
                message: format!(
                    "no master of {display} serves hash slot {slot} (the cluster is down or \
                     being set up)"
                ),
                transient: true,
            })),
        }
    }

    /// Reads the slot map from the first node that answers: those last seen, then the seeds.
    fn refresh(&mut self, until: Instant, display: &str) -> Result<()> {
        let mut candidates: Vec<String> = self.slots.iter().map(|(_, _, a)| a.clone()).collect();
        candidates.extend(self.seeds.iter().cloned());
        let mut seen = Vec::new();
        candidates.retain(|address| {
            let new = !seen.contains(address);
            seen.push(address.clone());
            new
        });
        let mut last = String::from("no node answered");
        for asked in &candidates {
            let read = self.nodes.info(asked).and_then(|info| {
                let mut connection = connect(info, until)?;
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query::<Value>(&mut connection)
            });
            match read {
                Ok(reply) => match parse_slots(reply, asked) {
                    Some(slots) if !slots.is_empty() => {
                        self.slots = slots;
                        self.stale = false;
                        return Ok(());
                    }
                    _ => last = format!("{asked} serves no slots"),
                },
                Err(err) if is_auth_error(&err) => {
                    return Err(describe_error(err, &format!("{display} (node {asked})")));
                }
                Err(err) => last = format!("{asked}: {err}"),
            }
        }
        Err(anyhow::Error::new(BackendError {
            message: format!("cannot read the slot map of {display}: {last}"),
            transient: true,
        }))
    }
}

/// `CLUSTER SLOTS`: `[[first, last, [host, port, id, …], replicas…], …]`. A master whose
/// host is empty is the node asked (it does not know its own address).
fn parse_slots(reply: Value, asked: &str) -> Option<Vec<(u16, u16, String)>> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let asked_host = asked
        .rsplit_once(':')
        .map_or(asked, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let mut slots = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let mut fields = fields.into_iter();
        let first: u16 = redis::from_redis_value(fields.next()?).ok()?;
        let last: u16 = redis::from_redis_value(fields.next()?).ok()?;
        let Value::Array(master) = fields.next()? else {
            return None;
        };
        let mut master = master.into_iter();
        let host: String = redis::from_redis_value(master.next()?).ok()?;
        let port: u16 = redis::from_redis_value(master.next()?).ok()?;
        let host = if host.is_empty() { asked_host } else { &host };
        if first <= last && last < SLOTS {
            slots.push((first, last, address(host, port)));
        }
    }
    slots.sort();
    Some(slots)
}

/// The hash slot Redis Cluster puts `key` in: CRC16 (XMODEM) of the key, or of its hash tag
/// (the bytes between the first `{` and the next `}`, when there are any), modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&byte| byte == b'{')
        .and_then(|open| {
            let tag = &key[open + 1..];
            let len = tag.iter().position(|&byte| byte == b'}')?;
            (len > 0).then(|| &tag[..len])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Connects with what is left of the time until `until`, and leaves that as the read and
/// write timeout for the questions that follow.
fn connect(info: ConnectionInfo, until: Instant) -> RedisResult<Connection> {
    let connection =
        Client::open(info)?.get_connection_with_timeout(time_left(Duration::MAX, Some(until))?)?;
    let limit = time_left(Duration::MAX, Some(until))?;
    connection.set_read_timeout(Some(limit))?;
    connection.set_write_timeout(Some(limit))?;
    Ok(connection)
}

fn role(connection: &mut Connection) -> RedisResult<Role> {
    redis::cmd("ROLE").query(connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // The reference values from the Redis Cluster specification and CLUSTER KEYSLOT.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(
            key_slot(b"{redlock:job}:fence"),
            key_slot(b"redlock:job"),
            "a lock's bookkeeping shares its slot"
        );
    }

    #[test]
    fn sentinel_urls() {
        let Kind::Sentinel(s) = Endpoint::new(
            "redis+sentinel://:pw@a:1,b,[::1]:3/mymaster/2?sentinel_password=sp",
            "",
        )
        .unwrap()
        .kind
        else {
            panic!("not a sentinel URL");
        };
        let hosts: Vec<&str> = s.sentinels.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(hosts, ["a:1", "b:26379", "[::1]:3"]);
        assert_eq!(s.service, "mymaster");
        assert_eq!(s.master.path, "/2");
        assert_eq!(s.master.userinfo, ":pw@");
        assert_eq!(
            s.sentinels[0].1.redis_settings().password(),
            Some("sp"),
            "sentinels get their own password"
        );
        for bad in [
            "redis+sentinel://a:1",
            "redis+sentinel://a:1/",
            "redis+sentinel://a:x/m",
            "redis+sentinel://a,,b/m",
            "redis+sentinel://a/m?db=1",
            "http+sentinel://a/m",
        ] {
            assert!(Endpoint::new(bad, "").is_err(), "accepted {bad}");
        }
    }

    #[test]
    fn cluster_urls() {
        let Kind::Cluster(c) = Endpoint::new("rediss+cluster://u:p@h1:7000,h2", "")
            .unwrap()
            .kind
        else {
            panic!("not a cluster URL");
        };
        assert_eq!(c.seeds, ["h1:7000", "h2:6379"]);
        assert_eq!(c.nodes.scheme, "rediss");
        for bad in [
            "redis+cluster://h/1",
            "redis+cluster://h?x=1",
            "redis+cluster://",
        ] {
            assert!(Endpoint::new(bad, "").is_err(), "accepted {bad}");
        }
    }

    #[test]
    fn slot_maps_are_read() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("", 7001)]),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.2", 7003),
            ]),
        ]);
        assert_eq!(
            parse_slots(reply, "h:7001").unwrap(),
            [
                (0, 5460, String::from("10.0.0.1:7000")),
                (5461, 16383, String::from("h:7001")),
            ]
        );
    }
}
