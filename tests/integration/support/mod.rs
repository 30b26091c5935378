//! Test fixtures, one module each, re-exported here so that a test module needs only
//! `use crate::support::*`:
//! - [`server`]: a private `redis-server` per test, and [`inspect`] to read what it holds;
//! - [`wrapper`]: the `redlock-run` command builder, run with a hard time limit;
//! - [`holder`]: the one holder fixture, a wrapper whose job holds its lock until let go;
//! - [`scripts`]: commands that run until stopped; [`tempdir`]: a directory per test;
//! - [`wait`], [`process`], [`load`]: waiting for events, `/proc`, and load on the machine;
//! - [`certs`]: TLS certificates for `rediss://`;
//! - [`exposition`]: a strict reader of the Prometheus text format (`metrics`), and
//!   [`stats`] the counters it reads, seeded by hand.
//!
//! The fixtures of a few test modules are reached by path instead: [`deployments`]
//! (Sentinel and Cluster), [`proxy`] (the fault proxy), [`history`] (the overlap checker)
//! and [`browser`] (`serve` and headless Chromium).
//!
//! Tests never skip: a missing `redis-server`, `redis-cli`, `openssl` or `script` is a hard
//! failure with an install hint, so a green run always means the suite really ran.
//!
//! What this module does not own: any knowledge of how the implementation talks to Redis
//! beyond the documented contract (key = prefix + key, value starts with the token).

use std::time::Duration;

pub mod browser;
mod certs;
pub mod deployments;
mod exposition;
pub mod history;
mod holder;
mod inspect;
mod load;
mod process;
pub mod proxy;
mod scripts;
mod server;
mod stats;
mod tempdir;
mod wait;
mod wrapper;

pub use certs::{make_certs, TlsFiles};
pub use exposition::Exposition;
pub use holder::{
    fence_of, handover_delay, handover_jobs, hold, parse_epoch, program_of, start_holding, Holder,
    Job,
};
pub use inspect::{assert_uuid_v4, is_record, token_of};
pub use load::{loading_the_machine, run_in_parallel, timing_sensitive};
pub use process::{
    children_of, ignored_signals_note, live_in_group, pgid_of, pid_alive, require, signal,
    with_default_signals,
};
pub use scripts::{sleeper, stubborn_script};
pub use server::{default_server_program, free_port, RedisServer, ServerOptions, SERVER_VAR};
pub use stats::stats_key;
pub use tempdir::TempDir;
pub use wait::{read_pid, wait_for_death, wait_until};
pub use wrapper::{Output, Running, Wrapper};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_redlock-run");

/// How long a single wrapper run may take before the test declares it hung.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// The default key prefix of the tool.
pub const PREFIX: &str = "redlock:";
