//! Writes the Lua scripts' Rust constants, each with its SHA-1 computed here, once. Redis runs
//! a cached script by the SHA-1 of its source (`EVALSHA`); computing those digests when the
//! program starts cost every run ~0.1 ms of CPU on its path to the lock and again to the
//! release (the acquire and release scripts are 35 and 23 kB with the prelude).
//! `backend/scripts/mod.rs` includes what is written here: for each script a `LuaScript` named
//! after its file (`acquire.lua` is `ACQUIRE`), its source the prelude then the file, and
//! `ALL`, every script in this order. A unit test holds each digest to the redis crate's own
//! hashing of the same source.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

/// Every script but the prelude, which each of them starts with.
const SCRIPTS: [&str; 13] = [
    "acquire",
    "renew",
    "release",
    "leave_queue",
    "force_release",
    "peek",
    "raise_fence",
    "counters",
    "dry_run",
    "acquire_shared",
    "renew_shared",
    "release_shared",
    "peek_shares",
];

fn main() {
    let manifest = env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest).join("src/backend/scripts");
    let path_of = |name: &str| {
        let path = dir.join(format!("{name}.lua"));
        println!("cargo:rerun-if-changed={}", path.display());
        path
    };
    let read =
        |path: &Path| fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let prelude_path = path_of("prelude");
    let prelude = read(&prelude_path);
    let mut out = String::new();
    for name in SCRIPTS {
        let path = path_of(name);
        let mut source = prelude.clone();
        source.extend(read(&path));
        let digest = sha1_smol::Sha1::from(&source).digest();
        // Debug-formatted: a quoted, escaped string literal for include_str!.
        let (prelude_file, file) = (
            prelude_path.display().to_string(),
            path.display().to_string(),
        );
        writeln!(
            out,
            "/// `{name}.lua` after the prelude, and the SHA-1 of the two.\n\
             pub(super) const {const_name}: LuaScript = LuaScript {{\n    \
             source: concat!(include_str!({prelude_file:?}), include_str!({file:?})),\n    \
             sha1: \"{digest}\",\n}};",
            const_name = name.to_uppercase(),
        )
        .expect("writing to a String");
    }
    let all: Vec<String> = SCRIPTS
        .iter()
        .map(|name| format!("&{}", name.to_uppercase()))
        .collect();
    writeln!(
        out,
        "/// Every script, loaded together the first time a server says it lacks one.\n\
         pub(super) const ALL: [&LuaScript; {}] = [{}];",
        SCRIPTS.len(),
        all.join(", ")
    )
    .expect("writing to a String");
    let target = Path::new(&env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("scripts.rs");
    fs::write(&target, out).unwrap_or_else(|err| panic!("{}: {err}", target.display()));
}
