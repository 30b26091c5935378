//! The strings the command is started with, made ready by the parent: the inherited
//! environment less the names a run sets, and NUL-terminated strings with their
//! NULL-terminated arrays of pointers. Nothing here runs in the child.

use std::ffi::CString;
use std::io;
use std::ptr;

extern "C" {
    /// The process's environment, as the C library keeps it (mutable there, as std declares
    /// it too; read here only, once, before the lock is taken).
    static mut environ: *const *const libc::c_char;
}

/// The inherited environment's `NAME=value` entries, less those named in `sets`.
pub(super) fn inherited_environment(sets: &[&str]) -> Vec<*const libc::c_char> {
    let mut entries = Vec::new();
    // SAFETY: `environ` is a NULL-terminated array of NUL-terminated strings, and nothing
    // in this process changes it (no setenv, no std::env::set_var).
    unsafe {
        let mut entry = std::ptr::addr_of!(environ).read();
        while !entry.is_null() && !(*entry).is_null() {
            let text = std::ffi::CStr::from_ptr(*entry).to_bytes();
            // An entry without `=` is no variable; std's `vars_os` skips those too.
            if let Some(at) = text.iter().position(|&b| b == b'=') {
                if !sets.iter().any(|set| set.as_bytes() == &text[..at]) {
                    entries.push(*entry);
                }
            }
            entry = entry.add(1);
        }
    }
    entries
}

pub(super) fn c_strings(items: impl IntoIterator<Item = Vec<u8>>) -> io::Result<Vec<CString>> {
    items
        .into_iter()
        .map(|item| {
            CString::new(item).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "an argument holds a NUL byte")
            })
        })
        .collect()
}

/// A NULL-terminated array of pointers into `strings`, which must outlive it.
pub(super) fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(ptr::null()))
        .collect()
}
