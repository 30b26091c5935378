//! The subscription's socket on its own: connecting, `HELLO`, `AUTH`, and sending and reading
//! by a deadline on a socket that never blocks (the loop polls it between commands).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, PushKind, RedisError, RedisResult, Value};

use super::frames::{frame_length, MAX_REPLY};
use crate::backend::error::{is_permission_error, is_unknown_command, time_left};

/// How much one read takes from the socket.
const READ_CHUNK: usize = 16 * 1024;

/// The socket's state; see `SharedWire`.
pub struct WireState {
    pub(super) stream: Stream,
    /// Bytes read and not handed on: never a complete message after the loop's `read`.
    pub(super) buffer: Vec<u8>,
    pub(super) display: String,
    /// `HELLO 3` was accepted: notices come as pushes, apart from replies, so commands may
    /// be sent over the subscription.
    pub(super) resp3: bool,
    /// The database the URL names (`SELECT`ed where commands are sent over it).
    pub(super) db: i64,
    /// The latest release that came while a command waited for its reply, for the loop.
    pub(super) heard: Option<String>,
    /// The loop still reads the subscription; once it has stopped (the wait is over), the
    /// next command unsubscribes, in the same write.
    pub(super) read_by_loop: bool,
    pub(super) subscribed: bool,
    /// An `UNSUBSCRIBE` was sent whose outcome has not been read yet: pushes that say it is
    /// done, or an error reply (an ACL without `unsubscribe`: it stays subscribed, and the
    /// pushes are passed over), read apart from the replies of the command sent with it.
    pub(super) unsubscribing: bool,
    /// A command failed on it (a late reply may still come) or the server hung up: no
    /// command is sent over it again, and the loop hears that the subscription ended.
    pub(super) broken: bool,
    /// When the command being sent must have its reply.
    pub(super) until: Instant,
}

pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub(super) fn connect(addr: &ConnectionAddr, until: Instant) -> RedisResult<Stream> {
        match addr {
            ConnectionAddr::Tcp(host, port) => {
                let mut last = None;
                for address in (host.as_str(), *port).to_socket_addrs()? {
                    let limit = time_left(Duration::MAX, Some(until))?;
                    match TcpStream::connect_timeout(&address, limit) {
                        Ok(stream) => {
                            stream.set_nodelay(true)?;
                            return Ok(Stream::Tcp(stream));
                        }
                        Err(err) => last = Some(err),
                    }
                }
                Err(last
                    .unwrap_or_else(|| {
                        io::Error::new(io::ErrorKind::NotFound, "no address for the host")
                    })
                    .into())
            }
            ConnectionAddr::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path)?)),
            _ => Err(io::Error::from(io::ErrorKind::Unsupported).into()),
        }
    }

    pub(super) fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::Unix(stream) => stream.as_raw_fd(),
        }
    }

    pub(super) fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.set_nonblocking(true),
            Stream::Unix(stream) => stream.set_nonblocking(true),
        }
    }

    pub(super) fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(bytes),
            Stream::Unix(stream) => stream.write(bytes),
        }
    }

    pub(super) fn read(&mut self, into: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(into),
            Stream::Unix(stream) => stream.read(into),
        }
    }

    /// Ends the connection both ways; the loop's poll then sees it readable, and its read
    /// the end.
    pub(super) fn shut_down(&self) {
        let _ = match self {
            Stream::Tcp(stream) => stream.shutdown(Shutdown::Both),
            Stream::Unix(stream) => stream.shutdown(Shutdown::Both),
        };
    }
}

impl WireState {
    /// `HELLO 3`, authenticating in the same command where there is a password. Whether the
    /// server now speaks RESP3: one without `HELLO` (before Redis 6, or renamed away) or
    /// without RESP3 (`NOPROTO`), or a user whose ACL refuses it, is answered the old way.
    /// Any other error is the subscription's: a wrong password, or a server that turns new
    /// connections away (at its client limit, it says so and hangs up).
    pub(super) fn hello(
        &mut self,
        username: Option<&str>,
        password: Option<&str>,
    ) -> RedisResult<bool> {
        let mut hello = redis::cmd("HELLO");
        hello.arg(3);
        if let Some(password) = password {
            hello
                .arg("AUTH")
                .arg(username.unwrap_or("default"))
                .arg(password);
        }
        match self.ask(&hello.get_packed_command(), 1) {
            Ok(()) => Ok(true),
            Err(err)
                if is_unknown_command(&err)
                    || is_permission_error(&err)
                    || err.code() == Some("NOPROTO") =>
            {
                Ok(false)
            }
            Err(err) => Err(without_secret(err, password)),
        }
    }

    /// `AUTH` on RESP2, where there is a password.
    pub(super) fn authenticate(
        &mut self,
        username: Option<&str>,
        password: Option<&str>,
    ) -> RedisResult<()> {
        let Some(password) = password else {
            return Ok(());
        };
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = username {
            auth.arg(user);
        }
        auth.arg(password);
        let authenticated = self.ask(&auth.get_packed_command(), 1);
        // A server without ACL users (before Redis 6) takes the password alone, as the
        // redis crate's own connection retries it.
        if matches!(&authenticated, Err(err) if err.to_string().contains("wrong number of arguments"))
        {
            let auth = redis::cmd("AUTH").arg(password).get_packed_command();
            return self
                .ask(&auth, 1)
                .map_err(|err| without_secret(err, Some(password)));
        }
        authenticated.map_err(|err| without_secret(err, Some(password)))
    }

    /// Sends `command` and reads `replies` answers to it (an error reply is the error), by
    /// `until`. What comes after them stays in the buffer.
    pub(super) fn ask(&mut self, command: &[u8], replies: usize) -> RedisResult<()> {
        self.write_all(command)?;
        for _ in 0..replies {
            self.next_reply()?.extract_error()?;
        }
        Ok(())
    }

    /// The outcome of an `UNSUBSCRIBE` sent earlier, by `until`: true once the server says
    /// no subscription is left, false for an error reply (refused by the ACL) or anything
    /// else that is not a push. Pushes on the way are passed over (what was published before
    /// the server read the `UNSUBSCRIBE`).
    pub(super) fn read_unsubscribed(&mut self) -> RedisResult<bool> {
        loop {
            match self.next_reply()? {
                Value::Push {
                    kind: PushKind::Unsubscribe,
                    data,
                } if data.last() == Some(&Value::Int(0)) => return Ok(true),
                Value::Push { .. } => {}
                _ => return Ok(false),
            }
        }
    }

    /// Writes all of `bytes` by `until`.
    pub(super) fn write_all(&mut self, mut bytes: &[u8]) -> RedisResult<()> {
        while !bytes.is_empty() {
            match self.stream.write(bytes) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Ok(written) => bytes = &bytes[written..],
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.wait_for(libc::POLLOUT)?;
                }
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }

    /// The next value the server sends, pushes included, waiting for it until `until`.
    pub(super) fn next_reply(&mut self) -> RedisResult<Value> {
        loop {
            if let Some(value) = self.next_value(MAX_REPLY)? {
                return Ok(value);
            }
            match self.fill() {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.wait_for(libc::POLLIN)?;
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err.into()),
                Ok(()) => {}
            }
        }
    }

    /// Waits until the socket is ready for `events`, or fails at `until`.
    pub(super) fn wait_for(&self, events: libc::c_short) -> RedisResult<()> {
        let left = time_left(Duration::MAX, Some(self.until))?;
        // Rounded up: a poll that wakes a little early only loops once more.
        let millis = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        let mut fd = libc::pollfd {
            fd: self.stream.fd(),
            events,
            revents: 0,
        };
        // SAFETY: one pollfd on this frame, for a descriptor this state owns.
        let ready = unsafe { libc::poll(&mut fd, 1, millis) };
        if ready < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err.into());
            }
        }
        Ok(())
    }

    /// Reads what the socket has (once, without blocking), onto the buffer.
    pub(super) fn fill(&mut self) -> io::Result<()> {
        let start = self.buffer.len();
        self.buffer.resize(start + READ_CHUNK, 0);
        let read = self.stream.read(&mut self.buffer[start..]);
        self.buffer.truncate(start + *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(_) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// The first complete value in the buffer, taken out of it; `None` if there is none.
    /// One larger than `largest` (or a push larger than a message may be) is an error.
    pub(super) fn next_value(&mut self, largest: usize) -> RedisResult<Option<Value>> {
        let Some(length) = frame_length(&self.buffer, largest)? else {
            return Ok(None);
        };
        let value = redis::parse_redis_value(&self.buffer[..length])?;
        self.buffer.drain(..length);
        Ok(Some(value))
    }

    pub(super) fn break_off(&mut self) {
        if !self.broken {
            self.broken = true;
            self.stream.shut_down();
        }
    }
}

/// `err` as it may be printed: a server that repeats the command it refuses (Redis's
/// "unknown command ... with args beginning with:", cut short, line breaks made spaces)
/// would repeat the password sent with it, whole or in part. Only the error's code is kept
/// then.
fn without_secret(err: RedisError, password: Option<&str>) -> RedisError {
    let text = err.to_string();
    let repeats = |password: &str| {
        let seen: String = password
            .chars()
            .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
            .take(8)
            .collect();
        text.contains("with args") || (!seen.trim().is_empty() && text.contains(&seen))
    };
    match password {
        Some(password) if repeats(password) => {
            let code = err.code().unwrap_or("ERR").to_string();
            RedisError::from((
                redis::ErrorKind::AuthenticationFailed,
                "the server refused the credentials",
                format!("{code} (its words repeat what was sent, so they are not shown)"),
            ))
        }
        _ => err,
    }
}
