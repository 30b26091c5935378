-- Delete the lock, only if it still holds this holder's value, and wake the waiters.
-- KEYS[1]  the lock key
-- ARGV[1]  the leading bytes of the value that identify this holder
-- ARGV[2]  the channel waiters subscribe to
-- Returns 1 when released, 0 when the key was already gone or belongs to someone else
-- (then nothing is deleted and nobody is woken: the key is not ours to touch).
local current = redis.pcall('GET', KEYS[1])
if type(current) == 'string' and string.sub(current, 1, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 1
end
return 0
