//! Temporary directories: one per test (and one per `redis-server`), under the system temp
//! dir, removed on drop, with helpers to write the shell scripts the tests run and to read
//! back the files those scripts write.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

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
