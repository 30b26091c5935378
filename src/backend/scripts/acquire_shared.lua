-- Take a share of the lock (--shared), or report who keeps it from us and join the queue,
-- marked shared. See `is_group` in prelude.lua and docs/design.md, "Shared mode".
-- KEYS[1] lock: the lock's own key, K
-- KEYS[2] shares: the shares (hash: token -> that share's lock value)
-- KEYS[3] expiries: when each share's lease ends (sorted set: token -> server ms)
-- KEYS[4] fence: the fence counter
-- KEYS[5] queue: the waiters' queue (see acquire.lua)
-- KEYS[6] woken: the woken waiters (see `wake_next`)
-- KEYS[7] queue_shared: the queued waiters that wait in shared mode (hash: token -> '1');
--          a queued token not in it is exclusive
-- KEYS[8] waiting: the queued waiters' values (see acquire.lua)
-- KEYS[9] history: the lock's history (see `record_to` in prelude.lua)
-- KEYS[10] stats: the lock's counters (see `record_to`)
-- KEYS[11] done: the --once record (hash: ID -> '<when, server ms> <holder's value>')
-- KEYS[12] limit: the limit a semaphore with holders records ({K}:limit, see acquire.lua)
-- ARGV[1] identity: this holder's identity, the value's first bytes: {"token":"<uuid>"
-- ARGV[2] metadata: the rest of the value after the fence: ,"host":…}
-- ARGV[3] ttl_ms: the lease length in milliseconds (also how long a woken waiter has to try)
-- ARGV[4] token: this holder's token (its member in the queue)
-- ARGV[5] wake_prefix: the prefix of a waiter's own channel (its token follows)
-- ARGV[6] listening: '1' when this waiter listens for its wake-up, and so joins the queue
-- ARGV[7] arrival_ms: when this waiter joined, in ms since the epoch; '0': now
-- ARGV[8] sharded: '1' to publish on sharded channels (a Redis Cluster), '0' not
-- ARGV[9] history: --history, the most entries the history keeps; '0' records nothing
-- ARGV[10] waited_ms: how long this run has waited so far, in ms
-- ARGV[11] final: '1' when a busy answer is this run's last (it does not wait): recorded
--          as `busy`, a skip
-- ARGV[12] once_id: with --once, its ID; '' without
-- ARGV[13] remember_ms: --remember in ms: an older --once record counts as gone
-- Returns acquire.lua's reply: {1, 1, fence, 0, ...} when this holder now has a share;
--   {0, pttl, holder, 0, ...} when it must wait (holder: the exclusive holder's value, or,
--   for an exclusive waiter queued ahead of it, which new shares wait behind, that one's
--   value with '"waiting":"exclusive"' first); {-1, other, '', 0, ...} when the key is
--   used with another limit (as acquire.lua: a semaphore's, whose holders K need not
--   include); {4, 0, counter, 0, ...} when the fence counter is too
--   large; {3, 0, record, 0, ...} when the work is already done (--once; record:
--   '<when, server ms> <the holder's value>'): it has left the queue; each with acquire.lua's last elements (skips after a `busy` recorded, the
--   recording's flags and refused commands).
local lock, shares, expiries, fence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local queue, woken, shared = KEYS[5], KEYS[6], KEYS[7]
local identity, metadata, token, prefix = ARGV[1], ARGV[2], ARGV[4], ARGV[5]
local ttl = tonumber(ARGV[3])
record_to(KEYS[9], KEYS[10], ARGV[9])
local skips = -1
local function reply(status, number, text)
  local flags, refused = recorded()
  return {status, number, text, 0, repaired, '', '0', 0, skips, flags, refused}
end
-- A semaphore's key (--limit above 1) is refused, as to an exclusive run: by the limit its
-- holders record, or a holder's value in K (a group's ends '"limit":1}').
local declared = read(KEYS[12])
if type(declared) == 'string' and tonumber(declared) ~= 1 then
  return reply(-1, tonumber(declared) or 0, '')
end
local held = read(KEYS[1])
local other = type(held) == 'string' and string.match(held, '"limit":(%d+)}$')
if other and tonumber(other) ~= 1 then
  return reply(-1, tonumber(other), '')
end
local now = now_ms()
local live = prune_shares(shares, expiries, now)
local current = held
local group = is_group(current)
if group and live == 0 then
  -- Every share's lease ended: the group is gone with them.
  call('DEL', lock)
  current, group = false, false
end
if not group and live > 0 then
  -- Shares of a group whose key went (deleted, forced): they hold nothing any more.
  call('DEL', shares, expiries)
  live = 0
end

-- Keeps every key of the group alive for at least `ms`.
local function extend(ms)
  for _, key in ipairs({lock, shares, expiries}) do
    if call('PTTL', key) < ms then
      call('PEXPIRE', key, ms)
    end
  end
end

if group then
  local mine = call('HGET', shares, token)
  if mine and string.sub(mine, 1, #identity) == identity then
    -- An earlier attempt of ours landed but its reply was lost: it is ours.
    call('ZADD', expiries, now + ttl, token)
    extend(ttl)
    return reply(1, 1, string.match(mine, '"fence":(%d+)') or '0')
  end
end

local function wait_in_queue(pttl, holder)
  if ARGV[6] == '1' then
    local arrival = tonumber(ARGV[7])
    call('ZADD', queue, 'NX', arrival > 0 and arrival or now, token)
    call('HSET', shared, token, '1')
    local keep = 3 * ttl + (pttl >= 0 and pttl or 10000)
    for _, key in ipairs({queue, shared}) do
      if call('PTTL', key) < keep then
        call('PEXPIRE', key, keep)
      end
    end
  end
  if ARGV[11] == '1' then
    skips = record_skip('busy', token, identity .. metadata)
  end
  return reply(0, pttl, holder)
end

-- --once: work already done by a run of this key is not done again (as acquire.lua; a
-- record dated more than --remember ahead was not written by redlock-run, and goes).
if ARGV[12] ~= '' and call('TYPE', KEYS[11]).ok == 'hash' then
  local record = call('HGET', KEYS[11], ARGV[12])
  local when = record and tonumber(string.match(record, '^(%d+) '))
  local remember = tonumber(ARGV[13])
  if when and when > now + remember then
    call('HDEL', KEYS[11], ARGV[12])
  elseif when and when >= now - remember then
    call('ZREM', queue, token)
    call('HDEL', shared, token)
    record_event('already_done', 'token', token, 'holder', identity .. metadata)
    count('already_done')
    return reply(3, 0, record)
  end
end

-- Held exclusively, or by a value redlock-run did not write.
if current ~= false and not group then
  return wait_in_queue(call('PTTL', lock), type(current) == 'string' and current or '')
end

-- Free, or a group's: an exclusive waiter queued ahead of this one (anywhere, when this one
-- is not queued) keeps new shares out, so that writers are not starved. A dead one does
-- not: one woken too long ago is dropped (`woken_in_time`); with the lock free, one not
-- yet woken is woken now, and dropped if nobody hears it; while a group holds, one not yet
-- woken is dropped when nobody listens on its wake-up channel (`listeners`), not woken.
call('HDEL', woken, token)
local blocker, left = nil, -1
local at = 0
for _ = 1, 64 do
  local first = call('ZRANGE', queue, at, at)[1]
  if not first or first == token then
    break
  end
  if call('HGET', shared, first) then
    at = at + 1
  else
    local since = woken_in_time(queue, woken, first, ttl, now, nil)
    if since then
      blocker, left = first, ttl - (now - since)
      break
    elseif since == nil then
      if group then
        -- Probed without a message, which would make a live writer try again (and fail:
        -- shares hold) for every new share; one nobody listens for is gone. Unknown (the
        -- user may not use PUBSUB): counted live, and the last share's release finds it.
        if listeners(ARGV[8], prefix .. first) ~= 0 then
          blocker = first
          break
        end
        drop_waiter(queue, woken, first, nil)
      else
        local heard = publish(ARGV[8], prefix .. first, token .. '#shared')
        if type(heard) == 'table' and heard.err then
          blocker, left = first, ttl
          break
        elseif heard > 0 then
          call('HSET', woken, first, now)
          if call('PTTL', woken) < 3 * ttl then
            call('PEXPIRE', woken, 3 * ttl)
          end
          blocker, left = first, ttl
          break
        end
        drop_waiter(queue, woken, first, nil)
      end
    end
  end
end
if blocker then
  if group then
    left = call('PTTL', lock)
  end
  local who = call('HGET', KEYS[8], blocker)
  if not who or string.sub(who, 1, 1) ~= '{' then
    who = '{"token":"' .. blocker .. '"}'
  end
  return wait_in_queue(left, '{"waiting":"exclusive",' .. string.sub(who, 2))
end

local counter = redis.pcall('GET', fence_key)
local digits = type(counter) == 'string' and string.match(counter, '^0*(%d+)$')
if digits and (#digits > 18 or digits == string.rep('9', 18)) then
  return reply(4, 0, counter)
end
call('ZREM', queue, token)
call('HDEL', shared, token)
if call('EXISTS', fence_key) == 0 then
  local time = call('TIME')
  call('SET', fence_key, time[1] .. string.format('%06d', tonumber(time[2])))
end
call('INCR', fence_key)
local fence = call('GET', fence_key)
local value = identity .. ',"fence":' .. fence .. metadata
call('HSET', shares, token, value)
call('ZADD', expiries, now + ttl, token)
if not group then
  call('SET', lock, '{"token":"' .. token .. ':shared","fence":' .. fence .. metadata, 'PX', ttl)
end
extend(ttl)
record_event('acquired', 'token', token, 'fence', fence, 'holder', value, 'waited_ms',
  ARGV[10])
count('acquired')
count('wait_ms_sum', tonumber(ARGV[10]) or 0)
count('wait_count')
return reply(1, 1, fence)
