//! `serve`'s own arguments: where to listen, and the credentials a client must give.

use clap::Args;

use super::connection::Connection;

/// The address `serve` listens on by default: loopback, on a port from Prometheus' list of
/// exporter ports (see docs/monitoring.md for how it was chosen).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9110";

#[derive(Debug, Args)]
pub struct Serve {
    /// Address and port to listen on (HTTP): ADDR:PORT, [IPV6]:PORT; port 0 picks a free
    /// port, logged at start
    ///
    /// The default is loopback only. On any other address every client that can reach it
    /// reads every lock's holder, host, pid and label: give --auth-file (redlock-run warns
    /// without it), or put the server behind a proxy that authenticates.
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN)]
    pub listen: String,

    /// Ask every client for HTTP basic credentials: the first line of FILE, as user:password
    ///
    /// Read like --password-file (the first line, at most 64 KiB, a warning when every user
    /// may read the file). The credentials are compared in constant time; a client without
    /// them, or with wrong ones, gets 401.
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub connection: Connection,
}
