//! Samples of one timed thing, their nearest-rank percentiles, and how a duration is
//! printed. It owns arithmetic over samples only; what was timed is the measurement's.

use std::time::Duration;

use crate::json::Json;

#[derive(Clone, Default)]
pub struct Samples {
    values: Vec<Duration>,
    pub failures: usize,
}

impl Samples {
    pub fn push(&mut self, ok: bool, value: Duration) {
        if ok {
            self.values.push(value);
        } else {
            self.failures += 1;
        }
    }

    /// Nearest-rank percentile (p in 0..=100); None without samples.
    pub fn pct(&self, p: f64) -> Option<Duration> {
        if self.values.is_empty() {
            return None;
        }
        let mut sorted = self.values.clone();
        sorted.sort();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
        Some(sorted[rank.min(sorted.len()) - 1])
    }

    pub fn mean(&self) -> Option<Duration> {
        let n = u32::try_from(self.values.len()).ok().filter(|&n| n > 0)?;
        Some(self.values.iter().sum::<Duration>() / n)
    }

    pub fn p50(&self) -> Option<Duration> {
        self.pct(50.0)
    }

    pub fn json(&self) -> Json {
        let ms = |d: Option<Duration>| d.map_or(Json::Null, |d| Json::Num(millis(d)));
        Json::obj([
            ("samples", Json::Int(self.values.len() as i64)),
            ("failures", Json::Int(self.failures as i64)),
            ("min_ms", ms(self.pct(0.0))),
            ("p50_ms", ms(self.p50())),
            ("p90_ms", ms(self.pct(90.0))),
            ("p99_ms", ms(self.pct(99.0))),
            ("max_ms", ms(self.pct(100.0))),
        ])
    }
}

pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn fmt_ms(d: Duration) -> String {
    let ms = millis(d);
    if ms < 10.0 {
        format!("{ms:.3} ms")
    } else if ms < 100.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}
