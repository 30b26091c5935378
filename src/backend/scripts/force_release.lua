-- `release --force`: delete a lock only if it still holds exactly the value just read, and
-- wake a waiter. Never touches a value it did not show to the operator.
-- KEYS[1] slot: the lock key (or one of its slots)
-- KEYS[2] queue: the waiters' queue
-- KEYS[3] woken: the woken waiters (see `wake_next`)
-- KEYS[4] history: the lock's history (see `record_to` in prelude.lua)
-- KEYS[5] stats: the lock's counters (see `record_to`)
-- ARGV[1] value: the value read a moment ago
-- ARGV[2] release_channel: the channel every waiter also listens on
-- ARGV[3] wake_prefix: the prefix of a waiter's own channel (its token follows)
-- ARGV[4] sharded: '1' to publish on sharded channels (a Redis Cluster; see `publish`), '0' not
-- ARGV[5] history: the cap for the history (see acquire.lua); recorded only when the lock
--          already has its history or counters (its runs record), '0' never
-- ARGV[6] slot: the number of the slot (1 for the lock's own key)
-- ARGV[7] by: the forcing process's metadata, a JSON object (host, pid, program)
-- Returns {outcome, flags, refused}: outcome 1 when deleted, 2 when deleted but the
-- announcement was refused (the user may not publish on the channel), 0 when the key
-- changed or vanished; flags and refused, the recording's (see `record` in prelude.lua).
local function answer(outcome)
  local flags, refused = recorded()
  return {outcome, flags, refused}
end
if read(KEYS[1]) == ARGV[1] then
  call('DEL', KEYS[1])
  if ARGV[5] ~= '0' and token_of(ARGV[1]) ~= ''
      and call('EXISTS', KEYS[4], KEYS[5]) > 0 then
    record_to(KEYS[4], KEYS[5], ARGV[5])
    record_hold_end('forced', tonumber(ARGV[6]) or 1, ARGV[1], now_ms(), 'by', ARGV[7])
  end
  -- Named like a holder's own release: by its identity, or the whole value if foreign.
  local notice = string.match(ARGV[1], '^{"token":"[^"]*"') or ARGV[1]
  -- A woken waiter has the holder's lease length to try, as with its own release.
  local grace = tonumber(string.match(ARGV[1], '"ttl_ms":(%d+)') or '30000')
  if wake_next(KEYS[2], KEYS[3], ARGV[3], ARGV[4], notice, grace, now_ms()) then
    return answer(1)
  end
  local published = publish(ARGV[4], ARGV[2], notice)
  if type(published) == 'table' and published.err then
    return answer(2)
  end
  return answer(1)
end
return answer(0)
