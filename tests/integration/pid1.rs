//! redlock-run as PID 1 of a PID namespace, as a container's ENTRYPOINT runs it
//! (`unshare --pid --fork --mount-proc`): PID 1 has no default signal actions, so only the
//! signals it handles reach it; every orphan in the namespace comes back to it; the command
//! is not PID 1.

use std::time::Duration;

use crate::support::*;

/// `redlock-run ARGS` as PID 1 of a new PID namespace, with its own /proc.
fn as_pid1(server: &RedisServer) -> Wrapper {
    require(
        "unshare",
        "the PID 1 tests run redlock-run in a PID namespace of its own",
        "apt-get install util-linux (and run the tests as root)",
    );
    Wrapper::via_shell(
        &server.url(),
        "exec unshare --pid --fork --mount-proc \"$0\" \"$@\"",
    )
    .arg(BIN)
}

/// redlock-run's pid as the host sees it: the child of `unshare`.
#[track_caller]
fn pid1_of(wrapper: &Running) -> i32 {
    let children = children_of(wrapper.pid());
    assert_eq!(children.len(), 1, "unshare's children: {children:?}");
    children[0]
}

/// Orphans that die while the command runs, in its group and out of it (`setsid`), are
/// reaped at once: the command sees them vanish from the namespace's /proc.
#[test]
fn as_pid1_orphans_are_reaped_while_the_command_runs() {
    let server = RedisServer::start();
    let dir = TempDir::new("pid1-orphans");
    let script = dir.script(
        "orphans",
        &format!(
            r#"echo "$$ $PPID" > '{ids}'
# Double forks: each grandchild is orphaned at once, and dies shortly after.
(sleep 0.2 & echo $! > '{dir}/in-group')
(setsid sleep 0.2 & echo $! > '{dir}/own-session')
a=$(cat '{dir}/in-group'); b=$(cat '{dir}/own-session')
i=0
while [ -e /proc/$a ] || [ -e /proc/$b ]; do
    i=$((i + 1))
    if [ $i -gt 200 ]; then
        for p in $a $b; do [ -e /proc/$p ] && echo "left: $(cat /proc/$p/stat)"; done
        exit 1
    fi
    sleep 0.05
done
exit 0"#,
            ids = dir.join("ids").display(),
            dir = dir.path().display()
        ),
    );
    let out = as_pid1(&server)
        .args(["-k", "pid1", "--"])
        .arg(script)
        .run();
    out.assert_code(0);
    let ids = dir.read("ids");
    let (pid, ppid) = ids.split_once(' ').expect("pid and ppid");
    assert_eq!(ppid, "1", "redlock-run is not PID 1");
    assert_ne!(pid, "1", "the command is PID 1");
    assert_eq!(server.dbsize(), 0);
}

/// SIGTERM reaches redlock-run as PID 1 (it has a handler, so the kernel delivers it), is
/// forwarded, and the command's status is the exit status.
#[test]
fn as_pid1_sigterm_is_forwarded_and_the_status_passed_on() {
    let server = RedisServer::start();
    let dir = TempDir::new("pid1-term");
    let script = dir.script(
        "trapper",
        &format!(
            "trap 'echo TERM > \"{log}\"; exit 3' TERM\necho $$ > '{pid}'\n\
             while :; do sleep 0.05; done",
            log = dir.join("log").display(),
            pid = dir.join("pid").display()
        ),
    );
    let mut wrapper = as_pid1(&server)
        .args(["-k", "pid1", "--"])
        .arg(script)
        .spawn();
    wrapper.wait_for_file(&dir.join("pid"), Duration::from_secs(15));
    signal(pid1_of(&wrapper), libc::SIGTERM);
    wrapper.wait_within(Duration::from_secs(15)).assert_code(3);
    assert_eq!(dir.read("log"), "TERM");
    assert_eq!(server.dbsize(), 0);
}

/// A command that dies of a forwarded SIGINT: redlock-run, which cannot end by SIGINT as
/// PID 1 (the kernel ignores it), still exits 130.
#[test]
fn as_pid1_sigint_ends_the_run_with_130() {
    let server = RedisServer::start();
    let dir = TempDir::new("pid1-int");
    let mut wrapper = as_pid1(&server)
        .args(["-k", "pid1", "--"])
        .arg(sleeper(&dir))
        .spawn();
    wrapper.wait_for_file(&dir.join("pid"), Duration::from_secs(15));
    // Once the script has become `sleep`, which dies of SIGINT.
    let redlock = pid1_of(&wrapper);
    wait_until(Duration::from_secs(10), "exec of sleep", || {
        children_of(redlock).iter().any(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
        })
    });
    signal(redlock, libc::SIGINT);
    wrapper
        .wait_within(Duration::from_secs(15))
        .assert_code(130);
    assert_eq!(server.dbsize(), 0);
}

/// `--stop-timeout` as PID 1: the stubborn command's group is killed, the run exits 143.
#[test]
fn as_pid1_stop_timeout_kills_a_stubborn_command() {
    let server = RedisServer::start();
    let dir = TempDir::new("pid1-stop");
    let mut wrapper = as_pid1(&server)
        .args(["-k", "pid1", "--stop-timeout", "1s", "--"])
        .arg(stubborn_script(&dir))
        .spawn();
    wrapper.wait_for_file(&dir.join("pid"), Duration::from_secs(15));
    signal(pid1_of(&wrapper), libc::SIGTERM);
    let freed = wait_until(Duration::from_secs(10), "the lock to be free", || {
        !server.exists("redlock:pid1")
    });
    wrapper
        .wait_within(Duration::from_secs(10))
        .assert_code(143);
    assert!(freed <= Duration::from_secs(2), "freed after {freed:?}");
    assert_eq!(dir.read("terms"), "TERM");
}
