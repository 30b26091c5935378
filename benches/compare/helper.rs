//! Helper mode: this executable started as `compare __compare_helper MODE ...`. It owns the
//! tiny commands run under every tool's lock (stamp, hold, increment) and the guard that
//! stops a server when the harness goes. It measures nothing itself; the stamps and the
//! counter it writes are read by `measure/`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// First argument that turns this executable into the tiny command run under the locks.
pub const HELPER: &str = "__compare_helper";

/// What the helper command is, as printed in the report and the JSON.
pub const STAMP_NOTE: &str = "commands under the lock are this bench executable in helper mode \
     (writes a CLOCK_REALTIME ns stamp or increments a counter file, then exits); \
     no sh -c, no date fork; the same command for every tool";

pub fn run(args: &[String]) -> i32 {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let millis = |i: usize| Duration::from_millis(arg(i).parse().unwrap_or(0));
    let result = match arg(0) {
        // The waiter's command: stamp at start, exit.
        "stamp" => write_stamp(Path::new(arg(1))),
        // The holder's command: say it runs, hold, stamp just before exiting.
        "hold" => File::create(arg(1)).and_then(|_| {
            thread::sleep(millis(3));
            write_stamp(Path::new(arg(2)))
        }),
        // A holder that holds until told to stop (the file arg(2) appears), at most arg(3) ms.
        "hold-until" => File::create(arg(1)).map(|_| {
            let end = Instant::now() + millis(3);
            while !Path::new(arg(2)).exists() && Instant::now() < end {
                thread::sleep(Duration::from_millis(2));
            }
        }),
        "incr" => increment(Path::new(arg(1))),
        // A many-waiters contender: stamp, hold arg(3) ms, stamp, append `IDX START END PID`.
        "crit" => {
            let start = realtime_ns();
            thread::sleep(millis(3));
            append_interval(Path::new(arg(1)), arg(2), start)
        }
        // A many-waiters holder: says it runs (file arg(3)), holds until told to stop (file
        // arg(4) appears) or arg(5) ms pass, then appends its interval like `crit`.
        "crit-until" => File::create(arg(3)).and_then(|_| {
            let start = realtime_ns();
            let end = Instant::now() + millis(5);
            while !Path::new(arg(4)).exists() && Instant::now() < end {
                thread::sleep(Duration::from_millis(1));
            }
            append_interval(Path::new(arg(1)), arg(2), start)
        }),
        "guard" => return guard(&args[1..]),
        other => Err(io::Error::other(format!("unknown helper mode {other:?}"))),
    };
    match result {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("compare helper {}: {err}", arg(0));
            1
        }
    }
}

pub fn realtime_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos())
}

fn write_stamp(path: &Path) -> io::Result<()> {
    let now = realtime_ns();
    fs::write(path, now.to_string())
}

/// One line, `IDX START END PID` (CLOCK_REALTIME ns), in one write to a file opened with
/// O_APPEND, so that lines from many processes never interleave. END is taken last, just
/// before the exit that lets the tool release the lock.
fn append_interval(path: &Path, idx: &str, start: u128) -> io::Result<()> {
    let line = format!("{idx} {start} {} {}\n", realtime_ns(), std::process::id());
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}

/// The read-modify-write that only mutual exclusion keeps correct. An empty or torn file
/// (another writer in the middle of its write) is an error, counted as a failed cycle.
fn increment(path: &Path) -> io::Result<()> {
    let text = fs::read_to_string(path)?;
    let count: u64 = text
        .trim()
        .parse()
        .map_err(|_| io::Error::other(format!("counter file holds {text:?}")))?;
    fs::write(path, (count + 1).to_string())
}

/// `guard DIR PROGRAM ARGS...`: runs a server and kills it as soon as its stdin (a pipe from
/// the harness) closes, which happens when the harness drops the server or dies in any way,
/// SIGKILL included. If the harness died, DIR (the harness's temporary directory) goes too.
fn guard(args: &[String]) -> i32 {
    let Some((dir, command)) = args.split_first() else {
        return 2;
    };
    let Some((program, args)) = command.split_first() else {
        return 2;
    };
    let harness = std::os::unix::process::parent_id();
    let mut server = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .spawn()
    {
        Ok(server) => server,
        Err(err) => {
            eprintln!("compare guard: cannot start {program}: {err}");
            return 127;
        }
    };
    let mut sink = [0u8; 64];
    let mut stdin = io::stdin().lock();
    while let Ok(n) = stdin.read(&mut sink) {
        if n == 0 {
            break;
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    if std::os::unix::process::parent_id() != harness {
        let _ = fs::remove_dir_all(dir);
    }
    0
}
