//! A command whose processes run as another user (`sudo`, `doas`, `su -c`, a setuid
//! program): redlock-run may not signal them, so it never releases the lock while they run,
//! its guardian does not give up on them, and it says which signal it could not deliver.
//!
//! How the tests make such a process: they run as root, which may signal anything, so
//! redlock-run runs as `nobody` (`setpriv --reuid`), and its command starts a process as
//! root through a setuid-root copy of `setpriv` in the test's directory, told to set its
//! real uid to 0 as well (`--reuid=0`). A plain setuid program (a setuid `sleep`) would not
//! do: it keeps its caller's real uid, and the kernel lets a process signal another whose
//! real uid is its own; that is why `sudo` sets all its uids, and what makes it unreachable.
//! The directory is made world-writable for the `nobody` run's files; if its filesystem is
//! mounted `nosuid`, the helper's check fails with a hint instead of the test passing.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

/// The unprivileged user redlock-run runs as: `nobody` and `nogroup` on Debian; the numeric
/// ids, since the names differ between distributions.
const NOBODY: &str = "65534";

/// A test directory that `nobody` may write to, with `asroot`: a setuid-root `setpriv`.
struct Setup {
    dir: TempDir,
    asroot: PathBuf,
}

impl Setup {
    #[track_caller]
    fn new(tag: &str) -> Setup {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "these tests run redlock-run as another user and need root: run them as root \
             (in a container, or `sudo -E cargo test --test integration users::`)"
        );
        let setpriv = require(
            "setpriv",
            "these tests run redlock-run as nobody and a process of its command as root",
            "`apt-get install -y util-linux` (Debian/Ubuntu) or `dnf install util-linux`",
        );
        let dir = TempDir::new(tag);
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let asroot = dir.join("asroot");
        fs::copy(&setpriv, &asroot).unwrap();
        // Owned by root already (the tests run as root); setuid, executable by all.
        fs::set_permissions(&asroot, fs::Permissions::from_mode(0o4755)).unwrap();
        let setup = Setup { dir, asroot };
        let uid = Command::new(&setpriv)
            .args(as_nobody_args())
            .arg(&setup.asroot)
            .args(setup.root_args())
            .args(["id", "-u"])
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", setpriv.display()));
        assert_eq!(
            String::from_utf8_lossy(&uid.stdout).trim(),
            "0",
            "the setuid-root helper {} did not run as root when started by nobody ({}): \
             is {} mounted nosuid? Point TMPDIR at a directory on a filesystem that allows \
             setuid programs",
            setup.asroot.display(),
            String::from_utf8_lossy(&uid.stderr).trim(),
            std::env::temp_dir().display()
        );
        setup
    }

    /// What makes `asroot` set every uid and gid to root before it runs its command.
    fn root_args(&self) -> [&'static str; 3] {
        ["--reuid=0", "--regid=0", "--clear-groups"]
    }

    /// `asroot` with its arguments, for a shell command line.
    fn as_root(&self) -> String {
        format!("'{}' {}", self.asroot.display(), self.root_args().join(" "))
    }

    /// redlock-run, run as `nobody`.
    fn wrapper(&self, server: &RedisServer) -> Wrapper {
        let setpriv = require("setpriv", "as above", "util-linux");
        Wrapper::via_shell(
            &server.url(),
            &format!(
                "exec '{}' {} \"$0\" \"$@\"",
                setpriv.display(),
                as_nobody_args().join(" ")
            ),
        )
        .arg(BIN)
    }
}

fn as_nobody_args() -> [String; 3] {
    [
        format!("--reuid={NOBODY}"),
        format!("--regid={NOBODY}"),
        String::from("--clear-groups"),
    ]
}

#[track_caller]
fn wait_for_stderr(run: &mut Running, needle: &str, limit: Duration) {
    wait_until(
        limit,
        &format!("{needle:?} on redlock-run's stderr"),
        || {
            assert!(
                !run.has_exited(),
                "redlock-run exited before saying {needle:?}; stderr:\n{}",
                run.stderr_so_far()
            );
            run.stderr_so_far().contains(needle)
        },
    );
}

/// A root process the test started, killed when the test ends, however it ends: nothing
/// else would (it is out of redlock-run's reach).
struct RootProcess(i32);

impl Drop for RootProcess {
    fn drop(&mut self) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is unreaped (a child of
        // the run) or gone.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

fn renewals(run: &Running) -> usize {
    run.stderr_so_far().matches("lease renewed").count()
}

/// The command (a shell running as nobody) starts a process as root in the background and
/// exits. redlock-run may not signal what it left: it must keep the lock, renewing it, for
/// as long as that process runs, say why, and release only once it has gone.
#[test]
fn leftovers_that_run_as_another_user_keep_the_lock_until_they_end() {
    let server = RedisServer::start();
    let setup = Setup::new("users-leftover");
    let pid_file = setup.dir.join("pid");
    let mut run = setup
        .wrapper(&server)
        .args(["-v", "-k", "deploy", "--ttl", "1s", "--kill-after", "1s"])
        .args(["--", "sh", "-c"])
        // The shell exits only once the process it left runs as root: until its `setpriv`
        // has set the uids, it is still nobody's, and would simply be terminated.
        .arg(format!(
            "{} sleep 60 & echo $! > '{}'
             until grep -q '^Uid:[[:space:]]*0[[:space:]]' /proc/$!/status; do sleep 0.01; done",
            setup.as_root(),
            pid_file.display()
        ))
        .spawn();
    let leftover = run.read_pid(&pid_file);
    let _cleanup = RootProcess(leftover);
    wait_for_stderr(
        &mut run,
        "keeping redlock:deploy until they end",
        Duration::from_secs(20),
    );
    // Well past the first lease's end: the lock is renewed, not left to expire.
    let seen = renewals(&run);
    wait_until(Duration::from_secs(20), "three more renewals", || {
        assert!(!run.has_exited(), "{}", run.stderr_so_far());
        renewals(&run) >= seen + 3
    });
    assert!(pid_alive(leftover));
    assert!(
        server.exists("redlock:deploy"),
        "the lock is gone while the root process runs:\n{}",
        run.stderr_so_far()
    );
    signal(leftover, libc::SIGKILL);
    let out = run.wait();
    out.assert_code(0)
        .assert_stderr_contains("cannot send SIGTERM to the command's process group")
        .assert_stderr_lacks("terminated them");
    assert!(!server.exists("redlock:deploy"), "not released at the end");
}

/// The command itself becomes a root process (`exec` of a setuid program that sets its
/// uids). The guardian must keep guarding a group it may not signal rather than take it for
/// gone; and when the lock is lost, redlock-run must say that its signals do not reach the
/// command, which runs on.
#[test]
fn a_command_running_as_another_user_is_guarded_and_its_signals_failures_told() {
    let server = RedisServer::start();
    let setup = Setup::new("users-lost");
    let pid_file = setup.dir.join("pid");
    let mut run = setup
        .wrapper(&server)
        .args(["-v", "-k", "job", "--ttl", "1s", "--kill-after", "1s"])
        .args(["--", "sh", "-c"])
        .arg(format!(
            "echo $$ > '{}'; exec {} sleep 60",
            pid_file.display(),
            setup.as_root()
        ))
        .spawn();
    let command = run.read_pid(&pid_file);
    let _cleanup = RootProcess(command);
    wait_until(
        Duration::from_secs(10),
        "the command to run as root",
        || {
            fs::read_to_string(format!("/proc/{command}/status"))
                .is_ok_and(|status| status.lines().any(|l| l.starts_with("Uid:\t0\t0\t0")))
        },
    );
    // Each renewal wakes the guardian, which then looks at the group: by the third since
    // the command became root, it has looked (and, before the fix, left).
    let seen = renewals(&run);
    wait_until(Duration::from_secs(20), "three renewals", || {
        assert!(!run.has_exited(), "{}", run.stderr_so_far());
        renewals(&run) >= seen + 3
    });
    let guardians: Vec<i32> = children_of(run.pid())
        .into_iter()
        .filter(|&pid| pid != command)
        .collect();
    assert_eq!(
        guardians.len(),
        1,
        "one guardian besides the command: {guardians:?}"
    );
    assert!(
        pid_alive(guardians[0]),
        "the guardian left while the command's group still runs (as root)"
    );

    server.del("redlock:job");
    wait_for_stderr(
        &mut run,
        "cannot send SIGTERM to the command's process group",
        Duration::from_secs(20),
    );
    assert!(pid_alive(command), "root's process cannot have been ended");
    signal(command, libc::SIGKILL);
    let out = run.wait();
    out.assert_code(76).assert_stderr_contains("lock lost");
}
