complete -c redlock-run -s k -l key -d 'Lock name; the Redis key is PREFIX + KEY (1 to 1024 bytes)' -r
complete -c redlock-run -s r -l redis -d 'Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db' -r
complete -c redlock-run -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as is' -r
complete -c redlock-run -s t -l ttl -d 'Lease length: 500ms, 30s, 5m; a bare number is seconds (at least 100ms)' -r
complete -c redlock-run -l renew-every -d 'How often the lease is renewed while the command runs [default: TTL/3]' -r
complete -c redlock-run -s w -l wait -d 'How long to wait for a busy lock: a duration, or \'forever\' [default: forever]' -r
complete -c redlock-run -s E -l conflict-exit-code -d 'Exit status when the lock was not obtained' -r
complete -c redlock-run -l kill-after -d 'After the lock is lost: SIGTERM, then SIGKILL after DUR (sooner if the lease would expire on the server first)' -r
complete -c redlock-run -l redis-timeout -d 'Time limit for connecting to Redis and for each Redis command' -r
complete -c redlock-run -s c -l shell -d 'Run CMD with /bin/sh -c instead of -- COMMAND ARGS' -r
complete -c redlock-run -s n -l no-wait -d 'Fail at once when the lock is busy (same as --wait 0)'
complete -c redlock-run -s q -l quiet -d 'Print only errors on stderr'
complete -c redlock-run -s v -l verbose -d 'Print each step (connect, acquire, renew, release) on stderr'
complete -c redlock-run -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -s V -l version -d 'Print version'
