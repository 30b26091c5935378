-- Delete the lock, only if it still holds this holder's value, and wake one waiter.
-- KEYS[1] slot: the slot this holder has
-- KEYS[2] queue: the waiters' queue
-- KEYS[3] woken: the woken waiters (see `wake_next`)
-- KEYS[4] done: the --once record (see acquire.lua)
-- KEYS[5] done_per: the --once-per record (see acquire.lua)
-- KEYS[6] replace: a takeover asked for by --replace (see acquire.lua): deleted with its
--          requester when the wake-up finds that one gone
-- KEYS[7] history: the lock's history (see `record_to` in prelude.lua)
-- KEYS[8] stats: the lock's counters (see `record_to`)
-- KEYS[9] done_ids: the --once IDs by when recorded (sorted set: ID -> server ms), so that
--          {K}:done keeps only the newest `MAX_ONCE_IDS`
-- KEYS[10] limit: with a semaphore, its {K}:limit key
-- KEYS[11..] slots: with a semaphore, every slot; when none is held any more, the limit key
--          goes
-- ARGV[1] identity: the leading bytes of the value that identify this holder
-- ARGV[2] release_channel: the channel every waiter also listens on
-- ARGV[3] keep_ms: milliseconds left of --min-hold (0: none): the key is kept that long
--          instead
-- ARGV[4] limit: with a semaphore, its limit
-- ARGV[5] notice: the message announcing this release: the holder's identity and a release
--          number; '' to release without waking anyone
-- ARGV[6] wake_prefix: the prefix of a waiter's own channel (its token follows)
-- ARGV[7] grace_ms: how long a woken waiter has to try before it counts as gone, in
--          milliseconds
-- ARGV[8] sharded: '1' to publish on sharded channels (a Redis Cluster; see `publish`), '0' not
-- ARGV[9] record: '1' when the command succeeded: the work is recorded as done (--once,
--          --once-per) in this same step as the release, '0' not
-- ARGV[10] once_id: with --once, its ID; '' without
-- ARGV[11] stamp_ms: with --once-per, this run's arrival by this server's clock; '0' without
-- ARGV[12] remember_ms: how long the record lasts (--remember), in ms
-- ARGV[13] history: --history (see acquire.lua); '0' records nothing
-- ARGV[14] slot: the number of the slot this holder has (1 for the lock's own key)
-- ARGV[15] event: what ended the hold, recorded with the release: 'released', or
--          'replaced' (another run took over, --replace); 'abandoned': an attempt letting go
--          of what it took without running its command (Redlock: too slow, or no fence on a
--          majority; an unfit server), recorded only where it still holds the key and
--          counted in no hold; '' records nothing
-- ARGV[16] exit_code: the command's status as redlock-run reports it; '' when unknown
-- ARGV[17] success: '1' when the command succeeded (exit 0 on its own): recorded as the
--          last success, and the consecutive skips start again from 0
-- ARGV[18] lost_recorded: '1' when a renewal already recorded this holder's loss here
-- ARGV[19] value: this holder's lock value as it wrote it here, for a loss's record
-- Returns {outcome, repaired}. outcome: 1 when released, 2 when kept until the --min-hold
-- mark, 0 when the key was already gone or belongs to someone else (then nothing is
-- touched: it is not ours), 3 when released but the announcement was refused (the user may
-- not publish on the channel): waiters then find the lock free only when they next look.
-- repaired: how many entries of the woken waiters' record were not wake-up times and were
-- taken out (see `woken_since`). A third element: which record keys hold another type, so
-- that nothing was recorded there (1: done, 2: done_per, 4: done_ids, added; see
-- acquire.lua); a fourth
-- and a fifth: the recording's flags and refused commands (see `record` in prelude.lua).
-- A key found not ours is recorded as `lost` (unless a renewal did); a release as ARGV[15].
-- The most --once IDs a lock keeps (docs/policies.md): a record is at most 0.6 kB.
local MAX_ONCE_IDS = 1000
record_to(KEYS[7], KEYS[8], ARGV[13])
local slot = tonumber(ARGV[14]) or 1
local function answer(outcome, fixed, foreign_keys)
  local flags, refused = recorded()
  return {outcome, fixed, foreign_keys, flags, refused}
end
local current = read(KEYS[1])
if type(current) ~= 'string' or string.sub(current, 1, #ARGV[1]) ~= ARGV[1] then
  if ARGV[15] ~= '' and ARGV[15] ~= 'abandoned' and ARGV[18] ~= '1' and recording() then
    local value = ARGV[19] ~= '' and ARGV[19] or ARGV[1] .. '}'
    record_hold_end('lost', slot, value, now_ms(), 'exit_code', ARGV[16])
    count('lost')
  end
  return answer(0, 0, 0)
end
if recording() then
  if ARGV[15] == '' then
    held_since(slot, current, true)
  elseif ARGV[15] == 'abandoned' then
    -- The end of its `acquired`: no hold, no counter (it ran nothing).
    local since = held_since(slot, current, true)
    record_event('abandoned', 'token', token_of(current), 'fence',
      string.match(current, '"fence":(%d+)'), 'holder', current, 'held_ms',
      since and math.max(now_ms() - since, 0) or nil)
  else
    local now = now_ms()
    local id = record_hold_end(ARGV[15], slot, current, now, 'exit_code', ARGV[16])
    if ARGV[17] == '1' and ARGV[15] == 'released' then
      -- The success's time is its event's, where there is one: the entry's ID comes from
      -- the server's clock too, but may be read a millisecond after TIME was.
      local at = type(id) == 'string' and string.match(id, '^(%d+)%-') or now
      record(2, 'HSET', 'last_success_ms', at, 'skips', 0)
    end
  end
end
-- Only a holder that still has the lock records its work: one that lost it may have run
-- alongside another, and records nothing (the next run does the work again). A key of
-- another type under a record's name (another application's data) is left alone and
-- nothing is recorded there: the record-keeping never stands in the way of the release.
local foreign = 0
local function holds(key, kind, bit)
  local found = call('TYPE', key).ok
  if found == 'none' or found == kind then
    return true
  end
  foreign = foreign + bit
  return false
end
if ARGV[9] == '1' then
  local now = now_ms()
  local remember = tonumber(ARGV[12])
  local record = now .. ' ' .. current
  local function last(key)
    if call('PTTL', key) < remember then
      call('PEXPIRE', key, remember)
    end
  end
  if ARGV[10] ~= '' and holds(KEYS[4], 'hash', 1) then
    call('HSET', KEYS[4], ARGV[10], record)
    last(KEYS[4])
    -- Bounded with commands the documented ACL user has: the IDs recorded longer ago than
    -- --remember, and the oldest past the newest `MAX_ONCE_IDS`, go, 16 at a time (one ID
    -- comes in a release), never this run's own.
    if holds(KEYS[9], 'zset', 4) then
      call('ZADD', KEYS[9], now, ARGV[10])
      local gone = call('ZRANGE', KEYS[9], '-inf', '(' .. (now - remember), 'BYSCORE',
        'LIMIT', 0, 16)
      local over = math.min(call('ZCARD', KEYS[9]) - MAX_ONCE_IDS, 16)
      if over > 0 then
        for _, id in ipairs(call('ZRANGE', KEYS[9], 0, over - 1)) do
          gone[#gone + 1] = id
        end
      end
      for _, id in ipairs(gone) do
        if id ~= ARGV[10] then
          call('HDEL', KEYS[4], id)
          call('ZREM', KEYS[9], id)
        end
      end
      last(KEYS[9])
    end
    -- IDs recorded longer ago than --remember are forgotten here, a few at a time. Best
    -- effort (redis.pcall): a user whose ACL lacks HLEN or HRANDFIELD keeps them, and they
    -- count as gone anyway (acquire.lua reads the time in each).
    local count = redis.pcall('HLEN', KEYS[4])
    if type(count) == 'number' and count > 64 then
      local fields = redis.pcall('HRANDFIELD', KEYS[4], 16, 'WITHVALUES')
      if type(fields) == 'table' and not fields.err then
        for i = 1, #fields, 2 do
          local when = tonumber(string.match(fields[i + 1], '^(%d+) '))
          if not when or when < now - remember or when > now + remember then
            call('HDEL', KEYS[4], fields[i])
          end
        end
      end
    end
  end
  if ARGV[11] ~= '0' and holds(KEYS[5], 'zset', 2) then
    call('ZADD', KEYS[5], ARGV[11], record)
    -- Records older than --remember go, a few at a time, with commands the documented
    -- ACL user has; never this run's own, nor one that arrived after it, however long this
    -- run took: waiters that arrived within DUR/2 of it still look for it.
    local before = math.min(now - remember, tonumber(ARGV[11]))
    local old = call('ZRANGE', KEYS[5], '-inf', '(' .. before, 'BYSCORE', 'LIMIT', 0, 16)
    for _, member in ipairs(old) do
      call('ZREM', KEYS[5], member)
    end
    last(KEYS[5])
  end
end
local keep = tonumber(ARGV[3])
if keep > 0 then
  call('PEXPIRE', KEYS[1], keep)
  if KEYS[10] and call('PTTL', KEYS[10]) < keep then
    call('SET', KEYS[10], ARGV[4], 'PX', keep)
  end
  return answer(2, 0, foreign)
end
call('DEL', KEYS[1])
if KEYS[10] then
  local held = false
  for i = 11, #KEYS do
    if call('EXISTS', KEYS[i]) == 1 then held = true end
  end
  if not held then call('DEL', KEYS[10]) end
end
if ARGV[5] == '' then
  return answer(1, 0, foreign)
end
-- One slot came free: one waiter is woken, the first live one in the queue, whatever
-- the queue's length. The message is the same on every Redlock node of one release and
-- differs between releases, so a waiter listening on several nodes can tell copies apart.
local now = now_ms()
local woke = wake_next(KEYS[2], KEYS[3], ARGV[6], ARGV[8], ARGV[5], tonumber(ARGV[7]), now, nil,
  KEYS[6])
if woke then
  -- A shared waiter woken: the shared ones right behind it start with it (`wake_readers`).
  -- Their set, {K}:queue:shared, is named from the queue's name (same hash slot).
  wake_readers(KEYS[2], KEYS[3], KEYS[2] .. ':shared', ARGV[6], ARGV[8], ARGV[5],
    tonumber(ARGV[7]), now, woke)
  return answer(1, repaired, foreign)
end
-- Nobody queued (or nobody alive): anyone listening on the lock's channel, such as a
-- waiter of an older redlock-run, hears it there.
local published = publish(ARGV[8], ARGV[2], ARGV[5])
if type(published) == 'table' and published.err then
  return answer(3, repaired, foreign)
end
return answer(1, repaired, foreign)
