//! `raise_fence.lua`'s contract: [`RaiseFence`], its key and argument, and
//! [`FenceAtLeast`], its answer read.

use redis::{FromRedisValue, ParsingError, Value};

use super::{number, Call, LuaScript, RAISE_FENCE};
use crate::backend::key::Key;

/// `raise_fence.lua`: raise the fence counter to at least `fence`.
pub(in crate::backend) struct RaiseFence {
    pub fence_key: Key,
    pub fence: u64,
}

impl Call for RaiseFence {
    type Reply = FenceAtLeast;
    const SCRIPT: &'static LuaScript = &RAISE_FENCE;
    const KEYS: &'static [&'static str] = &["1 fence"];
    const ARGV: &'static [&'static str] = &["fence"];

    fn keys(&self) -> Vec<Key> {
        vec![self.fence_key.clone()]
    }

    fn argv(&self) -> Vec<Vec<u8>> {
        vec![number(self.fence)]
    }
}

/// What `raise_fence.lua` answered: 1 raised, 0 already there; either way the counter is
/// at least the fence now, which is all the quorum needs.
#[derive(Debug)]
pub(in crate::backend) struct FenceAtLeast;

impl FromRedisValue for FenceAtLeast {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        redis::from_redis_value::<i64>(value)?;
        Ok(FenceAtLeast)
    }
}
