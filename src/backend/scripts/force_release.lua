-- `release --force`: delete a lock only if it still holds exactly the value just read, and
-- wake the waiters. Never touches a value it did not show to the operator.
-- KEYS[1]  the lock key (or one of its slots)
-- ARGV[1]  the value read a moment ago
-- ARGV[2]  the channel waiters subscribe to
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- Named like a holder's own release: by its identity, or the whole value if foreign.
  redis.call('PUBLISH', ARGV[2], string.match(ARGV[1], '^{"token":"[^"]*"') or ARGV[1])
  return 1
end
return 0
