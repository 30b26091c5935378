//! Several locks taken as one (several `-k`): a [`KeySet`] is a [`LockBackend`] made of one
//! backend per key, each an ordinary lock on the deployment the run was given (one server,
//! Sentinel, a Redis Cluster, where each member routes by its own key, or a Redlock quorum).
//! The members share one token, so each is held under the same identity, and `status` of
//! any of them names this run.
//!
//! - **All** (`-k db -k cache`): the command runs while every member is held. Members are
//!   taken one at a time in one fixed order, their full keys' bytes sorted, whatever order
//!   the run named them in, so that two runs never wait on each other in a cycle; on the
//!   first busy member, the members already taken are let go before the attempt returns
//!   Busy. No script spans the members: in a cluster they may live in different slots,
//!   and over Redlock on different majorities. Renewed and released together, all at once
//!   (a thread each, within the same deadline: a slow member never eats another's time);
//!   losing any member is losing the lock. A member whose try failed is let go as well:
//!   its reply may have been lost after it took the key.
//! - **Any** (`-k s1 -k s2 --any`): a pool. Members are tried in the order given; the
//!   first taken is the one held, and the queues of the busy ones before it are left (a
//!   release there would otherwise wake a waiter that no longer waits). Busy when all are,
//!   naming each member's holder (`LockBackend::members`).
//!
//! A waiter subscribes to every member's notices (a subscription each, read by threads),
//! so a release of any member wakes it; notices of this run's own releases (a member let go
//! after a busy one) are not passed on, or a waiter would wake itself.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::{
    on_every_node, Attempt, HoldEnd, LockBackend, MemberState, Notice, NoticeSink, Released,
    Renewal, Subscription, SubscriptionParts, TakeoverListener,
};

/// How the members of a key set are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every member, for one command.
    All,
    /// The first free member (a pool).
    Any,
}

pub struct KeySet {
    mode: Mode,
    /// One backend per key, in the order the run named them.
    members: Vec<Box<dyn LockBackend>>,
    /// What the last attempt found at each member, in the same order.
    states: Vec<MemberState>,
    /// The order in which members are taken: the names' order for a pool, the full keys'
    /// bytes sorted for `All`.
    order: Vec<usize>,
    /// The leading bytes of this run's release notices: `{"token":"…"#`.
    own_notices: String,
    display: String,
    /// The Redis timeout: what letting go of a member may take.
    timeout: Duration,
}

impl KeySet {
    /// `members` in the order the run named them; `keys` their full Redis keys (for the
    /// fixed order of `All`); `identity` the leading bytes of the run's values.
    pub fn new(
        mode: Mode,
        members: Vec<Box<dyn LockBackend>>,
        keys: &[&[u8]],
        identity: &str,
        timeout: Duration,
    ) -> KeySet {
        // Where the keys live: the members share one deployment.
        let display = members
            .first()
            .map_or_else(String::new, |member| member.describe().to_string());
        KeySet {
            order: taking_order(mode, keys),
            states: vec![MemberState::Untried; members.len()],
            mode,
            members,
            own_notices: format!("{identity}#"),
            display,
            timeout,
        }
    }

    /// Runs `call` on the members at `indices` at once, each within the same deadline: one
    /// member's slow answer never eats another's time. Results in the order of `indices`.
    fn on_members<T: Send>(
        &mut self,
        indices: &[usize],
        call: impl Fn(&mut Box<dyn LockBackend>) -> T + Sync,
    ) -> Vec<T> {
        let mut members: Vec<&mut Box<dyn LockBackend>> = self
            .members
            .iter_mut()
            .enumerate()
            .filter(|(index, _)| indices.contains(index))
            .map(|(_, member)| member)
            .collect();
        on_every_node(&mut members, |member| call(member))
    }

    /// The members held, by index.
    fn held(&self) -> Vec<usize> {
        (0..self.states.len())
            .filter(|&index| matches!(self.states[index], MemberState::Held { .. }))
            .collect()
    }

    /// Lets go of every member held (an attempt that found another busy), and of those
    /// whose try failed (`unsure`: its reply may have been lost after it took the key), as
    /// an attempt letting go of what it took, and forgets them.
    fn let_go(&mut self, unsure: &[usize]) {
        let deadline = Instant::now() + self.timeout;
        let mut members = self.held();
        members.extend_from_slice(unsure);
        // Best effort: a member whose release fails expires by its TTL, and the attempt
        // reports Busy (or its error) all the same.
        self.on_members(&members, |member| {
            let _ = member.let_go(deadline);
        });
        for index in members {
            self.states[index] = MemberState::Untried;
        }
    }

    fn acquire_all(&mut self, deadline: Option<Instant>) -> Result<Attempt> {
        let mut first_sent: Option<Instant> = None;
        let mut fence = 0;
        for step in 0..self.order.len() {
            let index = self.order[step];
            let attempt = self.members[index].try_acquire(deadline);
            match attempt {
                Ok(Attempt::Acquired {
                    sent_at,
                    fence: got,
                }) => {
                    self.states[index] = MemberState::Held { fence: got };
                    first_sent = Some(first_sent.map_or(sent_at, |first| first.min(sent_at)));
                    if index == 0 {
                        fence = got;
                    }
                }
                other => {
                    let unsure: &[usize] = match &other {
                        Ok(Attempt::Busy { holder, .. }) => {
                            self.states[index] = MemberState::Busy {
                                holder: holder.clone(),
                            };
                            &[]
                        }
                        Err(_) => &[index],
                        Ok(_) => &[],
                    };
                    // All or nothing: what was taken goes back before the attempt returns.
                    self.let_go(unsure);
                    return other;
                }
            }
        }
        Ok(Attempt::Acquired {
            sent_at: first_sent.unwrap_or_else(Instant::now),
            fence,
        })
    }

    fn acquire_any(&mut self, deadline: Option<Instant>) -> Result<Attempt> {
        let mut busy: Option<Attempt> = None;
        let mut failure: Option<anyhow::Error> = None;
        let mut unsure = Vec::new();
        for step in 0..self.order.len() {
            let index = self.order[step];
            match self.members[index].try_acquire(deadline) {
                Ok(Attempt::Acquired { sent_at, fence }) => {
                    // Out of the queues of the members found busy before this one.
                    for &before in &self.order[..step] {
                        if !unsure.contains(&before) {
                            self.members[before].abandon();
                        }
                    }
                    self.let_go(&unsure);
                    self.states[index] = MemberState::Held { fence };
                    return Ok(Attempt::Acquired { sent_at, fence });
                }
                Ok(Attempt::Busy {
                    holder_ttl,
                    holder,
                    ahead,
                    split,
                    skips,
                }) => {
                    self.states[index] = MemberState::Busy {
                        holder: holder.clone(),
                    };
                    busy = Some(merge_busy(
                        busy,
                        Attempt::Busy {
                            holder_ttl,
                            holder,
                            ahead,
                            split,
                            skips,
                        },
                    ));
                }
                // Neither superseding nor --once is allowed with several keys: passed on.
                Ok(other) => return Ok(other),
                // A member out of reach is no answer; the others may still be free.
                Err(err) => {
                    unsure.push(index);
                    failure.get_or_insert(err);
                }
            }
        }
        self.let_go(&unsure);
        match (busy, failure) {
            (Some(busy), _) => Ok(busy),
            (None, Some(err)) => Err(err),
            (None, None) => Err(anyhow!("a pool with no members")),
        }
    }
}

/// The order members are taken in: as named for a pool; for `All`, by their full keys'
/// bytes, one order every run agrees on (ties keep the names' order).
pub fn taking_order(mode: Mode, keys: &[&[u8]]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    if mode == Mode::All {
        order.sort_by(|&a, &b| keys[a].cmp(keys[b]));
    }
    order
}

/// Two busy answers of a pool as one: the soonest lease end (a foreign key with no TTL
/// counts as never), split if any was, the first holder named and its skips.
pub fn merge_busy(seen: Option<Attempt>, next: Attempt) -> Attempt {
    match (seen, next) {
        (
            Some(Attempt::Busy {
                holder_ttl,
                holder,
                ahead,
                split,
                skips,
            }),
            Attempt::Busy {
                holder_ttl: next_ttl,
                split: next_split,
                ahead: next_ahead,
                ..
            },
        ) => Attempt::Busy {
            holder_ttl: match (holder_ttl, next_ttl) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            holder,
            ahead: ahead.min(next_ahead),
            split: split || next_split,
            skips,
        },
        (_, next) => next,
    }
}

/// The renewals of every member held as one: lost when any is, extended from the earliest
/// send otherwise (each member's lease runs from its own).
pub fn merge_renewals(renewals: Vec<Renewal>) -> Renewal {
    let mut earliest: Option<Instant> = None;
    for renewal in renewals {
        match renewal {
            Renewal::NotOurs => return Renewal::NotOurs,
            Renewal::Extended { sent_at, .. } => {
                earliest = Some(earliest.map_or(sent_at, |first| first.min(sent_at)));
            }
        }
    }
    match earliest {
        Some(sent_at) => Renewal::Extended {
            sent_at,
            replace_by: None,
        },
        None => Renewal::NotOurs,
    }
}

/// The releases of every member held as one: "not ours" when any was lost, "kept" when
/// every one was, unannounced when any was.
pub fn merge_releases(releases: &[Released]) -> Released {
    if releases.contains(&Released::NotOurs) || releases.is_empty() {
        Released::NotOurs
    } else if releases.contains(&Released::DeletedUnannounced) {
        Released::DeletedUnannounced
    } else if releases.iter().all(|r| *r == Released::KeptUntilMinHold) {
        Released::KeptUntilMinHold
    } else {
        Released::Deleted
    }
}

impl LockBackend for KeySet {
    fn try_acquire(&mut self, deadline: Option<Instant>) -> Result<Attempt> {
        self.states = vec![MemberState::Untried; self.members.len()];
        match self.mode {
            Mode::All => self.acquire_all(deadline),
            Mode::Any => self.acquire_any(deadline),
        }
    }

    fn renew(&mut self, deadline: Instant, takeover_heard: bool) -> Result<Renewal> {
        let mut renewals = Vec::new();
        let mut failure = None;
        let held = self.held();
        for renewal in self.on_members(&held, |member| member.renew(deadline, takeover_heard)) {
            match renewal {
                Ok(Renewal::NotOurs) => return Ok(Renewal::NotOurs),
                Ok(renewal) => renewals.push(renewal),
                Err(err) => {
                    failure.get_or_insert(err);
                }
            }
        }
        match failure {
            // Retried by the renewer while the lease lasts; what was extended stays so.
            Some(err) => Err(err),
            None => Ok(merge_renewals(renewals)),
        }
    }

    fn release(&mut self, keep_for: Option<Duration>, deadline: Instant) -> Result<Released> {
        let mut releases = Vec::new();
        let mut failure = None;
        // Every member is released, whatever became of the others, each with the whole
        // time the release may take.
        let held = self.held();
        for released in self.on_members(&held, |member| member.release(keep_for, deadline)) {
            match released {
                Ok(released) => releases.push(released),
                Err(err) => {
                    failure.get_or_insert(err);
                }
            }
        }
        for index in held {
            self.states[index] = MemberState::Untried;
        }
        match failure {
            Some(err) if !releases.contains(&Released::NotOurs) => Err(err),
            _ => Ok(merge_releases(&releases)),
        }
    }

    fn record_success(&mut self) {
        for index in self.held() {
            self.members[index].record_success();
        }
    }

    fn end_hold(&mut self, end: HoldEnd) {
        for index in self.held() {
            self.members[index].end_hold(end);
        }
    }

    fn abandon(&mut self) {
        for member in &mut self.members {
            member.abandon();
        }
    }

    fn give_up(&mut self) -> Option<u64> {
        let mut skips = None;
        for member in &mut self.members {
            let counted = member.give_up();
            skips = skips.max(counted);
        }
        skips
    }

    fn rest(&mut self) {
        for member in &mut self.members {
            member.rest();
        }
    }

    fn subscribe(&mut self, sink: NoticeSink, deadline: Option<Instant>) -> Result<Subscription> {
        let own = self.own_notices.clone();
        let shared = Arc::new(Mutex::new(sink));
        let parts = SubscriptionParts::new();
        for member in &mut self.members {
            let (shared, own) = (Arc::clone(&shared), own.clone());
            let forward: NoticeSink = Box::new(move |notice: Notice| match &notice {
                // This run's own release of a member it let go: nothing to try for.
                Notice::Released { by } if by.starts_with(&own) => true,
                _ => {
                    let mut sink = shared.lock().unwrap_or_else(|p| p.into_inner());
                    sink(notice)
                }
            });
            parts.add(member.subscribe_threaded(forward, deadline)?);
        }
        Ok(Subscription::combined(parts))
    }

    fn takeover_listener(&self) -> Option<Box<dyn TakeoverListener>> {
        // --replace is refused with several keys.
        None
    }

    fn describe(&self) -> &str {
        &self.display
    }

    fn members(&self) -> Vec<MemberState> {
        self.states.clone()
    }
}

#[cfg(test)]
mod tests;
