//! Hashes the Lua scripts at build time. Redis runs a cached script by the SHA-1 of its
//! source (`EVALSHA`); computing those digests when the program starts cost every run
//! ~0.1 ms of CPU on its path to the lock and again to the release (the acquire and release
//! scripts are 35 and 23 kB with the prelude). `backend/scripts.rs` includes the digests
//! written here, and a unit test holds them to the redis crate's own hashing of the same
//! sources.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

/// Every script but the prelude, which each of them starts with (`with_prelude!`).
const SCRIPTS: [&str; 9] = [
    "acquire",
    "renew",
    "release",
    "leave_queue",
    "force_release",
    "peek",
    "raise_fence",
    "counters",
    "dry_run",
];

fn main() {
    let manifest = env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest).join("src/backend/scripts");
    let read = |name: &str| {
        let path = dir.join(format!("{name}.lua"));
        println!("cargo:rerun-if-changed={}", path.display());
        fs::read(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    };
    let prelude = read("prelude");
    let mut out = String::new();
    for name in SCRIPTS {
        let mut source = prelude.clone();
        source.extend(read(name));
        let digest = sha1_smol::Sha1::from(&source).digest();
        writeln!(
            out,
            "const {}_SHA1: &str = \"{digest}\";",
            name.to_uppercase()
        )
        .expect("writing to a String");
    }
    let target =
        Path::new(&env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("script_sha1.rs");
    fs::write(&target, out).unwrap_or_else(|err| panic!("{}: {err}", target.display()));
}
