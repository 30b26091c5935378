//! Handoff latency: a holder holds, stamps and exits; a waiter queued behind it stamps as
//! its command starts; the gap is the time the lock took to change hands. It owns those
//! samples and the overlap count (a waiter that started before the holder ended); the
//! stamps are written by `helper.rs`.

use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::helper::realtime_ns;
use crate::measure::{phase, Results, RUN_LIMIT};
use crate::procs::{wait_until, Proc};
use crate::stats::{fmt_ms, Samples};
use crate::tools::{Bench, Tool};
use crate::Result;

/// One handoff: a holder holds for `hold`, stamps and exits; a waiter queued behind it
/// stamps as soon as its command starts. Returns waiter stamp - holder stamp, and how long
/// before the holder's stamp the waiter was started (it must be queued by then).
fn handoff_once(bench: &Bench, tool: Tool, hold: Duration, i: usize) -> Result<(i128, i128)> {
    let tag = format!("{}-{i}", tool.name());
    let (marker, holder_stamp, waiter_stamp) = (
        bench.path(&format!("held-{tag}")),
        bench.path(&format!("a-{tag}")),
        bench.path(&format!("b-{tag}")),
    );
    let hold_ms = hold.as_millis().to_string();
    let holder_cmd = bench.helper(&["hold", &marker, &holder_stamp, &hold_ms]);
    let mut holder = Proc::spawn(&mut bench.command(tool, "handoff", &holder_cmd), RUN_LIMIT)?;
    let held = wait_until(Duration::from_secs(10), Duration::from_millis(1), || {
        Path::new(&marker).exists()
    });
    if !held {
        return Err("the holder never got the lock".into());
    }
    let waiter_cmd = bench.helper(&["stamp", &waiter_stamp]);
    let mut waiter = Proc::spawn(&mut bench.command(tool, "handoff", &waiter_cmd), RUN_LIMIT)?;
    let waiter_spawned = realtime_ns() as i128;
    let (holder_status, _) = holder.wait()?;
    let (waiter_status, _) = waiter.wait()?;
    if !holder_status.success() || !waiter_status.success() {
        return Err(format!("exit {holder_status} / {waiter_status}"));
    }
    let read = |path: &str| -> Result<i128> {
        let text = fs::read_to_string(path).map_err(|err| format!("{path}: {err}"))?;
        text.trim().parse().map_err(|_| format!("{path}: {text:?}"))
    };
    let (released, started) = (read(&holder_stamp)?, read(&waiter_stamp)?);
    for path in [&marker, &holder_stamp, &waiter_stamp] {
        let _ = fs::remove_file(path);
    }
    Ok((started - released, released - waiter_spawned))
}

pub fn measure(bench: &Bench, samples: usize, hold: Duration, results: &mut [Results; 4]) {
    phase(&format!(
        "handoff: {samples} samples per tool, holder holds {}",
        fmt_ms(hold)
    ));
    let tools = bench.tools();
    for &tool in &tools {
        results[tool as usize].handoff = Some(Samples::default());
    }
    for i in 0..samples {
        for &tool in &tools {
            let result = &mut results[tool as usize];
            let samples = result.handoff.get_or_insert_with(Samples::default);
            match handoff_once(bench, tool, hold, i) {
                Ok((gap, lead)) if gap >= 0 => {
                    samples.push(true, Duration::from_nanos(gap as u64));
                    let lead = Duration::from_nanos(lead.max(0) as u64);
                    result.waiter_lead = Some(result.waiter_lead.map_or(lead, |l| l.min(lead)));
                }
                Ok(_) => {
                    // The waiter's command started before the holder's ended.
                    result.handoff_negative += 1;
                    samples.push(false, Duration::ZERO);
                }
                Err(err) => {
                    if samples.failures == 0 {
                        eprintln!("compare: {} handoff failed: {err}", tool.name());
                    }
                    samples.push(false, Duration::ZERO);
                }
            }
        }
    }
}
