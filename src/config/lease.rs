//! The run's time under the lock, checked: the lease and its renewal, the grace before a
//! SIGKILL, how long the lock is kept or the command may run, the stop budget, and whether
//! a Redis that may evict the lock is used. The limits themselves are `crate::lease`'s.

use std::time::Duration;

use anyhow::{bail, Result};

use super::durations::{bounded, optional_positive};
use crate::backend::Eviction;
use crate::cli::lease::Lease;
use crate::lease;
use crate::report;

/// `--ttl`, and `--renew-every` (TTL/3 when not given) within what the lease allows.
pub(super) fn ttl_and_renewal(args: &Lease) -> Result<(Duration, Duration)> {
    let ttl = bounded("--ttl", &args.ttl, lease::MIN_TTL, lease::MAX_TTL)?;
    let renew_every = match &args.renew_every {
        Some(text) => bounded(
            "--renew-every",
            text,
            lease::MIN_RENEWAL_PERIOD,
            lease::MAX_TTL,
        )?,
        None => lease::default_renewal_period(ttl),
    };
    let longest = lease::max_renewal_period(ttl);
    if renew_every > longest {
        bail!(
            "invalid --renew-every: with --ttl {} it must be at least {} and at most {}, half \
             of what the lease surely lasts (the TTL less the clock-drift allowance), so \
             that a failed renewal can be retried before the lease runs out",
            humantime::format_duration(ttl),
            humantime::format_duration(lease::MIN_RENEWAL_PERIOD),
            report::duration(longest)
        );
    }
    Ok((ttl, renew_every))
}

/// `--kill-after`.
pub(super) fn kill_after(args: &Lease) -> Result<Duration> {
    bounded(
        "--kill-after",
        &args.kill_after,
        Duration::ZERO,
        lease::MAX_DURATION,
    )
}

/// `--min-hold`, `--max-runtime` and `--stop-timeout`, checked in that order.
pub(super) struct Bounds {
    pub(super) min_hold: Option<Duration>,
    pub(super) max_runtime: Option<Duration>,
    pub(super) stop_timeout: Option<Duration>,
}

pub(super) fn bounds(args: &Lease) -> Result<Bounds> {
    let min_hold = optional_positive(&args.min_hold, "--min-hold")?;
    let max_runtime = optional_positive(&args.max_runtime, "--max-runtime")?;
    // Zero is allowed: a caller whose grace period is shorter than any command's
    // clean-up may want the group killed at once.
    let stop_timeout = args
        .stop_timeout
        .as_deref()
        .map(|text| bounded("--stop-timeout", text, Duration::ZERO, lease::MAX_DURATION))
        .transpose()?;
    Ok(Bounds {
        min_hold,
        max_runtime,
        stop_timeout,
    })
}

/// Whether a Redis that may evict the lock is used anyway (`--allow-eviction`).
pub(super) fn eviction(args: &Lease) -> Eviction {
    if args.allow_eviction {
        Eviction::Allowed
    } else {
        Eviction::Refused
    }
}
