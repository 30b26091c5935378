//! redlock-run as a library: the binary's `main` only parses, calls [`run::run`] and exits
//! with the outcome's code; everything else lives here so that unit tests and the
//! completions test can reach it. See the module docs for who owns what.

pub mod admin;
pub mod backend;
pub mod child;
pub mod cli;
pub mod config;
pub mod exit;
pub mod guardian;
pub mod holder;
pub mod quorum_admin;
pub mod random;
pub mod renew;
pub mod report;
pub mod run;
pub mod signals;
pub mod spawn;
pub mod supervise;
pub mod wait;
