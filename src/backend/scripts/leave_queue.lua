-- A fair waiter gives up: leave the queue so nobody waits behind it.
-- KEYS[1]  the fair queue; KEYS[2] its heartbeats
-- ARGV[1]  this waiter's token
call('ZREM', KEYS[1], ARGV[1])
call('ZREM', KEYS[2], ARGV[1])
return 1
