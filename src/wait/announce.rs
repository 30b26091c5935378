//! Naming the holder on stderr during a wait (a terminal, `-v`): the `Announcer`. When the
//! wait looks at the lock again is the `Pacing`'s to say, not its.

use std::time::{Duration, Instant};

use crate::backend::Key;
use crate::holder::Blocker;
use crate::report;

/// How long a wait lasts before the holder is named.
const ANNOUNCE_AFTER: Duration = Duration::from_secs(1);

/// Names the holder on stderr once a wait has lasted a second, and again each time the
/// holder changes; never in a loop.
pub(super) struct Announcer {
    enabled: bool,
    due: Instant,
    /// What the last attempt that reached Redis found; `None` before one did.
    pub(super) blocker: Option<Blocker>,
    /// Who was last named, so a renewal (same holder) says nothing new.
    named: Option<(Option<String>, bool)>,
}

impl Announcer {
    pub(super) fn new(enabled: bool, started: Instant, blocker: Option<Blocker>) -> Announcer {
        Announcer {
            enabled,
            due: started + ANNOUNCE_AFTER,
            blocker,
            named: None,
        }
    }

    pub(super) fn blocked_by(&mut self, blocker: Blocker) {
        self.blocker = Some(blocker);
    }

    /// When it next needs to wake up to speak, if ever.
    pub(super) fn due_at(&self) -> Option<Instant> {
        (self.enabled && self.named.is_none()).then_some(self.due)
    }

    pub(super) fn speak_if_due(&mut self, key: &Key, now: Instant) {
        let Some(blocker) = self
            .blocker
            .as_ref()
            .filter(|_| self.enabled && now >= self.due)
        else {
            return;
        };
        let who = blocker.identity();
        if self.named.as_ref() == Some(&who) {
            return;
        }
        report::waiting(format_args!("waiting for {key}: {}", blocker.phrase()));
        self.named = Some(who);
    }
}
