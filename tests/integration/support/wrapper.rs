//! The command builder: `redlock-run` (or a shell that execs it) with a clean environment
//! and a hard time limit, started in the background ([`Running`]) or run to the end
//! ([`Output`], whose assertions print stdout and stderr when they fail). A run that outlives
//! its limit is killed with its command's process group, so a hung test leaves nothing
//! behind.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::{
    children_of, ignored_signals_note, read_pid, signal, with_default_signals, BIN, RUN_TIMEOUT,
};

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
        with_default_signals(&mut cmd);
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

/// A running wrapper.
pub struct Running {
    child: Child,
    started: Instant,
    stdout: Collector,
    stderr: Collector,
    timeout: Duration,
    description: String,
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

    /// stdout so far (a long-running subcommand's lines, read as they come).
    pub fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stdout.snapshot()).into_owned()
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
                let note = ignored_signals_note(self.pid());
                self.kill_all();
                panic!(
                    "{} still running after {elapsed:?} (limit {limit:?}); killed\n\
                     --- stdout:\n{}\n--- stderr:\n{}{note}",
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
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Asserts the exit code, printing stdout and stderr on mismatch.
    #[track_caller]
    pub fn assert_code(&self, expected: i32) -> &Output {
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
    pub fn assert_stdout_contains(&self, needle: &str) -> &Output {
        let stdout = self.stdout_str();
        assert!(
            stdout.contains(needle),
            "stdout does not have {needle:?}:\n{stdout}\nstderr:\n{}",
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
