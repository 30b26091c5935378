-- Delete the lock, only if it still holds this holder's value, and wake one waiter.
-- KEYS[1] slot: the slot this holder has
-- KEYS[2] queue: the waiters' queue
-- KEYS[3] woken: the woken waiters (see `wake_next`)
-- KEYS[4] limit: with a semaphore, its {K}:limit key
-- KEYS[5..] slots: with a semaphore, every slot; when none is held any more, the limit key
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
-- Returns {outcome, repaired}. outcome: 1 when released, 2 when kept until the --min-hold
-- mark, 0 when the key was already gone or belongs to someone else (then nothing is
-- touched: it is not ours), 3 when released but the announcement was refused (the user may
-- not publish on the channel): waiters then find the lock free only when they next look.
-- repaired: how many entries of the woken waiters' record were not wake-up times and were
-- taken out (see `woken_since`).
local current = read(KEYS[1])
if type(current) ~= 'string' or string.sub(current, 1, #ARGV[1]) ~= ARGV[1] then
  return {0, 0}
end
local keep = tonumber(ARGV[3])
if keep > 0 then
  call('PEXPIRE', KEYS[1], keep)
  if KEYS[4] and call('PTTL', KEYS[4]) < keep then
    call('SET', KEYS[4], ARGV[4], 'PX', keep)
  end
  return {2, 0}
end
call('DEL', KEYS[1])
if KEYS[4] then
  local held = false
  for i = 5, #KEYS do
    if call('EXISTS', KEYS[i]) == 1 then held = true end
  end
  if not held then call('DEL', KEYS[4]) end
end
if ARGV[5] == '' then
  return {1, 0}
end
-- One slot came free: one waiter is woken, the first live one in the queue, whatever
-- the queue's length. The message is the same on every Redlock node of one release and
-- differs between releases, so a waiter listening on several nodes can tell copies apart.
if wake_next(KEYS[2], KEYS[3], ARGV[6], ARGV[8], ARGV[5], tonumber(ARGV[7]), now_ms()) then
  return {1, repaired}
end
-- Nobody queued (or nobody alive): anyone listening on the lock's channel, such as a
-- waiter of an older redlock-run, hears it there.
local published = publish(ARGV[8], ARGV[2], ARGV[5])
if type(published) == 'table' and published.err then
  return {3, repaired}
end
return {1, repaired}
