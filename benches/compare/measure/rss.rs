//! Peak RSS of each wrapper, as holder and as waiter, from GNU time's %M, beside the floor
//! of a bare `sleep`. It owns reading those figures; it is skipped (by the caller) when
//! /usr/bin/time is missing.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::thread;
use std::time::Duration;

use crate::measure::{phase, RUN_LIMIT};
use crate::procs::{timed, Proc};
use crate::tools::{os, Bench, Tool};

/// Peak RSS (KiB) per /usr/bin/time's %M, i.e. wait4's ru_maxrss: the larger of the
/// wrapper and its reaped children, which here are `true` and `sleep` (about 1 MiB).
pub fn measure(bench: &Bench, reps: usize) -> (BTreeMap<&'static str, u64>, u64) {
    phase("peak RSS");
    let mut peaks: BTreeMap<&'static str, u64> = BTreeMap::new();
    let timed_argv = |out: &str, argv: Vec<OsString>| -> Vec<OsString> {
        let mut full = os(&["/usr/bin/time", "-f", "%M", "-o", out]);
        full.extend(argv);
        full
    };
    let read_kib = |path: &str| -> Option<u64> {
        let text = fs::read_to_string(path).ok()?;
        text.lines().last()?.trim().parse().ok()
    };
    // The floor: a bare sleep, the biggest of the commands run under the wrappers.
    let floor_out = bench.path("rss-floor");
    let floor_argv = timed_argv(&floor_out, os(&["sleep", "0.05"]));
    let _ = timed(&mut bench.plain(Tool::Flock, &floor_argv), RUN_LIMIT);
    let floor = read_kib(&floor_out).unwrap_or(0);
    for tool in bench.tools() {
        for rep in 0..reps {
            let (holder_out, waiter_out) = (
                bench.path(&format!("rss-h-{}-{rep}", tool.name())),
                bench.path(&format!("rss-w-{}-{rep}", tool.name())),
            );
            let holder_argv =
                timed_argv(&holder_out, bench.argv(tool, "rss", &os(&["sleep", "0.3"])));
            let waiter_argv = timed_argv(&waiter_out, bench.argv(tool, "rss", &os(&["true"])));
            let Ok(mut holder) = Proc::spawn(&mut bench.plain(tool, &holder_argv), RUN_LIMIT)
            else {
                continue;
            };
            thread::sleep(Duration::from_millis(100));
            if let Ok(mut waiter) = Proc::spawn(&mut bench.plain(tool, &waiter_argv), RUN_LIMIT) {
                let _ = waiter.wait();
            }
            let _ = holder.wait();
            for out in [&holder_out, &waiter_out] {
                if let Some(kib) = read_kib(out) {
                    let peak = peaks.entry(tool.name()).or_insert(0);
                    *peak = (*peak).max(kib);
                }
            }
        }
    }
    (peaks, floor)
}
