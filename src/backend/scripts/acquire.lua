-- Take the lock, or report how long its holder still has.
-- KEYS[1]  the lock key
-- ARGV[1]  this holder's value (its token first, then metadata)
-- ARGV[2]  the lease length in milliseconds
-- ARGV[3]  the leading bytes of ARGV[1] that identify this holder
-- Returns {1, 0} when this holder now has the lock, {0, pttl} when someone else has it
-- (pttl: milliseconds left, or -1 for a key that never expires, such as another
-- application's data under this name).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, 0}
end
-- The key exists. If it is ours, an earlier SET landed but its reply was lost on the way
-- back: count that as acquired and restart the lease from now. pcall, because a hash or a
-- list under this name makes GET fail; such a key is simply someone else's.
local current = redis.pcall('GET', KEYS[1])
if type(current) == 'string' and string.sub(current, 1, #ARGV[3]) == ARGV[3] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 0}
end
return {0, redis.call('PTTL', KEYS[1])}
