//! The holder fixture: a `redlock-run` whose job holds the lock until the test lets it go.
//! Every test that needs a lock held for a while (to wait behind, inspect, steal, release by
//! force, or lose with a server) starts one here and ends it with [`Holder::let_go`]. The
//! hand-over pair (a holder and a waiter that note when one ends and the other starts) is
//! built on it.
//!
//! What this module does not own: the wrapper's flags, lock name included (the test builds
//! the [`Wrapper`]), or anything the test asserts about the lock meanwhile.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Output, RedisServer, Running, TempDir, Wrapper};

/// How long a holder's job may take to start: its wrapper may have to wait for the lock.
const START_LIMIT: Duration = Duration::from_secs(15);

/// A job that holds its lock until the test lets it go. Named `NAME` in a test's directory,
/// it writes the `REDLOCK_FENCE` and `REDLOCK_TOKEN` it was given to `NAME.fence` and
/// `NAME.token`, runs the lines given to [`Job::first`], touches `NAME.ready`, waits for
/// `NAME.go`, runs the lines given to [`Job::then`], and ends with status 0 or the one given
/// to [`Job::exit_code`]. A SIGTERM is noted in `NAME.term` and ends it with 143, so that a
/// test can tell that its command was told to stop.
pub struct Job<'a> {
    dir: &'a TempDir,
    name: String,
    first: Vec<String>,
    then: Vec<String>,
    code: i32,
}

impl<'a> Job<'a> {
    pub fn new(dir: &'a TempDir, name: &str) -> Job<'a> {
        Job {
            dir,
            name: name.to_string(),
            first: Vec::new(),
            then: Vec::new(),
            code: 0,
        }
    }

    /// Shell lines to run before the job says it is ready.
    pub fn first(mut self, lines: &str) -> Job<'a> {
        self.first.push(lines.to_string());
        self
    }

    /// Shell lines to run once the job is let go.
    pub fn then(mut self, lines: &str) -> Job<'a> {
        self.then.push(lines.to_string());
        self
    }

    pub fn exit_code(mut self, code: i32) -> Job<'a> {
        self.code = code;
        self
    }

    /// The job as a script body.
    pub fn body(&self) -> String {
        let mut body = format!(
            "trap 'touch \"{term}\"; exit 143' TERM\n\
             echo \"$REDLOCK_FENCE\" > '{fence}'\n\
             echo \"$REDLOCK_TOKEN\" > '{token}'\n",
            term = self.file("term").display(),
            fence = self.file("fence").display(),
            token = self.file("token").display(),
        );
        for lines in &self.first {
            body.push_str(&format!("{lines}\n"));
        }
        body.push_str(&format!(
            "touch '{ready}'\nwhile [ ! -e '{go}' ]; do sleep 0.01; done\n",
            ready = self.file("ready").display(),
            go = self.file("go").display(),
        ));
        for lines in &self.then {
            body.push_str(&format!("{lines}\n"));
        }
        // The status of the last command, not `exit`: a history section around the job
        // (see `history`) must still get to record its end.
        match self.code {
            0 => body.push_str("true"),
            code => body.push_str(&format!("(exit {code})")),
        }
        body
    }

    /// Writes the job as the script `NAME` and starts `wrapper -- NAME`; returns once the job
    /// runs, so with the lock held.
    #[track_caller]
    pub fn start(self, wrapper: Wrapper) -> Holder {
        let script = self.dir.script(&self.name, &self.body());
        self.start_as(wrapper, &script)
    }

    /// Starts `wrapper -- script`, where `script` runs this job's [`Job::body`] (inside a
    /// history section, say); returns once the job runs.
    #[track_caller]
    pub fn start_as(self, wrapper: Wrapper, script: &Path) -> Holder {
        Holder {
            running: start_holding(wrapper, script, &self.file("ready")),
            script: script.to_path_buf(),
            go: self.file("go"),
        }
    }

    fn file(&self, suffix: &str) -> PathBuf {
        self.dir.join(&format!("{}.{suffix}", self.name))
    }
}

/// Starts `wrapper -- script` and returns once the command has created `ready`, so with the
/// lock held: how every holder starts, whatever its job. A job that holds until the test
/// lets it go is a [`Job`]; this is for the few that hold until they are stopped.
#[track_caller]
pub fn start_holding(wrapper: Wrapper, script: &Path, ready: &Path) -> Running {
    let mut running = wrapper.arg("--").arg(script).spawn();
    running.wait_for_file(ready, START_LIMIT);
    running
}

/// Starts the plain [`Job`] `name` under `wrapper`, which names the lock: the usual holder.
#[track_caller]
pub fn hold(wrapper: Wrapper, dir: &TempDir, name: &str) -> Holder {
    Job::new(dir, name).start(wrapper)
}

/// The fence the job `name` was given, as it wrote it to `NAME.fence`.
#[track_caller]
pub fn fence_of(dir: &TempDir, name: &str) -> u64 {
    let text = dir.read(&format!("{name}.fence"));
    text.parse()
        .unwrap_or_else(|_| panic!("REDLOCK_FENCE of {name} is {text:?}, not a number"))
}

/// A wrapper whose [`Job`] holds its lock until [`Holder::let_go`].
pub struct Holder {
    running: Running,
    script: PathBuf,
    go: PathBuf,
}

impl Holder {
    /// Lets the job end: the wrapper then releases the lock and exits with the job's status.
    pub fn let_go(&self) {
        fs::write(&self.go, "").unwrap_or_else(|e| panic!("writing {}: {e}", self.go.display()));
    }

    /// The wrapper's pid, which it records as the holder's.
    pub fn pid(&self) -> i32 {
        self.running.pid()
    }

    /// The script the wrapper runs, which it records as the holder's command line.
    pub fn script(&self) -> &Path {
        &self.script
    }

    pub fn stderr_so_far(&self) -> String {
        self.running.stderr_so_far()
    }

    /// Waits for exit, within the wrapper's time limit.
    #[track_caller]
    pub fn wait(self) -> Output {
        self.running.wait()
    }

    /// Waits for exit for at most `limit`.
    #[track_caller]
    pub fn wait_within(self, limit: Duration) -> Output {
        self.running.wait_within(limit)
    }

    /// Asserts that this holder of lock `name` still has its value `held` and that it is the
    /// only key; then lets it go, and asserts that it exits 0 and leaves nothing behind.
    #[track_caller]
    pub fn assert_kept_the_lock_alone(self, server: &RedisServer, name: &str, held: String) {
        assert_eq!(server.lock_value(name), Some(held), "holder's key changed");
        assert_eq!(server.dbsize(), 1, "keys: {:?}", server.keys());
        self.let_go();
        self.wait().assert_code(0);
        assert_eq!(server.dbsize(), 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-over

/// The two sides of a hand-over test in `dir`: the holder's job `holder`, which notes when
/// it ends in `holder_end`, and a waiter script that notes when it starts in `waiter_start`.
/// See [`handover_delay`].
pub fn handover_jobs(dir: &TempDir) -> (Job<'_>, PathBuf) {
    let holder = Job::new(dir, "holder").then(&format!(
        "date +%s.%N > '{}'",
        dir.join("holder_end").display()
    ));
    let waiter = dir.script(
        "waiter",
        &format!("date +%s.%N > '{}'", dir.join("waiter_start").display()),
    );
    (holder, waiter)
}

/// How long after the holder of [`handover_jobs`] ended the waiter started.
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

/// What others see of a holder's command: its program's name (the file name of `script`).
pub fn program_of(script: &Path) -> String {
    script
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}
