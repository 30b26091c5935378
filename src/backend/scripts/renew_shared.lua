-- Extend this holder's share (--shared), only if it is still one of the group's.
-- KEYS[1] lock: the lock's own key, K, holding the group's value (see `is_group`)
-- KEYS[2] shares: the shares (see acquire_shared.lua)
-- KEYS[3] expiries: when each share's lease ends
-- ARGV[1] identity: the leading bytes of this holder's value
-- ARGV[2] ttl_ms: the lease length in milliseconds
-- ARGV[3] token: this holder's token
-- Returns {1, '', 0, ''} when extended, {0, '', 0, ''} when the share is gone (expired,
-- forced out, the server lost it) or K no longer holds a group (renew.lua's reply).
local lock, shares, expiries = KEYS[1], KEYS[2], KEYS[3]
local ttl = tonumber(ARGV[2])
local now = now_ms()
prune_shares(shares, expiries, now)
local mine = call('HGET', shares, ARGV[3])
if not is_group(read(lock)) or not mine or string.sub(mine, 1, #ARGV[1]) ~= ARGV[1] then
  return {0, '', 0, ''}
end
call('ZADD', expiries, 'XX', now + ttl, ARGV[3])
for _, key in ipairs({lock, shares, expiries}) do
  if call('PTTL', key) < ttl then
    call('PEXPIRE', key, ttl)
  end
end
return {1, '', 0, ''}
