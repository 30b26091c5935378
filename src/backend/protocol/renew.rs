//! Renewing the lock on one deployment: compare-and-PEXPIRE, looking for a takeover
//! (`--replace`) asked of this holder, and recording a loss once. Not acquiring or
//! releasing (`acquire`, `release`).

use std::time::Instant;

use anyhow::Result;

use super::warnings::warn_recorded;
use super::SingleRedis;
use crate::backend::layout::{limit_key, replace_key, shared_keys};
use crate::backend::scripts::{Extended, Renew, RenewShared};
use crate::backend::Renewal;

impl SingleRedis {
    /// Extends the held key's TTL if it is still ours, as `LockBackend::renew`.
    pub(super) fn renew_held(
        &mut self,
        deadline: Instant,
        takeover_heard: bool,
    ) -> Result<Renewal> {
        // A takeover concerns a mutex only (`--replace` needs `--limit 1`). It is looked for
        // at every renewal, but in a Redis Cluster only once one was announced: there a key
        // a script names that does not exist fails it (TRYAGAIN) while the slot migrates.
        let look = self.lock.limit == 1 && (takeover_heard || !self.link.is_cluster());
        let renew = Renew {
            slot: self.held_key().clone(),
            replace_key: look.then(|| replace_key(&self.lock.key)),
            limit_key: (self.lock.limit > 1).then(|| limit_key(&self.lock.key)),
            identity: self.identity.clone(),
            ttl: self.lock.ttl,
            limit: self.lock.limit,
            // Once only; and not in a cluster (see `Renew::recording`).
            recording: (self.lock.recording.history > 0
                && !self.lost_recorded
                && !self.link.is_cluster())
            .then(|| self.record_args()),
            slot_number: self.slot_number,
            value: self.value(),
        };
        // --shared: this holder's share, by the shared-mode script (same reply).
        let shared = self.lock.shared.then(|| RenewShared {
            lock: self.lock.key.clone(),
            shared_keys: shared_keys(&self.lock.key),
            identity: self.identity.clone(),
            ttl: self.lock.ttl,
            token: self.lock.token.clone(),
        });
        let (key, server) = (&self.lock.key, self.link.display().to_string());
        let (Extended(extended, replace_by), sent_at) =
            self.link.call(Some(deadline), |session| {
                let reply = match &shared {
                    Some(shared) => session.run(shared)?,
                    None => session.run(&renew)?,
                };
                warn_recorded(&reply.recorded, key, &server);
                Ok((reply.extended, session.sent_at.unwrap_or_else(Instant::now)))
            })?;
        if !extended && renew.recording.is_some() {
            self.lost_recorded = true;
        }
        Ok(if extended {
            Renewal::Extended {
                sent_at,
                replace_by,
            }
        } else {
            Renewal::NotOurs
        })
    }
}
