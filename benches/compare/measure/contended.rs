//! Contended rate: `clients` threads, each running lock/increment/unlock cycles back to
//! back under one tool, with a counter file that only mutual exclusion keeps right. It
//! owns the rate and the correctness check; the increment itself is `helper.rs`'s.

use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crate::measure::{phase, RUN_LIMIT};
use crate::procs::timed;
use crate::tools::{Bench, Tool};

#[derive(Default)]
pub struct Contended {
    pub elapsed: Duration,
    pub ok_cycles: usize,
    pub failed_cycles: usize,
    pub count: u64,
    pub expected: u64,
}

impl Contended {
    pub fn rate(&self) -> f64 {
        self.ok_cycles as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// A fast rate is worth nothing if two holders ever overlapped.
    pub fn correct(&self) -> bool {
        self.failed_cycles == 0 && self.count == self.expected
    }
}

/// `clients` threads, each running `cycles` lock/increment/unlock cycles back to back.
pub fn measure(bench: &Bench, tool: Tool, clients: usize, cycles: usize) -> Contended {
    phase(&format!(
        "contended: {} x {clients} clients x {cycles} cycles",
        tool.name()
    ));
    let counter = bench.path(&format!("counter-{}", tool.name()));
    if let Err(err) = fs::write(&counter, "0") {
        eprintln!("compare: {counter}: {err}");
        return Contended::default();
    }
    let key = "contended";
    let argv = bench.argv(tool, key, &bench.helper(&["incr", &counter]));
    let barrier = Arc::new(Barrier::new(clients + 1));
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let started = thread::scope(|scope| {
        for _ in 0..clients {
            let (barrier, ok, failed, argv) = (
                Arc::clone(&barrier),
                Arc::clone(&ok),
                Arc::clone(&failed),
                argv.clone(),
            );
            scope.spawn(move || {
                barrier.wait();
                for _ in 0..cycles {
                    let mut command = bench.plain(tool, &argv);
                    match timed(&mut command, RUN_LIMIT) {
                        Ok((true, _)) => ok.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    let elapsed = started.elapsed();
    let count = fs::read_to_string(&counter)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0);
    let result = Contended {
        elapsed,
        ok_cycles: ok.load(Ordering::Relaxed),
        failed_cycles: failed.load(Ordering::Relaxed),
        count,
        expected: (clients * cycles) as u64,
    };
    if result.failed_cycles > 0 {
        eprintln!(
            "compare: {} failed {} cycles; its log ends:\n    {}",
            tool.name(),
            result.failed_cycles,
            bench.log_tail(tool)
        );
    }
    result
}
