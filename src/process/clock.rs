//! The monotonic clock in nanoseconds, for the code that may not allocate or take locks (the
//! guardian, the command's process before `exec`): an `Instant` turned into a number once
//! by the parent, and compared with `now_ns` by the child. std's `Instant` is
//! `CLOCK_MONOTONIC` on Linux, so both read the same clock.

use std::time::{Duration, Instant};

/// The monotonic clock that `Instant` reads, in nanoseconds.
pub(super) fn now_ns() -> u64 {
    // SAFETY: an all-zero timespec is valid for clock_gettime to overwrite.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `now` is a valid place to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// `at` on the monotonic clock, in nanoseconds (std's `Instant` is CLOCK_MONOTONIC on Linux).
pub(super) fn monotonic_ns(at: Instant) -> u64 {
    let (reference, reference_ns) = (Instant::now(), now_ns());
    if at >= reference {
        reference_ns.saturating_add((at - reference).as_nanos() as u64)
    } else {
        reference_ns.saturating_sub((reference - at).as_nanos() as u64)
    }
}

/// The `Instant` that `ns` on the monotonic clock stands for (the reverse of
/// [`monotonic_ns`]); one too far back to be an `Instant` is taken as now, which is later.
pub(super) fn instant_at(ns: u64) -> Instant {
    let (reference, reference_ns) = (Instant::now(), now_ns());
    if ns >= reference_ns {
        reference + Duration::from_nanos(ns - reference_ns)
    } else {
        reference
            .checked_sub(Duration::from_nanos(reference_ns - ns))
            .unwrap_or(reference)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_and_nanoseconds_convert_both_ways() {
        let now = Instant::now();
        for at in [
            now,
            now + Duration::from_secs(5),
            now - Duration::from_millis(3),
        ] {
            let back = instant_at(monotonic_ns(at));
            let off = if back > at { back - at } else { at - back };
            // Two readings of the clock each way: a few microseconds at most.
            assert!(off < Duration::from_millis(1), "{off:?}");
        }
        // Further back than the clock goes: now, never earlier.
        assert!(instant_at(0) <= Instant::now());
    }
}
