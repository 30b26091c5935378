# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_redlock_run_global_optspecs
    string join \n k/key= any s/shared x/exclusive r/redis= password-file= prefix= redis-timeout= t/ttl= renew-every= w/wait= n/no-wait E/conflict-exit-code= kill-after= limit= history= fair supersede replace min-hold= once= once-per= remember= max-runtime= stop-timeout= label= allow-eviction ping= max-skips= dry-run pass-redis-env c/shell= q/quiet v/verbose log-format= h/help V/version
end

function __fish_redlock_run_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_redlock_run_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_redlock_run_using_subcommand
    set -l cmd (__fish_redlock_run_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c redlock-run -n "__fish_redlock_run_needs_command" -s k -l key -d 'Lock name; the Redis key is PREFIX + KEY (1 to 1024 bytes)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s r -l redis -d 'Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db; redis+sentinel://HOST:PORT,…/MASTER for the master that Sentinels name; redis+cluster://HOST:PORT,… for a Redis Cluster. Repeat it (or comma-separate URLs in REDLOCK_REDIS) for a Redlock quorum over independent masters; 3 or 5 are usual' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l password-file -d 'Read the Redis password from the first line of FILE, for every URL that has none of its own (a password in a URL on the command line is visible to every local user in ps; REDLOCK_PASSWORD is the other way to keep it off the command line)' -r -F
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as is' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l redis-timeout -d 'Time limit for connecting to Redis and for each Redis command (taking the lock: up to twice this, as an attempt whose answer is lost is made once more)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s t -l ttl -d 'Lease length: 500ms, 30s, 5m; a bare number is seconds (at least 100ms)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l renew-every -d 'How often the lease is renewed while the command runs, at least 10ms [default: TTL/3]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s w -l wait -d 'How long to wait for a busy lock: a duration, or \'forever\' [default: forever]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s E -l conflict-exit-code -d 'Exit status when the lock was not obtained' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l kill-after -d 'After the lock is lost: SIGTERM, then SIGKILL after DUR (sooner if the lease would expire on the server first)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l limit -d 'Let up to N holders run at once (a semaphore); every user of the key must pass the same N' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l history -d 'Keep the last N events of the lock in Redis, with its counters; 0 records nothing' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l min-hold -d 'Keep the lock until DUR after it was taken, even if the command ends sooner (so the same cron line on hosts with skewed clocks runs once)' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l once -d 'Run the command only if no run of KEY with this ID has succeeded yet (within --remember); otherwise exit 0 without running it' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l once-per -d 'Run the command only if no run of KEY with --once-per succeeded whose arrival lies within DUR/2 of this one\'s, by the Redis server\'s clock; otherwise exit 0 without running it' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l remember -d 'How long the record of a --once or --once-per run lasts [default: 7d]' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l max-runtime -d 'Terminate the command after DUR (SIGTERM, SIGKILL after --kill-after) and exit 124' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l stop-timeout -d 'After a SIGTERM, SIGINT or SIGHUP to redlock-run: SIGKILL the command\'s process group if it is still there DUR later, release the lock and exit 128+N' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l label -d 'What waiters and `status` show of this holder besides its host, pid and program\'s name (a pipeline URL, "deploy of v1.2 by alice"); at most 256 bytes. The command\'s arguments are never shown to others' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l ping -d 'Dead-man pings (Healthchecks.io style): GET URL/start when the command starts, URL when it exits 0, URL/N when it fails with status N, URL/fail when the lock was lost or the command could not be run' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l max-skips -d 'With --ping: the N-th consecutive run that skipped its command (busy, --wait ran out, superseded), and every one after it, pings URL/fail' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s c -l shell -d 'Run CMD with /bin/sh -c instead of -- COMMAND ARGS' -r
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l log-format -d 'What redlock-run writes on stderr: lines of text, or one JSON object a line (time, level, event, key, fence, message) for log collectors' -r -f -a "text\t''
json\t''"
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l any -d 'With several -k: take the first free lock among them, in the order given (a pool)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s s -l shared -d 'Take the lock in shared mode: any number of shared holders hold KEY together'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s x -l exclusive -d 'Take the lock in exclusive mode: the default, for scripts that spell it out'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s n -l no-wait -d 'Fail at once when the lock is busy (same as --wait 0)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l fair -d 'Take the lock in the order the waiters arrived (first come, first served)'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l supersede -d 'While waiting, give way to a newer --supersede run of the same lock: exit 77'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l replace -d 'Take over from the current holder: ask it to stop, and be served next'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l allow-eviction -d 'Take the lock even on a Redis that may evict it (maxmemory set with a maxmemory-policy other than noeviction): Redis may then delete a held lock under memory pressure and let a second holder in. Without it, such a server is refused'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l dry-run -d 'Connect, run every check a real run makes and read the lock\'s state, then say what would happen; write nothing to Redis and run nothing'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -l pass-redis-env -d 'Leave REDLOCK_REDIS and REDLOCK_PASSWORD in the command\'s environment; by default they are removed from it when they hold a password'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s q -l quiet -d 'Print only errors on stderr'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s v -l verbose -d 'Print each step (connect, acquire, renew, release) on stderr'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -s V -l version -d 'Print version'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "status" -d 'Show who holds a lock; exit 0 when held, 1 when free, 125 on error'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "list" -d 'List every lock under the prefix (SCAN, never KEYS), one line each'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "release" -d 'Remove a stuck lock, saying whose it was; a redlock-run holder\'s command is then terminated at the holder\'s next renewal'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "metrics" -d 'Print every lock\'s counters under the prefix in the Prometheus text format, for node_exporter\'s textfile collector; exit 0, or 125 on error'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "check" -d 'A monitoring plugin (Nagios, Icinga, Sensu) for one lock: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN, with one line on stdout'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "history" -d 'Show a lock\'s last events, newest last, one line each: acquired, released, lost, expired, forced, abandoned, busy, timeout, superseded, replaced, already_done'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "serve" -d 'A read-only HTTP server over every lock under the prefix: a board in the browser (/), its JSON (/api/locks), /metrics for Prometheus and /healthz; runs until SIGTERM or SIGINT (exit 0), or exits 125 when it cannot listen'
complete -c redlock-run -n "__fish_redlock_run_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s k -l key -d 'Lock name' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s r -l redis -d 'Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db; redis+sentinel://HOST:PORT,…/MASTER for the master that Sentinels name; redis+cluster://HOST:PORT,… for a Redis Cluster. Repeat it (or comma-separate URLs in REDLOCK_REDIS) for a Redlock quorum over independent masters; 3 or 5 are usual' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l password-file -d 'Read the Redis password from the first line of FILE, for every URL that has none of its own (a password in a URL on the command line is visible to every local user in ps; REDLOCK_PASSWORD is the other way to keep it off the command line)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as is' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l redis-timeout -d 'Time limit for connecting to Redis and for each Redis command (taking the lock: up to twice this, as an attempt whose answer is lost is made once more)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l log-format -d 'What redlock-run writes on stderr: lines of text, or one JSON object a line (time, level, event, key, fence, message) for log collectors' -r -f -a "text\t''
json\t''"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -l json -d 'Print one JSON object instead of a line'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -s r -l redis -d 'Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db; redis+sentinel://HOST:PORT,…/MASTER for the master that Sentinels name; redis+cluster://HOST:PORT,… for a Redis Cluster. Repeat it (or comma-separate URLs in REDLOCK_REDIS) for a Redlock quorum over independent masters; 3 or 5 are usual' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l password-file -d 'Read the Redis password from the first line of FILE, for every URL that has none of its own (a password in a URL on the command line is visible to every local user in ps; REDLOCK_PASSWORD is the other way to keep it off the command line)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as is' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l redis-timeout -d 'Time limit for connecting to Redis and for each Redis command (taking the lock: up to twice this, as an attempt whose answer is lost is made once more)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l log-format -d 'What redlock-run writes on stderr: lines of text, or one JSON object a line (time, level, event, key, fence, message) for log collectors' -r -f -a "text\t''
json\t''"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -l json -d 'Print a JSON array instead of lines'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -s k -l key -d 'Lock name' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -s r -l redis -d 'Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db; redis+sentinel://HOST:PORT,…/MASTER for the master that Sentinels name; redis+cluster://HOST:PORT,… for a Redis Cluster. Repeat it (or comma-separate URLs in REDLOCK_REDIS) for a Redlock quorum over independent masters; 3 or 5 are usual' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l password-file -d 'Read the Redis password from the first line of FILE, for every URL that has none of its own (a password in a URL on the command line is visible to every local user in ps; REDLOCK_PASSWORD is the other way to keep it off the command line)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as is' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l redis-timeout -d 'Time limit for connecting to Redis and for each Redis command (taking the lock: up to twice this, as an attempt whose answer is lost is made once more)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l log-format -d 'What redlock-run writes on stderr: lines of text, or one JSON object a line (time, level, event, key, fence, message) for log collectors' -r -f -a "text\t''
json\t''"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -l force -d 'Required: releasing someone else\'s lock lets a second holder in'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand metrics" -s r -l redis -d 'Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db; redis+sentinel://HOST:PORT,…/MASTER for the master that Sentinels name; redis+cluster://HOST:PORT,… for a Redis Cluster. Repeat it (or comma-separate URLs in REDLOCK_REDIS) for a Redlock quorum over independent masters; 3 or 5 are usual' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand metrics" -l password-file -d 'Read the Redis password from the first line of FILE, for every URL that has none of its own (a password in a URL on the command line is visible to every local user in ps; REDLOCK_PASSWORD is the other way to keep it off the command line)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand metrics" -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as is' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand metrics" -l redis-timeout -d 'Time limit for connecting to Redis and for each Redis command (taking the lock: up to twice this, as an attempt whose answer is lost is made once more)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand metrics" -l log-format -d 'What redlock-run writes on stderr: lines of text, or one JSON object a line (time, level, event, key, fence, message) for log collectors' -r -f -a "text\t''
json\t''"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand metrics" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -s k -l key -d 'Lock name' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l max-held -d 'CRITICAL when the current holder has held the lock longer than DUR' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l warn-held -d 'WARNING when the current holder has held the lock longer than DUR' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l max-skips -d 'CRITICAL at the N-th consecutive run that skipped its command (busy, --wait ran out, superseded; work found already done is not a skip)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l warn-skips -d 'WARNING at the N-th consecutive run that did not run its command' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l max-since-success -d 'CRITICAL when no run of the lock has succeeded for longer than DUR (or none ever has)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l warn-since-success -d 'WARNING when no run of the lock has succeeded for longer than DUR (or none ever has)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -s r -l redis -d 'Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db; redis+sentinel://HOST:PORT,…/MASTER for the master that Sentinels name; redis+cluster://HOST:PORT,… for a Redis Cluster. Repeat it (or comma-separate URLs in REDLOCK_REDIS) for a Redlock quorum over independent masters; 3 or 5 are usual' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l password-file -d 'Read the Redis password from the first line of FILE, for every URL that has none of its own (a password in a URL on the command line is visible to every local user in ps; REDLOCK_PASSWORD is the other way to keep it off the command line)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as is' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l redis-timeout -d 'Time limit for connecting to Redis and for each Redis command (taking the lock: up to twice this, as an attempt whose answer is lost is made once more)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -l log-format -d 'What redlock-run writes on stderr: lines of text, or one JSON object a line (time, level, event, key, fence, message) for log collectors' -r -f -a "text\t''
json\t''"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -s k -l key -d 'Lock name' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -s n -l lines -d 'How many of the last events to show, 1 to 10000' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -s r -l redis -d 'Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db; redis+sentinel://HOST:PORT,…/MASTER for the master that Sentinels name; redis+cluster://HOST:PORT,… for a Redis Cluster. Repeat it (or comma-separate URLs in REDLOCK_REDIS) for a Redlock quorum over independent masters; 3 or 5 are usual' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l password-file -d 'Read the Redis password from the first line of FILE, for every URL that has none of its own (a password in a URL on the command line is visible to every local user in ps; REDLOCK_PASSWORD is the other way to keep it off the command line)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as is' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l redis-timeout -d 'Time limit for connecting to Redis and for each Redis command (taking the lock: up to twice this, as an attempt whose answer is lost is made once more)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l log-format -d 'What redlock-run writes on stderr: lines of text, or one JSON object a line (time, level, event, key, fence, message) for log collectors' -r -f -a "text\t''
json\t''"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -l json -d 'Print one JSON object a line instead of text'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -s f -l follow -d 'After the last events, keep printing new ones as they are recorded, until interrupted'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand serve" -l listen -d 'Address and port to listen on (HTTP): ADDR:PORT or `[IPV6]:PORT`; port 0 picks a free port, logged at start' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand serve" -l auth-file -d 'Ask every client for HTTP basic credentials: the first line of FILE, as user:password' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand serve" -s r -l redis -d 'Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db; redis+sentinel://HOST:PORT,…/MASTER for the master that Sentinels name; redis+cluster://HOST:PORT,… for a Redis Cluster. Repeat it (or comma-separate URLs in REDLOCK_REDIS) for a Redlock quorum over independent masters; 3 or 5 are usual' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand serve" -l password-file -d 'Read the Redis password from the first line of FILE, for every URL that has none of its own (a password in a URL on the command line is visible to every local user in ps; REDLOCK_PASSWORD is the other way to keep it off the command line)' -r -F
complete -c redlock-run -n "__fish_redlock_run_using_subcommand serve" -l prefix -d 'Prefix of the Redis key; \'\' uses KEY as is' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand serve" -l redis-timeout -d 'Time limit for connecting to Redis and for each Redis command (taking the lock: up to twice this, as an attempt whose answer is lost is made once more)' -r
complete -c redlock-run -n "__fish_redlock_run_using_subcommand serve" -l log-format -d 'What redlock-run writes on stderr: lines of text, or one JSON object a line (time, level, event, key, fence, message) for log collectors' -r -f -a "text\t''
json\t''"
complete -c redlock-run -n "__fish_redlock_run_using_subcommand serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status list release metrics check history serve help" -f -a "status" -d 'Show who holds a lock; exit 0 when held, 1 when free, 125 on error'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status list release metrics check history serve help" -f -a "list" -d 'List every lock under the prefix (SCAN, never KEYS), one line each'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status list release metrics check history serve help" -f -a "release" -d 'Remove a stuck lock, saying whose it was; a redlock-run holder\'s command is then terminated at the holder\'s next renewal'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status list release metrics check history serve help" -f -a "metrics" -d 'Print every lock\'s counters under the prefix in the Prometheus text format, for node_exporter\'s textfile collector; exit 0, or 125 on error'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status list release metrics check history serve help" -f -a "check" -d 'A monitoring plugin (Nagios, Icinga, Sensu) for one lock: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN, with one line on stdout'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status list release metrics check history serve help" -f -a "history" -d 'Show a lock\'s last events, newest last, one line each: acquired, released, lost, expired, forced, abandoned, busy, timeout, superseded, replaced, already_done'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status list release metrics check history serve help" -f -a "serve" -d 'A read-only HTTP server over every lock under the prefix: a board in the browser (/), its JSON (/api/locks), /metrics for Prometheus and /healthz; runs until SIGTERM or SIGINT (exit 0), or exits 125 when it cannot listen'
complete -c redlock-run -n "__fish_redlock_run_using_subcommand help; and not __fish_seen_subcommand_from status list release metrics check history serve help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
