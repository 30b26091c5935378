//! Seeding a lock's counters (`{K}:stats`) and holders by hand, as the documented data
//! model has them, for `metrics`, `check` and `status` to read: the runs that keep them
//! need not be the ones under test.
//!
//! What this module does not own: reading them back (the commands under test do).

use std::time::Duration;

use super::{RedisServer, PREFIX};

/// The counters of the lock `name` under the default prefix (a name without a hash tag).
pub fn stats_key(name: &str) -> String {
    format!("{{{PREFIX}{name}}}:stats")
}

impl RedisServer {
    /// The server's clock, in ms since the epoch.
    #[track_caller]
    pub fn server_ms(&self) -> u64 {
        let (seconds, micros): (u64, u64) = self.query(&["TIME"]);
        seconds * 1000 + micros / 1000
    }

    /// Sets fields of the counters of the lock `name`.
    #[track_caller]
    pub fn seed_stats(&self, name: &str, fields: &[(&str, String)]) {
        for (field, value) in fields {
            self.hset(&stats_key(name), field, value);
        }
    }

    /// Makes `host` pid `pid` the holder of the lock `name`, taken `held_for` ago by the
    /// server's clock and recorded in its counters (`slot:1`), as a run does. Returns the
    /// lock value.
    #[track_caller]
    pub fn seed_holder(&self, name: &str, host: &str, pid: u32, held_for: Duration) -> String {
        let since = self.server_ms() - held_for.as_millis() as u64;
        let value = format!(
            "{{\"token\":\"t-{pid}\",\"fence\":1,\"host\":\"{host}\",\"pid\":{pid},\
             \"program\":\"job.sh\",\"since_ms\":{since},\"ttl_ms\":30000,\"limit\":1}}"
        );
        self.query::<()>(&["SET", &format!("{PREFIX}{name}"), &value, "PX", "60000"]);
        self.seed_stats(name, &[("slot:1", format!("{since} {value}"))]);
        value
    }
}
