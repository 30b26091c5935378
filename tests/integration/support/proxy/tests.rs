//! The proxy's own tests, against a loopback echo server: every fault, a planned change,
//! a reset, and a drop that ends every thread at once.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

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
