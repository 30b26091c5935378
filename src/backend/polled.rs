//! A waiter's subscription read by the run's loop itself: `event::Events` polls its socket
//! beside the signals, so that the thread that reads a release notice is the one that
//! sends the acquisition, at once, with no thread between them.
//!
//! The socket is our own, not the redis crate's connection: the loop must poll the
//! descriptor, and must never leave a whole message in a reader's buffer while the socket
//! is not readable (it would be heard only when the next one came). So each read hands on
//! every complete message it has, and what it keeps is never more than the start of one.
//!
//! It is used where a subscription is plain (RESP2 `SUBSCRIBE`) on one server reached by
//! TCP or a Unix socket: `redis://`, `redis+unix://`. The others keep the reader thread of
//! `notices`: TLS (the redis crate's TLS layer may hold a decrypted record), a Sentinel's
//! master (found by asking the sentinels, which the crate's connection does here), a Redis
//! Cluster (RESP3 pushes, redirections) and the nodes of a Redlock quorum (subscribed on the
//! nodes' own threads).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use anyhow::Result;
use redis::{ConnectionAddr, ConnectionInfo, RedisError, RedisResult, Value};

use super::error::subscription_error;
use super::error::{describe_error, time_left};
use super::layout::Key;
use super::Notice;

/// The most one message may take: a release notice names a holder in a few hundred bytes.
/// A larger one is not ours (a client that publishes junk on the channel): the
/// subscription is given up and made again, rather than memory spent on it.
const MAX_MESSAGE: usize = 1 << 20;
/// How deep arrays may nest in what the server sends: a pub/sub message is one array.
const MAX_DEPTH: usize = 4;
/// How much one read takes from the socket.
const READ_CHUNK: usize = 16 * 1024;

/// A subscription for the loop to read (`NoticeSource`).
pub struct PolledSubscription {
    stream: Stream,
    /// Bytes read and not handed on: never a complete message after `read`.
    buffer: Vec<u8>,
    display: String,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn connect(addr: &ConnectionAddr, until: Instant) -> RedisResult<Stream> {
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

    fn set_timeouts(&self, limit: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => {
                stream.set_read_timeout(limit)?;
                stream.set_write_timeout(limit)
            }
            Stream::Unix(stream) => {
                stream.set_read_timeout(limit)?;
                stream.set_write_timeout(limit)
            }
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.set_nonblocking(true),
            Stream::Unix(stream) => stream.set_nonblocking(true),
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.write_all(bytes),
            Stream::Unix(stream) => stream.write_all(bytes),
        }
    }

    fn read(&mut self, into: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(into),
            Stream::Unix(stream) => stream.read(into),
        }
    }
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
/// returns is never missed.
pub fn subscribe(
    info: &ConnectionInfo,
    channels: &[Key; 2],
    until: Instant,
    display: &str,
) -> Result<PolledSubscription> {
    let mut subscription = PolledSubscription {
        stream: Stream::connect(info.addr(), until).map_err(|err| describe_error(err, display))?,
        buffer: Vec::new(),
        display: display.to_string(),
    };
    let settings = info.redis_settings();
    if let Some(password) = settings.password() {
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = settings.username() {
            auth.arg(user);
        }
        auth.arg(password);
        let mut authenticated = subscription.ask(&auth.get_packed_command(), 1, until);
        // A server without ACL users (before Redis 6) takes the password alone, as the
        // redis crate's own connection retries it.
        if matches!(&authenticated, Err(err) if err.to_string().contains("wrong number of arguments"))
        {
            let auth = redis::cmd("AUTH").arg(password).get_packed_command();
            authenticated = subscription.ask(&auth, 1, until);
        }
        authenticated.map_err(|err| describe_error(err, display))?;
    }
    let subscribe = redis::cmd("SUBSCRIBE")
        .arg(&channels[0])
        .arg(&channels[1])
        .get_packed_command();
    subscription
        .ask(&subscribe, 2, until)
        .map_err(|err| subscription_error(err, display))?;
    subscription
        .stream
        .set_nonblocking()
        .map_err(|err| describe_error(err.into(), display))?;
    Ok(subscription)
}

impl PolledSubscription {
    /// Sends `command` and reads `replies` answers to it (an error reply is the error),
    /// blocking until `until` at most. What comes after them stays in the buffer.
    fn ask(&mut self, command: &[u8], replies: usize, until: Instant) -> RedisResult<()> {
        let limit = time_left(Duration::MAX, Some(until))?;
        self.stream.set_timeouts(Some(limit))?;
        self.stream.write_all(command)?;
        let mut read = 0;
        while read < replies {
            match self.next_value()? {
                Some(value) => {
                    value.extract_error()?;
                    read += 1;
                }
                None => {
                    let limit = time_left(Duration::MAX, Some(until))?;
                    self.stream.set_timeouts(Some(limit))?;
                    self.fill()?;
                }
            }
        }
        Ok(())
    }

    /// Reads what the socket has (once), onto the buffer.
    fn fill(&mut self) -> RedisResult<()> {
        let start = self.buffer.len();
        self.buffer.resize(start + READ_CHUNK, 0);
        let read = self.stream.read(&mut self.buffer[start..]);
        self.buffer.truncate(start + *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) => Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(_) => Ok(()),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    /// The first complete value in the buffer, taken out of it; `None` if there is none.
    fn next_value(&mut self) -> RedisResult<Option<Value>> {
        let Some(length) = frame_length(&self.buffer)? else {
            return Ok(None);
        };
        let value = redis::parse_redis_value(&self.buffer[..length])?;
        self.buffer.drain(..length);
        Ok(Some(value))
    }
}

impl super::NoticeSource for PolledSubscription {
    fn fd(&self) -> RawFd {
        match &self.stream {
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::Unix(stream) => stream.as_raw_fd(),
        }
    }

    /// Reads once from the socket (it is not blocking) and hands on every message in the
    /// buffer, coalesced: the latest release, or the subscription's end.
    fn read(&mut self) -> Option<Notice> {
        let filled = match self.fill() {
            Err(err) if err.is_timeout() => Ok(()),
            other => other,
        };
        let mut latest = None;
        loop {
            match self.next_value() {
                Ok(Some(value)) => {
                    if let Some(by) = released_by(value) {
                        latest = Some(Notice::Released { by });
                    }
                }
                Ok(None) => break,
                Err(err) => return Some(Notice::Broken(describe_error(err, &self.display))),
            }
        }
        // A message that came before the connection broke is still heard: the waiter tries
        // on it, and subscribes again on the next turn.
        match filled {
            Err(err) if latest.is_none() => {
                Some(Notice::Broken(describe_error(err, &self.display)))
            }
            Err(_) => latest,
            Ok(()) => latest,
        }
    }
}

/// The payload of a pub/sub `message`, which names a release; `None` for anything else.
/// A payload that is not text still wakes the waiter (it tries, and sees).
fn released_by(value: Value) -> Option<String> {
    let Value::Array(parts) = value else {
        return None;
    };
    let [Value::BulkString(kind), _channel, payload] = <[Value; 3]>::try_from(parts).ok()? else {
        return None;
    };
    if kind != b"message" {
        return None;
    }
    Some(redis::from_redis_value::<String>(payload).unwrap_or_default())
}

/// How many bytes the first complete value in `buffer` takes; `None` when it is not all
/// there yet. An error for what is not Redis's protocol, or too large or deep to be ours.
fn frame_length(buffer: &[u8]) -> RedisResult<Option<usize>> {
    value_end(buffer, 0, 0)
}

fn value_end(buffer: &[u8], at: usize, depth: usize) -> RedisResult<Option<usize>> {
    let Some(kind) = buffer.get(at) else {
        return Ok(None);
    };
    let Some(line) = buffer[at..].windows(2).position(|pair| pair == b"\r\n") else {
        return if buffer.len() - at > MAX_MESSAGE {
            Err(not_ours("a line too long"))
        } else {
            Ok(None)
        };
    };
    let head = &buffer[at + 1..at + line];
    let next = at + line + 2;
    let number = || -> RedisResult<i64> {
        std::str::from_utf8(head)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| not_ours("a length that is not a number"))
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(Some(next)),
        b'$' | b'!' | b'=' => {
            let Ok(length) = usize::try_from(number()?) else {
                return Ok(Some(next)); // $-1: nil
            };
            if length > MAX_MESSAGE {
                return Err(not_ours("a message too large"));
            }
            let end = next + length + 2;
            if buffer.len() < end {
                return Ok(None);
            }
            if &buffer[end - 2..end] != b"\r\n" {
                return Err(not_ours("a string of the wrong length"));
            }
            Ok(Some(end))
        }
        b'*' | b'>' | b'~' | b'%' | b'|' => {
            let Ok(count) = usize::try_from(number()?) else {
                return Ok(Some(next)); // *-1: nil
            };
            if depth == MAX_DEPTH || count > MAX_MESSAGE {
                return Err(not_ours("arrays too deep or too long"));
            }
            let count = if matches!(kind, b'%' | b'|') {
                count * 2
            } else {
                count
            };
            let mut end = next;
            for _ in 0..count {
                match value_end(buffer, end, depth + 1)? {
                    Some(after) => end = after,
                    None => return Ok(None),
                }
            }
            Ok(Some(end))
        }
        _ => Err(not_ours("a reply of an unknown kind")),
    }
}

fn not_ours(what: &str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Parse,
        "not a pub/sub message",
        what.to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGE: &[u8] = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nt#1:x\r\n";

    #[test]
    fn a_frame_is_complete_only_when_all_of_it_has_come() {
        for cut in 0..MESSAGE.len() {
            assert_eq!(frame_length(&MESSAGE[..cut]).unwrap(), None, "{cut}");
        }
        assert_eq!(frame_length(MESSAGE).unwrap(), Some(MESSAGE.len()));
        let two = [MESSAGE, MESSAGE].concat();
        assert_eq!(frame_length(&two).unwrap(), Some(MESSAGE.len()));
        assert_eq!(frame_length(b"-ERR no\r\n").unwrap(), Some(9));
        assert_eq!(frame_length(b"$-1\r\nX").unwrap(), Some(5));
        assert_eq!(
            frame_length(b">3\r\n$7\r\nmessage\r\n:1\r\n").unwrap(),
            None
        );
    }

    #[test]
    fn what_is_not_a_message_of_ours_is_refused() {
        assert!(frame_length(b"HTTP/1.1 400\r\n").is_err());
        assert!(frame_length(b"$5\r\nabcdefg\r\n").is_err());
        assert!(frame_length(format!("${}\r\n", MAX_MESSAGE + 1).as_bytes()).is_err());
        assert!(frame_length(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n").is_err());
        assert!(frame_length(b"*x\r\n").is_err());
    }

    fn message(payload: &str) -> Vec<u8> {
        format!(
            "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n${}\r\n{payload}\r\n",
            payload.len()
        )
        .into_bytes()
    }

    /// A server on a socket pair: `script` is what it sends once the subscription asked.
    fn subscribed(confirms: &[u8]) -> (PolledSubscription, UnixStream) {
        let (ours, mut server) = UnixStream::pair().unwrap();
        let mut subscription = PolledSubscription {
            stream: Stream::Unix(ours),
            buffer: Vec::new(),
            display: String::from("r"),
        };
        server.write_all(confirms).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        subscription.ask(b"SUBSCRIBE", 2, until).unwrap();
        subscription.stream.set_nonblocking().unwrap();
        (subscription, server)
    }

    const CONFIRMS: &[u8] = b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n\
                              *3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n";

    #[test]
    fn every_message_read_is_handed_on_and_a_burst_is_one_notice() {
        use super::super::NoticeSource;
        // A message that came with the confirmations waits in the buffer: the first read
        // hands it on although the socket has nothing more.
        let early = [CONFIRMS, &message("first")].concat();
        let (mut subscription, mut server) = subscribed(&early);
        assert!(matches!(subscription.read(), Some(Notice::Released { by }) if by == "first"));
        assert!(subscription.read().is_none(), "nothing more");
        // Two in one write, and a third cut in two: the latest whole one is handed on, and
        // nothing whole is kept back.
        let burst = [message("a"), message("b"), message("c")].concat();
        let cut = burst.len() - 5;
        server.write_all(&burst[..cut]).unwrap();
        assert!(matches!(subscription.read(), Some(Notice::Released { by }) if by == "b"));
        assert_eq!(frame_length(&subscription.buffer).unwrap(), None);
        server.write_all(&burst[cut..]).unwrap();
        assert!(matches!(subscription.read(), Some(Notice::Released { by }) if by == "c"));
        assert!(subscription.buffer.is_empty());
        // The server hangs up: the end, after what it sent last.
        server.write_all(&message("d")).unwrap();
        drop(server);
        assert!(matches!(subscription.read(), Some(Notice::Released { by }) if by == "d"));
        assert!(matches!(subscription.read(), Some(Notice::Broken(_))));
    }

    #[test]
    fn a_refused_subscription_is_the_servers_error() {
        let (ours, mut server) = UnixStream::pair().unwrap();
        let mut subscription = PolledSubscription {
            stream: Stream::Unix(ours),
            buffer: Vec::new(),
            display: String::from("r"),
        };
        server
            .write_all(b"-NOPERM this user has no permissions to access one of the channels\r\n")
            .unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let err = subscription.ask(b"SUBSCRIBE", 2, until).unwrap_err();
        assert_eq!(err.code(), Some("NOPERM"));
    }

    #[test]
    fn messages_are_releases_and_the_rest_is_not() {
        let value = redis::parse_redis_value(MESSAGE).unwrap();
        assert_eq!(released_by(value).as_deref(), Some("t#1:x"));
        let confirm = redis::parse_redis_value(b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n");
        assert_eq!(released_by(confirm.unwrap()), None);
        assert_eq!(released_by(Value::Int(1)), None);
    }
}
