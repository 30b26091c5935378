-- Raise the fence counter to at least a given value (Redlock: the fence a holder was given
-- must be recorded on a majority of the nodes, so that the next holder's majority, which
-- shares a node with it, counts past it).
-- KEYS[1] fence: the fence counter
-- ARGV[1] fence: the fence handed out, in decimal digits
-- Returns 1 when raised, 0 when the counter was there already. The numbers are compared as
-- digit strings (longer is larger, then by digits): Lua's doubles lose digits past 2^53.
local current = call('GET', KEYS[1]) or '0'
local wanted = ARGV[1]
if #current < #wanted or (#current == #wanted and current < wanted) then
  call('SET', KEYS[1], wanted)
  return 1
end
return 0
