//! Test fixtures: a private `redis-server` per test, a builder that runs the `redlock-run`
//! binary against it with a hard time limit, and small helpers for waiting on files, pids and
//! Redis state. Tests never skip: a missing `redis-server` or `openssl` is a hard failure with
//! an install hint, so a green run always means the suite really ran.
//!
//! What this module does not own: any knowledge of how the implementation talks to Redis
//! beyond the documented contract (key = prefix + key, value starts with the token).

#![allow(dead_code)] // Each test module uses a different subset of the helpers.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_redlock-run");

/// How long a single wrapper run may take before the test declares it hung.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// The default key prefix of the tool.
pub const PREFIX: &str = "redlock:";

// ---------------------------------------------------------------------------------------------
// Temporary directories

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("rlr-{tag}-{}-{n}-{nanos:x}", std::process::id()));
        fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("creating temp dir {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes an executable `/bin/sh` script and returns its path.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n"))
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// Reads a file to a string, trimmed; panics with the path if it cannot.
    #[track_caller]
    pub fn read(&self, name: &str) -> String {
        let path = self.join(name);
        match fs::read_to_string(&path) {
            Ok(s) => s.trim().to_string(),
            Err(e) => panic!("reading {}: {e}", path.display()),
        }
    }

    pub fn exists(&self, name: &str) -> bool {
        self.join(name).exists()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

// ---------------------------------------------------------------------------------------------
// Ports

/// A loopback port that was free a moment ago: bind port 0, read the port, drop the listener.
pub fn free_port() -> u16 {
    let mut last_err = None;
    for _ in 0..5 {
        match TcpListener::bind("127.0.0.1:0") {
            Ok(l) => return l.local_addr().unwrap().port(),
            Err(e) => {
                last_err = Some(e);
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
    panic!("cannot bind a loopback port: {last_err:?}");
}

// ---------------------------------------------------------------------------------------------
// Redis server fixture

/// Which flavour of server to start.
#[derive(Clone, Default)]
pub struct ServerOptions {
    pub password: Option<String>,
    pub tls: Option<TlsFiles>,
}

/// Certificate files for a TLS server, made by [`make_certs`].
#[derive(Clone)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A private `redis-server` on a free loopback port, with its own temp dir and a unix socket
/// for direct inspection (which works the same in TLS mode). Killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    opts: ServerOptions,
}

fn redis_server_path() -> PathBuf {
    if let Some(path) = which("redis-server") {
        return path;
    }
    panic!(
        "redis-server not found on PATH: the integration tests need a real Redis server.\n\
         Install it, e.g. `apt-get install -y redis-server` on Debian/Ubuntu, \
         `brew install redis` on macOS."
    );
}

/// Looks a program up on PATH.
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(prog))
        .find(|p| p.is_file())
}

impl RedisServer {
    /// A plain server without password or TLS.
    pub fn start() -> RedisServer {
        RedisServer::start_with(ServerOptions::default())
    }

    pub fn start_with_password(password: &str) -> RedisServer {
        RedisServer::start_with(ServerOptions {
            password: Some(password.to_string()),
            tls: None,
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

    fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// Starts the process on `self.port` and waits until it answers PING.
    fn launch(&mut self) -> Result<(), String> {
        let _ = fs::remove_file(self.socket());
        let mut cmd = Command::new(redis_server_path());
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
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawning redis-server: {e}"))?;
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

    // ---- inspection helpers

    /// The value stored at `key` (a full Redis key), if any.
    #[track_caller]
    pub fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("GET {key}: {e}"))
    }

    /// The value of the lock named `name` under the default prefix.
    #[track_caller]
    pub fn lock_value(&self, name: &str) -> Option<String> {
        self.get(&format!("{PREFIX}{name}"))
    }

    #[track_caller]
    pub fn exists(&self, key: &str) -> bool {
        let n: i64 = redis::cmd("EXISTS")
            .arg(key)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("EXISTS {key}: {e}"));
        n == 1
    }

    #[track_caller]
    pub fn pttl(&self, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("PTTL {key}: {e}"))
    }

    #[track_caller]
    pub fn set(&self, key: &str, value: &str) {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("SET {key}: {e}"));
    }

    #[track_caller]
    pub fn del(&self, key: &str) {
        let _: i64 = redis::cmd("DEL")
            .arg(key)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("DEL {key}: {e}"));
    }

    /// Sets one field of a hash (another application's data, as far as the tool knows).
    #[track_caller]
    pub fn hset(&self, key: &str, field: &str, value: &str) {
        let _: i64 = redis::cmd("HSET")
            .arg(key)
            .arg(field)
            .arg(value)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("HSET {key}: {e}"));
    }

    /// One field of a hash, if present.
    #[track_caller]
    pub fn hget(&self, key: &str, field: &str) -> Option<String> {
        redis::cmd("HGET")
            .arg(key)
            .arg(field)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("HGET {key}: {e}"))
    }

    /// The Redis type of `key` (`none` when it does not exist).
    #[track_caller]
    pub fn key_type(&self, key: &str) -> String {
        redis::cmd("TYPE")
            .arg(key)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("TYPE {key}: {e}"))
    }

    /// How many members a sorted set has (0 when it does not exist).
    #[track_caller]
    pub fn zcard(&self, key: &str) -> i64 {
        redis::cmd("ZCARD")
            .arg(key)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("ZCARD {key}: {e}"))
    }

    #[track_caller]
    /// How many keys the database holds, not counting fence counters (`{K}:fence`), which
    /// persist by design so that fences only grow.
    pub fn dbsize(&self) -> i64 {
        self.keys().len() as i64
    }

    #[track_caller]
    /// Every key but fence counters (see `dbsize`).
    pub fn keys(&self) -> Vec<String> {
        let all: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("KEYS: {e}"));
        all.into_iter()
            .filter(|key| !key.ends_with(":fence"))
            .collect()
    }

    #[track_caller]
    pub fn info(&self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("INFO {section}: {e}"))
    }

    /// Calls per command from `INFO commandstats`, e.g. `("set", 3)`.
    pub fn command_stats(&self) -> Vec<(String, u64)> {
        self.info("commandstats")
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("cmdstat_")?;
                let (name, fields) = rest.split_once(':')?;
                let calls = fields
                    .split(',')
                    .find_map(|f| f.strip_prefix("calls="))?
                    .parse()
                    .ok()?;
                Some((name.to_string(), calls))
            })
            .collect()
    }

    /// `CLIENT LIST` as one map of field -> value per client.
    pub fn clients(&self) -> Vec<Vec<(String, String)>> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut self.connection())
            .expect("CLIENT LIST");
        list.lines()
            .map(|line| {
                line.split(' ')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .collect()
    }

    /// Any command, for state the other helpers do not cover (hashes, lists).
    #[track_caller]
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut self.connection())
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Number of clients currently subscribed to a channel or pattern (pub/sub waiters).
    pub fn subscribed_clients(&self) -> usize {
        self.clients()
            .iter()
            .filter(|c| {
                c.iter().any(|(k, v)| {
                    (k == "sub" || k == "psub" || k == "ssub") && v.parse::<u64>().unwrap_or(0) > 0
                })
            })
            .count()
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

// ---------------------------------------------------------------------------------------------
// TLS certificates

fn openssl_path() -> PathBuf {
    which("openssl").unwrap_or_else(|| {
        panic!(
            "openssl not found on PATH: the TLS tests make their certificates with it.\n\
             Install it, e.g. `apt-get install -y openssl` on Debian/Ubuntu."
        )
    })
}

#[track_caller]
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new(openssl_path())
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA and a server certificate for 127.0.0.1 / localhost signed by it.
pub fn make_certs(dir: &Path) -> TlsFiles {
    fs::write(
        dir.join("ca.cnf"),
        "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = v3_ca\n\
         [dn]\nCN = redlock-run test CA\n\
         [v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n\
         subjectKeyIdentifier = hash\n",
    )
    .unwrap();
    fs::write(
        dir.join("server.cnf"),
        "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = localhost\n",
    )
    .unwrap();
    fs::write(
        dir.join("server.ext"),
        "subjectAltName = IP:127.0.0.1,DNS:localhost\nbasicConstraints = CA:FALSE\n\
         keyUsage = critical,digitalSignature,keyEncipherment\nextendedKeyUsage = serverAuth\n\
         authorityKeyIdentifier = keyid\nsubjectKeyIdentifier = hash\n",
    )
    .unwrap();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut ca_args = vec!["req", "-x509", "-nodes", "-days", "2", "-config", "ca.cnf"];
    ca_args.extend(ec);
    ca_args.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(dir, &ca_args);
    let mut csr_args = vec!["req", "-new", "-nodes", "-config", "server.cnf"];
    csr_args.extend(ec);
    csr_args.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(dir, &csr_args);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
    );
    // redis-server reads the key file; make sure it can whatever openssl's umask did.
    fs::set_permissions(dir.join("server.key"), fs::Permissions::from_mode(0o600)).unwrap();
    TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    }
}

// ---------------------------------------------------------------------------------------------
// The wrapper command builder

/// `redlock-run` with a clean environment: every inherited `REDLOCK_*` and `SSL_CERT_*`
/// variable removed, `REDLOCK_REDIS` pointed at the test server.
pub struct Wrapper {
    cmd: Command,
    timeout: Duration,
    args: Vec<OsString>,
}

impl Wrapper {
    pub fn new(url: &str) -> Wrapper {
        Wrapper::program(BIN, url)
    }

    /// `/bin/sh -c SCRIPT` in the wrapper's clean environment: for tests whose caller must
    /// set something up (ignore a signal) before it `exec`s redlock-run.
    pub fn via_shell(url: &str, script: &str) -> Wrapper {
        Wrapper::program("/bin/sh", url).arg("-c").arg(script)
    }

    fn program(program: &str, url: &str) -> Wrapper {
        let mut cmd = Command::new(program);
        for (name, _) in std::env::vars_os() {
            let s = name.to_string_lossy();
            if s.starts_with("REDLOCK_") || s.starts_with("SSL_CERT_") {
                cmd.env_remove(&name);
            }
        }
        cmd.env("REDLOCK_REDIS", url);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Wrapper {
            cmd,
            timeout: RUN_TIMEOUT,
            args: Vec::new(),
        }
    }

    /// A wrapper with no Redis URL in its environment at all (the test passes `-r`).
    pub fn bare() -> Wrapper {
        let mut w = Wrapper::new("");
        w.cmd.env_remove("REDLOCK_REDIS");
        w
    }

    pub fn arg<S: AsRef<OsStr>>(mut self, arg: S) -> Wrapper {
        self.args.push(arg.as_ref().to_os_string());
        self.cmd.arg(arg);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Wrapper
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self = self.arg(a);
        }
        self
    }

    pub fn env<K: AsRef<OsStr>, V: AsRef<OsStr>>(mut self, k: K, v: V) -> Wrapper {
        self.cmd.env(k, v);
        self
    }

    pub fn env_remove<K: AsRef<OsStr>>(mut self, k: K) -> Wrapper {
        self.cmd.env_remove(k);
        self
    }

    pub fn current_dir<P: AsRef<Path>>(mut self, dir: P) -> Wrapper {
        self.cmd.current_dir(dir);
        self
    }

    pub fn timeout(mut self, t: Duration) -> Wrapper {
        self.timeout = t;
        self
    }

    /// Starts the wrapper; output is collected in the background.
    #[track_caller]
    pub fn spawn(mut self) -> Running {
        let description = format!("redlock-run {:?}", self.args);
        let mut child = self
            .cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {BIN}: {e}"));
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        Running {
            child,
            started: Instant::now(),
            stdout,
            stderr,
            timeout: self.timeout,
            description,
        }
    }

    /// Runs the wrapper to completion (killed and failing the test after the time limit).
    #[track_caller]
    pub fn run(self) -> Output {
        self.spawn().wait()
    }
}

/// A pipe being read into a buffer by a background thread.
struct Collector {
    buf: Arc<Mutex<Vec<u8>>>,
    done: Arc<Mutex<bool>>,
}

fn collect<R: Read + Send + 'static>(mut r: R) -> Collector {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(Mutex::new(false));
    let (b, d) = (buf.clone(), done.clone());
    thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        loop {
            match r.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => b.lock().unwrap().extend_from_slice(&chunk[..n]),
            }
        }
        *d.lock().unwrap() = true;
    });
    Collector { buf, done }
}

impl Collector {
    /// What was read so far, after giving the writer side up to `grace` to close: a
    /// background grandchild may hold the pipe open forever, and that must not hang a test.
    fn take(&self, grace: Duration) -> Vec<u8> {
        let deadline = Instant::now() + grace;
        while !*self.done.lock().unwrap() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        self.buf.lock().unwrap().clone()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.buf.lock().unwrap().clone()
    }
}

/// A running wrapper.
pub struct Running {
    child: Child,
    started: Instant,
    stdout: Collector,
    stderr: Collector,
    timeout: Duration,
    description: String,
}

/// The result of a finished wrapper.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    /// From spawn to exit.
    pub elapsed: Duration,
}

impl Output {
    /// The exit code; fails the test if the wrapper itself died of a signal.
    #[track_caller]
    pub fn code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        match self.status.code() {
            Some(c) => c,
            None => panic!(
                "redlock-run died of signal {:?} instead of exiting\nstderr:\n{}",
                self.status.signal(),
                self.stderr
            ),
        }
    }

    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Asserts the exit code, printing stdout and stderr on mismatch.
    #[track_caller]
    pub fn assert_code(&self, expected: i32) -> &Output {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            self.status.code(),
            Some(expected),
            "expected exit code {expected}, got {:?} (signal {:?}) after {:?}\n\
             --- stdout:\n{}\n--- stderr:\n{}",
            self.status.code(),
            self.status.signal(),
            self.elapsed,
            self.stdout_str(),
            self.stderr
        );
        self
    }

    #[track_caller]
    pub fn assert_stderr_contains(&self, needle: &str) -> &Output {
        assert!(
            self.stderr.to_lowercase().contains(&needle.to_lowercase()),
            "stderr does not mention {needle:?}:\n{}",
            self.stderr
        );
        self
    }

    #[track_caller]
    pub fn assert_stderr_lacks(&self, needle: &str) -> &Output {
        assert!(
            !self.stderr.to_lowercase().contains(&needle.to_lowercase()),
            "stderr unexpectedly mentions {needle:?}:\n{}",
            self.stderr
        );
        self
    }

    /// Every line redlock-run writes starts with `redlock-run:` (stderr carries nothing else
    /// in these tests, whose commands write to stderr only when told to).
    #[track_caller]
    pub fn assert_stderr_prefixed(&self) -> &Output {
        for line in self.stderr.lines() {
            assert!(
                line.starts_with("redlock-run:"),
                "stderr line without the `redlock-run:` prefix: {line:?}\nfull stderr:\n{}",
                self.stderr
            );
        }
        self
    }

    /// Asserts that neither stdout nor stderr contains `secret`.
    #[track_caller]
    pub fn assert_not_leaked(&self, secret: &str) -> &Output {
        assert!(
            !self.stderr.contains(secret) && !self.stdout_str().contains(secret),
            "secret {secret:?} leaked\n--- stdout:\n{}\n--- stderr:\n{}",
            self.stdout_str(),
            self.stderr
        );
        self
    }
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    /// Sends a signal to the wrapper process itself (as `kill -SIG pid` would).
    pub fn signal(&self, sig: i32) {
        signal(self.pid(), sig);
    }

    /// Whether the wrapper has exited (without reaping details).
    pub fn has_exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Waits for a file the command creates; fails the test with the wrapper's output if
    /// the wrapper exits first or the time runs out.
    #[track_caller]
    pub fn wait_for_file(&mut self, path: &Path, limit: Duration) {
        let start = Instant::now();
        while !path.exists() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited with {status} before {} appeared\n--- stdout:\n{}\n--- stderr:\n{}",
                    self.description,
                    path.display(),
                    String::from_utf8_lossy(&self.stdout.take(Duration::from_secs(1))),
                    String::from_utf8_lossy(&self.stderr.take(Duration::from_secs(1))),
                );
            }
            if start.elapsed() > limit {
                panic!(
                    "timed out after {limit:?} waiting for {} while {} runs\n--- stderr so far:\n{}",
                    path.display(),
                    self.description,
                    self.stderr_so_far()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Reads a pid the command writes with `echo $$ > file`, failing with the wrapper's
    /// output if it exits first.
    #[track_caller]
    pub fn read_pid(&mut self, path: &Path) -> i32 {
        self.wait_for_file(path, Duration::from_secs(15));
        read_pid(path)
    }

    /// stderr so far.
    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stderr.snapshot()).into_owned()
    }

    /// Waits for exit, within this wrapper's time limit.
    #[track_caller]
    pub fn wait(self) -> Output {
        let limit = self.timeout;
        self.wait_within(limit)
    }

    /// Waits for exit for at most `limit`; on expiry kills everything and fails the test.
    #[track_caller]
    pub fn wait_within(mut self, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let elapsed = self.started.elapsed();
                return Output {
                    status,
                    stdout: self.stdout.take(Duration::from_secs(2)),
                    stderr: String::from_utf8_lossy(&self.stderr.take(Duration::from_secs(2)))
                        .into_owned(),
                    elapsed,
                };
            }
            if Instant::now() > deadline {
                let elapsed = self.started.elapsed();
                self.kill_all();
                panic!(
                    "{} still running after {elapsed:?} (limit {limit:?}); killed\n\
                     --- stdout:\n{}\n--- stderr:\n{}",
                    self.description,
                    String::from_utf8_lossy(&self.stdout.snapshot()),
                    String::from_utf8_lossy(&self.stderr.snapshot()),
                );
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILLs the wrapper and the process groups of its children (the command runs in its
    /// own group), so a failed test leaves nothing behind.
    fn kill_all(&mut self) {
        let pid = self.pid();
        if self.child.try_wait().ok().flatten().is_none() {
            for kid in children_of(pid) {
                // SAFETY: plain syscalls on pids we spawned (or their children); errors ignored.
                unsafe {
                    libc::killpg(kid, libc::SIGKILL);
                    libc::kill(kid, libc::SIGKILL);
                }
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill_all();
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// Sends `sig` to `pid`, failing the test if that is impossible.
#[track_caller]
pub fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// Fields of `/proc/PID/stat` after the command name: state, ppid, pgrp, ...
fn proc_stat(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Whether `pid` is a live process (zombies count as dead: they have exited, and in a
/// container nobody may reap them).
pub fn pid_alive(pid: i32) -> bool {
    match proc_stat(pid) {
        Some(f) => !matches!(f.first().map(String::as_str), Some("Z" | "X" | "x")),
        None => false,
    }
}

fn all_pids() -> Vec<i32> {
    fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Direct children of `pid`.
pub fn children_of(pid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&p| {
            proc_stat(p).and_then(|f| f.get(1).and_then(|s| s.parse::<i32>().ok())) == Some(pid)
        })
        .collect()
}

/// Live (non-zombie) processes in process group `pgid`.
pub fn live_in_group(pgid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&p| {
            proc_stat(p).is_some_and(|f| {
                f.get(2).and_then(|s| s.parse::<i32>().ok()) == Some(pgid)
                    && !matches!(f.first().map(String::as_str), Some("Z" | "X" | "x"))
            })
        })
        .collect()
}

/// The process group of `pid`.
pub fn pgid_of(pid: i32) -> Option<i32> {
    proc_stat(pid)?.get(2)?.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// Load

/// Tests that load the machine (dozens of wrappers at once) hold this exclusively; tests whose
/// assertions rest on margins of tens of milliseconds hold it shared. The two kinds then
/// never run at the same time; timing-sensitive tests still run in parallel with each other,
/// and every test with those that take neither.
static LOAD: RwLock<()> = RwLock::new(());

/// Taken by a test that loads the machine, for as long as it does.
pub fn loading_the_machine() -> RwLockWriteGuard<'static, ()> {
    LOAD.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Taken by a test whose timing margins a loaded machine could eat.
pub fn timing_sensitive() -> RwLockReadGuard<'static, ()> {
    LOAD.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Waiting

/// Polls `cond` every 10ms until it holds; fails the test after `limit`. Returns how long it
/// took.
#[track_caller]
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if cond() {
            return start.elapsed();
        }
        if start.elapsed() > limit {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a file to appear.
#[track_caller]
pub fn wait_for_file(path: &Path, limit: Duration) -> Duration {
    wait_until(limit, &format!("file {}", path.display()), || path.exists())
}

/// Waits for a file to appear and have non-empty content ending in a newline (a complete
/// `echo` to it), then returns that content trimmed.
#[track_caller]
pub fn wait_for_line(path: &Path, limit: Duration) -> String {
    let mut content = String::new();
    wait_until(limit, &format!("a line in {}", path.display()), || {
        content = fs::read_to_string(path).unwrap_or_default();
        content.ends_with('\n')
    });
    content.trim().to_string()
}

/// Waits for `pid` to be gone (or a zombie).
#[track_caller]
pub fn wait_for_death(pid: i32, limit: Duration) -> Duration {
    wait_until(limit, &format!("process {pid} to die"), || !pid_alive(pid))
}

/// Reads a pid written by a script with `echo $$ > file`.
#[track_caller]
pub fn read_pid(path: &Path) -> i32 {
    let s = wait_for_line(path, Duration::from_secs(10));
    s.parse()
        .unwrap_or_else(|_| panic!("{} holds {s:?}, not a pid", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Lock values

/// The token at the start of a stored lock value: `{"token":"<uuid>", ...}`.
#[track_caller]
pub fn token_of(value: &str) -> String {
    let rest = value
        .strip_prefix("{\"token\":\"")
        .unwrap_or_else(|| panic!("lock value does not start with {{\"token\":\": {value:?}"));
    let end = rest
        .find('"')
        .unwrap_or_else(|| panic!("unterminated token in {value:?}"));
    rest[..end].to_string()
}

/// Asserts `s` looks like a version-4 UUID (8-4-4-4-12 hex, version nibble 4).
#[track_caller]
pub fn assert_uuid_v4(s: &str) {
    let groups: Vec<&str> = s.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    assert_eq!(lens, [8, 4, 4, 4, 12], "not a UUID: {s:?}");
    assert!(
        s.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
        "not a UUID: {s:?}"
    );
    assert!(groups[2].starts_with('4'), "not a version-4 UUID: {s:?}");
}

/// A script body that signals readiness and then waits for `go` to appear before exiting
/// with `code`: a job whose end the test controls.
pub fn hold_until(dir: &TempDir, ready: &str, go: &str, code: i32) -> String {
    format!(
        "touch '{}'\nwhile [ ! -e '{}' ]; do sleep 0.01; done\nexit {code}",
        dir.join(ready).display(),
        dir.join(go).display()
    )
}

/// The holder started by [`start_holder`] on lock `name` still has its value `held` and is
/// the only key; then it is let go, exits 0, and leaves nothing behind.
#[track_caller]
pub fn holder_kept_the_lock_alone(
    server: &RedisServer,
    dir: &TempDir,
    holder: Running,
    name: &str,
    held: String,
) {
    assert_eq!(server.lock_value(name), Some(held), "holder's key changed");
    assert_eq!(server.dbsize(), 1, "keys: {:?}", server.keys());
    release(dir);
    holder.wait().assert_code(0);
    assert_eq!(server.dbsize(), 0);
}

/// A command that ignores SIGTERM (noting each in `terms`) and writes its pid to `pid`.
pub fn stubborn_script(dir: &TempDir) -> PathBuf {
    dir.script(
        "stubborn",
        &format!(
            "trap 'echo TERM >> \"{log}\"' TERM\necho $$ > '{pid}'\nwhile :; do sleep 0.05; done",
            log = dir.join("terms").display(),
            pid = dir.join("pid").display()
        ),
    )
}

/// Starts a wrapper that holds lock `key` until `go` is created in `dir`; returns once the
/// command runs (so the lock is held).
#[track_caller]
pub fn start_holder(server: &RedisServer, dir: &TempDir, key: &str, extra: &[&str]) -> Running {
    let tag = format!("holder-{key}");
    let script = dir.script(&tag, &hold_until(dir, &format!("{tag}.ready"), "go", 0));
    let mut holder = server
        .cmd()
        .args(["-k", key])
        .args(extra)
        .arg("--")
        .arg(script)
        .spawn();
    holder.wait_for_file(&dir.join(&format!("{tag}.ready")), Duration::from_secs(15));
    holder
}

/// Creates the `go` file that [`start_holder`] waits for.
pub fn release(dir: &TempDir) {
    fs::write(dir.join("go"), "").unwrap();
}

/// Runs `workers` threads at once, each running `wrapper()` to completion `rounds` times
/// and asserting exit 0 every time.
pub fn run_in_parallel(
    workers: usize,
    rounds: usize,
    wrapper: impl Fn() -> Wrapper + Send + Sync + 'static,
) {
    let wrapper = std::sync::Arc::new(wrapper);
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let wrapper = std::sync::Arc::clone(&wrapper);
            thread::spawn(move || {
                for _ in 0..rounds {
                    wrapper()
                        .timeout(Duration::from_secs(120))
                        .run()
                        .assert_code(0);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a worker thread failed");
    }
}

/// The two commands of a hand-over test, in `dir`: a holder that touches `ready`, holds
/// until `go` appears (see [`release`]) and notes when it ends in `holder_end`; a waiter
/// that notes when it starts in `waiter_start`. Returns (holder, waiter).
pub fn handover_scripts(dir: &TempDir) -> (PathBuf, PathBuf) {
    let holder = dir.script(
        "holder",
        &format!(
            "touch '{ready}'\nwhile [ ! -e '{go}' ]; do sleep 0.01; done\ndate +%s.%N > '{end}'",
            ready = dir.join("ready").display(),
            go = dir.join("go").display(),
            end = dir.join("holder_end").display()
        ),
    );
    let waiter = dir.script(
        "waiter",
        &format!("date +%s.%N > '{}'", dir.join("waiter_start").display()),
    );
    (holder, waiter)
}

/// How long after the holder of [`handover_scripts`] ended the waiter started.
#[track_caller]
pub fn handover_delay(dir: &TempDir) -> Duration {
    let end = parse_epoch(&dir.read("holder_end"));
    let start = parse_epoch(&dir.read("waiter_start"));
    Duration::from_secs_f64((start - end).max(0.0))
}

/// Seconds since the epoch as printed by `date +%s.%N` in a script.
#[track_caller]
pub fn parse_epoch(s: &str) -> f64 {
    s.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a `date +%s.%N` timestamp: {s:?}"))
}
