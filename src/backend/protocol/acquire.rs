//! Taking the lock on one deployment: the acquire script with the server's vetting in the
//! same write, the retry of a reply lost on the wire, letting go on an unfit server, and
//! raising the fence (Redlock). Not renewing or releasing (`renew`, `release`).

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::warnings::{confirm_replicated, warn_foreign, warn_recorded, warn_repaired};
use super::{budget_end, SingleRedis};
use crate::backend::error::{is_transient, FenceTooLarge};
use crate::backend::layout::{
    fence_key, limit_key, queue_keys, replace_key, shared_keys, supersede_key, waiting_key,
};
use crate::backend::scripts::{Acquire, AcquireShared, Acquisition, RaiseFence};
use crate::backend::vetting;
use crate::backend::Attempt;
use crate::{lease, report};

impl SingleRedis {
    /// One attempt to take the lock, as `LockBackend::try_acquire`, giving up at `deadline`
    /// (a Redlock node must answer within the acquisition's round).
    pub fn try_acquire_until(
        &mut self,
        deadline: Option<Instant>,
        waited: Duration,
    ) -> Result<Attempt> {
        let limit = self.lock.limit;
        let [queue, woken] = queue_keys(&self.lock.key);
        let acquire = Acquire {
            slots: (1..=limit).map(|slot| self.lock.slot_key(slot)).collect(),
            limit_key: limit_key(&self.lock.key),
            fence_key: fence_key(&self.lock.key),
            queue,
            woken,
            replace_key: replace_key(&self.lock.key),
            waiting_key: waiting_key(&self.lock.key),
            identity: self.identity.clone(),
            metadata: self.lock.metadata.clone(),
            ttl: self.lock.ttl,
            limit,
            fair: self.lock.fair,
            token: self.lock.token.clone(),
            channels: self.channels.clone(),
            listening: self.listening,
            arrival_ms: self.lock.arrival_ms,
            want_run_id: self.server_id.as_ref().is_some_and(|id| id.get().is_none()),
            supersede_key: supersede_key(&self.lock.key),
            supersede: self.lock.supersede,
            arrived: self.arrived,
            once: self.once_args(),
            replace: self.lock.replace,
            recording: self.record_args(),
            waited,
            final_try: self.lock.recording.final_try,
        };
        // --shared: the same attempt, by the shared-mode script (same reply).
        let shared = self.lock.shared.then(|| AcquireShared {
            lock: self.lock.key.clone(),
            shared_keys: shared_keys(&self.lock.key),
            fence_key: acquire.fence_key.clone(),
            queue: acquire.queue.clone(),
            woken: acquire.woken.clone(),
            waiting_key: acquire.waiting_key.clone(),
            identity: self.identity.clone(),
            metadata: self.lock.metadata.clone(),
            ttl: self.lock.ttl,
            token: self.lock.token.clone(),
            channels: self.channels.clone(),
            listening: self.listening,
            arrival_ms: self.lock.arrival_ms,
            recording: acquire.recording.clone(),
            waited,
            final_try: self.lock.recording.final_try,
            once: acquire.once.clone(),
            limit_key: acquire.limit_key.clone(),
        });
        // A reply lost on the wire leaves us unsure whether the SET landed: try once more on
        // a fresh connection. The script recognises our own value and counts it as acquired.
        // A failure to connect sent nothing, and is not retried here. The first try gives
        // up at `deadline` (a wait's) or after the Redis timeout; the retry always has a
        // whole Redis timeout, even past `deadline`: cut short, it could leave a lock taken
        // by a request whose answer was merely slow held by nobody until its TTL. So a
        // server that stops answering costs up to twice the timeout, as `--help` says.
        let mut end = budget_end(self.link.timeout(), deadline);
        let mut retried = false;
        let replica_wait = lease::replica_wait(self.lock.ttl, self.link.timeout());
        let key = &self.lock.key;
        let server = self.link.display().to_string();
        let server_id = self.server_id.as_ref();
        let (eviction, cluster) = (self.eviction, self.link.is_cluster());
        let mut stamp_ms = self.stamp_ms;
        loop {
            if retried {
                end = Instant::now() + self.link.timeout();
            }
            // The server is asked whether it can keep a lock at all in the same write as the
            // first acquisition on each connection (`vetting`): the answer comes after the
            // script ran, and a lock taken on an unfit server is let go at once.
            let reply: Result<(Acquisition, Option<u64>, Instant)> =
                self.link.call(Some(end), |session| {
                    session.vet();
                    let reply = match &shared {
                        Some(shared) => session.run(shared)?,
                        None => session.run(&acquire)?,
                    };
                    let sent_at = session.sent_at.unwrap_or_else(Instant::now);
                    let taken = match reply.outcome {
                        Acquisition::Acquired { slot, .. } => Some(slot),
                        _ => None,
                    };
                    if let Some(unfit) = vetting::unfit(session.facts.as_ref(), eviction, cluster) {
                        return Err(anyhow::Error::new(Refused(unfit, taken)));
                    }
                    warn_repaired(reply.repaired, key, &server);
                    warn_foreign(reply.foreign, key, &server, "read as no record");
                    warn_recorded(&reply.recorded, key, &server);
                    if let Some(id) = server_id.filter(|_| !reply.run_id.is_empty()) {
                        let _ = id.set(reply.run_id);
                    }
                    stamp_ms = stamp_ms.or(reply.stamp_ms);
                    if taken.is_some() {
                        confirm_replicated(
                            session,
                            replica_wait,
                            &key.to_string(),
                            "the lock may be lost",
                        );
                    }
                    Ok((reply.outcome, reply.skips, sent_at))
                });
            let reply = match reply {
                Err(err) => match err.downcast::<Refused>() {
                    Ok(Refused(unfit, taken)) => {
                        // Let go over a connection that listens to no channel, as a
                        // holder's release always is.
                        if taken.is_some() {
                            self.link.taken_over_subscription();
                        }
                        return Err(self.refuse(&unfit, taken));
                    }
                    Err(err) => Err(err),
                },
                Ok(reply) => Ok(reply),
            };
            self.stamp_ms = stamp_ms;
            match reply {
                Ok((Acquisition::Acquired { slot, fence }, _, sent_at)) => {
                    self.link.taken_over_subscription();
                    self.held = Some(self.lock.slot_key(slot));
                    self.slot_number = slot;
                    self.fence = fence;
                    let fence = fence.ok_or_else(|| {
                        anyhow!(
                            "{} holds no counter redlock-run can read; the lock expires by \
                             its TTL",
                            fence_key(&self.lock.key)
                        )
                    })?;
                    return Ok(Attempt::Acquired { sent_at, fence });
                }
                Ok((
                    Acquisition::Busy {
                        holder_ttl,
                        holder,
                        ahead,
                    },
                    skips,
                    _,
                )) => {
                    self.arrived = true;
                    return Ok(Attempt::Busy {
                        holder_ttl,
                        holder,
                        ahead,
                        split: false,
                        skips,
                    });
                }
                Ok((Acquisition::Superseded { newer }, skips, _)) => {
                    self.arrived = true;
                    return Ok(Attempt::Superseded { newer, skips });
                }
                Ok((Acquisition::Done { record }, skips, _)) => {
                    return Ok(Attempt::Done { record, skips })
                }
                Ok((Acquisition::OtherLimit { other }, _, _)) => {
                    let other = match other {
                        0 => String::from("a value redlock-run did not write"),
                        n => format!("--limit {n}"),
                    };
                    return Err(anyhow!(
                        "{} is in use with {other}, not --limit {limit}; every user of a lock must \
                         pass the same --limit",
                        self.lock.key
                    ));
                }
                Ok((Acquisition::FenceTooLarge { counter }, _, _)) => {
                    return Err(anyhow::Error::new(FenceTooLarge(format!(
                        "{} on {server} holds {counter}, more than any run counts to (a fence \
                         from it would be 10^18 or more): no lock is taken there until the \
                         counter is deleted (its fences then start again from the server's \
                         clock)",
                        fence_key(&self.lock.key)
                    ))));
                }
                Err(err) if retried || !self.link.sent() || !is_transient(&err) => return Err(err),
                Err(_) => retried = true,
            }
        }
    }

    /// The error for a server found `unfit` for a lock; the slot it took (`taken`) is let go
    /// first, waking a waiter that this attempt kept out.
    fn refuse(&mut self, unfit: &vetting::Unfit, taken: Option<u32>) -> anyhow::Error {
        if let Some(slot) = taken {
            self.held = Some(self.lock.slot_key(slot));
            let deadline = Instant::now() + self.link.timeout();
            let notice = format!("{}#0", self.identity);
            if let Err(err) = self.release_announcing(None, deadline, &notice, None) {
                report::warn(format_args!(
                    "cannot let go of {} at once ({err:#}); it expires by its TTL",
                    self.lock.key
                ));
            }
            self.held = None;
        }
        unfit.error(self.link.display())
    }

    /// Raises this server's fence counter to `fence` if it is lower (Redlock: the fence
    /// handed out must be on a majority, so that every later majority has it).
    pub fn raise_fence(&mut self, fence: u64, deadline: Instant) -> Result<()> {
        let raise = RaiseFence {
            fence_key: fence_key(&self.lock.key),
            fence,
        };
        self.link
            .call(Some(deadline), |session| session.run(&raise))?;
        Ok(())
    }
}

/// An acquisition's reply from a server found unfit for a lock (`vetting`): why, and the
/// slot taken, if one was.
#[derive(Debug)]
struct Refused(vetting::Unfit, Option<u32>);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server is unfit for a lock: {:?}", self.0)
    }
}

impl std::error::Error for Refused {}
