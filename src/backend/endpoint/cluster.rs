//! Redis Cluster (`redis+cluster://`): the URL's form, the slot map and the hash slot of a
//! key. `CLUSTER SLOTS` from any reachable node maps slots to masters: the node that gave
//! the map last is asked first, then the masters last seen and the URL's seeds, and those
//! that failed last time at the end, each in its share of the time. A command with keys
//! goes to the owner of its first key's slot (every key of one lock shares a hash tag, so
//! one slot). Following `MOVED` and `ASK` is `connection.rs`'s part; a `MOVED` or any failure
//! marks the map stale, and the next call reads it again.

use std::time::Instant;

use anyhow::Result;
use redis::{ConnectionInfo, RedisResult, Value};

use super::url::{address, MultiUrl, NodeUrl};
use super::{connect, reason, share_until};
use crate::backend::error::{describe_error, is_auth_error, BackendError};

/// Where a `redis+cluster://` host without a port listens.
const REDIS_PORT: u16 = 6379;
/// How many hash slots Redis Cluster has.
const SLOTS: u16 = 16384;

pub(super) struct Cluster {
    seeds: Vec<String>,
    nodes: NodeUrl,
    /// Slot ranges (first, last, master's address), from the last refresh.
    slots: Vec<(u16, u16, String)>,
    /// Whether the map may be out of date (a redirection or a failure since the refresh).
    stale: bool,
    /// The node that gave the map last: asked first next time.
    answered: Option<String>,
    /// Nodes that failed when last asked: asked last, so that one that hangs does not cost
    /// every refresh its share of the time.
    failed: Vec<String>,
}

impl Cluster {
    /// `[user:password@]host[:port][,host[:port]…][/0]`
    pub(super) fn parse(rest: &str, tls: bool) -> Result<Cluster, String> {
        let url = MultiUrl::parse(rest, tls, REDIS_PORT)?;
        if !matches!(url.path.as_str(), "" | "/" | "/0") {
            return Err(String::from("Redis Cluster has only database 0"));
        }
        // The parameter is not named: it is text from the URL, which may hold a secret.
        if !url.query.is_empty() {
            return Err(String::from("a redis+cluster:// URL takes no parameters"));
        }
        let nodes = url.node_url(String::new());
        nodes.info(&url.hosts[0]).map_err(|err| err.to_string())?;
        Ok(Cluster {
            seeds: url.hosts,
            nodes,
            slots: Vec::new(),
            stale: true,
            answered: None,
            failed: Vec::new(),
        })
    }

    /// How to connect to the node at `address`.
    pub(super) fn info(&self, address: &str) -> RedisResult<ConnectionInfo> {
        self.nodes.info(address)
    }

    /// The map may be out of date: the next call reads it again.
    pub(super) fn mark_stale(&mut self) {
        self.stale = true;
    }

    /// Every master's address, from a fresh map.
    pub(super) fn masters(&mut self, until: Instant, display: &str) -> Result<Vec<String>> {
        self.refresh(until, display)?;
        let mut masters: Vec<String> = self
            .slots
            .iter()
            .map(|(_, _, address)| address.clone())
            .collect();
        masters.sort();
        masters.dedup();
        Ok(masters)
    }

    /// The address of the master that serves `slot`, refreshing the map first if it may be
    /// out of date.
    pub(super) fn owner(&mut self, slot: u16, until: Instant, display: &str) -> Result<String> {
        if self.stale || self.slots.is_empty() {
            self.refresh(until, display)?;
        }
        let owner = self
            .slots
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot));
        match owner {
            Some((_, _, address)) => Ok(address.clone()),
            None => Err(anyhow::Error::new(BackendError::transient(format!(
                "no master of {display} serves hash slot {slot} (the cluster is down or being \
                 set up)"
            )))),
        }
    }

    /// Reads the slot map from the first node that answers (in `candidates` order), each
    /// node in its share of the time before `until`.
    fn refresh(&mut self, until: Instant, display: &str) -> Result<()> {
        let candidates = self.candidates();
        self.failed.retain(|address| candidates.contains(address));
        let count = candidates.len();
        let mut last = String::from("no node answered");
        for (step, asked) in candidates.into_iter().enumerate() {
            let Ok(by) = share_until(until, count - step) else {
                last = match step {
                    0 => String::from("no time left to ask a node"),
                    _ => format!("{last}; no time left to ask the others"),
                };
                break;
            };
            let read = self.nodes.info(&asked).and_then(|info| {
                let mut connection = connect(info, by)?;
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query::<Value>(&mut connection)
            });
            match read {
                Ok(reply) => match parse_slots(reply, &asked) {
                    Some(slots) if !slots.is_empty() => {
                        self.slots = slots;
                        self.stale = false;
                        self.failed.retain(|address| *address != asked);
                        self.answered = Some(asked);
                        return Ok(());
                    }
                    _ => last = format!("{asked} serves no slots"),
                },
                Err(err) if is_auth_error(&err) => {
                    return Err(describe_error(err, &format!("{display} (node {asked})")));
                }
                Err(err) => last = format!("{asked}: {}", reason(&err)),
            }
            if !self.failed.contains(&asked) {
                self.failed.push(asked);
            }
        }
        Err(anyhow::Error::new(BackendError::transient(format!(
            "cannot read the slot map of {display}: {last}"
        ))))
    }

    /// The nodes to ask for the slot map, each once, in order: the one that gave it last,
    /// the masters last seen, the URL's seeds; those that failed when last asked go last.
    fn candidates(&self) -> Vec<String> {
        let mut candidates: Vec<String> = Vec::new();
        let known = self
            .answered
            .iter()
            .chain(self.slots.iter().map(|(_, _, a)| a));
        for address in known.chain(&self.seeds) {
            if !candidates.contains(address) {
                candidates.push(address.clone());
            }
        }
        // A stable sort: the order above holds within each group.
        candidates.sort_by_key(|address| self.failed.contains(address));
        candidates
    }
}

/// `CLUSTER SLOTS`: `[[first, last, [host, port, id, …], replicas…], …]`. A master whose
/// host is empty is the node asked (it does not know its own address).
pub(crate) fn parse_slots(reply: Value, asked: &str) -> Option<Vec<(u16, u16, String)>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::endpoint::tests::{blackhole, bulk, fake_server, redis_values};
    use proptest::prelude::*;
    use std::time::Duration;

    /// A one-node cluster: it serves every slot.
    fn lone_node() -> String {
        fake_server(|me, command| match command[0].as_str() {
            "CLUSTER" => {
                let (host, port) = me.rsplit_once(':').unwrap();
                let master = format!("*3\r\n{}:{port}\r\n{}", bulk(host), bulk("id"));
                format!("*1\r\n*3\r\n:0\r\n:16383\r\n{master}")
            }
            _ => String::from("-ERR unexpected\r\n"),
        })
    }

    #[test]
    fn a_node_that_never_answers_is_passed_and_then_asked_last() {
        let node = lone_node();
        let (_hole, hole) = blackhole();
        let mut cluster = Cluster::parse(&format!("{hole},{node}"), false).unwrap();
        let until = Instant::now() + Duration::from_secs(1);
        let owner = cluster.owner(42, until, "test");
        assert_eq!(owner.map_err(|err| format!("{err:#}")), Ok(node.clone()));
        assert!(Instant::now() < until);
        assert_eq!(cluster.candidates(), [node.clone(), hole.clone()]);
        cluster.mark_stale();
        let started = Instant::now();
        cluster
            .owner(42, started + Duration::from_secs(1), "test")
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "waited for the silent node: {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn nodes_are_asked_last_answered_first_and_last_failed_last() {
        let mut cluster = Cluster::parse("a:1,b:1,c:1", false).unwrap();
        assert_eq!(cluster.candidates(), ["a:1", "b:1", "c:1"]);
        cluster.slots = vec![(0, 99, "d:1".into()), (100, 16383, "a:1".into())];
        cluster.answered = Some("c:1".into());
        cluster.failed = vec!["a:1".into(), "d:1".into()];
        assert_eq!(cluster.candidates(), ["c:1", "b:1", "d:1", "a:1"]);
    }

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
    fn cluster_urls() {
        let c = Cluster::parse("u:p@h1:7000,h2", true).unwrap();
        assert_eq!(c.seeds, ["h1:7000", "h2:6379"]);
        assert_eq!(c.nodes.scheme, "rediss");
        for bad in ["h/1", "h?x=1", ""] {
            assert!(Cluster::parse(bad, false).is_err(), "accepted {bad}");
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Any reply to CLUSTER SLOTS is read without a panic, into ranges that are sorted
        /// and within the 16384 slots.
        #[test]
        fn any_slot_map_reply_is_read_or_refused(reply in redis_values(), asked in "[a-z:\\[\\]0-9]{0,8}") {
            if let Some(slots) = parse_slots(reply, &asked) {
                prop_assert!(slots.is_sorted());
                for (first, last, _) in slots {
                    prop_assert!(first <= last && last < SLOTS);
                }
            }
        }

        /// A well-formed map is read as it was sent.
        #[test]
        fn slot_maps_are_read_back(
            ranges in prop::collection::vec((0u16..SLOTS, 0u16..SLOTS, "[a-z0-9.]{1,8}", any::<u16>()), 0..5)
        ) {
            let reply = Value::Array(ranges.iter().map(|(a, b, host, port)| {
                Value::Array(vec![
                    Value::Int(i64::from(*a.min(b))),
                    Value::Int(i64::from(*a.max(b))),
                    Value::Array(vec![
                        Value::BulkString(host.clone().into_bytes()),
                        Value::Int(i64::from(*port)),
                    ]),
                ])
            }).collect());
            let mut expected: Vec<(u16, u16, String)> = ranges
                .iter()
                .map(|(a, b, host, port)| (*a.min(b), *a.max(b), format!("{host}:{port}")))
                .collect();
            expected.sort();
            prop_assert_eq!(parse_slots(reply, "h:1"), Some(expected));
        }

        /// Redis Cluster's rule: only the bytes between the first `{` and the first `}` after
        /// it are hashed, when there is at least one.
        #[test]
        fn hash_tags_choose_the_slot(
            before in prop::collection::vec(any::<u8>().prop_filter("no {", |b| *b != b'{'), 0..8),
            tag in prop::collection::vec(any::<u8>().prop_filter("no }", |b| *b != b'}'), 1..8),
            after in any::<Vec<u8>>(),
        ) {
            let key = [&before[..], b"{", &tag, b"}", &after].concat();
            prop_assert_eq!(key_slot(&key), crc16(&tag) % SLOTS);
            // No tag, or an empty one: the whole key.
            prop_assert_eq!(key_slot(&before), crc16(&before) % SLOTS);
            let empty = [&before[..], b"{}", &after].concat();
            prop_assert_eq!(key_slot(&empty), crc16(&empty) % SLOTS);
        }
    }
}
