//! Where the locks live, checked: the Redis URLs into a `Deployment`, the password (from
//! REDLOCK_PASSWORD or the first line of --password-file), --redis-timeout, and which of our
//! variables hold a password and so are kept from the command.

use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::durations::bounded;
use crate::backend::{holds_secret, Deployment, Password, Sources};
use crate::cli::Connection;
use crate::lease;
use crate::report;

pub(super) fn check_connection(connection: &Connection) -> Result<(Deployment, Duration)> {
    let redis_timeout = bounded(
        "--redis-timeout",
        &connection.redis_timeout,
        lease::MIN_REDIS_TIMEOUT,
        lease::MAX_REDIS_TIMEOUT,
    )?;
    let password = match &connection.password_file {
        Some(file) => Some(read_password(file)?),
        None => std::env::var("REDLOCK_PASSWORD")
            .ok()
            .filter(|password| !password.is_empty())
            .map(Password),
    };
    let sources = Sources {
        password,
        typed: connection.typed,
    };
    Ok((
        Deployment::parse(&connection.redis, sources)?,
        redis_timeout,
    ))
}

/// Our variables that hold a password: REDLOCK_PASSWORD, and REDLOCK_REDIS when one of
/// its URLs has one (or a user part that may be one). Left to the command, they would hand
/// it, and whatever it runs, the password to the lock server.
pub(super) fn secret_variables() -> Vec<&'static str> {
    let mut names = vec!["REDLOCK_PASSWORD", "REDLOCK_PING"];
    if std::env::var_os("REDLOCK_REDIS").is_some_and(|urls| holds_secret(&urls.to_string_lossy())) {
        names.push("REDLOCK_REDIS");
    }
    names
}

/// The most read of a `--password-file`: far more than any password, little enough that
/// `/dev/zero` or a log file given by mistake costs nothing.
const PASSWORD_FILE_LIMIT: u64 = 64 * 1024;
/// How long a `--password-file` that is not a regular file (a FIFO, `<(vault read ...)`)
/// may take to give its first line.
const PASSWORD_PIPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The first line of `file`, without its line ending: at most [`PASSWORD_FILE_LIMIT`] bytes
/// read, within [`PASSWORD_PIPE_TIMEOUT`] when it is not a regular file (a FIFO nobody
/// writes to would block for ever), and a warning when every user may read it.
fn read_password(file: &std::path::Path) -> Result<Password> {
    read_secret_line(file, "--password-file", "password").map(Password)
}

/// The first line of the file given to `option` (`--password-file`, `--auth-file`), which
/// holds `what`, read as [`read_password`] reads it.
pub(super) fn read_secret_line(file: &std::path::Path, option: &str, what: &str) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;

    let shown = file.display();
    let metadata =
        std::fs::metadata(file).with_context(|| format!("cannot read the {option} {shown}"))?;
    if metadata.is_dir() {
        bail!("cannot read the {option} {shown}: it is a directory");
    }
    let mode = metadata.permissions().mode();
    if metadata.is_file() && mode & 0o004 != 0 {
        report::warn(format_args!(
            "the {option} {shown} can be read by every user of this machine (mode \
             {:04o}); make it readable by its owner only: chmod 600 {shown}",
            mode & 0o7777
        ));
    }
    let bytes = if metadata.is_file() {
        first_line(file)
    } else {
        let owned = file.to_path_buf();
        let (sent, received) = std::sync::mpsc::channel();
        // A reader that may block for ever (in `open` or `read`) on a thread of its own: on
        // timeout the run ends with an error, and the thread with the process.
        // Before the run's signals are blocked, and it may outlive the run's start: it
        // takes no signal (see `signals::spawn_deaf`).
        crate::signals::spawn_deaf(|| {
            std::thread::Builder::new()
                .name("password-file".into())
                .spawn(move || sent.send(first_line(&owned)))
        })
        .with_context(|| format!("cannot read the {option} {shown}"))?;
        received.recv_timeout(PASSWORD_PIPE_TIMEOUT).map_err(|_| {
            anyhow::anyhow!(
                "cannot read the {option} {shown}: nothing came from it within {} \
                 (a FIFO that nobody writes to?)",
                humantime::format_duration(PASSWORD_PIPE_TIMEOUT)
            )
        })?
    }
    .with_context(|| format!("cannot read the {option} {shown}"))?;
    let line = match bytes {
        FirstLine::Line(line) => line,
        FirstLine::TooLong => bail!(
            "the {option} {shown} has no line ending in its first {} KiB: its first \
             line is the {what}",
            PASSWORD_FILE_LIMIT / 1024
        ),
    };
    let line = String::from_utf8(line).map_err(|_| {
        anyhow::anyhow!("the {option} {shown} does not hold UTF-8 text in its first line")
    })?;
    if line.is_empty() {
        bail!("the {option} {shown} is empty: its first line is the {what}");
    }
    if line.contains(|c: char| c.is_control()) {
        bail!(
            "the {option} {shown} has a control character (a NUL, say) in its first \
             line: its first line is the {what}, as text"
        );
    }
    Ok(line)
}

/// A file's first line, or the sign that it had none within the limit.
enum FirstLine {
    Line(Vec<u8>),
    TooLong,
}

/// Reads `file` up to its first line ending (`\n` or `\r\n`) or its end, at most
/// [`PASSWORD_FILE_LIMIT`] bytes.
fn first_line(file: &std::path::Path) -> std::io::Result<FirstLine> {
    use std::io::{BufRead, Read};

    let mut reader = std::io::BufReader::new(std::fs::File::open(file)?.take(PASSWORD_FILE_LIMIT));
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    match line.strip_suffix(b"\n") {
        Some(ended) => line.truncate(ended.strip_suffix(b"\r").unwrap_or(ended).len()),
        None if line.len() as u64 >= PASSWORD_FILE_LIMIT => return Ok(FirstLine::TooLong),
        None => {}
    }
    Ok(FirstLine::Line(line))
}
