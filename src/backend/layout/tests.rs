//! Unit tests of `layout`.

use super::*;
use crate::backend::key_slot;
use proptest::prelude::*;

fn request(label: &str) -> LockRequest {
    LockRequest::new(
        "k".into(),
        Duration::from_secs(1),
        3,
        false,
        "job",
        Some(label),
    )
}

#[test]
fn sharded_channels_carry_the_locks_hash_tag() {
    let channels = Channels::of(&"redlock:job".into(), true);
    assert_eq!(
        channels.release.to_string(),
        "redlock-run:released:{redlock:job}"
    );
    assert_eq!(
        channels.wake("t").to_string(),
        "redlock-run:wake:{redlock:job}:t"
    );
    let tagged = Channels::of(&"job{billing}".into(), true);
    assert_eq!(
        tagged.wake("t").to_string(),
        "redlock-run:wake:job{billing}:t"
    );
}

#[test]
fn metadata_is_json_after_the_fence() {
    let request = request("echo \"hi\"\n");
    assert_eq!(request.token.len(), 36);
    assert!(request.metadata.starts_with(",\"host\":"));
    assert!(request
        .metadata
        .contains(r#""program":"job","label":"echo \"hi\"\n""#));
    assert!(request.metadata.ends_with(",\"limit\":3}"));
    assert_eq!(
        request.identity(),
        format!("{{\"token\":\"{}\"", request.token)
    );
}

#[test]
fn tokens_differ() {
    assert_ne!(request("x").token, request("x").token);
}

#[test]
fn sibling_keys_share_the_hash_slot() {
    let key = |text: &str| Key::from(text);
    assert_eq!(
        sibling_key(&key("redlock:a"), b":fence"),
        key("{redlock:a}:fence")
    );
    assert_eq!(
        sibling_key(&key("x{tag}y"), b":fence"),
        key("x{tag}y:fence")
    );
    assert_eq!(slot_key(&key("redlock:a"), 1), key("redlock:a"));
    assert_eq!(slot_key(&key("redlock:a"), 2), key("{redlock:a}:slot:2"));
    for name in ["redlock:a", "a{b", "x{t}y", "a}b{c}"] {
        assert!(colocates(&key(name)), "{name}");
    }
    for name in ["a}b", "{}", "x{}y", "}"] {
        assert!(!colocates(&key(name)), "{name}");
    }
}

#[test]
fn bookkeeping_keys_are_recognised() {
    let owner = |name: &str| {
        lock_of_internal_key(&Key::from(name))
            .map(|key| String::from_utf8(key.as_bytes().to_vec()).unwrap())
    };
    assert_eq!(owner("{redlock:a}:fence").as_deref(), Some("redlock:a"));
    assert_eq!(owner("{redlock:a}:slot:3").as_deref(), Some("redlock:a"));
    // The --once records are the lock's own too: never listed, never a lock's name.
    assert_eq!(owner("{redlock:a}:done").as_deref(), Some("redlock:a"));
    assert_eq!(owner("{redlock:a}:done:per").as_deref(), Some("redlock:a"));
    assert_eq!(owner("{redlock:a}:done:ids").as_deref(), Some("redlock:a"));
    assert_eq!(owner("{redlock:a}:supersede").as_deref(), Some("redlock:a"));
    assert_eq!(
        owner("{redlock:a}:queue:alive").as_deref(),
        Some("redlock:a")
    );
    assert_eq!(
        owner("redlock:job{a}:fence").as_deref(),
        Some("redlock:job{a}")
    );
    assert_eq!(
        owner("redlock:job{a}:slot:2").as_deref(),
        Some("redlock:job{a}")
    );
    assert_eq!(
        owner("redlock:job{a}:limit").as_deref(),
        Some("redlock:job{a}")
    );
    // Locks whose names merely look like that.
    assert_eq!(owner("redlock:a:fence"), None);
    assert_eq!(owner("redlock:job{a}:slot:1"), None);
    assert_eq!(owner("redlock:deploy"), None);
}

#[test]
fn identities_are_read_back() {
    let request = request("x");
    let value = format!("{}{}", request.identity(), request.metadata);
    assert_eq!(identity_in(value.as_bytes()), request.identity().as_bytes());
    assert_eq!(identity_in(b"someone else's"), b"someone else's");
    assert_eq!(identity_in(b"{\"token\":\"a\""), b"{\"token\":\"a\"");
}

#[test]
fn json_escapes_control_characters() {
    assert_eq!(json_string("a\u{1}b"), r#""a\u0001b""#);
}

/// Key names with what matters to the layout: braces, colons, the suffixes themselves.
const NAME: &str = "([a-z{}:]|slot|fence|queue|limit|alive|[0-9]){1,12}";

fn name() -> impl Strategy<Value = Key> {
    let bytes = prop::collection::vec(any::<u8>(), 1..16).prop_map(Key::new);
    prop_oneof![NAME.prop_map(|name| Key::from(name.as_str())), bytes]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_value_is_read_or_refused(value in any::<Vec<u8>>()) {
        let holder = Holder::parse(&value);
        prop_assert!(holder.is_none_or(|holder| holder.token.is_some()));
        prop_assert!(value.starts_with(identity_in(&value)));
    }

    /// What a holder writes (the script puts the fence between identity and metadata)
    /// reads back as it was meant.
    #[test]
    fn written_values_read_back(
        program in "\\PC{0,300}",
        label in proptest::option::of("\\PC{0,40}|[\"\\\\\n\t\u{1}]{0,8}"),
        fence in any::<u64>(),
        limit in 1..=MAX_LIMIT,
    ) {
        let request = LockRequest::new(
            Key::from("k"),
            Duration::from_millis(1500),
            limit,
            false,
            &program,
            label.as_deref(),
        );
        let value = format!("{},\"fence\":{fence}{}", request.identity(), request.metadata);
        let holder = Holder::parse(value.as_bytes()).expect("our own value");
        prop_assert_eq!(holder.token.as_deref(), Some(request.token.as_str()));
        prop_assert_eq!(holder.fence, Some(fence));
        prop_assert_eq!(holder.limit, Some(u64::from(limit)));
        prop_assert_eq!(holder.pid, Some(u64::from(std::process::id())));
        prop_assert_eq!(holder.program.as_deref(), Some(cut(&program, MAX_PROGRAM_LEN)));
        prop_assert_eq!(holder.label, label);
        let identity = request.identity();
        prop_assert_eq!(identity_in(value.as_bytes()), identity.as_bytes());
    }

    /// Each bookkeeping key leads back to its lock, and shares its hash slot when the
    /// lock can have one. Exception: `{K}` (braces around a name without a tag) has the
    /// keys `K` has, and they lead to `K`.
    #[test]
    fn bookkeeping_keys_lead_back_to_their_lock(key in name(), slot in 2u32..=MAX_LIMIT) {
        let bytes = key.as_bytes();
        let braced = bytes
            .strip_prefix(b"{")
            .and_then(|inner| inner.strip_suffix(b"}"))
            .is_some_and(|inner| !has_hash_tag(inner));
        let siblings = [
            fence_key(&key),
            limit_key(&key),
            slot_key(&key, slot),
            queue_keys(&key)[0].clone(),
            queue_keys(&key)[1].clone(),
            done_keys(&key)[0].clone(),
            done_keys(&key)[1].clone(),
            supersede_key(&key),
        ];
        for sibling in siblings {
            let lock = lock_of_internal_key(&sibling);
            if braced {
                let inner = Key::new(&bytes[1..bytes.len() - 1]);
                prop_assert_eq!(lock, Some(inner));
            } else {
                prop_assert_eq!(lock, Some(key.clone()), "{:?}", sibling);
            }
            if colocates(&key) {
                prop_assert_eq!(key_slot(sibling.as_bytes()), key_slot(bytes));
            }
        }
        prop_assert_eq!(slot_key(&key, 1), key.clone());
    }

    /// In a cluster a lock's notice channels live in its slot (a script may publish only
    /// there, and they move with it); elsewhere they are the plain names of earlier
    /// versions. Both start with the prefixes the ACL line of docs/security.md allows.
    #[test]
    fn notice_channels_share_the_locks_slot(key in name(), token in "[0-9a-f-]{36}") {
        let sharded = Channels::of(&key, true);
        for channel in [&sharded.release, &sharded.wake(&token)] {
            if colocates(&key) {
                prop_assert_eq!(key_slot(channel.as_bytes()), key_slot(key.as_bytes()));
            }
        }
        prop_assert!(sharded.wake(&token).as_bytes().starts_with(b"redlock-run:wake:"));
        prop_assert!(sharded.release.as_bytes().starts_with(b"redlock-run:released:"));
        let plain = Channels::of(&key, false);
        prop_assert_eq!(
            &plain.release,
            &Key::from("redlock-run:released:").followed_by(key.as_bytes())
        );
        prop_assert_eq!(plain.wake(&token), Key::from(format!("redlock-run:wake:{token}").as_str()));
        prop_assert_eq!((sharded.sharded_arg(), plain.sharded_arg()), (&b"1"[..], &b"0"[..]));
    }

    /// Every lock's keys are its own: two names that may both be locks (neither refused by
    /// `shares_keys_with`) have no key in common. The second name is drawn near the first
    /// (one of its keys, or it in braces, or its braces taken off) as well as at random.
    #[test]
    fn no_two_locks_share_a_key(
        a in name(),
        other in name(),
        near in 0usize..8,
        slot in 2u32..=MAX_LIMIT,
    ) {
        let keys_of = |key: &Key| {
            let mut keys = vec![slot_key(key, 1), slot_key(key, 2), slot_key(key, slot)];
            keys.extend([fence_key(key), limit_key(key)]);
            keys.extend(queue_keys(key));
            keys
        };
        let bytes = a.as_bytes();
        let b = match near {
            0..=5 => keys_of(&a)[near].clone(),
            6 => Key::from("{").followed_by(bytes).followed_by(b"}"),
            _ => bytes
                .strip_prefix(b"{")
                .and_then(|inner| inner.strip_suffix(b"}"))
                .map_or_else(|| other.clone(), Key::new),
        };
        for b in [b, other] {
            if a == b || shares_keys_with(&a).is_some() || shares_keys_with(&b).is_some() {
                continue;
            }
            let theirs = keys_of(&b);
            for key in keys_of(&a) {
                prop_assert!(!theirs.contains(&key), "{:?} and {:?} share {:?}", a, b, key);
            }
        }
    }

    /// A lock's own name is not taken for another lock's bookkeeping unless it ends like
    /// one; whatever is returned is shorter than the name.
    #[test]
    fn any_name_is_a_lock_or_a_key_of_one(key in name()) {
        if let Some(lock) = lock_of_internal_key(&key) {
            prop_assert!(lock.len() < key.len());
        }
    }
}
