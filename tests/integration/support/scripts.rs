//! Commands for the wrapper to run that live until something stops them: a sleeper and a
//! stubborn one that ignores SIGTERM. Each writes its pid to `pid` in the test's directory
//! (read it with `Running::read_pid`).
//!
//! What this module does not own: a job that ends when the test says so (see `holder`).

use std::path::PathBuf;

use super::TempDir;

/// A command that records its pid and then sleeps (as `sleep`, via exec) until killed.
pub fn sleeper(dir: &TempDir) -> PathBuf {
    dir.script(
        "sleeper",
        &format!("echo $$ > '{}'\nexec sleep 100", dir.join("pid").display()),
    )
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
