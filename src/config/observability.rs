//! What others see of a run, checked: its --label, the dead-man --ping and its
//! --max-skips.

use anyhow::{bail, Result};

use crate::backend::MAX_LABEL_LEN;
use crate::cli::observability::Observability;
use crate::ping::{PingConfig, PingUrl};

/// The most consecutive skips `--max-skips` (a run's and `check`'s) and `--warn-skips` take:
/// a higher count is a mistake, not a schedule.
pub const MAX_SKIPS: u64 = 1_000_000;

/// `--label`, at most [`MAX_LABEL_LEN`] bytes.
pub(super) fn label(args: &Observability) -> Result<()> {
    if let Some(label) = &args.label {
        if label.len() > MAX_LABEL_LEN {
            bail!(
                "invalid --label: it is {} bytes long; the limit is {MAX_LABEL_LEN}",
                label.len()
            );
        }
    }
    Ok(())
}

/// `--ping` and `--max-skips`, checked; no error quotes the URL.
pub(super) fn ping(
    url: Option<&str>,
    max_skips: Option<u64>,
    typed: bool,
) -> Result<Option<Box<PingConfig>>> {
    if let Some(n) = max_skips {
        if !(1..=MAX_SKIPS).contains(&n) {
            bail!("invalid --max-skips: it must be from 1 to {MAX_SKIPS}");
        }
    }
    // An empty REDLOCK_PING is no ping, as an empty REDLOCK_PASSWORD is no password.
    let Some(url) = url.filter(|url| !url.is_empty()) else {
        if max_skips.is_some() {
            bail!(
                "--max-skips needs --ping (or REDLOCK_PING): it says when a skipped run pings \
                 URL/fail"
            );
        }
        return Ok(None);
    };
    Ok(Some(Box::new(PingConfig {
        url: PingUrl::parse(url)?,
        max_skips,
        typed,
    })))
}
