//! The checked-in shell completions and man page (`completions/`) must match what clap
//! generates from `redlock_run::cli::Cli` today. They are generated here rather than in a
//! build script so that installing the tool needs no extra step and so that a change to the
//! command line shows up in review as a diff of the generated files.
//!
//! When `src/cli.rs` changes, these tests fail; rerun them with `UPDATE_COMPLETIONS=1` to
//! rewrite the files, and commit the result.

use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::Shell;

use redlock_run::cli::Cli;

const BIN_NAME: &str = "redlock-run";
const UPDATE_HINT: &str = "UPDATE_COMPLETIONS=1 cargo test --test integration completions";

fn completion(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN_NAME, &mut out);
    out
}

fn man_page() -> Vec<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .expect("rendering the man page into memory cannot fail");
    out
}

/// Compares `generated` with the checked-in `completions/<file>`, or rewrites that file when
/// `UPDATE_COMPLETIONS` is set (to anything but `0` or empty).
#[track_caller]
fn check(file: &str, generated: &[u8]) {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "completions", file]
        .iter()
        .collect();
    let update = std::env::var_os("UPDATE_COMPLETIONS").is_some_and(|v| !v.is_empty() && v != "0");
    if update {
        std::fs::write(&path, generated)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let checked_in = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) => panic!(
            "cannot read {}: {e}\nGenerate it with: {UPDATE_HINT}",
            path.display()
        ),
    };
    if checked_in != generated {
        panic!(
            "{} is out of date with src/cli.rs.\nRegenerate it with: {UPDATE_HINT}\n\
             then review and commit the diff.",
            path.display()
        );
    }
}

#[test]
fn bash() {
    check("redlock-run.bash", &completion(Shell::Bash));
}

#[test]
fn zsh() {
    check("_redlock-run", &completion(Shell::Zsh));
}

#[test]
fn fish() {
    check("redlock-run.fish", &completion(Shell::Fish));
}

#[test]
fn man() {
    check("redlock-run.1", &man_page());
}
