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
    let script = script_program();
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
        bin = BIN,
        url = server.url(),
        command = command.display()
    );
    let mut terminal = with_default_signals(&mut Command::new(script))
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

/// `script(1)`, which gives a command a pseudo-terminal.
fn script_program() -> std::path::PathBuf {
    require(
        "script",
        "the terminal tests type at a pseudo-terminal through it",
        "`apt-get install -y bsdutils` on Debian/Ubuntu",
    )
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
            let note = ignored_signals_note(child.id() as i32);
            let _ = child.kill();
            let _ = child.wait();
            panic!("script(1) did not exit within {limit:?}{note}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A shell session on a pseudo-terminal, through `script(1)`: what is written to it is typed.
struct Terminal {
    script: std::process::Child,
    keyboard: std::process::ChildStdin,
    screen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Terminal {
    fn run(command: &str) -> Terminal {
        let script = script_program();
        let mut script = with_default_signals(&mut Command::new(script))
            .args(["-qefc", command, "/dev/null"])
            .env_remove("REDLOCK_REDIS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting script(1)");
        let keyboard = script.stdin.take().expect("script's stdin");
        let mut output = script.stdout.take().expect("script's stdout");
        let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let filling = std::sync::Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut output, &mut buf) {
                if n == 0 {
                    break;
                }
                filling.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            script,
            keyboard,
            screen,
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    #[track_caller]
    fn wait_for_text(&self, text: &str) {
        wait_until(Duration::from_secs(15), text, || {
            self.screen().contains(text)
        });
    }

    fn type_keys(&mut self, keys: &[u8]) {
        self.keyboard.write_all(keys).expect("typing");
    }

    #[track_caller]
    fn finish(mut self) -> (Option<i32>, String) {
        let status = wait_for_exit(&mut self.script, Duration::from_secs(20));
        // Let the reader drain what is left.
        std::thread::sleep(Duration::from_millis(50));
        (status, self.screen())
    }
}

/// Ctrl-C in a shell loop stops the loop, as it would for the command itself: the command
/// dies of SIGINT, and so does redlock-run, after releasing, so that bash sees a child that
/// died of SIGINT and ends the script.
#[test]
fn ctrl_c_stops_a_calling_shell_loop() {
    let server = RedisServer::start();
    let dir = TempDir::new("ttyloop");
    let command = format!(
        "bash -c 'for i in 1 2 3; do echo start $i; {bin} -r {url} -k loop -- sleep 30; \
         echo after $i; done'",
        bin = BIN,
        url = server.url(),
    );
    let mut terminal = Terminal::run(&command);
    terminal.wait_for_text("start 1");
    wait_until(Duration::from_secs(15), "the lock to be taken", || {
        server.exists("redlock:loop")
    });
    terminal.type_keys(b"\x03");
    let (_, screen) = terminal.finish();
    assert!(!screen.contains("start 2"), "the loop went on:\n{screen}");
    assert!(!screen.contains("after 1"), "the loop went on:\n{screen}");
    assert_eq!(server.dbsize(), 0, "the lock was not released");
    drop(dir);
}

/// A command without the terminal (stdin redirected) that tries to read it is stopped by
/// SIGTTIN: redlock-run says so, and a Ctrl-C still ends it (forwarded, with SIGCONT).
#[test]
fn a_command_stopped_for_terminal_input_is_reported_and_can_be_interrupted() {
    let server = RedisServer::start();
    let dir = TempDir::new("ttin");
    let command = format!(
        "{bin} -r {url} -k ttin -- sh -c 'read line < /dev/tty' < /dev/null",
        bin = BIN,
        url = server.url(),
    );
    let mut terminal = Terminal::run(&command);
    terminal.wait_for_text("SIGTTIN");
    terminal.type_keys(b"\x03");
    let (status, screen) = terminal.finish();
    assert!(screen.contains("stopped by SIGTTIN"), "{screen}");
    assert_eq!(status, Some(130), "{screen}");
    assert_eq!(server.dbsize(), 0, "the lock was not released");
    drop(dir);
}

/// A busy lock on a terminal: one status line, redrawn in place every second, names the
/// lock, the time waited of `--wait`, the holder and an estimate of the time left ("unknown"
/// without history; from the median hold of the released runs once there is one). When the
/// lock is taken, the line is cleared and today's one-line message takes its place.
#[test]
fn a_busy_lock_shows_a_status_line_redrawn_in_place_on_a_terminal() {
    let server = RedisServer::start();
    let dir = TempDir::new("ttyprogress");
    let holder = hold(server.cmd().args(["-k", "tp"]), &dir, "h");
    let command = format!(
        "stty rows 40 cols 250; env TERM=xterm REDLOCK_TEST_PROGRESS_EVERY_MS=1000 {bin} -r {url} \
         -k tp --wait 10m -- true",
        bin = BIN,
        url = server.url(),
    );
    let terminal = Terminal::run(&command);
    let status = format!(
        "waiting for redlock:tp: held by {} pid {}",
        crate::progress::hostname(),
        holder.pid()
    );
    terminal.wait_for_text("redlock-run: waiting for redlock:tp: waited ");
    terminal.wait_for_text(" of 10m, time left: unknown; held by ");
    terminal.wait_for_text("waited 2s of 10m");
    terminal.wait_for_text("waited 3s of 10m");
    let screen = terminal.screen();
    let holder_shown = format!(
        "; held by {} pid {}",
        crate::progress::hostname(),
        holder.pid()
    );
    assert!(screen.contains(&holder_shown), "{screen:?}");
    assert!(screen.contains("\x1b["), "not redrawn in place: {screen:?}");

    // Two released runs of an hour: the next read of the history (every second here, with
    // the holder unchanged; 30 s otherwise) gives an estimate.
    let mut admin = server.connection();
    for _ in 0..2 {
        let _: String = redis::cmd("XADD")
            .arg("{redlock:tp}:history")
            .arg("*")
            .arg("event")
            .arg("released")
            .arg("held_ms")
            .arg(3_600_000)
            .query(&mut admin)
            .unwrap();
    }
    terminal.wait_for_text("time left: about 59m");

    holder.let_go();
    let (code, screen) = terminal.finish();
    assert_eq!(code, Some(0), "{screen:?}");
    // After the last status line: the line cleared, then today's message on a line of its own.
    let last = screen.rfind("time left").expect("a status line");
    let after = &screen[last..];
    let said = after
        .find(&format!("redlock-run: {status}"))
        .unwrap_or_else(|| panic!("no message after the last status line: {after:?}"));
    assert!(
        after[..said].contains("\x1b["),
        "the status line was not cleared: {after:?}"
    );
    assert!(!after[said..].contains("time left"), "{after:?}");
}

/// `TERM=dumb` (or no TERM) on a terminal: plain lines now and then instead of redraws,
/// and no escape sequence at all.
#[test]
fn a_dumb_terminal_gets_plain_lines_while_waiting() {
    let server = RedisServer::start();
    let dir = TempDir::new("ttydumb");
    let holder = hold(server.cmd().args(["-k", "td"]), &dir, "h");
    let command = format!(
        "env TERM=dumb REDLOCK_TEST_PROGRESS_EVERY_MS=300 {bin} -r {url} -k td --wait 10m -- true",
        bin = BIN,
        url = server.url(),
    );
    let terminal = Terminal::run(&command);
    let needle = "still waiting for redlock:td: held by";
    wait_until(Duration::from_secs(20), "three plain lines", || {
        terminal.screen().matches(needle).count() >= 3
    });
    holder.let_go();
    let (code, screen) = terminal.finish();
    assert_eq!(code, Some(0), "{screen:?}");
    assert!(!screen.contains('\x1b'), "{screen:?}");
    // The terminal turns each "\n" into "\r\n": no other carriage return.
    assert!(!screen.replace("\r\n", "\n").contains('\r'), "{screen:?}");
}
