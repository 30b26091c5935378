-- Read a lock's counters as `metrics`, `check` and `status` show them, in one step, writing
-- nothing: one consistent moment, so that a release (which removes a holder's `slot:<i>`
-- field and its slot key together) is never seen half done.
-- KEYS[1] stats: the lock's counters ({K}:stats, a hash)
-- KEYS[2] queue: the waiters' queue ({K}:queue, a sorted set)
-- ARGV[1] lock: the lock's own key, slot 1 (the same hash slot as the keys above)
-- ARGV[2] slot_prefix: slot i > 1 is this followed by i ({K}:slot:)
-- Returns {type, fields, waiters, now_ms, stale}: the type of `stats` ('none' when there
-- is none; its fields are read only when it is a hash), its fields and values as HGETALL
-- gives them, how many waiters are queued (0 unless `queue` is a sorted set), the server's
-- clock in ms, and the names of the `slot:<i>` fields whose slot no longer holds the value
-- recorded there (a holder that ended without a release, not found yet).
local kind = call('TYPE', KEYS[1]).ok
local fields = {}
local stale = {}
if kind == 'hash' then
  fields = call('HGETALL', KEYS[1])
  for at = 1, #fields, 2 do
    -- A slot's number, 1 to 9999 (--limit is at most 1000), as the scripts write it.
    local slot = string.match(fields[at], '^slot:([1-9]%d?%d?%d?)$')
    if slot then
      local key = ARGV[1]
      if tonumber(slot) ~= 1 then
        key = ARGV[2] .. slot
      end
      local recorded = string.match(fields[at + 1], '^%d+ (.*)$')
      if recorded == nil or read(key) ~= recorded then
        stale[#stale + 1] = fields[at]
      end
    end
  end
end
local waiters = 0
if call('TYPE', KEYS[2]).ok == 'zset' then
  waiters = call('ZCARD', KEYS[2])
end
return {kind, fields, waiters, now_ms(), stale}
