//! `release`'s own arguments: the lock to remove, and the --force it takes.

use clap::Args;

use super::connection::Connection;

#[derive(Debug, Args)]
pub struct Release {
    /// Lock name
    ///
    /// As given to --key when the lock was taken; the Redis key is PREFIX + KEY.
    #[arg(short, long, value_name = "KEY")]
    pub key: std::ffi::OsString,

    /// Required: releasing someone else's lock lets a second holder in
    ///
    /// The holder may still be running its command when the next one starts. Leftovers
    /// of a failed or lost attempt (nobody holds the lock) are deleted only with --force.
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub connection: Connection,
}
