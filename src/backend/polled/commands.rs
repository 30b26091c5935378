//! Commands sent over a subscription that speaks RESP3 (`SubscribedWire`): replies read
//! apart from the pushes around them, the notices among those kept for the loop, and any
//! failure of the wire itself (not an error reply: that is a whole answer) ending the
//! subscription, whose late reply could otherwise be read as the next command's. Such a
//! failure is an I/O error to the caller, whatever broke: worth a try on a connection of
//! its own, as a timed-out reply is.

use std::io;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisResult, Value};

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
        loop {
            match self.next_reply()? {
                push @ Value::Push { .. } => self.heard(push),
                reply => return Ok(reply),
            }
        }
    }

    /// A failure of the wire leaves it broken (its reply may still come), and is told as an
    /// I/O error: a message too large or not in the protocol (published on the channel by
    /// anyone who may publish there) must not fail a try for good.
    fn or_break<T>(&mut self, result: RedisResult<T>) -> RedisResult<T> {
        result.map_err(|err| {
            self.break_off();
            if err.is_io_error() || err.is_timeout() {
                err
            } else {
                let why = format!("the subscription's connection failed: {err}");
                io::Error::new(io::ErrorKind::InvalidData, why).into()
            }
        })
    }
}

impl Wire for WireState {
    fn set_limit(&mut self, limit: Duration) -> RedisResult<()> {
        self.until = Instant::now() + limit;
        Ok(())
    }

    fn send_packed(&mut self, commands: &[u8]) -> RedisResult<()> {
        if self.broken || !self.resp3 {
            return Err(io::Error::from(io::ErrorKind::NotConnected).into());
        }
        let written = self.write_all(commands);
        self.or_break(written)
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
