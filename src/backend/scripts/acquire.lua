-- Take one of the lock's slots, or report who has them and join the waiters' queue.
-- KEYS[1..n] slots: the slots; KEYS[1] is the lock's own key, the only slot when n = 1
-- KEYS[n+1] limit: the limit in force while a semaphore (n > 1) has holders: {K}:limit
-- KEYS[n+2] fence: the fence counter
-- KEYS[n+3] queue: the waiters' queue (sorted set: token -> arrival, server ms)
-- KEYS[n+4] woken: the woken waiters (hash: token -> when woken, server ms; see `wake_next`)
-- KEYS[n+5] supersede: the newest --supersede waiter (its identity and metadata, a string)
-- KEYS[n+6] done: the --once record (hash: ID -> '<when, server ms> <holder's value>')
-- KEYS[n+7] done_per: the --once-per record (sorted set: '<when> <holder's value>' -> the
--          successful run's arrival, server ms)
-- KEYS[n+8] replace: a takeover asked for by --replace: the asking run's identity and
--          metadata; while it stands, nobody else may take a free slot
-- KEYS[n+9] waiting: the queued waiters' values (hash: token -> identity and metadata),
--          so that a shared run kept out by one of them can name it (acquire_shared.lua)
-- KEYS[n+10] history: the lock's history (a stream; see `record_to` in prelude.lua)
-- KEYS[n+11] stats: the lock's counters (a hash; see `record_to`)
-- ARGV[1] identity: this holder's identity, the value's first bytes: {"token":"<uuid>"
-- ARGV[2] metadata: the rest of the value after the fence: ,"host":…}
-- ARGV[3] ttl_ms: the lease length in milliseconds (also how long a woken waiter has to try)
-- ARGV[4] limit: n, the limit
-- ARGV[5] fair: '1' with --fair: only the first waiters in the queue may take a free slot
-- ARGV[6] token: this holder's token (its member in the queue)
-- ARGV[7] wake_prefix: the prefix of a waiter's own channel (its token follows)
-- ARGV[8] listening: '1' when this waiter listens for its wake-up on its own channel: it
--          joins the queue if it must wait; '0' when it does not listen (yet), and so
--          cannot be woken
-- ARGV[9] arrival_ms: when this waiter joined, in ms since the epoch, the same on every
--          Redlock node; '0': now, by the server's clock
-- ARGV[10] sharded: '1' to publish on sharded channels (a Redis Cluster; see `publish`),
--          '0' not
-- ARGV[11] want_run_id: '1' to return this server's run_id (Redlock: a server named twice,
--          under two spellings, is found by it), '0' not
-- ARGV[12] supersede: '1' with --supersede: a newer such waiter ends this one's wait, and
--          this one, when it starts waiting, ends an older one's; '0' not (the key
--          `supersede` is then never touched)
-- ARGV[13] arrived: '1' when an earlier attempt of this waiter was answered by this server
--          (it has arrived: a value of another's in `supersede` is then a newer one's),
--          '0' for its first
-- ARGV[14] once_id: with --once, its ID; '' without
-- ARGV[15] once_per_ms: with --once-per, its DUR in ms; '0' without
-- ARGV[16] stamp_ms: this run's arrival by this server's clock, as the first attempt
--          returned it; '0' on the first attempt: now, by TIME
-- ARGV[17] remember_ms: --remember in ms: an older --once record counts as gone
-- ARGV[18] replace: '1' with --replace: when the lock is held, ask its holder to stop (on
--          its own channel) and be served first once it has let go; '0' not (never with
--          supersede: the two are refused together)
-- ARGV[19] history: --history, the most entries the history keeps; '0' records nothing,
--          neither history nor counters
-- ARGV[20] waited_ms: how long this run has waited so far, in ms (the same on every node)
-- ARGV[21] final: '1' when a busy answer is this run's last (it does not wait): recorded
--          as `busy`, a skip; '0' when it waits (a timeout is recorded by leave_queue.lua)
-- Returns {1, slot, fence, 0} when this holder now has slot `slot` (fence: the counter's
--           decimal digits, a string: Lua's numbers are doubles, which would print a large
--           one as 1e+14 and lose digits past 2^53);
--         {0, pttl, holder, ahead} when it must wait (pttl: the soonest a slot can free up,
--           or a woken waiter ahead of it must have tried, -1 if neither will happen by
--           itself; holder: one holder's value, '' if none; ahead: with --fair, the live
--           waiters queued before this one);
--         {-1, other, '', 0} when the key is used with another limit (other: that limit, or
--           0 for a value redlock-run did not write);
--         {2, 0, newer, 0} when this --supersede waiter was superseded (newer: the newer
--           waiter's identity and metadata, a JSON object); it has left the queue;
--         {4, 0, counter, 0} when a slot is free but the fence counter is too large
--           (the fence it would give is 10^18 or more; counter: what it holds); nothing
--           was taken;
--         {3, 0, record, 0} when the work is already done (--once, --once-per; record:
--           '<when, server ms> <the holder's value>'); it has left the queue, and ended
--           the takeover it asked for (--replace). Checked before superseding and before
--           any takeover: a run whose work is done is never told it was superseded, and
--           replaces no one;
--         each with a fifth element: how many entries of the woken waiters' record were
--           not wake-up times and were taken out (see `woken_since`); a sixth: the
--           server's run_id when asked for (ARGV[11]), '' otherwise or when the user may
--           not run INFO; a seventh: with --once-per, this run's arrival by this
--           server's clock (ARGV[16] on later attempts), '0' without; and an eighth: which
--           record keys hold another type and were read as no record (1: done, 2:
--           done_per, added); a ninth: after a skip recorded (busy with `final`,
--           superseded; work already done is not a skip), the consecutive skips now,
--           else -1; a tenth and an eleventh: the recording's flags and refused commands (see `record` in
--           prelude.lua).
local server = ''
if ARGV[11] == '1' then
  local info = redis.pcall('INFO', 'server')
  if type(info) == 'string' then
    server = string.match(info, 'run_id:(%x+)') or ''
  end
end

record_to(KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[19])
local skips = -1
local stamp = '0'
-- Which record keys hold another type (another application's data): 1 {K}:done, 2
-- {K}:done:per, added; read as no record, and warned about.
local foreign = 0
local function reply(status, number, text, ahead)
  local flags, refused = recorded()
  return {status, number, text, ahead, repaired, server, stamp, foreign, skips, flags, refused}
end

local n = tonumber(ARGV[4])
local identity = ARGV[1]
local ttl = tonumber(ARGV[3])

-- A semaphore with holders records its limit; anyone passing another one is refused, even
-- when the slots it would look at are free.
local declared = read(KEYS[n + 1])
if type(declared) == 'string' and tonumber(declared) ~= n then
  return reply(-1, tonumber(declared) or 0, '', 0)
end
local free = {}
local soonest = -1
local holder = ''

local function held_for(key)
  local pttl = call('PTTL', key)
  if pttl >= 0 and (soonest < 0 or pttl < soonest) then
    soonest = pttl
  end
end

-- What each slot holds, as `read` says.
local found = {}
for i = 1, n do
  -- A hash or list under this name (another application's data) is simply someone
  -- else's, for as long as it exists.
  local current = read(KEYS[i])
  found[i] = current
  if current == false then
    table.insert(free, i)
  elseif type(current) == 'string' then
    if string.sub(current, 1, #identity) == identity then
      -- An earlier attempt of ours landed but its reply was lost: it is ours.
      call('PEXPIRE', KEYS[i], ARGV[3])
      local fence = string.match(current, '"fence":(%d+)')
      return reply(1, i, fence or '0', 0)
    end
    local other = string.match(current, '"limit":(%d+)}$')
    if other and tonumber(other) ~= n then
      return reply(-1, tonumber(other), '', 0)
    end
    if holder == '' then holder = current end
    held_for(KEYS[i])
  else
    held_for(KEYS[i])
  end
end

-- A holder that never released (killed, its host gone) left its `slot:<i>` field, naming a
-- value its slot no longer holds: its lease ran out. The first run of the key to see it
-- records `expired` and takes the field out, whichever slot it takes, if any: a slot that
-- stays free would otherwise hide it from the history while `metrics` counts it.
if recording() then
  for i = 1, n do
    local left = record(2, 'HGET', 'slot:' .. i)
    local since, of = string.match(type(left) == 'string' and left or '', '^(%d+) (.*)$')
    if since and found[i] ~= of then
      record_event('expired', 'token', token_of(of), 'fence', string.match(of, '"fence":(%d+)'),
        'holder', of, 'by', ARGV[6], 'held_ms', math.max(now_ms() - tonumber(since), 0))
      count('expired')
      record(2, 'HDEL', 'slot:' .. i)
    end
  end
end

local queue, woken, token, prefix = KEYS[n + 3], KEYS[n + 4], ARGV[6], ARGV[7]
local listens = ARGV[8] == '1'
local replacing = ARGV[18] == '1'
-- Trying is acting on any wake-up this waiter had: it is no longer owed one.
call('HDEL', woken, token)

-- --once, --once-per: work already done by a run of this key is not done again, whether
-- this is the run's arrival or its turn after a wait. Checked after the slots, so that a
-- waiter woken for a free slot hands its wake-up on to the next one as it leaves, and
-- before --supersede: a run whose work is done exits 0, superseded or not, and one that
-- finds it done at arrival leaves without registering, so it supersedes no one.
local done = false
local once_per = tonumber(ARGV[15])
-- Read only with --once or --once-per: nothing is added to a plain run's acquisition.
local now = (once_per > 0 or ARGV[14] ~= '') and now_ms() or 0
-- A record is '<when, server ms> <holder's value>'. One dated more than --remember after
-- now was not written by redlock-run (a release writes the server's time): it counts as not
-- done, and goes, or it would make its ID done forever. One dated less far ahead is kept
-- and counts: this server's clock went back since, or the record came from a master whose
-- clock ran ahead (a failover, a slot moved); taken for another's, the work would be done
-- again. A key of another type under the record's name (another application's data) holds
-- no record: not done, and left alone.
local function future(record)
  local when = tonumber(string.match(record, '^(%d+) '))
  return when ~= nil and when > now + tonumber(ARGV[17])
end
if once_per > 0 then
  stamp = ARGV[16] ~= '0' and ARGV[16] or tostring(now)
  local kind = call('TYPE', KEYS[n + 7]).ok
  if kind ~= 'zset' and kind ~= 'none' then
    foreign = foreign + 2
  end
  if kind == 'zset' then
    -- Strictly within DUR/2 of this run's arrival: the next firing, DUR later, runs.
    local half = math.floor(once_per / 2)
    local arrival = tonumber(stamp)
    -- ZRANGE BYSCORE (Redis 6.2), not ZRANGEBYSCORE: the documented ACL user has ZRANGE.
    local found = call('ZRANGE', KEYS[n + 7], '(' .. (arrival - half),
      '(' .. (arrival + half), 'BYSCORE', 'LIMIT', 0, 16)
    for _, record in ipairs(found) do
      if future(record) then
        call('ZREM', KEYS[n + 7], record)
      elseif not done then
        done = record
      end
    end
  end
end
local once_kind = (not done and ARGV[14] ~= '') and call('TYPE', KEYS[n + 6]).ok or 'none'
if once_kind ~= 'hash' and once_kind ~= 'none' then
  foreign = foreign + 1
end
if once_kind == 'hash' then
  local record = call('HGET', KEYS[n + 6], ARGV[14])
  if record then
    local when = tonumber(string.match(record, '^(%d+) '))
    if future(record) then
      call('HDEL', KEYS[n + 6], ARGV[14])
    elseif when and when >= now - tonumber(ARGV[17]) then
      done = record
    end
  end
end
-- Where a takeover (--replace) stands, read before the work done is: a run whose work is
-- done ends the one it asked for, or it would hold everybody up until it ran out.
local request_key = KEYS[n + 8]
local request = read(request_key)
local mine = type(request) == 'string' and string.sub(request, 1, #identity) == identity
if done then
  call('ZREM', queue, token)
  call('HDEL', KEYS[n + 9], token)
  if mine then
    call('DEL', request_key)
  end
  if #free > 0 then
    wake_next(queue, woken, prefix, ARGV[10], token .. '#done', ttl, now_ms(), nil,
      request_key)
  end
  -- Its event and counter, but not a skip: the work it was for is done, so nothing
  -- stood in for a failure (three hosts' --once-per would otherwise page every night).
  record_event('already_done', 'token', token, 'holder', identity .. ARGV[2])
  count('already_done')
  return reply(3, 0, done, 0)
end

-- --supersede: `registry` names the newest superseding waiter. One that has arrived (a
-- holder returned above, before this) and finds another's value there was overtaken by a
-- newer arrival: it leaves, whatever the slots. Its value is kept, not cleared, when the
-- newest takes the lock, and never expires: an older waiter that missed its wake-up still
-- finds it there, however late it wakes (stopped, a paused VM). Only a server that lost it
-- (restarted empty, FLUSHALL, a failover to a replica that missed it, DEL) forgets the
-- order: such a waiter then finds nothing, and waits on as the newest.
local supersedes = ARGV[12] == '1'
local registry = KEYS[n + 5]
local function of_ours(value)
  return type(value) == 'string' and string.sub(value, 1, #identity) == identity
end
if supersedes and ARGV[13] == '1' then
  local newest = read(registry)
  if type(newest) == 'string' and not of_ours(newest) then
    call('ZREM', queue, token)
    call('HDEL', KEYS[n + 9], token)
    skips = record_skip('superseded', token, identity .. ARGV[2])
    return reply(2, 0, newest, 0)
  end
end

-- A superseding waiter that waits is the newest: the one it overtakes (the registry's, on
-- its first attempt here; else the registry holds its own value or nothing) leaves the
-- queue and is told on its wake-up channel, where it listens: it tries at once and is
-- answered above. A crashed one is simply dropped, and one long gone (the registry keeps
-- the last newest for good) costs a PUBLISH nobody hears. Returns whether one still queued
-- was overtaken.
local function register()
  local current = read(registry)
  local overtaken = false
  if not of_ours(current) then
    local older = type(current) == 'string' and string.match(current, '^{"token":"([^"]+)"')
    if older then
      overtaken = call('ZREM', queue, older) == 1
      call('HDEL', KEYS[n + 9], older)
      call('HDEL', woken, older)
      publish(ARGV[10], prefix .. older, 'superseded by ' .. token)
    end
    -- Without a TTL (SET drops one an older version gave it): the arrival order must
    -- outlive any pause of the waiters it overtook. One small string per key, like the
    -- fence counter.
    call('SET', registry, identity .. ARGV[2])
  end
  return overtaken
end

local function wait_in_queue(pttl, ahead)
  -- The one overtaken may have been woken for a free slot (--fair): try again at once.
  if supersedes and register() and #free > 0 then
    pttl = 0
  end
  if listens then
    local arrival = tonumber(ARGV[9])
    if replacing then
      -- First in the queue, ahead of every waiter, so that the release wakes it first;
      -- 0 is the same on every Redlock node.
      call('ZADD', queue, 0, token)
    else
      call('ZADD', queue, 'NX', arrival > 0 and arrival or now_ms(), token)
    end
    call('HSET', KEYS[n + 9], token, identity .. ARGV[2])
    -- The queue outlives its waiters by a little, should they all vanish with no release
    -- left to find them gone. A live waiter comes back when told (`pttl`, or in 10 s when
    -- nothing will free up by itself: wait.rs), however long the holder's lease or
    -- --min-hold: the queue lasts until then, and a little more.
    local keep = 3 * ttl + (pttl >= 0 and pttl or 10000)
    if call('PTTL', queue) < keep then
      call('PEXPIRE', queue, keep)
      call('PEXPIRE', KEYS[n + 9], keep)
    end
  end
  if ARGV[21] == '1' then
    skips = record_skip('busy', token, identity .. ARGV[2])
  end
  return reply(0, pttl, holder, ahead)
end

-- A takeover (--replace) stands: the run that asked for it is served next, so a free slot
-- waits for it (it comes within `ttl` of being woken, or the request runs out).
if type(request) == 'string' and not mine then
  local left = call('PTTL', request_key)
  if #free > 0 or soonest < 0 or (left >= 0 and left < soonest) then
    soonest = left
  end
  return wait_in_queue(soonest, 0)
end
if replacing and #free == 0 then
  -- Asked for once the first time, kept while this run keeps trying, and gone soon after it
  -- stops: it comes back when the holder's lease would end (`soonest`, 10 s with none:
  -- wait.rs, `retry_delay`, at most a tenth or 250 ms later), at once on a release, and
  -- every 300 ms at first. So the request lasts a quarter more than that, and 2 s: a
  -- requester that died holds nobody up for longer than that past its last try (and not
  -- at all once a release finds it gone: `drop_waiter`).
  local wait = soonest >= 0 and soonest or 10000
  call('SET', request_key, identity .. ARGV[2], 'PX', wait + math.floor(wait / 4) + 2000)
  local target = string.match(holder, '^{"token":"([^"]+)"')
  if target then
    publish(ARGV[10], prefix .. target, 'replace')
  end
  return wait_in_queue(soonest, 0)
end

if ARGV[5] == '1' then
  -- Fair: a free slot goes to the first live waiters in the queue. Each one ahead of us
  -- that has not been woken is woken now (a dead one is dropped), and one woken earlier
  -- has `ttl` to try (`woken_in_time`): until then, we wait for it.
  local rank = call('ZRANK', queue, token)
  if #free == 0 then
    return wait_in_queue(soonest, rank or call('ZCARD', queue))
  end
  local now = now_ms()
  local ahead, at = 0, 0
  -- Bounded like `wake_next`: past that, the ones not looked at count as ahead.
  for _ = 1, 64 do
    local first = call('ZRANGE', queue, at, at)[1]
    if ahead >= #free or not first or first == token then
      break
    end
    local since = woken_in_time(queue, woken, first, ttl, now, request_key)
    if since then
      local left = ttl - (now - since)
      if soonest < 0 or left < soonest then soonest = left end
      ahead, at = ahead + 1, at + 1
    elseif since == nil then
      local woke = wake_next(queue, woken, prefix, ARGV[10], token .. '#ahead', ttl, now, at,
        request_key)
      -- Woken now (or, with it dead and dropped, someone behind it, met again next time
      -- round at `at`); nobody woken while it is still there (the user may not publish):
      -- it stays ahead, and we look again after `ttl`.
      if woke == first or (woke == nil and call('ZRANGE', queue, at, at)[1] == first) then
        if soonest < 0 or ttl < soonest then soonest = ttl end
        ahead, at = ahead + 1, at + 1
      end
    end
  end
  if ahead < #free and call('ZRANGE', queue, at, at)[1] ~= token
      and call('ZRANGE', queue, at, at)[1] then
    -- The bound ran out before our own place: wait as if they were all alive.
    ahead = #free
  end
  if ahead >= #free then
    return wait_in_queue(soonest, ahead)
  end
elseif #free == 0 then
  return wait_in_queue(soonest, 0)
end

local slot = free[1]
-- A counter this close to 10^18 was never counted to (it starts from the server's clock in
-- microseconds, about 1.7 * 10^15 now, and grows by one a lock): it was written by hand or
-- by another program, and the fence would be absurd (at 2^63 - 1, INCR fails). Refused
-- before anything changes, named, and never handed on to other Redlock nodes.
local counter = redis.pcall('GET', KEYS[n + 2])
local digits = type(counter) == 'string' and string.match(counter, '^0*(%d+)$')
if digits and (#digits > 18 or digits == string.rep('9', 18)) then
  return reply(4, 0, counter, 0)
end
-- Before anything changes: what renewing and releasing will need must be allowed by the
-- user's ACL, so that a refusal ends the run now, before its command, and not at its first
-- renewal. Where they run (Redis 6.2), on a free slot they change nothing.
may(nil, 'GET', KEYS[slot])
may(nil, 'PTTL', KEYS[slot])
may(nil, 'PEXPIRE', KEYS[slot], ttl)
may(nil, 'DEL', KEYS[slot])
if n > 1 then
  may(nil, 'EXISTS', KEYS[slot])
end
-- Likewise for waiting in the queue and waking the next waiter at release (`wake_next`),
-- which find nothing of ours either (XX: only a member's score would change; the hash
-- field is set and taken away again).
may(nil, 'ZADD', queue, 'XX', 0, token)
may(nil, 'ZRANGE', queue, 0, 0)
may(nil, 'ZCARD', queue)
may(nil, 'HGET', woken, token)
may(function()
  call('HSET', woken, token, 0)
  call('HDEL', woken, token)
end, 'HSET', woken, token, 0)
may(nil, 'HDEL', woken, token)
may(nil, 'TIME')
-- And announcing the release, if waiters can listen for it.
may_announce(ARGV[10], prefix .. token)
-- Taking a slot is leaving the queue, and ends the takeover this run asked for.
if call('ZREM', queue, token) == 1 then
  call('HDEL', KEYS[n + 9], token)
end
if mine then
  call('DEL', request_key)
end
-- The fence: one past the counter. A missing counter (a new lock, or a server that lost its
-- data: a restart without persistence, FLUSHALL, an eviction, a failover to a replica that
-- never saw it) starts again from the server's clock in microseconds, which is past every
-- fence handed out before as long as that clock does not go back (a counter grows by one
-- a lock taken, never a million a second). Built as digits: a double would round it.
if call('EXISTS', KEYS[n + 2]) == 0 then
  local time = call('TIME')
  call('SET', KEYS[n + 2], time[1] .. string.format('%06d', tonumber(time[2])))
end
call('INCR', KEYS[n + 2])
local fence = call('GET', KEYS[n + 2])
local value = identity .. ',"fence":' .. fence .. ARGV[2]
call('SET', KEYS[slot], value, 'PX', ttl)
if n > 1 and call('PTTL', KEYS[n + 1]) < ttl then
  call('SET', KEYS[n + 1], n, 'PX', ttl)
end
if recording() then
  -- A dead holder's field here was recorded `expired` above, before anything changed.
  record(2, 'HSET', 'slot:' .. slot, now_ms() .. ' ' .. value)
  record_event('acquired', 'token', token, 'fence', fence, 'holder', value, 'waited_ms',
    ARGV[20])
  count('acquired')
  count('wait_ms_sum', tonumber(ARGV[20]) or 0)
  count('wait_count')
end
return reply(1, slot, fence, 0)
