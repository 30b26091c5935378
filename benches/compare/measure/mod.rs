//! One module per measurement, each taking its figures from the tools through `Bench`:
//! startup (`--version`, `TOOL -- true`, the Redlock quorum), contended, handoff, peak RSS
//! and waiting; and the many-waiters section (`many/`), a run of its own. This module owns
//! what they share: the per-tool `Results` they fill in and the time limit on a single run.
//! Judging the figures is `report/`'s job, not theirs.

pub mod contended;
pub mod handoff;
pub mod many;
pub mod rss;
pub mod startup;
pub mod waiting;

use std::time::Duration;

use crate::measure::contended::Contended;
use crate::measure::startup::RedisPerRun;
use crate::measure::waiting::Waiting;
use crate::stats::Samples;

/// One tool's figures, indexed by `Tool as usize`; None where it was not measured.
#[derive(Default)]
pub struct Results {
    pub overhead: Option<Samples>,
    /// redlock-run only: what each of those runs cost its Redis.
    pub overhead_redis: Option<RedisPerRun>,
    pub contended: Option<Contended>,
    pub handoff: Option<Samples>,
    pub handoff_negative: usize,
    /// The least time by which a handoff waiter was started before the holder let go.
    pub waiter_lead: Option<Duration>,
    pub waiting: Option<Waiting>,
    pub rss_kib: Option<u64>,
    pub version: Option<Samples>,
}

pub fn phase(name: &str) {
    eprintln!("compare: {name}");
}

/// Far above any single run here, so it only stops a run that hangs.
pub const RUN_LIMIT: Duration = Duration::from_secs(60);
