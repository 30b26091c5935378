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
