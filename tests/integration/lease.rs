//! The lease over time: renewal keeps a short-TTL lock through a longer job; a lock lost
//! (stolen, deleted, Redis gone, frozen or restarted empty) terminates the command's whole
//! process group and exits 76 before the lease could have expired; a release that fails
//! only warns.

use std::time::{Duration, Instant};

use crate::support::*;

/// A 1s-TTL lock survives a 3.5s job: contenders are refused throughout.
#[test]
fn renewal_keeps_a_short_lease_through_a_long_job() {
    let server = RedisServer::start();
    let dir = TempDir::new("renew");
    let job = dir.script(
        "job",
        &format!("touch '{}'\nsleep 3.5", dir.join("started").display()),
    );
    let mut holder = server
        .cmd()
        .args(["-k", "renew", "-t", "1s", "--"])
        .arg(job)
        .spawn();
    holder.wait_for_file(&dir.join("started"), Duration::from_secs(15));
    let started = Instant::now();
    let token = token_of(&server.lock_value("renew").expect("key missing"));
    // Probe at about 1.2s and 2.2s into the job: both past the first TTL, both well before
    // the job ends at 3.5s.
    for probe_at in [1200, 2200] {
        let wait = Duration::from_millis(probe_at).saturating_sub(started.elapsed());
        std::thread::sleep(wait); // Time has to pass here: the point is the TTL elapsing.
        let value = server
            .lock_value("renew")
            .unwrap_or_else(|| panic!("lease expired {:?} into the job", started.elapsed()));
        assert_eq!(token_of(&value), token, "token changed");
        let pttl = server.pttl("redlock:renew");
        assert!((1..=1000).contains(&pttl), "pttl {pttl}");
        server
            .cmd()
            .args(["-k", "renew", "--no-wait", "--", "touch"])
            .arg(dir.join("contender_ran"))
            .run()
            .assert_code(75);
    }
    let out = holder.wait();
    out.assert_code(0).assert_stderr_lacks("lock lost");
    assert!(!dir.exists("contender_ran"), "a contender got the lock");
    assert_eq!(server.dbsize(), 0);
}

/// --renew-every is honoured: with a 3s TTL renewed every 200ms, PTTL stays near 3s.
#[test]
fn renew_every_sets_the_renewal_period() {
    let server = RedisServer::start();
    let dir = TempDir::new("renewevery");
    let holder = hold(
        server
            .cmd()
            .args(["-k", "re", "-t", "3s", "--renew-every", "200ms"]),
        &dir,
        "holder",
    );
    let start = Instant::now();
    let mut min_pttl = i64::MAX;
    while start.elapsed() < Duration::from_millis(1500) {
        let pttl = server.pttl("redlock:re");
        min_pttl = min_pttl.min(pttl);
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("lowest PTTL seen with 200ms renewals of a 3s lease: {min_pttl}ms");
    // Without renewal it would have fallen below 1500ms; allow a lot of scheduling slack.
    assert!(
        min_pttl > 1800,
        "lease not renewed every 200ms: min PTTL {min_pttl}"
    );
    holder.let_go();
    holder.wait().assert_code(0);
}

#[track_caller]
fn assert_lost(out: &Output) {
    out.assert_code(76).assert_stderr_contains("lock lost");
}

/// Someone overwrites the key: the wrapper notices, terminates the command, exits 76 and
/// leaves the other value alone.
#[test]
fn stolen_lock_terminates_the_command_with_76() {
    let server = RedisServer::start();
    let dir = TempDir::new("stolen");
    let mut wrapper = server
        .cmd()
        .args(["-k", "steal", "-t", "1s", "--"])
        .arg(sleeper(&dir))
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    assert!(server.exists("redlock:steal"));
    server.set("redlock:steal", "thief");
    let stolen_at = Instant::now();
    let out = wrapper.wait_within(Duration::from_secs(15));
    eprintln!("wrapper exited {:?} after the theft", stolen_at.elapsed());
    assert_lost(&out);
    assert!(
        stolen_at.elapsed() < Duration::from_secs(5),
        "took {:?} to notice",
        stolen_at.elapsed()
    );
    assert!(!pid_alive(pid), "command still alive");
    assert_eq!(server.get("redlock:steal").as_deref(), Some("thief"));
}

/// The key is deleted under the wrapper: lock lost, 76, nothing recreated.
#[test]
fn deleted_lock_terminates_the_command_with_76() {
    let server = RedisServer::start();
    let dir = TempDir::new("deleted");
    let mut wrapper = server
        .cmd()
        .args(["-k", "del", "-t", "1s", "--"])
        .arg(sleeper(&dir))
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    server.del("redlock:del");
    let out = wrapper.wait_within(Duration::from_secs(15));
    assert_lost(&out);
    assert!(!pid_alive(pid));
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

/// A command that ignores SIGTERM is SIGKILLed after --kill-after.
#[test]
fn lost_lock_escalates_to_sigkill_after_kill_after() {
    let server = RedisServer::start();
    let dir = TempDir::new("killafter");
    let script = stubborn_script(&dir);
    let mut wrapper = server
        .cmd()
        .args(["-k", "ka", "-t", "10s", "--kill-after", "1s", "--"])
        .arg(script)
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    server.set("redlock:ka", "thief");
    // Renewal runs every ~3.3s; allow for that plus the grace period.
    let out = wrapper.wait_within(Duration::from_secs(20));
    assert_lost(&out);
    assert!(dir.exists("terms"), "the command never saw SIGTERM");
    assert!(!pid_alive(pid));
    assert_eq!(server.get("redlock:ka").as_deref(), Some("thief"));
}

/// Redis killed mid-run: renewals fail, and the command is stopped before the 2s lease
/// could have run out, exit 76.
#[test]
fn redis_killed_mid_run_gives_76_before_the_lease_expires() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("rkill");
    let mut wrapper = server
        .cmd()
        .args(["-k", "gone", "-t", "2s", "--"])
        .arg(sleeper(&dir))
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    server.stop();
    let stopped = Instant::now();
    let died = wait_for_death(pid, Duration::from_secs(10));
    eprintln!("command died {died:?} after Redis was killed (ttl 2s)");
    let out = wrapper.wait_within(Duration::from_secs(15));
    eprintln!(
        "wrapper exited {:?} after Redis was killed",
        stopped.elapsed()
    );
    assert_lost(&out);
    assert!(
        died < Duration::from_secs(3),
        "command outlived the lease: died {died:?} after the last chance to renew"
    );
    assert!(
        stopped.elapsed() < Duration::from_secs(4),
        "wrapper exited {:?} after the stop",
        stopped.elapsed()
    );
}

/// Redis frozen (SIGSTOP): calls hang rather than fail, and the default 5s Redis timeout is
/// longer than the 2s lease: the command must still be dead before the lease expires.
#[test]
fn redis_frozen_mid_run_stops_the_command_before_the_lease_expires() {
    let server = RedisServer::start();
    let dir = TempDir::new("rfreeze");
    let mut wrapper = server
        .cmd()
        .args(["-k", "frozen", "-t", "2s", "--"])
        .arg(sleeper(&dir))
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    let frozen_at = Instant::now();
    server.freeze();
    // Any lease granted before the freeze ends by frozen_at + 2s at the latest.
    let died = wait_until(Duration::from_secs(10), "the command to die", || {
        !pid_alive(pid)
    });
    eprintln!(
        "command died {died:?} after the freeze (ttl 2s); wrapper alive {:?} so far",
        frozen_at.elapsed()
    );
    server.thaw();
    let out = wrapper.wait_within(Duration::from_secs(20));
    assert_lost(&out);
    assert!(
        died < Duration::from_secs(2),
        "command still alive {died:?} after the freeze: past the 2s lease"
    );
}

/// Redis restarted empty (no persistence): the key is gone, the next renewal sees that.
#[test]
fn redis_restarted_empty_loses_the_lock() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("rrestart");
    let mut wrapper = server
        .cmd()
        .args(["-k", "rs", "-t", "3s", "--"])
        .arg(sleeper(&dir))
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    server.stop();
    server.restart();
    let out = wrapper.wait_within(Duration::from_secs(15));
    assert_lost(&out);
    assert!(!pid_alive(pid));
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

/// Redis gone when the command exits: a warning, and the exit code is still the command's.
#[test]
fn failed_release_warns_but_keeps_the_command_status() {
    let mut server = RedisServer::start();
    let dir = TempDir::new("relfail");
    let wrapper = server
        .cmd()
        .args(["-k", "rf", "-t", "30s", "--redis-timeout", "1s"]);
    let holder = Job::new(&dir, "job").exit_code(5).start(wrapper);
    server.stop();
    holder.let_go();
    let out = holder.wait_within(Duration::from_secs(20));
    out.assert_code(5)
        .assert_stderr_prefixed()
        .assert_stderr_lacks("lock lost");
    assert!(
        !out.stderr.trim().is_empty(),
        "no warning about the failed release"
    );
}

/// A --shell job with a background grandchild: when the lock is lost, nothing of the
/// command's process group survives.
#[test]
fn lost_lock_kills_the_whole_process_group() {
    let server = RedisServer::start();
    let dir = TempDir::new("pgkill");
    let shell = format!(
        "sleep 100 & echo $! > '{bg}'; echo $$ > '{pid}'; wait",
        bg = dir.join("bgpid").display(),
        pid = dir.join("pid").display()
    );
    let mut wrapper = server
        .cmd()
        .args(["-k", "pg", "-t", "1s", "--shell", &shell])
        .spawn();
    let pid = wrapper.read_pid(&dir.join("pid"));
    let bg = read_pid(&dir.join("bgpid"));
    assert_eq!(
        pgid_of(bg),
        Some(pid),
        "background job not in the command's group"
    );
    server.del("redlock:pg");
    let out = wrapper.wait_within(Duration::from_secs(15));
    assert_lost(&out);
    wait_for_death(bg, Duration::from_secs(5));
    wait_until(
        Duration::from_secs(5),
        "the process group to be empty",
        || live_in_group(pid).is_empty(),
    );
}

/// Its stderr a full pipe that nobody reads: redlock-run still stops the command on a lost
/// lock and exits 76, and a SIGTERM still reaches it (it used to block in `write` for good).
#[test]
fn a_full_stderr_never_stops_redlock_run() {
    let server = RedisServer::start();
    let (unread, stderr) = std::io::pipe().expect("a pipe");
    let mut run = with_default_signals(&mut std::process::Command::new(BIN))
        .env("REDLOCK_REDIS", server.url())
        .args([
            "-k",
            "fs",
            "--ttl",
            "1s",
            "--kill-after",
            "1s",
            "--",
            "sh",
            "-c",
        ])
        .arg("head -c 200000 /dev/zero >&2; sleep 60")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("starting redlock-run");
    wait_until(Duration::from_secs(15), "the lock to be taken", || {
        server.exists("redlock:fs")
    });
    // The command has filled the pipe by now (200 KB against 64 KB), or will have soon.
    std::thread::sleep(Duration::from_millis(300));
    server.del("redlock:fs");
    let lost = Instant::now();
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        if lost.elapsed() > Duration::from_secs(5) {
            signal(run.id() as i32, libc::SIGTERM);
        }
        assert!(
            lost.elapsed() < Duration::from_secs(20),
            "redlock-run is stuck; its stderr is full"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(unread);
    assert_eq!(status.code(), Some(76), "{status:?}");
    assert!(
        lost.elapsed() < Duration::from_secs(5),
        "it took {:?} to end",
        lost.elapsed()
    );
}

/// The key is deleted while a short command runs, and the command ends before the next
/// renewal (every 10s with a 30s TTL) could notice: the release finds the lock gone while
/// the lease still held, so the run reports the lost lock and exits 76, in text and in
/// JSON, and never exits with the command's 0.
#[test]
fn a_lock_lost_before_the_release_is_reported_without_a_renewal() {
    let server = RedisServer::start();
    let dir = TempDir::new("lostbeforerelease");
    for (name, flags) in [
        ("text", &[][..]),
        ("json", &["--log-format", "json"][..]),
        ("semaphore", &["--limit", "2"][..]),
        ("minhold", &["--min-hold", "20s"][..]),
    ] {
        let holder = hold(
            server.cmd().args(["-k", name, "-t", "30s"]).args(flags),
            &dir,
            name,
        );
        // The lock's key, which is also a semaphore's first slot, the one it took.
        let key = format!("redlock:{name}");
        assert!(server.exists(&key), "keys: {:?}", server.keys());
        server.del(&key);
        holder.let_go();
        let out = holder.wait();
        out.assert_code(76)
            .assert_stderr_contains("lock lost")
            .assert_stderr_contains(&format!("redlock:{name}"));
        if name == "json" {
            out.assert_stderr_contains("\"event\":\"lost\"");
        }
    }
}

/// The lock is intact when the command ends: no false loss, whatever the flags.
#[test]
fn an_intact_lock_is_not_reported_lost_at_the_release() {
    let server = RedisServer::start();
    let dir = TempDir::new("intactrelease");
    for (name, flags) in [
        ("plain", &[][..]),
        ("semaphore", &["--limit", "2"][..]),
        ("minhold", &["--min-hold", "1s"][..]),
    ] {
        let holder = Job::new(&dir, name)
            .exit_code(3)
            .start(server.cmd().args(["-k", name, "-t", "30s"]).args(flags));
        holder.let_go();
        holder
            .wait()
            .assert_code(3)
            .assert_stderr_lacks("lock lost")
            .assert_stderr_lacks("warning");
    }
}
