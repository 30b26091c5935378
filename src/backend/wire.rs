//! What a session's commands travel over: a connection of the redis crate's, or a waiter's
//! subscription that speaks RESP3 (`polled`), on which a release notice and the acquisition
//! it calls for share one socket. `connection` sends over either the same way; `vetting`'s
//! questions ride in the same write as the command they precede.

use std::time::Duration;

use redis::{Connection, ConnectionLike, RedisResult, Value};

/// A connection commands can be sent over, one write and then its replies.
pub trait Wire: ConnectionLike {
    /// Gives every write and read from now on `limit` at most.
    fn set_limit(&mut self, limit: Duration) -> RedisResult<()>;

    /// Sends packed commands, reading nothing.
    fn send_packed(&mut self, commands: &[u8]) -> RedisResult<()>;

    /// Reads the next reply (an error reply is a value, `Value::ServerError`).
    fn recv(&mut self) -> RedisResult<Value>;
}

impl Wire for Connection {
    fn set_limit(&mut self, limit: Duration) -> RedisResult<()> {
        self.set_read_timeout(Some(limit))?;
        self.set_write_timeout(Some(limit))
    }

    fn send_packed(&mut self, commands: &[u8]) -> RedisResult<()> {
        self.send_packed_command(commands)
    }

    fn recv(&mut self) -> RedisResult<Value> {
        self.recv_response()
    }
}
