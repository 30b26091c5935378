-- Extend the lease, only if the key still holds this holder's value.
-- KEYS[1] slot: the slot this holder has
-- KEYS[2] limit: with a semaphore, its {K}:limit key, kept alive as long as any holder's
--          lease
-- KEYS[3] replace: when looked for, a takeover asked for by --replace (see acquire.lua);
--          the last key (KEYS[2] when there is no limit key)
-- ARGV[1] identity: the leading bytes of the value that identify this holder
-- ARGV[2] ttl_ms: the lease length in milliseconds
-- ARGV[3] limit: with a semaphore, its limit
-- ARGV[4] takeover: '1' when the last key is the takeover's, to be looked for
-- Returns {1, request} when extended (request: the value of a takeover another run asked
-- for, '' when none), {0, ''} when the key is gone or belongs to someone else.
local replace = ARGV[4] == '1' and KEYS[#KEYS] or nil
local limit = KEYS[2] ~= replace and KEYS[2] or nil
local current = read(KEYS[1])
if type(current) ~= 'string' or string.sub(current, 1, #ARGV[1]) ~= ARGV[1] then
  return {0, ''}
end
call('PEXPIRE', KEYS[1], ARGV[2])
if limit and call('PTTL', limit) < tonumber(ARGV[2]) then
  call('SET', limit, ARGV[3], 'PX', ARGV[2])
end
local request = replace and read(replace) or ''
if type(request) ~= 'string' then
  request = ''
end
return {1, request}
