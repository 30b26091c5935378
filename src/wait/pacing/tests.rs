//! Unit tests of the pacing rules and the delays they draw on: no clock, no Redis.

use super::*;

#[test]
fn retry_follows_the_holders_ttl() {
    for _ in 0..100 {
        let delay = retry_delay(Some(Duration::from_secs(20)));
        assert!(delay > Duration::from_secs(20));
        assert!(delay <= Duration::from_millis(20_251));
    }
}

#[test]
fn keys_without_ttl_are_rechecked_rarely() {
    assert!(retry_delay(None) >= NO_TTL_RECHECK);
}

#[test]
fn split_pauses_are_random_and_grow() {
    assert!((0..50).all(|_| split_pause(1) <= SPLIT_PAUSE_MAX + Duration::from_millis(1)));
    let first: Vec<Duration> = (0..50).map(|_| split_pause(1)).collect();
    assert!(first.iter().any(|pause| *pause != first[0]), "not random");
    assert!(split_pause(30) <= SPLIT_PAUSE_MAX * 256 + Duration::from_millis(1));
}

#[test]
fn a_release_on_its_way_is_retried_soon_then_left() {
    assert_eq!(releasing_retry(0), Some(RELEASING_RETRY));
    assert_eq!(releasing_retry(5), Some(RELEASING_RETRY * 32));
    assert_eq!(releasing_retry(9), Some(RELEASING_RETRY * 32));
    assert_eq!(releasing_retry(RELEASING_TRIES), None);
}

#[test]
fn foreign_holders_are_polled_with_backoff() {
    assert!(foreign_poll(1) < FOREIGN_POLL_MIN * 2);
    assert!(foreign_poll(3) >= FOREIGN_POLL_MIN * 4);
    assert!(foreign_poll(40) <= FOREIGN_POLL_MAX + FOREIGN_POLL_MAX / 4);
    assert!(holder_cannot_announce(Some(b"another client's token"), 0));
    assert!(
        holder_cannot_announce(None, 0),
        "not a string: another application's"
    );
    assert!(!holder_cannot_announce(None, 2), "a fair queue");
    assert!(!holder_cannot_announce(
        Some(br#"{"token":"t","fence":1}"#),
        0
    ));
}

#[test]
fn backoff_grows_and_is_capped() {
    assert!(backoff(1) < backoff(4));
    assert!(backoff(30) <= RECONNECT_MAX + RECONNECT_MIN);
}
const MS: Duration = Duration::from_millis(1);
/// A value written by redlock-run (one that announces its release), and its identity
/// as a release notice names it.
const OURS: &[u8] = br#"{"token":"t","fence":1}"#;
const OURS_RELEASED: &str = r##"{"token":"t"#7"##;

fn plan(wait: Option<Duration>, takeover: bool, started: Instant) -> WaitPlan {
    WaitPlan {
        deadline: wait.map(|wait| started + wait),
        announce: false,
        redis_timeout: Duration::from_secs(2),
        takeover,
    }
}

fn busy(holder: Option<&[u8]>, holder_ttl: Option<Duration>) -> Busy<'_> {
    Busy {
        holder_ttl,
        holder,
        ahead: 0,
        split: false,
    }
}

#[test]
fn the_first_try_is_due_at_once_but_only_once_listening() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(None, false, t0), t0);
    assert!(!pacing.try_now(t0, false), "not before the subscription");
    assert!(pacing.try_now(t0, true));
}

#[test]
fn behind_a_holder_of_ours_the_next_try_is_at_its_lease_end_or_its_notice() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(None, false, t0), t0);
    pacing.subscribed(t0);
    let delay = pacing.busy(t0, busy(Some(OURS), Some(Duration::from_secs(20))));
    assert!(delay > Duration::from_secs(20) && delay <= Duration::from_millis(20_251));
    assert_eq!(pacing.wake_at(), t0 + delay, "no tick before it");
    assert!(!pacing.try_now(t0 + Duration::from_secs(19), true));
    let notice = t0 + Duration::from_secs(3);
    pacing.released(notice, "");
    assert_eq!(pacing.wake_at(), notice);
    assert!(
        pacing.try_now(notice, true),
        "a notice brings the try forward"
    );
}

#[test]
fn a_key_without_ttl_is_rechecked_rarely() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(None, false, t0), t0);
    assert!(pacing.busy(t0, busy(Some(OURS), None)) >= NO_TTL_RECHECK);
}

#[test]
fn a_holder_that_cannot_announce_is_polled_with_backoff() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(None, false, t0), t0);
    let ttl = Some(Duration::from_secs(60));
    let delays: Vec<Duration> = (0..12)
        .map(|_| pacing.busy(t0, busy(Some(b"another client's token"), ttl)))
        .collect();
    assert!(delays[0] >= FOREIGN_POLL_MIN && delays[0] < FOREIGN_POLL_MIN * 2);
    assert!(delays[2] >= FOREIGN_POLL_MIN * 4, "doubling");
    assert!(
        delays[11] <= FOREIGN_POLL_MAX + FOREIGN_POLL_MAX / 4,
        "capped"
    );
    // Another application's key (not a string) is polled too; a holder of ours resets
    // the backoff and is not polled.
    assert!(pacing.busy(t0, busy(None, ttl)) <= FOREIGN_POLL_MAX + FOREIGN_POLL_MAX / 4);
    assert!(pacing.busy(t0, busy(Some(OURS), ttl)) > Duration::from_secs(60));
    assert!(pacing.busy(t0, busy(None, ttl)) < FOREIGN_POLL_MIN * 2);
}

#[test]
fn without_notices_a_busy_lock_is_looked_at_often() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(None, false, t0), t0);
    pacing.without_notices();
    let delay = pacing.busy(t0, busy(Some(OURS), Some(Duration::from_secs(60))));
    assert!(delay >= NO_NOTICES_POLL && delay <= NO_NOTICES_POLL + NO_NOTICES_POLL / 5);
    assert!(
        pacing.try_now(t0 + delay, true),
        "polling counts as listening"
    );
}

#[test]
fn nothing_is_tried_past_the_deadline() {
    let t0 = Instant::now();
    let pacing = Pacing::new(plan(Some(Duration::from_secs(10)), false, t0), t0);
    assert!(!pacing.is_over(t0 + Duration::from_millis(9_999)));
    assert!(pacing.is_over(t0 + Duration::from_secs(10)));
    assert!(
        pacing.is_over(t0 + Duration::from_secs(3600)),
        "paused through it"
    );
    assert!(!Pacing::new(plan(None, false, t0), t0).is_over(t0 + Duration::from_secs(3600)));
}

#[test]
fn the_last_try_is_a_second_before_the_deadline_or_half_the_wait() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(Some(Duration::from_secs(10)), false, t0), t0);
    pacing.busy(t0, busy(Some(OURS), Some(Duration::from_secs(60))));
    let last = t0 + Duration::from_secs(9);
    assert_eq!(pacing.wake_at(), last, "before the holder's lease end");
    assert!(!pacing.try_now(last - MS, true));
    assert!(
        pacing.try_now(last, false),
        "whatever the schedule, even unsubscribed"
    );
    assert!(!pacing.try_now(last + MS, true), "once");
    assert_eq!(
        pacing.wake_at(),
        t0 + Duration::from_secs(10) - FINAL_TRY_LEAD,
        "then the deadline's try"
    );

    let short = Pacing::new(plan(Some(Duration::from_millis(600)), false, t0), t0);
    assert_eq!(short.wake_at(), t0, "the first try is due at once");
    assert_eq!(
        short.last_tries,
        [
            Some(t0 + Duration::from_millis(300)),
            Some(t0 + Duration::from_millis(550))
        ]
    );
}

#[test]
fn a_waiter_that_names_the_holder_looks_again_every_few_seconds() {
    let t0 = Instant::now();
    let ttl = Some(Duration::from_secs(90));
    let mut announcing = Pacing::new(
        WaitPlan {
            announce: true,
            ..plan(None, false, t0)
        },
        t0,
    );
    announcing.subscribed(t0);
    assert_eq!(
        announcing.busy(t0, busy(Some(OURS), ttl)),
        ANNOUNCE_RECHECK,
        "a holder of ours with a long lease"
    );
    let mut silent = Pacing::new(plan(None, false, t0), t0);
    silent.subscribed(t0);
    assert!(
        silent.busy(t0, busy(Some(OURS), ttl)) > ANNOUNCE_RECHECK,
        "a batch waiter keeps the usual pace"
    );
}

#[test]
fn a_wait_ends_with_a_try_at_its_deadline_whatever_the_pacing() {
    // Behind another client's lock, polled with growing gaps: after the early last try
    // (a second before the deadline) the next poll falls past the deadline, and a
    // release in between must still be found.
    let t0 = Instant::now();
    let wait = Duration::from_secs(2);
    let deadline = t0 + wait;
    let mut pacing = Pacing::new(plan(Some(wait), false, t0), t0);
    let early = t0 + Duration::from_secs(1);
    assert!(pacing.try_now(early, true), "the early last try");
    pacing.busy(
        early,
        busy(Some(&b"foreign"[..]), Some(Duration::from_secs(60))),
    );
    pacing.next_try = deadline + Duration::from_secs(1);
    let final_try = deadline - FINAL_TRY_LEAD;
    assert_eq!(pacing.wake_at(), final_try, "woken for the deadline's try");
    assert!(!pacing.try_now(final_try - MS, true));
    assert!(pacing.try_now(final_try, false), "made, even unsubscribed");
    assert!(!pacing.try_now(final_try + MS, true), "once");
    assert_eq!(pacing.wake_at(), deadline, "then the deadline");

    // However short the wait, its last try is before its deadline.
    let short = Pacing::new(plan(Some(Duration::from_millis(40)), false, t0), t0);
    let tries: Vec<Instant> = short.last_tries.iter().flatten().copied().collect();
    assert!(tries
        .iter()
        .all(|&at| at >= t0 && at < t0 + Duration::from_millis(40)));
}

#[test]
fn a_failure_to_reach_redis_backs_off_and_counts_unless_the_deadline_cut_it_short() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(Some(Duration::from_secs(30)), false, t0), t0);
    let first = pacing.unreachable(t0, t0 + Duration::from_secs(2));
    assert_eq!(
        first,
        Failure {
            in_a_row: 1,
            counts: true
        }
    );
    let after = pacing.wake_at() - (t0 + Duration::from_secs(2));
    assert!(after >= RECONNECT_MIN * 2 && after < RECONNECT_MIN * 3);
    // At the deadline, after less than Redis's timeout: cut short, says nothing.
    let step = t0 + Duration::from_millis(29_500);
    let cut = pacing.unreachable(step, t0 + Duration::from_secs(30));
    assert_eq!(
        cut,
        Failure {
            in_a_row: 2,
            counts: false
        }
    );
    // Given the whole timeout, it counts even at the deadline.
    let whole = pacing.unreachable(t0 + Duration::from_secs(28), t0 + Duration::from_secs(30));
    assert!(whole.counts);
    // A busy answer ends the run of failures.
    pacing.busy(t0, busy(Some(OURS), None));
    assert_eq!(pacing.unreachable(t0, t0).in_a_row, 1);
}

#[test]
fn a_subscription_made_again_is_followed_by_a_try_at_once() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(None, false, t0), t0);
    pacing.subscribed(t0);
    pacing.busy(t0, busy(Some(OURS), Some(Duration::from_secs(60))));
    let again = t0 + Duration::from_secs(5);
    assert!(!pacing.try_now(again, true));
    pacing.subscribed(again);
    assert!(pacing.try_now(again, true));
}

#[test]
fn after_a_split_a_notice_does_not_bring_the_try_before_the_pause() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(None, false, t0), t0);
    let split = Busy {
        split: true,
        ..busy(Some(OURS), Some(Duration::from_secs(60)))
    };
    let delay = pacing.busy(t0, split);
    assert!(delay <= SPLIT_PAUSE_MAX + MS);
    pacing.released(t0, "");
    assert_eq!(pacing.wake_at(), t0 + delay);
    // Not split: a notice brings the try to the moment it came.
    pacing.busy(t0, busy(Some(OURS), Some(Duration::from_secs(60))));
    pacing.released(t0 + MS, "");
    assert_eq!(pacing.wake_at(), t0 + MS);
}

#[test]
fn a_holder_still_there_after_its_release_notice_is_retried_soon_then_left() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(None, false, t0), t0);
    let ttl = Some(Duration::from_secs(60));
    pacing.released(t0, OURS_RELEASED);
    let delays: Vec<Duration> = (0..=RELEASING_TRIES)
        .map(|_| pacing.busy(t0, busy(Some(OURS), ttl)))
        .collect();
    assert_eq!(delays[0], RELEASING_RETRY);
    assert_eq!(delays[1], RELEASING_RETRY * 2);
    assert_eq!(delays[9], RELEASING_RETRY * 32);
    assert!(
        delays[10] > Duration::from_secs(60),
        "the usual schedule again"
    );
    // Another holder than the one released is not retried soon.
    pacing.released(t0, OURS_RELEASED);
    let other = br#"{"token":"u","fence":2}"#;
    assert!(pacing.busy(t0, busy(Some(other), ttl)) > Duration::from_secs(60));
}

#[test]
fn a_takeover_tries_often_at_first_then_at_the_usual_pace() {
    let t0 = Instant::now();
    let mut pacing = Pacing::new(plan(None, true, t0), t0);
    let ttl = Some(Duration::from_secs(60));
    assert!(pacing.pushing(t0));
    assert_eq!(pacing.busy(t0, busy(Some(OURS), ttl)), TAKEOVER_RETRY);
    let later = t0 + TAKEOVER_PUSH;
    assert!(!pacing.pushing(later));
    assert!(pacing.busy(later, busy(Some(OURS), ttl)) > Duration::from_secs(60));
    assert!(!Pacing::new(plan(None, false, t0), t0).pushing(t0));
}
