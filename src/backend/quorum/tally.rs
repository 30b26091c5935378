//! How the nodes answered one round, and what that means: whether a majority said yes, or
//! no for sure; who holds the nodes that refused; how a release went. Pure bookkeeping,
//! so that the quorum's decisions can be tested without servers.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use super::Answer;
use crate::backend::error::{is_fence_too_large, is_transient, BackendError};
use crate::backend::layout::identity_in;
use crate::backend::vetting::is_unfit;
use crate::backend::{Attempt, Released};

/// Which way each node went in one round, and whether the round is decided.
#[derive(Debug)]
pub(super) struct Tally {
    pub(super) nodes: usize,
    pub(super) majority: usize,
    pub(super) yes: Vec<usize>,
    pub(super) no: Vec<usize>,
    pub(super) failed: Vec<(usize, String)>,
    /// Some failure may pass by itself (a network fault, a timeout), as opposed to a
    /// refusal that will not change (authentication, a server error).
    pub(super) passing: bool,
    /// The round's time ran out before every node answered.
    pub(super) timed_out: bool,
}

impl Tally {
    pub(super) fn new(nodes: usize) -> Tally {
        Tally {
            nodes,
            majority: majority(nodes),
            yes: Vec::new(),
            no: Vec::new(),
            failed: Vec::new(),
            passing: false,
            timed_out: false,
        }
    }

    /// A majority said yes.
    pub(super) fn won(&self) -> bool {
        self.yes.len() >= self.majority
    }

    /// So many nodes said no that a majority cannot say yes: the answer is no for sure.
    pub(super) fn refused(&self) -> bool {
        self.no.len() > self.nodes - self.majority
    }

    /// Yes or no is certain (failures count against: they cannot become yes this round).
    pub(super) fn decided(&self) -> bool {
        self.won() || self.no.len() + self.failed.len() > self.nodes - self.majority
    }

    /// An acquisition can stop listening: won, refused, or so many nodes failed that no
    /// majority can answer. Until then a busy node may still answer, and that tells a lock
    /// held elsewhere (wait, or exit 75) from a majority out of reach (an error).
    pub(super) fn heard_enough(&self) -> bool {
        self.won() || self.refused() || self.failed.len() > self.nodes - self.majority
    }

    pub(super) fn answered(&self) -> usize {
        self.yes.len() + self.no.len() + self.failed.len()
    }

    /// The nodes that answered yes or no (a failure is no answer to the question).
    pub(super) fn reached(&self) -> usize {
        self.yes.len() + self.no.len()
    }

    /// Counts a node's failure to answer.
    pub(super) fn fail(&mut self, node: usize, err: &anyhow::Error) {
        self.passing |= is_transient(err);
        self.failed.push((node, format!("{err:#}")));
    }

    /// Why a majority did not say yes, naming what went wrong on each failed node. Worth
    /// retrying unless every failure was a refusal that will not change.
    pub(super) fn shortfall(&self, what: &str, displays: &[String]) -> anyhow::Error {
        let mut reasons: Vec<String> = self
            .failed
            .iter()
            .map(|(node, reason)| format!("{}: {reason}", displays[*node]))
            .collect();
        let silent = self.nodes - self.answered();
        if silent > 0 && self.timed_out {
            reasons.push(format!("{silent} gave no answer in time"));
        }
        let transient = self.passing || silent > 0 || self.failed.is_empty();
        // Every failure a refusal (authentication, a server error): say so, not "reached".
        let what = if transient {
            what
        } else {
            "accepted the request"
        };
        anyhow::Error::new(BackendError::transient_if(
            transient,
            format!(
                "too few Redis nodes {what} (a majority is {} of {}): {}",
                self.majority,
                self.nodes,
                reasons.join("; ")
            ),
        ))
    }
}

/// How many of `nodes` make a majority.
pub fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// How the nodes answered a release.
#[derive(Debug, Default)]
pub(super) struct ReleaseTally {
    pub(super) answered: usize,
    pub(super) deleted: usize,
    /// Deleted, but the node refused the announcement.
    pub(super) unannounced: usize,
    pub(super) kept: usize,
    pub(super) not_ours: usize,
    pub(super) errors: Vec<String>,
}

impl ReleaseTally {
    /// Whether a release can stop listening: a majority said how it went, or so many
    /// failed that no majority can (then the rest get only `STRAGGLER_WAIT`). A failed
    /// node is no answer: a slow node's "deleted" after one down and one "not ours" is what
    /// tells a release from a loss.
    pub(super) fn heard_enough(&self, nodes: usize, majority: usize) -> bool {
        let said = self.deleted + self.unannounced + self.kept + self.not_ours;
        said >= majority || self.not_ours > nodes - majority || self.errors.len() > nodes - majority
    }

    /// Counts one answer; returns how many have come.
    pub(super) fn take(&mut self, node: &str, answer: Answer) -> usize {
        self.answered += 1;
        match answer {
            Answer::Release(Ok(Released::Deleted)) => self.deleted += 1,
            Answer::Release(Ok(Released::DeletedUnannounced)) => self.unannounced += 1,
            Answer::Release(Ok(Released::KeptUntilMinHold)) => self.kept += 1,
            Answer::Release(Ok(Released::NotOurs)) => self.not_ours += 1,
            Answer::Release(Err(err)) => self.errors.push(format!("{node}: {err:#}")),
            _ => {}
        }
        self.answered
    }
}

/// The answers to one acquisition round.
pub(super) struct AcquireAnswers {
    pub(super) tally: Tally,
    /// Each node that took the key, with its fence count.
    pub(super) counted: Vec<(usize, u64)>,
    pub(super) refusals: Refusals,
    /// A node that cannot keep a lock (it may evict it: see `vetting`): the whole attempt is
    /// refused, as a majority that leans on such a node may vanish.
    pub(super) unfit: Option<anyhow::Error>,
    /// The newer `--supersede` waiter, as each node that found this one superseded named it.
    pub(super) superseded: Vec<Option<Vec<u8>>>,
    /// The nodes that found the work already done (`--once`), with their records. Only a
    /// majority of them makes it done: a record on fewer may be a release's that did not
    /// reach a majority, and the work is then done again.
    pub(super) done: Vec<(usize, Vec<u8>)>,
    /// The consecutive skips each node that recorded a skip counted.
    pub(super) skips: Vec<u64>,
    /// What each node whose fence counter is too large to count from said (see
    /// `FenceTooLarge`): those nodes took nothing and count as failed.
    pub(super) too_large: Vec<String>,
}

impl AcquireAnswers {
    pub(super) fn new(nodes: usize) -> AcquireAnswers {
        AcquireAnswers {
            tally: Tally::new(nodes),
            counted: Vec::new(),
            refusals: Refusals::default(),
            unfit: None,
            superseded: Vec::new(),
            done: Vec::new(),
            skips: Vec::new(),
            too_large: Vec::new(),
        }
    }

    /// Counts one answer; returns whether to stop listening: the outcome is known, or a
    /// majority has answered yes or no (the rest then get only `STRAGGLER_WAIT`, so that a
    /// blackholed node does not hold up every attempt for the whole timeout). A failed node
    /// is not an answer: with one yes, one down and one still to come, the one to come
    /// decides between taken, busy and out of reach, and is heard until the deadline.
    pub(super) fn take(&mut self, node: usize, answer: Answer) -> bool {
        match answer {
            Answer::Acquire(Ok(Attempt::Acquired { fence, .. })) => {
                self.tally.yes.push(node);
                self.counted.push((node, fence));
            }
            Answer::Acquire(Ok(Attempt::Busy {
                holder,
                holder_ttl,
                skips,
                ..
            })) => {
                self.skips.extend(skips);
                self.tally.no.push(node);
                self.refusals.seen.push((holder, holder_ttl));
            }
            // Refused, as far as taking the lock goes; whether the waiter leaves is up to a
            // majority (`Quorum::try_acquire`).
            Answer::Acquire(Ok(Attempt::Superseded { newer, skips })) => {
                self.skips.extend(skips);
                self.tally.no.push(node);
                self.superseded.push(newer);
            }
            // Nothing was taken there: for the tally, a refusal by nobody in particular.
            Answer::Acquire(Ok(Attempt::Done { record, skips })) => {
                self.skips.extend(skips);
                self.tally.no.push(node);
                self.refusals.seen.push((None, None));
                self.done.push((node, record));
            }
            Answer::Acquire(Err(err)) => {
                if is_fence_too_large(&err) {
                    self.too_large.push(format!("{err:#}"));
                }
                self.tally.fail(node, &err);
                if is_unfit(&err) && self.unfit.is_none() {
                    self.unfit = Some(err);
                }
            }
            _ => {}
        }
        self.unfit.is_some()
            || self.done.len() >= self.tally.majority
            || self.tally.heard_enough()
            || self.tally.reached() >= self.tally.majority
    }
}

/// What the nodes that refused an acquisition said: who holds them and for how long.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    /// Per refusing node: the holder's value (if a string) and its time left.
    pub(super) seen: Vec<(Option<Vec<u8>>, Option<Duration>)>,
}

impl Refusals {
    /// The soonest the lock can be free without a release: when enough refusing nodes
    /// have expired that the others make a majority. `None` if one of those never expires.
    pub(super) fn free_in(&self, nodes: usize, majority: usize) -> Option<Duration> {
        let must_free = self.seen.len().saturating_sub(nodes - majority).max(1);
        let mut ttls: Vec<Option<Duration>> = self.seen.iter().map(|(_, ttl)| *ttl).collect();
        // `None` (never expires) sorts after every time.
        ttls.sort_by_key(|ttl| (ttl.is_none(), *ttl));
        ttls.get(must_free - 1).copied().flatten()
    }

    /// How many refusing nodes each holder has, by identity (`None`: not a string).
    fn holders(&self) -> HashMap<Option<&[u8]>, usize> {
        let mut holders = HashMap::new();
        for (value, _) in &self.seen {
            let identity = value.as_deref().map(identity_in);
            *holders.entry(identity).or_default() += 1;
        }
        holders
    }

    /// Whether some single holder has a majority of the nodes; if not, contenders split
    /// them and each will let go.
    pub(super) fn split(&self, majority: usize) -> bool {
        self.holders().values().all(|&count| count < majority)
    }

    /// The holder to name: one with the most nodes.
    pub(super) fn holder(&self) -> Option<Vec<u8>> {
        let holders = self.holders();
        self.seen
            .iter()
            .filter_map(|(value, _)| value.as_ref())
            .max_by_key(|value| holders[&Some(identity_in(value))])
            .cloned()
    }
}

/// How many releases a waiter remembers, to act on the copies of each as below however the
/// copies from different nodes interleave.
const RECENT_RELEASES: usize = 16;

/// Which copies of a release notice a waiter acts on. Every node announces the release
/// it deleted, each at its own moment: the first copy may come while the others still
/// hold the releasing holder's key (a try then finds the lock busy), so the copy that
/// completes a majority is passed on too, when the lock is surely free of that holder.
/// Other copies would only repeat a try. At most two tries a release, whatever the nodes.
#[derive(Debug)]
pub(super) struct ReleaseCopies {
    majority: usize,
    /// Each recent release, by its notice, with the copies heard of it.
    heard: VecDeque<(String, usize)>,
}

impl ReleaseCopies {
    pub(super) fn new(majority: usize) -> ReleaseCopies {
        ReleaseCopies {
            majority,
            heard: VecDeque::with_capacity(RECENT_RELEASES),
        }
    }

    /// Whether a waiter should try again on this copy of the release notice `by`.
    pub(super) fn pass(&mut self, by: &str) -> bool {
        let copies = match self.heard.iter_mut().find(|(notice, _)| notice == by) {
            Some((_, copies)) => {
                *copies += 1;
                *copies
            }
            None => {
                if self.heard.len() == RECENT_RELEASES {
                    self.heard.pop_front();
                }
                self.heard.push_back((by.to_string(), 1));
                1
            }
        };
        copies == 1 || copies == self.majority
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(nodes: usize, yes: usize, no: usize, failed: usize) -> Tally {
        let mut tally = Tally::new(nodes);
        let mut node = 0..;
        tally.yes = node.by_ref().take(yes).collect();
        tally.no = node.by_ref().take(no).collect();
        tally.failed = node.take(failed).map(|n| (n, "down".into())).collect();
        tally
    }

    #[test]
    fn majorities() {
        assert_eq!(majority(1), 1);
        assert_eq!(majority(2), 2);
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
    }

    #[test]
    fn rounds_end_as_soon_as_the_outcome_is_certain() {
        // 3 nodes: two yes decide it, whatever the third says.
        assert!(tally(3, 2, 0, 0).won());
        assert!(tally(3, 2, 0, 0).decided());
        // One node down: still a majority with the two others.
        assert!(tally(3, 2, 0, 1).won());
        // One yes, one no: the third decides, so wait for it.
        assert!(!tally(3, 1, 1, 0).decided());
        // Two no: refused for sure.
        assert!(tally(3, 0, 2, 0).refused());
        assert!(tally(3, 1, 2, 0).decided());
        // One no and one down: undecided by refusals alone, but certain to fail.
        let down = tally(3, 1, 1, 1);
        assert!(down.decided() && !down.won() && !down.refused());
        // 5 nodes: 3 of 5, with two down.
        assert!(tally(5, 3, 0, 2).won());
        assert!(!tally(5, 2, 0, 2).decided());
        assert!(tally(5, 2, 0, 3).decided());
        assert!(tally(5, 0, 3, 0).refused());
        assert!(!tally(5, 0, 2, 0).refused());
    }

    #[test]
    fn an_acquisition_hears_out_a_busy_node_past_a_dead_one() {
        // One down, one busy: the third may be busy too (the lock is held), so listen on.
        assert!(!tally(3, 0, 1, 1).heard_enough());
        assert!(tally(3, 0, 2, 1).heard_enough());
        assert!(tally(3, 2, 0, 1).heard_enough());
        // Two down of three: no majority can answer, whatever the third says.
        assert!(tally(3, 0, 0, 2).heard_enough());
        assert!(!tally(5, 1, 1, 2).heard_enough());
        assert!(tally(5, 0, 0, 3).heard_enough());
    }

    fn acquired() -> Answer {
        Answer::Acquire(Ok(Attempt::Acquired {
            sent_at: std::time::Instant::now(),
            fence: 1,
        }))
    }

    fn refused_connection() -> Answer {
        Answer::Acquire(Err(anyhow::anyhow!("cannot connect: Connection refused")))
    }

    #[test]
    fn an_acquisition_hears_out_the_node_that_decides_past_a_dead_one() {
        // One node down, one yes: the third decides between taken, busy and out of reach,
        // so the round listens on (it stopped here, and a busy lock behind a slow node was
        // reported as "too few Redis nodes could be reached").
        let mut heard = AcquireAnswers::new(3);
        assert!(!heard.take(1, refused_connection()));
        assert!(!heard.take(2, acquired()));
        assert!(heard.take(0, acquired()));
        assert!(heard.tally.won());
        // A majority that answered yes or no is enough; the rest are stragglers.
        let mut heard = AcquireAnswers::new(3);
        assert!(!heard.take(2, acquired()));
        assert!(heard.take(
            0,
            Answer::Acquire(Ok(Attempt::Done {
                record: Vec::new(),
                skips: None,
            }))
        ));
        // Two down of three: nothing the third says can make a majority.
        let mut heard = AcquireAnswers::new(3);
        assert!(!heard.take(0, refused_connection()));
        assert!(heard.take(1, refused_connection()));
    }

    #[test]
    fn a_release_hears_out_the_node_that_decides_past_a_dead_one() {
        let mut release = ReleaseTally::default();
        release.take("n2", Answer::Release(Err(anyhow::anyhow!("down"))));
        release.take("n1", Answer::Release(Ok(Released::NotOurs)));
        assert!(!release.heard_enough(3, 2), "{release:?}");
        release.take("n0", Answer::Release(Ok(Released::Deleted)));
        assert!(release.heard_enough(3, 2));
        let mut lost = ReleaseTally::default();
        lost.take("n0", Answer::Release(Ok(Released::NotOurs)));
        lost.take("n1", Answer::Release(Ok(Released::NotOurs)));
        assert!(lost.heard_enough(3, 2));
        let mut down = ReleaseTally::default();
        down.take("n0", Answer::Release(Err(anyhow::anyhow!("down"))));
        assert!(!down.heard_enough(3, 2));
        down.take("n1", Answer::Release(Err(anyhow::anyhow!("down"))));
        assert!(down.heard_enough(3, 2));
    }

    #[test]
    fn a_shortfall_names_each_failed_node() {
        let displays: Vec<String> = (1..=3).map(|n| format!("redis://n{n}")).collect();
        let mut short = tally(3, 1, 0, 1);
        short.timed_out = true;
        let err = short.shortfall("could be reached", &displays);
        let text = format!("{err:#}");
        assert!(
            text.starts_with("too few Redis nodes could be reached (a majority is 2 of 3): "),
            "{text}"
        );
        assert!(text.contains("redis://n2: down"), "{text}");
        assert!(text.contains("1 gave no answer in time"), "{text}");
        assert!(is_transient(&err));
    }

    #[test]
    fn a_release_is_acted_on_first_and_once_a_majority_announced_it() {
        let mut copies = ReleaseCopies::new(3);
        let passed: Vec<bool> = ["a#1", "a#1", "b#1", "a#1", "a#1", "b#1", "b#1"]
            .into_iter()
            .map(|by| copies.pass(by))
            .collect();
        assert_eq!(passed, [true, false, true, true, false, false, true]);
        let mut one_node = ReleaseCopies::new(1);
        assert!(one_node.pass("x#1"));
        assert!(!one_node.pass("x#1"));
        let mut many = ReleaseCopies::new(2);
        for n in 0..100 {
            assert!(
                many.pass(&format!("r#{n}")),
                "each new release is passed on"
            );
        }
    }

    fn value(token: &str) -> Option<Vec<u8>> {
        Some(format!("{{\"token\":\"{token}\",\"fence\":1,\"host\":\"h\"}}").into_bytes())
    }

    #[test]
    fn a_holder_with_a_majority_is_not_a_split() {
        let ms = Duration::from_millis;
        let refusals = Refusals {
            seen: vec![(value("a"), Some(ms(300))), (value("a"), Some(ms(100)))],
        };
        assert!(!refusals.split(2));
        // 3 nodes, 2 refusing: once either expires, two nodes are free.
        assert_eq!(refusals.free_in(3, 2), Some(ms(100)));
        // 5 nodes with 3 refusals: one must go.
        let five = Refusals {
            seen: vec![
                (value("a"), Some(ms(300))),
                (value("a"), Some(ms(100))),
                (value("a"), None),
            ],
        };
        assert!(!five.split(3));
        assert_eq!(five.free_in(5, 3), Some(ms(100)));
    }

    #[test]
    fn contenders_that_split_the_nodes_are_told_so() {
        let refusals = Refusals {
            seen: vec![
                (value("a"), Some(Duration::from_secs(1))),
                (value("b"), None),
            ],
        };
        assert!(refusals.split(2));
        // The first to expire frees a majority; the key that never expires is not needed.
        assert_eq!(refusals.free_in(3, 2), Some(Duration::from_secs(1)));
        let stuck = Refusals {
            seen: vec![(value("a"), None), (value("b"), None)],
        };
        assert_eq!(stuck.free_in(3, 2), None);
    }
}
