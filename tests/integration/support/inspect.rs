//! Reading what a test's Redis holds, over the fixture's own connection: keys and their
//! TTLs, command statistics, connected clients, and the token in a stored lock value.
//! Every helper fails the test on a Redis error, naming the command.
//!
//! What this module does not own: any knowledge of the stored value beyond the documented
//! contract (key = prefix + key, value starts with the token).

use super::{RedisServer, PREFIX};

impl RedisServer {
    /// Any command, for state the other helpers do not cover (hashes, lists).
    #[track_caller]
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut self.connection())
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// The value stored at `key` (a full Redis key), if any.
    #[track_caller]
    pub fn get(&self, key: &str) -> Option<String> {
        self.query(&["GET", key])
    }

    /// The value of the lock named `name` under the default prefix.
    #[track_caller]
    pub fn lock_value(&self, name: &str) -> Option<String> {
        self.get(&format!("{PREFIX}{name}"))
    }

    #[track_caller]
    pub fn exists(&self, key: &str) -> bool {
        self.query::<i64>(&["EXISTS", key]) == 1
    }

    #[track_caller]
    pub fn pttl(&self, key: &str) -> i64 {
        self.query(&["PTTL", key])
    }

    #[track_caller]
    pub fn set(&self, key: &str, value: &str) {
        self.query::<()>(&["SET", key, value]);
    }

    #[track_caller]
    pub fn del(&self, key: &str) {
        self.query::<i64>(&["DEL", key]);
    }

    /// Sets one field of a hash (another application's data, as far as the tool knows).
    #[track_caller]
    pub fn hset(&self, key: &str, field: &str, value: &str) {
        self.query::<i64>(&["HSET", key, field, value]);
    }

    /// One field of a hash, if present.
    #[track_caller]
    pub fn hget(&self, key: &str, field: &str) -> Option<String> {
        self.query(&["HGET", key, field])
    }

    /// The Redis type of `key` (`none` when it does not exist).
    #[track_caller]
    pub fn key_type(&self, key: &str) -> String {
        self.query(&["TYPE", key])
    }

    /// How many members a sorted set has (0 when it does not exist).
    #[track_caller]
    pub fn zcard(&self, key: &str) -> i64 {
        self.query(&["ZCARD", key])
    }

    /// How many keys the database holds, not counting fence counters (`{K}:fence`), which
    /// persist by design so that fences only grow, nor a lock's history and counters
    /// (`{K}:history`, `{K}:stats`), which persist by design too.
    #[track_caller]
    pub fn dbsize(&self) -> i64 {
        self.keys().len() as i64
    }

    /// Every key but fence counters, histories and counters (see `dbsize`).
    #[track_caller]
    pub fn keys(&self) -> Vec<String> {
        let all: Vec<String> = self.query(&["KEYS", "*"]);
        all.into_iter()
            .filter(|key| !key.ends_with(":fence") && !is_record(key))
            .collect()
    }

    #[track_caller]
    pub fn info(&self, section: &str) -> String {
        self.query(&["INFO", section])
    }

    /// `redis 6.2.14` or `valkey 9.1.2`, from `INFO server` (Valkey reports a compatible
    /// `redis_version` too, so its own field comes first).
    #[track_caller]
    pub fn version(&self) -> String {
        let info = self.info("server");
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        match (field("valkey_version"), field("redis_version")) {
            (Some(version), _) => format!("valkey {version}"),
            (None, Some(version)) => format!("redis {version}"),
            (None, None) => panic!("no version in INFO server:\n{info}"),
        }
    }

    /// Calls per command from `INFO commandstats`, e.g. `("set", 3)`.
    pub fn command_stats(&self) -> Vec<(String, u64)> {
        self.info("commandstats")
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("cmdstat_")?;
                let (name, fields) = rest.split_once(':')?;
                let calls = fields
                    .split(',')
                    .find_map(|f| f.strip_prefix("calls="))?
                    .parse()
                    .ok()?;
                Some((name.to_string(), calls))
            })
            .collect()
    }

    /// `CLIENT LIST` as one map of field -> value per client.
    pub fn clients(&self) -> Vec<Vec<(String, String)>> {
        let list: String = self.query(&["CLIENT", "LIST"]);
        list.lines()
            .map(|line| {
                line.split(' ')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .collect()
    }

    /// How many runs wait for `key` (a name under `PREFIX`): the subscribers of its release
    /// channel, which every waiter listens on and a holder's takeover listener does not.
    /// Not `subscribed_clients`, which counts that listener too (a holder listens 200 ms
    /// after its command starts): with five waiters the count passes 5 on its way to 6,
    /// and a poll on a loaded machine could step over it.
    pub fn waiters_of(&self, key: &str) -> usize {
        let channel = format!("redlock-run:released:{PREFIX}{key}");
        let (_, subscribers): (String, usize) = self.query(&["PUBSUB", "NUMSUB", &channel]);
        subscribers
    }

    /// Number of clients currently subscribed to a channel or pattern (pub/sub waiters).
    pub fn subscribed_clients(&self) -> usize {
        self.clients()
            .iter()
            .filter(|c| {
                c.iter().any(|(k, v)| {
                    (k == "sub" || k == "psub" || k == "ssub") && v.parse::<u64>().unwrap_or(0) > 0
                })
            })
            .count()
    }
}

/// The token at the start of a stored lock value: `{"token":"<uuid>", ...}`.
#[track_caller]
/// Whether `key` is a lock's history or counters (`{K}:history`, `{K}:stats`), which
/// outlive the lock by design.
pub fn is_record(key: &str) -> bool {
    key.ends_with("}:history") || key.ends_with("}:stats")
}

pub fn token_of(value: &str) -> String {
    let rest = value
        .strip_prefix("{\"token\":\"")
        .unwrap_or_else(|| panic!("lock value does not start with {{\"token\":\": {value:?}"));
    let end = rest
        .find('"')
        .unwrap_or_else(|| panic!("unterminated token in {value:?}"));
    rest[..end].to_string()
}

/// Asserts `s` looks like a version-4 UUID (8-4-4-4-12 hex, version nibble 4).
#[track_caller]
pub fn assert_uuid_v4(s: &str) {
    let groups: Vec<&str> = s.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    assert_eq!(lens, [8, 4, 4, 4, 12], "not a UUID: {s:?}");
    assert!(
        s.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
        "not a UUID: {s:?}"
    );
    assert!(groups[2].starts_with('4'), "not a version-4 UUID: {s:?}");
}
