//! The Redis server fixture: a private `redis-server` per test on a free loopback port, with
//! its own temp dir and a unix socket for direct inspection (which works the same in TLS
//! mode), ready once it answers PING, killed on drop. Faults a test can inject into the
//! server itself (kill, freeze, restart empty) are here too.
//!
//! Which server: `REDLOCK_TEST_REDIS_SERVER`, when set, is the path of the server binary
//! every fixture here starts (Redis 6.2, a Valkey build: `scripts/test` runs part of the
//! suite once per server it tests); otherwise `redis-server` on `PATH`. A test may also
//! name the binary of one server in `ServerOptions::program` (Redlock over mixed servers).
//! The Sentinel and Cluster fixtures (`deployments`) always start `redis-server` on `PATH`.
//!
//! What this module does not own: reading what the server holds (see `inspect`).

use std::env;
use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use super::{require, signal, TempDir, TlsFiles, Wrapper};

/// A loopback port that was free a moment ago: bind port 0, read the port, drop the listener.
pub fn free_port() -> u16 {
    // Never the same port twice in one test run: a test that stops a server expects its
    // port to stay dead, and another test's server must not come up on it.
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut last_err = None;
    for _ in 0..50 {
        match TcpListener::bind("127.0.0.1:0") {
            Ok(l) => {
                let port = l.local_addr().unwrap().port();
                let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
                if !handed_out.contains(&port) {
                    handed_out.push(port);
                    return port;
                }
            }
            Err(e) => {
                last_err = Some(e);
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
    panic!("cannot bind a fresh loopback port: {last_err:?}");
}

/// Which flavour of server to start.
#[derive(Clone, Default)]
pub struct ServerOptions {
    pub password: Option<String>,
    pub tls: Option<TlsFiles>,
    /// The server binary; `None` for the default (see the module doc).
    pub program: Option<PathBuf>,
    /// More arguments for the server, after the fixture's own (`--rename-command`, which
    /// `CONFIG SET` cannot change).
    pub args: Vec<String>,
}

/// A private `redis-server` on a free loopback port, with its own temp dir and a unix socket
/// for direct inspection (which works the same in TLS mode). Killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    opts: ServerOptions,
}

/// The variable naming the server binary the fixtures start instead of `redis-server`.
pub const SERVER_VAR: &str = "REDLOCK_TEST_REDIS_SERVER";

/// The server binary a test starts by default: `$REDLOCK_TEST_REDIS_SERVER`, else
/// `redis-server` on `PATH`.
pub fn default_server_program() -> PathBuf {
    if let Some(path) = env::var_os(SERVER_VAR).filter(|path| !path.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{SERVER_VAR}={} is not a file: it names the server binary the tests start",
            path.display()
        );
        return path;
    }
    require(
        "redis-server",
        "the integration tests need a real Redis server",
        "`apt-get install -y redis-server` on Debian/Ubuntu, `brew install redis` on macOS",
    )
}

impl RedisServer {
    /// A plain server without password or TLS.
    pub fn start() -> RedisServer {
        RedisServer::start_with(ServerOptions::default())
    }

    pub fn start_with_password(password: &str) -> RedisServer {
        RedisServer::start_with(ServerOptions {
            password: Some(password.to_string()),
            ..ServerOptions::default()
        })
    }

    pub fn start_with(opts: ServerOptions) -> RedisServer {
        let mut dir = TempDir::new("redis");
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut server = RedisServer {
                child: None,
                port,
                dir,
                opts: opts.clone(),
            };
            match server.launch() {
                Ok(()) => return server,
                Err(e) => {
                    last = e;
                    server.kill();
                    // Take the directory back for the next attempt.
                    dir = std::mem::replace(&mut server.dir, TempDir::new("redis"));
                }
            }
        }
        panic!("redis-server did not start after 5 attempts: {last}");
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// Starts the process on `self.port` and waits until it answers PING.
    fn launch(&mut self) -> Result<(), String> {
        let _ = fs::remove_file(self.socket());
        let program = (self.opts.program.clone()).unwrap_or_else(default_server_program);
        let mut cmd = Command::new(&program);
        cmd.arg("--bind").arg("127.0.0.1");
        match &self.opts.tls {
            None => {
                cmd.arg("--port").arg(self.port.to_string());
            }
            Some(tls) => {
                cmd.args(["--port", "0", "--tls-port"])
                    .arg(self.port.to_string())
                    .arg("--tls-cert-file")
                    .arg(&tls.cert)
                    .arg("--tls-key-file")
                    .arg(&tls.key)
                    .arg("--tls-ca-cert-file")
                    .arg(&tls.ca)
                    .args(["--tls-auth-clients", "no"]);
            }
        }
        cmd.arg("--unixsocket")
            .arg(self.socket())
            .args(["--unixsocketperm", "700"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.dir.join("redis.log"));
        if let Some(pw) = &self.opts.password {
            cmd.arg("--requirepass").arg(pw);
        }
        cmd.args(&self.opts.args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", program.display()))?;
        self.child = Some(child);

        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                return Err(format!(
                    "redis-server exited with {status} on port {}; log:\n{}",
                    self.port,
                    self.log()
                ));
            }
            if self.try_ping() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "redis-server on port {} not ready after 10s; log:\n{}",
                    self.port,
                    self.log()
                ));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn try_ping(&self) -> bool {
        if !self.socket().exists() {
            return false;
        }
        let Ok(mut con) = self.try_connection() else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut con).is_ok()
    }

    fn inspect_url(&self) -> String {
        let mut url = format!("redis+unix://{}", self.socket().display());
        if let Some(pw) = &self.opts.password {
            url.push_str(&format!("?pass={pw}"));
        }
        url
    }

    fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.inspect_url())?;
        let con = client.get_connection_with_timeout(Duration::from_secs(5))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        con.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(con)
    }

    /// A direct connection (over the unix socket, authenticated) for inspecting state.
    #[track_caller]
    pub fn connection(&self) -> redis::Connection {
        self.try_connection()
            .unwrap_or_else(|e| panic!("connecting to test redis on port {}: {e}", self.port))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL the wrapper should use: `redis://` or `rediss://127.0.0.1:PORT`, with the
    /// password if the server has one.
    pub fn url(&self) -> String {
        let scheme = if self.opts.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        match &self.opts.password {
            Some(pw) => format!("{scheme}://:{pw}@127.0.0.1:{}", self.port),
            None => format!("{scheme}://127.0.0.1:{}", self.port),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("server not running").id() as i32
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server with SIGKILL (its data is gone: no persistence).
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Freezes the server with SIGSTOP: connections hang instead of failing.
    pub fn freeze(&self) {
        signal(self.pid(), libc::SIGSTOP);
    }

    /// Resumes a frozen server.
    pub fn thaw(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// Starts a stopped server again on the same port (empty, as there is no persistence).
    pub fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        for _ in 0..20 {
            match self.launch() {
                Ok(()) => return,
                Err(e) => {
                    last = e;
                    self.kill();
                    thread::sleep(Duration::from_millis(100));
                }
            }
        }
        panic!("redis-server did not restart on port {}: {last}", self.port);
    }

    /// A wrapper command already pointed at this server.
    pub fn cmd(&self) -> Wrapper {
        Wrapper::new(&self.url())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
