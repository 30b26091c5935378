-- Extend the lease, only if the key still holds this holder's value.
-- KEYS[1] slot: the slot this holder has
-- KEYS[2] limit: with a semaphore, its {K}:limit key, kept alive as long as any holder's
--          lease
-- ARGV[1] identity: the leading bytes of the value that identify this holder
-- ARGV[2] ttl_ms: the lease length in milliseconds
-- ARGV[3] limit: with a semaphore, its limit
-- Returns 1 when extended, 0 when the key is gone or belongs to someone else.
local current = read(KEYS[1])
if type(current) ~= 'string' or string.sub(current, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
call('PEXPIRE', KEYS[1], ARGV[2])
if KEYS[2] and call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
  call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
end
return 1
