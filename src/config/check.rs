//! `check`'s thresholds, checked: a warning and a critical level of each measure, the
//! warning never above the critical one.

use std::time::Duration;

use anyhow::{bail, Result};

use super::durations::optional_positive;
use super::MAX_SKIPS;
use crate::cli::check::Check;
use crate::report;

/// The levels of `check`: each a (warning, critical) pair, either or both absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Thresholds {
    pub held: Levels<Duration>,
    pub skips: Levels<u64>,
    pub since_success: Levels<Duration>,
}

/// A warning level and a critical level; a warning is never above the critical level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Levels<T> {
    pub warn: Option<T>,
    pub crit: Option<T>,
}

impl Thresholds {
    /// `check`'s levels, each pair in the order the options are listed.
    pub(super) fn from_args(args: &Check) -> Result<Thresholds> {
        let Check {
            max_held,
            warn_held,
            max_skips,
            warn_skips,
            max_since_success,
            warn_since_success,
            ..
        } = args;
        Ok(Thresholds {
            held: duration_levels(("--warn-held", warn_held), ("--max-held", max_held))?,
            skips: levels(
                ("--warn-skips", warn_skips),
                ("--max-skips", max_skips),
                skips,
            )?,
            since_success: duration_levels(
                ("--warn-since-success", warn_since_success),
                ("--max-since-success", max_since_success),
            )?,
        })
    }
}

/// A warning and a critical level of `check`, each read by `parse`, the warning never
/// above the critical one.
fn levels<T: PartialOrd + Copy>(
    (warn_flag, warn): (&str, &Option<String>),
    (crit_flag, crit): (&str, &Option<String>),
    parse: impl Fn(&str, &str) -> Result<T>,
) -> Result<Levels<T>> {
    let warn = warn
        .as_deref()
        .map(|text| parse(warn_flag, text))
        .transpose()?;
    let crit = crit
        .as_deref()
        .map(|text| parse(crit_flag, text))
        .transpose()?;
    if let (Some(w), Some(c)) = (warn, crit) {
        if w > c {
            bail!("invalid {warn_flag}: the warning level is above {crit_flag}, the critical one");
        }
    }
    Ok(Levels { warn, crit })
}

fn duration_levels(
    warn: (&str, &Option<String>),
    crit: (&str, &Option<String>),
) -> Result<Levels<Duration>> {
    levels(warn, crit, |flag, text| {
        Ok(optional_positive(&Some(text.to_string()), flag)?.unwrap_or_default())
    })
}

/// A count of consecutive skips, 1 to [`MAX_SKIPS`].
fn skips(flag: &str, text: &str) -> Result<u64> {
    let count: u64 = text.trim().parse().map_err(|_| {
        anyhow::anyhow!(
            "invalid {flag}: {:?} is not a whole number of skips",
            report::escape(text)
        )
    })?;
    if !(1..=MAX_SKIPS).contains(&count) {
        bail!("invalid {flag}: {count} is not from 1 to {MAX_SKIPS}");
    }
    Ok(count)
}
