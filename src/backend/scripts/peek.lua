-- Read a key as `status` and `list` show it, in one step.
-- KEYS[1] key: the key
-- Returns {type, pttl, value, length}: value only for a string ('' otherwise), at most its
-- first 8192 bytes (MAX_VALUE_LEN in layout: longer is never a value of ours), and the
-- string's whole length; type 'none' when the key does not exist. A user whose ACL lacks
-- STRLEN or GETRANGE has the value read whole here (the reply is cut all the same).
local kind = call('TYPE', KEYS[1]).ok
local value = ''
local length = 0
if kind == 'string' then
  length = optional('STRLEN', KEYS[1])
  if length and length <= 8192 then
    value = call('GET', KEYS[1])
  else
    value = length and optional('GETRANGE', KEYS[1], 0, 8191)
    if not value then
      local whole = call('GET', KEYS[1])
      length = #whole
      value = string.sub(whole, 1, 8192)
    end
  end
end
return {kind, call('PTTL', KEYS[1]), value, length}
