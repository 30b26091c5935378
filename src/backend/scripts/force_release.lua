-- `release --force`: delete a lock only if it still holds exactly the value just read, and
-- wake a waiter. Never touches a value it did not show to the operator.
-- KEYS[1] slot: the lock key (or one of its slots)
-- KEYS[2] queue: the waiters' queue
-- KEYS[3] woken: the woken waiters (see `wake_next`)
-- ARGV[1] value: the value read a moment ago
-- ARGV[2] release_channel: the channel every waiter also listens on
-- ARGV[3] wake_prefix: the prefix of a waiter's own channel (its token follows)
-- ARGV[4] sharded: '1' to publish on sharded channels (a Redis Cluster; see `publish`), '0' not
-- Returns 1 when deleted, 2 when deleted but the announcement was refused (the user may
-- not publish on the channel), 0 when the key changed or vanished.
if read(KEYS[1]) == ARGV[1] then
  call('DEL', KEYS[1])
  -- Named like a holder's own release: by its identity, or the whole value if foreign.
  local notice = string.match(ARGV[1], '^{"token":"[^"]*"') or ARGV[1]
  -- A woken waiter has the holder's lease length to try, as with its own release.
  local grace = tonumber(string.match(ARGV[1], '"ttl_ms":(%d+)') or '30000')
  if wake_next(KEYS[2], KEYS[3], ARGV[3], ARGV[4], notice, grace, now_ms()) then
    return 1
  end
  local published = publish(ARGV[4], ARGV[2], notice)
  if type(published) == 'table' and published.err then
    return 2
  end
  return 1
end
return 0
