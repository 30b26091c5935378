//! How a Redlock holder hears a takeover (`--replace`): one `HolderListener` per node, each
//! on a connection of its own, made in parallel on threads of their own, never through the
//! nodes' threads (a node's renewal would wait behind a slow subscription there).
//!
//! A request is acted on only once a majority of the nodes has it on record, and each node
//! announces the request it records: listening on a majority, which shares a node with any
//! other majority, hears every request that can count. So `listen` returns once a majority
//! listens, and the others join as they come up. Every announcement is passed on, each copy
//! of it: unlike a release's copies (`ReleaseCopies`), a takeover's are few (one per node
//! per try of the replacing run), and the holder's renewal thread takes those that come
//! together as one.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use crate::backend::protocol::HolderListener;
use crate::backend::{Notice, NoticeSink, Subscription, SubscriptionParts, TakeoverListener};

pub(super) struct QuorumListener {
    /// Each behind a mutex of its own, held by the thread that subscribes on it: a node
    /// still subscribing from an earlier `listen` (it is slow) delays only its own part.
    nodes: Vec<Arc<Mutex<HolderListener>>>,
    majority: usize,
    timeout: Duration,
}

impl QuorumListener {
    pub(super) fn new(
        nodes: Vec<HolderListener>,
        majority: usize,
        timeout: Duration,
    ) -> QuorumListener {
        QuorumListener {
            nodes: nodes.into_iter().map(|n| Arc::new(Mutex::new(n))).collect(),
            majority,
            timeout,
        }
    }
}

impl TakeoverListener for QuorumListener {
    fn listen(&mut self, sink: NoticeSink) -> Result<Subscription> {
        let until = Instant::now() + self.timeout;
        let shared = Arc::new(Mutex::new(sink));
        let parts = SubscriptionParts::new();
        let (done_tx, done) = mpsc::channel::<Result<(), String>>();
        for node in &self.nodes {
            let (node, shared, parts, done_tx) = (
                Arc::clone(node),
                Arc::clone(&shared),
                parts.clone(),
                done_tx.clone(),
            );
            std::thread::Builder::new()
                .name("takeover-listen".into())
                .spawn(move || {
                    let sink: NoticeSink = Box::new(move |notice: Notice| {
                        // Poisoned only by a panic, which aborts the process.
                        let mut sink = shared.lock().unwrap_or_else(|p| p.into_inner());
                        (*sink)(notice)
                    });
                    let mut node = node.lock().unwrap_or_else(|p| p.into_inner());
                    let listened = node.listen_until(sink, until).map(|part| parts.add(part));
                    let _ = done_tx
                        .send(listened.map_err(|err| format!("{}: {err:#}", node.display())));
                })
                .context("cannot start a thread")?;
        }
        drop(done_tx);
        // Ends every node's subscription when dropped, late ones included.
        let subscription = Subscription::combined(parts);
        let (mut listening, mut failed) = (0, Vec::new());
        while listening < self.majority {
            match done.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(Ok(())) => listening += 1,
                Ok(Err(err)) => failed.push(err),
                Err(_) => break,
            }
        }
        if listening >= self.majority {
            return Ok(subscription);
        }
        if failed.is_empty() {
            failed.push(String::from("no answer in time"));
        }
        Err(anyhow!(
            "listening on {listening} of {} Redis nodes, fewer than a majority: {}",
            self.nodes.len(),
            failed.join("; ")
        ))
    }
}
