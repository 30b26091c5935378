//! Where the command is looked for: the PATH candidates its start tries in turn, and the
//! `--dry-run` check that one of them would do. Starting it is `launch`'s.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;

use super::env::c_strings;

/// Whether `program` would be found and may be executed, as the start of the command
/// looks for it (`candidates`, in PATH order): for `--dry-run`, which starts nothing. The
/// first candidate that is a file with an execute bit is the one; a file found without one
/// is EACCES, as execvp reports it; none, ENOENT.
pub fn find(program: &OsStr) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut refused = false;
    for candidate in candidates(program)? {
        let path = std::path::Path::new(OsStr::from_bytes(candidate.as_bytes()));
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => return Ok(()),
            Ok(_) => refused = true,
            Err(_) => {}
        }
    }
    Err(io::Error::from_raw_os_error(if refused {
        libc::EACCES
    } else {
        libc::ENOENT
    }))
}

/// Where to look for `program`: itself if it holds a `/`, else each PATH directory.
pub(super) fn candidates(program: &OsStr) -> io::Result<Vec<CString>> {
    let bytes = program.as_bytes();
    if bytes.contains(&b'/') {
        return c_strings([bytes.to_vec()]);
    }
    if bytes.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    c_strings(path.as_bytes().split(|&b| b == b':').map(|dir| {
        // An empty entry means the current directory, as in execvp.
        let mut full = if dir.is_empty() {
            b".".to_vec()
        } else {
            dir.to_vec()
        };
        full.push(b'/');
        full.extend_from_slice(bytes);
        full
    }))
}
