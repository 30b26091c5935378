//! `metrics`'s own arguments: only the connection.

use clap::Args;

use super::connection::Connection;

#[derive(Debug, Args)]
pub struct Metrics {
    #[command(flatten)]
    pub connection: Connection,
}
