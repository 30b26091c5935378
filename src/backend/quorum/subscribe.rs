//! A waiter's release notices from every node: subscribed once a majority listens, each
//! release passed on once. A holder's takeover listener is `listen`'s.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{anyhow, Result};

use super::rounds::{Answer, Work};
use super::tally::ReleaseCopies;
use super::Quorum;
use crate::backend::{Notice, NoticeSink, Subscription, SubscriptionParts};
use crate::report;

impl Quorum {
    /// `LockBackend::subscribe`: subscribed on every node (see the module doc, Waiting).
    pub(super) fn subscribe_round(
        &mut self,
        mut sink: NoticeSink,
        deadline: Option<Instant>,
    ) -> Result<Subscription> {
        let mut until = Instant::now() + self.timeout;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        // A release is announced on every node: a waiter tries on its first copy and on
        // the one that completes a majority (`ReleaseCopies`), not on each; this waiter's
        // own releases after failed attempts are not passed on at all.
        let mut copies = ReleaseCopies::new(self.majority);
        let own = format!("{}#", self.identity);
        let once = move |notice: Notice| match &notice {
            Notice::Released { by } if by.starts_with(&own) || !copies.pass(by) => true,
            Notice::Released { .. } | Notice::Broken(_) => sink(notice),
        };
        let shared = Arc::new(Mutex::new(once));
        let parts = SubscriptionParts::new();
        let round = self.nodes.send(self.nodes.all(), || {
            let shared = Arc::clone(&shared);
            Work::Subscribe {
                sink: Box::new(move |notice: Notice| {
                    // Poisoned only by a panic, which aborts the process.
                    let mut sink = shared.lock().unwrap_or_else(|p| p.into_inner());
                    (*sink)(notice)
                }),
                parts: parts.clone(),
                until,
            }
        });
        // Ends every node's subscription when dropped, late ones included.
        let subscription = Subscription::combined(parts);
        let mut listening = 0;
        let mut errors: Vec<anyhow::Error> = Vec::new();
        let majority = self.majority;
        // Every holder releases on a majority, which shares a node with any other majority:
        // once a majority listens, a release cannot be missed, and slower nodes join as
        // they come up rather than being waited for.
        self.nodes
            .collect(round, self.nodes.len(), until, |node, answer| {
                match answer {
                    Answer::Subscribe(Ok(())) => listening += 1,
                    Answer::Subscribe(Err(err)) => {
                        report::verbose(format_args!(
                            "no release notices from {}: {err:#}",
                            self.nodes.display(node)
                        ));
                        errors.push(err);
                    }
                    _ => {}
                }
                listening >= majority
            });
        // Any node that can be reached may carry the holder's release notice; the others
        // are tried again when a subscription breaks.
        if listening == 0 {
            return Err(errors
                .into_iter()
                .next()
                .unwrap_or_else(|| anyhow!("no Redis node answered in time")));
        }
        Ok(subscription)
    }
}
