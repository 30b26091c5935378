//! Fault injection: contention, Redis restarted empty, frozen or blackholed, slow, resetting
//! connections, losing replies, unreachable at release; a wrapper SIGKILLed under load; lock
//! keys holding other applications' data. Every protected command records its critical
//! section in a shared history (see `support::history`), and every test ends by checking it:
//! mutual exclusion is judged from what the commands recorded, not from what redlock-run
//! says.
//!
//! Times compared with a lease's end on the server come from Redis itself: a `PTTL` read
//! after noting the time gives a lower bound on the moment the key expires (see
//! [`read_lease`]). Every wait is for an event (a file, a subscription, a process's
//! death, a key's PTTL); the few fixed pauses are durations a fault must last, and say so.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::history::{ms, now_ns, Checked, Ending, History, Interval};
use crate::support::proxy::{Fault, FaultProxy};
use crate::support::*;

const MS: i64 = 1_000_000;

/// The lease on `key` as the server sees it now: its PTTL in ms, and a lower bound on when
/// it expires, in `CLOCK_REALTIME` ns. The server computed `expire_ms - now_ms` at or after
/// `before`, truncating to whole milliseconds (hence the 1 ms). `None` without a lease.
fn read_lease(server: &RedisServer, key: &str) -> Option<(i64, i64)> {
    let before = now_ns();
    let pttl = server.pttl(key);
    (pttl > 0).then(|| (pttl, before + (pttl - 1) * MS))
}

/// A lower bound on when the lease on `key` ends on the server; see [`read_lease`].
fn lease_end_after(server: &RedisServer, key: &str) -> Option<i64> {
    read_lease(server, key).map(|(_, end)| end)
}

/// Waits until the lease on `key` was renewed a moment ago (PTTL within 100 ms of the full
/// `ttl`), so that the next renewal is most of a period away and cannot land between this
/// read and the fault the caller injects next. Returns the lease's end (lower bound).
#[track_caller]
fn lease_end_after_fresh_renewal(server: &RedisServer, key: &str, ttl: Duration) -> i64 {
    let fresh = ttl.as_millis() as i64 - 100;
    let mut end = 0;
    wait_until(
        Duration::from_secs(15),
        "a renewal of the lease",
        || match read_lease(server, key) {
            Some((pttl, bound)) if pttl >= fresh => {
                end = bound;
                true
            }
            _ => false,
        },
    );
    end
}

/// Fills the server's script cache the way any Redis that has served redlock-run before has
/// it: one run that acquires, renews (100 ms renewals of a 300 ms lease) and releases. Used
/// where a test's fault must hit the one command that matters rather than a `NOSCRIPT`
/// round trip; see also `latency_on_a_fresh_redis_causes_no_false_loss`.
fn warm_script_cache(server: &RedisServer) {
    server
        .cmd()
        .args(["-k", "warm-up", "-t", "300ms", "--", "sleep", "0.4"])
        .run()
        .assert_code(0);
    let scripts: i64 = server
        .info("memory")
        .lines()
        .find_map(|line| line.strip_prefix("number_of_cached_scripts:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("number_of_cached_scripts in INFO memory");
    assert!(
        scripts >= 3,
        "only {scripts} scripts cached after a warm-up run"
    );
}

/// A section body that touches `ready`, then holds until SIGTERM, which it records (the
/// time, in `term`) and obeys at once. The `sleep` runs in the background so that the trap
/// runs the moment the signal arrives.
fn hold_until_term(dir: &TempDir, ready: &str, term: &str) -> String {
    format!(
        "trap 'date +%s%N > \"{term}\"; exit 143' TERM\ntouch '{ready}'\nsleep 100 &\nwait",
        term = dir.join(term).display(),
        ready = dir.join(ready).display()
    )
}

/// A section body that touches `ready`, then runs until SIGKILL: each SIGTERM is recorded
/// (a time per line in `term`) and ignored.
fn hold_ignoring_term(dir: &TempDir, ready: &str, term: &str) -> String {
    format!(
        "trap 'date +%s%N >> \"{term}\"' TERM\ntouch '{ready}'\nwhile :; do sleep 0.02; done",
        term = dir.join(term).display(),
        ready = dir.join(ready).display()
    )
}

/// Starts a holder whose command is the section `holder` of `history`, running `body`;
/// returns once `body` has touched `ready`.
#[track_caller]
fn start_section_holder(history: &History, dir: &TempDir, body: &str, wrapper: Wrapper) -> Running {
    let script = history.section(dir, "holder", body);
    start_holding(wrapper, &script, &dir.join("ready"))
}

/// Starts a holder whose [`Job`] `label`, ending with status `code`, runs as a recorded
/// section of `history` with that label.
#[track_caller]
fn hold_in_section(
    history: &History,
    dir: &TempDir,
    label: &str,
    code: i32,
    wrapper: Wrapper,
) -> Holder {
    let job = Job::new(dir, label).exit_code(code);
    let script = history.section(dir, label, &job.body());
    job.start_as(wrapper, &script)
}

/// Nanosecond timestamps, one per line, as `date +%s%N` writes them.
#[track_caller]
fn read_times(dir: &TempDir, name: &str) -> Vec<i64> {
    dir.read(name)
        .lines()
        .map(|line| {
            line.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: not a `date +%s%N` time: {line:?}"))
        })
        .collect()
}

#[track_caller]
fn only<'a>(checked: &'a Checked, label: &str) -> &'a Interval {
    match checked.labelled(label)[..] {
        [one] => one,
        ref many => panic!(
            "expected one {label:?} section, found {}\n{}",
            many.len(),
            checked.describe()
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Contention

/// 40 wrappers, each running 10 separate redlock-run invocations of a locked read-modify-
/// write of a counter file: the count is exact and no two sections overlap.
#[test]
fn forty_contending_wrappers_count_exactly_and_never_overlap() {
    const WRAPPERS: usize = 40;
    const ROUNDS: usize = 10;
    let _load = loading_the_machine();
    let server = RedisServer::start();
    let dir = TempDir::new("stress");
    let history = History::new(&dir);
    let counter = dir.join("counter");
    fs::write(&counter, "0\n").unwrap();
    let script = history.section(
        &dir,
        "incr",
        &format!(
            "n=$(cat '{c}')\necho $((n + 1)) > '{c}'",
            c = counter.display()
        ),
    );

    let started = Instant::now();
    let url = server.url();
    run_in_parallel(WRAPPERS, ROUNDS, move || {
        Wrapper::new(&url)
            .args(["-k", "counter", "--"])
            .arg(&script)
            .timeout(Duration::from_secs(120))
    });
    let wall = started.elapsed();

    let checked = history.check();
    checked
        .assert_count(WRAPPERS * ROUNDS)
        .assert_all_recorded()
        .assert_no_overlap();
    assert_eq!(
        fs::read_to_string(&counter).unwrap().trim(),
        (WRAPPERS * ROUNDS).to_string(),
        "lost updates"
    );
    assert_eq!(server.dbsize(), 0, "keys left: {:?}", server.keys());

    let sections = &checked.intervals;
    let held: i64 = sections.iter().map(|s| s.end - s.start).sum();
    let gaps: Vec<i64> = sections.windows(2).map(|w| w[1].start - w[0].end).collect();
    let max_gap = gaps.iter().copied().max().unwrap_or(0);
    eprintln!(
        "contention: {WRAPPERS} wrappers x {ROUNDS} rounds in {wall:.2?} wall time; \
         sections held the lock {:.0}ms in all (mean {:.1}ms); hand-over gap mean {:.1}ms, \
         max {:.1}ms",
        ms(held),
        ms(held) / sections.len() as f64,
        ms(gaps.iter().sum::<i64>()) / gaps.len().max(1) as f64,
        ms(max_gap)
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Redis restarted empty

/// Redis restarted empty (no persistence) while a holder runs and three contenders wait. A
/// contender may take the fresh Redis at once while the holder still runs: the documented
/// limit of a single instance. The holder notices at its next renewal, its command gets
/// SIGTERM, it exits 76, and any overlap lasts at most a renewal period plus a margin.
#[test]
fn redis_restarted_empty_overlaps_by_at_most_one_renewal_period() {
    let _timing = timing_sensitive();
    let mut server = RedisServer::start();
    let dir = TempDir::new("restart");
    let history = History::new(&dir);
    let renew_every = Duration::from_millis(500);
    let margin = Duration::from_secs(1);
    let lock = ["-k", "rs", "-t", "6s", "--renew-every", "500ms"];

    let body = hold_until_term(&dir, "ready", "term");
    let holder = start_section_holder(&history, &dir, &body, server.cmd().args(lock));
    let contender_script = history.section(&dir, "contender", "sleep 0.2");
    let contenders: Vec<Running> = (0..3)
        .map(|_| {
            server
                .cmd()
                .args(lock)
                .arg("--")
                .arg(&contender_script)
                .spawn()
        })
        .collect();
    wait_until(Duration::from_secs(15), "3 contenders to subscribe", || {
        server.waiters_of("rs") == 3
    });

    server.stop();
    server.restart();
    let restarted = now_ns();

    let out = holder.wait_within(Duration::from_secs(15));
    out.assert_code(76).assert_stderr_contains("lock lost");
    let term = read_times(&dir, "term");
    assert_eq!(term.len(), 1, "the holder's command was not signalled");
    for contender in contenders {
        contender
            .wait_within(Duration::from_secs(30))
            .assert_code(0);
    }

    let checked = history.check();
    checked.assert_count(4);
    let holder = only(&checked, "holder");
    eprintln!(
        "restart: SIGTERM {:.1}ms and death {:.1}ms after Redis was back; history:\n{}{}",
        ms(term[0] - restarted),
        ms(holder.end - restarted),
        checked.describe(),
        checked.describe_overlaps()
    );
    assert_eq!(holder.ending, Ending::SeenDead);
    assert!(
        holder.end - restarted <= (renew_every + margin).as_nanos() as i64,
        "the holder ran {:.1}ms past the restart, more than a renewal period ({renew_every:?}) \
         plus {margin:?}",
        ms(holder.end - restarted)
    );
    for overlap in &checked.overlaps {
        assert!(
            overlap.involves("holder"),
            "two contenders overlapped:\n{}",
            checked.describe_overlaps()
        );
        assert!(
            overlap.ns <= (renew_every + margin).as_nanos() as i64,
            "overlap beyond a renewal period ({renew_every:?}) plus {margin:?}:\n{}",
            checked.describe_overlaps()
        );
    }
    let worst = checked.overlaps.iter().map(|o| o.ns).max().unwrap_or(0);
    eprintln!(
        "restart: {} overlapping pairs, longest {:.1}ms (bound {:?})",
        checked.overlaps.len(),
        ms(worst),
        renew_every + margin
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Redis frozen or blackholed past the TTL

/// Redis frozen with SIGSTOP for longer than the TTL. The holder's renewal hangs; its command
/// gets SIGTERM at `valid_until - grace` and dies before the lease can expire on the server.
/// A contender takes the lock after Redis resumes and never overlaps the holder.
#[test]
fn frozen_redis_the_holder_dies_before_its_lease_can_expire() {
    let _timing = timing_sensitive();
    let server = RedisServer::start();
    let dir = TempDir::new("freeze");
    let history = History::new(&dir);
    let ttl = Duration::from_secs(2);

    let body = hold_until_term(&dir, "ready", "term");
    let holder = start_section_holder(
        &history,
        &dir,
        &body,
        server.cmd().args(["-k", "fz", "-t", "2s"]),
    );
    let contender_script = history.section(&dir, "contender", "true");
    let contender = server
        .cmd()
        .args(["-k", "fz", "-t", "2s", "--redis-timeout", "500ms", "--"])
        .arg(contender_script)
        .spawn();
    wait_until(
        Duration::from_secs(15),
        "the contender to subscribe",
        || server.waiters_of("fz") == 1,
    );

    let lease_end = lease_end_after_fresh_renewal(&server, "redlock:fz", ttl);
    server.freeze();
    let frozen = Instant::now();
    let died = history.wait_closed("holder", Duration::from_secs(10));
    // The fault must outlast the lease: keep Redis frozen until well past the TTL.
    thread::sleep((ttl + Duration::from_millis(500)).saturating_sub(frozen.elapsed()));
    server.thaw();

    holder
        .wait_within(Duration::from_secs(15))
        .assert_code(76)
        .assert_stderr_contains("lock lost");
    contender
        .wait_within(Duration::from_secs(30))
        .assert_code(0);

    let checked = history.check();
    checked.assert_count(2).assert_no_overlap();
    let term = read_times(&dir, "term");
    assert_eq!(term.len(), 1, "the holder's command got no SIGTERM");
    eprintln!(
        "freeze: SIGTERM {:.1}ms and death (seen) {:.1}ms before the lease could expire; \
         SIGTERM came {:.1}ms after the last renewal reached Redis\n{}",
        ms(lease_end - term[0]),
        ms(lease_end - died.end),
        ms(term[0] - (lease_end - ttl.as_nanos() as i64)),
        checked.describe()
    );
    assert_eq!(died.ending, Ending::SeenDead);
    assert!(
        died.end < lease_end,
        "the holder's command was alive {:.1}ms after its lease could expire",
        ms(died.end - lease_end)
    );
    assert!(only(&checked, "contender").start > lease_end);

    // The loss follows elapsed time since the last renewal was SENT, as src/lease.rs
    // documents: SIGTERM at validity - grace, validity = ttl - (ttl/100 + 2ms), grace =
    // min(--kill-after, (validity - renew_every) / 2). What the test sees is when Redis RAN
    // that renewal (`lease_end - ttl` is at or before that): later than the sending by the
    // renewal's trip, which a loaded machine stretches to tens of ms (both processes wait
    // for a core). So the measured delay comes out shorter than the deadline by that trip,
    // and longer by scheduling and the trap's `date`; both allowances are generous, and
    // still far from the renewal period (667 ms) that counting from another renewal, or
    // stopping at the first renewal that hangs, would be off by. The safety (the command
    // dead before the lease Redis granted can expire) is asserted above, exactly.
    let validity = ttl - (ttl / 100 + Duration::from_millis(2));
    let renew_every = ttl / 3;
    let grace = Duration::from_secs(10).min((validity - renew_every) / 2);
    let deadline = (validity - grace).as_nanos() as i64;
    let measured = term[0] - (lease_end - ttl.as_nanos() as i64);
    let trip = 250 * MS;
    assert!(
        (deadline - trip..deadline + 250 * MS).contains(&measured),
        "SIGTERM came {:.1}ms after Redis ran the last renewal; the lease timing says {:.1}ms \
         after it was sent (allowing {:.0}ms for its trip to Redis)",
        ms(measured),
        ms(deadline),
        ms(trip)
    );
}

/// Redis blackholed by the proxy for longer than the TTL, a holder whose command ignores
/// SIGTERM, and a contender that reaches Redis directly, so it takes the lock the moment the
/// lease expires there. The command is SIGKILLed by `valid_until`, before the lease can
/// expire on the server, and never overlaps the contender.
#[test]
fn blackholed_redis_the_holder_is_killed_before_its_lease_can_expire() {
    let _timing = timing_sensitive();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let dir = TempDir::new("blackhole");
    let history = History::new(&dir);
    // 4s: the SIGKILL deadline is 1% + 2ms (42ms) before the lease's end, well above the
    // watcher's poll and scheduling noise.
    let ttl = Duration::from_secs(4);

    let body = hold_ignoring_term(&dir, "ready", "term");
    let holder = start_section_holder(
        &history,
        &dir,
        &body,
        Wrapper::new(&proxy.url()).args(["-k", "bh", "-t", "4s"]),
    );
    let contender_script = history.section(&dir, "contender", "true");
    let contender = server
        .cmd()
        .args(["-k", "bh", "-t", "4s", "--"])
        .arg(contender_script)
        .spawn();
    wait_until(
        Duration::from_secs(15),
        "the contender to subscribe",
        || server.waiters_of("bh") == 1,
    );

    let lease_end = lease_end_after_fresh_renewal(&server, "redlock:bh", ttl);
    proxy.blackhole();
    let out = holder.wait_within(Duration::from_secs(20));
    out.assert_code(76).assert_stderr_contains("lock lost");
    let died = history.wait_closed("holder", Duration::from_secs(10));
    contender
        .wait_within(Duration::from_secs(30))
        .assert_code(0);
    proxy.pass();

    let checked = history.check();
    checked.assert_count(2).assert_no_overlap();
    let term = read_times(&dir, "term");
    let contender = only(&checked, "contender");
    eprintln!(
        "blackhole: SIGTERM {:.1}ms and death (seen) {:.1}ms before the lease could expire; \
         the contender started {:.1}ms after it; {}\n{}",
        ms(lease_end - term[0]),
        ms(lease_end - died.end),
        ms(contender.start - lease_end),
        proxy.summary(),
        checked.describe()
    );
    assert!(!term.is_empty(), "the holder's command got no SIGTERM");
    assert!(proxy.discarded().0 > 0, "nothing was blackholed");
    assert_eq!(died.ending, Ending::SeenDead);
    assert!(
        died.end < lease_end,
        "the holder's command was alive {:.1}ms after its lease could expire",
        ms(died.end - lease_end)
    );
    assert!(contender.start > lease_end);
}

/// Redis slow, then silent, during a renewal that finds the server's script cache empty
/// (flushed after the acquire, as after a SCRIPT FLUSH or a failover to a fresh replica).
/// That renewal is two round trips (EVALSHA, answered NOSCRIPT; then the scripts loaded and
/// run in one pipeline): the first takes 300ms each way, the second gets no answer. The
/// renewal must still give up by its deadline, and the command die before the lease can
/// expire on the server, where a contender takes the lock as soon as it does.
#[test]
fn slow_then_silent_redis_the_holder_dies_before_its_lease_can_expire() {
    let _timing = timing_sensitive();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let dir = TempDir::new("slowsilent");
    let history = History::new(&dir);
    let body = hold_until_term(&dir, "ready", "term");
    let holder = start_section_holder(
        &history,
        &dir,
        &body,
        Wrapper::new(&proxy.url()).args(["-k", "ss", "-t", "2s", "-v"]),
    );
    // The holder listens for a takeover (`--replace`) on a connection of its own, opened
    // 200ms into the command: once that is up, only renewals go through the proxy.
    wait_until(Duration::from_secs(5), "the holder to listen", || {
        server.subscribed_clients() >= 1
    });
    // The first renewal is due 666ms after the acquire: these come well before it.
    let _: String = server.query(&["SCRIPT", "FLUSH"]);
    proxy.latency(Duration::from_millis(300), Duration::from_millis(300));
    proxy.set_after(1, Fault::Blackhole);
    let contender_script = history.section(&dir, "contender", "true");
    let contender = server
        .cmd()
        .args(["-k", "ss", "-t", "2s", "--"])
        .arg(contender_script)
        .spawn();

    let out = holder.wait_within(Duration::from_secs(20));
    let died = history.wait_closed("holder", Duration::from_secs(10));
    // The lease as the server has it once the command is gone, read directly (not through
    // the proxy): whichever renewal got through last set its end. (Reading it before the
    // faults took a renewal that still got through for the end, and judged against that.)
    let lease_end =
        lease_end_after(&server, "redlock:ss").expect("the command to die before the key expired");
    contender
        .wait_within(Duration::from_secs(30))
        .assert_code(0);
    proxy.pass();

    let checked = history.check();
    eprintln!(
        "slow then silent: the command died (seen) {:.1}ms after the lease could expire; {}\n\
         holder's stderr:\n{}{}{}",
        ms(died.end - lease_end),
        proxy.summary(),
        out.stderr,
        checked.describe(),
        checked.describe_overlaps()
    );
    out.assert_code(76).assert_stderr_contains("lock lost");
    assert!(
        proxy.discarded().0 > 0,
        "the third command was not blackholed"
    );
    checked.assert_count(2).assert_no_overlap();
    assert!(
        died.end < lease_end,
        "the holder's command was alive {:.1}ms after its lease could expire",
        ms(died.end - lease_end)
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Latency

/// Runs a 5s job through 300ms of latency each way with a 2s TTL; returns the wrapper's
/// output and the checked history (with a contender that waited for the job).
fn five_second_job_behind_latency(warm: bool) -> (Output, Checked) {
    let _timing = timing_sensitive();
    let server = RedisServer::start();
    if warm {
        warm_script_cache(&server);
    }
    let proxy = FaultProxy::start(server.port());
    proxy.latency(Duration::from_millis(300), Duration::from_millis(300));
    let dir = TempDir::new("latency");
    let history = History::new(&dir);
    let job = history.section(
        &dir,
        "job",
        &format!("touch '{}'\nsleep 5", dir.join("ready").display()),
    );
    // --kill-after 300ms: the default grace (half of validity - renew_every, 656ms here)
    // leaves a renewal 656ms to complete, only 56ms above the 600ms round trip; 300ms leaves
    // it a second. See the report on this scenario.
    let mut wrapper = Wrapper::new(&proxy.url())
        .args([
            "-k",
            "slow",
            "-t",
            "2s",
            "--kill-after",
            "300ms",
            "-v",
            "--",
        ])
        .arg(job)
        .spawn();
    let ready = dir.join("ready");
    wait_until(Duration::from_secs(15), "the job to start", || {
        ready.exists() || wrapper.has_exited()
    });
    if !wrapper.has_exited() {
        server
            .cmd()
            .args(["-k", "slow", "--no-wait", "--", "true"])
            .run()
            .assert_code(75);
    }
    let waiter_script = history.section(&dir, "waiter", "true");
    let waiter = server
        .cmd()
        .args(["-k", "slow", "--"])
        .arg(waiter_script)
        .spawn();
    let out = wrapper.wait_within(Duration::from_secs(30));
    let waited = waiter.wait_within(Duration::from_secs(30));
    if out.status.code() == Some(0) {
        waited.assert_code(0);
    }
    eprintln!("latency: {}", proxy.summary());
    (out, history.check())
}

/// 300ms each way, 2s TTL, scripts already cached in Redis: no false loss, the 5s job
/// completes, exit 0.
#[test]
fn latency_of_300ms_each_way_causes_no_false_loss() {
    let (out, checked) = five_second_job_behind_latency(true);
    let renewals = out.stderr.matches("lease renewed").count();
    eprintln!(
        "latency: job done in {:?}, {renewals} renewals\n{}",
        out.elapsed,
        checked.describe()
    );
    out.assert_code(0).assert_stderr_lacks("lock lost");
    checked
        .assert_count(2)
        .assert_all_recorded()
        .assert_no_overlap();
    // Acquire and release cost a 600ms round trip each around the 5s job: proof that the
    // latency was in force.
    assert!(
        out.elapsed >= Duration::from_millis(6100),
        "the job took only {:?}: no latency?",
        out.elapsed
    );
    assert!(
        renewals >= 4,
        "only {renewals} renewals in a 5s job:\n{}",
        out.stderr
    );
}

/// The same on a fresh Redis, whose script cache is empty (just started, restarted or failed
/// over): the first acquire and the first renewal each take three round trips (EVALSHA,
/// NOSCRIPT, SCRIPT LOAD, EVALSHA) instead of one.
#[test]
fn latency_on_a_fresh_redis_causes_no_false_loss() {
    let (out, checked) = five_second_job_behind_latency(false);
    eprintln!(
        "latency, cold script cache: exit {:?} after {:?}\n{}",
        out.status.code(),
        out.elapsed,
        checked.describe()
    );
    out.assert_code(0).assert_stderr_lacks("lock lost");
    checked
        .assert_count(2)
        .assert_all_recorded()
        .assert_no_overlap();
}

// ---------------------------------------------------------------------------------------------
// 5. Connection reset

/// The proxy resets the holder's connection mid-hold: the next renewal fails, redlock-run
/// reconnects and renews, keeps the lock throughout, and exits 0.
#[test]
fn connection_reset_mid_hold_keeps_the_lock() {
    let _timing = timing_sensitive();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let dir = TempDir::new("reset");
    let history = History::new(&dir);
    let ttl = Duration::from_secs(2);
    let holder = hold_in_section(
        &history,
        &dir,
        "holder",
        0,
        Wrapper::new(&proxy.url()).args(["-k", "rst", "-t", "2s", "-v"]),
    );
    let token = token_of(&server.lock_value("rst").expect("holder's key"));

    lease_end_after_fresh_renewal(&server, "redlock:rst", ttl);
    assert_eq!(
        proxy.reset_all(),
        1,
        "the holder should have one connection"
    );
    wait_until(Duration::from_secs(5), "the holder to reconnect", || {
        proxy.accepted() >= 2
    });
    // A renewal through the new connection: the lease is fresh again.
    lease_end_after_fresh_renewal(&server, "redlock:rst", ttl);
    assert_eq!(
        token_of(&server.lock_value("rst").expect("holder's key")),
        token
    );
    server
        .cmd()
        .args(["-k", "rst", "--no-wait", "--", "true"])
        .run()
        .assert_code(75);
    let waiter_script = history.section(&dir, "waiter", "true");
    let waiter = server
        .cmd()
        .args(["-k", "rst", "--"])
        .arg(waiter_script)
        .spawn();
    holder.let_go();

    let out = holder.wait_within(Duration::from_secs(15));
    eprintln!(
        "reset: {}\nholder's stderr:\n{}",
        proxy.summary(),
        out.stderr
    );
    out.assert_code(0).assert_stderr_lacks("lock lost");
    assert!(
        out.stderr.contains("renewal failed"),
        "no renewal met the reset"
    );
    waiter.wait_within(Duration::from_secs(15)).assert_code(0);
    history
        .check()
        .assert_count(2)
        .assert_all_recorded()
        .assert_no_overlap();
    assert_eq!(server.dbsize(), 0);
}

// ---------------------------------------------------------------------------------------------
// 6. Lost acquire reply

/// Drops server replies until the wrapper's SET has landed in Redis (its reply lost), and
/// returns the token it wrote.
#[track_caller]
fn wait_for_landed_set_with_lost_reply(
    server: &RedisServer,
    proxy: &FaultProxy,
    key: &str,
) -> String {
    wait_until(
        Duration::from_secs(10),
        "the SET to land and its reply to be dropped",
        || proxy.discarded().1 > 0 && server.exists(key),
    );
    token_of(&server.get(key).expect("the landed key"))
}

/// The acquire's reply is lost once, then the proxy passes again: the wrapper's retry finds
/// its own token, counts the lock as taken and runs; a waiter goes after it.
#[test]
fn lost_acquire_reply_is_recognised_on_retry() {
    let _timing = timing_sensitive();
    let server = RedisServer::start();
    warm_script_cache(&server);
    let proxy = FaultProxy::start(server.port());
    let dir = TempDir::new("lostreply");
    let history = History::new(&dir);
    let job = history.section(
        &dir,
        "wrapper",
        &format!(
            "echo \"$REDLOCK_TOKEN\" > '{}'",
            dir.join("token").display()
        ),
    );
    proxy.drop_replies();
    let wrapper = Wrapper::new(&proxy.url())
        .args(["-k", "lr", "-t", "3s", "--redis-timeout", "500ms", "--"])
        .arg(job)
        .spawn();
    let landed = wait_for_landed_set_with_lost_reply(&server, &proxy, "redlock:lr");
    proxy.pass();
    let waiter_script = history.section(&dir, "waiter", "true");
    let waiter = server
        .cmd()
        .args(["-k", "lr", "--"])
        .arg(waiter_script)
        .spawn();

    let out = wrapper.wait_within(Duration::from_secs(15));
    eprintln!("lost reply, recovered: {}", proxy.summary());
    out.assert_code(0);
    assert_eq!(
        dir.read("token"),
        landed,
        "the command ran under a token other than the SET that landed"
    );
    waiter.wait_within(Duration::from_secs(15)).assert_code(0);
    history
        .check()
        .assert_count(2)
        .assert_all_recorded()
        .assert_no_overlap();
    assert!(proxy.accepted() >= 2, "no retry on a fresh connection");
    assert_eq!(server.dbsize(), 0);
}

/// Every reply is lost: the wrapper gives up (125) without running its command, and the key
/// its SET left behind is never stuck: it expires within the TTL, and only then does a
/// waiter take the lock.
#[test]
fn lost_acquire_replies_give_up_and_the_key_expires() {
    let _timing = timing_sensitive();
    let server = RedisServer::start();
    warm_script_cache(&server);
    let proxy = FaultProxy::start(server.port());
    let dir = TempDir::new("lostall");
    let history = History::new(&dir);
    let ttl = Duration::from_secs(2);
    let job = history.section(&dir, "wrapper", "true");
    proxy.drop_replies();
    let wrapper = Wrapper::new(&proxy.url())
        .args(["-k", "lg", "-t", "2s", "--redis-timeout", "500ms", "--"])
        .arg(job)
        .spawn();
    let landed = wait_for_landed_set_with_lost_reply(&server, &proxy, "redlock:lg");
    let waiter_script = history.section(&dir, "waiter", "true");
    let waiter = server
        .cmd()
        .args(["-k", "lg", "--wait", "10s", "--"])
        .arg(waiter_script)
        .spawn();

    let out = wrapper.wait_within(Duration::from_secs(15));
    let exited = now_ns();
    out.assert_code(125).assert_stderr_prefixed();
    // Still the wrapper's key, and only until its TTL runs out.
    let lease_end = lease_end_after(&server, "redlock:lg");
    let value = server.get("redlock:lg");
    let waited = waiter.wait_within(Duration::from_secs(15));
    let gone = history.check();
    eprintln!(
        "lost replies, gave up after {:?}: {}\nstderr: {}\n{}",
        out.elapsed,
        proxy.summary(),
        out.stderr.trim(),
        gone.describe()
    );
    waited.assert_code(0);
    let lease_end = lease_end.expect("the landed key should outlive the wrapper by its TTL");
    assert_eq!(value.map(|v| token_of(&v)), Some(landed));
    assert!(
        lease_end - exited <= ttl.as_nanos() as i64,
        "the key outlives the wrapper by {:.1}ms, more than its TTL",
        ms(lease_end - exited)
    );
    gone.assert_count(1)
        .assert_all_recorded()
        .assert_no_overlap();
    let waiter = only(&gone, "waiter");
    assert!(
        waiter.start > lease_end,
        "the waiter started {:.1}ms before the lost key could expire",
        ms(lease_end - waiter.start)
    );
    assert!(
        proxy.discarded().1 >= 2,
        "the retry's reply was not dropped too"
    );
    assert_eq!(server.dbsize(), 0);
}

// ---------------------------------------------------------------------------------------------
// 7. Release while Redis is unreachable

/// The command exits while Redis cannot be reached: the wrapper still exits with the
/// command's status, warns that the release failed, the key expires by its TTL, and a
/// waiter then proceeds.
#[test]
fn release_while_redis_is_unreachable_keeps_the_status_and_the_key_expires() {
    let _timing = timing_sensitive();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let dir = TempDir::new("unreachable");
    let history = History::new(&dir);
    let ttl = Duration::from_secs(2);
    let holder = hold_in_section(
        &history,
        &dir,
        "holder",
        5,
        Wrapper::new(&proxy.url()).args(["-k", "ru", "-t", "2s", "--redis-timeout", "500ms"]),
    );
    let waiter_script = history.section(&dir, "waiter", "true");
    let waiter = server
        .cmd()
        .args(["-k", "ru", "--"])
        .arg(waiter_script)
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.waiters_of("ru") == 1
    });

    let lease_end = lease_end_after_fresh_renewal(&server, "redlock:ru", ttl);
    proxy.blackhole();
    holder.let_go();
    let out = holder.wait_within(Duration::from_secs(15));
    let still_there = server.lock_value("ru");
    out.assert_code(5)
        .assert_stderr_prefixed()
        .assert_stderr_contains("warning: cannot release")
        .assert_stderr_contains("expire by its TTL")
        .assert_stderr_lacks("lock lost");
    assert!(
        still_there.is_some(),
        "the key vanished although the release could not reach Redis"
    );
    waiter.wait_within(Duration::from_secs(15)).assert_code(0);
    proxy.pass();

    let checked = history.check();
    checked.assert_count(2).assert_no_overlap();
    let waiter = only(&checked, "waiter");
    eprintln!(
        "unreachable release: exit after {:?}; the waiter started {:.1}ms after the lease's \
         end\nstderr: {}",
        out.elapsed,
        ms(waiter.start - lease_end),
        out.stderr.trim()
    );
    assert!(
        waiter.start > lease_end,
        "the waiter did not wait for the TTL"
    );
    assert_eq!(server.dbsize(), 0);
}

/// The release reaches Redis and deletes the key, but its reply is lost: the wrapper must
/// not claim that the key "will expire by its TTL". It looks again, finds the key gone,
/// and keeps the command's status with no warning.
#[test]
fn a_release_whose_reply_is_lost_is_not_reported_as_failed() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let dir = TempDir::new("releasereplylost");
    let holder = Job::new(&dir, "holder")
        .exit_code(5)
        .start(Wrapper::new(&proxy.url()).args(["-k", "rl", "-t", "30s", "--redis-timeout", "1s"]));
    // No renewal falls in this test (every 10s): the next request is the release.
    proxy.drop_replies();
    proxy.set_after(1, Fault::Pass);
    holder.let_go();
    let out = holder.wait_within(Duration::from_secs(15));
    assert!(
        proxy.discarded().1 >= 1,
        "the release's reply was not dropped: {}",
        proxy.summary()
    );
    assert!(!server.exists("redlock:rl"), "the release did not land");
    out.assert_code(5)
        .assert_stderr_lacks("cannot release")
        .assert_stderr_lacks("expire by its TTL")
        .assert_stderr_lacks("lock lost")
        .assert_stderr_contains("redlock-run cannot tell which");
}

/// The holder's connection goes silent without closing (a peer or NAT entry gone) just
/// before the release: the release times out there, and is sent again on a new connection
/// while the lease lasts. The key is gone when the wrapper exits, long before its 60 s TTL,
/// and nothing is said about a failed release.
#[test]
fn a_release_on_a_connection_gone_silent_is_sent_again_on_a_new_one() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let dir = TempDir::new("releasesilent");
    let holder = Job::new(&dir, "holder")
        .exit_code(5)
        .start(Wrapper::new(&proxy.url()).args(["-k", "rs", "-t", "60s", "--redis-timeout", "1s"]));
    // No renewal falls in this test (every 20 s): the next request is the release.
    assert!(proxy.silence_open() >= 1, "{}", proxy.summary());
    let accepted = proxy.accepted();
    holder.let_go();
    let out = holder.wait_within(Duration::from_secs(30));
    let left = server.lock_value("rs");
    eprintln!("{}; stderr: {}", proxy.summary(), out.stderr.trim());
    assert!(
        proxy.accepted() > accepted,
        "the release never tried a new connection"
    );
    assert_eq!(left, None, "the key was left for its TTL");
    out.assert_code(5)
        .assert_stderr_lacks("cannot release")
        .assert_stderr_lacks("expire by its TTL")
        .assert_stderr_lacks("lock lost");
}

// ---------------------------------------------------------------------------------------------
// 8. Wrapper SIGKILLed

/// Starts a holder running `body` on `key` (2s TTL) and five waiters, SIGKILLs the holder's
/// wrapper, and lets the waiters run. Returns the history, the lease's end as it was at the
/// kill, the moment of the kill and the holder's pid.
fn sigkill_holder_under_load(
    server: &RedisServer,
    dir: &TempDir,
    history: &History,
    key: &str,
    body: &str,
) -> (i64, i64, i32) {
    let _timing = timing_sensitive();
    let mut holder = start_section_holder(
        history,
        dir,
        body,
        server.cmd().args(["-k", key, "-t", "2s"]),
    );
    let waiter_script = history.section(dir, "waiter", "sleep 0.1");
    let waiters: Vec<Running> = (0..5)
        .map(|_| {
            server
                .cmd()
                .args(["-k", key, "-t", "2s", "--"])
                .arg(&waiter_script)
                .spawn()
        })
        .collect();
    wait_until(Duration::from_secs(15), "5 waiters to subscribe", || {
        server.waiters_of(key) == 5
    });
    let pid = history
        .check()
        .labelled("holder")
        .first()
        .and_then(|holder| holder.pid())
        .expect("the holder's section and pid");
    let full_key = format!("{PREFIX}{key}");
    let lease_end = lease_end_after(server, &full_key).expect("the holder's lease");
    holder.signal(libc::SIGKILL);
    let killed = now_ns();
    wait_until(Duration::from_secs(5), "the wrapper to die", || {
        holder.has_exited()
    });
    for waiter in waiters {
        waiter.wait_within(Duration::from_secs(30)).assert_code(0);
    }
    (lease_end, killed, pid)
}

/// The wrapper is SIGKILLed while five waiters wait: its command dies of the parent-death
/// signal, the first waiter takes the lock only after the TTL, and none overlap.
#[test]
fn sigkilled_wrapper_under_load_hands_over_only_after_the_ttl() {
    let server = RedisServer::start();
    let dir = TempDir::new("sigkill");
    let history = History::new(&dir);
    // exec: the command is the `sleep` itself, the process the parent-death signal reaches.
    let body = format!("touch '{}'\nexec sleep 100", dir.join("ready").display());
    let (lease_end, killed, _) = sigkill_holder_under_load(&server, &dir, &history, "sk", &body);

    let checked = history.check();
    checked.assert_count(6).assert_no_overlap();
    let holder = only(&checked, "holder");
    let first = checked.labelled("waiter")[0];
    eprintln!(
        "sigkill: the command died {:.1}ms after its wrapper; the first waiter started \
         {:.1}ms after the kill, {:.1}ms after the lease's end\n{}",
        ms(holder.end - killed),
        ms(first.start - killed),
        ms(first.start - lease_end),
        checked.describe()
    );
    assert_eq!(holder.ending, Ending::SeenDead);
    assert!(
        holder.end - killed < 1_000 * MS,
        "the command outlived its wrapper by {:.1}ms",
        ms(holder.end - killed)
    );
    assert!(
        first.start > lease_end,
        "a waiter started {:.1}ms before the killed holder's lease could expire",
        ms(lease_end - first.start)
    );
    assert_eq!(server.dbsize(), 0);
}

/// The same with the usual shape of a job: a shell script running a program in the
/// foreground. The parent-death signal reaches only the shell; the program it was running
/// must not carry on once the lease is gone.
#[test]
fn sigkilled_wrapper_leaves_nothing_of_its_command_running() {
    let server = RedisServer::start();
    let dir = TempDir::new("sigkillfg");
    let history = History::new(&dir);
    let body = format!("touch '{}'\nsleep 30", dir.join("ready").display());
    let (lease_end, killed, pid) = sigkill_holder_under_load(&server, &dir, &history, "fg", &body);

    let checked = history.check();
    let survivors = live_in_group(pid);
    // SAFETY: killpg takes plain integers; `pid` leads the group of the command this test
    // started, and a failed call (group already gone) is harmless.
    unsafe {
        libc::killpg(pid, libc::SIGKILL);
    }
    let first = checked.labelled("waiter")[0];
    eprintln!(
        "sigkill, foreground job: processes of the command alive after the waiters ran: \
         {survivors:?}; first waiter started {:.1}ms after the kill ({:.1}ms after the \
         lease's end)\n{}{}",
        ms(first.start - killed),
        ms(first.start - lease_end),
        checked.describe(),
        checked.describe_overlaps()
    );
    assert!(
        survivors.is_empty(),
        "the command's foreground job (pids {survivors:?}) outlived its SIGKILLed wrapper and \
         the lease, still running while the waiters held the lock"
    );
    checked.assert_count(6).assert_no_overlap();
}

/// The same for a wrapper that had to wait for the lock, whose guardian was forked while it
/// waited and told the command's group only once the command started.
#[test]
fn sigkilled_wrapper_that_waited_leaves_nothing_of_its_command_running() {
    let server = RedisServer::start();
    let dir = TempDir::new("sigkillwaited");
    let history = History::new(&dir);
    let first = hold_in_section(
        &history,
        &dir,
        "first",
        0,
        server.cmd().args(["-k", "kw", "-t", "2s"]),
    );
    let body = format!("touch '{}'\nsleep 30", dir.join("waited").display());
    let waiter_script = history.section(&dir, "waiter", &body);
    let mut waiter = server
        .cmd()
        .args(["-k", "kw", "-t", "2s", "--"])
        .arg(waiter_script)
        .spawn();
    wait_until(Duration::from_secs(15), "the waiter to subscribe", || {
        server.waiters_of("kw") == 1
    });
    first.let_go();
    first.wait_within(Duration::from_secs(15)).assert_code(0);
    waiter.wait_for_file(&dir.join("waited"), Duration::from_secs(15));
    let pid = history
        .check()
        .labelled("waiter")
        .first()
        .and_then(|waiter| waiter.pid())
        .expect("the waiter's section and pid");
    waiter.signal(libc::SIGKILL);
    wait_until(Duration::from_secs(5), "the wrapper to die", || {
        waiter.has_exited()
    });
    // The lease (2s) would end first; the guardian acts on the wrapper's death at once.
    let gone = Duration::from_secs(2);
    let ended = Instant::now();
    while !live_in_group(pid).is_empty() && ended.elapsed() < gone {
        thread::sleep(Duration::from_millis(10));
    }
    let survivors = live_in_group(pid);
    // SAFETY: killpg takes plain integers; `pid` leads the group of the command this test
    // started, and a failed call (group already gone) is harmless.
    unsafe {
        libc::killpg(pid, libc::SIGKILL);
    }
    assert!(
        survivors.is_empty(),
        "the command's foreground job (pids {survivors:?}) outlived its SIGKILLed wrapper by \
         {gone:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Keys that are not ours

/// A lock key that holds another application's hash or list, or a string we did not write:
/// busy for --no-wait (75) and for --wait 1s (75 after the wait), and never changed or
/// deleted, even with --prefix '' pointing straight at it.
#[test]
fn keys_holding_other_data_are_busy_and_never_touched() {
    let server = RedisServer::start();
    let dir = TempDir::new("foreign");
    let history = History::new(&dir);
    let _: i64 = server.query(&["HSET", "redlock:h", "owner", "billing", "n", "7"]);
    let _: i64 = server.query(&["RPUSH", "redlock:l", "a", "b", "c"]);
    server.set("plain", "someone else's");
    let snapshot = |server: &RedisServer| -> Vec<String> {
        let mut state: Vec<String> = server.query(&["HGETALL", "redlock:h"]);
        state.extend(server.query::<Vec<String>>(&["LRANGE", "redlock:l", "0", "-1"]));
        state.extend(server.get("plain"));
        for key in ["redlock:h", "redlock:l", "plain"] {
            state.push(format!("{key} pttl {}", server.pttl(key)));
        }
        state
    };
    let before = snapshot(&server);
    let section = history.section(&dir, "intruder", "true");

    for (key, prefix) in [("h", "redlock:"), ("l", "redlock:"), ("plain", "")] {
        let lock = ["-k", key, "--prefix", prefix];
        let out = server
            .cmd()
            .args(lock)
            .args(["--no-wait", "--"])
            .arg(&section)
            .run();
        out.assert_code(75).assert_stderr_prefixed();
        let out = server
            .cmd()
            .args(lock)
            .args(["--wait", "1s", "--"])
            .arg(&section)
            .run();
        out.assert_code(75);
        assert!(
            out.elapsed >= Duration::from_millis(900),
            "--wait 1s on {prefix}{key} gave up after {:?}",
            out.elapsed
        );
        assert_eq!(snapshot(&server), before, "after runs on {prefix}{key}");
    }

    // Our own run on a plain key, whose value someone overwrites: released as not ours, left.
    let run = hold(
        server
            .cmd()
            .args(["-k", "plain2", "--prefix", "", "-t", "1s"]),
        &dir,
        "hold",
    );
    server.set("plain2", "someone else's too");
    let out = run.wait_within(Duration::from_secs(15));
    out.assert_code(76);
    assert_eq!(server.get("plain2").as_deref(), Some("someone else's too"));
    assert_eq!(snapshot(&server), before);

    history.check().assert_count(0);
    assert_eq!(server.dbsize(), 4, "keys: {:?}", server.keys());
}

/// A server that accepts connections but never answers (frozen): taking the lock gives up
/// within twice `--redis-timeout` (the attempt, and its retry on a fresh connection, which
/// alone can tell whether the unanswered request took the lock), and `--help` says so.
#[test]
fn a_silent_redis_costs_at_most_two_redis_timeouts_as_help_says() {
    let server = RedisServer::start();
    warm_script_cache(&server);
    server.freeze();
    let out = server
        .cmd()
        .args(["-k", "silent", "--no-wait", "--redis-timeout", "3s"])
        .args(["--", "true"])
        .run();
    server.thaw();
    eprintln!("silent Redis: gave up after {:?}", out.elapsed);
    out.assert_code(125)
        .assert_stderr_contains("no answer in time");
    assert!(
        out.elapsed < Duration::from_millis(7500),
        "gave up after {:?}",
        out.elapsed
    );
    let help = Wrapper::bare().arg("--help").run();
    help.assert_code(0);
    assert!(
        help.stdout_str().contains("up to twice this"),
        "--help does not say that taking the lock may take twice --redis-timeout"
    );
}

/// Redis answers slowly (200 ms each way) and a waiter's last attempt, made just before its
/// deadline, takes the lock but is answered after it. The waiter must not leave that lock
/// held by nobody for a whole TTL (it used to: 125, "no answer in time", and the key held
/// by its token for 30 s): the attempt's retry recognises its own lock, and the waiter runs.
/// And a lock that is simply busy behind the slow server ends as busy (75), never as
/// "Redis unreachable" (125), however short the wait.
#[test]
fn a_slow_redis_never_leaves_a_waiters_lock_behind_nor_calls_a_busy_lock_unreachable() {
    let server = RedisServer::start();
    warm_script_cache(&server);
    let proxy = FaultProxy::start(server.port());
    let dir = TempDir::new("slowwait");
    proxy.latency(Duration::from_millis(200), Duration::from_millis(200));
    // Busy all along: short waits end as busy.
    let holder = hold(
        Wrapper::new(&proxy.url()).args(["-k", "sw", "--redis-timeout", "5s"]),
        &dir,
        "holder",
    );
    for wait in ["300ms", "700ms", "1500ms"] {
        let out = Wrapper::new(&proxy.url())
            .args([
                "-k",
                "sw",
                "--wait",
                wait,
                "--redis-timeout",
                "5s",
                "--",
                "true",
            ])
            .run();
        out.assert_code(75)
            .assert_stderr_contains("is still held by");
    }
    holder.let_go();
    holder.wait().assert_code(0);
    assert!(!server.exists("redlock:sw"));
    // The holder lets go just before the waiters' deadlines: whatever each waiter's last
    // attempt did, no lock is left behind once they have all ended.
    for round in 0..3 {
        let name = format!("sr{round}");
        let holder = hold(
            Wrapper::new(&proxy.url()).args(["-k", &name, "--redis-timeout", "5s"]),
            &dir,
            &format!("h{round}"),
        );
        let waiter = Wrapper::new(&proxy.url())
            .args(["-k", &name, "--wait", "1400ms", "--redis-timeout", "5s"])
            .args(["--", "true"])
            .spawn();
        std::thread::sleep(Duration::from_millis(700 + 150 * round));
        holder.let_go();
        holder.wait().assert_code(0);
        let out = waiter.wait();
        assert!(
            matches!(out.status.code(), Some(0) | Some(75)),
            "round {round}: the waiter ended {:?}\n{}",
            out.status,
            out.stderr
        );
        assert!(
            !server.exists(&format!("redlock:{name}")),
            "round {round}: the waiter (exit {:?}) left its lock behind, PTTL {}",
            out.status.code(),
            server.pttl(&format!("redlock:{name}"))
        );
    }
}
