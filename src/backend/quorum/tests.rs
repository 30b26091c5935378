//! Unit tests of `quorum`'s decisions that need no servers (`tally`'s are beside it).

use super::renew::takeover_settled;

#[test]
fn a_takeover_is_settled_without_waiting_for_a_node_that_cannot_change_it() {
    let a = b"a".to_vec();
    let b = b"b".to_vec();
    // No request: settled whatever the silent nodes hold, one node alone deciding nothing.
    assert!(takeover_settled(&[], 1, 2));
    assert!(takeover_settled(&[], 2, 3));
    // One node has it, one silent node could make a majority of two: not yet settled.
    assert!(!takeover_settled(std::slice::from_ref(&a), 1, 2));
    // A majority has it already: settled, a frozen third node is not waited for.
    assert!(takeover_settled(&[a.clone(), a.clone()], 1, 2));
    // Two different requests on two nodes of five, one silent: none can reach three.
    assert!(takeover_settled(&[a.clone(), b.clone()], 1, 3));
    assert!(!takeover_settled(&[a.clone(), a, b], 1, 3));
}
