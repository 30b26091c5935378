-- Raise the fence counter to at least a given value (Redlock: the fence a holder was given
-- must be recorded on a majority of the nodes, so that the next holder's majority, which
-- shares a node with it, counts past it).
-- KEYS[1]  the fence counter
-- ARGV[1]  the fence handed out
-- Returns the counter's value after the call.
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local wanted = tonumber(ARGV[1])
if current < wanted then
  redis.call('SET', KEYS[1], ARGV[1])
  return wanted
end
return current
