//! No secret leaves the run: the command's arguments stay on its machine (others see its
//! program's name and a label), the Redis password reaches neither the command, nor `ps`,
//! nor a core file, nor any message, and text from outside cannot reach a reader's terminal
//! as control characters.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use crate::support::*;

/// A job run as `deploy.sh --token=SECRET`: its arguments appear nowhere another job or an
/// operator can see (the value in Redis, `status`, `list`, `--json`, a waiter's messages),
/// however long they are; its program's name and its label do.
#[test]
fn the_command_line_of_a_job_is_not_published() {
    let server = RedisServer::start();
    let dir = TempDir::new("nocmdline");
    let secret = "tok-8c1f0e5a";
    let long = "x".repeat(100_000);
    let script = dir.script("deploy.sh", &Job::new(&dir, "d").body());
    let mut holder = server
        .cmd()
        .args(["-k", "deploy", "--label", "deploy of v1.2 by alice", "--"])
        .arg(&script)
        .arg(format!("--token={secret}"))
        .arg(&long)
        .spawn();
    holder.wait_for_file(&dir.join("d.ready"), Duration::from_secs(15));
    let value = server.lock_value("deploy").expect("held");
    assert!(
        !value.contains(secret),
        "the value holds an argument: {value}"
    );
    assert!(value.len() < 1024, "the value is {} bytes", value.len());
    assert!(value.contains("\"program\":\"deploy.sh\""), "{value}");
    assert!(
        value.contains("\"label\":\"deploy of v1.2 by alice\""),
        "{value}"
    );

    let status = server.cmd().args(["status", "-k", "deploy"]).run();
    status
        .assert_code(0)
        .assert_stdout_contains("`deploy.sh` (deploy of v1.2 by alice)")
        .assert_not_leaked(secret);
    for args in [
        &["status", "-k", "deploy", "--json"][..],
        &["list"],
        &["list", "--json"],
    ] {
        server
            .cmd()
            .args(args)
            .run()
            .assert_code(0)
            .assert_not_leaked(secret);
    }
    let waiter = server
        .cmd()
        .args(["-k", "deploy", "-v", "--wait", "1500ms", "--", "true"])
        .run();
    waiter
        .assert_code(75)
        .assert_stderr_contains("deploy of v1.2 by alice")
        .assert_not_leaked(secret);
    std::fs::write(dir.join("d.go"), "").unwrap();
    holder.wait().assert_code(0);
}

/// A label longer than 256 bytes is refused up front.
#[test]
fn labels_are_bounded() {
    let server = RedisServer::start();
    let out = server
        .cmd()
        .args(["-k", "l", "--label", &"a".repeat(257), "--", "true"])
        .run();
    out.assert_code(125)
        .assert_stderr_contains("invalid --label: it is 257 bytes long; the limit is 256");
    assert_eq!(server.dbsize(), 0);
    server
        .cmd()
        .env("REDLOCK_LABEL", "a".repeat(256))
        .args(["-k", "l", "--", "true"])
        .run()
        .assert_code(0);
}

/// The Redis password does not reach the command through the environment: REDLOCK_REDIS
/// (when it holds a password) and REDLOCK_PASSWORD are left out, unless --pass-redis-env.
#[test]
fn the_redis_password_does_not_reach_the_command() {
    let password = "envpass-77a1";
    let server = RedisServer::start_with_password(password);
    let env_of_command = "env | grep '^REDLOCK_' | sort";
    let out = server.cmd().args(["-k", "e", "-c", env_of_command]).run();
    out.assert_code(0);
    let seen = out.stdout_str();
    assert!(
        !seen.contains(password),
        "the command saw the password:\n{seen}"
    );
    assert!(!seen.contains("REDLOCK_REDIS="), "{seen}");
    assert!(seen.contains("REDLOCK_KEY=redlock:e"), "{seen}");

    let out = Wrapper::bare()
        .env(
            "REDLOCK_REDIS",
            format!("redis://127.0.0.1:{}", server.port()),
        )
        .env("REDLOCK_PASSWORD", password)
        .args(["-k", "e", "-c", env_of_command])
        .run();
    out.assert_code(0);
    let seen = out.stdout_str();
    assert!(
        !seen.contains(password),
        "the command saw the password:\n{seen}"
    );
    // A URL without a password is no secret: it stays, for jobs that call redlock-run.
    assert!(seen.contains("REDLOCK_REDIS=redis://127.0.0.1:"), "{seen}");

    let out = server
        .cmd()
        .args(["-k", "e", "--pass-redis-env", "-c", env_of_command])
        .run();
    out.assert_code(0);
    assert!(
        out.stdout_str().contains(password),
        "--pass-redis-env kept nothing"
    );
}

/// A password can come from a file or REDLOCK_PASSWORD instead of the URL; a wrong one is
/// refused like a wrong one in the URL, and printed nowhere.
#[test]
fn passwords_from_a_file_or_the_environment() {
    let password = "filepass-3b9d";
    let server = RedisServer::start_with_password(password);
    let dir = TempDir::new("pwfile");
    let file = dir.join("pw");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = format!("redis://127.0.0.1:{}", server.port());
    Wrapper::bare()
        .args(["-r", &url, "--password-file"])
        .arg(&file)
        .args(["-k", "f", "--", "true"])
        .run()
        .assert_code(0)
        .assert_stderr_lacks("warning");
    let out = Wrapper::bare()
        .env("REDLOCK_PASSWORD", password)
        .args(["-r", &url, "-v", "-k", "f", "--", "true"])
        .run();
    out.assert_code(0).assert_not_leaked(password);
    let out = Wrapper::bare()
        .env("REDLOCK_PASSWORD", "wrong-pass-1")
        .args(["-r", &url, "-k", "f", "--", "true"])
        .run();
    out.assert_code(125)
        .assert_stderr_contains("authentication failed")
        .assert_not_leaked("wrong-pass-1");
    let out = Wrapper::bare()
        .args(["-r", &url, "--password-file"])
        .arg(dir.join("missing"))
        .args(["-k", "f", "--", "true"])
        .run();
    out.assert_code(125)
        .assert_stderr_contains("cannot read the --password-file");
}

/// A `--password-file` is read within bounds: `/dev/zero` or a huge file is refused after
/// 64 KiB (it used to be read until memory ran out), a FIFO nobody writes to after 10 s (it
/// used to block for ever), a NUL in the password is refused; a pipe that does give a line
/// (`<(vault read ...)`) works. Nothing runs when the file is refused.
#[test]
fn a_password_file_is_read_within_bounds() {
    let password = "pipepass-77c1";
    let server = RedisServer::start_with_password(password);
    let dir = TempDir::new("pwbounds");
    let url = format!("redis://127.0.0.1:{}", server.port());
    let run = |file: &std::path::Path| {
        Wrapper::bare()
            .args(["-r", &url, "--password-file"])
            .arg(file)
            .args(["-k", "b", "--", "touch"])
            .arg(dir.join("ran"))
            .run()
    };
    run(std::path::Path::new("/dev/zero"))
        .assert_code(125)
        .assert_stderr_contains("has no line ending in its first 64 KiB");
    let nul = dir.join("nul");
    std::fs::write(&nul, "pass\0word\n").unwrap();
    run(&nul)
        .assert_code(125)
        .assert_stderr_contains("has a control character");
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo (coreutils)");
    assert!(made.success(), "mkfifo {}", fifo.display());
    let out = run(&fifo);
    out.assert_code(125)
        .assert_stderr_contains("nothing came from it within 10s");
    assert!(
        !dir.exists("ran"),
        "a refused password file let the command run"
    );
    assert_eq!(server.dbsize(), 0, "keys written: {:?}", server.keys());
    // A FIFO with a writer: the way `<(vault read ...)` hands a password over.
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, format!("{password}\n")))
    };
    run(&fifo)
        .assert_code(0)
        .assert_stderr_lacks("warning")
        .assert_not_leaked(password);
    writer.join().unwrap().expect("writing to the FIFO");
    assert!(dir.exists("ran"));
}

/// A password file that every user may read is used, with a warning that says how to fix
/// it; one only its owner may read gets none (see `passwords_from_a_file_or_the_environment`).
#[test]
fn a_world_readable_password_file_is_warned_of() {
    let password = "openpass-19fe";
    let server = RedisServer::start_with_password(password);
    let dir = TempDir::new("pwmode");
    let file = dir.join("pw");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let url = format!("redis://127.0.0.1:{}", server.port());
    let out = Wrapper::bare()
        .args(["-r", &url, "--password-file"])
        .arg(&file)
        .args(["-k", "m", "--", "true"])
        .run();
    out.assert_code(0)
        .assert_stderr_contains("can be read by every user of this machine (mode 0644)")
        .assert_stderr_contains("chmod 600")
        .assert_not_leaked(password);
}

/// With the password in REDLOCK_PASSWORD or a file, a user name typed in the URL
/// (`redis://locker@host`) is no password on the command line: no warning (it used to say
/// "a Redis password given on the command line"), and the user name stays visible in `ps`.
#[test]
fn a_user_name_on_the_command_line_is_not_warned_of() {
    let password = "userpass-4410";
    let server = RedisServer::start();
    server.query::<String>(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        &format!(">{password}"),
        "~*",
        "&*",
        "+@all",
    ]);
    let dir = TempDir::new("pwuser");
    let file = dir.join("pw");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = format!("redis://locker@127.0.0.1:{}", server.port());
    Wrapper::bare()
        .env("REDLOCK_PASSWORD", password)
        .args(["-r", &url, "-k", "u", "--", "true"])
        .run()
        .assert_code(0)
        .assert_stderr_lacks("warning");
    let holder = Job::new(&dir, "h").start(
        Wrapper::bare()
            .args(["-r", &url, "--password-file"])
            .arg(&file)
            .args(["-k", "u"]),
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", holder.pid())).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("redis://locker@127.0.0.1"),
        "{cmdline:?}"
    );
    holder.let_go();
    holder.wait().assert_code(0).assert_stderr_lacks("warning");
}

/// A password typed on the command line is warned of, and gone from the command line of
/// redlock-run and of its guardian (what `ps` shows every local user) while the job runs,
/// its length too: passwords of 4 and 40 characters leave the same command line.
#[test]
fn a_password_on_the_command_line_is_hidden_from_ps() {
    let shown_with = |password: &str| {
        let server = RedisServer::start_with_password(password);
        let dir = TempDir::new("argv");
        let url = server.url();
        let holder = Job::new(&dir, "h").start(Wrapper::bare().args(["-r", &url, "-k", "ps"]));
        let wrapper = holder.pid();
        let mut shown = Vec::new();
        for pid in std::iter::once(wrapper).chain(children_of(wrapper)) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains("redlock-run") {
                assert!(!cmdline.contains(password), "pid {pid} shows it: {cmdline}");
                assert!(cmdline.contains(":***@127.0.0.1"), "pid {pid}: {cmdline}");
                // The port and the job's directory differ between the two runs.
                let port = server.port().to_string();
                let job_dir = dir.path().display().to_string();
                shown.push(cmdline.replace(&port, "PORT").replace(&job_dir, "DIR"));
            }
        }
        assert_eq!(shown.len(), 2, "redlock-run and its guardian: {shown:?}");
        holder.let_go();
        let out = holder.wait();
        out.assert_code(0)
            .assert_stderr_contains("a Redis password given on the command line can be read")
            .assert_not_leaked(password);
        shown
    };
    let short = shown_with("Qz7k");
    let long = shown_with("argvpass-5e2c-and-then-some-0123456789");
    assert!(
        short[0].contains(":***@127.0.0.1:PORT -k ps -- DIR/"),
        "{short:?}"
    );
    assert_eq!(short, long, "the command line shows the password's length");
}

/// redlock-run holds the password, so it is not dumpable: no core file, no reading its
/// memory. (For a non-dumpable process the kernel gives the files of /proc/PID to root.)
#[test]
fn redlock_run_cannot_be_dumped() {
    let setpriv = require(
        "setpriv",
        "this test runs redlock-run as an unprivileged user",
        "apt-get install util-linux",
    );
    let server = RedisServer::start();
    let dir = TempDir::new("dumpable");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let script = format!(
        "exec '{}' --reuid 65534 --regid 65534 --clear-groups \"$0\" \"$@\"",
        setpriv.display()
    );
    let pid_file = dir.join("h.pid");
    let holder = Job::new(&dir, "h")
        .first(&format!("echo $$ > '{}'", pid_file.display()))
        .start(Wrapper::via_shell(&server.url(), &script).args([BIN, "-k", "dump"]));
    let owner = |pid: i32| std::fs::metadata(format!("/proc/{pid}/mem")).unwrap().uid();
    let command = read_pid(&pid_file);
    assert_eq!(
        owner(command),
        65534,
        "the command itself is dumpable again"
    );
    assert_eq!(owner(holder.pid()), 0, "redlock-run is dumpable");
    holder.let_go();
    holder.wait().assert_code(0);
}

/// Passwords in every form of URL are hidden in every message, even when the URL is wrong.
#[test]
fn every_form_of_url_is_redacted() {
    let secret = "redactme-91f";
    for url in [
        format!("redis+unix://:{secret}@/nonexistent/redis.sock"),
        format!("redis+unix:///nonexistent/redis.sock?pass={secret}"),
        format!("redis://{secret}@127.0.0.1:1"),
        format!("redis://u:{secret}@127.0.0.1:1/x"),
        format!("bogus://:{secret}@h"),
        format!("redis+sentinel://:{secret}@h:x/m"),
    ] {
        let out = Wrapper::bare()
            .args([
                "-r",
                &url,
                "-v",
                "-k",
                "x",
                "--redis-timeout",
                "200ms",
                "--",
                "true",
            ])
            .run();
        out.assert_code(125).assert_not_leaked(secret);
        let out = Wrapper::bare()
            .args(["status", "-r", &url, "-k", "x", "--redis-timeout", "200ms"])
            .run();
        out.assert_code(125).assert_not_leaked(secret);
    }
}

/// Names and values from outside are printed with their control characters escaped: a key
/// with a newline cannot forge `list` lines, and another holder's escape sequences never
/// reach the reader's terminal.
#[test]
fn text_from_outside_cannot_reach_the_terminal() {
    let server = RedisServer::start();
    let forged = "redlock:a\nredlock:b held by root";
    server.set(forged, "x");
    let evil = "{\"token\":\"t\",\"host\":\"h\\u001b]0;pwned\\u0007\",\"program\":\"p\"}";
    server.set("redlock:esc", evil);
    let out = server.cmd().args(["list"]).run();
    out.assert_code(0);
    let listed = out.stdout_str();
    assert_eq!(listed.lines().count(), 2, "a forged line:\n{listed}");
    assert!(
        listed.contains("redlock:a\\nredlock:b held by root"),
        "{listed}"
    );
    assert!(
        !listed.contains('\u{1b}') && !listed.contains('\u{7}'),
        "{listed:?}"
    );
    assert!(listed.contains("h\\x1b]0;pwned\\x07"), "{listed}");
    let waiter = server
        .cmd()
        .args(["-k", "esc", "-v", "--wait", "1500ms", "--", "true"])
        .run();
    waiter.assert_code(75);
    assert!(
        !waiter.stderr.contains('\u{1b}') && waiter.stderr.contains("\\x1b]0;pwned"),
        "{:?}",
        waiter.stderr
    );
}
