//! Any key works (issue 12): a lock name is bytes, 1 to 1024 of them, UTF-8 or not. It is
//! locked, shown (escaped, on one line), listed and released like any other; odd data that
//! other clients keep under the prefix (names or values that are not UTF-8, keys that are
//! not strings) is shown escaped and never makes `list`, `status` or `release` fail; and a
//! name that cannot keep its keys in one Redis Cluster hash slot is refused up front there,
//! with a message that says why, instead of failing inside a script with CROSSSLOT.
//!
//! What this module does not own: the length limits (`errors`), the escaping of holders'
//! values for the terminal (`secrets`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::support::deployments::Cluster;
use crate::support::*;

/// `args` with raw bytes allowed (the test's lock names are not all UTF-8).
fn raw(bytes: &[u8]) -> &OsStr {
    OsStr::from_bytes(bytes)
}

fn get_bytes(server: &RedisServer, key: &[u8]) -> Option<Vec<u8>> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.connection())
        .expect("GET")
}

fn set_bytes(server: &RedisServer, key: &[u8], value: &[u8]) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(60_000)
        .query(&mut server.connection())
        .expect("SET");
}

#[test]
fn a_name_that_is_not_utf8_is_locked_shown_listed_and_released() {
    let server = RedisServer::start();
    let dir = TempDir::new("keys-bytes");
    let name: &[u8] = b"job-\xff\xfe\n\x1b[2J";
    let key = [PREFIX.as_bytes(), name].concat();
    let shown = "redlock:job-\\xff\\xfe\\n\\x1b[2J";

    let holder = hold(
        server.cmd().args([raw(b"-k"), raw(name), raw(b"-v")]),
        &dir,
        "bytes",
    );
    let value = get_bytes(&server, &key).expect("the lock is at PREFIX + the name's bytes");
    assert!(value.starts_with(b"{\"token\":\""), "{value:?}");

    let out = server
        .cmd()
        .args([raw(b"status"), raw(b"-k"), raw(name)])
        .run();
    out.assert_code(0);
    let line = out.stdout_str();
    assert_eq!(line.lines().count(), 1, "{line:?}");
    assert!(line.starts_with(&format!("{shown} held by")), "{line:?}");
    assert!(!line.contains('\u{1b}'), "{line:?}");

    let out = server.cmd().args(["list", "--json"]).run();
    out.assert_code(0);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["key"], shown, "{listed}");
    assert_eq!(listed[0]["held"], true, "{listed}");

    // The holder's own messages name the lock escaped too.
    holder.let_go();
    let out = holder.wait();
    out.assert_code(0);
    assert!(!out.stderr.contains('\u{1b}'), "{:?}", out.stderr);
    assert_eq!(get_bytes(&server, &key), None, "released");

    // A waiter and a releaser by force work on the same bytes.
    let holder = hold(
        server
            .cmd()
            .args([raw(b"-k"), raw(name), raw(b"--renew-every"), raw(b"200ms")]),
        &dir,
        "bytes-again",
    );
    let out = server
        .cmd()
        .args([raw(b"release"), raw(b"-k"), raw(name), raw(b"--force")])
        .run();
    out.assert_code(0);
    assert_eq!(get_bytes(&server, &key), None, "deleted by force");
    let waiter = server
        .cmd()
        .args([
            raw(b"-k"),
            raw(name),
            raw(b"--no-wait"),
            raw(b"--"),
            raw(b"true"),
        ])
        .run();
    waiter.assert_code(0);
    // The holder learns at its next renewal that its lock is gone.
    holder.wait().assert_code(76);
}

#[test]
fn odd_data_under_the_prefix_is_shown_escaped_and_never_fatal() {
    let server = RedisServer::start();
    let dir = TempDir::new("keys-odd");
    // Another client's lock: a name and a value that are not UTF-8.
    set_bytes(&server, b"redlock:\xfe\xff", b"\x00\xffbinary\n");
    // Another application's data that is not a string at all.
    server.hset("redlock:a-hash", "field", "value");
    let holder = hold(server.cmd().args(["-k", "ours"]), &dir, "ours");

    let out = server.cmd().args(["list"]).run();
    out.assert_code(0);
    let listed = out.stdout_str();
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("redlock:\\xfe\\xff held by an unknown")),
        "{listed}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("redlock:a-hash ")),
        "{listed}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("redlock:ours held by")),
        "{listed}"
    );

    let out = server.cmd().args(["list", "--json"]).run();
    out.assert_code(0);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.stdout_str()));
    let odd = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|lock| lock["key"] == "redlock:\\xfe\\xff")
        .unwrap_or_else(|| panic!("the odd key is not listed: {listed}"));
    assert_eq!(odd["holders"][0]["known"], false, "{odd}");
    assert_eq!(odd["holders"][0]["value"], "\\x00\\xffbinary\\n", "{odd}");

    let out = server
        .cmd()
        .args([raw(b"status"), raw(b"-k"), raw(b"\xfe\xff")])
        .run();
    out.assert_code(0);
    out.assert_stdout_contains("an unknown holder");

    // Another client's lock can be released by force; another application's hash is not.
    let out = server
        .cmd()
        .args([
            raw(b"release"),
            raw(b"-k"),
            raw(b"\xfe\xff"),
            raw(b"--force"),
        ])
        .run();
    out.assert_code(0);
    assert_eq!(get_bytes(&server, b"redlock:\xfe\xff"), None);
    let out = server
        .cmd()
        .args(["release", "-k", "a-hash", "--force"])
        .run();
    out.assert_code(125);
    out.assert_stderr_contains("not a lock redlock-run wrote");
    assert_eq!(server.key_type("redlock:a-hash"), "hash");

    holder.let_go();
    holder.wait().assert_code(0);
}

#[test]
fn names_with_braces_work_everywhere_or_are_refused_up_front_on_a_cluster() {
    let odd = ["a}b", "{}", "x{}y"];

    // One server has no hash slots: every name works, semaphore slots and fence included.
    let server = RedisServer::start();
    for name in odd {
        let out = server
            .cmd()
            .args(["-k", name, "--limit", "2", "--", "true"])
            .run();
        out.assert_code(0);
    }

    // A cluster: refused before anything is written, with the reason and the way out.
    let cluster = Cluster::start();
    for name in odd {
        let out = cluster.cmd().args(["-k", name, "--", "true"]).run();
        out.assert_code(125);
        out.assert_stderr_contains("hash tag");
        out.assert_stderr_prefixed();
        assert!(!out.stderr.contains("CROSSSLOT"), "{}", out.stderr);
    }
    assert_eq!(cluster.keys(), Vec::<String>::new(), "nothing written");

    // Names a cluster can keep together: a tag, an open brace, a tag after a stray `}`.
    for name in ["{deploy}:web", "a{b", "a}b{c}"] {
        let out = cluster
            .cmd()
            .args(["-k", name, "--limit", "2", "--", "true"])
            .run();
        out.assert_code(0);
        let out = cluster.cmd().args(["status", "-k", name]).run();
        out.assert_code(1);
    }
}

/// Every lock's keys are its own: a name that is another lock's fence counter, queue or
/// slot (`job{t}:fence` beside `job{t}`), or that would share another lock's (`{orders}`
/// beside `orders`, with no prefix), is refused up front, and nothing is written.
#[test]
fn a_lock_never_shares_its_keys_with_another() {
    let server = RedisServer::start();
    server
        .cmd()
        .args(["-k", "job{t}", "--", "true"])
        .run()
        .assert_code(0);
    let counter = server.get("redlock:job{t}:fence").expect("a fence counter");
    for name in ["job{t}:fence", "job{t}:queue", "job{t}:slot:2"] {
        let out = server
            .cmd()
            .args(["-k", name, "--no-wait", "--", "true"])
            .run();
        eprintln!(
            "{name}: exit {:?}, {}",
            out.status.code(),
            out.stderr.trim()
        );
        out.assert_code(125)
            .assert_stderr_contains("redlock:job{t}")
            .assert_stderr_prefixed();
    }
    assert_eq!(server.get("redlock:job{t}:fence"), Some(counter));

    let bare = |name: &str| {
        server
            .cmd()
            .args(["--prefix", "", "-k", name, "--no-wait", "--", "true"])
            .run()
    };
    bare("orders").assert_code(0);
    let out = bare("{orders}");
    eprintln!(
        "{{orders}}: exit {:?}, {}",
        out.status.code(),
        out.stderr.trim()
    );
    out.assert_code(125).assert_stderr_contains("orders");
    assert!(!server.exists("{orders}"), "nothing written");
}
