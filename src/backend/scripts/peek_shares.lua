-- Read a shared group's shares (--shared) as `status` and `list` show them, in one step.
-- KEYS[1] shares: the shares (hash: token -> that share's lock value; see acquire_shared.lua)
-- KEYS[2] expiries: when each share's lease ends (sorted set: token -> server ms)
-- Returns {ok, value_1, left_ms_1, value_2, left_ms_2, ...}: each share whose lease has not
-- ended, and the time left of it, the soonest end first (at most 1000); ok is 0 (and no
-- share follows) when a key is of a type redlock-run never writes there.
local shares_type = call('TYPE', KEYS[1]).ok
local ends_type = call('TYPE', KEYS[2]).ok
if (shares_type ~= 'hash' and shares_type ~= 'none')
    or (ends_type ~= 'zset' and ends_type ~= 'none') then
  return {0}
end
local now = now_ms()
local ends = call('ZRANGE', KEYS[2], 0, 999, 'WITHSCORES')
local reply = {1}
for i = 1, #ends, 2 do
  local left = tonumber(ends[i + 1]) - now
  local value = call('HGET', KEYS[1], ends[i])
  if left >= 0 and value then
    reply[#reply + 1] = value
    reply[#reply + 1] = math.floor(left)
  end
end
return reply
