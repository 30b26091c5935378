//! The Lua scripts, all in one place: each is a `.lua` file beside this one, pulled in with
//! `include_str!` after the shared `prelude.lua`, and run by SHA (`connection::Session::eval`). A server that lacks one (a
//! fresh, restarted or flushed Redis) gets every script loaded at once, so that a holder's
//! first renewal never needs a round trip of its own to load its script on a short lease.

use std::sync::LazyLock;

use redis::Script;

/// A script's source with `scripts/prelude.lua` (`call`, which names a command the ACL
/// refuses, and `read`) before it.
macro_rules! with_prelude {
    ($file:literal) => {
        concat!(include_str!("scripts/prelude.lua"), include_str!($file))
    };
}

const ACQUIRE_LUA: &str = with_prelude!("scripts/acquire.lua");
const RENEW_LUA: &str = with_prelude!("scripts/renew.lua");
const RELEASE_LUA: &str = with_prelude!("scripts/release.lua");
const LEAVE_QUEUE_LUA: &str = with_prelude!("scripts/leave_queue.lua");
const FORCE_RELEASE_LUA: &str = with_prelude!("scripts/force_release.lua");
const PEEK_LUA: &str = with_prelude!("scripts/peek.lua");
const RAISE_FENCE_LUA: &str = with_prelude!("scripts/raise_fence.lua");

pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
pub(super) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_LUA));
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
pub(super) static LEAVE_QUEUE: LazyLock<Script> = LazyLock::new(|| Script::new(LEAVE_QUEUE_LUA));
pub(super) static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(FORCE_RELEASE_LUA));
pub(super) static PEEK: LazyLock<Script> = LazyLock::new(|| Script::new(PEEK_LUA));
pub(super) static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(RAISE_FENCE_LUA));

/// Every script, loaded together the first time a server says it lacks one.
pub(super) const ALL: [&str; 7] = [
    ACQUIRE_LUA,
    RENEW_LUA,
    RELEASE_LUA,
    LEAVE_QUEUE_LUA,
    FORCE_RELEASE_LUA,
    PEEK_LUA,
    RAISE_FENCE_LUA,
];

/// The source of `script`, one of the above: for a server that will not load scripts.
pub(super) fn source_of(script: &Script) -> &'static str {
    ALL.into_iter()
        .find(|source| Script::new(source).get_hash() == script.get_hash())
        .unwrap_or_default()
}
