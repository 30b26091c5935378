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
//! [`relay::SLICE`] to notice.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use relay::{accept_loop, Conn};

mod relay;
#[cfg(test)]
mod tests;

/// Connections open at once; a further one is closed as soon as it is accepted.
pub const MAX_CONNECTIONS: usize = 64;
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
        // A port no server of this run had: a stopped server's port stays dead. Another
        // process (a second test run on the machine) may take it between the pick and the
        // bind: then another port.
        let mut tries = 0;
        let listener = loop {
            tries += 1;
            match TcpListener::bind(("127.0.0.1", super::free_port())) {
                Ok(listener) => break listener,
                Err(err) if err.kind() == std::io::ErrorKind::AddrInUse && tries < 20 => {}
                Err(err) => panic!("binding the proxy on loopback: {err}"),
            }
        };
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

    /// Every connection open now goes silent without closing (a peer gone, a NAT entry
    /// dropped): nothing is forwarded on it either way from now on, while connections made
    /// later pass as the fault in force says. Returns how many were silenced.
    pub fn silence_open(&self) -> usize {
        let conns = lock(&self.shared.conns);
        let open: Vec<_> = conns.iter().filter(|conn| !conn.is_closed()).collect();
        for conn in &open {
            conn.silenced.store(true, Ordering::SeqCst);
        }
        open.len()
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
