//! Commands sent over a subscription that speaks RESP3 (`SubscribedWire`): replies read
//! apart from the pushes around them, the notices among those kept for the loop, and any
//! failure ending the subscription, whose late reply could otherwise be read as the next
//! command's.

use std::io;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, PushKind, RedisResult, Value};

use super::frames::not_ours;
use super::released_by;
use super::socket::WireState;
use crate::backend::wire::Wire;

impl WireState {
    /// A value that came unasked, between or before a command's replies: a release is kept
    /// for the loop (the latest), while it reads the subscription.
    fn heard(&mut self, value: Value) {
        if let Some(by) = released_by(value).filter(|_| self.read_by_loop) {
            self.heard = Some(by);
        }
    }

    /// The next reply to a command: pushes on the way are notices (`heard`).
    fn command_reply(&mut self) -> RedisResult<Value> {
        while self.unsubscribing {
            match self.next_reply()? {
                Value::Push {
                    kind: PushKind::Unsubscribe,
                    data,
                } => self.unsubscribing = data.last() != Some(&Value::Int(0)),
                Value::Push { .. } => {}
                Value::ServerError(_) => self.unsubscribing = false,
                _ => return Err(not_ours("a reply to UNSUBSCRIBE that is not one")),
            }
        }
        loop {
            match self.next_reply()? {
                push @ Value::Push { .. } => self.heard(push),
                reply => return Ok(reply),
            }
        }
    }

    /// Any failure of a command leaves the wire broken: its reply may still come.
    fn or_break<T>(&mut self, result: RedisResult<T>) -> RedisResult<T> {
        if result.is_err() {
            self.break_off();
        }
        result
    }
}

impl Wire for WireState {
    fn set_limit(&mut self, limit: Duration) -> RedisResult<()> {
        self.until = Some(Instant::now() + limit);
        Ok(())
    }

    /// Unsubscribes first, in the same write, once the loop has stopped reading.
    fn send_packed(&mut self, commands: &[u8]) -> RedisResult<()> {
        if self.broken || !self.resp3 {
            return Err(io::Error::from(io::ErrorKind::NotConnected).into());
        }
        let result = if self.subscribed && !self.read_by_loop {
            self.subscribed = false;
            self.unsubscribing = true;
            let mut packed = redis::cmd("UNSUBSCRIBE").get_packed_command();
            packed.extend_from_slice(commands);
            self.write_all(&packed)
        } else {
            self.write_all(commands)
        };
        self.or_break(result)
    }

    fn recv(&mut self) -> RedisResult<Value> {
        let reply = self.command_reply();
        self.or_break(reply)
    }
}

impl ConnectionLike for WireState {
    fn req_packed_command(&mut self, command: &[u8]) -> RedisResult<Value> {
        self.send_packed(command)?;
        self.recv()
    }

    /// The replies past `offset`, error replies among them as values (as the redis crate's
    /// own connection gives them); an error reply before `offset` is the error.
    fn req_packed_commands(
        &mut self,
        commands: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send_packed(commands)?;
        let mut replies = Vec::with_capacity(count);
        let mut refused = None;
        // Every reply is read, whatever comes first: one left unread would be taken for the
        // reply to the next command.
        for index in 0..offset + count {
            let reply = self.recv()?;
            if index >= offset {
                replies.push(reply);
            } else if let Value::ServerError(err) = reply {
                refused.get_or_insert(err);
            }
        }
        match refused {
            Some(err) => Err(err.into()),
            None => Ok(replies),
        }
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        !self.broken
    }

    fn is_open(&self) -> bool {
        !self.broken
    }
}
