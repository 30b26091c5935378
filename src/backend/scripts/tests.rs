use redis::Value;

use super::force_release::ForceReply;
use super::leave_queue::Left;
use super::renew::RenewReply;
use super::*;
use crate::backend::layout::Channels;
use crate::backend::Released;

/// The `-- KEYS[i] name:` and `-- ARGV[i] name:` lines of a script's header, in order, as
/// `(index, name)`: its contract as the script itself states it.
fn header(source: &str, of: &str) -> Vec<(String, String)> {
    let opening = format!("-- {of}[");
    source
        .lines()
        .take_while(|line| line.starts_with("--"))
        .filter_map(|line| line.strip_prefix(&opening))
        .map(|rest| {
            let (index, rest) = rest
                .split_once("] ")
                .unwrap_or_else(|| panic!("{of}[{rest}: no `] ` after the index"));
            let (name, _) = rest
                .split_once(':')
                .unwrap_or_else(|| panic!("{of}[{index}] {rest}: no `name:`"));
            (index.to_string(), name.to_string())
        })
        .collect()
}

/// Holds the type `C` to the header of `source`: the same keys and arguments, in the same
/// order, under the same names, and ARGV numbered from 1 without a gap.
#[track_caller]
fn check<C: Call>(file: &str, source: &str, sample: &C) {
    let keys: Vec<String> = header(source, "KEYS")
        .into_iter()
        .map(|(index, name)| format!("{index} {name}"))
        .collect();
    assert_eq!(keys, C::KEYS, "{file}: KEYS");
    let argv = header(source, "ARGV");
    for (at, (index, _)) in argv.iter().enumerate() {
        assert_eq!(*index, (at + 1).to_string(), "{file}: ARGV out of order");
    }
    let names: Vec<&str> = argv.iter().map(|(_, name)| name.as_str()).collect();
    assert_eq!(names, C::ARGV, "{file}: ARGV");
    assert_eq!(
        sample.argv().len(),
        C::ARGV.len(),
        "{file}: argv() against ARGV"
    );
    // Every ARGV the body reads is one the header names.
    for (at, _) in source.match_indices("ARGV[") {
        let index: String = source[at + 5..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let index: usize = index.parse().unwrap_or(0);
        assert!(
            (1..=C::ARGV.len()).contains(&index),
            "{file}: ARGV[{index}] is not in its header"
        );
    }
}

fn key(name: &str) -> Key {
    Key::from(name)
}

fn channels(sharded: bool) -> Channels {
    Channels::of(&key("k"), sharded)
}

#[test]
fn every_script_type_matches_its_header() {
    let second = Duration::from_secs(1);
    check(
        "acquire.lua",
        include_str!("acquire.lua"),
        &Acquire {
            slots: vec![key("k")],
            limit_key: key("{k}:limit"),
            fence_key: key("{k}:fence"),
            queue: key("{k}:queue"),
            woken: key("{k}:queue:woken"),
            replace_key: key("{k}:replace"),
            waiting_key: key("{k}:queue:who"),
            identity: String::from("{\"token\":\"t\""),
            metadata: String::from("}"),
            ttl: second,
            limit: 1,
            fair: false,
            token: String::from("t"),
            channels: channels(false),
            listening: true,
            arrival_ms: None,
            want_run_id: false,
            supersede_key: key("{k}:supersede"),
            supersede: false,
            arrived: false,
            once: OnceArgs::default(),
            replace: true,
            recording: RecordArgs {
                history_key: key("h"),
                stats_key: key("st"),
                max: 100,
            },
            waited: second,
            final_try: false,
        },
    );
    check(
        "renew.lua",
        include_str!("renew.lua"),
        &Renew {
            slot: key("k"),
            replace_key: Some(key("r")),
            limit_key: None,
            identity: String::from("i"),
            ttl: second,
            limit: 1,
            recording: Some(RecordArgs {
                history_key: key("h"),
                stats_key: key("st"),
                max: 100,
            }),
            slot_number: 1,
            value: String::new(),
        },
    );
    check(
        "release.lua",
        include_str!("release.lua"),
        &Release {
            slot: key("k"),
            queue: key("q"),
            woken: key("w"),
            replace_key: key("r"),
            done_ids_key: key("di"),
            semaphore: None,
            identity: String::from("i"),
            channels: channels(false),
            keep_for: None,
            limit: 1,
            notice: String::from("i#0"),
            grace: second,
            record: false,
            once: OnceArgs::default(),
            recording: RecordArgs {
                history_key: key("h"),
                stats_key: key("st"),
                max: 100,
            },
            slot_number: 1,
            ending: Some(crate::backend::HoldEnd::default()),
            lost_recorded: false,
            value: String::new(),
        },
    );
    check(
        "leave_queue.lua",
        include_str!("leave_queue.lua"),
        &LeaveQueue {
            queue: key("q"),
            woken: key("w"),
            replace_key: key("r"),
            token: String::from("t"),
            identity: String::from("i"),
            channels: channels(false),
            grace: second,
            recording: RecordArgs {
                history_key: key("h"),
                stats_key: key("st"),
                max: 100,
            },
            timed_out: true,
            metadata: String::from("}"),
            waited: second,
            lock: key("k"),
        },
    );
    check(
        "force_release.lua",
        include_str!("force_release.lua"),
        &ForceRelease {
            slot: key("k"),
            queue: key("q"),
            woken: key("w"),
            value: b"v".to_vec(),
            channels: channels(true),
            recording: RecordArgs {
                history_key: key("h"),
                stats_key: key("st"),
                max: 100,
            },
            slot_number: 2,
            by: String::from("{}"),
        },
    );
    check(
        "peek.lua",
        include_str!("peek.lua"),
        &Peek { key: key("k") },
    );
    check(
        "peek_shares.lua",
        include_str!("peek_shares.lua"),
        &PeekShares {
            shares: key("{k}:shares"),
            expiries: key("{k}:shares:exp"),
        },
    );
    check(
        "raise_fence.lua",
        include_str!("raise_fence.lua"),
        &RaiseFence {
            fence_key: key("f"),
            fence: 7,
        },
    );
    check(
        "counters.lua",
        include_str!("counters.lua"),
        &ReadCounters {
            stats: key("{k}:stats"),
            queue: key("{k}:queue"),
            lock: key("k"),
            slot_prefix: key("{k}:slot:"),
        },
    );
    check(
        "dry_run.lua",
        include_str!("dry_run.lua"),
        &DryRun {
            slot: key("k"),
            limit_key: key("{k}:limit"),
            fence_key: key("{k}:fence"),
            queue: key("{k}:queue"),
            woken: key("{k}:queue:woken"),
            supersede_key: key("{k}:supersede"),
            replace_key: key("{k}:replace"),
            token: String::from("t"),
            channels: channels(false),
            limit: 1,
            ttl: second,
            once: OnceArgs::default(),
            supersede: false,
            replace: false,
        },
    );
    let shared_keys = [
        key("{k}:shares"),
        key("{k}:shares:exp"),
        key("{k}:queue:shared"),
    ];
    check(
        "acquire_shared.lua",
        include_str!("acquire_shared.lua"),
        &AcquireShared {
            lock: key("k"),
            shared_keys: shared_keys.clone(),
            fence_key: key("{k}:fence"),
            queue: key("{k}:queue"),
            woken: key("{k}:queue:woken"),
            waiting_key: key("{k}:queue:who"),
            identity: String::from("{\"token\":\"t\""),
            metadata: String::from("}"),
            ttl: second,
            token: String::from("t"),
            channels: channels(false),
            listening: true,
            arrival_ms: None,
            recording: RecordArgs {
                history_key: key("{k}:history"),
                stats_key: key("{k}:stats"),
                max: 100,
            },
            waited: second,
            final_try: false,
            once: OnceArgs::default(),
            limit_key: key("{k}:limit"),
        },
    );
    check(
        "renew_shared.lua",
        include_str!("renew_shared.lua"),
        &RenewShared {
            lock: key("k"),
            shared_keys: shared_keys.clone(),
            identity: String::from("{\"token\":\"t\""),
            ttl: second,
            token: String::from("t"),
        },
    );
    check(
        "release_shared.lua",
        include_str!("release_shared.lua"),
        &ReleaseShared {
            lock: key("k"),
            shared_keys,
            queue: key("{k}:queue"),
            woken: key("{k}:queue:woken"),
            replace_key: key("{k}:replace"),
            identity: String::from("{\"token\":\"t\""),
            token: String::from("t"),
            channels: channels(false),
            keep_for: None,
            notice: String::from("n"),
            grace: second,
            recording: RecordArgs {
                history_key: key("{k}:history"),
                stats_key: key("{k}:stats"),
                max: 100,
            },
            event: "released",
            exit_code: Some(0),
            value: String::new(),
            once: OnceArgs::default(),
            record: false,
        },
    );
}

#[test]
fn keys_follow_the_header_layout() {
    let slots: Vec<Key> = ["k", "{k}:slot:2", "{k}:slot:3"].map(key).to_vec();
    let release = Release {
        slot: key("{k}:slot:2"),
        queue: key("q"),
        woken: key("w"),
        replace_key: key("r"),
        done_ids_key: key("di"),
        semaphore: Some((key("l"), slots.clone())),
        identity: String::new(),
        channels: channels(true),
        keep_for: Some(Duration::from_micros(10)),
        limit: 3,
        notice: String::new(),
        grace: Duration::from_secs(2),
        record: false,
        once: OnceArgs {
            done_key: key("d"),
            done_per_key: key("p"),
            ..OnceArgs::default()
        },
        recording: RecordArgs {
            history_key: key("h"),
            stats_key: key("st"),
            max: 3,
        },
        slot_number: 2,
        ending: Some(crate::backend::HoldEnd {
            exit_code: Some(143),
            success: false,
            replaced: true,
        }),
        lost_recorded: true,
        value: String::new(),
    };
    let keys = release.keys();
    assert_eq!(
        keys[..10],
        [
            key("{k}:slot:2"),
            key("q"),
            key("w"),
            key("d"),
            key("p"),
            key("r"),
            key("h"),
            key("st"),
            key("di"),
            key("l")
        ]
    );
    assert_eq!(keys[10..], slots);
    let argv = release.argv();
    // A --min-hold remainder under a millisecond is still kept, for 1 ms: 0 would mean none.
    assert_eq!(argv[2], b"1");
    assert_eq!(argv[6], b"2000");
    assert_eq!(argv[7], b"1");
    // The hold's ending, as the history records it.
    assert_eq!(
        argv[12..18].to_vec(),
        [&b"3"[..], b"2", b"replaced", b"143", b"0", b"1"].map(<[u8]>::to_vec)
    );
    // --replace's key and argument come after --supersede's and --once's.
    let acquire = Acquire {
        slots: vec![key("k")],
        limit_key: key("l"),
        fence_key: key("f"),
        queue: key("q"),
        woken: key("w"),
        replace_key: key("r"),
        waiting_key: key("wa"),
        identity: String::new(),
        metadata: String::new(),
        ttl: Duration::from_secs(1),
        limit: 1,
        fair: false,
        token: String::new(),
        channels: channels(false),
        listening: true,
        arrival_ms: None,
        want_run_id: false,
        supersede_key: key("s"),
        supersede: false,
        arrived: false,
        once: OnceArgs {
            done_key: key("d"),
            done_per_key: key("p"),
            ..OnceArgs::default()
        },
        replace: true,
        recording: RecordArgs {
            history_key: key("h"),
            stats_key: key("st"),
            max: 0,
        },
        waited: Duration::from_millis(1500),
        final_try: true,
    };
    // The history and the counters are the last two keys: the script finds them there.
    assert_eq!(
        acquire.keys()[5..],
        [
            key("s"),
            key("d"),
            key("p"),
            key("r"),
            key("wa"),
            key("h"),
            key("st")
        ]
    );
    let argv = acquire.argv();
    assert_eq!((&argv[11][..], &argv[17][..]), (&b"0"[..], &b"1"[..]));
    assert_eq!(
        argv[18..].to_vec(),
        [&b"0"[..], b"1500", b"1"].map(<[u8]>::to_vec)
    );
    let renew = Renew {
        slot: key("k"),
        replace_key: None,
        limit_key: Some(key("l")),
        identity: String::new(),
        ttl: Duration::from_secs(1),
        limit: 3,
        recording: None,
        slot_number: 2,
        value: String::new(),
    };
    assert_eq!(renew.keys(), [key("k"), key("l")]);
    assert_eq!(renew.argv()[3], b"0");
    assert_eq!(renew.argv()[4], b"0");
    // Recording: the history and the counters come last, after the takeover's key.
    let renew = Renew {
        replace_key: Some(key("r")),
        limit_key: None,
        recording: Some(RecordArgs {
            history_key: key("h"),
            stats_key: key("st"),
            max: 7,
        }),
        ..renew
    };
    assert_eq!(renew.keys(), [key("k"), key("r"), key("h"), key("st")]);
    assert_eq!(renew.argv()[4], b"7");
}

/// Replies as the scripts send them, each read into its type; anything else is refused, not
/// a panic.
#[test]
fn replies_are_read_by_name() {
    use Value::{BulkString, Int, Nil, SimpleString};
    let array = |items: Vec<Value>| Value::Array(items);
    let acquired = array(vec![
        Int(1),
        Int(2),
        BulkString(b"17".to_vec()),
        Int(0),
        Int(0),
        BulkString(b"abc".to_vec()),
    ]);
    let reply: AcquireReply = redis::from_redis_value(acquired).unwrap();
    assert!(matches!(
        reply.outcome,
        Acquisition::Acquired {
            slot: 2,
            fence: Some(17)
        }
    ));
    assert_eq!(reply.run_id, "abc");
    let busy = array(vec![
        Int(0),
        Int(-1),
        BulkString(Vec::new()),
        Int(3),
        Int(2),
        BulkString(Vec::new()),
    ]);
    let reply: AcquireReply = redis::from_redis_value(busy).unwrap();
    assert!(matches!(
        reply.outcome,
        Acquisition::Busy {
            holder_ttl: None,
            holder: None,
            ahead: 3
        }
    ));
    assert_eq!(reply.repaired, 2);
    let other = array(vec![
        Int(-1),
        Int(4),
        BulkString(Vec::new()),
        Int(0),
        Int(0),
        BulkString(Vec::new()),
    ]);
    let reply: AcquireReply = redis::from_redis_value(other).unwrap();
    assert!(matches!(
        reply.outcome,
        Acquisition::OtherLimit { other: 4 }
    ));
    let too_large = array(vec![
        Int(4),
        Int(0),
        BulkString(b"9223372036854775807".to_vec()),
        Int(0),
        Int(0),
        BulkString(Vec::new()),
    ]);
    let reply: AcquireReply = redis::from_redis_value(too_large).unwrap();
    assert!(matches!(
        reply.outcome,
        Acquisition::FenceTooLarge { ref counter } if counter == "9223372036854775807"
    ));
    // 2 and 3 are --supersede's and --once's: each keeps its own status, and a --once-per
    // stamp rides as a seventh element.
    let superseded = array(vec![
        Int(2),
        Int(0),
        BulkString(b"{\"token\":\"t\"}".to_vec()),
        Int(0),
        Int(0),
        BulkString(Vec::new()),
        BulkString(b"0".to_vec()),
    ]);
    let reply: AcquireReply = redis::from_redis_value(superseded).unwrap();
    assert!(matches!(
        reply.outcome,
        Acquisition::Superseded { newer: Some(ref newer) } if newer == b"{\"token\":\"t\"}"
    ));
    assert_eq!(reply.stamp_ms, None);
    let done = array(vec![
        Int(3),
        Int(0),
        BulkString(b"17 {}".to_vec()),
        Int(0),
        Int(0),
        BulkString(Vec::new()),
        BulkString(b"42".to_vec()),
    ]);
    let reply: AcquireReply = redis::from_redis_value(done).unwrap();
    assert!(matches!(
        reply.outcome,
        Acquisition::Done { ref record } if record == b"17 {}"
    ));
    assert_eq!(reply.stamp_ms, Some(42));
    let bad_slot = array(vec![
        Int(1),
        Int(-2),
        BulkString(b"1".to_vec()),
        Int(0),
        Int(0),
        BulkString(Vec::new()),
    ]);
    assert!(redis::from_redis_value::<AcquireReply>(bad_slot).is_err());
    for junk in [Nil, Int(1), SimpleString("OK".into()), array(vec![Int(1)])] {
        assert!(redis::from_redis_value::<AcquireReply>(junk.clone()).is_err());
        assert!(redis::from_redis_value::<ReleaseReply>(junk.clone()).is_err());
        assert!(redis::from_redis_value::<PeekReply>(junk).is_err());
    }
    let released: ReleaseReply = redis::from_redis_value(array(vec![Int(3), Int(1)])).unwrap();
    assert!(matches!(released.released, Released::DeletedUnannounced));
    assert_eq!(released.repaired, 1);
    let kept: ReleaseReply = redis::from_redis_value(array(vec![Int(2), Int(0)])).unwrap();
    assert!(matches!(kept.released, Released::KeptUntilMinHold));
    assert_eq!(
        redis::from_redis_value::<Extended>(array(vec![Int(1), BulkString(Vec::new())])).unwrap(),
        Extended(true, None)
    );
    assert_eq!(
        redis::from_redis_value::<Extended>(array(vec![Int(1), BulkString(b"{}".to_vec())]))
            .unwrap(),
        Extended(true, Some(b"{}".to_vec()))
    );
    assert_eq!(
        redis::from_redis_value::<Extended>(array(vec![Int(0), BulkString(Vec::new())])).unwrap(),
        Extended(false, None)
    );
    assert_eq!(
        redis::from_redis_value::<Forced>(Int(2)).unwrap(),
        Forced::DeletedUnannounced
    );
    assert_eq!(
        redis::from_redis_value::<Forced>(Int(0)).unwrap(),
        Forced::Changed
    );
}

/// The recording's elements at the end of each reply: the skips after a skip, the flags and
/// the refused commands; junk there is read as nothing to say, never an error.
#[test]
fn recording_outcomes_are_read_from_the_replies() {
    use Value::{BulkString, Int};
    let array = |items: Vec<Value>| Value::Array(items);
    let mut busy = vec![
        Int(0),
        Int(-1),
        BulkString(Vec::new()),
        Int(0),
        Int(0),
        BulkString(Vec::new()),
        BulkString(b"0".to_vec()),
        Int(0),
    ];
    busy.extend([Int(4), Int(1), BulkString(b"XADD".to_vec())]);
    let reply: AcquireReply = redis::from_redis_value(array(busy.clone())).unwrap();
    assert_eq!(reply.skips, Some(4));
    assert_eq!(
        reply.recorded,
        Recorded {
            flags: Recorded::HISTORY_REFUSED,
            refused: String::from("XADD")
        }
    );
    busy[8] = Int(-1);
    busy[9] = BulkString(b"junk".to_vec());
    let reply: AcquireReply = redis::from_redis_value(array(busy)).unwrap();
    assert_eq!((reply.skips, reply.recorded.flags), (None, 0));
    let released: ReleaseReply = redis::from_redis_value(array(vec![
        Int(1),
        Int(0),
        Int(0),
        Int(8),
        BulkString(Vec::new()),
    ]))
    .unwrap();
    assert_eq!(released.recorded.flags, Recorded::STATS_WRONG_TYPE);
    let renewed: RenewReply = redis::from_redis_value(array(vec![
        Int(0),
        BulkString(Vec::new()),
        Int(2),
        BulkString(b"HINCRBY".to_vec()),
    ]))
    .unwrap();
    assert_eq!(renewed.extended, Extended(false, None));
    assert_eq!(renewed.recorded.refused, "HINCRBY");
    let left: Left =
        redis::from_redis_value(array(vec![Int(1), Int(3), Int(0), BulkString(Vec::new())]))
            .unwrap();
    assert_eq!((left.skips, left.recorded.flags), (Some(3), 0));
    let forced: ForceReply =
        redis::from_redis_value(array(vec![Int(1), Int(0), BulkString(Vec::new())])).unwrap();
    assert_eq!(forced.forced, Forced::Deleted);
    // Older replies, with nothing recorded, still read.
    let forced: ForceReply = redis::from_redis_value(Int(2)).unwrap();
    assert_eq!(forced.forced, Forced::DeletedUnannounced);
}

/// The digests build.rs computed are the ones Redis knows each script by: the redis
/// crate's hashing of the same source (Redis's own SHA-1, as `SCRIPT LOAD` answers it).
/// A digest of other bytes (a script hashed without its prelude, or a stale one) names a
/// script no server has: every call of it would fail with NOSCRIPT after loading them all
/// (or, for a user who may not `SCRIPT LOAD`, send the whole source by EVAL every time).
#[test]
fn each_script_is_sent_by_the_sha1_of_its_whole_source() {
    let prelude = include_str!("prelude.lua");
    for (at, script) in ALL.iter().enumerate() {
        assert!(
            script.source.starts_with(prelude),
            "script {at}: no prelude"
        );
        assert_eq!(
            script.sha1,
            redis::Script::new(script.source).get_hash(),
            "script {at}, which begins {:?}",
            script.source[prelude.len()..]
                .lines()
                .next()
                .unwrap_or_default()
        );
    }
    let mut digests: Vec<&str> = ALL.iter().map(|script| script.sha1).collect();
    digests.sort_unstable();
    digests.dedup();
    assert_eq!(digests.len(), ALL.len(), "two scripts share a digest");
}
