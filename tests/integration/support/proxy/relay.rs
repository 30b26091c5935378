//! The proxy's moving parts: the acceptor, and per connection a reader and a writer in each
//! direction. A reader decides at read time what happens to a chunk; a writer delivers the
//! forwarded ones in order at their due time.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{lock, Fault, Plan, Shared, CONNECT_TIMEOUT, MAX_CONNECTIONS};

/// Chunks queued per direction before the reader waits for the writer.
const QUEUE: usize = 256;
const CHUNK: usize = 16 * 1024;
/// How long a waiting writer sleeps at a time before looking whether it should stop.
pub const SLICE: Duration = Duration::from_millis(10);
/// Bound on a write to a peer that stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
enum Direction {
    /// Client to server: requests.
    Up,
    /// Server to client: replies.
    Down,
}

/// What happens to one chunk read in one direction.
enum Fate {
    Forward(Duration),
    Discard,
}

impl Fault {
    fn fate(self, direction: Direction) -> Fate {
        match (self, direction) {
            (Fault::Pass, _) => Fate::Forward(Duration::ZERO),
            (Fault::Latency { up, .. }, Direction::Up) => Fate::Forward(up),
            (Fault::Latency { down, .. }, Direction::Down) => Fate::Forward(down),
            (Fault::Blackhole, _) => Fate::Discard,
            (Fault::DropReplies, Direction::Up) => Fate::Forward(Duration::ZERO),
            (Fault::DropReplies, Direction::Down) => Fate::Discard,
        }
    }
}

/// One proxied connection: the client's socket and ours to the server.
pub struct Conn {
    client: TcpStream,
    server: TcpStream,
    closed: AtomicBool,
    /// Gone silent (`FaultProxy::silence_open`): nothing forwarded either way, whatever the
    /// fault in force, and never closed.
    pub silenced: AtomicBool,
}

impl Conn {
    /// Closes both sides with FIN, once; wakes every thread of the connection.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }

    /// Resets both sides: SO_LINGER 0 makes the final close send RST instead of FIN, and
    /// shutting down only the read side wakes the readers without sending a FIN first. The
    /// RST goes out when the last thread of the connection drops its handle.
    pub fn reset(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        for stream in [&self.client, &self.server] {
            linger_zero(stream);
            let _ = stream.shutdown(Shutdown::Read);
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// `SO_LINGER {on, 0}`: close with RST. std has no stable setter for it.
fn linger_zero(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the pointer and length describe `linger`, which outlives the call; the fd is
    // owned by `stream` and open.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

pub fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let open = {
            let mut conns = lock(&shared.conns);
            conns.retain(|conn| !conn.is_closed());
            conns.len()
        };
        if open >= MAX_CONNECTIONS {
            shared.stats.refused.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        // Loopback only, as asserted at start; a server that is down closes the client too.
        let Ok(server) = TcpStream::connect_timeout(&shared.upstream, CONNECT_TIMEOUT) else {
            shared.stats.refused.fetch_add(1, Ordering::SeqCst);
            continue;
        };
        for stream in [&client, &server] {
            let _ = stream.set_nodelay(true);
            let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        }
        let conn = Arc::new(Conn {
            client,
            server,
            closed: AtomicBool::new(false),
            silenced: AtomicBool::new(false),
        });
        lock(&shared.conns).push(Arc::clone(&conn));
        shared.stats.accepted.fetch_add(1, Ordering::SeqCst);
        let mut threads = lock(&shared.threads);
        threads.retain(|thread| !thread.is_finished());
        for direction in [Direction::Up, Direction::Down] {
            let (queue, delivered) = mpsc::sync_channel(QUEUE);
            let (reading, sharing) = (Arc::clone(&conn), Arc::clone(shared));
            threads.push(spawn("proxy-read", move || {
                read_loop(&reading, direction, &sharing, &queue);
            }));
            let writing = Arc::clone(&conn);
            threads.push(spawn("proxy-write", move || {
                write_loop(&writing, direction, &delivered);
            }));
        }
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .expect("starting a proxy thread")
}

/// A chunk to deliver at a due time, or `None`: the source closed, close after what came
/// before.
type Item = Option<(Instant, Vec<u8>)>;

fn read_loop(conn: &Conn, direction: Direction, shared: &Shared, queue: &SyncSender<Item>) {
    let mut source = match direction {
        Direction::Up => &conn.client,
        Direction::Down => &conn.server,
    };
    let (forwarded, discarded) = match direction {
        Direction::Up => (&shared.stats.forwarded_up, &shared.stats.discarded_up),
        Direction::Down => (&shared.stats.forwarded_down, &shared.stats.discarded_down),
    };
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if conn.is_closed() {
            break;
        }
        let fault = {
            let mut plan = lock(&shared.plan);
            if let (Direction::Up, Some((left, next))) = (direction, plan.next) {
                if left == 0 {
                    *plan = Plan {
                        now: next,
                        next: None,
                    };
                } else {
                    plan.next = Some((left - 1, next));
                }
            }
            plan.now
        };
        let fate = if conn.silenced.load(Ordering::SeqCst) {
            Fate::Discard
        } else {
            fault.fate(direction)
        };
        match fate {
            Fate::Discard => {
                discarded.fetch_add(1, Ordering::SeqCst);
            }
            Fate::Forward(delay) => {
                forwarded.fetch_add(n as u64, Ordering::SeqCst);
                if queue
                    .send(Some((Instant::now() + delay, buf[..n].to_vec())))
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    let _ = queue.send(None);
}

fn write_loop(conn: &Conn, direction: Direction, delivered: &Receiver<Item>) {
    let mut sink = match direction {
        Direction::Up => &conn.server,
        Direction::Down => &conn.client,
    };
    // Disconnected: the reader is gone, which it only is after sending `None` or on a reset.
    while let Ok(item) = delivered.recv() {
        let Some((due, bytes)) = item else {
            // The source closed: pass the close on, after everything it sent before.
            conn.close();
            return;
        };
        loop {
            if conn.is_closed() {
                return;
            }
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            thread::sleep(left.min(SLICE));
        }
        if sink.write_all(&bytes).is_err() {
            conn.close();
            return;
        }
    }
}
