-- A waiter gives up: leave the queue so nobody waits behind it; if it had been woken and
-- not yet tried, the wake-up goes to the next waiter instead.
-- KEYS[1] queue: the waiters' queue
-- KEYS[2] woken: the woken waiters (see `wake_next`)
-- KEYS[3] replace: a takeover asked for by --replace (see acquire.lua): one this waiter
--          asked for ends with its wait, so that it holds nobody up
-- KEYS[4] history: the lock's history (see `record_to` in prelude.lua)
-- KEYS[5] stats: the lock's counters (see `record_to`)
-- KEYS[6] lock: the lock's own key, K
-- ARGV[1] token: this waiter's token
-- ARGV[2] wake_prefix: the prefix of a waiter's own channel
-- ARGV[3] grace_ms: how long a woken waiter has to try, in milliseconds
-- ARGV[4] sharded: '1' to publish on sharded channels (a Redis Cluster; see `publish`), '0' not
-- ARGV[5] identity: this waiter's identity, the first bytes of a takeover it asked for
-- ARGV[6] history: --history (see acquire.lua); '0' records nothing
-- ARGV[7] timed_out: '1' when the wait ran out (--wait): recorded as `timeout`, a skip;
--          '0' when it ends for another reason (nothing recorded)
-- ARGV[8] metadata: the rest of this waiter's value after the fence (see acquire.lua)
-- ARGV[9] waited_ms: how long it waited, in ms (the same on every node)
-- Returns {1, skips, flags, refused}: skips, after a timeout recorded, the consecutive
-- skips now, else -1; flags and refused, the recording's (see `record` in prelude.lua).
record_to(KEYS[4], KEYS[5], ARGV[6])
-- {K}:queue:shared, named from the queue's name (same hash slot): see release.lua.
local shared = KEYS[1] .. ':shared'
local position = call('ZRANK', KEYS[1], ARGV[1])
local exclusive = position and not call('HGET', shared, ARGV[1])
call('ZREM', KEYS[1], ARGV[1])
-- Its entries in {K}:queue:shared and {K}:queue:who.
call('HDEL', shared, ARGV[1])
call('HDEL', KEYS[1] .. ':who', ARGV[1])
local request = read(KEYS[3])
if type(request) == 'string' and string.sub(request, 1, #ARGV[5]) == ARGV[5] then
  call('DEL', KEYS[3])
end
if call('HDEL', KEYS[2], ARGV[1]) == 1 then
  local now = now_ms()
  local woke = wake_next(KEYS[1], KEYS[2], ARGV[2], ARGV[4], ARGV[1] .. '#left',
    tonumber(ARGV[3]), now, nil, KEYS[3])
  wake_readers(KEYS[1], KEYS[2], shared, ARGV[2], ARGV[4], ARGV[1] .. '#left',
    tonumber(ARGV[3]), now, woke)
elseif exclusive and position < 64 then
  -- An exclusive waiter kept the shared waiters behind it out (see acquire_shared.lua):
  -- when K is free or a group's, and no other exclusive waiter is ahead, they may start now
  -- rather than at their own retry time.
  local current = read(KEYS[6])
  local ahead = position > 0 and call('ZRANGE', KEYS[1], 0, position - 1) or {}
  local free = current == false or is_group(current)
  for _, waiter in ipairs(ahead) do
    if not call('HGET', shared, waiter) then
      free = false
    end
  end
  if free then
    local grace = tonumber(ARGV[3])
    wake_readers_from(KEYS[1], KEYS[2], shared, ARGV[2], ARGV[4], ARGV[1] .. '#left', grace,
      now_ms(), position)
    if call('EXISTS', KEYS[2]) == 1 and call('PTTL', KEYS[2]) < 3 * grace then
      call('PEXPIRE', KEYS[2], 3 * grace)
    end
  end
end
local skips = -1
if ARGV[7] == '1' then
  skips = record_skip('timeout', ARGV[1], ARGV[5] .. ARGV[8], ARGV[9])
end
local flags, refused = recorded()
return {1, skips, flags, refused}
