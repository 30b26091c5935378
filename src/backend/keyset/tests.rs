use std::time::{Duration, Instant};

use super::*;

#[test]
fn all_takes_keys_in_byte_order_whatever_the_order_named() {
    let keys: [&[u8]; 3] = [b"redlock:db", b"redlock:cache", b"redlock:auth"];
    assert_eq!(taking_order(Mode::All, &keys), vec![2, 1, 0]);
    let crossed: [&[u8]; 2] = [b"b", b"a"];
    let straight: [&[u8]; 2] = [b"a", b"b"];
    // Both runs take `a` first: neither can hold one while waiting for the other's.
    assert_eq!(taking_order(Mode::All, &crossed), vec![1, 0]);
    assert_eq!(taking_order(Mode::All, &straight), vec![0, 1]);
}

#[test]
fn a_pool_is_tried_in_the_order_given() {
    let keys: [&[u8]; 3] = [b"s3", b"s1", b"s2"];
    assert_eq!(taking_order(Mode::Any, &keys), vec![0, 1, 2]);
}

fn busy(ttl: Option<u64>, split: bool) -> Attempt {
    Attempt::Busy {
        holder_ttl: ttl.map(Duration::from_millis),
        holder: Some(ttl.unwrap_or(0).to_string().into_bytes()),
        ahead: 0,
        split,
        skips: None,
    }
}

#[test]
fn a_busy_pool_waits_for_the_soonest_lease_end_and_names_the_first_holder() {
    let merged = merge_busy(Some(busy(Some(900), false)), busy(Some(300), true));
    let merged = merge_busy(Some(merged), busy(None, false));
    assert_eq!(
        merged,
        Attempt::Busy {
            holder_ttl: Some(Duration::from_millis(300)),
            holder: Some(b"900".to_vec()),
            ahead: 0,
            split: true,
            skips: None,
        }
    );
    assert_eq!(merge_busy(None, busy(None, false)), busy(None, false));
}

#[test]
fn renewals_are_lost_when_any_member_is_and_run_from_the_earliest() {
    let early = Instant::now();
    let late = early + Duration::from_millis(5);
    let extended = |sent_at| Renewal::Extended {
        sent_at,
        replace_by: None,
    };
    assert_eq!(
        merge_renewals(vec![extended(late), extended(early)]),
        extended(early)
    );
    assert_eq!(
        merge_renewals(vec![extended(early), Renewal::NotOurs]),
        Renewal::NotOurs
    );
    assert_eq!(merge_renewals(Vec::new()), Renewal::NotOurs);
}

#[test]
fn releases_are_lost_when_any_member_was() {
    use Released::*;
    assert_eq!(merge_releases(&[Deleted, Deleted]), Deleted);
    assert_eq!(merge_releases(&[Deleted, NotOurs]), NotOurs);
    assert_eq!(
        merge_releases(&[Deleted, DeletedUnannounced]),
        DeletedUnannounced
    );
    assert_eq!(
        merge_releases(&[KeptUntilMinHold, KeptUntilMinHold]),
        KeptUntilMinHold
    );
    assert_eq!(merge_releases(&[KeptUntilMinHold, Deleted]), Deleted);
    assert_eq!(merge_releases(&[]), NotOurs);
}
