//! A waiter's subscription read by the run's loop itself: `event::Events` polls its socket
//! beside the signals, so that the thread that reads a release notice is the one that
//! sends the acquisition, at once, with no thread between them; and, where the server
//! speaks RESP3, sends it over the same socket, with no connection made between them.
//!
//! The socket is our own, not the redis crate's connection: the loop must poll the
//! descriptor, and must never leave a whole message in a reader's buffer while the socket
//! is not readable (it would be heard only when the next one came). So each read hands on
//! every complete message it has, and what it keeps is never more than the start of one.
//!
//! It asks for RESP3 first (`HELLO 3`, which authenticates too). There, a notice is a push
//! and a reply is not, so commands can go over the subscription (`SubscribedWire`, lent to
//! the endpoint: a waiter's tries, and the release of the lock one of them took):
//! - a notice that comes while a command waits for its reply is kept for the loop, and the
//!   loop looks before it polls (`NoticeSource::has_read`): an extra try at most, never a
//!   notice lost;
//! - a command whose wire fails (a timeout, whose reply may still come; a message too large
//!   or not in the protocol) ends the subscription, so that nothing is sent over it again,
//!   and the waiter subscribes anew and tries at once; the failure is an I/O error, so the
//!   try is made again on a connection of its own. An error reply is a whole answer, and
//!   ends nothing;
//! - once a try over it took the lock, it unsubscribes at once, and carries the holder's
//!   renewals and release only once the server confirmed it (read before the first of
//!   them): a holder's replies are never read through what anyone publishes. Where that
//!   fails (an ACL without `unsubscribe`), or the wait ended otherwise, it carries nothing
//!   more, and the holder connects on its own.
//!
//! A server without `HELLO` (before Redis 6, or renamed away) gets RESP2 `SUBSCRIBE`, and
//! the waiter's tries go over a connection of their own, as before.
//!
//! It is used where a subscription is plain on one server reached by TCP or a Unix socket:
//! `redis://`, `redis+unix://`. The others keep the reader thread of `notices`: TLS (the
//! redis crate's TLS layer may hold a decrypted record), a Sentinel's master (found by
//! asking the sentinels, which the crate's connection does here), a Redis Cluster
//! (sharded pushes, redirections) and the nodes of a Redlock quorum (subscribed on the
//! nodes' own threads).

mod commands;
mod frames;
mod socket;
#[cfg(test)]
mod tests;

use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Instant;

use anyhow::Result;
use redis::{ConnectionAddr, ConnectionInfo, PushKind, RedisError, Value};

use super::error::{describe_error, subscription_error};
use super::layout::Key;
use super::Notice;
use frames::{frame_length, not_ours, MAX_MESSAGE};
use socket::{Stream, WireState};

/// The subscription's socket and what has been read off it, shared by the loop's reader
/// (`PolledSubscription`) and, where the server speaks RESP3, the commands sent over it
/// (`SubscribedWire`). Both are on the loop's thread while the wait lasts; the lock is only
/// there because the lock just taken may be renewed from a thread of its own afterwards.
pub struct SharedWire(Mutex<WireState>);

/// The commands' side of a subscription that speaks RESP3: one server, one socket, lent to
/// the endpoint for as long as the subscription lives (see `Endpoint::lend`).
#[derive(Clone)]
pub struct SubscribedWire(Arc<SharedWire>);

/// A command's hold on the socket, for as long as it sends and reads.
pub type WireGuard<'a> = MutexGuard<'a, WireState>;

/// A subscription for the loop to read (`NoticeSource`).
pub struct PolledSubscription {
    shared: Arc<SharedWire>,
    fd: RawFd,
}

/// Whether a subscription to the server of `info` can be polled by the loop (see the
/// module's documentation).
pub fn can_poll(info: &ConnectionInfo) -> bool {
    matches!(
        info.addr(),
        ConnectionAddr::Tcp(..) | ConnectionAddr::Unix(_)
    )
}

/// Connects to the server of `info` (one that `can_poll`), authenticates and subscribes
/// to `channels`, all by `until`; returns once both are confirmed, so a release after this
/// returns is never missed. It asks for RESP3 first (`HELLO 3`, which authenticates too):
/// where the server agrees, commands can be sent over the subscription
/// (`PolledSubscription::commands`).
pub fn subscribe(
    info: &ConnectionInfo,
    channels: &[Key; 2],
    until: Instant,
    display: &str,
) -> Result<PolledSubscription> {
    let stream = Stream::connect(info.addr(), until).map_err(|err| describe_error(err, display))?;
    stream
        .set_nonblocking()
        .map_err(|err| describe_error(err.into(), display))?;
    let settings = info.redis_settings();
    let mut state = WireState {
        stream,
        buffer: Vec::new(),
        display: display.to_string(),
        resp3: false,
        db: settings.db(),
        heard: None,
        read_by_loop: true,
        subscribed: false,
        unsubscribing: false,
        broken: false,
        until,
    };
    state.resp3 = state
        .hello(settings.username(), settings.password())
        .map_err(|err| describe_error(err, display))?;
    if !state.resp3 {
        state
            .authenticate(settings.username(), settings.password())
            .map_err(|err| describe_error(err, display))?;
    } else if state.db != 0 {
        let select = redis::cmd("SELECT").arg(state.db).get_packed_command();
        state
            .ask(&select, 1)
            .map_err(|err| describe_error(err, display))?;
    }
    let subscribe = redis::cmd("SUBSCRIBE")
        .arg(&channels[0])
        .arg(&channels[1])
        .get_packed_command();
    state
        .ask(&subscribe, 2)
        .map_err(|err| subscription_error(err, display))?;
    state.subscribed = true;
    let fd = state.stream.fd();
    Ok(PolledSubscription {
        shared: Arc::new(SharedWire(Mutex::new(state))),
        fd,
    })
}

impl PolledSubscription {
    /// Where commands can be sent over this subscription (the server speaks RESP3), the
    /// way to send them.
    pub fn commands(&self) -> Option<SubscribedWire> {
        let resp3 = self.shared.lock().resp3;
        resp3.then(|| SubscribedWire(Arc::clone(&self.shared)))
    }
}

impl SharedWire {
    fn lock(&self) -> WireGuard<'_> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SubscribedWire {
    /// The socket, for one command.
    pub fn lock(&self) -> WireGuard<'_> {
        self.0.lock()
    }

    /// A hold that does not keep the socket open.
    pub fn downgrade(&self) -> Weak<SharedWire> {
        Arc::downgrade(&self.0)
    }

    /// The wire `weak` leads to, if it is still open and unbroken.
    pub fn from_weak(weak: &Weak<SharedWire>) -> Option<SubscribedWire> {
        let shared = weak.upgrade()?;
        let usable = !shared.lock().broken;
        usable.then_some(SubscribedWire(shared))
    }

    /// The lock was taken over it: it stops listening (`UNSUBSCRIBE`, written now and its
    /// outcome read before the next command, by `carries_commands`), so that the holder's
    /// renewals and release can go over it with nothing published arriving in between.
    /// The loop reads nothing more from it.
    pub fn unsubscribe(&self) {
        let mut state = self.0.lock();
        if state.broken || !state.subscribed {
            return;
        }
        state.subscribed = false;
        state.unsubscribing = true;
        let unsubscribe = redis::cmd("UNSUBSCRIBE").get_packed_command();
        if state.write_all(&unsubscribe).is_err() {
            state.break_off();
        }
    }

    /// Whether a command may be sent over it now, waiting until `until` at most for its
    /// unsubscription to be confirmed: while the loop reads it (a waiter's tries), or once
    /// it listens no more. Not when it broke, nor when it still listens with no reader
    /// (the wait is over and it was not unsubscribed), nor when its unsubscription was
    /// refused (an ACL without `unsubscribe`) or failed: what anyone publishes on the
    /// channel would reach it, and a holder's renewal must not read through that. It is
    /// then ended; the caller connects on its own.
    pub fn carries_commands(&self, until: Instant) -> bool {
        let mut state = self.0.lock();
        if state.broken {
            return false;
        }
        if state.unsubscribing {
            state.until = until;
            match state.read_unsubscribed() {
                Ok(true) => state.unsubscribing = false,
                Ok(false) | Err(_) => {
                    state.break_off();
                    return false;
                }
            }
        }
        state.read_by_loop || !state.subscribed
    }
}

impl super::NoticeSource for PolledSubscription {
    fn fd(&self) -> RawFd {
        self.fd
    }

    /// Reads once from the socket (it is not blocking) and hands on every message in the
    /// buffer, coalesced: the latest release, or the subscription's end.
    fn read(&mut self) -> Option<Notice> {
        let mut state = self.shared.lock();
        if !state.subscribed {
            // Taken over by the lock's holder (`SubscribedWire::unsubscribe`): what comes
            // now is the unsubscription's outcome, for the holder's next command.
            return None;
        }
        let filled = match state.fill() {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(_) if state.broken => Err(RedisError::from(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "a command sent over the subscription failed",
            ))),
            other => other.map_err(RedisError::from),
        };
        if filled.is_err() {
            // The subscription has ended: no command is sent over it either.
            state.break_off();
        }
        let mut latest = state.heard.take().map(|by| Notice::Released { by });
        loop {
            match state.next_value(MAX_MESSAGE) {
                Ok(Some(value)) => {
                    // With RESP3 nothing but a push comes unasked: anything else is a reply
                    // that no command waits for.
                    if state.resp3 && !matches!(value, Value::Push { .. }) {
                        state.break_off();
                        let err = not_ours("a reply that nothing asked for");
                        return Some(Notice::Broken(describe_error(err, &state.display)));
                    }
                    if let Some(by) = released_by(value) {
                        latest = Some(Notice::Released { by });
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    state.break_off();
                    return Some(Notice::Broken(describe_error(err, &state.display)));
                }
            }
        }
        // A message that came before the connection broke is still heard: the waiter tries
        // on it, and subscribes again on the next turn.
        match filled {
            Err(err) if latest.is_none() => {
                Some(Notice::Broken(describe_error(err, &state.display)))
            }
            Err(_) => latest,
            Ok(()) => latest,
        }
    }

    /// A command's read took a notice off the socket, or left one whole in the buffer.
    fn has_read(&self) -> bool {
        let state = self.shared.lock();
        state.subscribed
            && (state.heard.is_some()
                || matches!(frame_length(&state.buffer, MAX_MESSAGE), Ok(Some(_))))
    }
}

impl Drop for PolledSubscription {
    /// The loop stops reading: unless the lock was taken over it (and it unsubscribed), no
    /// command is sent over it any more (`SubscribedWire::carries_commands`).
    fn drop(&mut self) {
        self.shared.lock().read_by_loop = false;
    }
}

/// The payload of a pub/sub `message` (an array on RESP2, a push on RESP3), which names a
/// release; `None` for anything else. A payload that is not text still wakes the waiter (it
/// tries, and sees).
fn released_by(value: Value) -> Option<String> {
    let payload = match value {
        Value::Array(parts) => {
            let [Value::BulkString(kind), _channel, payload] =
                <[Value; 3]>::try_from(parts).ok()?
            else {
                return None;
            };
            if kind != b"message" {
                return None;
            }
            payload
        }
        Value::Push {
            kind: PushKind::Message,
            data,
        } => {
            let [_channel, payload] = <[Value; 2]>::try_from(data).ok()?;
            payload
        }
        _ => return None,
    };
    Some(redis::from_redis_value::<String>(payload).unwrap_or_default())
}
