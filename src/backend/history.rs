//! Reading a lock's event history for `redlock-run history`: `{K}:history`, a Redis Stream
//! that the lock's own scripts append to (one entry per event, stamped by the server's
//! clock, its fields as `layout` describes them). The last events are read with
//! `XREVRANGE`, new ones as they come with a blocking `XREAD` (no polling), and nothing
//! else is sent: a reader needs no more rights than those two (and `status`'s script, to
//! name the type of a key that is not a stream).
//!
//! On a Redlock quorum every node keeps its own stream; an event (its run's `token` and
//! its `event`) is shown once a majority of the nodes recorded it, at the earliest time any
//! of them did: what one node alone recorded (a release that found the key gone there only)
//! is that node's noise. Following a quorum, one thread per node reads and only reports;
//! [`Follower::next`] decides. What the fields mean to people is `admin`'s.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use anyhow::{anyhow, Result};
use redis::Value;

use super::connection::Link;
use super::error::describe_error;
use super::inspect::read_peek;
use super::layout::{queue_keys, record_keys, Key};
use super::quorum::majority;
use super::scripts::Peek;
use super::{on_every_node, Deployment};

/// The most events `history -n` shows.
pub const MAX_EVENTS: usize = 10_000;

/// Events a quorum reads from each node beyond those it shows: an event near the oldest end
/// of the window may sit just past it on a node whose stream has extra noise of its own.
const QUORUM_SLACK: usize = 16;

/// How many events a follower remembers having seen (a quorum's tally), so that memory stays
/// bounded however long it follows.
const REMEMBERED: usize = 4 * MAX_EVENTS;

/// The longest one blocking read waits before it is sent again.
const LONGEST_BLOCK: Duration = Duration::from_secs(60);

/// One entry of a history stream, as Redis keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The stream ID (`<ms>-<seq>`).
    pub id: String,
    /// When it was recorded, in ms since the epoch by the server's clock (the ID's first
    /// part); `None` for an ID that is not one.
    pub ms: Option<u64>,
    seq: u64,
    /// Every field and its value, in the order stored; a foreign writer's as they are.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Entry {
    /// The first value of the field `name`.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(field, _)| field == name.as_bytes())
            .map(|(_, value)| value.as_slice())
    }

    /// An entry as a test wants it.
    #[cfg(test)]
    pub fn for_tests(id: &str, ms: Option<u64>, fields: Vec<(Vec<u8>, Vec<u8>)>) -> Entry {
        Entry {
            id: id.into(),
            ms,
            seq: 0,
            fields,
        }
    }

    fn order(&self) -> (u64, u64) {
        (self.ms.unwrap_or(0), self.seq)
    }
}

/// The last events, and the nodes of a quorum that could not be read.
#[derive(Debug)]
pub struct Recent {
    /// Oldest first.
    pub events: Vec<Entry>,
    /// Each node not read, and why.
    pub unread: Vec<(String, String)>,
}

/// The history of one lock, on every node.
pub struct History {
    lock: Key,
    stream: Key,
    nodes: Vec<Node>,
    tally: Tally,
}

struct Node {
    link: Link,
    display: String,
    /// The newest ID read: a follower reads from there (`0-0`: from the start).
    cursor: String,
    /// Why it could not be read, when it could not.
    failed: Option<String>,
}

impl History {
    /// Readies a connection to each node for the history of lock `key`; connects on first
    /// use.
    pub fn open(deployment: &Deployment, timeout: Duration, key: &Key) -> Result<History> {
        let nodes = deployment
            .targets()
            .iter()
            .map(|target| {
                Ok(Node {
                    link: Link::new(target, timeout)?,
                    display: target.display.clone(),
                    cursor: String::from("0-0"),
                    failed: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let count = nodes.len();
        Ok(History {
            lock: key.clone(),
            stream: record_keys(key)[0].clone(),
            nodes,
            tally: Tally::new(count),
        })
    }

    /// The last `count` events (up to [`MAX_EVENTS`]), oldest first. One server that
    /// cannot be read, or a key that is not a stream, is an error; so is a quorum of which
    /// too few nodes could be read.
    pub fn recent(&mut self, count: usize) -> Result<Recent> {
        let count = count.min(MAX_EVENTS);
        let quorum = self.nodes.len() > 1;
        // Without showing any, a follower still reads a few: its cursor, and a quorum's
        // events that some nodes recorded already and the others may yet.
        let per_node = if quorum {
            count * 2 + QUORUM_SLACK
        } else {
            count.max(1)
        };
        let stream = &self.stream;
        let lock = &self.lock;
        let reads = on_every_node(&mut self.nodes, |node| {
            read_last(&mut node.link, lock, stream, per_node)
        });
        let mut unread = Vec::new();
        for (index, read) in reads.into_iter().enumerate() {
            let node = &mut self.nodes[index];
            match read {
                Ok(entries) => {
                    if let Some(newest) = entries.first() {
                        node.cursor = newest.id.clone();
                    }
                    for entry in entries {
                        self.tally.count(index, entry);
                    }
                }
                Err(err) if !quorum => return Err(err),
                Err(err) => {
                    let err = format!("{err:#}");
                    node.failed = Some(err.clone());
                    unread.push((node.display.clone(), err));
                }
            }
        }
        if quorum && self.nodes.len() - unread.len() < self.tally.majority {
            let why: Vec<String> = unread
                .iter()
                .map(|(display, err)| format!("{display}: {err}"))
                .collect();
            return Err(anyhow!(
                "cannot read the history of {}: too few of the {} Redis nodes answered ({})",
                self.lock,
                self.nodes.len(),
                why.join("; ")
            ));
        }
        let mut events = self.tally.shown_now();
        let skip = events.len().saturating_sub(count);
        events.drain(..skip);
        Ok(Recent { events, unread })
    }

    /// The last `count` events as [`History::recent`] reads them, those read before
    /// included: a waiter's estimate reads them again every few seconds.
    pub fn again(&mut self, count: usize) -> Result<Recent> {
        self.tally = Tally::new(self.nodes.len());
        self.recent(count)
    }

    /// How many runs wait for the lock, the one asking included: its queue's size (on a
    /// quorum, the most that a majority of the nodes hold). A waiter's line shows it.
    pub fn waiters(&mut self) -> Result<u64> {
        let [queue, _] = queue_keys(&self.lock);
        let mut counts = on_every_node(&mut self.nodes, |node| {
            let command = redis::cmd("ZCARD").arg(&queue).to_owned();
            match node
                .link
                .call(None, |session| session.query_keyed::<u64>(&queue, &command))?
            {
                Ok(count) => Ok(count),
                Err((err, at)) => Err(describe_error(err, &at)),
            }
        })
        .into_iter()
        .collect::<Result<Vec<u64>>>()?;
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let rank = self.tally.majority.min(counts.len()).max(1);
        counts
            .get(rank - 1)
            .copied()
            .ok_or_else(|| anyhow!("no Redis node to read"))
    }

    /// From here on, the events recorded after those [`History::recent`] read, as a
    /// majority of the nodes records them: one thread per node that could be read, each
    /// blocking in `XREAD` for a little less than the Redis timeout at a time.
    pub fn follow(self) -> Follower {
        let (sender, receiver) = mpsc::channel();
        let mut alive = 0;
        let mut displays = Vec::new();
        for (index, node) in self.nodes.into_iter().enumerate() {
            displays.push(node.display.clone());
            if node.failed.is_some() {
                continue;
            }
            let sender = sender.clone();
            let stream = self.stream.clone();
            let lock = self.lock.clone();
            let Node {
                mut link,
                mut cursor,
                ..
            } = node;
            let spawned = std::thread::Builder::new()
                .name(format!("history-{index}"))
                .spawn(move || loop {
                    match read_after(&mut link, &lock, &stream, &cursor) {
                        Ok(entries) => {
                            let Some(newest) = entries.last() else {
                                continue;
                            };
                            cursor = newest.id.clone();
                            if sender.send((index, Ok(entries))).is_err() {
                                return;
                            }
                        }
                        Err(err) => {
                            let _ = sender.send((index, Err(format!("{err:#}"))));
                            return;
                        }
                    }
                });
            // A reader that cannot start counts as a node that stopped answering.
            alive += usize::from(spawned.is_ok());
        }
        Follower {
            receiver,
            tally: self.tally,
            alive,
            displays,
            lock: self.lock,
        }
    }
}

/// What a follower has for its caller next.
#[derive(Debug)]
pub enum Step {
    /// Events that just reached a majority of the nodes (every event, on one server).
    Events(Vec<Entry>),
    /// A node of a quorum stopped answering: its display and why. The others go on.
    NodeFailed { display: String, error: String },
}

/// New events as they come: see [`History::follow`].
pub struct Follower {
    receiver: Receiver<(usize, Result<Vec<Entry>, String>)>,
    tally: Tally,
    /// Readers still reading.
    alive: usize,
    displays: Vec<String>,
    lock: Key,
}

impl Follower {
    /// Waits for the next step. An error once the one server, or so many nodes of a quorum
    /// that no majority is left, stopped answering.
    pub fn next(&mut self) -> Result<Step> {
        loop {
            if self.alive < self.tally.majority {
                return Err(anyhow!(
                    "cannot follow the history of {}: too few Redis nodes answer",
                    self.lock
                ));
            }
            let Ok((node, read)) = self.receiver.recv() else {
                return Err(anyhow!("cannot follow the history of {}", self.lock));
            };
            match read {
                Ok(entries) => {
                    let events: Vec<Entry> = entries
                        .into_iter()
                        .filter_map(|entry| self.tally.add(node, entry))
                        .collect();
                    if !events.is_empty() {
                        return Ok(Step::Events(events));
                    }
                }
                Err(error) => {
                    self.alive = self.alive.saturating_sub(1);
                    if self.displays.len() == 1 {
                        return Err(anyhow!(
                            "cannot follow the history of {}: {error}",
                            self.lock
                        ));
                    }
                    if self.alive < self.tally.majority {
                        return Err(anyhow!(
                            "cannot follow the history of {}: too few of the {} Redis nodes \
                             answer ({}: {error})",
                            self.lock,
                            self.displays.len(),
                            self.displays[node]
                        ));
                    }
                    return Ok(Step::NodeFailed {
                        display: self.displays[node].clone(),
                        error,
                    });
                }
            }
        }
    }
}

/// Which nodes recorded each event, and whether it was shown. On one server every entry
/// is an event of its own (by its ID); on a quorum an event is its run's token and its
/// name (an entry without a token is known by all its fields).
struct Tally {
    quorum: bool,
    majority: usize,
    seen: HashMap<Vec<u8>, Seen>,
    /// The identities in `seen`, oldest first, to forget the oldest past `REMEMBERED`.
    order: VecDeque<Vec<u8>>,
}

struct Seen {
    nodes: Vec<usize>,
    /// The copy with the earliest time.
    first: Entry,
    shown: bool,
}

impl Tally {
    fn new(nodes: usize) -> Tally {
        Tally {
            quorum: nodes > 1,
            majority: majority(nodes),
            seen: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn identity(&self, entry: &Entry) -> Vec<u8> {
        if !self.quorum {
            return entry.id.clone().into_bytes();
        }
        let mut identity = Vec::new();
        match (entry.get("token"), entry.get("event")) {
            (Some(token), Some(event)) => {
                for part in [b"t".as_slice(), token, event] {
                    identity.extend_from_slice(&(part.len() as u64).to_le_bytes());
                    identity.extend_from_slice(part);
                }
            }
            _ => {
                identity.push(b'f');
                for (field, value) in &entry.fields {
                    for part in [field, value] {
                        identity.extend_from_slice(&(part.len() as u64).to_le_bytes());
                        identity.extend_from_slice(part);
                    }
                }
            }
        }
        identity
    }

    /// Counts `entry` as recorded by `node`; the event when this made it reach a majority
    /// for the first time and it was not shown yet (it is then counted as shown).
    fn add(&mut self, node: usize, entry: Entry) -> Option<Entry> {
        let majority = self.majority;
        let seen = self.count(node, entry);
        if seen.shown || seen.nodes.len() < majority {
            return None;
        }
        seen.shown = true;
        Some(seen.first.clone())
    }

    /// Counts `entry` as recorded by `node`, without showing anything.
    fn count(&mut self, node: usize, entry: Entry) -> &mut Seen {
        let identity = self.identity(&entry);
        if !self.seen.contains_key(&identity) {
            if self.order.len() >= REMEMBERED {
                if let Some(oldest) = self.order.pop_front() {
                    self.seen.remove(&oldest);
                }
            }
            self.order.push_back(identity.clone());
        }
        let seen = self.seen.entry(identity).or_insert_with(|| Seen {
            nodes: Vec::new(),
            first: entry.clone(),
            shown: false,
        });
        if !seen.nodes.contains(&node) {
            seen.nodes.push(node);
        }
        if entry.order() < seen.first.order() {
            seen.first = entry;
        }
        seen
    }

    /// Every event a majority recorded and not shown yet, by time; all counted as shown.
    fn shown_now(&mut self) -> Vec<Entry> {
        let majority = self.majority;
        let mut events: Vec<Entry> = self
            .seen
            .values_mut()
            .filter(|seen| !seen.shown && seen.nodes.len() >= majority)
            .map(|seen| {
                seen.shown = true;
                seen.first.clone()
            })
            .collect();
        events.sort_by_key(Entry::order);
        events
    }
}

/// The last `count` entries of `stream`, newest first.
fn read_last(link: &mut Link, lock: &Key, stream: &Key, count: usize) -> Result<Vec<Entry>> {
    let mut command = redis::cmd("XREVRANGE");
    command
        .arg(stream)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(count);
    let reply = link.call(None, |session| {
        session.query_keyed::<Value>(stream, &command)
    })?;
    match reply {
        Ok(reply) => Ok(entries_of(reply)),
        Err((err, node)) => Err(refused(link, lock, stream, err, &node)),
    }
}

/// The entries of `stream` after the ID `after`, oldest first; none when nothing came
/// within a little less than the Redis timeout.
fn read_after(link: &mut Link, lock: &Key, stream: &Key, after: &str) -> Result<Vec<Entry>> {
    let timeout = link.timeout();
    let block = timeout
        .saturating_sub((timeout / 2).min(Duration::from_secs(1)))
        .clamp(Duration::from_millis(1), LONGEST_BLOCK);
    let mut command = redis::cmd("XREAD");
    command
        .arg("COUNT")
        .arg(MAX_EVENTS)
        .arg("BLOCK")
        .arg(block.as_millis() as u64)
        .arg("STREAMS")
        .arg(stream)
        .arg(after);
    let reply = link.call(None, |session| {
        session.query_keyed::<Value>(stream, &command)
    })?;
    match reply {
        Ok(Value::Nil) => Ok(Vec::new()),
        Ok(reply) => {
            let mut entries = Vec::new();
            for (_, read) in pairs(reply) {
                entries.extend(entries_of(read));
            }
            Ok(entries)
        }
        Err((err, node)) => Err(refused(link, lock, stream, err, &node)),
    }
}

/// A command's error reply, worded: a key of another type is named, with its type when
/// `status`'s script can say it.
fn refused(
    link: &mut Link,
    lock: &Key,
    stream: &Key,
    err: redis::RedisError,
    node: &str,
) -> anyhow::Error {
    if err.code() != Some("WRONGTYPE") {
        return describe_error(err, node);
    }
    let peek = Peek {
        key: stream.clone(),
    };
    let kind = link
        .call(None, |session| session.run(&peek))
        .ok()
        .and_then(|reply| read_peek(stream, reply))
        .map_or_else(
            || String::from("another type of value"),
            |slot| format!("a {}", slot.kind),
        );
    anyhow!(
        "{stream} on {node} holds {kind}, not a stream: it is not the history of the lock \
         {lock} (another application's key?); nothing was read from it"
    )
}

/// The pairs of an `XREAD` reply (stream name, its entries): an array of pairs (RESP2) or
/// a map (RESP3).
fn pairs(reply: Value) -> Vec<(Value, Value)> {
    match reply {
        Value::Map(pairs) => pairs,
        Value::Array(items) => items
            .into_iter()
            .filter_map(|item| match item {
                Value::Array(pair) => {
                    let mut pair = pair.into_iter();
                    Some((pair.next()?, pair.next()?))
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The entries of a stream reply (`[[id, [field, value, …]], …]`); what is not one is
/// skipped.
fn entries_of(reply: Value) -> Vec<Entry> {
    let Value::Array(items) = reply else {
        return Vec::new();
    };
    items.into_iter().filter_map(entry_of).collect()
}

fn entry_of(item: Value) -> Option<Entry> {
    let Value::Array(parts) = item else {
        return None;
    };
    let mut parts = parts.into_iter();
    let id = String::from_utf8_lossy(&bytes_of(parts.next()?)?).into_owned();
    let flat: Vec<Vec<u8>> = match parts.next() {
        Some(Value::Array(flat)) => flat.into_iter().filter_map(bytes_of).collect(),
        Some(Value::Map(map)) => map
            .into_iter()
            .flat_map(|(field, value)| [bytes_of(field), bytes_of(value)])
            .flatten()
            .collect(),
        _ => Vec::new(),
    };
    let mut flat = flat.into_iter();
    let mut fields = Vec::new();
    while let (Some(field), Some(value)) = (flat.next(), flat.next()) {
        fields.push((field, value));
    }
    let (ms, seq) = match id.split_once('-') {
        Some((ms, seq)) => (ms.parse().ok(), seq.parse().unwrap_or(0)),
        None => (id.parse().ok(), 0),
    };
    Some(Entry {
        id,
        ms,
        seq,
        fields,
    })
}

fn bytes_of(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.into_bytes()),
        Value::Int(number) => Some(number.to_string().into_bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, fields: &[(&str, &str)]) -> Entry {
        let (ms, seq) = id.split_once('-').unwrap();
        Entry {
            id: id.into(),
            ms: ms.parse().ok(),
            seq: seq.parse().unwrap(),
            fields: fields
                .iter()
                .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
        }
    }

    #[test]
    fn a_quorum_shows_what_a_majority_recorded_at_its_earliest_time() {
        let mut tally = Tally::new(3);
        let acquired = [("event", "acquired"), ("token", "a")];
        let lost = [("event", "lost"), ("token", "a")];
        assert_eq!(tally.add(0, entry("20-0", &acquired)), None);
        assert_eq!(
            tally.add(2, entry("30-0", &lost)),
            None,
            "one node of three"
        );
        let shown = tally
            .add(1, entry("10-0", &acquired))
            .expect("two of three");
        assert_eq!(shown.id, "10-0");
        assert_eq!(tally.add(2, entry("25-0", &acquired)), None, "shown once");
        assert!(tally.shown_now().is_empty());
    }

    #[test]
    fn what_was_counted_is_shown_by_time_then_never_again() {
        let mut tally = Tally::new(3);
        let acquired = [("event", "acquired"), ("token", "a")];
        let busy = [("event", "busy"), ("token", "b")];
        tally.count(0, entry("30-0", &busy));
        tally.count(1, entry("31-0", &busy));
        tally.count(0, entry("20-0", &acquired));
        tally.count(2, entry("21-0", &acquired));
        tally.count(2, entry("40-0", &[("event", "lost"), ("token", "a")]));
        let ids: Vec<String> = tally.shown_now().into_iter().map(|e| e.id).collect();
        assert_eq!(ids, ["20-0", "30-0"]);
        assert_eq!(tally.add(1, entry("22-0", &acquired)), None);
        assert!(tally.shown_now().is_empty());
    }

    #[test]
    fn one_server_shows_every_entry_even_alike_ones() {
        let mut tally = Tally::new(1);
        let busy = [("event", "busy"), ("token", "b")];
        assert!(tally.add(0, entry("1-0", &busy)).is_some());
        assert!(tally.add(0, entry("1-1", &busy)).is_some());
    }

    #[test]
    fn replies_of_any_shape_are_read_or_skipped() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::BulkString(b"5-1".to_vec()),
                Value::Array(vec![
                    Value::BulkString(b"event".to_vec()),
                    Value::BulkString(b"busy".to_vec()),
                    Value::BulkString(b"odd".to_vec()),
                ]),
            ]),
            Value::Int(3),
            Value::Array(vec![]),
            Value::Array(vec![Value::BulkString(b"junk".to_vec())]),
        ]);
        let entries = entries_of(reply);
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert_eq!(entries[0].ms, Some(5));
        assert_eq!(entries[0].fields.len(), 1);
        assert_eq!(entries[1].ms, None);
        assert!(entries_of(Value::Nil).is_empty());
        assert!(pairs(Value::Okay).is_empty());
    }
}
