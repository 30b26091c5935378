-- Extend the lease, only if the key still holds this holder's value.
-- KEYS[1] slot: the slot this holder has
-- KEYS[2] limit: with a semaphore, its {K}:limit key, kept alive as long as any holder's
--          lease
-- KEYS[3] replace: when looked for, a takeover asked for by --replace (see acquire.lua);
--          after the limit key, when there is one
-- KEYS[4] history: when recording, the lock's history (see `record_to` in prelude.lua);
--          the last two keys, after any of the above
-- KEYS[5] stats: when recording, the lock's counters
-- ARGV[1] identity: the leading bytes of the value that identify this holder
-- ARGV[2] ttl_ms: the lease length in milliseconds
-- ARGV[3] limit: with a semaphore, its limit
-- ARGV[4] takeover: '1' when the key after the slot and limit is the takeover's, to be
--          looked for
-- ARGV[5] history: --history (see acquire.lua) when the last two keys are the history and
--          the counters: a key found not ours is recorded as `lost`; '0' records nothing
--          (nor are those keys given)
-- ARGV[6] slot: the number of the slot this holder has (1 for the lock's own key)
-- ARGV[7] value: this holder's lock value as it wrote it here, for a loss's record
-- Returns {1, request, flags, refused} when extended (request: the value of a takeover
-- another run asked for, '' when none), {0, '', flags, refused} when the key is gone or
-- belongs to someone else (flags, refused: the recording's, see `record` in prelude.lua).
local last = #KEYS
if ARGV[5] ~= '0' then
  record_to(KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[5])
  last = #KEYS - 2
end
local replace = ARGV[4] == '1' and KEYS[last] or nil
local limit = last >= 2 and KEYS[2] ~= replace and KEYS[2] or nil
local current = read(KEYS[1])
if type(current) ~= 'string' or string.sub(current, 1, #ARGV[1]) ~= ARGV[1] then
  if recording() then
    local value = ARGV[7] ~= '' and ARGV[7] or ARGV[1] .. '}'
    record_hold_end('lost', tonumber(ARGV[6]) or 1, value, now_ms())
    count('lost')
  end
  local flags, refused = recorded()
  return {0, '', flags, refused}
end
call('PEXPIRE', KEYS[1], ARGV[2])
if limit and call('PTTL', limit) < tonumber(ARGV[2]) then
  call('SET', limit, ARGV[3], 'PX', ARGV[2])
end
local request = replace and read(replace) or ''
if type(request) ~= 'string' then
  request = ''
end
local flags, refused = recorded()
return {1, request, flags, refused}
