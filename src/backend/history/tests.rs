use redis::Value;

use super::parse::{entries_of, pairs};
use super::tally::Tally;
use super::*;

fn entry(id: &str, fields: &[(&str, &str)]) -> Entry {
    let (ms, seq) = id.split_once('-').unwrap();
    Entry {
        id: id.into(),
        ms: ms.parse().ok(),
        seq: seq.parse().unwrap(),
        fields: fields
            .iter()
            .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
    }
}

#[test]
fn a_quorum_shows_what_a_majority_recorded_at_its_earliest_time() {
    let mut tally = Tally::new(3);
    let acquired = [("event", "acquired"), ("token", "a")];
    let lost = [("event", "lost"), ("token", "a")];
    assert_eq!(tally.add(0, entry("20-0", &acquired)), None);
    assert_eq!(
        tally.add(2, entry("30-0", &lost)),
        None,
        "one node of three"
    );
    let shown = tally
        .add(1, entry("10-0", &acquired))
        .expect("two of three");
    assert_eq!(shown.id, "10-0");
    assert_eq!(tally.add(2, entry("25-0", &acquired)), None, "shown once");
    assert!(tally.shown_now().is_empty());
}

#[test]
fn what_was_counted_is_shown_by_time_then_never_again() {
    let mut tally = Tally::new(3);
    let acquired = [("event", "acquired"), ("token", "a")];
    let busy = [("event", "busy"), ("token", "b")];
    tally.count(0, entry("30-0", &busy));
    tally.count(1, entry("31-0", &busy));
    tally.count(0, entry("20-0", &acquired));
    tally.count(2, entry("21-0", &acquired));
    tally.count(2, entry("40-0", &[("event", "lost"), ("token", "a")]));
    let ids: Vec<String> = tally.shown_now().into_iter().map(|e| e.id).collect();
    assert_eq!(ids, ["20-0", "30-0"]);
    assert_eq!(tally.add(1, entry("22-0", &acquired)), None);
    assert!(tally.shown_now().is_empty());
}

#[test]
fn one_server_shows_every_entry_even_alike_ones() {
    let mut tally = Tally::new(1);
    let busy = [("event", "busy"), ("token", "b")];
    assert!(tally.add(0, entry("1-0", &busy)).is_some());
    assert!(tally.add(0, entry("1-1", &busy)).is_some());
}

#[test]
fn replies_of_any_shape_are_read_or_skipped() {
    let reply = Value::Array(vec![
        Value::Array(vec![
            Value::BulkString(b"5-1".to_vec()),
            Value::Array(vec![
                Value::BulkString(b"event".to_vec()),
                Value::BulkString(b"busy".to_vec()),
                Value::BulkString(b"odd".to_vec()),
            ]),
        ]),
        Value::Int(3),
        Value::Array(vec![]),
        Value::Array(vec![Value::BulkString(b"junk".to_vec())]),
    ]);
    let entries = entries_of(reply);
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0].ms, Some(5));
    assert_eq!(entries[0].fields.len(), 1);
    assert_eq!(entries[1].ms, None);
    assert!(entries_of(Value::Nil).is_empty());
    assert!(pairs(Value::Okay).is_empty());
}
