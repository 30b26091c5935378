//! `cargo bench --bench compare` (the documented entry point is `scripts/bench`): measures
//! redlock-run against flock(1) and `etcdctl lock` in one run on one machine, and prints
//! every figure next to the target set for redlock-run.
//!
//! It builds the release binary itself (`cargo build --release`), starts a throwaway
//! redis-server and etcd on free loopback ports in a temporary directory, and tears both
//! down on exit, on error and on panic (Drop guards; each server also runs under a small
//! guard process that kills it when this harness dies, however it dies). Every loop is
//! bounded in count and time, and every process it starts is killed if it outlives its
//! time limit.
//!
//! The commands run under the locks are this same executable in a helper mode
//! (`compare __compare_helper MODE ...`): it writes a CLOCK_REALTIME nanosecond stamp,
//! increments a counter file, or holds for a while. No `sh -c` and no `date` fork, and the
//! same helper for every tool, so the tools are compared on equal terms.
//!
//! Standard library only: JSON, RESP and HTTP are written by hand. A number that misses its
//! target is reported, never turned into a failing exit status; the exit status is non-zero
//! only when the harness itself could not run.

use std::collections::{BTreeMap, HashSet};
use std::env;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard, Once};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type Result<T> = std::result::Result<T, String>;

/// First argument that turns this executable into the tiny command run under the locks.
const HELPER: &str = "__compare_helper";

/// What the helper command is, as printed in the report and the JSON.
const STAMP_NOTE: &str = "commands under the lock are this bench executable in helper mode \
     (writes a CLOCK_REALTIME ns stamp or increments a counter file, then exits); \
     no sh -c, no date fork; the same command for every tool";

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(HELPER) {
        std::process::exit(helper(&args[1..]));
    }
    let opts = match Opts::parse(&args) {
        Ok(Some(opts)) => opts,
        Ok(None) => return,
        Err(err) => {
            eprintln!("compare: {err}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(err) = run(&opts) {
        eprintln!("compare: {err}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------
// Options

const USAGE: &str = "\
usage: scripts/bench [OPTIONS]      (or: cargo bench --bench compare -- [OPTIONS])

  --quick                 fewer samples and a shorter waiting window (a smoke run)
  --overhead-samples N    runs of each `TOOL -- true` and of bare `true` [200]
  --handoff-samples N     handoffs measured per tool, at least 30 [60]
  --hold-ms MS            how long the holder holds in each handoff sample [120]
  --clients N             contending clients [8]
  --cycles N              lock/run/unlock cycles per client [25]
  --waiters N             clients waiting behind a holder in the waiting test [8]
  --wait-window SECS      how long the waiting test counts server requests [30]
  --target TRIPLE         build redlock-run for this target (cargo build --target), e.g.
                          x86_64-unknown-linux-musl; without it, the host build that
                          .cargo/config.toml sets up (static-pie on glibc)
  --redlock-bin PATH      bench this binary instead of building one
  --json PATH             where to write the JSON [TARGET_DIR/bench/compare.json]
  -h, --help              this text";

struct Opts {
    overhead_samples: usize,
    handoff_samples: usize,
    hold: Duration,
    clients: usize,
    cycles: usize,
    waiters: usize,
    wait_window: Duration,
    target: Option<String>,
    redlock_bin: Option<PathBuf>,
    json: Option<PathBuf>,
}

impl Opts {
    fn parse(args: &[String]) -> Result<Option<Opts>> {
        let mut opts = Opts {
            overhead_samples: 200,
            handoff_samples: 60,
            hold: Duration::from_millis(120),
            clients: 8,
            cycles: 25,
            waiters: 8,
            wait_window: Duration::from_secs(30),
            target: None,
            redlock_bin: None,
            json: None,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.as_str() {
                // cargo bench passes --bench to every bench target.
                "--bench" => {}
                "-h" | "--help" => {
                    println!("{USAGE}");
                    return Ok(None);
                }
                "--quick" => {
                    opts.overhead_samples = 50;
                    opts.handoff_samples = 30;
                    opts.wait_window = Duration::from_secs(10);
                }
                "--overhead-samples" => opts.overhead_samples = number(arg, &value(arg)?, 1)?,
                "--handoff-samples" => opts.handoff_samples = number(arg, &value(arg)?, 30)?,
                "--hold-ms" => {
                    opts.hold = Duration::from_millis(number(arg, &value(arg)?, 20)? as u64)
                }
                "--clients" => opts.clients = number(arg, &value(arg)?, 2)?,
                "--cycles" => opts.cycles = number(arg, &value(arg)?, 1)?,
                "--waiters" => opts.waiters = number(arg, &value(arg)?, 1)?,
                "--wait-window" => {
                    opts.wait_window = Duration::from_secs(number(arg, &value(arg)?, 1)? as u64)
                }
                "--target" => opts.target = Some(value(arg)?),
                "--redlock-bin" => opts.redlock_bin = Some(PathBuf::from(value(arg)?)),
                "--json" => opts.json = Some(PathBuf::from(value(arg)?)),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        // Keep the whole run bounded: these caps hold it well under five minutes.
        opts.overhead_samples = opts.overhead_samples.min(2000);
        opts.handoff_samples = opts.handoff_samples.min(500);
        opts.hold = opts.hold.min(Duration::from_secs(2));
        opts.clients = opts.clients.min(32);
        opts.cycles = opts.cycles.min(200);
        opts.waiters = opts.waiters.min(64);
        opts.wait_window = opts.wait_window.min(Duration::from_secs(120));
        Ok(Some(opts))
    }
}

fn number(name: &str, text: &str, min: usize) -> Result<usize> {
    match text.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!(
            "{name} wants a whole number >= {min}, not {text:?}"
        )),
    }
}

// ---------------------------------------------------------------------------------------
// Helper mode: the tiny commands run under the locks, and the server guard.

fn helper(args: &[String]) -> i32 {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let millis = |i: usize| Duration::from_millis(arg(i).parse().unwrap_or(0));
    let result = match arg(0) {
        // The waiter's command: stamp at start, exit.
        "stamp" => write_stamp(Path::new(arg(1))),
        // The holder's command: say it runs, hold, stamp just before exiting.
        "hold" => File::create(arg(1)).and_then(|_| {
            thread::sleep(millis(3));
            write_stamp(Path::new(arg(2)))
        }),
        // A holder that holds until told to stop (the file arg(2) appears), at most arg(3) ms.
        "hold-until" => File::create(arg(1)).map(|_| {
            let end = Instant::now() + millis(3);
            while !Path::new(arg(2)).exists() && Instant::now() < end {
                thread::sleep(Duration::from_millis(2));
            }
        }),
        "incr" => increment(Path::new(arg(1))),
        "guard" => return guard(&args[1..]),
        other => Err(io::Error::other(format!("unknown helper mode {other:?}"))),
    };
    match result {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("compare helper {}: {err}", arg(0));
            1
        }
    }
}

fn realtime_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos())
}

fn write_stamp(path: &Path) -> io::Result<()> {
    let now = realtime_ns();
    fs::write(path, now.to_string())
}

/// The read-modify-write that only mutual exclusion keeps correct. An empty or torn file
/// (another writer in the middle of its write) is an error, counted as a failed cycle.
fn increment(path: &Path) -> io::Result<()> {
    let text = fs::read_to_string(path)?;
    let count: u64 = text
        .trim()
        .parse()
        .map_err(|_| io::Error::other(format!("counter file holds {text:?}")))?;
    fs::write(path, (count + 1).to_string())
}

/// `guard DIR PROGRAM ARGS...`: runs a server and kills it as soon as its stdin (a pipe from
/// the harness) closes, which happens when the harness drops the server or dies in any way,
/// SIGKILL included. If the harness died, DIR (the harness's temporary directory) goes too.
fn guard(args: &[String]) -> i32 {
    let Some((dir, command)) = args.split_first() else {
        return 2;
    };
    let Some((program, args)) = command.split_first() else {
        return 2;
    };
    let harness = std::os::unix::process::parent_id();
    let mut server = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .spawn()
    {
        Ok(server) => server,
        Err(err) => {
            eprintln!("compare guard: cannot start {program}: {err}");
            return 127;
        }
    };
    let mut sink = [0u8; 64];
    let mut stdin = io::stdin().lock();
    while let Ok(n) = stdin.read(&mut sink) {
        if n == 0 {
            break;
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    if std::os::unix::process::parent_id() != harness {
        let _ = fs::remove_dir_all(dir);
    }
    0
}

// ---------------------------------------------------------------------------------------
// Bounded processes

static ARMED: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());
static KILLED: AtomicUsize = AtomicUsize::new(0);
static WATCHDOG: Once = Once::new();

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Kills (with `kill -KILL`, std has no kill by pid) any armed process past its deadline.
fn watchdog() {
    loop {
        thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        locked(&ARMED).retain(|&(pid, deadline)| {
            if now < deadline {
                return true;
            }
            eprintln!("compare: pid {pid} ran over its time limit; killing it");
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            KILLED.fetch_add(1, Ordering::Relaxed);
            false
        });
    }
}

/// A child process with a time limit; killed and reaped if dropped before `wait`.
struct Proc {
    child: Child,
    started: Instant,
    reaped: bool,
}

impl Proc {
    fn spawn(command: &mut Command, limit: Duration) -> Result<Proc> {
        WATCHDOG.call_once(|| {
            thread::spawn(watchdog);
        });
        let started = Instant::now();
        let child = command
            .spawn()
            .map_err(|err| format!("cannot start {:?}: {err}", command.get_program()))?;
        locked(&ARMED).push((child.id(), started + limit));
        Ok(Proc {
            child,
            started,
            reaped: false,
        })
    }

    /// Waits for the exit; returns the status and the time from spawn to exit.
    fn wait(&mut self) -> Result<(ExitStatus, Duration)> {
        let status = self.child.wait().map_err(|err| format!("wait: {err}"))?;
        let elapsed = self.started.elapsed();
        self.reaped = true;
        let pid = self.child.id();
        locked(&ARMED).retain(|&(armed, _)| armed != pid);
        Ok((status, elapsed))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.wait();
        }
    }
}

/// Runs a command to its end; returns whether it succeeded and how long it took.
fn timed(command: &mut Command, limit: Duration) -> Result<(bool, Duration)> {
    let (status, elapsed) = Proc::spawn(command, limit)?.wait()?;
    Ok((status.success(), elapsed))
}

fn wait_until(limit: Duration, step: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        thread::sleep(step);
    }
}

// ---------------------------------------------------------------------------------------
// Temporary directory and servers

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
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
struct Server {
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

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn start_redis(exe: &Path, dir: &Path) -> Result<(Server, u16)> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        let args: Vec<String> = [
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

fn start_etcd(exe: &Path, dir: &Path) -> Result<(Server, u16)> {
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
fn http_get(port: u16, path: &str) -> io::Result<String> {
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

/// A minimal RESP client for the harness's own look at Redis (PING, INFO, CLIENT LIST,
/// MONITOR).
struct Redis {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Redis {
    fn connect(port: u16) -> io::Result<Redis> {
        let stream = TcpStream::connect_timeout(&loopback(port), Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        stream.set_nodelay(true)?;
        Ok(Redis {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    fn send(&mut self, args: &[&str]) -> io::Result<()> {
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            let _ = write!(request, "${}\r\n{arg}\r\n", arg.len());
        }
        self.writer.write_all(request.as_bytes())
    }

    fn line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "redis closed"));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }

    fn reply(&mut self) -> io::Result<String> {
        let line = self.line()?;
        let (kind, rest) = line.split_at(line.len().min(1));
        match kind {
            "+" | ":" => Ok(rest.to_string()),
            "-" => Err(io::Error::other(format!("redis: {rest}"))),
            "$" => {
                let len: i64 = rest.parse().map_err(io::Error::other)?;
                if len < 0 {
                    return Ok(String::new());
                }
                let mut body = vec![0u8; len as usize + 2];
                self.reader.read_exact(&mut body)?;
                body.truncate(len as usize);
                Ok(String::from_utf8_lossy(&body).into_owned())
            }
            "*" => {
                let count: i64 = rest.parse().map_err(io::Error::other)?;
                let items = (0..count.max(0))
                    .map(|_| self.reply())
                    .collect::<io::Result<Vec<_>>>()?;
                Ok(items.join("\n"))
            }
            _ => Err(io::Error::other(format!("bad RESP line {line:?}"))),
        }
    }

    fn call(&mut self, args: &[&str]) -> io::Result<String> {
        self.send(args)?;
        self.reply()
    }

    fn local_addr(&self) -> String {
        self.writer
            .local_addr()
            .map(|addr| addr.to_string())
            .unwrap_or_default()
    }

    /// `INFO stats commandstats` as field -> value.
    fn info(&mut self) -> io::Result<BTreeMap<String, String>> {
        let text = self.call(&["INFO", "stats", "commandstats"])?;
        Ok(text
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(key, value)| (key.to_string(), value.trim().to_string()))
            .collect())
    }
}

// ---------------------------------------------------------------------------------------
// The tools

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tool {
    Redlock,
    Flock,
    Etcd,
}

const TOOLS: [Tool; 3] = [Tool::Redlock, Tool::Flock, Tool::Etcd];

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Redlock => "redlock-run",
            Tool::Flock => "flock",
            Tool::Etcd => "etcdctl",
        }
    }
}

/// Everything the phases need to start the tools.
struct Bench {
    exe: PathBuf,
    dir: PathBuf,
    redlock: PathBuf,
    redis_port: u16,
    /// None when etcd or etcdctl is missing or etcd would not start (column shows n/a).
    etcd_port: Option<u16>,
    etcd_missing: String,
    have_time: bool,
}

impl Bench {
    fn available(&self, tool: Tool) -> bool {
        tool != Tool::Etcd || self.etcd_port.is_some()
    }

    fn tools(&self) -> Vec<Tool> {
        TOOLS.into_iter().filter(|&t| self.available(t)).collect()
    }

    fn log(&self, tool: Tool) -> Stdio {
        let path = self.dir.join(format!("{}.log", tool.name()));
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_or_else(|_| Stdio::null(), Stdio::from)
    }

    fn log_tail(&self, tool: Tool) -> String {
        let text =
            fs::read_to_string(self.dir.join(format!("{}.log", tool.name()))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n    ")
    }

    /// The argv that runs `command` under `tool`'s lock named `key`, in each tool's plain
    /// documented form.
    fn argv(&self, tool: Tool, key: &str, command: &[OsString]) -> Vec<OsString> {
        let mut argv: Vec<OsString> = match tool {
            Tool::Redlock => vec![
                self.redlock.clone().into(),
                "-r".into(),
                format!("redis://127.0.0.1:{}", self.redis_port).into(),
                "-k".into(),
                key.into(),
                "--".into(),
            ],
            Tool::Flock => vec!["flock".into(), self.dir.join(format!("{key}.flock")).into()],
            Tool::Etcd => vec![
                "etcdctl".into(),
                format!("--endpoints=127.0.0.1:{}", self.etcd_port.unwrap_or(0)).into(),
                "lock".into(),
                key.into(),
                "--".into(),
            ],
        };
        argv.extend(command.iter().cloned());
        argv
    }

    fn command(&self, tool: Tool, key: &str, command: &[OsString]) -> Command {
        self.plain(tool, &self.argv(tool, key, command))
    }

    /// A Command for argv with the tool's log as stderr and stdout discarded.
    fn plain(&self, tool: Tool, argv: &[OsString]) -> Command {
        let mut command = Command::new(&argv[0]);
        if tool == Tool::Etcd {
            command.env("ETCDCTL_API", "3");
        }
        command
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log(tool));
        command
    }

    /// argv of the helper command: this executable in helper mode.
    fn helper(&self, args: &[&str]) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![self.exe.clone().into(), HELPER.into()];
        argv.extend(args.iter().map(OsString::from));
        argv
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

// ---------------------------------------------------------------------------------------
// Statistics

#[derive(Clone, Default)]
struct Samples {
    values: Vec<Duration>,
    failures: usize,
}

impl Samples {
    fn push(&mut self, ok: bool, value: Duration) {
        if ok {
            self.values.push(value);
        } else {
            self.failures += 1;
        }
    }

    /// Nearest-rank percentile (p in 0..=100); None without samples.
    fn pct(&self, p: f64) -> Option<Duration> {
        if self.values.is_empty() {
            return None;
        }
        let mut sorted = self.values.clone();
        sorted.sort();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
        Some(sorted[rank.min(sorted.len()) - 1])
    }

    fn p50(&self) -> Option<Duration> {
        self.pct(50.0)
    }

    fn json(&self) -> Json {
        let ms = |d: Option<Duration>| d.map_or(Json::Null, |d| Json::Num(millis(d)));
        Json::obj([
            ("samples", Json::Int(self.values.len() as i64)),
            ("failures", Json::Int(self.failures as i64)),
            ("min_ms", ms(self.pct(0.0))),
            ("p50_ms", ms(self.p50())),
            ("p90_ms", ms(self.pct(90.0))),
            ("p99_ms", ms(self.pct(99.0))),
            ("max_ms", ms(self.pct(100.0))),
        ])
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn fmt_ms(d: Duration) -> String {
    let ms = millis(d);
    if ms < 10.0 {
        format!("{ms:.3} ms")
    } else if ms < 100.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

// ---------------------------------------------------------------------------------------
// Hand-rolled JSON

#[derive(Clone)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn obj<const N: usize>(fields: [(&str, Json); N]) -> Json {
        Json::Obj(
            fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
    }

    fn str(text: impl Into<String>) -> Json {
        Json::Str(text.into())
    }

    fn opt_num(value: Option<f64>) -> Json {
        value.map_or(Json::Null, Json::Num)
    }

    fn write(&self, out: &mut String, indent: usize) {
        let pad = |n: usize| "  ".repeat(n);
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(n) => out.push_str(&n.to_string()),
            Json::Num(x) if x.is_finite() => {
                let _ = write!(out, "{}", (x * 1e6).round() / 1e6);
            }
            Json::Num(_) => out.push_str("null"),
            Json::Str(s) => {
                out.push('"');
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        '\n' => out.push_str("\\n"),
                        '\t' => out.push_str("\\t"),
                        c if (c as u32) < 0x20 => {
                            let _ = write!(out, "\\u{:04x}", c as u32);
                        }
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            Json::Arr(items) if items.is_empty() => out.push_str("[]"),
            Json::Arr(items) => {
                out.push_str("[\n");
                for (i, item) in items.iter().enumerate() {
                    out.push_str(&pad(indent + 1));
                    item.write(out, indent + 1);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                out.push_str(&pad(indent));
                out.push(']');
            }
            Json::Obj(fields) if fields.is_empty() => out.push_str("{}"),
            Json::Obj(fields) => {
                out.push_str("{\n");
                for (i, (key, value)) in fields.iter().enumerate() {
                    out.push_str(&pad(indent + 1));
                    Json::Str(key.clone()).write(out, indent + 1);
                    out.push_str(": ");
                    value.write(out, indent + 1);
                    out.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
                }
                out.push_str(&pad(indent));
                out.push('}');
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Results

#[derive(Default)]
struct Contended {
    elapsed: Duration,
    ok_cycles: usize,
    failed_cycles: usize,
    count: u64,
    expected: u64,
}

impl Contended {
    fn rate(&self) -> f64 {
        self.ok_cycles as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn correct(&self) -> bool {
        self.failed_cycles == 0 && self.count == self.expected
    }
}

/// Server requests made by waiting clients.
enum Waiting {
    Measured {
        per_waiter_per_s: f64,
        startup_per_waiter: f64,
        detail: Json,
        note: String,
    },
    NotApplicable(String),
}

#[derive(Default)]
struct Results {
    overhead: Option<Samples>,
    contended: Option<Contended>,
    handoff: Option<Samples>,
    handoff_negative: usize,
    /// The least time by which a handoff waiter was started before the holder let go.
    waiter_lead: Option<Duration>,
    waiting: Option<Waiting>,
    rss_kib: Option<u64>,
    version: Option<Samples>,
}

// ---------------------------------------------------------------------------------------
// The phases

fn phase(name: &str) {
    eprintln!("compare: {name}");
}

const RUN_LIMIT: Duration = Duration::from_secs(60);

/// `--version` (and the peers' equivalents) started from this process, with bare `true`
/// as the floor of what spawning anything costs here.
fn bench_versions(bench: &Bench, samples: usize, out: &mut BTreeMap<&'static str, Samples>) {
    phase("startup: --version");
    let mut argvs: Vec<(&'static str, Tool, Vec<OsString>)> = vec![
        ("true", Tool::Flock, os(&["true"])),
        (
            "redlock-run",
            Tool::Redlock,
            vec![bench.redlock.clone().into(), "--version".into()],
        ),
        ("flock", Tool::Flock, os(&["flock", "--version"])),
    ];
    if bench.available(Tool::Etcd) {
        argvs.push(("etcdctl", Tool::Etcd, os(&["etcdctl", "version"])));
    }
    for _ in 0..samples {
        for (name, tool, argv) in &argvs {
            let result = timed(&mut bench.plain(*tool, argv), RUN_LIMIT);
            let (ok, elapsed) = result.unwrap_or((false, Duration::ZERO));
            out.entry(name).or_default().push(ok, elapsed);
        }
    }
}

/// `TOOL -- true` against bare `true`, interleaved so that drift hits every tool alike.
fn bench_overhead(bench: &Bench, samples: usize) -> (Samples, BTreeMap<&'static str, Samples>) {
    phase("overhead: TOOL -- true vs true");
    let tools = bench.tools();
    let mut bare = Samples::default();
    let mut per_tool: BTreeMap<&'static str, Samples> = BTreeMap::new();
    let true_argv = os(&["true"]);
    for _ in 0..samples {
        let result = timed(&mut bench.plain(Tool::Flock, &true_argv), RUN_LIMIT);
        let (ok, elapsed) = result.unwrap_or((false, Duration::ZERO));
        bare.push(ok, elapsed);
        for &tool in &tools {
            let mut command = bench.command(tool, "overhead", &true_argv);
            let (ok, elapsed) = timed(&mut command, RUN_LIMIT).unwrap_or((false, Duration::ZERO));
            per_tool.entry(tool.name()).or_default().push(ok, elapsed);
        }
    }
    (bare, per_tool)
}

/// `clients` threads, each running `cycles` lock/increment/unlock cycles back to back.
fn bench_contended(bench: &Bench, tool: Tool, clients: usize, cycles: usize) -> Contended {
    phase(&format!(
        "contended: {} x {clients} clients x {cycles} cycles",
        tool.name()
    ));
    let counter = bench.path(&format!("counter-{}", tool.name()));
    if let Err(err) = fs::write(&counter, "0") {
        eprintln!("compare: {counter}: {err}");
        return Contended::default();
    }
    let key = "contended";
    let argv = bench.argv(tool, key, &bench.helper(&["incr", &counter]));
    let barrier = Arc::new(Barrier::new(clients + 1));
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let started = thread::scope(|scope| {
        for _ in 0..clients {
            let (barrier, ok, failed, argv) = (
                Arc::clone(&barrier),
                Arc::clone(&ok),
                Arc::clone(&failed),
                argv.clone(),
            );
            scope.spawn(move || {
                barrier.wait();
                for _ in 0..cycles {
                    let mut command = bench.plain(tool, &argv);
                    match timed(&mut command, RUN_LIMIT) {
                        Ok((true, _)) => ok.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    let elapsed = started.elapsed();
    let count = fs::read_to_string(&counter)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0);
    let result = Contended {
        elapsed,
        ok_cycles: ok.load(Ordering::Relaxed),
        failed_cycles: failed.load(Ordering::Relaxed),
        count,
        expected: (clients * cycles) as u64,
    };
    if result.failed_cycles > 0 {
        eprintln!(
            "compare: {} failed {} cycles; its log ends:\n    {}",
            tool.name(),
            result.failed_cycles,
            bench.log_tail(tool)
        );
    }
    result
}

/// One handoff: a holder holds for `hold`, stamps and exits; a waiter queued behind it
/// stamps as soon as its command starts. Returns waiter stamp - holder stamp, and how long
/// before the holder's stamp the waiter was started (it must be queued by then).
fn handoff_once(bench: &Bench, tool: Tool, hold: Duration, i: usize) -> Result<(i128, i128)> {
    let tag = format!("{}-{i}", tool.name());
    let (marker, holder_stamp, waiter_stamp) = (
        bench.path(&format!("held-{tag}")),
        bench.path(&format!("a-{tag}")),
        bench.path(&format!("b-{tag}")),
    );
    let hold_ms = hold.as_millis().to_string();
    let holder_cmd = bench.helper(&["hold", &marker, &holder_stamp, &hold_ms]);
    let mut holder = Proc::spawn(&mut bench.command(tool, "handoff", &holder_cmd), RUN_LIMIT)?;
    let held = wait_until(Duration::from_secs(10), Duration::from_millis(1), || {
        Path::new(&marker).exists()
    });
    if !held {
        return Err("the holder never got the lock".into());
    }
    let waiter_cmd = bench.helper(&["stamp", &waiter_stamp]);
    let mut waiter = Proc::spawn(&mut bench.command(tool, "handoff", &waiter_cmd), RUN_LIMIT)?;
    let waiter_spawned = realtime_ns() as i128;
    let (holder_status, _) = holder.wait()?;
    let (waiter_status, _) = waiter.wait()?;
    if !holder_status.success() || !waiter_status.success() {
        return Err(format!("exit {holder_status} / {waiter_status}"));
    }
    let read = |path: &str| -> Result<i128> {
        let text = fs::read_to_string(path).map_err(|err| format!("{path}: {err}"))?;
        text.trim().parse().map_err(|_| format!("{path}: {text:?}"))
    };
    let (released, started) = (read(&holder_stamp)?, read(&waiter_stamp)?);
    for path in [&marker, &holder_stamp, &waiter_stamp] {
        let _ = fs::remove_file(path);
    }
    Ok((started - released, released - waiter_spawned))
}

fn bench_handoff(bench: &Bench, samples: usize, hold: Duration, results: &mut [Results; 3]) {
    phase(&format!(
        "handoff: {samples} samples per tool, holder holds {}",
        fmt_ms(hold)
    ));
    let tools = bench.tools();
    for &tool in &tools {
        results[tool as usize].handoff = Some(Samples::default());
    }
    for i in 0..samples {
        for &tool in &tools {
            let result = &mut results[tool as usize];
            let samples = result.handoff.get_or_insert_with(Samples::default);
            match handoff_once(bench, tool, hold, i) {
                Ok((gap, lead)) if gap >= 0 => {
                    samples.push(true, Duration::from_nanos(gap as u64));
                    let lead = Duration::from_nanos(lead.max(0) as u64);
                    result.waiter_lead = Some(result.waiter_lead.map_or(lead, |l| l.min(lead)));
                }
                Ok(_) => {
                    // The waiter's command started before the holder's ended.
                    result.handoff_negative += 1;
                    samples.push(false, Duration::ZERO);
                }
                Err(err) => {
                    if samples.failures == 0 {
                        eprintln!("compare: {} handoff failed: {err}", tool.name());
                    }
                    samples.push(false, Duration::ZERO);
                }
            }
        }
    }
}

/// Time from starting redlock-run to its command starting, against one Redis and against
/// a Redlock quorum of `nodes.len()` (the one plus others), interleaved.
struct QuorumStart {
    nodes: usize,
    one: Samples,
    quorum: Samples,
}

fn bench_quorum(bench: &Bench, ports: &[u16], samples: usize) -> QuorumStart {
    phase(&format!(
        "redlock: time to command start, 1 node vs {} nodes, {samples} runs each",
        ports.len()
    ));
    let stamp = bench.path("quorum-stamp");
    let command = bench.helper(&["stamp", &stamp]);
    let argv = |ports: &[u16]| {
        let mut argv: Vec<OsString> = vec![bench.redlock.clone().into()];
        for port in ports {
            argv.push("-r".into());
            argv.push(format!("redis://127.0.0.1:{port}").into());
        }
        argv.extend(["-k".into(), "quorum".into(), "--".into()]);
        argv.extend(command.iter().cloned());
        argv
    };
    let (one_argv, quorum_argv) = (argv(&ports[..1]), argv(ports));
    let mut result = QuorumStart {
        nodes: ports.len(),
        one: Samples::default(),
        quorum: Samples::default(),
    };
    let once = |argv: &[OsString]| -> Option<Duration> {
        let _ = fs::remove_file(&stamp);
        let spawned = realtime_ns();
        let (ok, _) = timed(&mut bench.plain(Tool::Redlock, argv), RUN_LIMIT).ok()?;
        let started: u128 = fs::read_to_string(&stamp).ok()?.trim().parse().ok()?;
        (ok && started >= spawned).then(|| Duration::from_nanos((started - spawned) as u64))
    };
    for _ in 0..samples {
        for (argv, samples) in [
            (&one_argv, &mut result.one),
            (&quorum_argv, &mut result.quorum),
        ] {
            match once(argv) {
                Some(elapsed) => samples.push(true, elapsed),
                None => samples.push(false, Duration::ZERO),
            }
        }
    }
    result
}

/// Peak RSS (KiB) per /usr/bin/time's %M, i.e. wait4's ru_maxrss: the larger of the
/// wrapper and its reaped children, which here are `true` and `sleep` (about 1 MiB).
fn bench_rss(bench: &Bench, reps: usize) -> (BTreeMap<&'static str, u64>, u64) {
    phase("peak RSS");
    let mut peaks: BTreeMap<&'static str, u64> = BTreeMap::new();
    let timed_argv = |out: &str, argv: Vec<OsString>| -> Vec<OsString> {
        let mut full = os(&["/usr/bin/time", "-f", "%M", "-o", out]);
        full.extend(argv);
        full
    };
    let read_kib = |path: &str| -> Option<u64> {
        let text = fs::read_to_string(path).ok()?;
        text.lines().last()?.trim().parse().ok()
    };
    // The floor: a bare sleep, the biggest of the commands run under the wrappers.
    let floor_out = bench.path("rss-floor");
    let floor_argv = timed_argv(&floor_out, os(&["sleep", "0.05"]));
    let _ = timed(&mut bench.plain(Tool::Flock, &floor_argv), RUN_LIMIT);
    let floor = read_kib(&floor_out).unwrap_or(0);
    for tool in bench.tools() {
        for rep in 0..reps {
            let (holder_out, waiter_out) = (
                bench.path(&format!("rss-h-{}-{rep}", tool.name())),
                bench.path(&format!("rss-w-{}-{rep}", tool.name())),
            );
            let holder_argv =
                timed_argv(&holder_out, bench.argv(tool, "rss", &os(&["sleep", "0.3"])));
            let waiter_argv = timed_argv(&waiter_out, bench.argv(tool, "rss", &os(&["true"])));
            let Ok(mut holder) = Proc::spawn(&mut bench.plain(tool, &holder_argv), RUN_LIMIT)
            else {
                continue;
            };
            thread::sleep(Duration::from_millis(100));
            if let Ok(mut waiter) = Proc::spawn(&mut bench.plain(tool, &waiter_argv), RUN_LIMIT) {
                let _ = waiter.wait();
            }
            let _ = holder.wait();
            for out in [&holder_out, &waiter_out] {
                if let Some(kib) = read_kib(out) {
                    let peak = peaks.entry(tool.name()).or_insert(0);
                    *peak = (*peak).max(kib);
                }
            }
        }
    }
    (peaks, floor)
}

/// Starts a holder of `key` under `tool` that holds until `release` appears; waits until its
/// command runs.
fn start_holder(bench: &Bench, tool: Tool, key: &str) -> Result<(Proc, String)> {
    let (marker, release) = (
        bench.path(&format!("wait-held-{}", tool.name())),
        bench.path(&format!("wait-release-{}", tool.name())),
    );
    let command = bench.helper(&["hold-until", &marker, &release, "240000"]);
    let holder = Proc::spawn(
        &mut bench.command(tool, key, &command),
        Duration::from_secs(250),
    )?;
    let held = wait_until(Duration::from_secs(10), Duration::from_millis(5), || {
        Path::new(&marker).exists()
    });
    if !held {
        return Err(format!(
            "{}: the holder never got the lock:\n    {}",
            tool.name(),
            bench.log_tail(tool)
        ));
    }
    Ok((holder, release))
}

/// Releases the holder and waits for it and every waiter to finish; returns failures.
fn finish_waiting(
    bench: &Bench,
    tool: Tool,
    release: &str,
    holder: Proc,
    waiters: Vec<Proc>,
) -> usize {
    let _ = File::create(release);
    let mut failed = 0;
    for mut proc in std::iter::once(holder).chain(waiters) {
        match proc.wait() {
            Ok((status, _)) if status.success() => {}
            _ => failed += 1,
        }
    }
    if failed > 0 {
        eprintln!(
            "compare: {} waiting test: {failed} processes failed; log ends:\n    {}",
            tool.name(),
            bench.log_tail(tool)
        );
    }
    failed
}

const SETTLE: Duration = Duration::from_secs(2);

/// Redis: every request is attributed to its connection through MONITOR, so the holder's
/// renewals and the harness's own INFO calls are left out exactly; the INFO
/// total_commands_processed delta over the same window is reported beside it.
fn waiting_redis(bench: &Bench, waiters: usize, window: Duration) -> Result<Waiting> {
    let tool = Tool::Redlock;
    let port = bench.redis_port;
    let mut info = Redis::connect(port).map_err(|err| err.to_string())?;
    let mut monitor = Redis::connect(port).map_err(|err| err.to_string())?;
    monitor.writer.set_read_timeout(None).ok();
    let harness_addrs: HashSet<String> = [info.local_addr(), monitor.local_addr()].into();
    monitor
        .call(&["MONITOR"])
        .map_err(|err| format!("MONITOR: {err}"))?;
    let stopper = monitor.writer.try_clone().map_err(|err| err.to_string())?;
    let events: Arc<Mutex<Vec<(Instant, String, String)>>> = Arc::default();
    let sink = Arc::clone(&events);
    let reader = thread::spawn(move || {
        while let Ok(line) = monitor.line() {
            if let Some((addr, command)) = parse_monitor(&line) {
                locked(&sink).push((Instant::now(), addr, command));
            }
        }
    });
    let key = "waiting";
    let measured = (|| {
        let (holder, release) = start_holder(bench, tool, key)?;
        thread::sleep(Duration::from_millis(200));
        let clients = info
            .call(&["CLIENT", "LIST"])
            .map_err(|err| err.to_string())?;
        let holder_addrs: HashSet<String> = clients
            .lines()
            .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("addr=")))
            .map(str::to_string)
            .filter(|addr| !harness_addrs.contains(addr))
            .collect();
        let spawned = Instant::now();
        let mut procs = Vec::new();
        for _ in 0..waiters {
            let mut command = bench.command(tool, key, &os(&["true"]));
            procs.push(Proc::spawn(&mut command, window + Duration::from_secs(60))?);
        }
        thread::sleep(SETTLE);
        let before = info.info().map_err(|err| err.to_string())?;
        let start = Instant::now();
        thread::sleep(window);
        let end = Instant::now();
        let after = info.info().map_err(|err| err.to_string())?;
        let failed = finish_waiting(bench, tool, &release, holder, procs);
        Ok::<_, String>((holder_addrs, spawned, start, end, before, after, failed))
    })();
    let _ = stopper.shutdown(Shutdown::Both);
    let _ = reader.join();
    let (holder_addrs, spawned, start, end, before, after, failed) = measured?;
    let seconds = (end - start).as_secs_f64();
    let events = locked(&events);
    let mut startup = 0usize;
    let mut in_window: BTreeMap<String, usize> = BTreeMap::new();
    let mut holder_in_window: BTreeMap<String, usize> = BTreeMap::new();
    let mut lua_in_window = 0usize;
    for (at, addr, command) in events.iter() {
        if *at < spawned || harness_addrs.contains(addr) {
            continue;
        }
        let inside = *at >= start && *at < end;
        if addr == "lua" {
            lua_in_window += usize::from(inside);
        } else if holder_addrs.contains(addr) {
            if inside {
                *holder_in_window.entry(command.clone()).or_default() += 1;
            }
        } else if inside {
            *in_window.entry(command.clone()).or_default() += 1;
        } else if *at < start {
            startup += 1;
        }
    }
    let waiter_requests: usize = in_window.values().sum();
    let holder_requests: usize = holder_in_window.values().sum();
    let counts = |map: &BTreeMap<String, usize>| {
        Json::Obj(
            map.iter()
                .map(|(command, n)| (command.clone(), Json::Int(*n as i64)))
                .collect(),
        )
    };
    let total = |map: &BTreeMap<String, String>| -> i64 {
        map.get("total_commands_processed")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let info_delta = total(&after) - total(&before);
    let per_waiter_per_s = waiter_requests as f64 / waiters as f64 / seconds;
    Ok(Waiting::Measured {
        per_waiter_per_s,
        startup_per_waiter: startup as f64 / waiters as f64,
        note: format!(
            "redis: {waiter_requests} requests from {waiters} waiters in {seconds:.1} s \
             (MONITOR, per connection); cross-check: INFO total_commands_processed delta \
             {info_delta} - 1 INFO - {holder_requests} holder - {lua_in_window} Lua-internal \
             = {} ({}); holder and waiters at default --ttl 30s{}",
            info_delta - 1 - (holder_requests + lua_in_window) as i64,
            if info_delta - 1 - (holder_requests + lua_in_window) as i64 == waiter_requests as i64 {
                "agrees"
            } else {
                "DIFFERS"
            },
            if window < Duration::from_secs(30) {
                "; NOTE: a window under 30 s may end before a waiter's first retry"
            } else {
                ""
            }
        ),
        detail: Json::obj([
            (
                "method",
                Json::str("MONITOR attribution per connection; INFO delta beside"),
            ),
            ("waiters", Json::Int(waiters as i64)),
            ("window_s", Json::Num(seconds)),
            ("waiter_requests", Json::Int(waiter_requests as i64)),
            ("waiter_requests_by_command", counts(&in_window)),
            ("holder_requests", Json::Int(holder_requests as i64)),
            ("holder_requests_by_command", counts(&holder_in_window)),
            ("lua_internal_calls", Json::Int(lua_in_window as i64)),
            ("info_total_commands_processed_delta", Json::Int(info_delta)),
            ("startup_requests", Json::Int(startup as i64)),
            ("failed_processes", Json::Int(failed as i64)),
        ]),
    })
}

/// `[db addr] "command"` out of a MONITOR line; addr is "lua" for calls made by scripts.
fn parse_monitor(line: &str) -> Option<(String, String)> {
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let addr = line[open + 1..close].split_once(' ')?.1.to_string();
    let rest = &line[close + 1..];
    let q1 = rest.find('"')? + 1;
    let q2 = q1 + rest[q1..].find('"')?;
    Some((addr, rest[q1..q2].to_ascii_lowercase()))
}

/// Sum of etcd's grpc_server_msg_received_total, total and by method.
fn etcd_messages(port: u16) -> Result<(f64, BTreeMap<String, f64>)> {
    let body = http_get(port, "/metrics").map_err(|err| format!("etcd /metrics: {err}"))?;
    let mut total = 0.0;
    let mut by_method = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("grpc_server_msg_received_total") else {
            continue;
        };
        let Some(value) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let method = rest
            .split("grpc_method=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("?");
        total += value;
        *by_method.entry(method.to_string()).or_insert(0.0) += value;
    }
    Ok((total, by_method))
}

/// etcd: its metrics cannot tell clients apart, so the holder alone is measured first and
/// its rate subtracted.
fn waiting_etcd(bench: &Bench, waiters: usize, window: Duration) -> Result<Waiting> {
    let tool = Tool::Etcd;
    let port = bench.etcd_port.ok_or("etcd is not running")?;
    let baseline = Duration::from_secs(10).min(window);
    let key = "waiting";
    let (holder, release) = start_holder(bench, tool, key)?;
    let measured = (|| {
        thread::sleep(Duration::from_millis(500));
        let (c0, t0) = (etcd_messages(port)?, Instant::now());
        thread::sleep(baseline);
        let (c1, t1) = (etcd_messages(port)?, Instant::now());
        let mut procs = Vec::new();
        for _ in 0..waiters {
            let mut command = bench.command(tool, key, &os(&["true"]));
            procs.push(Proc::spawn(&mut command, window + Duration::from_secs(60))?);
        }
        thread::sleep(SETTLE);
        let (c2, t2) = (etcd_messages(port)?, Instant::now());
        thread::sleep(window);
        let (c3, t3) = (etcd_messages(port)?, Instant::now());
        Ok::<_, String>((procs, [(c0, t0), (c1, t1), (c2, t2), (c3, t3)]))
    })();
    let (procs, points) = match measured {
        Ok(measured) => measured,
        Err(err) => {
            let _ = finish_waiting(bench, tool, &release, holder, Vec::new());
            return Err(err);
        }
    };
    let failed = finish_waiting(bench, tool, &release, holder, procs);
    let [(c0, t0), (c1, t1), (c2, t2), (c3, t3)] = points;
    let holder_rate = (c1.0 - c0.0) / (t1 - t0).as_secs_f64();
    let window_s = (t3 - t2).as_secs_f64();
    let waiter_msgs = (c3.0 - c2.0) - holder_rate * window_s;
    let per_waiter_per_s = waiter_msgs / waiters as f64 / window_s;
    let startup = ((c2.0 - c1.0) - holder_rate * (t2 - t1).as_secs_f64()) / waiters as f64;
    let by_method = Json::Obj(
        c3.1.iter()
            .map(|(method, v)| {
                let delta = v - c2.1.get(method).copied().unwrap_or(0.0);
                (method.clone(), Json::Num(delta))
            })
            .filter(|(_, v)| matches!(v, Json::Num(x) if *x > 0.0))
            .collect(),
    );
    Ok(Waiting::Measured {
        per_waiter_per_s,
        startup_per_waiter: startup,
        note: format!(
            "etcd: grpc_server_msg_received_total delta {:.0} in {window_s:.1} s minus the \
             holder's {holder_rate:.2}/s (measured alone for {:.0} s first); default \
             etcdctl lock --ttl 10 (lease keepalive every ttl/3); HTTP/2 PINGs \
             (--keepalive-time 2s) are not gRPC messages and not counted",
            c3.0 - c2.0,
            baseline.as_secs_f64()
        ),
        detail: Json::obj([
            (
                "method",
                Json::str(
                    "etcd /metrics grpc_server_msg_received_total, holder baseline subtracted",
                ),
            ),
            ("waiters", Json::Int(waiters as i64)),
            ("window_s", Json::Num(window_s)),
            ("window_messages", Json::Num(c3.0 - c2.0)),
            ("window_messages_by_method", by_method),
            ("holder_messages_per_s", Json::Num(holder_rate)),
            ("failed_processes", Json::Int(failed as i64)),
        ]),
    })
}

// ---------------------------------------------------------------------------------------
// Building and describing

/// `cargo build --release` (for `target` when given), then the path of the redlock-run
/// executable it reports.
fn build_release(target: Option<&str>) -> Result<PathBuf> {
    let target_args = match target {
        Some(target) => vec!["--target", target],
        None => vec![],
    };
    phase(&format!(
        "cargo build --release --bin redlock-run {}",
        target_args.join(" ")
    ));
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest_dir = env!("CARGO_MANIFEST_DIR");
    let output = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--bin",
            "redlock-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(&target_args)
        .current_dir(manifest_dir)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|err| format!("cannot run cargo: {err}"))?;
    if !output.status.success() {
        return Err(format!("cargo build --release failed ({})", output.status));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let exe = stdout
        .lines()
        .filter(|line| line.contains("\"name\":\"redlock-run\"") && line.contains("\"bin\""))
        .find_map(|line| {
            let start = line.find("\"executable\":\"")? + "\"executable\":\"".len();
            let end = start + line[start..].find('"')?;
            Some(PathBuf::from(&line[start..end]))
        })
        .ok_or("cargo did not report the redlock-run executable")?;
    Ok(exe)
}

fn first_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .env("ETCDCTL_API", "3")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "not installed".into())
}

/// How the benched redlock-run was built: the target asked for, and whether the executable
/// names a dynamic loader (an ELF PT_INTERP program header) or is linked statically.
fn build_of(exe: &Path, target: Option<&str>) -> String {
    const PT_INTERP: u32 = 3;
    let linking = fs::read(exe).ok().and_then(|elf| {
        let field = |at: usize, len: usize| -> Option<u64> {
            let bytes = elf.get(at..at + len)?;
            Some(
                bytes
                    .iter()
                    .rev()
                    .fold(0, |acc, &b| acc << 8 | u64::from(b)),
            )
        };
        // 64-bit little-endian ELF only, which is all this bench runs on.
        if elf.get(..6)? != b"\x7fELF\x02\x01" {
            return None;
        }
        let (phoff, phentsize, phnum) = (field(0x20, 8)?, field(0x36, 2)?, field(0x38, 2)?);
        let interp = (0..phnum)
            .any(|i| field((phoff + i * phentsize) as usize, 4) == Some(u64::from(PT_INTERP)));
        Some(if interp {
            "dynamically linked"
        } else {
            "statically linked"
        })
    });
    format!(
        "{}, {}",
        target.unwrap_or("host target from .cargo/config.toml"),
        linking.unwrap_or("linking unknown")
    )
}

fn have(program: &str) -> bool {
    env::var_os("PATH")
        .is_some_and(|paths| env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

fn machine() -> Vec<(&'static str, String)> {
    let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let mem = read("/proc/meminfo")
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:").map(|v| v.trim().to_string()))
        .unwrap_or_default();
    vec![
        (
            "nproc",
            thread::available_parallelism().map_or("?".into(), |n| n.to_string()),
        ),
        ("cpu", cpu),
        (
            "kernel",
            read("/proc/sys/kernel/osrelease").trim().to_string(),
        ),
        ("memory", mem),
        ("loadavg_start", loadavg()),
    ]
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split(' ')
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------
// Main run

fn run(opts: &Opts) -> Result<()> {
    let exe = env::current_exe().map_err(|err| format!("cannot find myself: {err}"))?;
    let redlock = match &opts.redlock_bin {
        Some(path) => path.clone(),
        None => build_release(opts.target.as_deref())?,
    };
    let began = Instant::now();
    if !redlock.is_file() {
        return Err(format!("{redlock:?} does not exist"));
    }
    if !have("redis-server") || !have("flock") {
        return Err("redis-server and flock are needed (scripts/bench installs them)".into());
    }
    // Cargo's target directory itself, not the per-target one the binaries are in.
    let target_dir = env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    );
    let json_path = opts
        .json
        .clone()
        .unwrap_or_else(|| target_dir.join("bench").join("compare.json"));

    // Declared first, dropped last: the servers (whose data lives here) stop before it goes.
    let temp = TempDir::new()?;
    phase("starting redis-server and etcd on loopback");
    let (_redis, redis_port) = start_redis(&exe, &temp.0)?;
    let mut etcd_missing = String::new();
    let etcd = if !have("etcd") || !have("etcdctl") {
        etcd_missing =
            "etcd/etcdctl not installed (apt-get install etcd-server etcd-client)".into();
        None
    } else {
        match start_etcd(&exe, &temp.0) {
            Ok(started) => Some(started),
            Err(err) => {
                eprintln!("compare: {err}");
                etcd_missing = "etcd did not start".into();
                None
            }
        }
    };
    let bench = Bench {
        exe: exe.clone(),
        dir: temp.0.clone(),
        redlock: redlock.clone(),
        redis_port,
        etcd_port: etcd.as_ref().map(|(_, port)| *port),
        etcd_missing,
        have_time: Path::new("/usr/bin/time").is_file(),
    };

    let machine = machine();
    let versions = [
        (
            "redlock-run",
            first_line(&redlock.display().to_string(), &["--version"]),
        ),
        (
            "redlock-run build",
            build_of(&redlock, opts.target.as_deref()),
        ),
        ("flock", first_line("flock", &["--version"])),
        ("etcdctl", first_line("etcdctl", &["version"])),
        ("etcd", first_line("etcd", &["--version"])),
        ("redis-server", first_line("redis-server", &["--version"])),
    ];

    let mut results: [Results; 3] = Default::default();

    let mut starts = BTreeMap::new();
    bench_versions(&bench, opts.overhead_samples, &mut starts);
    for tool in TOOLS {
        results[tool as usize].version = starts.get(tool.name()).cloned();
    }
    let bare_version = starts.get("true").cloned().unwrap_or_default();

    let (bare, overhead) = bench_overhead(&bench, opts.overhead_samples);
    for tool in TOOLS {
        results[tool as usize].overhead = overhead.get(tool.name()).cloned();
    }

    for tool in bench.tools() {
        results[tool as usize].contended =
            Some(bench_contended(&bench, tool, opts.clients, opts.cycles));
    }

    bench_handoff(&bench, opts.handoff_samples, opts.hold, &mut results);

    phase("starting 4 more redis-servers for a 5-node Redlock quorum");
    let mut quorum_servers = Vec::new();
    let mut ports = vec![redis_port];
    for _ in 0..4 {
        match start_redis(&exe, &temp.0) {
            Ok((server, port)) => {
                quorum_servers.push(server);
                ports.push(port);
            }
            Err(err) => eprintln!("compare: {err}"),
        }
    }
    let quorum = (ports.len() == 5).then(|| bench_quorum(&bench, &ports, opts.overhead_samples));
    drop(quorum_servers);

    let rss_floor = if bench.have_time {
        let (peaks, floor) = bench_rss(&bench, 3);
        for tool in TOOLS {
            results[tool as usize].rss_kib = peaks.get(tool.name()).copied();
        }
        Some(floor)
    } else {
        None
    };

    phase(&format!(
        "waiting: {} waiters behind a holder, {} s window (redis and etcd side by side)",
        opts.waiters,
        opts.wait_window.as_secs()
    ));
    let (redis_waiting, etcd_waiting) = thread::scope(|scope| {
        let etcd = scope.spawn(|| {
            bench
                .available(Tool::Etcd)
                .then(|| waiting_etcd(&bench, opts.waiters, opts.wait_window))
        });
        let redis = waiting_redis(&bench, opts.waiters, opts.wait_window);
        (redis, etcd.join().unwrap_or(None))
    });
    results[Tool::Redlock as usize].waiting =
        Some(redis_waiting.unwrap_or_else(|err| Waiting::NotApplicable(format!("failed: {err}"))));
    results[Tool::Etcd as usize].waiting = Some(match etcd_waiting {
        Some(Ok(waiting)) => waiting,
        Some(Err(err)) => Waiting::NotApplicable(format!("failed: {err}")),
        None => Waiting::NotApplicable(bench.etcd_missing.clone()),
    });
    results[Tool::Flock as usize].waiting = Some(Waiting::NotApplicable(
        "no server: waiters sleep in flock(2) in the kernel".into(),
    ));

    let elapsed = began.elapsed();
    let report = Report {
        opts,
        bench: &bench,
        machine,
        versions: versions.to_vec(),
        results: &results,
        bare,
        bare_version,
        rss_floor,
        quorum,
        elapsed,
    };
    print!("{}", report.table());
    let json = report.json();
    if let Some(parent) = json_path.parent() {
        fs::create_dir_all(parent).map_err(|err| format!("{parent:?}: {err}"))?;
    }
    let mut text = String::new();
    json.write(&mut text, 0);
    text.push('\n');
    fs::write(&json_path, text).map_err(|err| format!("{json_path:?}: {err}"))?;
    println!("JSON: {}", json_path.display());
    drop(etcd);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Report

struct Report<'a> {
    opts: &'a Opts,
    bench: &'a Bench,
    machine: Vec<(&'static str, String)>,
    versions: Vec<(&'static str, String)>,
    results: &'a [Results; 3],
    bare: Samples,
    bare_version: Samples,
    rss_floor: Option<u64>,
    quorum: Option<QuorumStart>,
    elapsed: Duration,
}

enum Verdict {
    Pass,
    Fail,
    NotApplicable,
}

impl Verdict {
    fn of(check: Option<bool>) -> Verdict {
        match check {
            Some(true) => Verdict::Pass,
            Some(false) => Verdict::Fail,
            None => Verdict::NotApplicable,
        }
    }

    fn word(&self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::NotApplicable => "n/a",
        }
    }
}

struct TargetLine {
    id: &'static str,
    goal: &'static str,
    measured: String,
    value: Option<f64>,
    verdict: Verdict,
}

impl Report<'_> {
    fn r(&self, tool: Tool) -> &Results {
        &self.results[tool as usize]
    }

    /// Overhead p50: p50 of `TOOL -- true` minus p50 of bare `true`.
    fn overhead(&self, tool: Tool) -> Option<f64> {
        let tool_p50 = self.r(tool).overhead.as_ref()?.p50()?;
        Some(millis(tool_p50) - millis(self.bare.p50()?))
    }

    fn rate(&self, tool: Tool) -> Option<f64> {
        let contended = self.r(tool).contended.as_ref()?;
        (contended.ok_cycles > 0).then(|| contended.rate())
    }

    fn handoff(&self, tool: Tool, p: f64) -> Option<f64> {
        Some(millis(self.r(tool).handoff.as_ref()?.pct(p)?))
    }

    fn waiting(&self, tool: Tool) -> Option<f64> {
        match self.r(tool).waiting.as_ref()? {
            Waiting::Measured {
                per_waiter_per_s, ..
            } => Some(*per_waiter_per_s),
            Waiting::NotApplicable(_) => None,
        }
    }

    fn targets(&self) -> Vec<TargetLine> {
        let (rl, fl, et) = (Tool::Redlock, Tool::Flock, Tool::Etcd);
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 && a.is_finite() => Some(a / b),
            _ => None,
        };
        let show = |value: Option<f64>, text: &dyn Fn(f64) -> String| {
            value.map_or_else(|| "n/a".to_string(), text)
        };
        let mut lines = Vec::new();

        let v = ratio(self.overhead(rl), self.overhead(fl));
        lines.push(TargetLine {
            id: "overhead_vs_flock",
            goal: "overhead p50 <= 1.3x flock's",
            measured: show(v, &|x| format!("{x:.2}x flock's")),
            value: v,
            verdict: Verdict::of(v.map(|x| x <= 1.3)),
        });
        let v = ratio(self.overhead(et), self.overhead(rl));
        lines.push(TargetLine {
            id: "overhead_vs_etcdctl",
            goal: "overhead p50 >= 10x below etcdctl's",
            measured: show(v, &|x| format!("etcdctl's is {x:.1}x")),
            value: v,
            verdict: Verdict::of(v.map(|x| x >= 10.0)),
        });
        let correct = self.r(rl).contended.as_ref().map(Contended::correct);
        let v = ratio(self.rate(rl), self.rate(fl));
        lines.push(TargetLine {
            id: "contended_vs_flock",
            goal: "contended locks/s >= 0.7x flock's",
            measured: show(v, &|x| format!("{x:.2}x flock's")),
            value: v,
            verdict: Verdict::of(v.map(|x| x >= 0.7 && correct == Some(true))),
        });
        let v = ratio(self.rate(rl), self.rate(et));
        lines.push(TargetLine {
            id: "contended_vs_etcdctl",
            goal: "contended locks/s >= 3x etcdctl's",
            measured: show(v, &|x| format!("{x:.2}x etcdctl's")),
            value: v,
            verdict: Verdict::of(v.map(|x| x >= 3.0 && correct == Some(true))),
        });
        let v = ratio(self.handoff(rl, 50.0), self.handoff(fl, 50.0));
        lines.push(TargetLine {
            id: "handoff_p50_vs_flock",
            goal: "handoff p50 <= 1.3x flock's",
            measured: show(v, &|x| format!("{x:.2}x flock's")),
            value: v,
            verdict: Verdict::of(v.map(|x| x <= 1.3)),
        });
        let v = self.handoff(rl, 99.0);
        lines.push(TargetLine {
            id: "handoff_p99",
            goal: "handoff p99 < 10 ms",
            measured: show(v, &|x| format!("{x:.3} ms")),
            value: v,
            verdict: Verdict::of(v.map(|x| x < 10.0)),
        });
        let v = self.waiting(rl);
        lines.push(TargetLine {
            id: "waiting_requests",
            goal: "waiting <= 0.1 Redis requests/waiter/s",
            measured: show(v, &|x| format!("{x:.4} /waiter/s")),
            value: v,
            verdict: Verdict::of(v.map(|x| x <= 0.1)),
        });
        let v = self.r(rl).rss_kib.map(|kib| kib as f64 / 1024.0);
        lines.push(TargetLine {
            id: "peak_rss",
            goal: "peak RSS <= 5 MiB",
            measured: show(v, &|x| format!("{x:.2} MiB")),
            value: v,
            verdict: Verdict::of(v.map(|x| x <= 5.0)),
        });
        let v = self
            .quorum
            .as_ref()
            .and_then(|q| ratio(q.quorum.p50().map(millis), q.one.p50().map(millis)));
        lines.push(TargetLine {
            id: "redlock5_start_vs_single",
            goal: "5 Redlock nodes: start p50 <= 1.5x 1 node",
            measured: show(v, &|x| format!("{x:.2}x 1 node's")),
            value: v,
            verdict: Verdict::of(v.map(|x| x <= 1.5)),
        });
        let v = self
            .r(rl)
            .version
            .as_ref()
            .and_then(Samples::p50)
            .map(millis);
        let floor = self.bare_version.p50().map(millis);
        lines.push(TargetLine {
            id: "version_p50",
            goal: "--version startup p50 < 1 ms",
            measured: show(v, &|x| match floor {
                Some(floor) => format!("{x:.3} ms ({:+.3} vs true)", x - floor),
                None => format!("{x:.3} ms"),
            }),
            value: v,
            verdict: Verdict::of(v.map(|x| x < 1.0)),
        });
        lines
    }

    fn table(&self) -> String {
        let mut out = String::new();
        let o = &mut out;
        let _ = writeln!(
            o,
            "\n== redlock-run vs flock(1) vs etcdctl lock: same run, same machine =="
        );
        for (key, value) in &self.machine {
            let _ = writeln!(o, "{key:<14} {value}");
        }
        let _ = writeln!(o, "{:<14} {}", "loadavg_end", loadavg());
        for (key, value) in &self.versions {
            let _ = writeln!(o, "{key:<14} {value}");
        }
        let _ = writeln!(
            o,
            "{:<14} {} s (servers and measurements, after the build)",
            "elapsed",
            self.elapsed.as_secs()
        );
        let _ = writeln!(o, "{:<14} {STAMP_NOTE}", "command");
        let _ = writeln!(o);

        const W: usize = 44;
        const C: usize = 17;
        let header = format!(
            "{:<W$}{:>C$}{:>C$}{:>C$}{:>11}{:>10}",
            "metric", "redlock-run", "flock", "etcdctl", "redis-poll", "cronlock"
        );
        let _ = writeln!(o, "{header}");
        let _ = writeln!(o, "{}", "-".repeat(header.len()));
        let mut row = |label: &str, cell: &dyn Fn(Tool) -> String| {
            let _ = writeln!(
                o,
                "{label:<W$}{:>C$}{:>C$}{:>C$}{:>11}{:>10}",
                cell(Tool::Redlock),
                cell(Tool::Flock),
                cell(Tool::Etcd),
                "n/a",
                "n/a"
            );
        };
        let na = || "n/a".to_string();
        let ms = |v: Option<f64>| {
            v.map_or_else(na, |x| fmt_ms(Duration::from_secs_f64(x.max(0.0) / 1e3)))
        };
        let bare_p50 = self.bare.p50().map_or_else(na, fmt_ms);
        row("overhead p50 (TOOL -- true) - (true)", &|t| {
            ms(self.overhead(t))
        });
        row(
            &format!("  raw p50 of TOOL -- true (true: {bare_p50})"),
            &|t| {
                self.r(t)
                    .overhead
                    .as_ref()
                    .and_then(Samples::p50)
                    .map_or_else(na, fmt_ms)
            },
        );
        row(
            &format!(
                "contended {}x{} cycles, locks/s",
                self.opts.clients, self.opts.cycles
            ),
            &|t| self.rate(t).map_or_else(na, |x| format!("{x:.1}")),
        );
        row("  mutual exclusion: counter/expected", &|t| {
            self.r(t).contended.as_ref().map_or_else(na, |c| {
                let mark = if c.correct() { "ok" } else { "WRONG" };
                format!("{}/{} {mark}", c.count, c.expected)
            })
        });
        let n = self.opts.handoff_samples;
        row(&format!("handoff p50 (n={n})"), &|t| {
            ms(self.handoff(t, 50.0))
        });
        row(&format!("handoff p99 (nearest rank, n={n})"), &|t| {
            ms(self.handoff(t, 99.0))
        });
        row("  handoff failed / overlapping samples", &|t| {
            let r = self.r(t);
            r.handoff.as_ref().map_or_else(na, |h| {
                format!(
                    "{} / {}",
                    h.failures - r.handoff_negative,
                    r.handoff_negative
                )
            })
        });
        row(
            &format!("waiting: server requests/waiter/s ({})", self.opts.waiters),
            &|t| match self.r(t).waiting.as_ref() {
                Some(Waiting::Measured {
                    per_waiter_per_s, ..
                }) => format!("{per_waiter_per_s:.4}"),
                _ if t == Tool::Flock => "none (kernel)".into(),
                _ => na(),
            },
        );
        row(
            "  startup requests per waiter",
            &|t| match self.r(t).waiting.as_ref() {
                Some(Waiting::Measured {
                    startup_per_waiter, ..
                }) => format!("{startup_per_waiter:.1}"),
                _ => na(),
            },
        );
        let floor = self
            .rss_floor
            .map_or_else(na, |kib| format!("{:.2} MiB", kib as f64 / 1024.0));
        row(&format!("peak RSS, wrapper (sleep alone: {floor})"), &|t| {
            self.r(t)
                .rss_kib
                .map_or_else(na, |kib| format!("{:.2} MiB", kib as f64 / 1024.0))
        });
        let bare_version = self.bare_version.p50().map_or_else(na, fmt_ms);
        row(
            &format!("--version startup p50 (true: {bare_version})"),
            &|t| {
                self.r(t)
                    .version
                    .as_ref()
                    .and_then(Samples::p50)
                    .map_or_else(na, fmt_ms)
            },
        );
        if let Some(quorum) = &self.quorum {
            let one = quorum.one.p50().map_or_else(na, fmt_ms);
            let many = quorum.quorum.p50().map_or_else(na, fmt_ms);
            row("time to command start p50, 1 Redis", &|t| match t {
                Tool::Redlock => one.clone(),
                _ => na(),
            });
            row(
                &format!("  with {} Redlock nodes", quorum.nodes),
                &|t| match t {
                    Tool::Redlock => many.clone(),
                    _ => na(),
                },
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "{:<42}{:<26}result",
            "target for redlock-run", "measured"
        );
        let _ = writeln!(o, "{}", "-".repeat(74));
        for line in self.targets() {
            let _ = writeln!(
                o,
                "{:<42}{:<26}{}",
                line.goal,
                line.measured,
                line.verdict.word()
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "notes:");
        let _ = writeln!(
            o,
            "- overhead/startup: spawn-to-exit from this harness, {} runs each, tools \
             interleaved; handoff: holder's command stamps just before it exits, the \
             waiter's command stamps as it starts (CLOCK_REALTIME), holder holds {}",
            self.opts.overhead_samples,
            fmt_ms(self.opts.hold)
        );
        let leads: Vec<String> = TOOLS
            .iter()
            .filter_map(|&t| Some(format!("{} {}", t.name(), fmt_ms(self.r(t).waiter_lead?))))
            .collect();
        let _ = writeln!(
            o,
            "- handoff waiters were started at least this long before the holder let go \
             (time to queue up): {}",
            leads.join(", ")
        );
        let _ = writeln!(
            o,
            "- contended: each cycle is TOOL -- (read counter file, write +1); a tool is \
             WRONG unless the count equals clients x cycles and no cycle failed"
        );
        for tool in [Tool::Redlock, Tool::Etcd] {
            match self.r(tool).waiting.as_ref() {
                Some(Waiting::Measured { note, .. }) => {
                    let _ = writeln!(o, "- waiting, {note}");
                }
                Some(Waiting::NotApplicable(why)) => {
                    let _ = writeln!(o, "- waiting, {}: n/a: {why}", tool.name());
                }
                None => {}
            }
        }
        let _ = writeln!(
            o,
            "- peak RSS: /usr/bin/time %M (wait4 ru_maxrss) of the wrapper as holder \
             (-- sleep 0.3) and as waiter (-- true), max of 3 runs each"
        );
        if !self.bench.available(Tool::Etcd) {
            let _ = writeln!(o, "- etcdctl: n/a: {}", self.bench.etcd_missing);
        }
        let _ = writeln!(
            o,
            "- redis-cli poll and cronlock columns: not measured (n/a)"
        );
        let killed = KILLED.load(Ordering::Relaxed);
        if killed > 0 {
            let _ = writeln!(
                o,
                "- {killed} processes were killed for running over their time limit"
            );
        }
        out
    }

    fn json(&self) -> Json {
        let tool_json = |tool: Tool| -> Json {
            if !self.bench.available(tool) {
                return Json::obj([
                    ("available", Json::Bool(false)),
                    ("reason", Json::str(self.bench.etcd_missing.clone())),
                ]);
            }
            let r = self.r(tool);
            let samples = |s: &Option<Samples>| s.as_ref().map_or(Json::Null, Samples::json);
            let contended = r.contended.as_ref().map_or(Json::Null, |c| {
                Json::obj([
                    ("clients", Json::Int(self.opts.clients as i64)),
                    ("cycles_per_client", Json::Int(self.opts.cycles as i64)),
                    ("elapsed_s", Json::Num(c.elapsed.as_secs_f64())),
                    ("locks_per_s", Json::opt_num(self.rate(tool))),
                    ("failed_cycles", Json::Int(c.failed_cycles as i64)),
                    ("counter", Json::Int(c.count as i64)),
                    ("expected", Json::Int(c.expected as i64)),
                    ("mutual_exclusion_ok", Json::Bool(c.correct())),
                ])
            });
            let waiting = match &r.waiting {
                Some(Waiting::Measured {
                    per_waiter_per_s,
                    startup_per_waiter,
                    detail,
                    ..
                }) => Json::obj([
                    ("requests_per_waiter_per_s", Json::Num(*per_waiter_per_s)),
                    (
                        "startup_requests_per_waiter",
                        Json::Num(*startup_per_waiter),
                    ),
                    ("detail", detail.clone()),
                ]),
                Some(Waiting::NotApplicable(why)) => Json::obj([
                    ("requests_per_waiter_per_s", Json::Null),
                    ("reason", Json::str(why.clone())),
                ]),
                None => Json::Null,
            };
            Json::obj([
                ("available", Json::Bool(true)),
                ("overhead_p50_ms", Json::opt_num(self.overhead(tool))),
                ("tool_true", samples(&r.overhead)),
                ("contended", contended),
                ("handoff", samples(&r.handoff)),
                ("handoff_overlaps", Json::Int(r.handoff_negative as i64)),
                (
                    "handoff_min_waiter_lead_ms",
                    Json::opt_num(r.waiter_lead.map(millis)),
                ),
                ("waiting", waiting),
                (
                    "peak_rss_kib",
                    r.rss_kib.map_or(Json::Null, |k| Json::Int(k as i64)),
                ),
                ("startup", samples(&r.version)),
            ])
        };
        let not_measured = || {
            Json::obj([
                ("available", Json::Bool(false)),
                ("reason", Json::str("not measured")),
            ])
        };
        Json::obj([
            (
                "machine",
                Json::Obj(
                    self.machine
                        .iter()
                        .map(|(k, v)| (k.to_string(), Json::str(v.clone())))
                        .chain([("loadavg_end".to_string(), Json::str(loadavg()))])
                        .collect(),
                ),
            ),
            (
                "versions",
                Json::Obj(
                    self.versions
                        .iter()
                        .map(|(k, v)| (k.to_string(), Json::str(v.clone())))
                        .collect(),
                ),
            ),
            (
                "config",
                Json::obj([
                    (
                        "overhead_samples",
                        Json::Int(self.opts.overhead_samples as i64),
                    ),
                    (
                        "handoff_samples",
                        Json::Int(self.opts.handoff_samples as i64),
                    ),
                    ("hold_ms", Json::Num(millis(self.opts.hold))),
                    ("clients", Json::Int(self.opts.clients as i64)),
                    ("cycles", Json::Int(self.opts.cycles as i64)),
                    ("waiters", Json::Int(self.opts.waiters as i64)),
                    (
                        "wait_window_s",
                        Json::Num(self.opts.wait_window.as_secs_f64()),
                    ),
                    ("command", Json::str(STAMP_NOTE)),
                    ("elapsed_s", Json::Num(self.elapsed.as_secs_f64())),
                ]),
            ),
            ("bare_true", self.bare.json()),
            ("bare_true_startup", self.bare_version.json()),
            (
                "redlock_time_to_start",
                self.quorum.as_ref().map_or(Json::Null, |q| {
                    Json::obj([
                        ("nodes", Json::Int(q.nodes as i64)),
                        ("one_node", q.one.json()),
                        ("quorum", q.quorum.json()),
                    ])
                }),
            ),
            (
                "rss_floor_kib",
                self.rss_floor.map_or(Json::Null, |k| Json::Int(k as i64)),
            ),
            (
                "tools",
                Json::obj([
                    ("redlock-run", tool_json(Tool::Redlock)),
                    ("flock", tool_json(Tool::Flock)),
                    ("etcdctl", tool_json(Tool::Etcd)),
                    ("redis-cli-poll", not_measured()),
                    ("cronlock", not_measured()),
                ]),
            ),
            (
                "targets",
                Json::Arr(
                    self.targets()
                        .into_iter()
                        .map(|line| {
                            Json::obj([
                                ("id", Json::str(line.id)),
                                ("goal", Json::str(line.goal)),
                                ("value", Json::opt_num(line.value)),
                                ("measured", Json::str(line.measured)),
                                ("result", Json::str(line.verdict.word())),
                            ])
                        })
                        .collect(),
                ),
            ),
        ])
    }
}
