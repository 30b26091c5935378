//! Listening on one deployment: a waiter's subscription to release notices, and a
//! holder's takeover listener (`HolderListener`) on a connection of its own. Not what a
//! notice then does (`notices`, the run's loop).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{budget_end, SingleRedis};
use crate::backend::connection::Link;
use crate::backend::layout::{Channels, Key, LockRequest};
use crate::backend::notices;
use crate::backend::target::RedisTarget;
use crate::backend::{NoticeSink, Subscription, TakeoverListener};
use crate::report;

impl SingleRedis {
    /// Subscribes to release notices (`LockBackend::subscribe`); with `polled`, the
    /// subscription is left for the caller's loop to read where the server allows it (see
    /// `notices::subscribe`), otherwise a thread reads it and passes notices to `sink`.
    pub fn subscribe_by(
        &mut self,
        sink: NoticeSink,
        deadline: Option<Instant>,
        polled: bool,
    ) -> Result<Subscription> {
        let until = budget_end(self.link.timeout(), deadline);
        // Its own channel, where a release wakes it when it is first in the queue, and the
        // lock's, where a release is announced when nobody is queued. (A holder listens on
        // its own channel alone, on a connection of its own: `HolderListener`.)
        let channels = [
            self.channels.wake(&self.lock.token),
            self.channels.release.clone(),
        ];
        let subscription = if self.channels.sharded {
            notices::subscribe_sharded(&mut self.link, &self.lock.key, channels, sink, until)
        } else {
            notices::subscribe(
                &mut self.link,
                &self.lock.key,
                channels,
                sink,
                until,
                polled,
            )
        };
        let subscription = subscription.context("cannot subscribe to release notices")?;
        self.listening = true;
        Ok(subscription)
    }

    /// This holder's listener for a takeover (`HolderListener`); `None` with `--limit`
    /// above 1, where none can be asked for (`--replace` is refused there).
    pub fn holder_listener(&self) -> Option<HolderListener> {
        if self.lock.limit != 1 {
            return None;
        }
        match HolderListener::new(&self.target, self.link.timeout(), &self.lock) {
            Ok(listener) => Some(listener),
            Err(err) => {
                report::verbose(format_args!(
                    "not listening for a takeover (--replace), renewals will find it: {err:#}"
                ));
                None
            }
        }
    }
}

/// How a holder hears a takeover (`--replace`) asked for on one deployment: a subscription
/// to its own channel, where the replacing run's acquisition announces its request, on a
/// connection of its own (`Link` is its own too: its own view of a cluster's slots, its
/// own master from Sentinel). So it is made, and made again once it breaks, without the
/// holder's backend, which renews and releases meanwhile.
pub struct HolderListener {
    link: Link,
    key: Key,
    channel: Key,
    sharded: bool,
}

impl HolderListener {
    /// Makes nothing yet: `listen` connects.
    pub fn new(
        target: &RedisTarget,
        timeout: Duration,
        lock: &LockRequest,
    ) -> Result<HolderListener> {
        let link = Link::new(target, timeout)?;
        let channels = Channels::of(&lock.key, link.is_cluster());
        Ok(HolderListener {
            channel: channels.wake(&lock.token),
            sharded: channels.sharded,
            key: lock.key.clone(),
            link,
        })
    }

    /// Subscribes (see `TakeoverListener::listen`), giving up at `until`. The channel is
    /// named twice, as the subscription takes two: Redis confirms each, and counts one
    /// subscription.
    pub fn listen_until(&mut self, sink: NoticeSink, until: Instant) -> Result<Subscription> {
        let channels = [self.channel.clone(), self.channel.clone()];
        let subscription = if self.sharded {
            notices::subscribe_sharded(&mut self.link, &self.key, channels, sink, until)
        } else {
            notices::subscribe(&mut self.link, &self.key, channels, sink, until, false)
        };
        subscription.context("cannot listen for a takeover")
    }

    pub fn display(&self) -> &str {
        self.link.display()
    }
}

impl TakeoverListener for HolderListener {
    fn listen(&mut self, sink: NoticeSink) -> Result<Subscription> {
        let until = Instant::now() + self.link.timeout();
        self.listen_until(sink, until)
    }
}
