//! `--dry-run`: what a real run would check of each node, asked with reads only: the
//! node's fitness ([`Inspector::vet`]) and the ACL and `--once` record ([`DryAsk`]).
//! Nothing is written; the wording is `dry_run`'s.

use std::time::Duration;

use anyhow::Result;

use super::Inspector;
use crate::backend::connection::Link;
use crate::backend::layout::{
    done_keys, fence_key, limit_key, queue_keys, replace_key, supersede_key, Channels, Key, Once,
};
use crate::backend::scripts::{DryRun, OnceArgs};
use crate::backend::vetting::{self, Eviction};

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

impl Inspector {
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
}

/// One node for `--dry-run` (see [`Inspector::vet`]): `Ok` says its version and role.
fn vet_node(link: &mut Link, eviction: Eviction, cluster_url: bool) -> Result<String> {
    let display = link.display().to_string();
    let info = |session: &mut crate::backend::connection::Session<'_>, section: &str| {
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
