//! The history file and its watcher: the script wrapper that makes a command record its
//! critical section, and the thread that writes `dead` lines for sections whose processes are
//! gone without an `end` (see the parent module for the file's format and what a `dead` line
//! means to the checker).

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::{now_ns, parse, parse_line, pid_of, Checked, Ending, Interval, Kind, POLL};
use crate::support::{live_in_group, pid_alive, wait_until, TempDir};

/// A history file in a test's directory, with a watcher thread that writes `dead` lines for
/// sections whose processes are gone without an `end`. The watcher stops on drop.
pub struct History {
    path: PathBuf,
    state: Arc<Mutex<Tail>>,
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
}

/// What the watcher has read of the file so far.
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
    /// Sections started and not yet ended or seen dead, with the pid from their id.
    open: BTreeMap<String, Option<i32>>,
}

impl History {
    /// An empty history at `dir/history`, watched from now on.
    pub fn new(dir: &TempDir) -> History {
        let path = dir.join("history");
        fs::write(&path, "").unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        let state = Arc::new(Mutex::new(Tail {
            path: path.clone(),
            offset: 0,
            partial: String::new(),
            open: BTreeMap::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (watched, stopped) = (Arc::clone(&state), Arc::clone(&stop));
        let watcher = thread::Builder::new()
            .name("history-watch".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    lock(&watched).sweep();
                    thread::sleep(POLL);
                }
            })
            .expect("starting the history watcher");
        History {
            path,
            state,
            stop,
            watcher: Some(watcher),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes an executable script that runs `body` as a recorded critical section: `start`
    /// on entry, `end` after `body` (whose status becomes the script's). A `body` that exits
    /// or is killed leaves the section unterminated, for the watcher to close. `label` names
    /// the section in the history and must be a word without `-` or `.`.
    pub fn section(&self, dir: &TempDir, label: &str, body: &str) -> PathBuf {
        assert!(
            !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric()),
            "label {label:?} must be alphanumeric"
        );
        let script = format!(
            "H='{history}'\n\
             ID=\"{label}-$(printf %.8s \"$REDLOCK_TOKEN\").$$\"\n\
             echo \"start $(date +%s%N) $ID\" >> \"$H\"\n\
             {body}\n\
             rc=$?\n\
             echo \"end $(date +%s%N) $ID\" >> \"$H\"\n\
             exit $rc",
            history = self.path.display()
        );
        dir.script(&format!("section-{label}"), &script)
    }

    /// Reads the history as it is now, closing unterminated sections per the module doc with
    /// the end of the test at this moment.
    pub fn check(&self) -> Checked {
        let mut tail = lock(&self.state);
        tail.sweep();
        let end_of_test = now_ns();
        let text = fs::read_to_string(&self.path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.path.display()));
        let checked = parse(&text)
            .and_then(|records| Checked::from_records(&records, end_of_test))
            .unwrap_or_else(|e| panic!("{e}\nhistory:\n{text}"));
        drop(tail);
        checked
    }

    /// Waits until the one section labelled `label` has ended, by its own `end` or seen
    /// dead, and returns it.
    #[track_caller]
    pub fn wait_closed(&self, label: &str, limit: Duration) -> Interval {
        let mut found = None;
        wait_until(limit, &format!("section {label:?} to end"), || {
            let checked = self.check();
            found = checked
                .labelled(label)
                .first()
                .filter(|interval| interval.ending != Ending::Open)
                .map(|interval| (*interval).clone());
            found.is_some()
        });
        found.expect("found when the wait ends")
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
    }
}

fn lock(state: &Mutex<Tail>) -> MutexGuard<'_, Tail> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Tail {
    /// Reads what was appended since the last look and notes starts and ends.
    fn read_new(&mut self) {
        let Ok(mut file) = fs::File::open(&self.path) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        let Ok(n) = file.read_to_end(&mut bytes) else {
            return;
        };
        self.offset += n as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        // A line being written can be seen half-done: keep the unfinished tail for next time.
        let complete = match self.partial.rfind('\n') {
            Some(last) => self.partial.drain(..=last).collect::<String>(),
            None => return,
        };
        for record in complete.lines().filter_map(parse_line) {
            match record.kind {
                Kind::Start => {
                    let pid = pid_of(&record.id);
                    self.open.insert(record.id, pid);
                }
                Kind::End | Kind::Dead => {
                    self.open.remove(&record.id);
                }
            }
        }
    }

    /// One look: any open section whose processes are all gone gets its `dead` line.
    fn sweep(&mut self) {
        self.read_new();
        let candidates: Vec<(String, i32)> = self
            .open
            .iter()
            .filter_map(|(id, pid)| Some((id.clone(), (*pid)?)))
            .collect();
        for (id, pid) in candidates {
            if section_alive(pid) {
                continue;
            }
            // It is gone; an `end` written just before it exited may have landed since the
            // last read: look again before declaring it dead.
            self.read_new();
            if !self.open.contains_key(&id) {
                continue;
            }
            let line = format!("dead {} {id}\n", now_ns());
            OpenOptions::new()
                .append(true)
                .open(&self.path)
                .and_then(|mut file| file.write_all(line.as_bytes()))
                .unwrap_or_else(|e| panic!("appending to {}: {e}", self.path.display()));
            self.open.remove(&id);
        }
    }
}

/// Whether the section run by shell `pid` may still be working: the shell lives, or some
/// process of its group (`pid` leads it) does.
fn section_alive(pid: i32) -> bool {
    pid_alive(pid) || !live_in_group(pid).is_empty()
}
