//! The parent's signal mask around the `clone`: every signal blocked while the child shares
//! our memory, then the mask as it was. The child's own unblocking is `launch`'s.

use std::ptr;

pub(super) fn block_all_signals() -> libc::sigset_t {
    // SAFETY: both sets live on this frame; sigfillset initialises `all` before use.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
        previous
    }
}

pub(super) fn restore_signals(previous: &libc::sigset_t) {
    // SAFETY: `previous` was filled by pthread_sigmask.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, previous, ptr::null_mut());
    }
}
