//! The two commands a reader sends, `XREVRANGE` for the last events and a blocking
//! `XREAD` for new ones, and the wording of a refusal (a key that is not a stream). Not
//! what is made of the entries read.

use std::time::Duration;

use anyhow::{anyhow, Result};
use redis::Value;

use super::parse::{entries_of, pairs};
use super::{Entry, MAX_EVENTS};
use crate::backend::connection::Link;
use crate::backend::error::describe_error;
use crate::backend::inspect::read_peek;
use crate::backend::layout::{record_keys, Key};
use crate::backend::scripts::Peek;

/// The longest one blocking read waits before it is sent again.
const LONGEST_BLOCK: Duration = Duration::from_secs(60);

/// The last `count` entries of `stream`, newest first.
pub(super) fn read_last(
    link: &mut Link,
    lock: &Key,
    stream: &Key,
    count: usize,
) -> Result<Vec<Entry>> {
    let mut command = redis::cmd("XREVRANGE");
    command
        .arg(stream)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(count);
    let reply = link.call(None, |session| {
        session.query_keyed::<Value>(stream, &command)
    })?;
    match reply {
        Ok(reply) => Ok(entries_of(reply)),
        Err((err, node)) => Err(refused(link, lock, stream, err, &node)),
    }
}

/// The entries of `stream` after the ID `after`, oldest first; none when nothing came
/// within a little less than the Redis timeout.
pub(super) fn read_after(
    link: &mut Link,
    lock: &Key,
    stream: &Key,
    after: &str,
) -> Result<Vec<Entry>> {
    let timeout = link.timeout();
    let block = timeout
        .saturating_sub((timeout / 2).min(Duration::from_secs(1)))
        .clamp(Duration::from_millis(1), LONGEST_BLOCK);
    let mut command = redis::cmd("XREAD");
    command
        .arg("COUNT")
        .arg(MAX_EVENTS)
        .arg("BLOCK")
        .arg(block.as_millis() as u64)
        .arg("STREAMS")
        .arg(stream)
        .arg(after);
    let reply = link.call(None, |session| {
        session.query_keyed::<Value>(stream, &command)
    })?;
    match reply {
        Ok(Value::Nil) => Ok(Vec::new()),
        Ok(reply) => {
            let mut entries = Vec::new();
            for (_, read) in pairs(reply) {
                entries.extend(entries_of(read));
            }
            Ok(entries)
        }
        Err((err, node)) => Err(refused(link, lock, stream, err, &node)),
    }
}

/// A command's error reply, worded: a key of another type is named, with its type when
/// `status`'s script can say it.
fn refused(
    link: &mut Link,
    lock: &Key,
    stream: &Key,
    err: redis::RedisError,
    node: &str,
) -> anyhow::Error {
    if err.code() != Some("WRONGTYPE") {
        return describe_error(err, node);
    }
    let peek = Peek {
        key: stream.clone(),
    };
    let kind = link
        .call(None, |session| session.run(&peek))
        .ok()
        .and_then(|reply| read_peek(stream, reply))
        .map_or_else(
            || String::from("another type of value"),
            |slot| format!("a {}", slot.kind),
        );
    anyhow!(
        "{stream} on {node} holds {kind}, not a stream: it is not the history of the lock \
         {lock} (another application's key?); nothing was read from it"
    )
}

/// The last `count` entries of each of `locks`' streams on `link`, newest first: one
/// pipeline of `XREVRANGE` for many locks of one server (not a cluster). Once the server
/// has failed, the rest show that failure.
pub(super) fn read_last_of_many(
    link: &mut Link,
    locks: &[Key],
    count: usize,
) -> Vec<Result<Vec<Entry>>> {
    let mut read: Vec<Result<Vec<Entry>>> = Vec::with_capacity(locks.len());
    for chunk in locks.chunks(crate::backend::inspect::BATCH) {
        let streams: Vec<Key> = chunk
            .iter()
            .map(|lock| record_keys(lock)[0].clone())
            .collect();
        let commands = streams
            .iter()
            .map(|stream| {
                let mut command = redis::cmd("XREVRANGE");
                command
                    .arg(stream)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(count);
                command
            })
            .collect();
        let replies = match link.call(None, |session| session.pipelined(commands)) {
            Ok(replies) => replies,
            Err(err) => {
                let err = format!("{err:#}");
                while read.len() < locks.len() {
                    read.push(Err(anyhow!("{err}")));
                }
                return read;
            }
        };
        let node = link.display().to_string();
        for ((lock, stream), reply) in chunk.iter().zip(&streams).zip(replies) {
            read.push(match reply {
                Ok(reply) => Ok(entries_of(reply)),
                Err(err) => Err(refused(link, lock, stream, err, &node)),
            });
        }
    }
    read
}
