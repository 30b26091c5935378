-- Read a key as `status` and `list` show it, in one step.
-- KEYS[1] key: the key
-- Returns {type, pttl, value}: value only for a string ('' otherwise); type 'none' when
-- the key does not exist.
local kind = call('TYPE', KEYS[1]).ok
local value = ''
if kind == 'string' then
  value = call('GET', KEYS[1])
end
return {kind, call('PTTL', KEYS[1]), value}
