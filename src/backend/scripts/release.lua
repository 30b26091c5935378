-- Delete the lock, only if it still holds this holder's value, and wake the waiters.
-- KEYS[1]  the slot this holder has
-- ARGV[1]  the leading bytes of the value that identify this holder
-- ARGV[2]  the channel waiters subscribe to
-- ARGV[3]  milliseconds left of --min-hold (0: none): the key is kept that long instead
-- Returns 1 when released, 2 when kept until the --min-hold mark, 0 when the key was
-- already gone or belongs to someone else (then nothing is touched: it is not ours).
local current = redis.pcall('GET', KEYS[1])
if type(current) ~= 'string' or string.sub(current, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 2
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 1
