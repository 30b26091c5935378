//! Keeping this process's secrets to itself. It holds the Redis password for the whole run,
//! so:
//! - it is not dumpable: no core file, and no other process of the same user may read its
//!   memory through ptrace or `/proc/PID/mem` (the command, once it has called `exec`, is
//!   dumpable again);
//! - a password typed on its command line is overwritten in place, so that
//!   `/proc/PID/cmdline` (what `ps` shows every local user) no longer has it. The guardian,
//!   forked later, inherits the overwritten copy. The kernel shows the command line from
//!   the process's own memory, so the window is from `exec` to this call, a few hundred
//!   microseconds into the run.

use std::io;

/// Makes this process non-dumpable and masks `typed` in its command line: each pair is a
/// text as typed and what to show instead (of the same length).
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
    // reads it only through C-string pointers, which stay valid: lengths and NULs are
    // kept). No other thread writes there.
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
    for argument in area.split_mut(|&byte| byte == 0) {
        for (shown, masked) in typed {
            // `-r URL`, `--redis=URL` and `-rURL` all end with the URL as typed.
            if masked.len() == shown.len() && argument.ends_with(shown.as_bytes()) {
                let at = argument.len() - shown.len();
                argument[at..].copy_from_slice(masked.as_bytes());
            }
        }
    }
    Ok(())
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
