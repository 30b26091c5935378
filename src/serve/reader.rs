//! The one thread that talks to Redis for the server (with a helper of its own while it reads
//! the board's events): every request that needs Redis sends
//! it a job and awaits the answer, so a slow or hostile client never holds a Redis
//! connection, and Redis never holds the HTTP loop. Jobs that come together are answered
//! from one read: the board's snapshot (every lock, its counters and last events, and the
//! `/metrics` text made from them; without the events and the JSON when only `/metrics`
//! asked) is read once and reused for [`FRESH_FOR`]; the pages of one lock asked together
//! are read once, and a job whose request has gone is dropped unread. At most [`QUEUE`] jobs
//! wait (past them a request is answered 503 "busy"). `/healthz` has a thread and a
//! connection of its own, so that a slow page never fails a liveness probe.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Result};
use tokio::sync::oneshot;

use super::api;
use crate::backend::inspect::{Inspector, Verdict};
use crate::backend::Key;
use crate::config::ServeConfig;
use crate::report;

/// How long a snapshot is served before Redis is read again: the board fetches every 2 s,
/// Prometheus every 15 s or more.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// The most locks one snapshot reads; past it the board says `"truncated": true`.
pub const MAX_LOCKS: usize = 20_000;

/// The most jobs that wait for the reader (and, apart, for the health check).
pub const QUEUE: usize = 256;

/// One read of every lock under the prefix, as the board and `/metrics` answer it.
pub struct Snapshot {
    pub read_at: Instant,
    /// `/api/locks`' body; `None` in a snapshot read for `/metrics` alone, which reads no
    /// history and builds no JSON.
    pub api: Option<String>,
    /// `/metrics`' body, or why the counters could not be read.
    pub metrics: Result<String, String>,
}

/// A lock page's answer.
type LockReply = oneshot::Sender<Result<Option<String>, String>>;

/// What a request asks of Redis.
enum Job {
    /// `api`: for `/api/locks` (else for `/metrics` alone).
    Board {
        api: bool,
        reply: oneshot::Sender<Result<Arc<Snapshot>, String>>,
    },
    /// A lock's full key: its page's JSON, `None` when nothing is known of it.
    Lock(Key, LockReply),
}

/// A `/healthz` request's answer.
type Health = oneshot::Sender<Result<(), String>>;

/// The way to the reader thread.
#[derive(Clone)]
pub struct Reader {
    jobs: SyncSender<Job>,
    health: SyncSender<Health>,
    /// How long a request waits for its answer.
    patience: Duration,
}

impl Reader {
    /// Starts the thread; it connects on its first job.
    pub fn spawn(config: &ServeConfig) -> Result<Reader> {
        let inspector = Inspector::open(&config.redis, config.redis_timeout)?;
        let histories = Inspector::open(&config.redis, config.redis_timeout)?;
        let mut pinger = Inspector::open(&config.redis, config.redis_timeout)?;
        let (jobs, received) = std::sync::mpsc::sync_channel(QUEUE);
        let (health, asked) = std::sync::mpsc::sync_channel::<Health>(QUEUE);
        let prefix = config.prefix.clone();
        let mut thread = Thread {
            inspector,
            histories,
            prefix,
            snapshot: None,
            failing: false,
        };
        // Signals are the loop's (see `serve::stop`): this thread takes none.
        crate::signals::spawn_deaf(|| {
            std::thread::Builder::new()
                .name("redis-reader".into())
                .spawn(move || thread.serve(&received))
        })
        .map_err(|err| anyhow!("cannot start the Redis reader: {err}"))?;
        crate::signals::spawn_deaf(|| {
            std::thread::Builder::new()
                .name("redis-health".into())
                .spawn(move || check_health(&mut pinger, &asked))
        })
        .map_err(|err| anyhow!("cannot start the Redis health check: {err}"))?;
        Ok(Reader {
            jobs,
            health,
            // Every command waits up to the Redis timeout; a snapshot of many locks sends a
            // few rounds of them, and jobs queue behind one another.
            patience: config.redis_timeout * 4 + Duration::from_secs(5),
        })
    }

    /// A snapshot with `/api/locks`' body.
    pub async fn board(&self) -> Result<Arc<Snapshot>, String> {
        ask(&self.jobs, self.patience, |reply| Job::Board {
            api: true,
            reply,
        })
        .await
    }

    /// A snapshot with `/metrics`' body (and `/api/locks`' when one was read for both).
    pub async fn metrics(&self) -> Result<Arc<Snapshot>, String> {
        ask(&self.jobs, self.patience, |reply| Job::Board {
            api: false,
            reply,
        })
        .await
    }

    pub async fn lock(&self, key: Key) -> Result<Option<String>, String> {
        ask(&self.jobs, self.patience, |reply| Job::Lock(key, reply)).await
    }

    pub async fn health(&self) -> Result<(), String> {
        ask(&self.health, self.patience, |reply| reply).await
    }
}

/// Sends `job` to a thread and awaits its answer, for up to `patience`; "busy" at once
/// when [`QUEUE`] jobs already wait.
async fn ask<J, T>(
    jobs: &SyncSender<J>,
    patience: Duration,
    job: impl FnOnce(oneshot::Sender<Result<T, String>>) -> J,
) -> Result<T, String> {
    let (reply, answer) = oneshot::channel();
    match jobs.try_send(job(reply)) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            return Err(format!(
                "busy: {QUEUE} requests already wait for Redis; try again later"
            ))
        }
        Err(TrySendError::Disconnected(_)) => {
            return Err(String::from("the Redis reader has stopped"))
        }
    }
    match tokio::time::timeout(patience, answer).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Err(String::from("the Redis reader has stopped")),
        Err(_) => Err(format!(
            "Redis did not answer within {}",
            report::duration(patience)
        )),
    }
}

/// The health check's thread: one `PING` (per node) answers every request that waits.
fn check_health(pinger: &mut Inspector, asked: &Receiver<Health>) {
    let mut failing = false;
    while let Ok(first) = asked.recv() {
        let waiting: Vec<Health> = std::iter::once(first)
            .chain(asked.try_iter())
            .filter(|reply| !reply.is_closed())
            .collect();
        if waiting.is_empty() {
            continue;
        }
        let answer = pinger.ping();
        note(&mut failing, answer.as_ref().err().map(String::as_str));
        for reply in waiting {
            let _ = reply.send(answer.clone());
        }
    }
}

struct Thread {
    inspector: Inspector,
    /// Connections of their own for the board's events, read while `inspector` reads the
    /// locks and their counters: Redis answers one while this thread parses the other.
    histories: Inspector,
    prefix: Key,
    snapshot: Option<Arc<Snapshot>>,
    /// Whether the last read failed: a failure is logged once, and so is the recovery.
    failing: bool,
}

impl Thread {
    fn serve(&mut self, jobs: &Receiver<Job>) {
        while let Ok(first) = jobs.recv() {
            let mut pending = vec![first];
            pending.extend(jobs.try_iter());
            let mut boards = Vec::new();
            let mut api = false;
            // Each lock asked for, with everyone who asked (in the order first asked).
            let mut locks: Vec<(Key, Vec<LockReply>)> = Vec::new();
            for job in pending {
                match job {
                    // Its request has gone (the client left, or gave up waiting).
                    Job::Board { reply, .. } if reply.is_closed() => {}
                    Job::Lock(_, reply) if reply.is_closed() => {}
                    Job::Board { api: wanted, reply } => {
                        api |= wanted;
                        boards.push(reply);
                    }
                    Job::Lock(key, reply) => match locks.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, replies)) => replies.push(reply),
                        None => locks.push((key, vec![reply])),
                    },
                }
            }
            for (key, replies) in locks {
                let replies: Vec<LockReply> = replies
                    .into_iter()
                    .filter(|reply| !reply.is_closed())
                    .collect();
                if replies.is_empty() {
                    continue;
                }
                let answer = self.lock(&key);
                for reply in replies {
                    let _ = reply.send(answer.clone());
                }
            }
            if boards.is_empty() {
                continue;
            }
            let answer = self.board(api);
            for reply in boards {
                let _ = reply.send(answer.clone());
            }
        }
    }

    /// The snapshot, read again when older than [`FRESH_FOR`] or, for `api`, read for
    /// `/metrics` alone.
    fn board(&mut self, api: bool) -> Result<Arc<Snapshot>, String> {
        if let Some(snapshot) = &self.snapshot {
            if snapshot.read_at.elapsed() < FRESH_FOR && (snapshot.api.is_some() || !api) {
                return Ok(Arc::clone(snapshot));
            }
        }
        let read = read_snapshot(&mut self.inspector, &mut self.histories, &self.prefix, api)
            .map_err(|err| format!("{err:#}"));
        note(&mut self.failing, read.as_ref().err().map(String::as_str));
        let snapshot = Arc::new(read?);
        self.snapshot = Some(Arc::clone(&snapshot));
        Ok(snapshot)
    }

    fn lock(&mut self, key: &Key) -> Result<Option<String>, String> {
        let read = api::lock_page(&mut self.inspector, &self.prefix, key, now_ms())
            .map_err(|err| format!("{err:#}"));
        note(&mut self.failing, read.as_ref().err().map(String::as_str));
        read
    }
}

/// One line when Redis stops answering, one when it answers again (`failing`: whether the
/// last read failed).
fn note(failing: &mut bool, failure: Option<&str>) {
    match (failure, *failing) {
        (Some(why), false) => report::error(&anyhow!("cannot read Redis: {why}")),
        (None, true) => report::info_as(
            report::LogEvent::Info,
            &[],
            format_args!("Redis answers again"),
        ),
        _ => {}
    }
    *failing = failure.is_some();
}

/// Every lock under `prefix`: SCAN, then each lock's slots and counters, and with `api`
/// its last events.
fn read_snapshot(
    inspector: &mut Inspector,
    histories: &mut Inspector,
    prefix: &Key,
    api: bool,
) -> Result<Snapshot> {
    let (mut names, failed) = inspector.list(prefix, true);
    if failed.len() >= inspector.majority() {
        let why: Vec<String> = failed
            .iter()
            .map(|(at, err)| format!("{at}: {err}"))
            .collect();
        return Err(anyhow!("cannot list the locks: {}", why.join("; ")));
    }
    let truncated = names.len() > MAX_LOCKS;
    names.truncate(MAX_LOCKS);
    let (mut views, counters, events) = std::thread::scope(|scope| {
        let events = api.then(|| scope.spawn(|| histories.last_events(&names, api::BOARD_EVENTS)));
        let views = inspector.read_all(&names);
        let counters = inspector.counters(&names);
        // A panic there is a bug; the release build aborts on it.
        let events = events.map(|read| read.join().unwrap_or_default());
        (views, counters, events)
    });
    for (view, nodes) in views.iter_mut().zip(&counters) {
        crate::admin::date_holders(view, nodes);
    }
    if let Some(view) = views.iter().find(|view| view.verdict() == Verdict::Unknown) {
        return Err(anyhow!(
            "cannot read {}: too few Redis nodes answered to tell whether it is held",
            view.key
        ));
    }
    let metrics = crate::admin::metrics::exposition(prefix, &views, &counters)
        .map_err(|err| format!("{err:#}"));
    let api = events.map(|events| {
        api::board(
            inspector,
            prefix,
            &views,
            &counters,
            &events,
            truncated,
            now_ms(),
        )
    });
    Ok(Snapshot {
        read_at: Instant::now(),
        api,
        metrics,
    })
}

/// This machine's clock, ms since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}
