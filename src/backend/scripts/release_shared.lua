-- Give up this holder's share (--shared); the last share's release deletes the group and
-- wakes the waiters at the queue's head (one exclusive, or the leading shared ones).
-- KEYS[1] lock: the lock's own key, K, holding the group's value (see `is_group`)
-- KEYS[2] shares: the shares (see acquire_shared.lua)
-- KEYS[3] expiries: when each share's lease ends
-- KEYS[4] queue: the waiters' queue
-- KEYS[5] woken: the woken waiters (see `wake_next`)
-- KEYS[6] queue_shared: the queued waiters that wait in shared mode
-- KEYS[7] replace: a takeover asked for by --replace (see `drop_waiter`)
-- KEYS[8] history: the lock's history (see `record_to` in prelude.lua)
-- KEYS[9] stats: the lock's counters (see `record_to`)
-- KEYS[10] done: the --once record (see acquire.lua)
-- ARGV[1] identity: the leading bytes of this holder's value
-- ARGV[2] token: this holder's token
-- ARGV[3] release_channel: the channel every waiter also listens on
-- ARGV[4] keep_ms: milliseconds left of --min-hold (0: none): the share is kept that long
-- ARGV[5] notice: the message announcing this release; '' to wake no one
-- ARGV[6] wake_prefix: the prefix of a waiter's own channel (its token follows)
-- ARGV[7] grace_ms: how long a woken waiter has to try before it counts as gone
-- ARGV[8] sharded: '1' to publish on sharded channels (a Redis Cluster), '0' not
-- ARGV[9] history: --history (see acquire.lua); '0' records nothing
-- ARGV[10] event: what ended the share, recorded: 'released', 'forced' (`release --force`),
--          '' nothing (an attempt letting go of what it took); a share found gone is
--          recorded as `lost` unless '' or 'forced'
-- ARGV[11] exit_code: the command's status as redlock-run reports it; '' when unknown
-- ARGV[12] value: this holder's value, for a loss's record
-- ARGV[13] once_id: '' unless the command succeeded under --once: then its ID, whose work
--          is recorded as done in this same step as the release (only by a share still
--          held)
-- ARGV[14] remember_ms: how long the record lasts (--remember), in ms
-- Returns release.lua's reply: {outcome, repaired, 0, flags, refused}; outcome 1 released, 2 kept
-- until the --min-hold mark, 0 when the share was already gone, 3 when released but the
-- announcement was refused.
local lock, shares, expiries = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
record_to(KEYS[8], KEYS[9], ARGV[9])
local function answer(outcome)
  local flags, refused = recorded()
  return {outcome, repaired, 0, flags, refused}
end
prune_shares(shares, expiries, now)
local mine = call('HGET', shares, ARGV[2])
if not is_group(read(lock)) or not mine or string.sub(mine, 1, #ARGV[1]) ~= ARGV[1] then
  if ARGV[10] == 'released' then
    record_event('lost', 'token', ARGV[2], 'holder', ARGV[12], 'exit_code', ARGV[11])
    count('lost')
  end
  return answer(0)
end
local keep = tonumber(ARGV[4])
if keep > 0 then
  call('ZADD', expiries, 'XX', now + keep, ARGV[2])
  -- The group lives as long as the longest share now: this one's lease is cut to its mark.
  local last = call('ZRANGE', expiries, -1, -1, 'WITHSCORES')
  local left = math.max(math.floor(tonumber(last[2]) - now), 1)
  for _, key in ipairs({lock, shares, expiries}) do
    call('PEXPIRE', key, left)
  end
  return answer(2)
end
call('HDEL', shares, ARGV[2])
call('ZREM', expiries, ARGV[2])
local kind = ARGV[13] ~= '' and call('TYPE', KEYS[10]).ok
if kind == 'hash' or kind == 'none' then
  call('HSET', KEYS[10], ARGV[13], now .. ' ' .. mine)
  if call('PTTL', KEYS[10]) < tonumber(ARGV[14]) then
    call('PEXPIRE', KEYS[10], ARGV[14])
  end
end
if ARGV[10] ~= '' then
  record_event(ARGV[10], 'token', ARGV[2], 'fence', string.match(mine, '"fence":(%d+)'),
    'holder', mine, 'exit_code', ARGV[11])
end
if call('ZCARD', expiries) > 0 then
  -- Others still hold shares: the group lives as long as the longest of them.
  local last = call('ZRANGE', expiries, -1, -1, 'WITHSCORES')
  local left = math.max(math.floor(tonumber(last[2]) - now), 1)
  for _, key in ipairs({lock, shares, expiries}) do
    call('PEXPIRE', key, left)
  end
  return answer(1)
end
call('DEL', lock, shares, expiries)
if ARGV[5] == '' then
  return answer(1)
end
local grace = tonumber(ARGV[7])
local woke = wake_next(KEYS[4], KEYS[5], ARGV[6], ARGV[8], ARGV[5], grace, now, nil, KEYS[7])
if woke then
  wake_readers(KEYS[4], KEYS[5], KEYS[6], ARGV[6], ARGV[8], ARGV[5], grace, now, woke)
  return answer(1)
end
local published = publish(ARGV[8], ARGV[3], ARGV[5])
if type(published) == 'table' and published.err then
  return answer(3)
end
return answer(1)
