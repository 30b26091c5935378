//! Following a history as it grows: one reading thread per node, which only reports, and
//! the `Follower` that decides what is shown and when too few nodes are left. Not the
//! first read (`History::recent`) nor what makes an event shown (`tally`).

use std::sync::mpsc::{self, Receiver};

use anyhow::{anyhow, Result};

use super::read::read_after;
use super::tally::Tally;
use super::{Entry, History, Node};
use crate::backend::layout::Key;

impl History {
    /// From here on, the events recorded after those [`History::recent`] read, as a
    /// majority of the nodes records them: one thread per node that could be read, each
    /// blocking in `XREAD` for a little less than the Redis timeout at a time.
    pub fn follow(self) -> Follower {
        let (sender, receiver) = mpsc::channel();
        let mut alive = 0;
        let mut displays = Vec::new();
        for (index, node) in self.nodes.into_iter().enumerate() {
            displays.push(node.display.clone());
            if node.failed.is_some() {
                continue;
            }
            let sender = sender.clone();
            let stream = self.stream.clone();
            let lock = self.lock.clone();
            let Node {
                mut link,
                mut cursor,
                ..
            } = node;
            let spawned = std::thread::Builder::new()
                .name(format!("history-{index}"))
                .spawn(move || loop {
                    match read_after(&mut link, &lock, &stream, &cursor) {
                        Ok(entries) => {
                            let Some(newest) = entries.last() else {
                                continue;
                            };
                            cursor = newest.id.clone();
                            if sender.send((index, Ok(entries))).is_err() {
                                return;
                            }
                        }
                        Err(err) => {
                            let _ = sender.send((index, Err(format!("{err:#}"))));
                            return;
                        }
                    }
                });
            // A reader that cannot start counts as a node that stopped answering.
            alive += usize::from(spawned.is_ok());
        }
        Follower {
            receiver,
            tally: self.tally,
            alive,
            displays,
            lock: self.lock,
        }
    }
}

/// What a follower has for its caller next.
#[derive(Debug)]
pub enum Step {
    /// Events that just reached a majority of the nodes (every event, on one server).
    Events(Vec<Entry>),
    /// A node of a quorum stopped answering: its display and why. The others go on.
    NodeFailed { display: String, error: String },
}

/// New events as they come: see [`History::follow`].
pub struct Follower {
    receiver: Receiver<(usize, Result<Vec<Entry>, String>)>,
    tally: Tally,
    /// Readers still reading.
    alive: usize,
    displays: Vec<String>,
    lock: Key,
}

impl Follower {
    /// Waits for the next step. An error once the one server, or so many nodes of a quorum
    /// that no majority is left, stopped answering.
    pub fn next(&mut self) -> Result<Step> {
        loop {
            if self.alive < self.tally.majority {
                return Err(anyhow!(
                    "cannot follow the history of {}: too few Redis nodes answer",
                    self.lock
                ));
            }
            let Ok((node, read)) = self.receiver.recv() else {
                return Err(anyhow!("cannot follow the history of {}", self.lock));
            };
            match read {
                Ok(entries) => {
                    let events: Vec<Entry> = entries
                        .into_iter()
                        .filter_map(|entry| self.tally.add(node, entry))
                        .collect();
                    if !events.is_empty() {
                        return Ok(Step::Events(events));
                    }
                }
                Err(error) => {
                    self.alive = self.alive.saturating_sub(1);
                    if self.displays.len() == 1 {
                        return Err(anyhow!(
                            "cannot follow the history of {}: {error}",
                            self.lock
                        ));
                    }
                    if self.alive < self.tally.majority {
                        return Err(anyhow!(
                            "cannot follow the history of {}: too few of the {} Redis nodes \
                             answer ({}: {error})",
                            self.lock,
                            self.displays.len(),
                            self.displays[node]
                        ));
                    }
                    return Ok(Step::NodeFailed {
                        display: self.displays[node].clone(),
                        error,
                    });
                }
            }
        }
    }
}
