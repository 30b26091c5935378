//! The browser fixtures: `redlock-run serve` on a free loopback port ([`Serve`]), and the
//! system's Chromium, headless, driven through its chromedriver on another free loopback
//! port with the WebDriver client fantoccini ([`Browser`]), each with a fresh profile.
//!
//! The browser's console is read through chromedriver's log endpoint (`goog:loggingPrefs`),
//! so that an error thrown while the page loads counts as much as one thrown later. Alerts
//! are left open (`unhandledPromptBehavior: ignore`), so that [`Browser::alert`] sees one.
//!
//! A missing `chromium` or `chromedriver` fails the test with the line that installs them,
//! as a missing `redis-server` does: the browser test never skips.
//!
//! What this module does not own: what the page shows (the test asks with CSS selectors and
//! the `data-*` hooks board.js documents) or how the server reads Redis.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

use super::{free_port, require, wait_until, Running, TempDir, Wrapper};

const INSTALL: &str = "apt-get install -y chromium chromium-driver (scripts/test installs them)";

/// How long the server, chromedriver and Chromium may take to start on a loaded machine.
const START_LIMIT: Duration = Duration::from_secs(60);

/// `redlock-run serve` on a free loopback port, over the given Redis; killed on drop.
pub struct Serve {
    running: Option<Running>,
    pub addr: SocketAddr,
}

impl Serve {
    /// Starts `serve` (with `args` after it) and returns once `/healthz` answers 200.
    #[track_caller]
    pub fn start(url: &str, args: &[&str]) -> Serve {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut running = Wrapper::new(url)
            .arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .args(args)
            .timeout(Duration::from_secs(600))
            .spawn();
        let start = Instant::now();
        loop {
            if running.has_exited() {
                panic!(
                    "redlock-run serve exited at start: {}",
                    running.stderr_so_far()
                );
            }
            match http_get(addr, "/healthz") {
                Ok((200, _)) => break,
                answer if start.elapsed() > START_LIMIT => panic!(
                    "redlock-run serve did not answer /healthz with 200 within {START_LIMIT:?}: \
                     {answer:?}; stderr: {}",
                    running.stderr_so_far()
                ),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        Serve {
            running: Some(running),
            addr,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Kills the server (its page's next read then fails).
    pub fn stop(&mut self) {
        self.running.take();
    }
}

/// `GET path` over a fresh connection: the status and the body. A client of our own for
/// the few plain reads a test makes (readiness), with a hard time limit.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let limit = Duration::from_secs(10);
    let mut stream = TcpStream::connect_timeout(&addr, limit).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(limit)).ok();
    stream.set_write_timeout(Some(limit)).ok();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).map_err(|e| e.to_string())?;
    let reply = String::from_utf8_lossy(&reply);
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP reply: {head:?}"))?;
    Ok((status, body.to_string()))
}

/// chromedriver's `POST /session/ID/se/log`: the entries of one log since the last read.
#[derive(Debug)]
struct ReadLog(&'static str);

impl WebDriverCompatibleCommand for ReadLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({ "type": self.0 }).to_string()),
        )
    }
}

/// Headless Chromium under chromedriver, with a fresh profile; both ended on drop.
pub struct Browser {
    runtime: tokio::runtime::Runtime,
    client: Option<Client>,
    driver: Child,
    _profile: TempDir,
}

impl Browser {
    #[track_caller]
    pub fn start() -> Browser {
        let chromium = require(
            "chromium",
            "the browser test drives headless Chromium",
            INSTALL,
        );
        let chromedriver = require("chromedriver", "the browser test drives Chromium", INSTALL);
        let profile = TempDir::new("chromium");
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .arg(format!(
                "--log-path={}",
                profile.join("chromedriver.log").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting chromedriver: {e}"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let mut browser = Browser {
            runtime,
            client: None,
            driver,
            _profile: profile,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        wait_until(START_LIMIT, "chromedriver to listen", || {
            TcpStream::connect(addr).is_ok()
        });
        let user_data = browser._profile.join("profile");
        let capabilities = json!({
            "browserName": "chrome",
            "unhandledPromptBehavior": "ignore",
            "goog:loggingPrefs": { "browser": "ALL" },
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1200,800",
                    format!("--user-data-dir={}", user_data.display()),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = browser
            .runtime
            .block_on(async {
                tokio::time::timeout(
                    START_LIMIT,
                    ClientBuilder::new(connector)
                        .capabilities(capabilities)
                        .connect(&format!("http://{addr}")),
                )
                .await
            })
            .unwrap_or_else(|_| panic!("chromedriver gave no session within {START_LIMIT:?}"))
            .unwrap_or_else(|e| {
                panic!("chromedriver could not start Chromium: {e}; install: {INSTALL}")
            });
        browser.client = Some(client);
        browser
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("a WebDriver session")
    }

    /// Loads `url` and returns once it has loaded.
    #[track_caller]
    pub fn goto(&self, url: &str) {
        let client = self.client();
        self.runtime
            .block_on(client.goto(url))
            .unwrap_or_else(|e| panic!("loading {url}: {e}"));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    #[track_caller]
    pub fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        let client = self.client();
        self.runtime
            .block_on(client.execute(script, args))
            .unwrap_or_else(|e| panic!("running a script in the page: {e}\n{script}"))
    }

    /// The text of the first element `css` finds, or None when there is none.
    #[track_caller]
    pub fn text(&self, css: &str) -> Option<String> {
        let found = self.execute(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(css)],
        );
        found.as_str().map(str::to_string)
    }

    /// The element `css` finds, through WebDriver (an alert open makes this fail).
    #[track_caller]
    pub fn find_text(&self, css: &str) -> String {
        let client = self.client();
        self.runtime
            .block_on(async {
                let element = client.find(Locator::Css(css)).await?;
                element.text().await
            })
            .unwrap_or_else(|e| panic!("finding {css}: {e}"))
    }

    /// The page's `[data-status]`: loading, ok, redis-unreachable, server-gone, error or
    /// not-found (see board.js).
    #[track_caller]
    pub fn status(&self) -> String {
        let status = self.execute(
            "const e = document.querySelector('[data-status]'); \
             return e ? e.getAttribute('data-status') : null;",
            vec![],
        );
        status
            .as_str()
            .unwrap_or("(no [data-status] element)")
            .to_string()
    }

    /// How many elements `css` finds.
    #[track_caller]
    pub fn count(&self, css: &str) -> usize {
        let n = self.execute(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(css)],
        );
        n.as_u64().unwrap_or(0) as usize
    }

    /// Waits up to `limit` for the page to show `what` (`cond` true); fails the test with
    /// what the status element and the page's text said.
    #[track_caller]
    pub fn wait_for(&self, limit: Duration, what: &str, mut cond: impl FnMut(&Browser) -> bool) {
        let start = Instant::now();
        loop {
            if cond(self) {
                return;
            }
            if start.elapsed() > limit {
                let status = self.text("[data-status]");
                let body = self.text("main").unwrap_or_default();
                panic!(
                    "the page did not show {what} within {limit:?}; status: {status:?}; page: {}",
                    body.split_whitespace().collect::<Vec<_>>().join(" ")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The text of an alert, confirm or prompt open in the page, if one is.
    pub fn alert(&self) -> Option<String> {
        let client = self.client();
        self.runtime.block_on(client.get_alert_text()).ok()
    }

    /// The console's entries at level SEVERE (errors, uncaught exceptions, failed loads,
    /// CSP violations) since the last call.
    #[track_caller]
    pub fn console_errors(&self) -> Vec<String> {
        let client = self.client();
        let log = self
            .runtime
            .block_on(client.issue_cmd(ReadLog("browser")))
            .unwrap_or_else(|e| panic!("reading the browser's console: {e}"));
        log.as_array()
            .into_iter()
            .flatten()
            .filter(|entry| entry["level"] == "SEVERE")
            .map(|entry| entry["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Fails the test if the console has an error.
    #[track_caller]
    pub fn assert_no_console_errors(&self) {
        let errors = self.console_errors();
        assert!(errors.is_empty(), "errors on the console: {errors:#?}");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), client.close()).await
            });
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
