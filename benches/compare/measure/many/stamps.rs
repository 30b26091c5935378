//! What the stamps file of one many-waiters case says: every command run under the lock
//! appended `IDX START END PID` (CLOCK_REALTIME ns; holders have a negative IDX). It owns
//! the arithmetic over those intervals (overlaps, handoff gaps, drain, waits, order), not
//! how they were written (`helper.rs`) or judged (`report/`).

use std::fs;
use std::time::Duration;

use crate::stats::Samples;
use crate::Result;

/// One command's time under the lock.
#[derive(Clone, Copy)]
pub struct Interval {
    /// The waiter's spawn order; holders are -1, -2, ...
    pub idx: i64,
    pub start: u128,
    pub end: u128,
}

pub fn read(path: &str) -> Result<Vec<Interval>> {
    let text = fs::read_to_string(path).map_err(|err| format!("{path}: {err}"))?;
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let parsed = match fields.as_slice() {
                [idx, start, end, _pid] => idx
                    .parse()
                    .ok()
                    .zip(start.parse().ok())
                    .zip(end.parse().ok())
                    .map(|((idx, start), end)| Interval { idx, start, end }),
                _ => None,
            };
            parsed.ok_or_else(|| format!("{path}: bad line {line:?}"))
        })
        .collect()
}

/// The figures of one case that come from its stamps.
pub struct Analysis {
    /// Waiters whose command ran (a line with IDX >= 0).
    pub ran: usize,
    /// Starts at which more than `slots` commands were running at once.
    pub overlaps: usize,
    pub max_concurrent: usize,
    /// The k-th waiter start minus the k-th end (holders' included): how long a freed slot
    /// stayed empty. With one slot, the end of one holder to the start of the next.
    pub gaps: Samples,
    /// The first holder's end to the last waiter's end.
    pub drain: Option<Duration>,
    /// Spawn to start, per waiter.
    pub waits: Samples,
    /// Waiters whose place in the order of starts is not their place in spawn order.
    pub out_of_order: usize,
}

fn nanos(d: u128) -> Duration {
    Duration::from_nanos(u64::try_from(d).unwrap_or(u64::MAX))
}

/// `spawned[i]`: when waiter i was spawned (ns); `slots`: how many may hold at once.
pub fn analyse(intervals: &[Interval], spawned: &[u128], slots: usize) -> Analysis {
    // Sweep: at equal times an end comes before a start (a handoff within one tick of the
    // clock is not an overlap).
    let mut events: Vec<(u128, bool)> = intervals
        .iter()
        .flat_map(|i| [(i.start, true), (i.end, false)])
        .collect();
    events.sort_unstable();
    let (mut running, mut max_concurrent, mut overlaps) = (0usize, 0usize, 0usize);
    for (_, is_start) in events {
        if is_start {
            running += 1;
            max_concurrent = max_concurrent.max(running);
            overlaps += usize::from(running > slots);
        } else {
            running = running.saturating_sub(1);
        }
    }

    let mut waiters: Vec<&Interval> = intervals.iter().filter(|i| i.idx >= 0).collect();
    waiters.sort_by_key(|i| i.start);
    let mut ends: Vec<u128> = intervals.iter().map(|i| i.end).collect();
    ends.sort_unstable();
    let mut gaps = Samples::default();
    for (waiter, end) in waiters.iter().zip(&ends) {
        // A start before its slot was freed is an overlap, counted above.
        gaps.push(
            waiter.start >= *end,
            nanos(waiter.start.saturating_sub(*end)),
        );
    }

    let first_release = intervals.iter().filter(|i| i.idx < 0).map(|i| i.end).min();
    let last_end = waiters.iter().map(|i| i.end).max();
    let drain = first_release
        .zip(last_end)
        .map(|(from, to)| nanos(to.saturating_sub(from)));

    let mut waits = Samples::default();
    for waiter in &waiters {
        if let Some(&at) = spawned.get(waiter.idx as usize) {
            waits.push(true, nanos(waiter.start.saturating_sub(at)));
        }
    }
    let out_of_order = waiters
        .iter()
        .enumerate()
        .filter(|(place, waiter)| waiter.idx as usize != *place)
        .count();
    Analysis {
        ran: waiters.len(),
        overlaps,
        max_concurrent,
        gaps,
        drain,
        waits,
        out_of_order,
    }
}
