//! Unit tests of `inspect`.

use super::list::glob_escape;
use super::*;
use crate::backend::endpoint::tests::redis_values;
use crate::backend::layout::{Holder, Key};
use crate::backend::scripts::PeekReply;
use proptest::prelude::*;

fn held_by(token: &str) -> Result<Vec<Slot>, String> {
    let value = format!("{{\"token\":\"{token}\",\"fence\":1}}").into_bytes();
    Ok(vec![Slot {
        key: Key::from("k"),
        holder: Holder::parse(&value),
        value: Some(value),
        kind: "string".into(),
        ttl: Some(Duration::from_secs(1)),
        length: 0,
        shared: false,
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

fn view(slots: Vec<Result<Vec<Slot>, String>>) -> LockView {
    LockView {
        key: Key::from("k"),
        nodes: slots
            .into_iter()
            .map(|slots| NodeView {
                display: "redis://n".into(),
                slots,
            })
            .collect(),
    }
}

/// A slot whose value no redlock-run wrote: a string, or another application's hash.
fn foreign(kind: &str) -> Result<Vec<Slot>, String> {
    Ok(vec![Slot {
        key: Key::from("k"),
        holder: None,
        value: (kind == "string").then(|| b"someone else".to_vec()),
        kind: kind.into(),
        ttl: None,
        length: 0,
        shared: false,
    }])
}

/// The plan's kind, and the nodes of the slots it would delete or names as held.
fn plan(slots: Vec<Result<Vec<Slot>, String>>, force: bool) -> (&'static str, Vec<usize>) {
    let view = view(slots);
    let nodes = |held: Vec<(usize, &Slot)>| held.into_iter().map(|(node, _)| node).collect();
    match view.release_plan(force) {
        ReleasePlan::Free => ("free", Vec::new()),
        ReleasePlan::FreeOnMajority { read } => ("free on majority", vec![read]),
        ReleasePlan::Leftovers => ("leftovers", Vec::new()),
        ReleasePlan::Refuse { held } => ("refuse", nodes(held)),
        ReleasePlan::Delete { held } => ("delete", nodes(held)),
    }
}

#[test]
fn release_plans_one_server() {
    for force in [false, true] {
        // Free is free, with or without --force.
        assert_eq!(plan(vec![Ok(vec![])], force), ("free", vec![]));
    }
    // Held by a redlock-run, or by another client's string or another application's hash:
    // refused without --force, deleted with it (the wording refuses a hash, slot by slot).
    for held in [held_by("a"), foreign("string"), foreign("hash")] {
        assert_eq!(plan(vec![held.clone()], false), ("refuse", vec![0]));
        assert_eq!(plan(vec![held], true), ("delete", vec![0]));
    }
    let both = Ok([held_by("a").unwrap(), held_by("b").unwrap()].concat());
    assert_eq!(plan(vec![both], true), ("delete", vec![0, 0]));
}

#[test]
fn release_plans_a_quorum() {
    let down = || Err(String::from("down"));
    for force in [false, true] {
        assert_eq!(plan(vec![Ok(vec![]); 3], force), ("free", vec![]));
        // A node down, the rest (a majority) empty: free as `status` says.
        assert_eq!(
            plan(vec![Ok(vec![]), down(), Ok(vec![])], force),
            ("free on majority", vec![2])
        );
    }
    // Leftovers that no holder has a majority of: nothing to do without --force.
    let split = || vec![held_by("a"), held_by("b"), Ok(vec![])];
    assert_eq!(plan(split(), false), ("leftovers", vec![]));
    assert_eq!(plan(split(), true), ("delete", vec![0, 1]));
    // Held on a majority, a node down: refused, or deleted where read.
    let held = || vec![held_by("a"), down(), held_by("a")];
    assert_eq!(plan(held(), false), ("refuse", vec![0, 2]));
    assert_eq!(plan(held(), true), ("delete", vec![0, 2]));
    // Too few nodes read to tell, nothing found on them: refused as if held.
    let unknown = || vec![down(), down(), Ok(vec![])];
    assert_eq!(plan(unknown(), false), ("refuse", vec![]));
    assert_eq!(plan(unknown(), true), ("delete", vec![]));
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
