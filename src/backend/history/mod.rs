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
//! [`Follower::next`](follow::Follower::next) decides. What the fields mean to people is
//! `admin`'s.

use std::time::Duration;

use anyhow::{anyhow, Result};

mod follow;
mod parse;
mod read;
mod tally;

pub use follow::Step;

use super::connection::Link;
use super::error::describe_error;
use super::layout::{queue_keys, record_keys, Key};
use super::{on_every_node, Deployment};
use read::{read_last, read_last_of_many};
use tally::Tally;

/// The most events `history -n` shows.
pub const MAX_EVENTS: usize = 10_000;

/// Events a quorum reads from each node beyond those it shows: an event near the oldest end
/// of the window may sit just past it on a node whose stream has extra noise of its own.
const QUORUM_SLACK: usize = 16;

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
}

/// The last `count` events of each of `locks`, oldest first, as [`last_of`] reads them:
/// on one server (not a cluster), in pipelines of many locks.
pub(in crate::backend) fn last_of_many(
    links: &mut [Link],
    locks: &[Key],
    count: usize,
) -> Vec<Result<Vec<Entry>, String>> {
    let count = count.min(MAX_EVENTS);
    match links {
        [link] if !link.is_cluster() => read_last_of_many(link, locks, count.max(1))
            .into_iter()
            .map(|read| {
                read.map(|mut events| {
                    events.reverse();
                    events
                })
                .map_err(|err| format!("{err:#}"))
            })
            .collect(),
        _ => locks
            .iter()
            .map(|lock| last_of(links, lock, count).map_err(|err| format!("{err:#}")))
            .collect(),
    }
}

/// The last `count` events of `lock` on the nodes `links` (one, or a quorum's), oldest
/// first, merged as [`History::recent`] merges them: for `serve`, which reads many locks
/// over the connections it keeps. An error when too few nodes could be read.
pub(in crate::backend) fn last_of(
    links: &mut [Link],
    lock: &Key,
    count: usize,
) -> Result<Vec<Entry>> {
    let count = count.min(MAX_EVENTS);
    let stream = record_keys(lock)[0].clone();
    if let [link] = links {
        let mut events = read_last(link, lock, &stream, count.max(1))?;
        events.reverse();
        return Ok(events);
    }
    let per_node = count * 2 + QUORUM_SLACK;
    let reads = on_every_node(links, |link| read_last(link, lock, &stream, per_node));
    let mut tally = Tally::new(reads.len());
    let mut unread = 0;
    for (index, read) in reads.into_iter().enumerate() {
        match read {
            Ok(entries) => {
                for entry in entries {
                    tally.count(index, entry);
                }
            }
            Err(_) => unread += 1,
        }
    }
    if links.len() - unread < tally.majority {
        return Err(anyhow!(
            "cannot read the history of {lock}: too few of the {} Redis nodes answered",
            links.len()
        ));
    }
    let mut events = tally.shown_now();
    let skip = events.len().saturating_sub(count);
    events.drain(..skip);
    Ok(events)
}

#[cfg(test)]
mod tests;
