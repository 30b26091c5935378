//! Randomness for lock tokens and retry pauses, read from the kernel with getrandom(2).
//!
//! `uuid`'s own v4 generator goes through the `getrandom` crate, which in a statically
//! linked binary cannot see glibc's `getrandom` and falls back to polling `/dev/random` and
//! reading `/dev/urandom`: four system calls and a file descriptor on every run's path to
//! the lock. libc's `getrandom` is one system call in every build.

use std::fs::File;
use std::io::{self, Read};

/// 16 bytes from the kernel's CSPRNG. getrandom(2) blocks only until the pool is first
/// seeded at boot; `/dev/urandom` is the fallback for a kernel or sandbox without it.
pub fn bytes16() -> [u8; 16] {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: `rest` is valid for writes of `rest.len()` bytes for the whole call.
        let got = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if got > 0 {
            filled += got as usize;
            continue;
        }
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return from_urandom().unwrap_or_else(|err| {
            // Without randomness two holders could share a token: no lock is safe then.
            panic!("no randomness from getrandom(2) or /dev/urandom: {err}")
        });
    }
    buf
}

fn from_urandom() -> io::Result<[u8; 16]> {
    let mut buf = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf)
}

/// A version-4 (random) UUID, as lock tokens have always been.
pub fn uuid_v4() -> uuid::Uuid {
    uuid::Builder::from_random_bytes(bytes16()).into_uuid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_version_4_uuids() {
        let (a, b) = (uuid_v4(), uuid_v4());
        assert_ne!(a, b);
        assert_eq!(a.get_version_num(), 4);
        assert_eq!(a.get_variant(), uuid::Variant::RFC4122);
    }
}
