//! Keeping this process's secrets to itself. It holds the Redis password for the whole run,
//! so:
//! - it is not dumpable: no core file, and no other process of the same user may read its
//!   memory through ptrace or `/proc/PID/mem` (the command, once it has called `exec`, is
//!   dumpable again);
//! - a password typed on its command line is overwritten in place, so that
//!   `/proc/PID/cmdline` (what `ps` shows every local user) no longer has it, nor its
//!   length. The guardian, forked later, inherits the overwritten copy. The kernel shows the
//!   command line from the process's own memory, so the window is from `exec` to this call,
//!   a few hundred microseconds into the run.
//!
//! Hiding the length takes the kernel's `setproctitle` convention: when the last byte of the
//! argument area is not a NUL, `/proc/PID/cmdline` shows the area only up to its first NUL.
//! So the arguments are rewritten as one line, joined by spaces with each secret as `***`,
//! and the rest of the area (whose size `ps` would otherwise give away) is never shown.
//! Nothing reads this process's arguments after this point: clap parsed them already, and
//! the command is started from our own copy.

use std::io;

/// Makes this process non-dumpable and hides `typed` in its command line: each pair is a
/// text as typed and what to show instead (any length).
pub fn protect(typed: &[(String, String)]) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_DUMPABLE) takes integers and touches no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if typed.is_empty() {
        return Ok(());
    }
    let (start, end) = arguments_area()?;
    // SAFETY: the kernel reports [start, end) as where this process's argument strings
    // live: memory at the top of the main thread's stack, mapped and writable for the
    // life of the process, which nothing else in Rust refers to as a Rust object (std
    // keeps only C-string pointers into it, which nothing reads after the command line is
    // parsed; each still finds a NUL, at the latest in the environment strings that
    // follow the area). No other thread writes there.
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
    let shown = shown_line(area, typed);
    area.copy_from_slice(&shown);
    Ok(())
}

/// What the argument area becomes: the arguments, each with any text of `typed` that it
/// ends with replaced by its shown form, joined by spaces; then NULs, and a last byte that
/// is not NUL (the sign to the kernel to show only up to the first NUL). Cut short if the
/// shown forms are longer than the secrets (a password of one or two characters).
fn shown_line(area: &[u8], typed: &[(String, String)]) -> Vec<u8> {
    let arguments = area.strip_suffix(&[0]).unwrap_or(area);
    let mut line: Vec<u8> = Vec::with_capacity(area.len());
    for (i, argument) in arguments.split(|&byte| byte == 0).enumerate() {
        if i > 0 {
            line.push(b' ');
        }
        // `-r URL`, `--redis=URL` and `-rURL` all end with the URL as typed.
        let secret = typed
            .iter()
            .find(|(as_typed, _)| argument.ends_with(as_typed.as_bytes()));
        match secret {
            Some((as_typed, shown)) => {
                line.extend_from_slice(&argument[..argument.len() - as_typed.len()]);
                line.extend_from_slice(shown.as_bytes());
            }
            None => line.extend_from_slice(argument),
        }
    }
    // Room for the NUL that ends the line and the last byte that is not one.
    line.truncate(area.len().saturating_sub(2));
    line.resize(area.len(), 0);
    if let Some(last) = line.last_mut() {
        *last = b' ';
    }
    line
}

/// Where this process's argument strings are: `arg_start` and `arg_end`, fields 48 and 49
/// of `/proc/self/stat` (counted from the first; the second, the command's name in
/// parentheses, may hold spaces and parentheses itself, so fields are counted after its
/// last `)`).
fn arguments_area() -> io::Result<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let field = |number: usize| -> Option<usize> {
        after_name.split_whitespace().nth(number - 3)?.parse().ok()
    };
    match (field(48), field(49)) {
        (Some(start), Some(end)) if start < end => Ok((start, end)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no argument area in /proc/self/stat",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::shown_line;

    fn pairs(typed: &str, shown: &str) -> Vec<(String, String)> {
        vec![(typed.to_string(), shown.to_string())]
    }

    /// What the kernel shows of an area in `setproctitle` mode: up to the first NUL.
    fn as_shown(area: &[u8]) -> String {
        assert_ne!(
            area.last(),
            Some(&0),
            "the kernel would show the whole area"
        );
        let end = area.iter().position(|&b| b == 0).unwrap_or(area.len());
        String::from_utf8_lossy(&area[..end]).into_owned()
    }

    #[test]
    fn the_length_of_a_password_is_not_shown() {
        let shown = |password: &str| {
            let url = format!("redis://:{password}@h");
            let area = format!("redlock-run\0-r\0{url}\0-k\0x\0--\0true\0");
            let line = shown_line(area.as_bytes(), &pairs(&url, "redis://:***@h"));
            assert_eq!(line.len(), area.len(), "the area keeps its size");
            as_shown(&line)
        };
        let short = shown("abcd");
        assert_eq!(short, "redlock-run -r redis://:***@h -k x -- true");
        assert_eq!(shown("a-much-longer-password-0123456789"), short);
    }

    #[test]
    fn every_form_of_the_flag_is_hidden() {
        let url = "redis://:pw12345@h";
        let area = format!("redlock-run\0--redis={url}\0-r{url}\0-k\0x\0");
        let line = shown_line(area.as_bytes(), &pairs(url, "redis://:***@h"));
        assert_eq!(
            as_shown(&line),
            "redlock-run --redis=redis://:***@h -rredis://:***@h -k x"
        );
    }

    #[test]
    fn a_shown_form_longer_than_the_secret_is_cut_short_not_overflowed() {
        let url = "redis://:p@h";
        let area = format!("r\0{url}\0");
        let line = shown_line(area.as_bytes(), &pairs(url, "redis://:***@h"));
        assert_eq!(line.len(), area.len());
        assert!(!as_shown(&line).contains(":p@"));
        // Degenerate areas are no panic.
        for area in [&b""[..], b"\0", b"x", b"xy\0"] {
            assert_eq!(shown_line(area, &pairs(url, "***")).len(), area.len());
        }
    }
}
