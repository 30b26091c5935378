//! redlock-run as a library: the binary's `main` only parses, calls [`run::run`],
//! [`dry_run::run`] or [`admin::run`] and ends with the [`exit::Outcome`]; everything else lives here so that
//! unit tests and the completions test can reach it. Only what the binary and the tests use
//! is public; see each module's doc for what it owns.
//!
//! ```text
//! cli -> config -> run (wait, renew, supervise) -> exit
//!               \-> dry_run (--dry-run: what a run would do)
//!               \-> admin (status, list, release; metrics; check)
//!               \-> serve (HTTP: the board, /api, /metrics; reads as admin does)
//! admin, dry_run -> describe (a lock's state in words and JSON)
//! run, wait, renew, supervise -> event <- signals, process
//! backend (Redis only), process (processes only), lease (time only), report (stderr only)
//! ```

pub mod admin;
pub mod cli;
pub mod config;
pub mod dry_run;
pub mod exit;
pub mod report;
pub mod run;
pub mod serve;

/// For the fuzz targets in `fuzz/` only: entry points into the parsers above.
#[doc(hidden)]
pub mod fuzzing;

mod backend;
mod describe;
mod event;
mod holder;
mod lease;
mod ping;
mod process;
mod random;
mod renew;
mod signals;
mod supervise;
mod wait;
