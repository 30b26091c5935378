//! The integration suite: one test binary, one module per theme. Every test starts its own
//! `redis-server` (see `support`), so tests run in parallel and never skip.

mod acl;
mod cluster;
mod completions;
mod docs;
mod errors;
mod exclusion;
mod exit_codes;
mod faults;
mod history_command;
mod keys;
mod lease;
mod logs;
mod once;
mod operators;
mod pauses;
mod pid1;
mod redlock;
mod replace;
mod secrets;
mod sentinel;
mod servers;
mod signals;
mod stop_timeout;
mod supersede;
mod support;
mod terminal;
mod tls;
mod unusual_servers;
mod users;
mod waiters;
mod waiting;
