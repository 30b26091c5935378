//! A TCP fault proxy for the fault tests: it sits between redlock-run and a test's
//! `redis-server`, both on loopback, and on the test's command passes traffic, delays it per
//! direction, blackholes it, drops only the server's replies, or resets every connection.
//!
//! Threads and std only. Each connection has a reader and a writer per direction: the reader
//! decides at read time what happens to a chunk (forward at `now + delay`, or discard), the
//! writer delivers forwarded chunks in order at their due time, so a delay is latency, not a
//! slower line, and a chunk read before a change of fault keeps the fate it was given.
//!
//! Bounded: at most [`MAX_CONNECTIONS`] at once (more are closed at once), a bounded queue per
//! direction, loopback addresses only. On drop it stops accepting, shuts every connection
//! down and joins every thread it started; a writer waiting out a delay wakes within
//! [`SLICE`] to notice.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Connections open at once; a further one is closed as soon as it is accepted.
pub const MAX_CONNECTIONS: usize = 64;
/// Chunks queued per direction before the reader waits for the writer.
const QUEUE: usize = 256;
const CHUNK: usize = 16 * 1024;
/// How long a waiting writer sleeps at a time before looking whether it should stop.
const SLICE: Duration = Duration::from_millis(10);
/// Bound on a write to a peer that stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the proxy does to traffic from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything at once.
    Pass,
    /// Forward everything, client->server after `up`, server->client after `down`.
    Latency { up: Duration, down: Duration },
    /// Accept and read, forward nothing either way: requests vanish, no reply comes.
    Blackhole,
    /// Forward requests, discard the server's replies (a command that took effect but whose
    /// answer was lost).
    DropReplies,
}

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

/// Counters the tests read to prove a fault was really hit.
#[derive(Default)]
struct Stats {
    accepted: AtomicU64,
    refused: AtomicU64,
    forwarded_up: AtomicU64,
    forwarded_down: AtomicU64,
    discarded_up: AtomicU64,
    discarded_down: AtomicU64,
    resets: AtomicU64,
}

/// One proxied connection: the client's socket and ours to the server.
struct Conn {
    client: TcpStream,
    server: TcpStream,
    closed: AtomicBool,
}

impl Conn {
    /// Closes both sides with FIN, once; wakes every thread of the connection.
    fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }

    /// Resets both sides: SO_LINGER 0 makes the final close send RST instead of FIN, and
    /// shutting down only the read side wakes the readers without sending a FIN first. The
    /// RST goes out when the last thread of the connection drops its handle.
    fn reset(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        for stream in [&self.client, &self.server] {
            linger_zero(stream);
            let _ = stream.shutdown(Shutdown::Read);
        }
    }

    fn is_closed(&self) -> bool {
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

/// The fault in force, and one change planned to take effect at a later request.
struct Plan {
    now: Fault,
    /// After this many more client->server chunks, switch to this fault (for the next one).
    next: Option<(u64, Fault)>,
}

struct Shared {
    upstream: SocketAddr,
    plan: Mutex<Plan>,
    stopping: AtomicBool,
    conns: Mutex<Vec<Arc<Conn>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stats: Stats,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The proxy: listens on a free loopback port, forwards to `upstream`.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// A proxy in front of the server on loopback port `upstream_port`, passing traffic.
    pub fn start(upstream_port: u16) -> FaultProxy {
        let upstream = SocketAddr::from(([127, 0, 0, 1], upstream_port));
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the proxy on loopback");
        let addr = listener.local_addr().unwrap();
        assert!(addr.ip().is_loopback() && upstream.ip().is_loopback());
        let shared = Arc::new(Shared {
            upstream,
            plan: Mutex::new(Plan {
                now: Fault::Pass,
                next: None,
            }),
            stopping: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            stats: Stats::default(),
        });
        let accepting = Arc::clone(&shared);
        let acceptor = thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || accept_loop(&listener, &accepting))
            .expect("starting the proxy");
        FaultProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The URL redlock-run should use to go through the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// Applies `fault` from now on, cancelling any planned change.
    pub fn set(&self, fault: Fault) {
        *lock(&self.shared.plan) = Plan {
            now: fault,
            next: None,
        };
    }

    /// Keeps the current fault for the next `requests` client->server chunks (one per
    /// command: redlock-run waits for each reply), then applies `fault`, to the chunk after
    /// them first. Lets a test hit the third command of a call and not the first.
    pub fn set_after(&self, requests: u64, fault: Fault) {
        lock(&self.shared.plan).next = Some((requests, fault));
    }

    pub fn pass(&self) {
        self.set(Fault::Pass);
    }

    pub fn latency(&self, up: Duration, down: Duration) {
        self.set(Fault::Latency { up, down });
    }

    pub fn blackhole(&self) {
        self.set(Fault::Blackhole);
    }

    pub fn drop_replies(&self) {
        self.set(Fault::DropReplies);
    }

    /// Resets every open connection (RST both ways); returns how many there were.
    pub fn reset_all(&self) -> usize {
        let conns: Vec<Arc<Conn>> = lock(&self.shared.conns).drain(..).collect();
        let open: Vec<_> = conns.iter().filter(|conn| !conn.is_closed()).collect();
        for conn in &open {
            conn.reset();
        }
        self.shared
            .stats
            .resets
            .fetch_add(open.len() as u64, Ordering::SeqCst);
        open.len()
    }

    /// Connections accepted and forwarded so far.
    pub fn accepted(&self) -> u64 {
        self.shared.stats.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        let mut conns = lock(&self.shared.conns);
        conns.retain(|conn| !conn.is_closed());
        conns.len()
    }

    /// Bytes forwarded client->server and server->client.
    pub fn forwarded(&self) -> (u64, u64) {
        let stats = &self.shared.stats;
        (
            stats.forwarded_up.load(Ordering::SeqCst),
            stats.forwarded_down.load(Ordering::SeqCst),
        )
    }

    /// Chunks discarded client->server and server->client.
    pub fn discarded(&self) -> (u64, u64) {
        let stats = &self.shared.stats;
        (
            stats.discarded_up.load(Ordering::SeqCst),
            stats.discarded_down.load(Ordering::SeqCst),
        )
    }

    /// A one-line account for test output.
    pub fn summary(&self) -> String {
        let stats = &self.shared.stats;
        let (up, down) = self.forwarded();
        let (dropped_up, dropped_down) = self.discarded();
        format!(
            "proxy: {} connections ({} refused, {} reset), forwarded {up}B up / {down}B down, \
             discarded {dropped_up} chunks up / {dropped_down} down",
            self.accepted(),
            stats.refused.load(Ordering::SeqCst),
            stats.resets.load(Ordering::SeqCst),
        )
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the acceptor out of accept(); it sees `stopping` and returns.
        let _ = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for conn in lock(&self.shared.conns).drain(..) {
            conn.close();
        }
        let threads: Vec<_> = lock(&self.shared.threads).drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
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
        match fault.fate(direction) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback echo server for the proxy's own tests; stops when its listener is dropped
    /// and one more connection wakes it.
    fn echo_server() -> (u16, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = thread::spawn(move || {
            // Serves connections one after the other until one sends "quit".
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut buf = [0u8; 1024];
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) if &buf[..n] == b"quit" => return,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                }
            }
        });
        (port, handle)
    }

    fn stop_echo(port: u16, handle: JoinHandle<()>) {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(b"quit").unwrap();
        handle.join().unwrap();
    }

    fn client(proxy: &FaultProxy) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        stream
    }

    fn round_trip(stream: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(msg)?;
        let mut buf = vec![0u8; msg.len()];
        stream.read_exact(&mut buf)?;
        Ok(buf)
    }

    #[test]
    fn proxy_passes_delays_blackholes_drops_and_resets() {
        let (port, echo) = echo_server();
        {
            let proxy = FaultProxy::start(port);
            let mut stream = client(&proxy);
            assert_eq!(round_trip(&mut stream, b"hello").unwrap(), b"hello");

            proxy.latency(Duration::from_millis(100), Duration::from_millis(50));
            let sent = Instant::now();
            assert_eq!(round_trip(&mut stream, b"slow").unwrap(), b"slow");
            let took = sent.elapsed();
            assert!(
                (Duration::from_millis(150)..Duration::from_millis(450)).contains(&took),
                "round trip with 100+50ms latency took {took:?}"
            );

            proxy.drop_replies();
            assert!(
                round_trip(&mut stream, b"lost").is_err(),
                "reply not dropped"
            );
            assert_eq!(proxy.discarded().1, 1);
            // The request went through: the echo came back, and was dropped.
            proxy.pass();
            drop(stream);

            proxy.blackhole();
            let mut stream = client(&proxy);
            assert!(
                round_trip(&mut stream, b"void").is_err(),
                "blackhole answered"
            );
            assert!(proxy.discarded().0 >= 1);
            drop(stream);

            proxy.pass();
            let mut stream = client(&proxy);
            proxy.set_after(2, Fault::Blackhole);
            for msg in [&b"one"[..], b"two"] {
                assert_eq!(round_trip(&mut stream, msg).unwrap(), msg);
            }
            assert!(round_trip(&mut stream, b"three").is_err(), "not blackholed");
            drop(stream);

            proxy.pass();
            let mut stream = client(&proxy);
            assert_eq!(round_trip(&mut stream, b"again").unwrap(), b"again");
            wait_for(|| proxy.open_connections() == 1);
            assert_eq!(proxy.reset_all(), 1);
            let mut buf = [0u8; 8];
            let err = stream.read(&mut buf);
            assert!(
                matches!(&err, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
                "expected a reset, got {err:?}"
            );
            assert_eq!(proxy.accepted(), 4);
            eprintln!("{}", proxy.summary());
        }
        stop_echo(port, echo);
    }

    #[test]
    fn dropping_the_proxy_ends_its_threads() {
        let (port, echo) = echo_server();
        let proxy = FaultProxy::start(port);
        proxy.latency(Duration::from_secs(30), Duration::ZERO);
        let mut stream = client(&proxy);
        stream.write_all(b"held for 30s").unwrap();
        wait_for(|| proxy.forwarded().0 > 0);
        let shared = Arc::clone(&proxy.shared);
        let started = Instant::now();
        drop(proxy);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "drop took {:?}",
            started.elapsed()
        );
        assert!(lock(&shared.threads).is_empty());
        assert!(lock(&shared.conns).is_empty());
        drop(stream);
        stop_echo(port, echo);
    }

    fn wait_for(mut cond: impl FnMut() -> bool) {
        crate::support::wait_until(Duration::from_secs(5), "the proxy", &mut cond);
    }
}
