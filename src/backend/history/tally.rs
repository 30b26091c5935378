//! Merging what the nodes recorded: an event is shown once a majority of them has it, at
//! the earliest time any of them recorded it, and only once. Not reading the nodes.

use std::collections::{HashMap, VecDeque};

use super::{Entry, MAX_EVENTS};
use crate::backend::quorum::majority;

/// How many events a follower remembers having seen (a quorum's tally), so that memory stays
/// bounded however long it follows.
const REMEMBERED: usize = 4 * MAX_EVENTS;

/// Which nodes recorded each event, and whether it was shown. On one server every entry
/// is an event of its own (by its ID); on a quorum an event is its run's token and its
/// name (an entry without a token is known by all its fields).
pub(super) struct Tally {
    quorum: bool,
    pub(super) majority: usize,
    seen: HashMap<Vec<u8>, Seen>,
    /// The identities in `seen`, oldest first, to forget the oldest past `REMEMBERED`.
    order: VecDeque<Vec<u8>>,
}

pub(super) struct Seen {
    nodes: Vec<usize>,
    /// The copy with the earliest time.
    first: Entry,
    shown: bool,
}

impl Tally {
    pub(super) fn new(nodes: usize) -> Tally {
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
    pub(super) fn add(&mut self, node: usize, entry: Entry) -> Option<Entry> {
        let majority = self.majority;
        let seen = self.count(node, entry);
        if seen.shown || seen.nodes.len() < majority {
            return None;
        }
        seen.shown = true;
        Some(seen.first.clone())
    }

    /// Counts `entry` as recorded by `node`, without showing anything.
    pub(super) fn count(&mut self, node: usize, entry: Entry) -> &mut Seen {
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
    pub(super) fn shown_now(&mut self) -> Vec<Entry> {
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
