-- `release --force`: delete a lock only if it still holds exactly the value just read, and
-- wake the waiters. Never touches a value it did not show to the operator.
-- KEYS[1]  the lock key (or one of its slots)
-- ARGV[1]  the value read a moment ago
-- ARGV[2]  the channel waiters subscribe to
-- Returns 1 when deleted, 2 when deleted but the announcement was refused (the user may
-- not publish on the channel), 0 when the key changed or vanished.
if read(KEYS[1]) == ARGV[1] then
  call('DEL', KEYS[1])
  -- Named like a holder's own release: by its identity, or the whole value if foreign.
  local notice = string.match(ARGV[1], '^{"token":"[^"]*"') or ARGV[1]
  local published = redis.pcall('PUBLISH', ARGV[2], notice)
  if type(published) == 'table' and published.err then
    return 2
  end
  return 1
end
return 0
