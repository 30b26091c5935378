-- Take one of the lock's slots, or report who has them.
-- KEYS[1..n]   the slots: KEYS[1] is the lock's own key, the only slot when n = 1
-- KEYS[n+1]    the limit in force while a semaphore (n > 1) has holders: {K}:limit
-- KEYS[n+2]    the fence counter
-- KEYS[n+3]    the fair queue (sorted set: token -> arrival, server ms)
-- KEYS[n+4]    the fair queue's heartbeats (sorted set: token -> expiry, server ms)
-- ARGV[1]  this holder's identity, the value's first bytes: {"token":"<uuid>"
-- ARGV[2]  the rest of the value after the fence: ,"host":…}
-- ARGV[3]  the lease length in milliseconds
-- ARGV[4]  n, the limit
-- ARGV[5]  fair-queue heartbeat timeout in milliseconds; 0 when not fair
-- ARGV[6]  this holder's token (its member in the fair queue)
-- Returns {1, slot, fence, 0} when this holder now has slot `slot` (fence: the counter's
--           decimal digits, a string: Lua's numbers are doubles, which would print a large
--           one as 1e+14 and lose digits past 2^53);
--         {0, pttl, holder, ahead} when it must wait (pttl: the soonest a slot can free up,
--           -1 if none will by itself; holder: one holder's value, '' if none; ahead: fair
--           waiters queued before this one);
--         {-1, other, '', 0} when the key is used with another limit (other: that limit, or
--           0 for a value redlock-run did not write).
local n = tonumber(ARGV[4])
local identity = ARGV[1]
local ttl = tonumber(ARGV[3])

-- A semaphore with holders records its limit; anyone passing another one is refused, even
-- when the slots it would look at are free.
local declared = read(KEYS[n + 1])
if type(declared) == 'string' and tonumber(declared) ~= n then
  return {-1, tonumber(declared) or 0, '', 0}
end
local free = {}
local soonest = -1
local holder = ''

local function held_for(key)
  local pttl = call('PTTL', key)
  if pttl >= 0 and (soonest < 0 or pttl < soonest) then
    soonest = pttl
  end
end

for i = 1, n do
  -- A hash or list under this name (another application's data) is simply someone
  -- else's, for as long as it exists.
  local current = read(KEYS[i])
  if current == false then
    table.insert(free, i)
  elseif type(current) == 'string' then
    if string.sub(current, 1, #identity) == identity then
      -- An earlier attempt of ours landed but its reply was lost: it is ours.
      call('PEXPIRE', KEYS[i], ARGV[3])
      local fence = string.match(current, '"fence":(%d+)')
      return {1, i, fence or '0', 0}
    end
    local other = string.match(current, '"limit":(%d+)}$')
    if other and tonumber(other) ~= n then
      return {-1, tonumber(other), '', 0}
    end
    if holder == '' then holder = current end
    held_for(KEYS[i])
  else
    held_for(KEYS[i])
  end
end

if tonumber(ARGV[5]) > 0 then
  -- Fair: join the queue (or stay in it), drop waiters whose heartbeat stopped, and go
  -- ahead only when fewer waiters are ahead of us than there are free slots.
  local queue, alive = KEYS[n + 3], KEYS[n + 4]
  local time = call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  for _, stale in ipairs(call('ZRANGEBYSCORE', alive, '-inf', now)) do
    call('ZREM', queue, stale)
    call('ZREM', alive, stale)
  end
  local token = ARGV[6]
  call('ZADD', queue, 'NX', now, token)
  call('ZADD', alive, now + tonumber(ARGV[5]), token)
  local ahead = call('ZRANK', queue, token)
  if ahead >= #free then
    return {0, soonest, holder, ahead}
  end
  call('ZREM', queue, token)
  call('ZREM', alive, token)
end

if #free == 0 then
  return {0, soonest, holder, 0}
end
local slot = free[1]
-- Before anything changes: what renewing and releasing will need must be allowed by the
-- user's ACL, so that a refusal ends the run now, before its command, and not at its first
-- renewal. On a free slot these change nothing.
call('GET', KEYS[slot])
call('PTTL', KEYS[slot])
call('PEXPIRE', KEYS[slot], ttl)
call('DEL', KEYS[slot])
if n > 1 then
  call('EXISTS', KEYS[slot])
end
call('INCR', KEYS[n + 2])
local fence = call('GET', KEYS[n + 2])
call('SET', KEYS[slot], identity .. ',"fence":' .. fence .. ARGV[2], 'PX', ttl)
if n > 1 and call('PTTL', KEYS[n + 1]) < ttl then
  call('SET', KEYS[n + 1], n, 'PX', ttl)
end
return {1, slot, fence, 0}
