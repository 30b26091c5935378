//! One request: its method and credentials checked, its path routed, its answer built with
//! the headers every answer carries. The parsing is hyper's; the reading is the reader
//! thread's (`reader`); nothing here blocks.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::auth::Credentials;
use super::path::percent_decoded;
use super::reader::Reader;
use crate::backend::Key;

/// What every request shares.
pub struct Shared {
    pub reader: Reader,
    pub prefix: Key,
    pub credentials: Option<Credentials>,
}

const INDEX: &str = include_str!("board/index.html");
const LOCK: &str = include_str!("board/lock.html");
const SCRIPT: &str = include_str!("board/board.js");
const STYLE: &str = include_str!("board/board.css");
/// The pages' icon: without one, a browser asks for /favicon.ico and logs the 404.
const ICON: &str = include_str!("board/board.svg");

const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";
/// The text exposition format, version 0.0.4.
const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Everything from this server, nothing inline, no frames, no forms.
const POLICY: &str = "default-src 'self'; base-uri 'none'; form-action 'none'; \
                      frame-ancestors 'none'";

type Answer = Response<Full<Bytes>>;

pub async fn answer(request: Request<Incoming>, shared: Arc<Shared>) -> Result<Answer, Infallible> {
    Ok(route(&request, &shared).await)
}

async fn route(request: &Request<Incoming>, shared: &Shared) -> Answer {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut answer = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        answer
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return answer;
    }
    if let Some(credentials) = &shared.credentials {
        let given = request.headers().get(header::AUTHORIZATION);
        if !given.is_some_and(|given| credentials.accepts(given.as_bytes())) {
            let mut answer = plain(StatusCode::UNAUTHORIZED, "credentials needed\n");
            answer.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"redlock-run\", charset=\"UTF-8\""),
            );
            return answer;
        }
    }
    let path = request.uri().path();
    match path {
        "/" => page(HTML, INDEX),
        "/board.js" => page("text/javascript; charset=utf-8", SCRIPT),
        "/board.css" => page("text/css; charset=utf-8", STYLE),
        "/board.svg" => page("image/svg+xml", ICON),
        "/healthz" => match shared.reader.health().await {
            Ok(()) => plain(StatusCode::OK, "ok\n"),
            Err(why) => plain(StatusCode::SERVICE_UNAVAILABLE, &format!("{why}\n")),
        },
        "/metrics" => match shared.reader.metrics().await.map(|s| s.metrics.clone()) {
            Ok(Ok(text)) => fresh(StatusCode::OK, PROMETHEUS, text),
            Ok(Err(why)) | Err(why) => plain(StatusCode::SERVICE_UNAVAILABLE, &format!("{why}\n")),
        },
        "/api/locks" => match shared.reader.board().await {
            Ok(snapshot) => fresh(
                StatusCode::OK,
                JSON,
                snapshot.api.clone().unwrap_or_default(),
            ),
            Err(why) => failure(StatusCode::SERVICE_UNAVAILABLE, &why),
        },
        _ => {
            if let Some(name) = path.strip_prefix("/lock/").filter(|name| !name.is_empty()) {
                if percent_decoded(name).is_some() {
                    return page(HTML, LOCK);
                }
            }
            if let Some(name) = path.strip_prefix("/api/locks/") {
                return lock(shared, name).await;
            }
            failure(StatusCode::NOT_FOUND, "no such page")
        }
    }
}

/// `/api/locks/NAME`: NAME percent-encoded, any bytes.
async fn lock(shared: &Shared, encoded: &str) -> Answer {
    let Some(name) = percent_decoded(encoded).filter(|name| !name.is_empty()) else {
        return failure(StatusCode::BAD_REQUEST, "a lock's name, percent-encoded");
    };
    let key = Key::new([shared.prefix.as_bytes(), &name].concat());
    match shared.reader.lock(key).await {
        Ok(Some(json)) => fresh(StatusCode::OK, JSON, json),
        Ok(None) => failure(StatusCode::NOT_FOUND, "no such lock"),
        Err(why) => failure(StatusCode::SERVICE_UNAVAILABLE, &why),
    }
}

/// An embedded file: the page asks again on every visit, so an upgrade shows at once.
fn page(kind: &'static str, body: &'static str) -> Answer {
    let mut answer = with_headers(StatusCode::OK, kind, Bytes::from_static(body.as_bytes()));
    answer
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    answer
}

/// What Redis said now: never stored.
fn fresh(status: StatusCode, kind: &'static str, body: String) -> Answer {
    let mut answer = with_headers(status, kind, Bytes::from(body));
    answer
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    answer
}

fn plain(status: StatusCode, text: &str) -> Answer {
    fresh(status, TEXT, text.to_string())
}

/// An error of the API, in JSON: `{"error": "..."}`.
fn failure(status: StatusCode, why: &str) -> Answer {
    fresh(
        status,
        JSON,
        serde_json::json!({ "error": why }).to_string(),
    )
}

fn with_headers(status: StatusCode, kind: &'static str, body: Bytes) -> Answer {
    let mut answer = Response::new(Full::new(body));
    *answer.status_mut() = status;
    let headers = answer.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    answer
}
