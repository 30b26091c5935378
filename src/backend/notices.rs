//! The subscription to release notices: a connection of its own to the server that holds
//! the lock, read on a thread of its own that passes each notice on (`NoticeSink`) until the
//! `Subscription` is dropped or the connection breaks.
//!
//! Two ways, by deployment (see `layout::Channels`):
//! - **plain** (one server, Sentinel, Redlock nodes): `SUBSCRIBE` on RESP2, read with the
//!   redis crate's `PubSub`, as every version of redlock-run has done;
//! - **sharded** (Redis Cluster): `SSUBSCRIBE` on RESP3, on the master of the lock's slot.
//!   When the slot moves to another master (a reshard, a failover), the old one ends the
//!   subscription with a `sunsubscribe` push: that is passed on as `Notice::Broken`, so the
//!   waiter subscribes again (on the new master, found through `MOVED`) and tries at once.
//!   It subscribes the plain way as well, on the same connection, for holders that publish
//!   the plain way; only the plain way on a server without sharded pub/sub (before Redis
//!   7) or for a user whose ACL refuses it. The scripts publish sharded, then plain when
//!   no sharded subscriber heard (`publish` in `scripts/prelude.lua`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use redis::{Connection, ErrorKind, PushKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::connection::Link;
use super::error::{
    describe_error, is_permission_error, is_unknown_command, subscription_error, time_left,
    BackendError,
};
use super::layout::Key;
use super::polled;
use super::{Notice, NoticeSink, Subscription};

/// How often an idle subscriber thread looks up to see whether it is still wanted. It only
/// checks a flag: no Redis command is sent.
const SUBSCRIBER_CHECK: Duration = Duration::from_secs(1);
/// How many times a sharded subscription follows `MOVED` (a slot map out of date) before
/// giving up for this attempt (a transient failure: the waiter tries again later).
const MAX_REDIRECTS: u32 = 5;

/// Subscribes to `channels` on the server that holds `key` (plain pub/sub). Returns once the
/// subscription is active, so a release after this returns is never missed; gives up at
/// `until`. With `polled`, where the server allows it (`polled::can_poll`), no thread reads
/// the subscription: the caller takes its socket (`Subscription::take_source`) for the loop
/// to poll, and `sink` is not used.
pub fn subscribe(
    link: &mut Link,
    key: &Key,
    channels: [Key; 2],
    sink: NoticeSink,
    until: Instant,
    polled: bool,
) -> Result<Subscription> {
    if let Some(info) = link.pollable().filter(|_| polled) {
        let source = polled::subscribe(&info, &channels, until, link.display())?;
        // Where the server speaks RESP3, the acquisitions a notice calls for go over the
        // subscription's own connection: no connection is made between the two.
        if let Some(commands) = source.commands() {
            link.lend(&commands);
        }
        return Ok(Subscription::polled(Box::new(source)));
    }
    let mut connection = link.open_subscriber(key, None, until)?;
    let display = link.display().to_string();
    let (ready_tx, ready_rx) = mpsc::channel();
    let subscription = Subscription::new();
    let stopped = subscription.stopped_flag();
    // The subscription borrows its connection for as long as it lives, so it lives on a
    // thread of its own and passes notices on.
    std::thread::Builder::new()
        .name("release-notices".into())
        .spawn(move || {
            // SUBSCRIBE as a plain command, so that a refusal (an ACL without the
            // channel) is an error here: the redis crate's own `subscribe` drops the
            // server's error reply, and the subscription would silently never hear.
            // One channel a command, so that each reply is read before the next.
            // Each within what is left of the time it was given.
            let subscribed = channels
                .iter()
                .try_for_each(|channel| {
                    let left = time_left(Duration::MAX, Some(until))?;
                    connection.set_read_timeout(Some(left))?;
                    redis::cmd("SUBSCRIBE")
                        .arg(channel)
                        .query::<Value>(&mut connection)
                        .map(drop)
                })
                .and_then(|()| connection.set_read_timeout(Some(SUBSCRIBER_CHECK)));
            if let Err(err) = subscribed {
                let _ = ready_tx.send(Err(subscription_error(err, &display)));
                return;
            }
            let pubsub = connection.as_pubsub();
            let _ = ready_tx.send(Ok(()));
            listen(pubsub, sink, &stopped, &display);
        })
        .context("cannot start a thread")?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(subscription),
        Ok(Err(err)) => Err(err),
        Err(_) => Err(anyhow!("the subscribing thread ended")),
    }
}

/// Subscribes to `channels` (both in `key`'s hash slot) on the master of that slot, by
/// `SSUBSCRIBE` where the server allows it. Returns once the subscription is active; gives
/// up at `until`.
pub fn subscribe_sharded(
    link: &mut Link,
    key: &Key,
    channels: [Key; 2],
    sink: NoticeSink,
    until: Instant,
) -> Result<Subscription> {
    let display = link.display().to_string();
    // Where a `MOVED` said the slot is now: asked directly, as the node that gave the slot
    // map may not know yet.
    let mut redirected: Option<String> = None;
    let mut redirects = 0;
    // Whatever fails, the slot map may be why (a master that died or gave the slot away):
    // the next attempt reads it again.
    let (connection, early) = loop {
        let mut connection = match link.open_subscriber(key, redirected.as_deref(), until) {
            Ok(connection) => connection,
            Err(err) => {
                link.moved();
                return Err(err);
            }
        };
        let subscribed = time_left(Duration::MAX, Some(until))
            .and_then(|left| connection.set_read_timeout(Some(left)))
            .and_then(|()| shard_subscribe(&mut connection, &channels))
            .and_then(|early| {
                connection.set_read_timeout(Some(SUBSCRIBER_CHECK))?;
                Ok(early)
            });
        let err = match subscribed {
            Ok(early) => break (connection, early),
            Err(err) => err,
        };
        link.moved();
        if !is_moved(&err) {
            return Err(subscription_error(err, &display));
        }
        if redirects == MAX_REDIRECTS {
            return Err(anyhow::Error::new(BackendError::transient(format!(
                "{display} redirected the subscription more than {MAX_REDIRECTS} times \
                 (slots are moving)"
            ))));
        }
        redirects += 1;
        redirected = err.redirect_node().map(|(address, _)| address.to_string());
    };
    let subscription = Subscription::new();
    let stopped = subscription.stopped_flag();
    std::thread::Builder::new()
        .name("release-notices".into())
        .spawn(move || listen_pushes(connection, early, sink, &stopped, &display))
        .context("cannot start a thread")?;
    Ok(subscription)
}

/// `SSUBSCRIBE` to both channels in one command (they share a slot), and `SUBSCRIBE` to
/// them as well: a holder whose user may not `SPUBLISH` publishes the plain way (see
/// `publish` in `scripts/prelude.lua`), so a waiter listens both ways where it may. Only
/// `SUBSCRIBE` when the server has no sharded pub/sub (before Redis 7) or the user's ACL
/// refuses it. Any other failure is returned: a `MOVED` for the caller to follow, a cluster
/// that is down for the waiter to retry later (listening the plain way alone then would
/// leave it deaf to a holder that publishes sharded and is heard by others). Returns the
/// messages that came before the confirmations, if any.
fn shard_subscribe(connection: &mut Connection, channels: &[Key; 2]) -> RedisResult<Vec<Value>> {
    let mut early = match confirm(connection, "SSUBSCRIBE", channels) {
        Ok(early) => early,
        Err(err) if lacks_sharded_pubsub(&err) => {
            return confirm(connection, "SUBSCRIBE", channels)
        }
        Err(err) => return Err(err),
    };
    match confirm(connection, "SUBSCRIBE", channels) {
        Ok(more) => early.extend(more),
        // This user (or server) may subscribe only the sharded way, and so, presumably,
        // publish.
        Err(err) if lacks_sharded_pubsub(&err) => {}
        Err(err) => return Err(err),
    }
    Ok(early)
}

/// Whether a refused `SSUBSCRIBE` (or `SUBSCRIBE`) means the server does not have it or
/// this user may not use it.
fn lacks_sharded_pubsub(err: &RedisError) -> bool {
    is_permission_error(err) || is_unknown_command(err)
}

/// Sends `verb` with `channels` and reads until each channel is confirmed; an error reply
/// is returned as the error.
fn confirm(
    connection: &mut Connection,
    verb: &str,
    channels: &[Key; 2],
) -> RedisResult<Vec<Value>> {
    let command = redis::cmd(verb)
        .arg(&channels[0])
        .arg(&channels[1])
        .get_packed_command();
    connection.send_packed_command(&command)?;
    let mut confirmed = 0;
    let mut early = Vec::new();
    while confirmed < channels.len() {
        match connection.recv_response()?.extract_error()? {
            Value::Push {
                kind: PushKind::SSubscribe | PushKind::Subscribe,
                ..
            } => confirmed += 1,
            push @ Value::Push { .. } => early.push(push),
            // Not a push: the reply to something else; nothing else was sent.
            _ => {}
        }
    }
    Ok(early)
}

fn is_moved(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
    )
}

/// What a push from a sharded subscription means; `None` for nothing to pass on.
fn notice_of(push: Value, display: &str) -> Option<Notice> {
    let Value::Push { kind, data } = push else {
        return None;
    };
    match kind {
        PushKind::Message | PushKind::SMessage => Some(Notice::Released {
            by: data
                .into_iter()
                .nth(1)
                .and_then(|payload| redis::from_redis_value::<String>(payload).ok())
                .unwrap_or_default(),
        }),
        // Unasked: the server ended the subscription, as a master does when the slot moves
        // away from it.
        PushKind::SUnsubscribe | PushKind::Unsubscribe => Some(Notice::Broken(anyhow!(
            "{display} ended the subscription (the lock's hash slot moved)"
        ))),
        _ => None,
    }
}

/// Passes each push on the sharded subscription on, the `early` ones first, until the
/// subscription is dropped, the server ends it or the connection breaks.
fn listen_pushes(
    mut connection: Connection,
    early: Vec<Value>,
    sink: NoticeSink,
    stopped: &AtomicBool,
    display: &str,
) {
    let mut early = early.into_iter();
    let next = || {
        let push = match early.next() {
            Some(push) => push,
            None => connection.recv_response()?,
        };
        Ok(notice_of(push, display))
    };
    pass_on(next, sink, stopped, display);
}

/// Passes each message on the plain subscription on as `Notice::Released` until the
/// subscription is dropped or the connection breaks.
fn listen(mut pubsub: redis::PubSub<'_>, sink: NoticeSink, stopped: &AtomicBool, display: &str) {
    let next = || {
        let message = pubsub.get_message()?;
        Ok(Some(Notice::Released {
            by: message.get_payload().unwrap_or_default(),
        }))
    };
    pass_on(next, sink, stopped, display);
}

/// Passes on what `next` reads (`None`: nothing to pass on) until the subscription is
/// dropped (looked at whenever a read times out), nobody listens any more, or the
/// subscription breaks, which is passed on last.
fn pass_on(
    mut next: impl FnMut() -> RedisResult<Option<Notice>>,
    mut sink: NoticeSink,
    stopped: &AtomicBool,
    display: &str,
) {
    loop {
        let notice = match next() {
            Ok(Some(notice)) => notice,
            Ok(None) => continue,
            // Nobody released; this wake-up only checks whether the waiter still listens.
            Err(err) if err.is_timeout() => {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                continue;
            }
            Err(err) => Notice::Broken(describe_error(err, display)),
        };
        let broken = matches!(notice, Notice::Broken(_));
        if !sink(notice) || broken || stopped.load(Ordering::Relaxed) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(kind: PushKind, data: &[&str]) -> Value {
        Value::Push {
            kind,
            data: data
                .iter()
                .map(|text| Value::BulkString(text.as_bytes().to_vec()))
                .collect(),
        }
    }

    #[test]
    fn pushes_become_notices() {
        let released = notice_of(push(PushKind::SMessage, &["ch", "{\"token\":\"t\"#0"]), "r");
        assert!(matches!(released, Some(Notice::Released { by }) if by == "{\"token\":\"t\"#0"));
        let plain = notice_of(push(PushKind::Message, &["ch", "x#1"]), "r");
        assert!(matches!(plain, Some(Notice::Released { by }) if by == "x#1"));
        let moved = notice_of(push(PushKind::SUnsubscribe, &["ch"]), "redis://h");
        assert!(
            matches!(&moved, Some(Notice::Broken(err)) if err.to_string().contains("slot moved")),
            "{moved:?}"
        );
        assert!(notice_of(push(PushKind::SSubscribe, &["ch"]), "r").is_none());
        assert!(notice_of(Value::Int(3), "r").is_none());
        // A message without a payload still wakes the waiter: it tries, and sees.
        let bare = notice_of(push(PushKind::SMessage, &[]), "r");
        assert!(matches!(bare, Some(Notice::Released { by }) if by.is_empty()));
    }
}
