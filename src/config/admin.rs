//! The subcommands' options, checked: each one's own (the lock's key, the form of the
//! output, `check`'s thresholds, `history -n`), then the connection they all share.

use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use anyhow::{bail, Result};

use super::check::Thresholds;
use super::connection::check_connection;
use super::key::{full_key, refuse_bookkeeping};
use crate::backend::{Deployment, Key};
use crate::cli::{self, Admin};
use crate::report;

/// `status`, `list` or `release`.
#[derive(Debug)]
pub struct AdminConfig {
    pub redis: Deployment,
    pub prefix: Key,
    pub redis_timeout: Duration,
    pub action: AdminAction,
}

#[derive(Debug, Clone)]
pub enum AdminAction {
    /// `key` is the full Redis key.
    Status {
        key: Key,
        json: bool,
    },
    List {
        json: bool,
    },
    Release {
        key: Key,
        force: bool,
    },
    Metrics,
    /// `check`: `key` is the full Redis key.
    Check {
        key: Key,
        thresholds: Thresholds,
    },
    /// `lines`: how many past events, at most `MAX_HISTORY_LINES` (0 only with `follow`).
    History {
        key: Key,
        lines: usize,
        json: bool,
        follow: bool,
    },
}

impl AdminConfig {
    pub(super) fn from_admin(admin: Admin) -> Result<AdminConfig> {
        let (connection, action) = match admin {
            Admin::Status(cli::status::Status {
                key,
                json,
                connection,
            }) => {
                let key = full_key(&connection.prefix, &key)?;
                (connection, AdminAction::Status { key, json })
            }
            Admin::List(cli::list::List { json, connection }) => {
                if connection.prefix.is_empty() {
                    bail!("list needs a --prefix: with '' it would list every key in the database");
                }
                (connection, AdminAction::List { json })
            }
            Admin::Release(cli::release::Release {
                key,
                force,
                connection,
            }) => {
                let key = full_key(&connection.prefix, &key)?;
                refuse_bookkeeping(&key)?;
                (connection, AdminAction::Release { key, force })
            }
            Admin::Metrics(cli::metrics::Metrics { connection }) => {
                if connection.prefix.is_empty() {
                    bail!(
                        "metrics needs a --prefix: with '' it would read every key in the \
                     database"
                    );
                }
                (connection, AdminAction::Metrics)
            }
            Admin::Check(args) => {
                let key = full_key(&args.connection.prefix, &args.key)?;
                let thresholds = Thresholds::from_args(&args)?;
                (args.connection, AdminAction::Check { key, thresholds })
            }
            Admin::Serve(_) => bail!("serve is not an admin subcommand (see Task::from_cli)"),
            Admin::History(cli::history::History {
                key,
                lines,
                json,
                follow,
                connection,
            }) => {
                let key = full_key(&connection.prefix, &key)?;
                let lines = history_lines(&lines, follow)?;
                (
                    connection,
                    AdminAction::History {
                        key,
                        lines,
                        json,
                        follow,
                    },
                )
            }
        };
        let (redis, redis_timeout) = check_connection(&connection)?;
        Ok(AdminConfig {
            redis,
            prefix: Key::new(connection.prefix.as_bytes()),
            redis_timeout,
            action,
        })
    }
}

/// `history -n`: 1 to `MAX_EVENTS`, or 0 with `--follow` (only new events).
fn history_lines(text: &str, follow: bool) -> Result<usize> {
    let max = crate::backend::history::MAX_EVENTS;
    let lines: usize = match text.trim().parse() {
        Ok(lines) => lines,
        Err(_) if !text.trim().is_empty() && text.trim().bytes().all(|b| b.is_ascii_digit()) => {
            usize::MAX
        }
        Err(_) => bail!(
            "invalid -n {:?}: it must be a number of events, from 1 to {max}",
            report::escape(text)
        ),
    };
    if lines > max {
        bail!("invalid -n {}: at most {max} events are shown", text.trim());
    }
    if lines == 0 && !follow {
        bail!(
            "invalid -n 0: it shows nothing; give 1 to {max}, or -n 0 with --follow for new \
             events only"
        );
    }
    Ok(lines)
}
