//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), one per kind of input that
//! comes from outside: the command line, Redis URLs, durations, lock values and key names
//! read back from Redis, and Redis replies. Each takes the fuzzer's bytes, feeds them to the
//! parsers the program uses, and asserts what must hold for any input, so that a fuzzer
//! finds broken promises as well as panics: no password in a printed form of a URL or in an
//! error, lock names and holders shown as one line of plain text, bounded durations within
//! their bounds, key names that map back to their lock. Not part of the program's
//! interface; nothing else calls it.

use std::ffi::OsString;
use std::time::Instant;

use redis::Value;

use crate::backend::inspect::{read_peek, LockView, NodeView, Verdict};
use crate::backend::{
    colocates, holds_secret, identity_in, key_slot, lock_of_internal_key, mask_url, master_address,
    parse_slots, redact_url, shown, sibling_key, split_urls, AcquireReply, Acquisition, Deployment,
    Extended, Holder, Key, Password, PeekReply, Sources,
};
use clap::CommandFactory;

use crate::cli::Cli;
use crate::config::{parse_duration, Task, Wait};
use crate::holder::{describe, Blocker};
use crate::lease;

mod command_line;
mod reply;
mod url;
mod values;

pub use command_line::command_line;
use command_line::{other, parse_command_line};
use reply::assert_plain_line;
pub use reply::redis_reply;
pub use url::url;
pub use values::{duration, lock_value};
