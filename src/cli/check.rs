//! `check`'s own arguments: the lock and the plugin's thresholds (each a warning and a
//! critical level). Checked in `config::check`.

use clap::Args;

use super::connection::Connection;

#[derive(Debug, Args)]
pub struct Check {
    /// Lock name
    ///
    /// As given to --key when the lock was taken; the Redis key is PREFIX + KEY.
    #[arg(short, long, value_name = "KEY")]
    pub key: std::ffi::OsString,

    /// CRITICAL when the current holder has held the lock longer than DUR
    ///
    /// A duration as for --ttl (500ms, 30s, 2h; a bare number is seconds), above 0 and
    /// at most ten years; measured by the Redis server's clock from the acquisition.
    #[arg(long, value_name = "DUR", allow_negative_numbers = true)]
    pub max_held: Option<String>,

    /// WARNING when the current holder has held the lock longer than DUR
    ///
    /// As --max-held; with both, it must not be longer than --max-held.
    #[arg(long, value_name = "DUR", allow_negative_numbers = true)]
    pub warn_held: Option<String>,

    /// CRITICAL at the N-th consecutive run that skipped its command (busy, --wait ran
    /// out, superseded; work found already done is not a skip)
    ///
    /// 1 to 1000000. The count is reset by a successful run; a failed run neither adds
    /// to it nor resets it. N is the same as --max-skips of a run's dead-man ping: the
    /// N-th consecutive skip is the alarm (so the performance data's threshold is N-1,
    /// the most skips that are still fine).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_skips: Option<String>,

    /// WARNING at the N-th consecutive run that did not run its command
    ///
    /// As --max-skips; with both, it must not be above --max-skips.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub warn_skips: Option<String>,

    /// CRITICAL when no run of the lock has succeeded for longer than DUR (or none ever
    /// has)
    ///
    /// A duration as for --max-held. A success is a run whose command exited 0 with the
    /// lock intact, at its release, by the Redis server's clock. A lock that no run has
    /// ever succeeded with (or a name no run ever used: a typo) is CRITICAL, "never
    /// succeeded".
    #[arg(long, value_name = "DUR", allow_negative_numbers = true)]
    pub max_since_success: Option<String>,

    /// WARNING when no run of the lock has succeeded for longer than DUR (or none ever
    /// has)
    ///
    /// As --max-since-success; with both, it must not be longer than
    /// --max-since-success.
    #[arg(long, value_name = "DUR", allow_negative_numbers = true)]
    pub warn_since_success: Option<String>,

    #[command(flatten)]
    pub connection: Connection,
}
