//! `serve` (issue 33): the HTTP server over a real redis-server, read with a plain HTTP/1.1
//! client over a `TcpStream` (so that hostile requests can be written byte by byte): the
//! JSON and /metrics with a held lock, a free one and a hostile name; no token anywhere;
//! /healthz following Redis; --auth-file; a huge header, idle connections and a slowloris
//! beside a normal request; SIGTERM; one read for concurrent requests; 10,000 locks.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// A running `redlock-run serve` and the address it logged.
struct Served {
    running: Running,
    address: String,
}

impl Served {
    #[track_caller]
    fn start(server: &RedisServer, args: &[&str]) -> Served {
        Served::start_with(server.cmd().arg("serve"), args)
    }

    #[track_caller]
    fn start_with(wrapper: Wrapper, args: &[&str]) -> Served {
        let mut wrapper = wrapper
            .args(["--listen", "127.0.0.1:0"])
            .timeout(Duration::from_secs(300));
        for arg in args {
            wrapper = wrapper.arg(arg);
        }
        let running = wrapper.spawn();
        let mut address = String::new();
        wait_until(Duration::from_secs(30), "serve to log its address", || {
            let log = running.stderr_so_far();
            if let Some(rest) = log.split("listening on http://").nth(1) {
                address = rest.split('/').next().unwrap_or_default().to_string();
            }
            !address.is_empty()
        });
        Served { running, address }
    }

    #[track_caller]
    fn get(&self, path: &str) -> Answer {
        self.request(&format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        ))
    }

    #[track_caller]
    fn request(&self, head: &str) -> Answer {
        let mut stream = TcpStream::connect(&self.address).expect("connect to serve");
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        stream.write_all(head.as_bytes()).expect("send a request");
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw);
        Answer::parse(&raw)
    }
}

/// A response: status, headers (names lowercased), body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    #[track_caller]
    fn parse(raw: &[u8]) -> Answer {
        let text = String::from_utf8_lossy(raw).into_owned();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP response: {text:?}"));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {head:?}"));
        let headers = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
            .collect();
        Answer {
            status,
            headers,
            body: body.to_string(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {}", self.body))
    }
}

/// Every token Redis holds for the locks: lock values' and history entries'.
fn tokens(server: &RedisServer) -> Vec<String> {
    let mut found = Vec::new();
    let keys: Vec<String> = server.query(&["KEYS", "*"]);
    for key in keys {
        let kind: String = server.query(&["TYPE", &key]);
        let text: Vec<String> = match kind.as_str() {
            "string" => vec![server.query(&["GET", &key])],
            "stream" => {
                let entries: Vec<(String, Vec<String>)> = server.query(&["XRANGE", &key, "-", "+"]);
                entries.into_iter().flat_map(|(_, fields)| fields).collect()
            }
            "hash" => server.query(&["HVALS", &key]),
            _ => Vec::new(),
        };
        for value in text {
            for part in value.split('"') {
                if part.len() >= 3 && (part.starts_with("t-") || part.matches('-').count() == 4) {
                    found.push(part.to_string());
                }
            }
        }
    }
    found
}

/// A sample's name and labels, in order.
type Sample = (String, Vec<(String, String)>);

const HOSTILE: &str = "<script>alert(1)</script>";

#[test]
fn api_and_metrics_show_every_lock_escaped_and_without_tokens() {
    let server = RedisServer::start();
    server.seed_holder("demo", "web-3", 4242, Duration::from_secs(90));
    server
        .cmd()
        .args(["-k", "done", "--", "true"])
        .run()
        .assert_code(0);
    server
        .cmd()
        .args([
            "-k",
            HOSTILE,
            "--label",
            "<img src=x onerror=alert(1)>",
            "--",
            "true",
        ])
        .run()
        .assert_code(0);
    let served = Served::start(&server, &[]);

    let answer = served.get("/api/locks");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
    assert!(
        !answer.body.contains('<'),
        "markup in JSON: {}",
        answer.body
    );
    let board = answer.json();
    assert_eq!(board["prefix"], "redlock:");
    assert_eq!(board["truncated"], false);
    let names: Vec<&str> = board["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [HOSTILE, "demo", "done"], "{board:#}");
    let lock = |name: &str| {
        board["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|lock| lock["name"] == name)
            .unwrap()
            .clone()
    };
    let demo = lock("demo");
    assert_eq!(demo["state"], "held", "{demo:#}");
    assert_eq!(demo["key"], "redlock:demo");
    assert_eq!(demo["holders"][0]["host"], "web-3");
    assert_eq!(demo["holders"][0]["pid"], 4242);
    assert!(demo["holders"][0]["held_for_ms"].as_u64().unwrap() >= 90_000);
    let done = lock("done");
    assert_eq!(done["state"], "free", "{done:#}");
    assert!(done["holders"].as_array().unwrap().is_empty());
    assert!(done["last_success_ms"].as_u64().is_some(), "{done:#}");
    let events: Vec<&str> = done["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["acquired", "released"]);
    let hostile = lock(HOSTILE);
    assert_eq!(
        hostile["events"][0]["label"],
        "<img src=x onerror=alert(1)>"
    );

    let page = served.get("/api/locks/%3Cscript%3Ealert(1)%3C%2Fscript%3E");
    assert_eq!(page.status, 200, "{page:?}");
    let page = page.json();
    assert_eq!(page["name"], HOSTILE);
    assert_eq!(page["history"].as_array().unwrap().len(), 2, "{page:#}");
    assert_eq!(page["counters"]["acquired"], 1, "{page:#}");
    let missing = served.get("/api/locks/nothing-here");
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"].is_string());

    let metrics = served.get("/metrics");
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let scraped = Exposition::parse(&metrics.body);
    assert_eq!(
        scraped.value("redlock_run_acquired_total", &[("key", HOSTILE)]),
        Some(1.0)
    );
    // The same families, names and labels as `redlock-run metrics`.
    let printed = server.cmd().arg("metrics").run();
    let printed = Exposition::parse(&printed.assert_code(0).stdout_str());
    let shape = |e: &Exposition| -> Vec<(String, Vec<Sample>)> {
        e.families
            .iter()
            .map(|f| {
                let samples = f
                    .samples
                    .iter()
                    .map(|s| {
                        let labels = s.labels.iter().map(|(k, v)| (k.clone(), v.clone()));
                        (s.name.clone(), labels.collect())
                    })
                    .collect();
                (f.name.clone(), samples)
            })
            .collect()
    };
    assert_eq!(shape(&scraped), shape(&printed));

    for path in ["/", "/lock/demo", "/board.js", "/board.css"] {
        let answer = served.get(path);
        assert_eq!(answer.status, 200, "{path}: {answer:?}");
        let policy = answer.header("content-security-policy").unwrap_or_default();
        assert!(policy.starts_with("default-src 'self'"), "{path}: {policy}");
        assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
    }
    let post = served
        .request("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(post.status, 405);

    let every = [
        served.get("/api/locks").body,
        served.get("/api/locks/demo").body,
        served.get("/api/locks/done").body,
        served.get("/metrics").body,
    ]
    .join("\n");
    let tokens = tokens(&server);
    assert!(tokens.len() >= 3, "{tokens:?}");
    for token in tokens {
        assert!(!every.contains(&token), "token {token} in an answer");
    }
}

#[test]
fn a_lock_of_any_bytes_is_reached_through_its_path() {
    let server = RedisServer::start();
    // A name no URL or JSON string carries as it is: a slash, a newline, a byte that is
    // not UTF-8, a backslash (the escaped `name` cannot be told from the raw one).
    let name: &[u8] = b"a/b\n\xff\\x";
    let mut key = b"redlock:".to_vec();
    key.extend_from_slice(name);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("another application's value")
        .arg("PX")
        .arg(90_000)
        .query(&mut server.connection())
        .unwrap();
    let served = Served::start(&server, &[]);
    let board = served.get("/api/locks").json();
    let lock = &board["locks"][0];
    assert_eq!(lock["path"], "a%2Fb%0A%FF%5Cx", "{board:#}");
    let page = served.get(&format!("/api/locks/{}", lock["path"].as_str().unwrap()));
    assert_eq!(page.status, 200, "{page:?}");
    let page = page.json();
    assert_eq!(page["name"], lock["name"], "{page:#}");
    assert_eq!(page["state"], "held", "{page:#}");
}

#[test]
fn shared_holders_are_shown_each_as_a_share() {
    let server = RedisServer::start();
    let dir = TempDir::new("serve-shared");
    let holders: Vec<Holder> = ["r1", "r2"]
        .iter()
        .map(|name| {
            Job::new(&dir, name).start(
                server
                    .cmd()
                    .args(["-k", "data", "--shared", "--label", name]),
            )
        })
        .collect();
    let served = Served::start(&server, &[]);
    let board = served.get("/api/locks").json();
    let lock = &board["locks"][0];
    assert_eq!(lock["state"], "shared", "{board:#}");
    let mut labels: Vec<&str> = lock["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|holder| {
            assert_eq!(holder["mode"], "shared", "{board:#}");
            holder["label"].as_str().unwrap()
        })
        .collect();
    labels.sort_unstable();
    assert_eq!(labels, ["r1", "r2"], "{board:#}");
    assert!(
        !board.to_string().contains(":shared\""),
        "the group's token: {board:#}"
    );
    let metrics = served.get("/metrics").body;
    assert!(
        metrics.contains("redlock_run_holders{key=\"data\"} 2"),
        "{metrics}"
    );
    for holder in holders {
        holder.let_go();
        holder.wait().assert_code(0);
    }
}

#[test]
fn healthz_follows_redis() {
    let mut server = RedisServer::start();
    let served = Served::start(&server, &["--redis-timeout", "1s"]);
    let ok = served.get("/healthz");
    assert_eq!((ok.status, ok.body.as_str()), (200, "ok\n"));
    server.stop();
    let mut last = None;
    wait_until(Duration::from_secs(30), "/healthz to answer 503", || {
        let answer = served.get("/healthz");
        let down = answer.status == 503;
        last = Some(answer);
        down
    });
    let down = last.unwrap();
    assert!(!down.body.trim().is_empty(), "503 without a reason");
    // The 503 may be answered before the reader thread's log line is written: wait for it.
    wait_until(Duration::from_secs(30), "the error to be logged", || {
        served.running.stderr_so_far().contains("cannot read Redis")
    });
}

#[test]
fn auth_file_asks_for_credentials() {
    let server = RedisServer::start();
    let dir = TempDir::new("serve-auth");
    let file = dir.join("auth");
    std::fs::write(&file, "watcher:s3cret pass\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let served = Served::start(&server, &["--auth-file", file.to_str().unwrap()]);
    let ask = |authorization: Option<&str>| {
        let header = authorization
            .map(|value| format!("Authorization: {value}\r\n"))
            .unwrap_or_default();
        served.request(&format!(
            "GET /api/locks HTTP/1.1\r\nHost: x\r\n{header}Connection: close\r\n\r\n"
        ))
    };
    let none = ask(None);
    assert_eq!(none.status, 401);
    assert!(none
        .header("www-authenticate")
        .is_some_and(|v| v.starts_with("Basic")));
    // watcher:wrong
    assert_eq!(ask(Some("Basic d2F0Y2hlcjp3cm9uZw==")).status, 401);
    // watcher:s3cret pass
    assert_eq!(ask(Some("Basic d2F0Y2hlcjpzM2NyZXQgcGFzcw==")).status, 200);
    assert!(!served.running.stderr_so_far().contains("s3cret"));

    // Everyone may reach a non-loopback address: a warning without --auth-file.
    let open = server
        .cmd()
        .args(["serve", "--listen", "0.0.0.0:0"])
        .timeout(Duration::from_secs(60))
        .spawn();
    wait_until(Duration::from_secs(30), "the warning", || {
        open.stderr_so_far().contains("without --auth-file")
    });
}

#[test]
fn hostile_clients_do_not_stall_others() {
    let server = RedisServer::start();
    server.seed_holder("demo", "web-3", 1, Duration::from_secs(1));
    let served = Served::start(&server, &[]);
    // A head past the limit: refused, not read for ever.
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let refused = served.request(&huge);
    assert!([400, 431].contains(&refused.status), "{refused:?}");
    // A thousand idle connections, and one that sends its head a byte at a time.
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(&served.address).expect("an idle connection"))
        .collect();
    let address = served.address.clone();
    let slow = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(address).unwrap();
        for byte in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " {
            if stream.write_all(&[*byte]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let started = std::time::Instant::now();
    let answer = served.get("/api/locks");
    // Well under the 10 s an idle connection is given to send its head: the idle ones
    // are still open while it is answered.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["locks"][0]["name"], "demo");
    drop(idle);
    let _ = slow.join();
}

#[test]
fn sigterm_stops_it_with_a_line() {
    let server = RedisServer::start();
    let served = Served::start(&server, &["--log-format", "json"]);
    assert_eq!(served.get("/healthz").status, 200);
    served.running.signal(libc::SIGTERM);
    let out = served.running.wait_within(Duration::from_secs(10));
    out.assert_code(0);
    let events: Vec<Value> = out
        .stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names, ["listening", "stopped"], "{}", out.stderr);
    assert!(events[1]["message"].as_str().unwrap().contains("SIGTERM"));
}

/// Scrapes that come together are answered from one read: as many SCANs as one scrape
/// makes.
#[test]
fn concurrent_requests_share_one_read() {
    let server = RedisServer::start();
    server.seed_holder("demo", "web-3", 1, Duration::from_secs(1));
    let scans = || -> u64 {
        let info: String = server.query(&["INFO", "commandstats"]);
        info.lines()
            .find_map(|line| line.strip_prefix("cmdstat_scan:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(0)
    };
    let before = scans();
    {
        let one = Served::start(&server, &[]);
        assert_eq!(one.get("/metrics").status, 200);
    }
    let per_read = scans() - before;
    assert!(per_read > 0);
    let before = scans();
    let many = Served::start(&server, &[]);
    let barrier = std::sync::Barrier::new(8);
    std::thread::scope(|scope| {
        for at in 0..8 {
            let (many, barrier) = (&many, &barrier);
            scope.spawn(move || {
                barrier.wait();
                let _ = at;
                assert_eq!(many.get("/metrics").status, 200);
            });
        }
    });
    assert_eq!(scans() - before, per_read);
}

#[test]
fn ten_thousand_locks_are_all_listed() {
    let server = RedisServer::start();
    let mut connection = server.connection();
    let mut pipe = redis::pipe();
    for at in 0..10_000 {
        let key = format!("redlock:job{at:05}");
        pipe.cmd("HSET")
            .arg(format!("{{{key}}}:stats"))
            .arg("acquired")
            .arg(1)
            .ignore();
        pipe.cmd("XADD")
            .arg(format!("{{{key}}}:history"))
            .arg("*")
            .arg("event")
            .arg("acquired")
            .ignore();
        if at % 10 == 0 {
            pipe.cmd("SET")
                .arg(&key)
                .arg(format!(
                    "{{\"token\":\"t{at}\",\"host\":\"h\",\"pid\":{at}}}"
                ))
                .arg("PX")
                .arg(600_000)
                .ignore();
        }
    }
    let () = pipe.query(&mut connection).expect("seeding 10,000 locks");
    // No bound on time here (see docs/monitoring.md for what was measured): a generous
    // Redis timeout, as a debug build on a loaded machine is slow.
    let served = Served::start(&server, &["--redis-timeout", "60s"]);
    let board = served.get("/api/locks").json();
    let locks = board["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 10_000);
    assert_eq!(board["truncated"], false);
    assert_eq!(locks.iter().filter(|l| l["state"] == "held").count(), 1_000);
    assert_eq!(locks[9_999]["name"], "job09999");
    let metrics = Exposition::parse(&served.get("/metrics").body);
    assert_eq!(metrics.keys("redlock_run_acquired_total").len(), 10_000);
}

/// Over a Redlock set of three: a run's events shown once (a majority recorded them), and
/// /healthz 200 while a majority answers.
#[test]
fn a_redlock_set_is_served_as_one() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let with_urls = |wrapper: Wrapper| {
        urls.iter()
            .fold(wrapper, |wrapper, url| wrapper.arg("-r").arg(url))
    };
    with_urls(Wrapper::bare())
        .args(["-k", "nightly", "--", "true"])
        .run()
        .assert_code(0);
    let served = Served::start_with(
        with_urls(Wrapper::bare().arg("serve")),
        &["--redis-timeout", "1s"],
    );
    let board = served.get("/api/locks").json();
    let lock = &board["locks"][0];
    assert_eq!(lock["name"], "nightly", "{board:#}");
    assert_eq!(lock["state"], "free");
    assert!(lock["last_success_ms"].as_u64().is_some(), "{lock:#}");
    let events: Vec<&str> = lock["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["acquired", "released"], "{lock:#}");
    let metrics = Exposition::parse(&served.get("/metrics").body);
    assert_eq!(
        metrics.value("redlock_run_acquired_total", &[("key", "nightly")]),
        Some(1.0)
    );
    servers[0].stop();
    assert_eq!(served.get("/healthz").status, 200);
    servers[1].stop();
    wait_until(Duration::from_secs(30), "/healthz to answer 503", || {
        served.get("/healthz").status == 503
    });
}

/// A Redis Cluster: the locks of every master listed, with their events and counters (read
/// one by one, not pipelined).
#[test]
fn a_cluster_is_served_whole() {
    let cluster = crate::support::deployments::Cluster::start();
    let names = cluster.names_on_each_node();
    for name in &names {
        cluster
            .cmd()
            .args(["-k", name, "--", "true"])
            .run()
            .assert_code(0);
    }
    let served = Served::start_with(cluster.cmd().arg("serve"), &[]);
    let board = served.get("/api/locks").json();
    let listed: Vec<&str> = board["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["name"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = names.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(listed, expected, "{board:#}");
    for lock in board["locks"].as_array().unwrap() {
        assert_eq!(lock["events"].as_array().unwrap().len(), 2, "{lock:#}");
    }
    let metrics = Exposition::parse(&served.get("/metrics").body);
    for name in &names {
        assert_eq!(
            metrics.value("redlock_run_acquired_total", &[("key", name)]),
            Some(1.0)
        );
    }
}

/// A group's value beside a `{K}:shares:exp` that is a string (WRONGTYPE for the shares'
/// read): that lock is shown held by an unknown holder, and the others are read on.
#[test]
fn a_malformed_lock_does_not_take_down_the_board() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    for (key, value) in [
        ("redlock:g4", r#"{"token":"q:shared"}"#),
        ("{redlock:g4}:shares:exp", "not a sorted set"),
        ("redlock:other", "another application's value"),
    ] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(90_000)
            .query(&mut redis)
            .unwrap();
    }
    let list = server.cmd().arg("list").run();
    list.assert_code(0);
    list.assert_stdout_contains("other");
    list.assert_stdout_contains("g4");
    server.cmd().arg("metrics").run().assert_code(0);
    let served = Served::start(&server, &[]);
    let board = served.get("/api/locks");
    assert_eq!(board.status, 200, "{board:?}");
    let board = board.json();
    let names: Vec<&str> = board["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["g4", "other"], "{board:#}");
    assert_eq!(board["locks"][0]["holders"][0]["known"], false, "{board:#}");
    assert_eq!(served.get("/metrics").status, 200);
    assert_eq!(served.get("/api/locks/g4").status, 200);
}

/// A 64 MiB string under the prefix is never read whole: the board stays small, it is
/// shown as another application's value, and `status` of it works.
#[test]
fn a_huge_value_is_shown_cut_as_foreign() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    let _: i64 = redis::cmd("SETRANGE")
        .arg("redlock:z")
        .arg(64 * 1024 * 1024 - 1)
        .arg("x")
        .query(&mut redis)
        .unwrap();
    let served = Served::start(&server, &[]);
    let board = served.get("/api/locks");
    assert_eq!(board.status, 200, "{board:?}");
    assert!(board.body.len() < 100_000, "{} bytes", board.body.len());
    let board = board.json();
    let holder = &board["locks"][0]["holders"][0];
    assert_eq!(holder["known"], false, "{board:#}");
    assert_eq!(holder["length"], 64 * 1024 * 1024, "{board:#}");
    let page = served.get("/api/locks/z");
    assert_eq!(page.status, 200);
    assert!(page.body.len() < 100_000, "{} bytes", page.body.len());
    let status = server.cmd().args(["status", "-k", "z"]).run();
    status.assert_stdout_contains("unknown holder");
    assert!(
        status.stdout.len() < 100_000,
        "{} bytes",
        status.stdout.len()
    );
    let json = server.cmd().args(["status", "-k", "z", "--json"]).run();
    assert!(json.stdout.len() < 100_000, "{} bytes", json.stdout.len());
}

/// Adds `count` foreign events (all their fields shown) of about `size` bytes each to `{redlock:NAME}:history`, in one
/// pipeline.
fn big_history(server: &RedisServer, name: &str, count: usize, size: usize) {
    let mut pipe = redis::pipe();
    let filler = "f".repeat(size);
    for n in 0..count {
        pipe.cmd("XADD")
            .arg(format!("{{redlock:{name}}}:history"))
            .arg("*")
            .arg("what")
            .arg("another writer's")
            .arg("label")
            .arg(format!("run {n}"))
            .arg("note")
            .arg(&filler)
            .ignore();
    }
    let _: () = pipe.query(&mut server.connection()).unwrap();
}

/// A lock's page shows its newest 500 events, each field cut: 10,000 events of 2 KB make
/// no 20 MB answer.
#[test]
fn a_lock_page_shows_the_newest_events_cut() {
    let server = RedisServer::start();
    big_history(&server, "h", 10_000, 2048);
    let served = Served::start(&server, &[]);
    let page = served.get("/api/locks/h");
    assert_eq!(page.status, 200, "{page:?}");
    let len = page.body.len();
    let page = page.json();
    let history = page["history"].as_array().unwrap();
    assert_eq!(history.len(), 500, "{len} bytes");
    let newest = &history.last().unwrap()["fields"];
    assert_eq!(newest["label"], "run 9999", "{newest:#}");
    assert_eq!(newest["note"].as_str().unwrap().len(), 1024, "{newest:#}");
    assert!(len < 1_000_000, "{len} bytes");
}

/// Many slow lock pages at once (500 events of 100 KB each) do not stall `/healthz`: it is
/// answered on its own connection, the pages' reads of one lock are merged, and a page
/// whose client left is not read.
#[test]
fn slow_lock_pages_do_not_stall_healthz() {
    let server = RedisServer::start();
    big_history(&server, "h", 600, 100_000);
    let served = Served::start(&server, &["--redis-timeout", "1s"]);
    let address = served.address.clone();
    let askers: Vec<_> = (0..60)
        .map(|_| {
            let address = address.clone();
            std::thread::spawn(move || {
                let Ok(mut stream) = TcpStream::connect(&address) else {
                    return;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = stream.write_all(
                    b"GET /api/locks/h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                );
                let mut raw = Vec::new();
                let _ = stream.read_to_end(&mut raw);
            })
        })
        .collect();
    // Let the pages' jobs reach the reader first.
    std::thread::sleep(Duration::from_millis(300));
    let health = served.get("/healthz");
    assert_eq!(
        (health.status, health.body.as_str()),
        (200, "ok\n"),
        "{health:?}"
    );
    for asker in askers {
        asker.join().unwrap();
    }
    let page = served.get("/api/locks/h");
    assert_eq!(page.status, 200, "{page:?}");
}
