//! The throwaway servers: a temporary directory, redis-server and etcd on free loopback
//! ports (never 6379 or 2379), each under a guard process, and the readiness checks. It
//! owns starting and stopping them; what a measurement asks of them is in `measure/`, and
//! the Redis protocol client in `resp.rs`.

use std::env;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::helper::{realtime_ns, HELPER};
use crate::procs::wait_until;
use crate::resp::{loopback, Redis};
use crate::Result;

/// Removed on drop; the servers keep their data here.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Result<TempDir> {
        let path = env::temp_dir().join(format!(
            "redlock-bench-{}-{}",
            std::process::id(),
            realtime_ns() % 1_000_000_000
        ));
        fs::create_dir_all(&path).map_err(|err| format!("cannot create {path:?}: {err}"))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A server running under a guard process; dropping it stops the server.
pub struct Server {
    guard: Child,
    stdin: Option<ChildStdin>,
    log: PathBuf,
}

impl Server {
    fn start(exe: &Path, dir: &Path, program: &str, args: &[String]) -> Result<Server> {
        let log = &dir.join(format!("{program}.log"));
        let out = File::create(log).map_err(|err| format!("{log:?}: {err}"))?;
        let err = out.try_clone().map_err(|err| err.to_string())?;
        let mut guard = Command::new(exe)
            .args([HELPER, "guard"])
            .arg(dir)
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|err| format!("cannot start {program}: {err}"))?;
        Ok(Server {
            stdin: guard.stdin.take(),
            guard,
            log: log.to_path_buf(),
        })
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let stopped = wait_until(Duration::from_secs(5), Duration::from_millis(10), || {
            matches!(self.guard.try_wait(), Ok(Some(_)))
        });
        if !stopped {
            let _ = self.guard.kill();
            let _ = self.guard.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|err| format!("no free loopback port: {err}"))
}

/// `maxclients`: Redis's default (10000) is lowered to what its open-file limit allows;
/// the many-waiters section asks for what it needs, and says so when the limit is lower.
pub fn start_redis(exe: &Path, dir: &Path, maxclients: usize) -> Result<(Server, u16)> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        let args: Vec<String> = [
            "--maxclients",
            &maxclients.to_string(),
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            &dir.display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let server = Server::start(exe, dir, "redis-server", &args)?;
        let ready = wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
            Redis::connect(port)
                .and_then(|mut redis| redis.call(&["PING"]))
                .is_ok_and(|reply| reply == "PONG")
        });
        if ready {
            return Ok((server, port));
        }
        last = server.log_tail();
    }
    Err(format!("redis-server did not become ready:\n{last}"))
}

pub fn start_etcd(exe: &Path, dir: &Path) -> Result<(Server, u16)> {
    let mut last = String::new();
    for attempt in 0..3 {
        let (client, peer) = (free_port()?, free_port()?);
        if client == peer {
            continue;
        }
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let data = dir.join(format!("etcd-data-{attempt}"));
        let args: Vec<String> = vec![
            "--name".into(),
            "default".into(),
            "--data-dir".into(),
            data.display().to_string(),
            "--listen-client-urls".into(),
            client_url.clone(),
            "--advertise-client-urls".into(),
            client_url,
            "--listen-peer-urls".into(),
            peer_url.clone(),
            "--initial-advertise-peer-urls".into(),
            peer_url.clone(),
            "--initial-cluster".into(),
            format!("default={peer_url}"),
        ];
        let server = Server::start(exe, dir, "etcd", &args)?;
        let ready = wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
            http_get(client, "/health").is_ok_and(|body| body.contains("\"health\":\"true\""))
        });
        if ready {
            return Ok((server, client));
        }
        last = server.log_tail();
    }
    Err(format!("etcd did not become ready:\n{last}"))
}

/// A plain HTTP/1.0 GET on loopback; returns the body.
pub fn http_get(port: u16, path: &str) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&loopback(port), Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.take(64 << 20).read_to_string(&mut response)?;
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
            Ok(body.to_string())
        }
        _ => Err(io::Error::other("unexpected HTTP response")),
    }
}
