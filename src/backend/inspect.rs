//! Reading locks for people (`status`, `list`) and removing a stuck one (`release
//! --force`), the same way for one server, Sentinel, Cluster and a Redlock quorum: an
//! [`Inspector`] reads every node (in parallel when there are several) and a [`LockView`]
//! holds what each node said, with the verdict of the whole: a lock is held when one holder
//! has it on a majority of the nodes (on the one node of a single deployment, when it has
//! it at all). Reads are single scripts, so what a node shows is one consistent moment; a
//! forced release deletes only the exact value it just read. The wording is `admin`'s.

use std::time::Duration;

use anyhow::Result;

use super::connection::Link;
use super::counters::{read_counters, NodeCounters};
use super::layout::{
    done_keys, fence_key, limit_key, lock_of_internal_key, process_metadata, queue_keys,
    record_keys, replace_key, slot_key, slot_number, supersede_key, Channels, Holder, Key, Once,
    Recording, MAX_LIMIT,
};
use super::protocol::warn_recorded;
use super::quorum::majority;
use super::scripts::{DryRun, ForceRelease, OnceArgs, Peek, PeekReply, RecordArgs};
use super::vetting::{self, Eviction};
use super::Deployment;

/// How many keys one SCAN step asks for.
const SCAN_BATCH: usize = 500;

/// The connections that `status`, `list` and `release` read and delete through: one per
/// node (a single deployment is one node).
pub struct Inspector {
    links: Vec<Link>,
    displays: Vec<String>,
}

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

/// What `--dry-run` asks of each node (see [`Inspector::dry_check`]).
#[derive(Debug, Clone)]
pub struct DryAsk {
    /// The lock's full key.
    pub key: Key,
    pub limit: u32,
    pub ttl: Duration,
    pub once: Once,
    pub supersede: bool,
    pub replace: bool,
}

/// What one node answered `--dry-run`.
#[derive(Debug, Clone)]
pub struct DryAnswer {
    /// Whether the ACL was asked (Redis 7 and later); if not, nothing was checked.
    pub acl_checked: bool,
    /// The record of the work already done (`--once`, `--once-per`): `<when ms> <value>`.
    pub done: Option<Vec<u8>>,
    /// The other `--limit` the lock is in use with, which refuses a real run (0: a value
    /// redlock-run did not write).
    pub other_limit: Option<u64>,
}

/// How a forced release went (the force_release script's reply).
pub use super::scripts::Forced;

/// What `release` does with a lock, decided from what the nodes said (see
/// [`LockView::release_plan`]); the wording is `admin`'s.
#[derive(Debug)]
pub enum ReleasePlan<'a> {
    /// Every node was read and none has anything: nothing to release.
    Free,
    /// None of the nodes read has anything, and they are a majority (`read` of them): free,
    /// as `status` says; the others could not be read.
    FreeOnMajority { read: usize },
    /// Without --force: only leftovers that no holder has a majority of (a failed or lost
    /// attempt, expiring by their TTL); nothing is deleted.
    Leftovers,
    /// Without --force: someone holds it (or too few nodes answered to tell): refused.
    /// `held`: every slot found, with its node.
    Refuse { held: Vec<(usize, &'a Slot)> },
    /// With --force: each slot found, with its node, is deleted if it still holds the value
    /// read; the nodes not read keep theirs until their TTL.
    Delete { held: Vec<(usize, &'a Slot)> },
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

impl Inspector {
    /// Readies a connection to each node; connects on first use.
    pub fn open(deployment: &Deployment, timeout: Duration) -> Result<Inspector> {
        let targets = deployment.targets();
        Ok(Inspector {
            links: targets
                .iter()
                .map(|target| Link::new(target, timeout))
                .collect::<Result<_>>()?,
            displays: targets.iter().map(|t| t.display.clone()).collect(),
        })
    }

    /// Whether the nodes are the independent masters of a Redlock quorum.
    pub fn is_quorum(&self) -> bool {
        self.links.len() > 1
    }

    /// How many nodes make a majority (1 of a single deployment).
    pub fn majority(&self) -> usize {
        majority(self.links.len())
    }

    /// The lock at `key` on every node.
    pub fn read(&mut self, key: &Key) -> LockView {
        let mut views = self.read_all(std::slice::from_ref(key));
        views.pop().unwrap_or_else(|| LockView {
            key: key.clone(),
            nodes: Vec::new(),
        })
    }

    /// Each of `keys` on every node. A node that fails is not asked again: it shows that
    /// failure for the rest of the keys.
    pub fn read_all(&mut self, keys: &[Key]) -> Vec<LockView> {
        let per_node = self.on_every_node(|link| {
            let mut read = Vec::with_capacity(keys.len());
            for key in keys {
                match read_lock(link, key) {
                    Ok(slots) => read.push(Ok(slots)),
                    Err(err) => {
                        let err = format!("{err:#}");
                        read.resize(keys.len(), Err(err));
                        break;
                    }
                }
            }
            read
        });
        keys.iter()
            .enumerate()
            .map(|(index, key)| LockView {
                key: key.clone(),
                nodes: per_node
                    .iter()
                    .zip(&self.displays)
                    .map(|(read, display)| NodeView {
                        display: display.clone(),
                        slots: read[index].clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// The counters of each of `keys` on every node (`{K}:stats`, its waiters and the
    /// server's clock), per key, one result per node. A node that fails is not asked again.
    pub fn counters(&mut self, keys: &[Key]) -> Vec<Vec<Result<NodeCounters, String>>> {
        let per_node = self.on_every_node(|link| {
            let mut read = Vec::with_capacity(keys.len());
            for key in keys {
                let call = read_counters(key);
                match link.call(None, |session| session.run(&call)) {
                    Ok(reply) => read.push(Ok(NodeCounters::read(key, reply))),
                    Err(err) => {
                        read.resize(keys.len(), Err(format!("{err:#}")));
                        break;
                    }
                }
            }
            read
        });
        (0..keys.len())
            .map(|index| per_node.iter().map(|read| read[index].clone()).collect())
            .collect()
    }

    /// The names of the locks under `prefix` that any node knows of, sorted, each once,
    /// with the nodes that could not be listed and why. `with_counters`: also the locks
    /// that have only their counters (`{K}:stats`) now, free and with nobody waiting.
    pub fn list(&mut self, prefix: &Key, with_counters: bool) -> (Vec<Key>, Vec<(String, String)>) {
        let listed = self.on_every_node(|link| list_locks(link, prefix, with_counters));
        let mut names = Vec::new();
        let mut failed = Vec::new();
        for (found, display) in listed.into_iter().zip(&self.displays) {
            match found {
                Ok(found) => names.extend(found),
                Err(err) => failed.push((display.clone(), format!("{err:#}"))),
            }
        }
        names.sort();
        names.dedup();
        (names, failed)
    }

    /// Deletes `slot` of the lock `key` on node `node` if it still holds the value read, and
    /// wakes the lock's waiters.
    pub fn force_release(&mut self, node: usize, key: &Key, slot: &Slot) -> Result<Forced> {
        force_release(&mut self.links[node], key, slot)
    }

    /// The takeover (`--replace`) standing on each node for the lock at `key`: the value of
    /// the run that asked for it; `None` where there is none or the node could not be read.
    pub fn takeover(&mut self, key: &Key) -> Vec<Option<Vec<u8>>> {
        let request = replace_key(key);
        self.on_every_node(|link| {
            peek(link, &request)
                .ok()
                .flatten()
                .and_then(|slot| slot.value)
        })
    }

    /// Deletes the takeover (`--replace`) standing for the lock at `key`, on every node:
    /// how many nodes had one, and the errors of the nodes that could not be reached.
    pub fn withdraw_takeover(&mut self, key: &Key) -> (usize, Vec<(String, String)>) {
        let request = replace_key(key);
        let results = self.on_every_node(|link| {
            link.call(None, |session| {
                session.query::<u64>(redis::cmd("DEL").arg(&request))
            })
        });
        let mut deleted = 0;
        let mut failed = Vec::new();
        for (node, result) in results.into_iter().enumerate() {
            match result {
                Ok(count) => deleted += usize::from(count > 0),
                Err(err) => failed.push((self.displays[node].clone(), format!("{err:#}"))),
            }
        }
        (deleted, failed)
    }

    /// `--dry-run`: what a real run checks of each node before it takes a lock, asked with
    /// reads only: that it answers (credentials), that it is a master, and that it keeps
    /// keys (eviction, a cluster node behind a plain URL). One result per node: its display
    /// and what refuses it, if anything.
    pub fn vet(&mut self, eviction: Eviction, cluster_url: bool) -> Vec<(String, Result<String>)> {
        let results = self.on_every_node(|link| vet_node(link, eviction, cluster_url));
        self.displays.iter().cloned().zip(results).collect()
    }

    /// `--dry-run`: on each node, whether the user's ACL allows every command a real run of
    /// `ask` would send (`Ok(false)` where the server cannot tell without running them:
    /// Redis before 7), and the `--once` record it would find. `Err`: what was refused,
    /// naming the command, or why the node could not be asked. Nothing is written.
    pub fn dry_check(&mut self, ask: &DryAsk) -> Vec<Result<DryAnswer>> {
        let key = &ask.key;
        let [queue, woken] = queue_keys(key);
        let [done_key, done_per_key] = done_keys(key);
        let token = crate::random::uuid_v4().to_string();
        self.on_every_node(|link| {
            let call = DryRun {
                slot: key.clone(),
                limit_key: limit_key(key),
                fence_key: fence_key(key),
                queue: queue.clone(),
                woken: woken.clone(),
                supersede_key: supersede_key(key),
                replace_key: replace_key(key),
                token: token.clone(),
                channels: Channels::of(key, link.is_cluster()),
                limit: ask.limit,
                ttl: ask.ttl,
                once: OnceArgs {
                    done_key: done_key.clone(),
                    done_per_key: done_per_key.clone(),
                    id: ask.once.id.clone().unwrap_or_default(),
                    per: ask.once.per.unwrap_or_default(),
                    stamp_ms: None,
                    remember: ask.once.remember,
                },
                supersede: ask.supersede,
                replace: ask.replace,
            };
            let reply = link.call(None, |session| session.run(&call))?;
            Ok(DryAnswer {
                acl_checked: reply.checked,
                done: reply.done,
                other_limit: reply.other_limit,
            })
        })
    }

    /// Runs `read` on every node at once; one result per node, in order.
    fn on_every_node<T: Send>(&mut self, read: impl Fn(&mut Link) -> T + Sync) -> Vec<T> {
        super::on_every_node(&mut self.links, read)
    }
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

    /// What `release` (`force`: `release --force`) is to do with this lock. Once every
    /// node said nothing is held, there is nothing to do, with or without --force.
    pub fn release_plan(&self, force: bool) -> ReleasePlan<'_> {
        let held: Vec<(usize, &Slot)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(node, view)| Some((node, view.slots.as_ref().ok()?)))
            .flat_map(|(node, slots)| slots.iter().map(move |slot| (node, slot)))
            .collect();
        let unread = self.unread().count();
        if held.is_empty() && unread == 0 {
            return ReleasePlan::Free;
        }
        // Free as `status` says it is: the nodes read are a majority and none holds anything.
        let read = self.nodes.len() - unread;
        if held.is_empty() && read >= self.majority() {
            return ReleasePlan::FreeOnMajority { read };
        }
        if force {
            return ReleasePlan::Delete { held };
        }
        match self.verdict() {
            Verdict::Free { .. } => ReleasePlan::Leftovers,
            _ => ReleasePlan::Refuse { held },
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
fn read_lock(link: &mut Link, key: &Key) -> Result<Vec<Slot>> {
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
            let in_value = found.holder.as_ref().and_then(|h| h.limit).unwrap_or(1);
            limit = limit.max(in_value.min(u64::from(MAX_LIMIT)) as u32);
            held.push(found);
        }
        slot += 1;
    }
    Ok(held)
}

/// One node for `--dry-run` (see [`Inspector::vet`]): `Ok` says its version and role.
fn vet_node(link: &mut Link, eviction: Eviction, cluster_url: bool) -> Result<String> {
    let display = link.display().to_string();
    let info = |session: &mut super::connection::Session<'_>, section: &str| {
        session
            .query::<String>(redis::cmd("INFO").arg(section))
            .map_err(|err| format!("{err:#}"))
    };
    let (server, memory, cluster, replication) = link.call(None, |session| {
        // TIME first (which a run needs, where PING is not among the documented ACL
        // rules): a wrong password or an unreachable server fails here, as it would fail
        // the run.
        session.query::<Vec<String>>(&redis::cmd("TIME"))?;
        Ok((
            info(session, "server"),
            info(session, "memory"),
            info(session, "cluster"),
            info(session, "replication"),
        ))
    })?;
    let facts = vetting::facts_from_texts(memory, cluster.as_deref().ok());
    if let Some(unfit) = vetting::unfit(Some(&facts), eviction, cluster_url) {
        return Err(unfit.error(&display));
    }
    let role = replication
        .as_deref()
        .ok()
        .and_then(|info| vetting::info_field(info, "role").map(str::to_string));
    if role.as_deref() == Some("slave") {
        anyhow::bail!(
            "{display} is a replica: a lock must be taken on a master (the run would be \
             refused with READONLY)"
        );
    }
    let version = server
        .as_deref()
        .ok()
        .and_then(|info| vetting::info_field(info, "redis_version").map(str::to_string));
    Ok(format!(
        "version {}, role {}",
        version.as_deref().unwrap_or("unknown"),
        role.as_deref()
            .unwrap_or("unknown (INFO replication refused)")
    ))
}

/// The names (full keys) of every lock under `prefix`, each once: keys that start with it,
/// less the locks' own bookkeeping keys (fence, limit, queue, slots), which stand for their
/// lock instead.
fn list_locks(link: &mut Link, prefix: &Key, with_counters: bool) -> Result<Vec<Key>> {
    let escaped = glob_escape(prefix.as_bytes());
    let mut names = Vec::new();
    // Untagged locks keep their bookkeeping under `{K}…`, outside the prefix: a semaphore
    // whose first slot is free is found through its limit key, a lock that has counters
    // through them.
    let mut patterns = vec![
        [escaped.as_slice(), b"*"].concat(),
        [b"{", escaped.as_slice(), b"*}:limit"].concat(),
    ];
    if with_counters {
        patterns.push([b"{", escaped.as_slice(), b"*}:stats"].concat());
    }
    for pattern in patterns {
        for name in scan(link, &pattern)? {
            names.push(lock_of_internal_key(&name).unwrap_or(name));
        }
    }
    names.retain(|name| name.starts_with(prefix.as_bytes()));
    names.sort();
    names.dedup();
    Ok(names)
}

/// Deletes `slot` if it still holds the value read, and wakes the lock's waiters.
fn force_release(link: &mut Link, lock_key: &Key, slot: &Slot) -> Result<Forced> {
    let Some(value) = &slot.value else {
        return Ok(Forced::Changed);
    };
    let [queue, woken] = queue_keys(lock_key);
    let [history_key, stats_key] = record_keys(lock_key);
    let force = ForceRelease {
        slot: slot.key.clone(),
        queue,
        woken,
        value: value.clone(),
        channels: Channels::of(lock_key, link.is_cluster()),
        recording: RecordArgs {
            history_key,
            stats_key,
            max: Recording::DEFAULT_HISTORY,
        },
        slot_number: slot_number(lock_key, &slot.key),
        by: process_metadata(),
    };
    let server = link.display().to_string();
    link.call(None, |session| {
        let reply = session.run(&force)?;
        warn_recorded(&reply.recorded, lock_key, &server);
        Ok(reply.forced)
    })
}

fn peek(link: &mut Link, key: &Key) -> Result<Option<Slot>> {
    let peek = Peek { key: key.clone() };
    let reply = link.call(None, |session| session.run(&peek))?;
    Ok(read_peek(key, reply))
}

/// What `peek.lua` answered for `key`, as a slot; `None` when there is no such key.
pub(crate) fn read_peek(key: &Key, reply: PeekReply) -> Option<Slot> {
    let PeekReply { kind, pttl, value } = reply;
    if kind == "none" {
        return None;
    }
    let holder = Holder::parse(&value);
    Some(Slot {
        key: key.clone(),
        value: (kind == "string").then_some(value),
        kind,
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        holder,
    })
}

/// The keys that match `pattern` on every server that holds keys: in a cluster, each
/// master has its own share, and SCAN on one sees only that.
fn scan(link: &mut Link, pattern: &[u8]) -> Result<Vec<Key>> {
    let mut found = Vec::new();
    for master in link.masters()? {
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) =
                link.call_on(Some(&master), None, |session| {
                    let mut scan = redis::cmd("SCAN");
                    scan.arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(SCAN_BATCH);
                    session.query(&scan)
                })?;
            found.extend(keys.into_iter().map(Key::new));
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(found)
}

/// `text` with the glob characters SCAN MATCH knows escaped.
fn glob_escape(text: &[u8]) -> Vec<u8> {
    let mut escaped = Vec::with_capacity(text.len());
    for &byte in text {
        if matches!(byte, b'*' | b'?' | b'[' | b']' | b'\\') {
            escaped.push(b'\\');
        }
        escaped.push(byte);
    }
    escaped
}

#[cfg(test)]
mod tests;
