//! redlock-run in the foreground of a real terminal: `script(1)` (util-linux, in every
//! Debian) gives it a pseudo-terminal as its controlling terminal, and what the test writes
//! to `script`'s stdin is typed at that terminal. The command must get the terminal (read
//! from it, be its foreground group), and a typed Ctrl-C must reach it exactly once.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

#[test]
fn ctrl_c_at_a_terminal_reaches_the_command_once() {
    let script = which("script").unwrap_or_else(|| {
        panic!("`script` is needed for the terminal test: apt-get install -y bsdutils")
    });
    let server = RedisServer::start();
    let dir = TempDir::new("tty");
    let command = dir.script(
        "interactive",
        &format!(
            "trap 'echo INT >> \"{log}\"; exit 12' INT\n\
             # fields 5 and 8 of /proc/PID/stat: process group, terminal's foreground group\n\
             cut -d' ' -f5,8 /proc/$$/stat > \"{groups}\"\n\
             touch \"{ready}\"\n\
             read line\n\
             echo \"$line\" > \"{typed}\"\n\
             while :; do sleep 0.05; done\n",
            log = dir.join("signals").display(),
            groups = dir.join("groups").display(),
            ready = dir.join("ready").display(),
            typed = dir.join("typed").display(),
        ),
    );
    let wrapper = format!(
        "exec {bin} -r {url} -k tty -- {command}",
        bin = env!("CARGO_BIN_EXE_redlock-run"),
        url = server.url(),
        command = command.display()
    );
    let mut terminal = Command::new(script)
        .args(["-qefc", &wrapper, "/dev/null"])
        .env_remove("REDLOCK_REDIS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting script(1)");
    let mut keyboard = terminal.stdin.take().expect("script's stdin");

    wait_until(Duration::from_secs(15), "the command to start", || {
        dir.exists("ready")
    });
    let groups = dir.read("groups");
    let mut fields = groups.split_whitespace();
    let (own, foreground) = (fields.next(), fields.next());
    assert_eq!(
        own, foreground,
        "the command's process group should be the terminal's foreground group"
    );

    keyboard.write_all(b"hello\n").expect("typing a line");
    wait_until(
        Duration::from_secs(15),
        "the command to read the line",
        || dir.exists("typed"),
    );
    assert_eq!(dir.read("typed").trim(), "hello");

    keyboard.write_all(b"\x03").expect("typing Ctrl-C");
    let status = wait_for_exit(&mut terminal, Duration::from_secs(15));
    assert_eq!(
        dir.read("signals").trim(),
        "INT",
        "the command must see one SIGINT"
    );
    assert_eq!(status, Some(12), "the command's exit status passes through");
    assert_eq!(server.dbsize(), 0, "the lock was not released");
}

/// Waits for `child` to exit, killing it (and failing) after `limit`.
#[track_caller]
fn wait_for_exit(child: &mut std::process::Child, limit: Duration) -> Option<i32> {
    let start = std::time::Instant::now();
    loop {
        if let Ok(Some(done)) = child.try_wait() {
            return done.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("script(1) did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
