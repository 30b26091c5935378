//! Which server the suite runs against: `redis-server` on `PATH`, or the binary that
//! `REDLOCK_TEST_REDIS_SERVER` names (`scripts/test` runs the main behaviours against Redis
//! 6.2 and Valkey 9 so). A run of the matrix is worth something only if the servers it
//! started are the ones it names: this test checks that, and says which it is.
//!
//! What this module does not own: the behaviours, which the other modules test against
//! whichever server this is.

use std::process::Command;

use crate::support::*;

/// The server a test starts reports, in `INFO server`, the version its binary prints with
/// `--version` (`Redis server v=6.2.14 ...`, `Valkey server v=9.1.2 ...`).
#[test]
fn the_server_under_test_is_the_one_named() {
    let program = default_server_program();
    let out = Command::new(&program)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("running {} --version: {e}", program.display()));
    let printed = String::from_utf8_lossy(&out.stdout).to_lowercase();
    let version = RedisServer::start().version();
    let named = if std::env::var_os(SERVER_VAR).is_some() {
        format!("named by {SERVER_VAR}")
    } else {
        "on PATH".to_string()
    };
    eprintln!(
        "server under test: {version} ({}, {named})",
        program.display()
    );
    let (kind, number) = version.split_once(' ').expect("`KIND VERSION`");
    assert!(
        printed.starts_with(&format!("{kind} server v={number} ")),
        "{} --version printed {printed:?}, but the server it started says {version}",
        program.display()
    );
}
