-- Prepended to every script at build time (backend/scripts.rs).
--
-- `call` runs a command as redis.call does, but a refusal by the user's ACL raises an error
-- that names the command (Redis 7 says only "can't run this command", Redis 6.2 wraps it),
-- so that redlock-run can say what the user may not do.
local function call(command, ...)
  local reply = redis.pcall(command, ...)
  if type(reply) == 'table' and reply.err then
    local err = reply.err
    if string.find(err, 'NOPERM', 1, true)
        or string.find(err, "can't run this command", 1, true)
        or string.find(err, 'no permissions', 1, true) then
      error('NOPERM the ACL of this user does not allow ' .. command
        .. ', which redlock-run needs')
    end
    error(err)
  end
  return reply
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

