//! Durations as users write them (`500ms`, `30s`, `1m 30s`, or a bare number of seconds,
//! as `flock -w` takes it), each checked against the range its flag allows, so that no
//! later arithmetic on a deadline can overflow. The ranges themselves belong to `lease`.

use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::lease;

pub(super) fn optional_positive(text: &Option<String>, flag: &str) -> Result<Option<Duration>> {
    let Some(text) = text else {
        return Ok(None);
    };
    let duration = bounded(flag, text, Duration::ZERO, lease::MAX_DURATION)?;
    if duration.is_zero() {
        bail!("invalid {flag}: it must be above 0");
    }
    Ok(Some(duration))
}

/// The duration `text` given for `flag`, refused unless it is within `min..=max`.
pub(super) fn bounded(flag: &str, text: &str, min: Duration, max: Duration) -> Result<Duration> {
    let duration = parse_duration(text).with_context(|| format!("invalid {flag}"))?;
    if duration < min {
        bail!(
            "invalid {flag}: {} is shorter than the minimum of {}",
            humantime::format_duration(duration),
            humantime::format_duration(min)
        );
    }
    if duration > max {
        bail!(
            "invalid {flag}: {} is longer than the limit of {}",
            humantime::format_duration(duration),
            humantime::format_duration(max)
        );
    }
    Ok(duration)
}

/// A humantime duration (`500ms`, `30s`, `1m 30s`), or a bare number of seconds as flock -w
/// takes it (`30`, `0.5`).
pub fn parse_duration(text: &str) -> Result<Duration> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds)
            .with_context(|| format!("{text:?} is not a duration"));
    }
    humantime::parse_duration(text).with_context(|| {
        format!("{text:?} is not a duration (use e.g. 500ms, 30s, 5m, or seconds as a number)")
    })
}
