//! The integration suite: one test binary, one module per theme. Every test starts its own
//! `redis-server` (see `support`), so tests run in parallel and never skip.

mod cluster;
mod completions;
mod deployments;
mod errors;
mod exclusion;
mod exit_codes;
mod faults;
mod history;
mod lease;
mod operators;
mod proxy;
mod redlock;
mod sentinel;
mod signals;
mod support;
mod terminal;
mod tls;
