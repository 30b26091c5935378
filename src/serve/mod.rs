//! `redlock-run serve`: a read-only HTTP server over every lock under the prefix, a small
//! program of its own. Nothing of it exists unless the subcommand is `serve`: `main` calls
//! [`run`], which builds the runtime (tokio, one thread), the listener and the reader
//! thread; a plain run or another subcommand never reaches this module.
//!
//! The shape: one accept loop on the current thread decides; each connection is a task
//! (hyper parses HTTP: heads up to [`MAX_HEAD`] bytes, each within [`HEAD_TIMEOUT`]); a
//! request that needs Redis asks the one reader thread (`reader`), which answers requests
//! that come together from one read. At most [`MAX_CONNECTIONS`] connections are served
//! at once; past that a new one is closed at once. SIGTERM and SIGINT end the loop: the
//! connections are given [`DRAIN`] to finish, then the process exits 0.
//!
//! - `http`: routes, headers, the embedded board (`board/`).
//! - `api`: the JSON. `auth`: `--auth-file`'s credentials. `reader`: the Redis side.

use std::future::Future;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use anyhow::{Context, Result};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::Semaphore;

use crate::config::ServeConfig;
use crate::exit::Outcome;
use crate::report::{self, LogEvent};

mod api;
mod auth;
mod http;
mod path;
pub(crate) mod reader;

/// The most connections served at once (each costs a task and a few KiB).
pub const MAX_CONNECTIONS: usize = 2_048;
/// The most bytes of a request's head (request line and headers); past it, 431.
pub const MAX_HEAD: usize = 16 * 1024;
/// How long a client has to send a request's whole head, the first one or the next one on
/// a kept-alive connection; then its connection is closed.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the connections open at a stop may take to finish.
pub const DRAIN: Duration = Duration::from_millis(500);

/// Serves until SIGTERM or SIGINT: exit 0; 125 when it cannot start.
pub fn run(config: &ServeConfig) -> Outcome {
    match serve(config) {
        Ok(()) => Outcome::Done,
        Err(err) => {
            report::error(&err);
            Outcome::Failed
        }
    }
}

fn serve(config: &ServeConfig) -> Result<()> {
    let (stop, stop_writer) = UnixStream::pair().context("cannot set up signal handling")?;
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(libc::SIGTERM, Arc::clone(&term))
        .context("cannot set up signal handling")?;
    for signal in [libc::SIGTERM, libc::SIGINT] {
        signal_hook::low_level::pipe::register(signal, stop_writer.try_clone()?)
            .context("cannot set up signal handling")?;
    }
    let listener = std::net::TcpListener::bind(config.listen)
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    listener.set_nonblocking(true)?;
    stop.set_nonblocking(true)?;
    let address = listener.local_addr()?;
    raise_file_limit();
    let shared = Arc::new(http::Shared {
        reader: reader::Reader::spawn(config)?,
        prefix: config.prefix.clone(),
        credentials: config
            .credentials
            .as_ref()
            .map(|pair| auth::Credentials::new(&pair.0)),
    });
    if !address.ip().is_loopback() && shared.credentials.is_none() {
        report::warn(format_args!(
            "listening on {address}, which is not a loopback address, without --auth-file: \
             anyone who can reach it reads every lock's holders, hosts and labels"
        ));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("cannot start the server's runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let stop = tokio::net::UnixStream::from_std(stop)?;
        report::info_as(
            LogEvent::Listening,
            &[("port", u64::from(address.port()))],
            format_args!(
                "listening on http://{address}/ (board /, /api/locks, /metrics, /healthz)"
            ),
        );
        accept_until_stopped(&listener, &stop, shared).await;
        Ok::<_, std::io::Error>(())
    })?;
    let signal = if term.load(Ordering::Relaxed) {
        "SIGTERM"
    } else {
        "SIGINT"
    };
    report::info_as(LogEvent::Stopped, &[], format_args!("stopped on {signal}"));
    Ok(())
}

/// Accepts connections until a signal arrives on `stop`, then lets the open ones finish
/// for up to [`DRAIN`].
async fn accept_until_stopped(
    listener: &tokio::net::TcpListener,
    stop: &tokio::net::UnixStream,
    shared: Arc<http::Shared>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut waiting = Box::pin(stop.readable());
    loop {
        let next = std::future::poll_fn(|cx| {
            if waiting.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            listener.poll_accept(cx).map(Some)
        })
        .await;
        let (stream, _) = match next {
            None => break,
            Some(Ok(accepted)) => accepted,
            Some(Err(err)) => {
                accept_failed(&err).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            // Full: closed at once, rather than left to wait behind the others.
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT)
            .max_buf_size(MAX_HEAD)
            .serve_connection(
                TokioIo::new(stream),
                service_fn(move |request| http::answer(request, Arc::clone(&shared))),
            );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that hangs up or sends nonsense: hyper has answered it if it could.
            let _: Result<(), _> = connection.await;
            drop(permit);
        });
    }
    drop(waiting);
    let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
}

/// Out of file descriptors, say: logged, and the loop waits a little instead of spinning.
async fn accept_failed(err: &std::io::Error) {
    report::error(&anyhow::anyhow!("cannot accept a connection: {err}"));
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Each connection is a file descriptor: the soft limit is raised to the hard one (often
/// 1024 and 524288), so that [`MAX_CONNECTIONS`] fit.
fn raise_file_limit() {
    // SAFETY: `limit` is a valid rlimit for getrlimit to fill and setrlimit to read.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
