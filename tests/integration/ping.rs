//! `--ping URL`: dead-man pings received by a small HTTP server in the test (a thread on a
//! loopback port that records each request's method, path and body): which ping each
//! ending sends, none for a skip, the `--max-skips` alarm, a ping server that never
//! answers, and the URL kept out of every output, the command's environment and `ps`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;

/// The secret parts of every ping URL here: none may show anywhere.
const SECRET_PATH: &str = "p1ng-s3cret-uuid";
const SECRET_QUERY: &str = "q-s3cret";

/// One request the ping server received.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Request {
    method: String,
    path: String,
    body: String,
}

/// A loopback HTTP server that records requests and answers `200 OK`, or, `hanging`,
/// accepts connections and never answers.
struct PingServer {
    port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl PingServer {
    fn start(hanging: bool) -> PingServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if hanging {
                    held.push(stream);
                    continue;
                }
                let recorded = Arc::clone(&recorded);
                std::thread::spawn(move || serve(stream, &recorded));
            }
        });
        PingServer { port, requests }
    }

    /// The ping URL: a secret path and a secret query.
    fn url(&self) -> String {
        format!(
            "http://127.0.0.1:{}/ping/{SECRET_PATH}?k={SECRET_QUERY}",
            self.port
        )
    }

    /// The path a ping with `suffix` reaches (`/start`, `` …).
    fn path(suffix: &str) -> String {
        format!("/ping/{SECRET_PATH}{suffix}?k={SECRET_QUERY}")
    }

    fn paths(&self) -> Vec<String> {
        self.requests().into_iter().map(|r| r.path).collect()
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads one request, records it, then answers (so that a run that got its answer has
/// been recorded).
fn serve(stream: TcpStream, recorded: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let mut parts = first.split_whitespace();
    recorded.lock().unwrap().push(Request {
        method: parts.next().unwrap_or_default().to_string(),
        path: parts.next().unwrap_or_default().to_string(),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let mut stream = stream;
    let _ =
        stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK");
}

#[track_caller]
fn assert_no_secret(text: &str) {
    assert!(
        !text.contains(SECRET_PATH),
        "the ping URL's path shows: {text}"
    );
    assert!(
        !text.contains(SECRET_QUERY),
        "the ping URL's query shows: {text}"
    );
}

#[test]
fn a_success_pings_start_then_the_url() {
    let server = RedisServer::start();
    let pings = PingServer::start(false);
    let out = server
        .cmd()
        .args(["-k", "ping-ok", "--ping", &pings.url(), "--", "true"])
        .run();
    out.assert_code(0);
    assert_eq!(
        pings.paths(),
        [PingServer::path("/start"), PingServer::path("")]
    );
    assert!(pings.requests().iter().all(|r| r.method == "GET"));
    assert_no_secret(&out.stderr);
}

#[test]
fn a_failure_pings_its_status() {
    let server = RedisServer::start();
    let pings = PingServer::start(false);
    let out = server
        .cmd()
        .args([
            "-k",
            "ping-3",
            "--ping",
            &pings.url(),
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .run();
    out.assert_code(3);
    assert_eq!(
        pings.paths(),
        [PingServer::path("/start"), PingServer::path("/3")]
    );
}

#[test]
fn a_lost_lock_pings_fail() {
    let server = RedisServer::start();
    let pings = PingServer::start(false);
    let dir = TempDir::new("ping-lost");
    let mut running = server
        .cmd()
        .args(["-k", "ping-lost", "-t", "1s", "--ping", &pings.url(), "--"])
        .arg(sleeper(&dir))
        .spawn();
    running.read_pid(&dir.join("pid"));
    server.del("redlock:ping-lost");
    let out = running.wait_within(Duration::from_secs(20));
    out.assert_code(76);
    assert_eq!(
        pings.paths(),
        [PingServer::path("/start"), PingServer::path("/fail")]
    );
}

/// 127 (and 126, 125): the command could not be run: `/fail`, and no start ping.
#[test]
fn a_command_not_found_pings_fail() {
    let server = RedisServer::start();
    let pings = PingServer::start(false);
    let out = server
        .cmd()
        .args([
            "-k",
            "ping-127",
            "--ping",
            &pings.url(),
            "--",
            "no-such-command-here",
        ])
        .run();
    out.assert_code(127);
    assert_eq!(pings.paths(), [PingServer::path("/fail")]);
}

#[test]
fn a_busy_skip_pings_nothing() {
    let server = RedisServer::start();
    let pings = PingServer::start(false);
    let dir = TempDir::new("ping-busy");
    let holder = hold(server.cmd().args(["-k", "ping-busy"]), &dir, "holder");
    let out = server
        .cmd()
        .args([
            "-k",
            "ping-busy",
            "--no-wait",
            "--ping",
            &pings.url(),
            "--",
            "true",
        ])
        .run();
    out.assert_code(75);
    holder.let_go();
    assert_eq!(pings.paths(), Vec::<String>::new());
}

/// With `--max-skips 2`: the first busy run pings nothing, the second `/fail` with a body
/// naming the holder; a success resets the count.
#[test]
fn the_skip_alarm_names_the_holder_and_a_success_resets_it() {
    let server = RedisServer::start();
    let pings = PingServer::start(false);
    let dir = TempDir::new("ping-skips");
    let skip = || {
        server
            .cmd()
            .args(["-k", "ping-skips", "--no-wait", "--max-skips", "2"])
            .args(["--ping", &pings.url(), "--", "true"])
            .run()
            .assert_code(75);
    };
    let holder = hold(
        server
            .cmd()
            .args(["-k", "ping-skips", "--label", "nightly-holder"]),
        &dir,
        "holder",
    );
    skip();
    assert_eq!(pings.paths(), Vec::<String>::new(), "the first skip pinged");
    skip();
    let requests = pings.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, PingServer::path("/fail"));
    assert!(requests[0].body.contains("nightly-holder"), "{requests:?}");
    assert!(requests[0].body.contains(" 2 consecutive"), "{requests:?}");
    // One phrase for the holder, not "held by held by …".
    assert_eq!(
        requests[0].body.matches("held by").count(),
        1,
        "{requests:?}"
    );
    assert!(
        requests[0].body.contains("(this one: busy); held by "),
        "{requests:?}"
    );
    holder.let_go();
    holder.wait().assert_code(0);
    // A success resets the count: the next skip is a first one again.
    let holder = hold(server.cmd().args(["-k", "ping-skips"]), &dir, "second");
    skip();
    assert_eq!(pings.requests().len(), 1, "{:?}", pings.requests());
    holder.let_go();
}

/// Work found already done is not a skip (issue 30: `--once-per` on several hosts paged
/// every night): however many runs in a row find it done, `--max-skips` raises no alarm,
/// and nothing is pinged for them.
#[test]
fn work_already_done_raises_no_skip_alarm() {
    let server = RedisServer::start();
    let pings = PingServer::start(false);
    let once = |extra: &[&str]| {
        server
            .cmd()
            .args(["-k", "ping-once", "--once", "v1"])
            .args(extra)
            .args(["--", "true"])
            .run()
            .assert_code(0);
    };
    once(&["--label", "first-run"]);
    let alarm = ["--max-skips", "2", "--ping", &pings.url()];
    for _ in 0..3 {
        once(&alarm);
    }
    assert_eq!(
        pings.paths(),
        Vec::<String>::new(),
        "a run found the work done pinged"
    );
}

/// A ping server that accepts and never answers: the run ends within the budget (5s after
/// the release), with its own status and one warning that does not show the URL.
#[test]
fn a_hanging_ping_server_does_not_hold_up_the_run() {
    let server = RedisServer::start();
    let pings = PingServer::start(true);
    let out = server
        .cmd()
        .args([
            "-k",
            "ping-hang",
            "--ping",
            &pings.url(),
            "--",
            "sh",
            "-c",
            "exit 4",
        ])
        .run();
    out.assert_code(4);
    assert!(
        out.elapsed < Duration::from_secs(12),
        "took {:?}",
        out.elapsed
    );
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", out.stderr);
    assert!(warnings[0].contains("--ping"), "{}", out.stderr);
    assert_no_secret(&out.stderr);
    // The lock was released before the pings were given up on.
    assert!(!server.exists("redlock:ping-hang"));
}

/// The URL shows nowhere: not on stderr (text, JSON, -v), not in the command's environment
/// (REDLOCK_PING removed, even with --pass-redis-env), not in /proc/PID/cmdline.
#[test]
fn the_ping_url_is_never_shown() {
    let server = RedisServer::start();
    let pings = PingServer::start(false);
    let looks = "env; tr '\\0' ' ' < /proc/$PPID/cmdline";
    for flags in [
        &["-v"][..],
        &["--log-format", "json", "-v"],
        &["--pass-redis-env"],
    ] {
        let typed = server
            .cmd()
            .args(["-k", "ping-secret"])
            .args(flags)
            .args(["--ping", &pings.url(), "--shell", looks])
            .run();
        typed.assert_code(0);
        assert_no_secret(&typed.stderr);
        assert_no_secret(&typed.stdout_str());
        let from_env = server
            .cmd()
            .env("REDLOCK_PING", pings.url())
            .args(["-k", "ping-secret"])
            .args(flags)
            .args(["--shell", looks])
            .run();
        from_env.assert_code(0);
        assert_no_secret(&from_env.stderr);
        assert_no_secret(&from_env.stdout_str());
    }
    // Every run pinged: start and end each.
    assert_eq!(pings.paths().len(), 12, "{:?}", pings.paths());
}

#[test]
fn a_url_that_is_not_http_is_a_usage_error() {
    let server = RedisServer::start();
    for url in [
        format!("ftp://h/{SECRET_PATH}"),
        format!("hc-ping.com/{SECRET_PATH}"),
    ] {
        let out = server
            .cmd()
            .args(["-k", "ping-bad", "--ping", &url, "--", "true"])
            .run();
        out.assert_code(125)
            .assert_stderr_contains("http:// or https://");
        assert_no_secret(&out.stderr);
    }
    server
        .cmd()
        .args(["-k", "ping-bad", "--max-skips", "2", "--", "true"])
        .run()
        .assert_code(125)
        .assert_stderr_contains("--max-skips needs --ping");
    assert_eq!(server.dbsize(), 0);
}

/// An HTTPS ping server: `openssl s_server -WWW` on a loopback port with the test
/// certificate for localhost, serving the files under `root` (the directory `ping/<secret>`
/// with a file per ping path it answers) and writing `FILE:<path>` to its stderr log for
/// each file it serves. Killed when dropped.
struct HttpsPingServer {
    child: std::process::Child,
    port: u16,
    log: std::path::PathBuf,
}

impl HttpsPingServer {
    fn start(root: &TempDir, certs: &TlsFiles) -> HttpsPingServer {
        let openssl = require(
            "openssl",
            "the HTTPS ping test serves HTTPS with openssl s_server",
            "`apt-get install -y openssl` on Debian/Ubuntu",
        );
        let pings = root.join(&format!("ping/{SECRET_PATH}"));
        std::fs::create_dir_all(&pings).unwrap();
        for name in ["start", "3", "fail"] {
            std::fs::write(pings.join(name), "OK\n").unwrap();
        }
        let port = free_port();
        let log = root.join("s_server.log");
        let out = root.join("s_server.out");
        let child = std::process::Command::new(openssl)
            .current_dir(root.path())
            .args(["s_server", "-accept", &format!("127.0.0.1:{port}"), "-WWW"])
            .arg("-cert")
            .arg(&certs.cert)
            .arg("-key")
            .arg(&certs.key)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting openssl s_server");
        // It says ACCEPT once it listens.
        wait_until(Duration::from_secs(20), "s_server to listen", || {
            std::fs::read_to_string(&out).is_ok_and(|text| text.contains("ACCEPT"))
        });
        HttpsPingServer { child, port, log }
    }

    /// The ping URL, by name (the certificate is for localhost and 127.0.0.1).
    fn url(&self) -> String {
        format!("https://localhost:{}/ping/{SECRET_PATH}", self.port)
    }

    /// The files served so far, as s_server logged them.
    fn served(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.strip_prefix("FILE:"))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for HttpsPingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// HTTPS, with the system's roots (rustls-native-certs, which takes `SSL_CERT_FILE` in
/// their place): trusting the test CA, the start and end pings reach the server and no
/// warning is printed; trusting another CA, the pings fail with one warning, and the run's
/// exit status is its command's all the same.
#[test]
fn an_https_ping_uses_the_system_roots() {
    let server = RedisServer::start();
    let root = TempDir::new("ping-https");
    let certs = make_certs(root.path());
    let other = TempDir::new("ping-https-other");
    let other_ca = make_certs(other.path()).ca;
    let pings = HttpsPingServer::start(&root, &certs);
    let run = |ca: &std::path::Path| {
        server
            .cmd()
            .env("SSL_CERT_FILE", ca)
            .env_remove("SSL_CERT_DIR")
            .args(["-k", "ping-https", "--ping", &pings.url(), "--"])
            .args(["sh", "-c", "exit 3"])
            .run()
    };

    let out = run(&certs.ca);
    out.assert_code(3).assert_stderr_lacks("--ping");
    assert_no_secret(&out.stderr);
    let wanted = [
        format!("ping/{SECRET_PATH}/start"),
        format!("ping/{SECRET_PATH}/3"),
    ];
    wait_until(
        Duration::from_secs(20),
        "s_server to log both pings",
        || pings.served() == wanted,
    );

    let out = run(&other_ca);
    out.assert_code(3)
        .assert_stderr_contains("warning")
        .assert_stderr_contains("--ping");
    assert_no_secret(&out.stderr);
    assert_eq!(
        pings.served(),
        wanted,
        "a ping got through an untrusted certificate"
    );
}

/// A port out of range in a `--ping` URL is named as such (125, before any Redis command),
/// not left to fail later as "the host name could not be resolved".
#[test]
fn a_ping_port_out_of_range_is_named() {
    for port in ["99999", "0"] {
        Wrapper::bare()
            .args(["-k", "pp", "--ping"])
            .arg(format!("http://127.0.0.1:{port}/check-key"))
            .args(["--", "true"])
            .run()
            .assert_code(125)
            .assert_stderr_contains("port")
            .assert_stderr_lacks("resolved")
            .assert_stderr_lacks("check-key");
    }
}
