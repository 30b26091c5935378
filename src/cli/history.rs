//! `history`'s own arguments: the lock, how many events, their form, and --follow.

use clap::Args;

use super::connection::Connection;

#[derive(Debug, Args)]
pub struct History {
    /// Lock name
    ///
    /// As given to --key when the lock was taken; the Redis key is PREFIX + KEY, its
    /// history {PREFIX + KEY}:history.
    #[arg(short, long, value_name = "KEY")]
    pub key: std::ffi::OsString,

    /// How many of the last events to show, 1 to 10000
    ///
    /// 0 only with --follow: no past events, only new ones (as tail -n 0 -f). A history
    /// keeps no more events than its runs' --history allows (100 by default).
    #[arg(
        short = 'n',
        long,
        value_name = "N",
        default_value = "20",
        allow_negative_numbers = true
    )]
    pub lines: String,

    /// Print one JSON object a line instead of text
    ///
    /// Each with time (RFC 3339, UTC, milliseconds, as the JSON logs), time_ms, id (the
    /// stream entry's ID), event, key, and where they apply fence, exit_code, waited_ms,
    /// held_ms (numbers), token, host, pid, program, label and by. An entry another
    /// client wrote without an event has "event": null and its "fields"; fields that do
    /// not read as they should are named in "ill_formed".
    #[arg(long)]
    pub json: bool,

    /// After the last events, keep printing new ones as they are recorded, until
    /// interrupted
    ///
    /// A blocking read on each server (XREAD BLOCK), never polling; each read waits a
    /// little less than --redis-timeout before it is sent again. Ends with an error
    /// (125) when the server stops answering (with Redlock, when too few of them do).
    #[arg(short, long)]
    pub follow: bool,

    #[command(flatten)]
    pub connection: Connection,
}
