//! Reading one lock as every node has it: the slots each node holds ([`LockView`],
//! [`NodeView`], [`Slot`]) and what they say together ([`Verdict`]). Not what `release`
//! does with it (`release`), nor the listing of locks (`list`).

use std::time::Duration;

use anyhow::Result;

use crate::backend::connection::Link;
use crate::backend::layout::{
    limit_key, shared_keys, slot_key, Holder, Key, MAX_LIMIT, MAX_VALUE_LEN,
};
use crate::backend::quorum::majority;
use crate::backend::scripts::{Peek, PeekReply, PeekShares, SharesReply};

/// What one node said about a lock: its held slots, or why it could not be read.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub display: String,
    pub slots: Result<Vec<Slot>, String>,
}

/// One lock as every node has it now.
#[derive(Debug, Clone)]
pub struct LockView {
    /// The lock's full key.
    pub key: Key,
    pub nodes: Vec<NodeView>,
}

/// What the nodes say together.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// One holder (by its identity) has a majority of the nodes.
    Held { identity: Vec<u8>, nodes: usize },
    /// No holder has a majority, and the nodes that could not be read could not change
    /// that. `strays`: nodes that still have some value (an acquisition in progress, or
    /// what a lost or split one left to expire).
    Free { strays: usize },
    /// Too many nodes could not be read to tell.
    Unknown,
}

impl LockView {
    /// Whether the lock lives on several independent nodes (Redlock).
    pub fn is_quorum(&self) -> bool {
        self.nodes.len() > 1
    }

    pub fn majority(&self) -> usize {
        majority(self.nodes.len())
    }

    pub fn verdict(&self) -> Verdict {
        let majority = self.majority();
        let mut counts: Vec<(Vec<u8>, usize)> = Vec::new();
        let mut unread = 0;
        let mut strays = 0;
        for view in &self.nodes {
            match &view.slots {
                Err(_) => unread += 1,
                Ok(slots) => {
                    let Some(first) = slots.first() else { continue };
                    strays += 1;
                    let who = first.identity();
                    match counts.iter_mut().find(|(identity, _)| *identity == who) {
                        Some((_, count)) => *count += 1,
                        None => counts.push((who, 1)),
                    }
                }
            }
        }
        let most = counts.iter().max_by_key(|(_, count)| *count).cloned();
        match most {
            Some((identity, nodes)) if nodes >= majority => Verdict::Held { identity, nodes },
            Some((_, nodes)) if nodes + unread >= majority => Verdict::Unknown,
            None if unread >= majority => Verdict::Unknown,
            _ => Verdict::Free { strays },
        }
    }

    /// The nodes that could not be read: each one's display and why.
    pub fn unread(&self) -> impl Iterator<Item = (&str, &str)> {
        self.nodes.iter().filter_map(|node| {
            let err = node.slots.as_ref().err()?;
            Some((node.display.as_str(), err.as_str()))
        })
    }

    /// The slot of the holder `identity` on the node where its lease ends first (the
    /// quorum holds it at least that long).
    pub fn holder_slot(&self, identity: &[u8]) -> Option<&Slot> {
        self.nodes
            .iter()
            .filter_map(|view| view.slots.as_ref().ok()?.first())
            .filter(|slot| slot.identity() == identity)
            .min_by_key(|slot| slot.ttl.unwrap_or(Duration::MAX))
    }
}

/// One held slot of a lock, as Redis has it now.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The Redis key of this slot.
    pub key: Key,
    /// The value when the key is a string; `None` for another type (another
    /// application's hash, list, …).
    pub value: Option<Vec<u8>>,
    /// The key's Redis type (`string`, `hash`, …).
    pub kind: String,
    /// Time left before it expires; `None` when it never does.
    pub ttl: Option<Duration>,
    /// Who holds it, when the value is one redlock-run wrote.
    pub holder: Option<Holder>,
    /// The whole length of a string value (`value` holds at most its first
    /// [`MAX_VALUE_LEN`] bytes; a longer one is never ours); 0 for another type.
    pub length: u64,
    /// Whether it is a share of a shared group (`--shared`): `key` is then the lock's own
    /// key, `value` the share's, and `ttl` the time left of that share's lease.
    pub shared: bool,
}

impl Slot {
    /// Who holds it, the same on every node: the token for values of ours, else the value.
    fn identity(&self) -> Vec<u8> {
        match (&self.holder, &self.value) {
            (Some(holder), _) => holder.token.clone().unwrap_or_default().into_bytes(),
            (None, Some(value)) => value.clone(),
            (None, None) => format!("a {}", self.kind).into_bytes(),
        }
    }
}

/// The held slots of the lock at `key` (empty when free): slot 1, and with a semaphore
/// (its `{K}:limit` key, or a holder's value, says how many slots) the others.
pub(super) fn read_lock(link: &mut Link, key: &Key) -> Result<Vec<Slot>> {
    let declared = peek(link, &limit_key(key))?
        .and_then(|limit| {
            String::from_utf8(limit.value?)
                .ok()?
                .trim()
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(1);
    let mut limit = declared.clamp(1, MAX_LIMIT);
    let mut held = Vec::new();
    let mut slot = 1;
    while slot <= limit {
        if let Some(found) = peek(link, &slot_key(key, slot))? {
            if slot == 1 && found.value.as_deref().is_some_and(is_group) {
                // A shared group: its shares are the holders (none: the group is ending).
                return read_shares(link, key, found);
            }
            let in_value = found.holder.as_ref().and_then(|h| h.limit).unwrap_or(1);
            limit = limit.max(in_value.min(u64::from(MAX_LIMIT)) as u32);
            held.push(found);
        }
        slot += 1;
    }
    Ok(held)
}

pub(super) fn peek(link: &mut Link, key: &Key) -> Result<Option<Slot>> {
    let peek = Peek { key: key.clone() };
    let reply = link.call(None, |session| session.run(&peek))?;
    Ok(read_peek(key, reply))
}

/// What `peek.lua` answered for `key`, as a slot; `None` when there is no such key.
pub(crate) fn read_peek(key: &Key, reply: PeekReply) -> Option<Slot> {
    let PeekReply {
        kind,
        pttl,
        value,
        length,
    } = reply;
    if kind == "none" {
        return None;
    }
    let holder = (length <= MAX_VALUE_LEN)
        .then(|| Holder::parse(&value))
        .flatten();
    Some(Slot {
        key: key.clone(),
        value: (kind == "string").then_some(value),
        kind,
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        holder,
        length,
        shared: false,
    })
}

/// Whether `value` is a shared group's (see `is_group` in prelude.lua).
pub(super) fn is_group(value: &[u8]) -> bool {
    value
        .strip_prefix(br#"{"token":""#)
        .and_then(|rest| {
            rest.iter()
                .position(|&byte| byte == b'"')
                .map(|end| &rest[..end])
        })
        .is_some_and(|token| token.ends_with(b":shared"))
}

/// A shared group's holders: each live share of `{K}:shares`, as a slot of `key`; when
/// the group's keys are not what redlock-run writes, `group` (slot 1) as held by an
/// unknown holder.
fn read_shares(link: &mut Link, key: &Key, group: Slot) -> Result<Vec<Slot>> {
    let [shares, expiries, _] = shared_keys(key);
    let peek = PeekShares { shares, expiries };
    let SharesReply(shares) = link.call(None, |session| session.run(&peek))?;
    let Some(shares) = shares else {
        return Ok(vec![Slot {
            holder: None,
            ..group
        }]);
    };
    Ok(shares
        .into_iter()
        .map(|(value, left, length)| Slot {
            key: key.clone(),
            holder: (length <= MAX_VALUE_LEN)
                .then(|| Holder::parse(&value))
                .flatten(),
            length,
            value: Some(value),
            kind: String::from("string"),
            ttl: u64::try_from(left).ok().map(Duration::from_millis),
            shared: true,
        })
        .collect())
}
