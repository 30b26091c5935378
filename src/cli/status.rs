//! `status`'s own arguments: the lock to show and the output's form.

use clap::Args;

use super::connection::Connection;

#[derive(Debug, Args)]
pub struct Status {
    /// Lock name
    ///
    /// As given to --key when the lock was taken; the Redis key is PREFIX + KEY.
    #[arg(short, long, value_name = "KEY")]
    pub key: std::ffi::OsString,

    /// Print one JSON object instead of a line
    ///
    /// {"held": …, "key": …, "holders": [{"host", "pid", "program", "label", "token",
    /// "fence", "held_for_ms", "since_ms", "ttl_ms", "known", …}]}; "known" is false for
    /// a value redlock-run did not write. When runs keep counters for the lock:
    /// "last_success_ms" (server time; null before the first success) and
    /// "consecutive_skips".
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub connection: Connection,
}
