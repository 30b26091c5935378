//! Whether the command runs at all, checked: --supersede and --replace (against the wait,
//! the limit and each other), --once, --once-per and --remember.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{bail, Result};

use super::durations::{bounded, optional_positive};
use super::Wait;
use crate::backend::Once;
use crate::cli::policies::Policies;
use crate::lease;

/// `--supersede` with a wait of 0.
pub(super) fn supersede_needs_a_wait(args: &Policies, wait: Wait) -> Result<()> {
    // Superseding is something that happens to a waiter: a run that never waits cannot
    // give way, and asking for both is a mistake worth saying (REDLOCK_WAIT=0 too).
    if args.supersede && wait == Wait::For(Duration::ZERO) {
        bail!(
            "--supersede cannot be used with --no-wait (or a --wait of 0): only a run that \
             waits for the lock can be superseded by a newer one"
        );
    }
    Ok(())
}

/// `--supersede`, `--replace` and a `--limit` or a wait they cannot have.
pub(super) fn takeover(args: &Policies, limit: u32, wait: Wait) -> Result<()> {
    // A replacing run is served next, ahead of every waiter, and has asked the holder to
    // stop: a newer run that dropped it would have ended that command for nothing, and
    // a run that is first in line has nobody to overtake. Either alone is clear.
    if args.supersede && args.replace {
        bail!(
            "--supersede cannot be used with --replace: a replacing run is served next and \
             has already asked the holder to stop, so no newer run may drop it; use \
             --replace to stop the running command, or --supersede to coalesce waiters"
        );
    }
    if args.replace && limit > 1 {
        bail!(
            "--replace needs --limit 1: with several holders there is no one holder to \
             take over from"
        );
    }
    if args.replace && wait == Wait::For(Duration::ZERO) {
        bail!(
            "--replace needs to wait for the holder to let go: give --wait DUR (or none, to \
             wait as long as it takes) instead of --no-wait or --wait 0"
        );
    }
    Ok(())
}

/// Longest `--once` ID, in bytes: it is stored as a field beside the lock.
const MAX_ONCE_ID_LEN: usize = 256;
/// How long a `--once` record lasts without `--remember`.
const DEFAULT_REMEMBER: Duration = Duration::from_secs(7 * 24 * 3600);

/// `--once`, `--once-per` and `--remember`, checked.
pub(super) fn once(
    id: &Option<OsString>,
    per: &Option<String>,
    remember: &Option<String>,
    limit: u32,
) -> Result<Once> {
    let id = match id {
        None => None,
        Some(id) => {
            let Some(text) = id.to_str() else {
                bail!(
                    "invalid --once: it is not valid UTF-8; an ID is 1 to {MAX_ONCE_ID_LEN} \
                     bytes of UTF-8 text"
                );
            };
            if text.is_empty() || text.len() > MAX_ONCE_ID_LEN {
                bail!(
                    "invalid --once: it is {} bytes long; an ID is 1 to {MAX_ONCE_ID_LEN} bytes \
                     of UTF-8 text",
                    text.len()
                );
            }
            Some(text.to_string())
        }
    };
    let per = match per {
        None => None,
        Some(text) => Some(bounded(
            "--once-per",
            text,
            Duration::from_secs(1),
            lease::MAX_DURATION,
        )?),
    };
    let once = Once {
        id,
        per,
        remember: optional_positive(remember, "--remember")?.unwrap_or(DEFAULT_REMEMBER),
    };
    if remember.is_some() && !once.is_on() {
        bail!("--remember needs --once or --once-per: it says how long their record lasts");
    }
    if let (Some(per), true) = (once.per, remember.is_some()) {
        if once.remember < per {
            bail!(
                "--remember must be at least --once-per's DUR ({}): a shorter record would be \
                 forgotten before the runs of the same firing have looked for it",
                humantime::format_duration(per)
            );
        }
    }
    if once.is_on() && limit > 1 {
        bail!(
            "--once and --once-per need --limit 1: with several holders at once, the same \
             work could run twice before either records it"
        );
    }
    Ok(once)
}
