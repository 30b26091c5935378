//! The locks a run names: one `-k`, or several, held all at once or one of them (`--any`,
//! a pool), with the usage errors of several keys. Names become full keys here; the key set
//! itself is `backend::keyset`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use anyhow::{bail, Result};

use crate::backend::keyset::Mode;
use crate::backend::Key;

/// The run's locks: each name as given to `-k` and its full Redis key, in the order given.
#[derive(Debug, Clone)]
pub struct Locks {
    pub names: Vec<OsString>,
    pub keys: Vec<Key>,
    /// `None`: one key. With several, all of them (`All`) or a pool (`Any`).
    pub mode: Option<Mode>,
}

/// The keys, for messages: `redlock:db`, `redlock:db and redlock:cache`, `one of
/// redlock:s1, redlock:s2`.
impl std::fmt::Display for Locks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<String> = self.keys.iter().map(ToString::to_string).collect();
        match self.mode {
            None | Some(Mode::All) => f.write_str(&keys.join(" and ")),
            Some(Mode::Any) => write!(f, "one of {}", keys.join(", ")),
        }
    }
}

/// What a run asks for beside its keys that several keys may refuse.
#[derive(Debug, Default)]
pub struct Asked {
    pub any: bool,
    pub limit: u32,
    pub replace: bool,
    pub supersede: bool,
    pub fair: bool,
    pub once: bool,
    /// `--once-per` (also counted in `once`).
    pub once_per: bool,
    pub dry_run: bool,
    /// `-s/--shared`, `-x/--exclusive`.
    pub shared: bool,
    pub exclusive: bool,
}

/// Checks `--shared` against the rest of the run: what it cannot be combined with is
/// refused here, before any Redis command (docs/options.md).
pub fn shared(keys: usize, asked: &Asked) -> Result<()> {
    if asked.shared && asked.exclusive {
        bail!("--shared cannot be used with --exclusive: a run takes the lock in one mode");
    }
    if !asked.shared {
        return Ok(());
    }
    let refused = [
        (
            asked.limit > 1,
            "--limit above 1",
            "two ways of admitting several holders at once",
        ),
        (keys > 1, "several -k/--key", "a share is taken of one lock"),
        (
            asked.replace,
            "--replace",
            "there is no one holder to take over from",
        ),
        (
            asked.supersede,
            "--supersede",
            "shared waiters do not supersede one another",
        ),
        (
            asked.fair,
            "--fair",
            "shared waiters already start in the queue's order, behind any exclusive one",
        ),
        (
            asked.once_per,
            "--once-per",
            "its record is per firing; use --once ID",
        ),
        (
            asked.dry_run,
            "--dry-run",
            "it describes an exclusive attempt",
        ),
    ];
    if let Some((_, option, why)) = refused.iter().find(|(asked, _, _)| *asked) {
        bail!("--shared cannot be used with {option}: {why}");
    }
    Ok(())
}

/// Checks the names (each already a full key, `keys`) and what is asked beside them.
pub fn locks(names: Vec<OsString>, keys: Vec<Key>, asked: &Asked) -> Result<Locks> {
    if keys.len() < 2 {
        if asked.any {
            bail!("--any needs several -k/--key: it takes the first free lock among them");
        }
        return Ok(Locks {
            names,
            keys,
            mode: None,
        });
    }
    for (at, key) in keys.iter().enumerate() {
        if keys[..at].contains(key) {
            bail!("invalid -k/--key: {key} is named twice");
        }
    }
    if let Some(name) = names.iter().find(|name| name.as_bytes().contains(&b'\n')) {
        bail!(
            "invalid -k/--key: {} holds a line feed, and with several keys REDLOCK_KEYS gives \
             the command one key a line",
            Key::new(name.as_bytes())
        );
    }
    let several = if asked.any {
        "several -k/--key with --any"
    } else {
        "several -k/--key"
    };
    let refused = [
        (
            asked.limit > 1,
            "--limit above 1",
            "each key would be a semaphore of its own, with slots to match across them",
        ),
        (
            asked.replace,
            "--replace",
            "there is no one holder to take over from",
        ),
        (
            asked.supersede,
            "--supersede",
            "each key keeps its own registry of superseding waiters",
        ),
        (
            asked.fair,
            "--fair",
            "each key keeps its own queue, and waiters first in different queues would block \
             each other",
        ),
        (
            asked.once,
            "--once and --once-per",
            "the work would be recorded per key, and no one key says it was done",
        ),
        (asked.dry_run, "--dry-run", "it looks at one lock"),
    ];
    if let Some((_, option, why)) = refused.iter().find(|(asked, _, _)| *asked) {
        bail!("{option} cannot be used with {several}: {why}");
    }
    Ok(Locks {
        names,
        keys,
        mode: Some(if asked.any { Mode::Any } else { Mode::All }),
    })
}
