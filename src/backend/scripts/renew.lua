-- Extend the lease, only if the key still holds this holder's value.
-- KEYS[1]  the lock key
-- ARGV[1]  the leading bytes of the value that identify this holder
-- ARGV[2]  the lease length in milliseconds
-- Returns 1 when extended, 0 when the key is gone or belongs to someone else.
local current = redis.pcall('GET', KEYS[1])
if type(current) == 'string' and string.sub(current, 1, #ARGV[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
