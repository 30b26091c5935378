//! A lock's counters (`{K}:stats`, a hash) as `metrics`, `check` and `status` read them:
//! typed, checked, and merged over the nodes of a Redlock quorum. The scripts that take and
//! release a lock keep the counters; nothing here writes them.
//!
//! The fields: `acquired`, `busy`, `timeout`, `superseded`, `already_done`, `lost`,
//! `expired` (counts), `wait_ms_sum`/`wait_count` and `hold_ms_sum`/`hold_count`,
//! `last_success_ms` (server ms), `skips` (consecutive skips, reset by a success), and a
//! `slot:<i>` field per current holder: `<acquired, server ms> <the lock value>`. Another
//! client may have written anything there: a field that is not a number (or a negative
//! one) counts as absent and is named in a note; unknown fields are ignored.
//!
//! Redlock: each node counts on its own; a value is the highest that a majority of the
//! nodes reached (sorted in descending order, the one at the majority's rank), which
//! filters out what only a minority saw.

use super::layout::{queue_keys, record_keys, sibling_key, Key};
use super::quorum::majority;
use super::scripts::{CountersReply, ReadCounters};

/// The counts of one lock, on one node or merged over a quorum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub acquired: u64,
    pub busy: u64,
    pub timeout: u64,
    pub superseded: u64,
    pub already_done: u64,
    pub lost: u64,
    pub expired: u64,
    pub wait_ms_sum: u64,
    pub wait_count: u64,
    pub hold_ms_sum: u64,
    pub hold_count: u64,
    /// 0: never.
    pub last_success_ms: u64,
    pub skips: u64,
}

/// The field names of [`Counters`], in the order of [`Counters::to_array`].
const NAMES: [&str; 13] = [
    "acquired",
    "busy",
    "timeout",
    "superseded",
    "already_done",
    "lost",
    "expired",
    "wait_ms_sum",
    "wait_count",
    "hold_ms_sum",
    "hold_count",
    "last_success_ms",
    "skips",
];

impl Counters {
    fn to_array(self) -> [u64; 13] {
        [
            self.acquired,
            self.busy,
            self.timeout,
            self.superseded,
            self.already_done,
            self.lost,
            self.expired,
            self.wait_ms_sum,
            self.wait_count,
            self.hold_ms_sum,
            self.hold_count,
            self.last_success_ms,
            self.skips,
        ]
    }

    fn from_array(values: [u64; 13]) -> Counters {
        let [acquired, busy, timeout, superseded, already_done, lost, expired, wait_ms_sum, wait_count, hold_ms_sum, hold_count, last_success_ms, skips] =
            values;
        Counters {
            acquired,
            busy,
            timeout,
            superseded,
            already_done,
            lost,
            expired,
            wait_ms_sum,
            wait_count,
            hold_ms_sum,
            hold_count,
            last_success_ms,
            skips,
        }
    }

    /// When the last successful run ended (server ms), if one did.
    pub fn last_success(&self) -> Option<u64> {
        (self.last_success_ms > 0).then_some(self.last_success_ms)
    }
}

/// What one node holds of a lock's counters, at one moment.
#[derive(Debug, Clone, Default)]
pub struct NodeCounters {
    /// Whether `{K}:stats` exists as a hash.
    pub recorded: bool,
    pub counters: Counters,
    /// How many waiters are queued.
    pub waiters: u64,
    /// The server's clock, ms since the epoch.
    pub now_ms: u64,
    /// The current holders that recorded when they took their slot: (that time in server
    /// ms, the lock value).
    pub holding: Vec<(u64, Vec<u8>)>,
    /// `slot:<i>` fields whose holder is gone without a release (not yet counted in
    /// `expired`).
    pub stale: u64,
    /// What could not be read, to warn about: the key's wrong type, ill-formed fields.
    pub notes: Vec<String>,
}

impl NodeCounters {
    /// Reads the script's reply for the lock at `key`.
    pub(super) fn read(key: &Key, reply: CountersReply) -> NodeCounters {
        let [_, stats] = record_keys(key);
        let mut node = NodeCounters {
            waiters: reply.waiters,
            now_ms: reply.now_ms,
            stale: reply.stale.len() as u64,
            ..NodeCounters::default()
        };
        match reply.kind.as_str() {
            "hash" => node.recorded = true,
            "none" => {}
            other => node.notes.push(format!(
                "{stats} is a {}, not the counters redlock-run keeps; its counters are not shown",
                crate::report::escape(other)
            )),
        }
        let mut values = [0u64; 13];
        let mut ill_formed = Vec::new();
        for (name, value) in &reply.fields {
            if let Some(at) = NAMES.iter().position(|known| known.as_bytes() == name) {
                match parse_count(value) {
                    Some(count) => values[at] = count,
                    None => ill_formed.push(NAMES[at]),
                }
            } else if is_slot_field(name) && !reply.stale.contains(name) {
                let recorded = value
                    .iter()
                    .position(|&b| b == b' ')
                    .and_then(|space| Some((parse_count(&value[..space])?, &value[space + 1..])));
                match recorded {
                    Some((since, holder)) => node.holding.push((since, holder.to_vec())),
                    None => ill_formed.push("slot:<i>"),
                }
            }
        }
        if !ill_formed.is_empty() {
            ill_formed.dedup();
            node.notes.push(format!(
                "{stats} holds fields that are not counts ({}); they count as 0",
                ill_formed.join(", ")
            ));
        }
        node.counters = Counters::from_array(values);
        node
    }
}

/// Whether `name` is a holder's `slot:<i>` field as `counters.lua` reads one: 1 to 9999,
/// without a leading zero.
fn is_slot_field(name: &[u8]) -> bool {
    name.strip_prefix(b"slot:").is_some_and(|digits| {
        (1..=4).contains(&digits.len())
            && digits[0] != b'0'
            && digits.iter().all(u8::is_ascii_digit)
    })
}

/// A count as the scripts write it: decimal digits (a sign, a fraction or more than 19
/// digits is not one).
fn parse_count(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// The arguments of `counters.lua` for the lock at `key`.
pub(super) fn read_counters(key: &Key) -> ReadCounters {
    let [queue, _] = queue_keys(key);
    let [_, stats] = record_keys(key);
    ReadCounters {
        stats,
        queue,
        lock: key.clone(),
        slot_prefix: sibling_key(key, b":slot:"),
    }
}

/// A lock's counters over every node: on one server, what it holds; over a quorum, for
/// each value the highest that a majority of the nodes reached.
#[derive(Debug, Clone, Default)]
pub struct LockCounters {
    /// Whether any node had the counters at all.
    pub recorded: bool,
    pub counters: Counters,
    pub waiters: u64,
    /// Holders gone without a release, not yet counted in `counters.expired`.
    pub stale: u64,
    /// The server's clock (over a quorum, the median of the nodes read).
    pub now_ms: u64,
    /// The oldest current holder that recorded when it took its slot: for how long (ms,
    /// by the server's clock) and its lock value.
    pub oldest: Option<(u64, Vec<u8>)>,
    /// A current holder recorded as taking its slot in the future of its node's clock
    /// (see [`age`]): how far ahead (ms) and its lock value; the furthest, on any node.
    pub ahead: Option<(u64, Vec<u8>)>,
}

/// How far apart the clocks of Redlock's nodes may be: a time recorded by one node that is
/// ahead of another's clock by up to this much is read as now.
pub const CLOCKS_MAY_DIFFER_MS: u64 = 1_000;

/// How long before `now_ms` the time `at_ms` was, both in ms since the epoch; `Err` with how
/// far ahead it lies when it is in the future by more than [`CLOCKS_MAY_DIFFER_MS`] (a
/// clock stepped back, or data redlock-run did not write), for a reader to name rather
/// than show as "0s ago".
pub fn age(now_ms: u64, at_ms: u64) -> Result<std::time::Duration, std::time::Duration> {
    use std::time::Duration;
    if at_ms > now_ms.saturating_add(CLOCKS_MAY_DIFFER_MS) {
        Err(Duration::from_millis(at_ms - now_ms))
    } else {
        Ok(Duration::from_millis(now_ms.saturating_sub(at_ms)))
    }
}

impl LockCounters {
    /// Merges what each node said; an error when too few nodes were read to tell (the
    /// first error, or a count of them).
    pub fn merge(nodes: &[Result<NodeCounters, String>]) -> Result<LockCounters, String> {
        let read: Vec<&NodeCounters> = nodes.iter().filter_map(|n| n.as_ref().ok()).collect();
        let needed = majority(nodes.len());
        if read.len() < needed {
            let errors: Vec<&str> = nodes
                .iter()
                .filter_map(|n| n.as_ref().err().map(String::as_str))
                .collect();
            return Err(match errors.as_slice() {
                [one] => one.to_string(),
                _ => format!(
                    "only {} of {} Redis nodes answered ({})",
                    read.len(),
                    nodes.len(),
                    errors.join("; ")
                ),
            });
        }
        let pick = |values: Vec<u64>| highest_of_majority(values, needed);
        let mut merged = [0u64; 13];
        for (at, value) in merged.iter_mut().enumerate() {
            *value = pick(read.iter().map(|n| n.counters.to_array()[at]).collect());
        }
        let ages: Vec<(u64, Option<&Vec<u8>>)> = read
            .iter()
            .map(|node| {
                node.holding
                    .iter()
                    .min_by_key(|(since, _)| *since)
                    .map_or((0, None), |(since, value)| {
                        (node.now_ms.saturating_sub(*since), Some(value))
                    })
            })
            .collect();
        let age = pick(ages.iter().map(|(age, _)| *age).collect());
        // The holder: one that a node recorded at least that long ago.
        let oldest = ages
            .iter()
            .filter(|(at, _)| *at >= age)
            .find_map(|(_, value)| Some((age, (*value)?.clone())));
        let ahead = read
            .iter()
            .flat_map(|node| {
                node.holding.iter().filter_map(|(since, value)| {
                    let ahead = self::age(node.now_ms, *since).err()?;
                    Some((ahead.as_millis() as u64, value.clone()))
                })
            })
            .max_by_key(|(ahead, _)| *ahead);
        let mut clocks: Vec<u64> = read.iter().map(|n| n.now_ms).collect();
        clocks.sort_unstable();
        Ok(LockCounters {
            recorded: read.iter().any(|n| n.recorded),
            counters: Counters::from_array(merged),
            waiters: pick(read.iter().map(|n| n.waiters).collect()),
            stale: pick(read.iter().map(|n| n.stale).collect()),
            now_ms: clocks[clocks.len() / 2],
            oldest,
            ahead,
        })
    }
}

/// The highest value that `needed` of the nodes reached: sorted in descending order, the
/// `needed`-th. With fewer values than that, the lowest.
fn highest_of_majority(mut values: Vec<u64>, needed: usize) -> u64 {
    values.sort_unstable_by(|a, b| b.cmp(a));
    values
        .get(needed.saturating_sub(1))
        .or(values.last())
        .copied()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_ahead_of_the_clock_by_more_than_clocks_differ_is_named() {
        use std::time::Duration;
        assert_eq!(age(10_000, 4_000), Ok(Duration::from_secs(6)));
        // Within what Redlock's clocks may differ by: now.
        assert_eq!(age(10_000, 11_000), Ok(Duration::ZERO));
        assert_eq!(age(10_000, 11_001), Err(Duration::from_millis(1_001)));
        assert_eq!(age(0, u64::MAX), Err(Duration::from_millis(u64::MAX)));
        assert_eq!(age(u64::MAX, u64::MAX), Ok(Duration::ZERO));
    }

    fn reply(fields: &[(&str, &str)], stale: &[&str]) -> CountersReply {
        CountersReply {
            kind: "hash".into(),
            fields: fields
                .iter()
                .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
            waiters: 2,
            now_ms: 10_000,
            stale: stale.iter().map(|s| s.as_bytes().to_vec()).collect(),
        }
    }

    #[test]
    fn fields_are_read_and_bad_ones_noted() {
        let node = NodeCounters::read(
            &Key::from("k"),
            reply(
                &[
                    ("acquired", "5"),
                    ("busy", "-1"),
                    ("skips", "x"),
                    ("last_success_ms", "9000"),
                    ("slot:1", "4000 {\"token\":\"a\"}"),
                    ("slot:2", "3000 gone"),
                    ("slot:3", "nonsense"),
                    ("slot:03", "5 not a slot"),
                    ("slot:x", "5 not a slot"),
                    ("foreign", "what"),
                ],
                &["slot:2"],
            ),
        );
        assert!(node.recorded);
        assert_eq!(node.counters.acquired, 5);
        assert_eq!(node.counters.busy, 0);
        assert_eq!(node.counters.skips, 0);
        assert_eq!(node.counters.last_success(), Some(9000));
        assert_eq!(node.stale, 1);
        assert_eq!(node.holding, vec![(4000, b"{\"token\":\"a\"}".to_vec())]);
        assert_eq!(node.notes.len(), 1, "{:?}", node.notes);
        assert!(node.notes[0].contains("busy") && node.notes[0].contains("skips"));
    }

    #[test]
    fn a_key_of_another_type_is_noted() {
        let mut bad = reply(&[], &[]);
        bad.kind = "list".into();
        let node = NodeCounters::read(&Key::from("k"), bad);
        assert!(!node.recorded);
        assert!(
            node.notes[0].contains("{k}:stats is a list"),
            "{:?}",
            node.notes
        );
    }

    fn node(acquired: u64, since: Option<u64>) -> Result<NodeCounters, String> {
        Ok(NodeCounters {
            recorded: true,
            counters: Counters {
                acquired,
                ..Counters::default()
            },
            now_ms: 10_000,
            holding: since.map(|s| (s, b"v".to_vec())).into_iter().collect(),
            ..NodeCounters::default()
        })
    }

    #[test]
    fn a_quorum_takes_the_highest_value_a_majority_reached() {
        let merged =
            LockCounters::merge(&[node(7, Some(4000)), node(5, None), node(6, Some(1000))])
                .unwrap();
        assert_eq!(merged.counters.acquired, 6);
        assert_eq!(merged.oldest, Some((6000, b"v".to_vec())));
        let merged =
            LockCounters::merge(&[node(7, None), Err("down".into()), node(5, None)]).unwrap();
        assert_eq!(merged.counters.acquired, 5);
        let failed = LockCounters::merge(&[node(7, None), Err("a".into()), Err("b".into())]);
        assert!(failed.unwrap_err().contains("only 1 of 3"));
        let single = LockCounters::merge(&[node(3, None)]).unwrap();
        assert_eq!(single.counters.acquired, 3);
        assert_eq!(single.oldest, None);
    }

    #[test]
    fn counts_are_digits_only() {
        assert_eq!(parse_count(b"0"), Some(0));
        assert_eq!(parse_count(b"18446744073709551615"), None);
        assert_eq!(
            parse_count(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(parse_count(b"+1"), None);
        assert_eq!(parse_count(b""), None);
        assert_eq!(parse_count(b"1.5"), None);
    }
}
