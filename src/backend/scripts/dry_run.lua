-- --dry-run: what a real run of the lock would need and find, asked without writing
-- anything. Whether this user's ACL allows each command the run's scripts would send
-- (acquire, renew, release: the same as acquire.lua's `may` checks, and more), asked of
-- `redis.acl_check_cmd` (Redis 7 and Valkey), which judges a command without running it;
-- Redis 6.2 has no such question, and could only be asked by running the commands, which
-- write: there nothing is checked. And the --once / --once-per record a real run would
-- find, read as acquire.lua reads it, but a record it would take out is only skipped here.
-- KEYS[1] slot: the lock's own key (its other slots are judged by the same ACL patterns)
-- KEYS[2] limit: the limit in force while a semaphore has holders: {K}:limit
-- KEYS[3] fence: the fence counter
-- KEYS[4] queue: the waiters' queue
-- KEYS[5] woken: the woken waiters
-- KEYS[6] supersede: the newest --supersede waiter
-- KEYS[7] done: the --once record (see acquire.lua)
-- KEYS[8] done_per: the --once-per record (see acquire.lua)
-- KEYS[9] replace: a takeover asked for by --replace
-- ARGV[1] token: a token such as a run would have (its queue member and channel)
-- ARGV[2] wake_prefix: the prefix of a waiter's own channel (its token follows)
-- ARGV[3] sharded: '1' to publish on sharded channels (a Redis Cluster), '0' not
-- ARGV[4] limit: n, the limit
-- ARGV[5] ttl_ms: the lease length in milliseconds
-- ARGV[6] once_id: with --once, its ID; '' without
-- ARGV[7] once_per_ms: with --once-per, its DUR in ms; '0' without
-- ARGV[8] remember_ms: --remember in ms: an older --once record counts as gone
-- ARGV[9] supersede: '1' with --supersede, '0' not
-- ARGV[10] replace: '1' with --replace, '0' not
-- Returns {checked, record, other}: checked 1 when the ACL was asked, 0 when the server
-- cannot be asked (Redis 6.2); record: the record of the work already done, '<when, server
-- ms> <the holder's value>', or '' when there is none; other: the --limit the lock is in
-- use with when it is not ARGV[4], which refuses a real run (acquire.lua), 0 when that is
-- not a number, -1 when there is no such conflict. A command the ACL refuses raises the
-- error `call` raises for it, naming the command.
local n = tonumber(ARGV[4])
local ttl = ARGV[5]
local token = ARGV[1]
local checked = 0

if redis.acl_check_cmd then
  checked = 1
  local slot, limit, fence, queue, woken = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
  -- Taking the lock, keeping it and letting it go.
  may(nil, 'TYPE', slot)
  may(nil, 'GET', slot)
  may(nil, 'SET', slot, 'v', 'PX', ttl)
  may(nil, 'PTTL', slot)
  may(nil, 'PEXPIRE', slot, ttl)
  may(nil, 'DEL', slot)
  may(nil, 'TYPE', limit)
  may(nil, 'GET', limit)
  if n > 1 then
    may(nil, 'EXISTS', slot)
    may(nil, 'SET', limit, n, 'PX', ttl)
    may(nil, 'PTTL', limit)
  end
  may(nil, 'EXISTS', fence)
  may(nil, 'SET', fence, '1')
  may(nil, 'INCR', fence)
  may(nil, 'GET', fence)
  may(nil, 'TIME')
  -- Waiting in the queue, and waking the next waiter at release.
  may(nil, 'ZADD', queue, 'NX', 0, token)
  may(nil, 'ZRANGE', queue, 0, 0)
  may(nil, 'ZRANK', queue, token)
  may(nil, 'ZCARD', queue)
  may(nil, 'ZREM', queue, token)
  may(nil, 'PTTL', queue)
  may(nil, 'PEXPIRE', queue, ttl)
  may(nil, 'HGET', woken, token)
  may(nil, 'HSET', woken, token, 0)
  may(nil, 'HDEL', woken, token)
  may(nil, 'TYPE', KEYS[9])
  may(nil, 'GET', KEYS[9])
  may(nil, 'DEL', KEYS[9])
  if ARGV[9] == '1' then
    may(nil, 'TYPE', KEYS[6])
    may(nil, 'GET', KEYS[6])
    may(nil, 'SET', KEYS[6], 'v')
    may(nil, 'PTTL', KEYS[6])
    may(nil, 'PEXPIRE', KEYS[6], ttl)
  end
  if ARGV[10] == '1' then
    may(nil, 'SET', KEYS[9], 'v', 'PX', ttl)
  end
  -- The --once records, read at arrival and written at release.
  if ARGV[6] ~= '' then
    may(nil, 'TYPE', KEYS[7])
    may(nil, 'HGET', KEYS[7], ARGV[6])
    may(nil, 'HSET', KEYS[7], ARGV[6], 'v')
  end
  if ARGV[7] ~= '0' then
    may(nil, 'TYPE', KEYS[8])
    may(nil, 'ZRANGE', KEYS[8], 0, 0)
    may(nil, 'ZADD', KEYS[8], 0, 'v')
    may(nil, 'ZREM', KEYS[8], 'v')
  end
  -- Announcing a release to those who wait (see `may_announce`).
  may_announce(ARGV[3], ARGV[2] .. token)
end

-- The record of the work already done, as acquire.lua looks for it: --once-per first, then
-- --once. One dated more than --remember in the future was not written by redlock-run and
-- counts as not done (acquire.lua takes it out; here it is only passed over); a key of
-- another type holds no record.
local done = ''
local once_per = tonumber(ARGV[7])
if once_per > 0 or ARGV[6] ~= '' then
  local now = now_ms()
  local function future(record)
    local when = tonumber(string.match(record, '^(%d+) '))
    return when ~= nil and when > now + tonumber(ARGV[8])
  end
  if once_per > 0 and call('TYPE', KEYS[8]).ok == 'zset' then
    -- Strictly within DUR/2 of now, this run's arrival.
    local half = math.floor(once_per / 2)
    local found = call('ZRANGE', KEYS[8], '(' .. (now - half), '(' .. (now + half),
      'BYSCORE', 'LIMIT', 0, 16)
    for _, record in ipairs(found) do
      if done == '' and not future(record) then
        done = record
      end
    end
  end
  if done == '' and ARGV[6] ~= '' and call('TYPE', KEYS[7]).ok == 'hash' then
    local record = call('HGET', KEYS[7], ARGV[6])
    if record and not future(record) then
      local when = tonumber(string.match(record, '^(%d+) '))
      if when and when >= now - tonumber(ARGV[8]) then
        done = record
      end
    end
  end
end
-- A lock in use with another --limit refuses a real run, as acquire.lua finds it: by the
-- limit a semaphore's holders declare, or by the value of the lock's own key.
local other = -1
local declared = read(KEYS[2])
if type(declared) == 'string' and tonumber(declared) ~= n then
  other = tonumber(declared) or 0
else
  local current = read(KEYS[1])
  local of = type(current) == 'string' and string.match(current, '"limit":(%d+)}$')
  if of and tonumber(of) ~= n then
    other = tonumber(of)
  end
end
return {checked, done, other}
