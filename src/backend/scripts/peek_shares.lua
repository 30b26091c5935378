-- Read a shared group's shares (--shared) as `status` and `list` show them, in one step.
-- KEYS[1] shares: the shares (hash: token -> that share's lock value; see acquire_shared.lua)
-- KEYS[2] expiries: when each share's lease ends (sorted set: token -> server ms)
-- Returns {ok, value_1, left_ms_1, length_1, ...}: each share whose lease has not ended,
-- the time left of it and its value's length, the soonest end first (at most 1000); a value
-- longer than 8192 bytes (MAX_VALUE_LEN in layout: never one of ours) as ''. ok is 0 (and
-- no share follows) when a key is of a type redlock-run never writes there. A user whose
-- ACL lacks HSTRLEN has each value read whole here (the reply is cut all the same).
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
  local length = optional('HSTRLEN', KEYS[1], ends[i])
  local value = false
  if left >= 0 and (not length or length <= 8192) then
    value = call('HGET', KEYS[1], ends[i])
    if value then
      length = #value
      if length > 8192 then
        value = ''
      end
    end
  elseif left >= 0 and length > 8192 then
    value = ''
  end
  if value then
    reply[#reply + 1] = value
    reply[#reply + 1] = math.floor(left)
    reply[#reply + 1] = length
  end
end
return reply
