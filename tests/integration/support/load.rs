//! Load on a small machine: the lock that keeps tests which load it (dozens of wrappers at
//! once) apart from tests whose margins a loaded machine could eat, and the runner those
//! loading tests use.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;

use super::Wrapper;

/// Tests that load the machine (dozens of wrappers at once) hold this exclusively; tests whose
/// assertions rest on margins of tens of milliseconds hold it shared. The two kinds then
/// never run at the same time; timing-sensitive tests still run in parallel with each other,
/// and every test with those that take neither.
static LOAD: RwLock<()> = RwLock::new(());

/// Taken by a test that loads the machine, for as long as it does.
pub fn loading_the_machine() -> RwLockWriteGuard<'static, ()> {
    LOAD.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Taken by a test whose timing margins a loaded machine could eat.
pub fn timing_sensitive() -> RwLockReadGuard<'static, ()> {
    LOAD.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `workers` threads at once, each running `wrapper()` to completion `rounds` times
/// (each run within the time limit `wrapper()` sets) and asserting exit 0 every time.
pub fn run_in_parallel(
    workers: usize,
    rounds: usize,
    wrapper: impl Fn() -> Wrapper + Send + Sync + 'static,
) {
    let wrapper = Arc::new(wrapper);
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let wrapper = Arc::clone(&wrapper);
            thread::spawn(move || {
                for _ in 0..rounds {
                    wrapper().run().assert_code(0);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a worker thread failed");
    }
}
