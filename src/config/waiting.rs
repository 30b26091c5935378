//! How a run waits, checked: how long (`--no-wait` beats REDLOCK_WAIT), how many may hold
//! the lock at once, and what a Redlock quorum cannot offer waiters (a limit, a fair queue).

use std::time::Duration;

use anyhow::{bail, Result};

use super::durations::bounded;
use crate::backend::{Deployment, MAX_LIMIT};
use crate::cli::waiting::Waiting;
use crate::lease;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Forever,
    /// Zero means "do not wait" (`--no-wait`).
    For(Duration),
}

/// `--wait` or `--no-wait`.
pub(super) fn wait(args: &Waiting) -> Result<Wait> {
    // --no-wait wins over a REDLOCK_WAIT in the environment; given together on the
    // command line, the later of --wait and --no-wait wins (see cli/mod.rs).
    let wait = match (&args.wait, args.no_wait) {
        (_, true) => Wait::For(Duration::ZERO),
        (None, false) => Wait::Forever,
        (Some(text), false) if matches!(text.trim(), "forever" | "inf" | "infinity") => {
            Wait::Forever
        }
        (Some(text), false) => Wait::For(bounded(
            "--wait",
            text,
            Duration::ZERO,
            lease::MAX_DURATION,
        )?),
    };
    Ok(wait)
}

/// `--limit`, 1 to [`MAX_LIMIT`].
pub(super) fn limit(args: &Waiting) -> Result<()> {
    if args.limit == 0 || args.limit > MAX_LIMIT {
        bail!("invalid --limit: it must be from 1 to {MAX_LIMIT}");
    }
    Ok(())
}

/// `--limit` above 1 on `redis`: refused over a quorum.
pub(super) fn limit_fits(args: &Waiting, redis: &Deployment) -> Result<()> {
    if redis.is_quorum() && args.limit > 1 {
        bail!(
            "--limit needs a single Redis deployment: over a Redlock quorum, holders that \
             each hold a majority of the nodes can still be more than the limit"
        );
    }
    Ok(())
}

/// `--fair` on `redis`: refused over a quorum.
pub(super) fn fair_fits(args: &Waiting, redis: &Deployment) -> Result<()> {
    if redis.is_quorum() && args.fair {
        bail!(
            "--fair needs a single Redis deployment: each Redlock node keeps its own queue, \
             and waiters at the head of different queues would block each other for ever"
        );
    }
    Ok(())
}
