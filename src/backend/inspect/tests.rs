//! Unit tests of `inspect`.

use super::*;
use crate::backend::endpoint::tests::redis_values;
use proptest::prelude::*;

fn held_by(token: &str) -> Result<Vec<Slot>, String> {
    let value = format!("{{\"token\":\"{token}\",\"fence\":1}}").into_bytes();
    Ok(vec![Slot {
        key: Key::from("k"),
        holder: Holder::parse(&value),
        value: Some(value),
        kind: "string".into(),
        ttl: Some(Duration::from_secs(1)),
    }])
}

fn verdict(slots: Vec<Result<Vec<Slot>, String>>) -> Verdict {
    let nodes = slots
        .into_iter()
        .map(|slots| NodeView {
            display: "redis://n".into(),
            slots,
        })
        .collect();
    LockView {
        key: Key::from("k"),
        nodes,
    }
    .verdict()
}

#[test]
fn the_quorum_decides() {
    let down = || Err(String::from("down"));
    let held = verdict(vec![held_by("a"), held_by("a"), Ok(vec![])]);
    assert_eq!(
        held,
        Verdict::Held {
            identity: b"a".to_vec(),
            nodes: 2
        }
    );
    let split = verdict(vec![held_by("a"), held_by("b"), Ok(vec![])]);
    assert_eq!(split, Verdict::Free { strays: 2 });
    assert_eq!(
        verdict(vec![held_by("a"), down(), Ok(vec![])]),
        Verdict::Unknown
    );
    assert_eq!(
        verdict(vec![Ok(vec![]), down(), Ok(vec![])]),
        Verdict::Free { strays: 0 }
    );
    assert_eq!(verdict(vec![down(), down(), Ok(vec![])]), Verdict::Unknown);
}

#[test]
fn one_server_decides_alone() {
    assert!(matches!(
        verdict(vec![held_by("a")]),
        Verdict::Held { nodes: 1, .. }
    ));
    assert_eq!(verdict(vec![Ok(vec![])]), Verdict::Free { strays: 0 });
    assert_eq!(verdict(vec![Err("down".into())]), Verdict::Unknown);
}

#[test]
fn globs_are_escaped() {
    assert_eq!(glob_escape(b"a*b?[c]\\"), b"a\\*b\\?\\[c\\]\\\\");
    assert_eq!(glob_escape(b"redlock:"), b"redlock:");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Any reply to PEEK is read, or refused, without a panic; what is read keeps the
    /// value only for a string.
    #[test]
    fn any_peek_reply_is_read_or_refused(reply in redis_values()) {
        if let Ok(reply) = redis::from_redis_value::<PeekReply>(reply) {
            let kind = reply.kind.clone();
            let slot = read_peek(&Key::from("k"), reply);
            prop_assert_eq!(slot.is_none(), kind == "none");
            if let Some(slot) = slot {
                prop_assert_eq!(slot.value.is_some(), kind == "string");
            }
        }
    }

    /// Whatever the nodes say, the verdict is one of them, and a holder it names has a
    /// slot to show.
    #[test]
    fn any_views_give_a_verdict(
        nodes in prop::collection::vec(
            proptest::option::of(proptest::option::of("[ab]")), 1..6)
    ) {
        let slots: Vec<Result<Vec<Slot>, String>> = nodes
            .iter()
            .map(|node| match node {
                None => Err(String::from("down")),
                Some(None) => Ok(Vec::new()),
                Some(Some(token)) => held_by(token),
            })
            .collect();
        let view = LockView {
            key: Key::from("k"),
            nodes: slots
                .into_iter()
                .map(|slots| NodeView { display: String::new(), slots })
                .collect(),
        };
        if let Verdict::Held { identity, nodes } = view.verdict() {
            prop_assert!(nodes >= view.majority());
            prop_assert!(view.holder_slot(&identity).is_some());
        }
    }
}
