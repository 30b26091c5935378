-- Prepended to every script at build time (backend/scripts.rs).
--
-- Each script's header names its keys and arguments, one a line, as `-- KEYS[2] queue: ...`
-- and `-- ARGV[3] ttl_ms: ...`: the names of its type in backend/scripts.rs, in the same
-- order (a test reads the headers and holds the two in step).
--
-- Scripts read TIME and then write: replicas and the AOF must get the writes, not the
-- script to run again later (the default from Redis 5; before, it must be asked for).
if redis.replicate_commands then
  redis.replicate_commands()
end

-- `call` runs a command as redis.call does, but a refusal by the user's ACL raises an error
-- that names the command (Redis 7 says only "can't run this command", Redis 6.2 wraps it),
-- so that redlock-run can say what the user may not do.
local function refused_by_acl(err)
  return string.find(err, 'NOPERM', 1, true)
    or string.find(err, "can't run this command", 1, true)
    or string.find(err, 'no permissions', 1, true)
end

local function call(command, ...)
  local reply = redis.pcall(command, ...)
  if type(reply) == 'table' and reply.err then
    local err = reply.err
    if refused_by_acl(err) then
      error('NOPERM the ACL of this user does not allow ' .. command
        .. ', which redlock-run needs')
    end
    error(err)
  end
  return reply
end

-- Raises the error `call` raises for a refused command unless this user's ACL allows
-- `command` with these arguments, without running it: Redis 7 and Valkey can tell
-- (`redis.acl_check_cmd`); on Redis 6.2 the command is run, in a form that changes nothing
-- (`harmless`, the same arguments by default).
local function may(harmless, command, ...)
  if redis.acl_check_cmd then
    if not redis.acl_check_cmd(command, ...) then
      error('NOPERM the ACL of this user does not allow ' .. command
        .. ', which redlock-run needs')
    end
  elseif harmless then
    harmless()
  else
    call(command, ...)
  end
end

-- Raises the error `call` raises for PUBLISH unless this user may announce a release on
-- `channel` (by SPUBLISH as well when `sharded` is '1', see `publish`), or could not hear
-- one there either: a user whose ACL lacks the channel has waiters that look often instead
-- of listening (wait.rs), while one that may listen but not announce would leave every
-- waiter asleep until the TTL. On Redis 6.2 PUBLISH is sent, with nothing in it, on
-- `channel`: this holder's own wake-up channel, where nobody else listens. Only the ACL is
-- judged here: a server that has no such command at all (renamed away; `acl_check_cmd`
-- raises for an unknown one) is let be, as before: its releases go unannounced, with a
-- warning, and its waiters look instead of listening when SUBSCRIBE is the one missing.
local function may_announce(sharded, channel)
  if redis.acl_check_cmd then
    local allowed = function(command, ...)
      local known, yes = pcall(redis.acl_check_cmd, command, ...)
      if not known then
        return nil
      end
      if yes or sharded ~= '1' then
        return yes
      end
      local sharded_known, sharded_yes = pcall(redis.acl_check_cmd, 'S' .. command, ...)
      return sharded_known and sharded_yes
    end
    local publish = allowed('PUBLISH', channel, '')
    if publish ~= false or not allowed('SUBSCRIBE', channel) then
      return
    end
  else
    local heard = redis.pcall('PUBLISH', channel, '')
    if not (type(heard) == 'table' and heard.err)
        or not refused_by_acl(heard.err)
        or string.find(heard.err, 'channel', 1, true) then
      return
    end
  end
  error('NOPERM the ACL of this user does not allow PUBLISH, which redlock-run needs')
end

-- What `key` holds: its value when a string, false when it does not exist, true when it
-- holds another type (another application's hash, list, ...: never ours).
local function read(key)
  local kind = call('TYPE', key).ok
  if kind == 'none' then
    return false
  elseif kind ~= 'string' then
    return true
  end
  return call('GET', key)
end


-- The server's clock in milliseconds.
local function now_ms()
  local time = call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Publishes `message` on `channel` and returns how many clients heard it, or the error
-- reply. With `sharded` ('1': in a Redis Cluster, where the channel carries the lock's hash
-- tag) by SPUBLISH, which only the master of the lock's slot carries and whose subscribers
-- follow the slot when it moves. When no sharded subscriber heard it, by PUBLISH as well:
-- a waiter subscribes the plain way where the server has no SPUBLISH (before Redis 7) or
-- its user may not use it, and one that subscribed on a Redis 6.2 master before the slot
-- moved to a Redis 7 one is still there (PUBLISH reaches every node of a cluster).
local function publish(sharded, channel, message)
  if sharded ~= '1' then
    return redis.pcall('PUBLISH', channel, message)
  end
  local heard = redis.pcall('SPUBLISH', channel, message)
  local refused = type(heard) == 'table' and heard.err
  if not refused and heard > 0 then
    return heard
  end
  local plain = redis.pcall('PUBLISH', channel, message)
  if refused or not (type(plain) == 'table' and plain.err) then
    return plain
  end
  return heard
end

-- How many clients listen on `channel`, asked without telling them anything (a message on
-- a waiter's wake-up channel makes it try again): by PUBSUB SHARDNUMSUB (with `sharded`,
-- as for `publish`) and PUBSUB NUMSUB, on this server. nil when unknown: no listener found
-- and a query refused (the user's ACL, a renamed command). A server without SHARDNUMSUB
-- (before Redis 7) has no sharded listeners.
local function listeners(sharded, channel)
  local count, unknown = 0, false
  for _, sub in ipairs(sharded == '1' and {'SHARDNUMSUB', 'NUMSUB'} or {'NUMSUB'}) do
    local reply = redis.pcall('PUBSUB', sub, channel)
    if type(reply) == 'table' and reply.err then
      if not (sub == 'SHARDNUMSUB' and string.find(reply.err, 'subcommand', 1, true)) then
        unknown = true
      end
    else
      count = count + (tonumber(reply[2]) or 0)
    end
  end
  if count == 0 and unknown then
    return nil
  end
  return count
end

-- How many entries of the woken waiters' record this script found that no redlock-run
-- wrote (see `woken_since`) and took out; returned by the scripts that report it, for a
-- warning.
local repaired = 0

-- When the waiter `token` was woken, by the record `woken`, in server ms; nil if it was
-- not. Another client may have written anything there: an entry that is not a time this
-- server has passed (not digits, or later than `now`) is taken out and the waiter counts
-- as not woken, so that it is woken again if it is alive. Trusted, a time in the future
-- would hold the queue up, and one that is not a number would fail every release.
local function woken_since(woken, token, now)
  local since = call('HGET', woken, token)
  if not since then
    return nil
  end
  local at = #since <= 15 and string.match(since, '^%d+$') and tonumber(since)
  if not at or at > now then
    call('HDEL', woken, token)
    repaired = repaired + 1
    return nil
  end
  return at
end

-- Drops the waiter `token`, found gone, from `queue` and `woken`, and the takeover it asked
-- for (`request`: the lock's {K}:replace, nil where the caller has none), which would
-- otherwise keep everybody else from a free slot until it ran out.
local function drop_waiter(queue, woken, token, request)
  call('ZREM', queue, token)
  call('HDEL', woken, token)
  -- Its entries in {K}:queue:shared and {K}:queue:who (--shared; named from the queue's
  -- name, in the same hash slot).
  call('HDEL', queue .. ':shared', token)
  call('HDEL', queue .. ':who', token)
  if request then
    local value = read(request)
    local its = '{"token":"' .. token .. '"'
    if type(value) == 'string' and string.sub(value, 1, #its) == its then
      call('DEL', request)
    end
  end
end

-- When the waiter `token` of `queue` was woken, as `woken_since`, if it may still try: one
-- woken more than `grace` ms ago that has not tried since counts as gone (its host vanished
-- with its connection still open), and is dropped (`drop_waiter`): then false. nil when it
-- was not woken.
local function woken_in_time(queue, woken, token, grace, now, request)
  local since = woken_since(woken, token, now)
  if since and now - since > grace then
    drop_waiter(queue, woken, token, request)
    return false
  end
  return since
end

-- The waiters' queue: `queue` (sorted set: token -> arrival, server ms) holds every waiter
-- that listens for its own wake-up on `prefix .. token`; `woken` (hash: token -> when it was
-- woken, server ms) those that were woken and have not tried since. A waiter is alive while
-- its subscription is: PUBLISH counts the clients that heard it, so a waiter whose process
-- died (its connection closed) is found, and dropped, by the first message it misses. One
-- woken too long ago is dropped too (`woken_in_time`). Returns the first live waiter from
-- position `from` (0-based) that is not already woken, woken now with `message`; nil when
-- there is none (or the user may not publish: then nobody can be woken this way).
-- `sharded` as for `publish`; `request` as for `drop_waiter`.
local function wake_next(queue, woken, prefix, sharded, message, grace, now, from, request)
  local at = from or 0
  -- Bounded, so that a queue of dead waiters cannot make one script run long; the rest
  -- are dropped by the next wake-up.
  for _ = 1, 64 do
    local first = call('ZRANGE', queue, at, at)[1]
    if not first then
      return nil
    end
    local since = woken_in_time(queue, woken, first, grace, now, request)
    if since then
      at = at + 1
    elseif since == nil then
      local heard = publish(sharded, prefix .. first, message)
      if type(heard) == 'table' and heard.err then
        return nil
      end
      if heard > 0 then
        call('HSET', woken, first, now)
        if call('PTTL', woken) < 3 * grace then
          call('PEXPIRE', woken, 3 * grace)
        end
        return first
      end
      drop_waiter(queue, woken, first, request)
    end
  end
  return nil
end

-- The lock's history and counters ({K}:history, a stream; {K}:stats, a hash: see
-- docs/design.md), written by the scripts that already run. Never in the way of the lock:
-- each command goes through `record`, which uses redis.pcall, and a refusal (the user's
-- ACL, a key of another type, anything else) stops the recording on that key for this
-- script and is returned as flags: 1 history refused, 2 counters refused, 4 history of
-- another type, 8 counters of another type; `recorder.refused` names the refused commands.
local recorder = {flags = 0, refused = '', history = nil, stats = nil, max = 0, off = {}}

-- Records to `history` and `stats` from here on, the stream capped at `max` entries; '0'
-- (or no keys) records nothing at all.
local function record_to(history, stats, max)
  recorder.max = tonumber(max) or 0
  if recorder.max > 0 and history and stats then
    recorder.history, recorder.stats = history, stats
  end
end

-- Runs `command` on the history (which = 1) or the counters (which = 2), the key first;
-- nil when not recording there, or refused (then noted, and that key left alone).
local function record(which, command, ...)
  local key = which == 1 and recorder.history or recorder.stats
  if not key or recorder.off[which] then
    return nil
  end
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    local err = reply.err
    local wrong_type = string.find(err, 'WRONGTYPE', 1, true)
    if command == 'HINCRBY' and not wrong_type and not refused_by_acl(err) then
      -- A counter that is not an integer (another client wrote it) or would overflow:
      -- it starts again from this increment (a reset, as after a lost Redis), rather than
      -- stop the counting, and with it the removal of a released holder's `slot:<i>`
      -- field, which the next acquisition would take for an expired lease, every time.
      local field, by = ...
      by = tostring(by)
      if string.match(by, '^%-?%d+$') then
        local again = redis.pcall('HSET', key, field, by)
        if not (type(again) == 'table' and again.err) then
          return tonumber(by)
        end
      end
    end
    recorder.off[which] = true
    if wrong_type then
      recorder.flags = recorder.flags + 4 * which
    else
      -- Not the ACL's doing: the server's reason goes with the command's name.
      local named = refused_by_acl(err) and command or command .. ' (' .. err .. ')'
      recorder.flags = recorder.flags + which
      recorder.refused = recorder.refused .. (recorder.refused == '' and '' or ' ') .. named
    end
    return nil
  end
  return reply
end

-- Whether this script records at all.
local function recording()
  return recorder.history ~= nil
end

-- Appends one event to the history: the arguments after `event` are name, value pairs; a
-- value that is nil, false or '' is left out. Returns the entry's ID (nil when not
-- recorded).
local function record_event(event, ...)
  if not recording() then
    return
  end
  local args = {'MAXLEN', recorder.max, '*', 'event', event}
  local fields, n = {...}, select('#', ...)
  for i = 1, n, 2 do
    local value = fields[i + 1]
    if value and value ~= '' then
      args[#args + 1] = fields[i]
      args[#args + 1] = tostring(value)
    end
  end
  return record(1, 'XADD', unpack(args))
end

-- Adds `by` to the counter `field`; returns its new value (nil when not counted).
local function count(field, by)
  if not recording() then
    return nil
  end
  return record(2, 'HINCRBY', field, by or 1)
end

-- A run that did not run its command (busy, timeout, superseded, already done): its
-- event and counter, and one more consecutive skip; returns the skips now (-1: unknown).
local function record_skip(event, token, holder, waited)
  record_event(event, 'token', token, 'holder', holder, 'waited_ms', waited)
  count(event)
  return count('skips') or -1
end

-- The token of a lock value ('{"token":"…"'), or ''.
local function token_of(value)
  return string.match(value, '^{"token":"([^"]*)"') or ''
end

-- When the holder `value` (its identity, at least) took slot `slot`, by the counters'
-- `slot:<slot>` field: server ms, or nil when the field is missing or another's. With
-- `forget`, a field of that holder is removed.
local function held_since(slot, value, forget)
  local field = record(2, 'HGET', 'slot:' .. slot)
  if type(field) ~= 'string' then
    return nil
  end
  local at, of = string.match(field, '^(%d+) (.*)$')
  local identity = string.match(value, '^{"token":"[^"]*"') or value
  if not at or string.sub(of, 1, #identity) ~= identity then
    return nil
  end
  if forget then
    record(2, 'HDEL', 'slot:' .. slot)
  end
  return tonumber(at)
end

-- The end of a hold seen by its holder or a forcer (released, lost, replaced, forced):
-- its event, with the time held when known, and the hold counters. The arguments after
-- `now` are more name, value pairs for the event; `value` is the holder's lock value.
local function record_hold_end(event, slot, value, now, ...)
  local since = held_since(slot, value, true)
  local held = since and math.max(now - since, 0) or nil
  local id = record_event(event, 'token', token_of(value), 'fence',
    string.match(value, '"fence":(%d+)'), 'holder', value, 'held_ms', held, ...)
  if held then
    count('hold_ms_sum', held)
    count('hold_count')
  end
  return id
end

-- The recording's outcome, the last elements of a script's reply: its flags, and the
-- commands refused.
local function recorded()
  return recorder.flags, recorder.refused
end

-- Shared mode (--shared; docs/design.md, "Shared mode"). While a group of shared holders
-- holds the lock, K holds a group value: '{"token":"<first share's token>:shared",...'
-- (no holder's identity, so no holder, old version or other client takes it for its own
-- or for free); each share is an entry of `shares` (hash: token -> its lock value) and of
-- `expiries` (sorted set: token -> when its lease ends, server ms).

-- Whether `value` (as `read` gives it) is a shared group's.
local function is_group(value)
  return type(value) == 'string' and string.match(value, '^{"token":"[^"]*:shared"') ~= nil
end

-- Takes out the shares whose lease ended before `now`, and those whose entry in `shares`
-- is gone (deleted by hand: that share is lost); returns how many remain.
local function prune_shares(shares, expiries, now)
  local gone = call('ZRANGE', expiries, '-inf', '(' .. now, 'BYSCORE', 'LIMIT', 0, 64)
  for _, token in ipairs(gone) do
    call('HDEL', shares, token)
    call('ZREM', expiries, token)
  end
  for _, token in ipairs(call('ZRANGE', expiries, 0, 63)) do
    if not call('HGET', shares, token) then
      call('ZREM', expiries, token)
    end
  end
  return call('ZCARD', expiries)
end

-- Wakes the live shared waiters (fields of `shared`, the hash `{K}:queue:shared`) queued
-- from position `at` (0-based) on, all of them, up to the first exclusive waiter, which
-- stays queued; `wake_next`'s other arguments.
local function wake_readers_from(queue, woken, shared, prefix, sharded, message, grace, now, at)
  for _ = 1, 64 do
    local next = call('ZRANGE', queue, at, at)[1]
    if not next or not call('HGET', shared, next) then
      return
    end
    local since = woken_in_time(queue, woken, next, grace, now, nil)
    if since then
      at = at + 1
    elseif since == nil then
      local heard = publish(sharded, prefix .. next, message)
      if type(heard) == 'table' and heard.err then
        return
      end
      if heard > 0 then
        call('HSET', woken, next, now)
        at = at + 1
      else
        drop_waiter(queue, woken, next, nil)
      end
    end
  end
end

-- After `first` was woken (`wake_next`): when it waits in shared mode, the live shared
-- waiters queued right behind it are woken too (`wake_readers_from`).
local function wake_readers(queue, woken, shared, prefix, sharded, message, grace, now, first)
  if not first or not call('HGET', shared, first) then
    return
  end
  local at = (call('ZRANK', queue, first) or 0) + 1
  wake_readers_from(queue, woken, shared, prefix, sharded, message, grace, now, at)
end

-- The reply of a command that a script can do without (a read that only saves work): nil
-- when the ACL refuses it (judged first where the server can, Redis 7 and Valkey) or it
-- fails, rather than the error `call` would raise.
local function optional(command, ...)
  if redis.acl_check_cmd and not redis.acl_check_cmd(command, ...) then
    return nil
  end
  local reply = redis.pcall(command, ...)
  if type(reply) == 'table' and reply.err then
    return nil
  end
  return reply
end
