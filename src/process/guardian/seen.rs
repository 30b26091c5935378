//! The page of memory the guardian shares with redlock-run, on which it notes when it saw
//! the command's first process exit and whether it killed the group. What the guardian
//! does, and when it writes these notes, is in `guardian.rs`.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::process::clock::instant_at;

/// What the guardian saw, on a page shared with it: when (`now_ns`) the command's first
/// process exited, and when it killed the group at the lease's end; each 0 until then.
pub(super) type Notes = [AtomicU64; 2];
pub(super) const EXITED: usize = 0;
pub(super) const KILLED: usize = 1;

/// The shared page, mapped before the guardian is forked.
pub(super) struct Seen(NonNull<Notes>);

// SAFETY: the page is only ever accessed through its atomics.
unsafe impl Send for Seen {}
// SAFETY: as above.
unsafe impl Sync for Seen {}

impl Seen {
    /// A shared, zeroed page, inherited by the guardian's fork; `None` if it cannot be had
    /// (then exits are known only from when redlock-run hears of them).
    pub(super) fn map() -> Option<Seen> {
        // SAFETY: an anonymous mapping, no file; the result is checked.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Notes>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return None;
        }
        // A fresh anonymous mapping is zeroed and page-aligned: valid atomics of 0.
        NonNull::new(page.cast::<Notes>()).map(Seen)
    }

    pub(super) fn notes(&self) -> &Notes {
        // SAFETY: the mapping lives until `drop`, and holds the notes.
        unsafe { self.0.as_ref() }
    }

    /// A note, as an `Instant`, if it was made.
    pub(super) fn note(&self, which: usize) -> Option<Instant> {
        let at = self.notes()[which].load(Ordering::Acquire);
        (at != 0).then(|| instant_at(at))
    }
}

impl Drop for Seen {
    fn drop(&mut self) {
        // SAFETY: unmaps the page mapped in `map`, used by nothing after this.
        unsafe {
            libc::munmap(self.0.as_ptr().cast(), std::mem::size_of::<Notes>());
        }
    }
}
