//! The board of `redlock-run serve` in a real browser (issue 33): the system's headless
//! Chromium, driven through chromedriver, on the pages the real `serve` serves over a real
//! redis-server, while real runs take and release locks. The page reads the API by itself:
//! no test here reloads it.
//!
//! The hooks read are board.js's: a lock's row `[data-lock="NAME"]`, its
//! `[data-field="state"]`, and the page's `[data-status]`.

use std::time::Duration;

use serde_json::json;

use crate::support::browser::{Browser, Serve};
use crate::support::*;

/// How soon the board shows a lock taken or released (the bound; it reads the API
/// every second).
const SHOWN_WITHIN: Duration = Duration::from_secs(3);

/// How long a first load may take on a loaded machine.
const LOAD_LIMIT: Duration = Duration::from_secs(30);

/// The selector of lock `name`'s row.
fn row(name: &str) -> String {
    format!(
        "[data-lock=\"{}\"]",
        name.replace('\\', "\\\\").replace('"', "\\\"")
    )
}

/// The text of lock `name`'s state cell, "" while the lock has no row.
fn state(browser: &Browser, name: &str) -> String {
    browser
        .text(&format!("{} [data-field=\"state\"]", row(name)))
        .unwrap_or_default()
}

/// `/lock/NAME`, every byte but letters and digits percent-encoded.
fn lock_path(name: &str) -> String {
    let mut path = String::from("/lock/");
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() {
            path.push(byte as char);
        } else {
            path.push_str(&format!("%{byte:02X}"));
        }
    }
    path
}

#[test]
fn the_board_shows_a_lock_taken_and_released_without_a_reload() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("browser");
    let mut serve = Serve::start(&server.url(), &[]);
    let browser = Browser::start();
    browser.goto(&serve.url("/"));
    browser.wait_for(LOAD_LIMIT, "its first read", |b| b.status() == "ok");
    // A reload would lose this.
    browser.execute("window.notReloaded = true;", vec![]);
    assert_eq!(state(&browser, "deploy"), "", "no run took deploy yet");

    let holder = hold(
        server.cmd().args(["-k", "deploy", "--label", "nightly"]),
        &dir,
        "job",
    );
    browser.wait_for(SHOWN_WITHIN, "deploy held", |b| {
        state(b, "deploy").starts_with("held")
    });
    let held_by = browser
        .text(&format!("{} [data-field=\"holders\"]", row("deploy")))
        .unwrap_or_default();
    assert!(
        held_by.contains("nightly") && held_by.contains(&format!("pid {}", holder.pid())),
        "the holder's pid and label: {held_by:?}"
    );

    holder.let_go();
    holder.wait().assert_code(0);
    browser.wait_for(SHOWN_WITHIN, "deploy free", |b| {
        state(b, "deploy").starts_with("free")
    });
    assert_eq!(
        browser.execute("return window.notReloaded === true;", vec![]),
        json!(true),
        "the page was reloaded"
    );
    let latest = browser
        .text(&format!("{} [data-field=\"events\"]", row("deploy")))
        .unwrap_or_default();
    assert!(
        latest.contains("acquired") && latest.contains("released"),
        "latest events: {latest:?}"
    );
    browser.assert_no_console_errors();

    // What the page says when it cannot read: Redis gone, then the server gone.
    server.stop();
    browser.wait_for(LOAD_LIMIT, "Redis unreachable", |b| {
        b.status() == "redis-unreachable"
    });
    serve.stop();
    browser.wait_for(LOAD_LIMIT, "the server gone", |b| {
        b.status() == "server-gone"
    });
}

#[test]
fn a_lock_named_like_markup_shows_as_text_and_fires_no_alert() {
    let name = "<img src=x onerror=alert(1)>";
    let label = "<b>bold</b>\"'&amp;";
    let server = RedisServer::start();
    let dir = TempDir::new("browser");
    let serve = Serve::start(&server.url(), &[]);
    let holder = hold(
        server.cmd().args(["-k", name, "--label", label]),
        &dir,
        "job",
    );
    let browser = Browser::start();

    browser.goto(&serve.url("/"));
    browser.wait_for(LOAD_LIMIT, "the lock held", |b| {
        state(b, name).starts_with("held")
    });
    assert_eq!(browser.alert(), None, "an alert fired");
    // Through WebDriver, which an open alert would make fail.
    assert_eq!(browser.find_text(&format!("{} th", row(name))), name);
    let held_by = browser
        .text(&format!("{} [data-field=\"holders\"]", row(name)))
        .unwrap_or_default();
    assert!(held_by.contains(label), "the label as text: {held_by:?}");
    assert_eq!(browser.count("main img, main b"), 0, "markup from the API");
    browser.assert_no_console_errors();

    browser.goto(&serve.url(&lock_path(name)));
    browser.wait_for(LOAD_LIMIT, "the lock's page", |b| {
        b.status() == "ok" && state(b, name).starts_with("held")
    });
    assert_eq!(browser.alert(), None, "an alert fired on the lock's page");
    assert_eq!(browser.find_text("h1"), name);
    assert_eq!(
        browser.count("main img, main b, h1 img"),
        0,
        "markup from the API"
    );
    browser.assert_no_console_errors();

    holder.let_go();
    holder.wait().assert_code(0);
}

#[test]
fn the_lock_page_lists_the_lock_s_history_and_counters() {
    let server = RedisServer::start();
    let dir = TempDir::new("browser");
    server
        .cmd()
        .args(["-k", "nightly", "--label", "first", "--", "true"])
        .run()
        .assert_code(0);
    server
        .cmd()
        .args(["-k", "nightly", "--", "false"])
        .run()
        .assert_code(1);
    let holder = hold(server.cmd().args(["-k", "nightly"]), &dir, "job");
    server
        .cmd()
        .args(["-k", "nightly", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    let serve = Serve::start(&server.url(), &[]);
    let browser = Browser::start();

    browser.goto(&serve.url(&lock_path("nightly")));
    // acquired, released, acquired, released, acquired, busy.
    browser.wait_for(LOAD_LIMIT, "six events in the history", |b| {
        b.count("#history tbody tr[data-event]") == 6
    });
    let events: Vec<String> = (1..=6)
        .map(|n| {
            browser
                .text(&format!(
                    "#history tbody tr:nth-child({n}) [data-label=\"event\"]"
                ))
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        events,
        ["busy", "acquired", "released", "acquired", "released", "acquired"],
        "newest first"
    );
    let history = browser.text("#history").unwrap_or_default();
    assert!(
        history.contains("first") && history.contains("exit 1"),
        "the runs' label and exit status: {history:?}"
    );
    assert!(state(&browser, "nightly").starts_with("held"));
    assert!(browser.count("[data-counter]") > 0, "no counters shown");
    browser.assert_no_console_errors();

    holder.let_go();
    holder.wait().assert_code(0);
}
