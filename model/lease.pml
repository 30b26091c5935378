/*
 * The lease protocol of redlock-run, as a Promela model for the Spin model checker.
 * README.md beside this file says what is modelled and what is not, why checking one
 * holder against everything the others could do proves mutual exclusion, and what each
 * configuration (the -D flags that model/check passes) shows.
 *
 * Time is counted in ticks of 1 ms of the Redis server's clock, which stands for real
 * time. No variable holds an absolute time: every deadline is a countdown that the tick
 * lowers, so that two moments that look alike to every process are one state, and a
 * verification covers runs of any length, not runs up to a horizon.
 */

/* ---- The code's numbers (src/lease.rs), for a 100 ms TTL, the shortest allowed ----------
 * A unit test in src/lease.rs reads this block and compares each line with what the code
 * computes, so that the model cannot drift from it. A duration that is not a whole number
 * of ms is rounded down: the model may then renew a little earlier, and give up a little
 * later, than the code, which only gives the holder more ways to go wrong. */
#define TTL          100 /* --ttl in ms: the server keeps a key this long after the command that set it */
#define DRIFT        3   /* clock_drift(TTL) = TTL/100 + 2 ms */
#define VALIDITY     97  /* Timing::validity() = TTL - DRIFT, counted from when the request left */
#define RENEW_EVERY  33  /* default_renewal_period(TTL) = TTL/3 */
#define GRACE        31  /* Timing::grace() with the default --kill-after: no renewal past valid - GRACE */
#define BUDGET       33  /* acquisition_budget(TTL): a Redlock win must come before this */
#define RATE_SLACK   1   /* clock rates within 1% (docs/guarantees.md's assumption): a lease ends up to ceil(VALIDITY / 0.99) - VALIDITY ms late */
#define GUARD_SLACK  1   /* the guardian's poll() wakes up to 1 ms past the lease's end (it rounds its wait up, plus 1) */
/* ---- end of the code's numbers ----------------------------------------------------------- */

/* ---- The configuration: model/check sets these with -D ----------------------------------- */
#ifndef NS
#define NS 1            /* Redis servers: 1, or 3 Redlock masters */
#endif
#ifndef LIMIT
#define LIMIT 1         /* --limit: slots on the (single) server */
#endif
#ifndef DELAY
#define DELAY AGE_CAP   /* most ticks a request, and then its answer, spends on the wire */
#endif
#ifndef PAUSES
#define PAUSES 1        /* redlock-run and its guardian may each be stopped, for any time */
#endif
#ifndef BOTH_PAUSED
#define BOTH_PAUSED 0   /* both may be stopped at the same time (a limit) */
#endif
#ifndef NAMING_GAP
#define NAMING_GAP 0    /* a stop may fall between the command's exec and naming its group to the guardian */
#endif
#ifndef SUSPEND
#define SUSPEND 0       /* the holder's whole machine may be suspended once, for up to this many ticks (a limit) */
#endif
#ifndef RESTARTS
#define RESTARTS 0      /* times a server may restart empty, without persistence (a limit) */
#endif
#ifndef KEPT_OUT
#define KEPT_OUT 0      /* a restarted server stays out until every lease from before its restart has ended */
#endif
#ifndef EXTRA_SLACK
#define EXTRA_SLACK 0   /* clock-rate difference beyond the allowance, in ticks per lease (a limit) */
#endif
#ifndef DRIFT_CUT
#define DRIFT_CUT 0     /* ms taken off the drift allowance (a limit) */
#endif

#ifndef WITNESS
#define WITNESS 0       /* check instead that a running command's lease is never extended */
#endif

#define MAJ (NS / 2 + 1)
#define LAG (RATE_SLACK + EXTRA_SLACK)
#define LEASE (VALIDITY + DRIFT_CUT)
#define FLOOR (-(GUARD_SLACK + 1))  /* the lease's countdown stops here: past every deadline */
#define AGE_CAP (LEASE + LAG)       /* an answer this late gives no lease at all */

/* Phases of the run. */
#define IDLE 0  /* wants the lock, nothing asked */
#define ACQ  1  /* an acquisition round is out */
#define HELD 2  /* won; the command is not started yet */
#define RUN  3  /* the command runs: its process group exists (the critical section) */
#define DONE 4  /* the command has ended, or was never started */

/* Who holds a key, as far as this holder can tell. */
#define FREE   0  /* no one, or someone else */
#define OURS   1  /* we do (with Redlock: it outlives the current lease, see below) */
#define STALE  2  /* with Redlock: we do, but it may expire at any moment */

/* A request on the wire to a server, and the server's answer on the way back. */
#define R_NONE  0
#define R_ACQ   1
#define R_RENEW 2
#define R_REL   3
#define A_NONE  0
#define A_NO    1
#define A_YES   2  /* A_YES + n: yes, in slot n */

/* ---- State ------------------------------------------------------------------------------- */
/* Each server, per slot: whether the key is ours, and (one server) for how many more ticks
 * it lives there. */
byte holder[NS * LIMIT];
byte ttl_left[NS * LIMIT];
bit down[NS];       /* the server restarted and is kept out (KEPT_OUT) */
bit pre_round;      /* the round out was sent before a restart */
bit pre_lease;      /* the lease counts from a round sent before a restart */
bit fresh[NS];      /* with Redlock: the key was set or extended by the round out */
byte restarts;

/* The run of redlock-run. */
byte phase;
short left;         /* ticks until the lease's end as this machine counts it (valid_until) */
byte age;           /* ticks since the requests out left this machine */
bit renewing;       /* a renewal round is out */
bit lost;           /* the lock is lost: no more renewals */
byte slot;          /* the slot it holds (--limit) */
bit armed;          /* the guardian knows the group and the lease's end */
bit paused;         /* redlock-run is stopped (SIGSTOP, a debugger, starved of CPU) */
bit gpaused;        /* its guardian is stopped */
bit susp;           /* the whole machine is suspended: its processes and its monotonic clock stop */
bit suspended;      /* its one suspension has begun */
byte susp_for;      /* ticks the suspension has lasted */
byte req[NS];       /* the request to server s on the wire */
byte ans[NS];       /* the answer from server s on the wire */

byte i, n, yes, no; /* scratch, always 0 between steps */
short was;

#define K(s, m) ((s) * LIMIT + (m))

/* What a replay of a counterexample (spin -t) prints; the checker itself prints nothing. */
#if NS == 1
#define SAY(what) printf(what); printf("; lease %d ms left, key %d ms left\n", left, ttl_left[K(0, slot)])
#else
#define SAY(what) printf(what); \
	printf("; lease %d ms left, keys (0 none, 1 ours, 2 stale): %d %d %d\n", left, holder[0], holder[1], holder[2])
#endif

/* What is checked. While the command runs, its key is in its slot on the server (with
 * Redlock, on a majority of the servers): no one else can hold that slot then. */
#if NS == 1
#define HOLDS (holder[K(0, slot)] != FREE)
#define PENDING (req[0] != R_NONE)
#elif NS == 3
#define HOLDS ((holder[0] != FREE || down[0]) + (holder[1] != FREE || down[1]) + \
               (holder[2] != FREE || down[2]) >= MAJ)
#define PENDING (req[0] != R_NONE || req[1] != R_NONE || req[2] != R_NONE)
#else
#error "NS must be 1 or 3"
#endif
#define SAFE (phase != RUN || HOLDS)
#if WITNESS
bit extended;       /* a renewal extended the lease while the command ran */
#define CHECKED (!extended)
#else
#define CHECKED SAFE
#endif

/* redlock-run (any of its threads) or the guardian can act only when neither it nor its
 * machine is stopped. */
#define CAN_RUN   (!paused && !susp)
#define CAN_GUARD (!gpaused && !susp)
#define WAITING   (phase == ACQ || renewing)

/* Time may not pass a deadline that a process able to act must meet: the supervisor's
 * SIGKILL at the lease's end, the guardian's by then plus its rounding; a request still
 * on the wire DELAY ticks after it left has arrived or is lost, and a thread waiting for
 * its answers has them, or times out, DELAY ticks later. */
#define BLOCKS \
	((phase == RUN && ((CAN_RUN && left <= 0) || (armed && CAN_GUARD && left <= -GUARD_SLACK))) || \
	 (PENDING && age >= DELAY) || \
	 (WAITING && CAN_RUN && age >= 2 * DELAY) || \
	 (susp && susp_for >= SUSPEND))

/* The servers are alike to the holder, so their order carries no information: with three
 * of them, each step ends by sorting them, and states that differ only in that order are
 * one (a symmetry reduction: up to six times fewer states). */
#if NS == 3
#define SKEY(s) ((((holder[s] * 4 + req[s]) * 8 + ans[s]) * 2 + fresh[s]) * 2 + down[s])
inline swap_if(a, b) {
	if
	:: SKEY(a) > SKEY(b) ->
		n = holder[a]; holder[a] = holder[b]; holder[b] = n;
		n = fresh[a]; fresh[a] = fresh[b]; fresh[b] = n;
		n = req[a]; req[a] = req[b]; req[b] = n;
		n = ans[a]; ans[a] = ans[b]; ans[b] = n;
		n = down[a]; down[a] = down[b]; down[b] = n;
		n = 0
	:: else
	fi
}
#define CANON swap_if(0, 1); swap_if(1, 2); swap_if(0, 1)
#else
#define CANON skip
#endif

/* ---- The servers ------------------------------------------------------------------------- */

/* A key of ours is set, or extended, by a request that has just arrived: it lives TTL
 * ticks from now. With Redlock, lifetimes are not counted (three keys timed apart do not
 * fit in a check of a minute); a key is OURS while it surely outlives the lease, and
 * STALE when it may not, which the single-server configurations justify: README.md,
 * "Redlock". The request belongs to the round out (or is a later one). */
inline refresh(key) {
	holder[key] = OURS;
#if NS == 1
	ttl_left[key] = TTL;
#else
	fresh[s] = 1;
#endif
}

/* The request reaches server s and is carried out, atomically, as a Lua script is. The
 * other holders' keys are not kept: a slot that is not ours may be anyone's, and whether
 * someone else took it is chosen when it matters, when an acquisition of ours arrives
 * (`others_took`). To a renewal or a release, someone else's key and no key look alike. */
inline serve(s, others_took) {
	if
	:: req[s] == R_ACQ ->
		/* acquire.lua: a slot that already holds our token (an earlier SET whose answer
		 * was lost) is ours, with a fresh PEXPIRE; else the first free slot; else busy.
		 * (Which free slot makes no difference to us.) */
		n = 0;
		do
		:: n < LIMIT && holder[K(s, n)] == FREE -> n++
		:: else -> break
		od;
		if
		:: n == LIMIT && !others_took ->
			n = 0;
			do
			:: n < LIMIT && holder[K(s, n)] != FREE -> n++
			:: else -> break
			od
		:: else
		fi;
		if
		:: n < LIMIT ->
			refresh(K(s, n));
			ans[s] = A_YES + n;
			printf("server %d: acquire: the key is ours\n", s)
		:: else -> ans[s] = A_NO; printf("server %d: acquire: busy\n", s)
		fi;
		n = 0
	:: req[s] == R_RENEW ->
		/* renew.lua: compare-and-PEXPIRE. */
		if
		:: holder[K(s, slot)] != FREE ->
			refresh(K(s, slot));
			ans[s] = A_YES + slot;
			printf("server %d: renewed\n", s)
		:: else -> ans[s] = A_NO; printf("server %d: renewal: not ours\n", s)
		fi
	:: req[s] == R_REL ->
		/* release.lua: compare-and-DEL. Nobody waits for this answer. */
		if
		:: holder[K(s, slot)] != FREE ->
			holder[K(s, slot)] = FREE;
			ttl_left[K(s, slot)] = 0;
			printf("server %d: released\n", s)
		:: else
		fi
	fi;
	req[s] = R_NONE
}

/* The requests to server s: carried out within DELAY ticks, or lost. An answer may be
 * lost as well: the holder then times out. A request given up on, with another sent over
 * it, is taken as lost; README.md says why that hides nothing. */
proctype Server(byte s) {
	do
	:: d_step { req[s] != R_NONE && !down[s] -> serve(s, 0); CANON }
	:: d_step { req[s] == R_ACQ && !down[s] -> serve(s, 1); CANON }
	:: d_step { req[s] != R_NONE -> req[s] = R_NONE; printf("server %d: a request is lost\n", s); CANON }
#if NS > 1
	/* A key that may not outlive the lease expires, at any moment; one that does, only
	 * once past every deadline of the lease. */
	:: d_step { holder[s] == STALE ||
	            (holder[s] == OURS && (phase == HELD || phase == RUN) && left <= FLOOR) ->
		holder[s] = FREE; CANON }
	/* A server kept out after a restart comes back, empty, once no lease or round out
	 * that could have counted on the keys it lost is left. (Keeping it out for a TTL, as
	 * the Redlock specification advises, is at least that long.) */
	:: d_step { down[s] && !(pre_lease && (phase == HELD || phase == RUN) && left > FLOOR) &&
	            !(pre_round && WAITING) -> down[s] = 0; CANON }
#endif
	od unless { phase == DONE }
}

/* ---- redlock-run ------------------------------------------------------------------------- */

inline send_all(what) {
	i = 0;
	do
	:: i < NS -> req[i] = what; ans[i] = A_NONE; fresh[i] = 0; i++
	:: else -> break
	od;
	i = 0;
	age = 0
}

inline forget_answers() {
	i = 0;
	do
	:: i < NS -> ans[i] = A_NONE; i++
	:: else -> break
	od;
	i = 0
}

inline count_answers() {
	yes = 0; no = 0; i = 0;
	do
	:: i < NS ->
		if
		:: ans[i] >= A_YES -> yes++; slot = ans[i] - A_YES
		:: ans[i] == A_NO -> no++
		:: else
		fi;
		i++
	:: else -> break
	od;
	i = 0
}

/* A lease now counts from the round out: keys of ours that it did not set or extend were
 * set earlier, and may expire before it ends. (With one server, lifetimes are counted.) */
inline older_keys_stale(all) {
	i = 0;
	do
	:: i < NS ->
		if
		:: NS > 1 && holder[i] == OURS && (all || !fresh[i]) -> holder[i] = STALE
		:: else
		fi;
		i++
	:: else -> break
	od;
	i = 0
}

/* The lease from requests that left `age` ticks ago: LEASE (VALIDITY) on this machine's
 * clock, which runs up to `lag` ticks per lease slower or faster than the server's. */
inline lease_from(lag) {
	left = LEASE + lag - age;
	if
	:: left < FLOOR -> left = FLOOR
	:: else
	fi
}

/* The acquisition round is decided, when its answers are in or at a timeout: won on a
 * majority (with Redlock, only within BUDGET); a lost round lets go of whatever it took
 * and is tried again. */
inline decide_acquire(lag) {
	count_answers();
	if
	:: yes >= MAJ && (NS == 1 || age < BUDGET) ->
		older_keys_stale(0);
		pre_lease = pre_round;
		lease_from(lag);
		SAY("redlock-run: lock taken");
		forget_answers();
		age = 0;
		phase = HELD
	:: else ->
		older_keys_stale(1);
		printf("redlock-run: not taken; trying again\n");
		if
		:: NS > 1 -> send_all(R_REL)
		:: else -> forget_answers(); age = 0
		fi;
		slot = 0;
		phase = IDLE
	fi;
	yes = 0; no = 0
}

/* The renewal round is decided: extended on a majority if give_up_at has not passed (the
 * call's own deadline); lost when more than NS - MAJ say the key is not ours; else tried
 * again while there is time. Redlock takes the key again, unawaited, on a server that
 * had lost it. */
inline decide_renewal(lag) {
	count_answers();
	if
	:: yes >= MAJ && left > GRACE ->
		was = left;
		lease_from(lag);
		if
		:: left < was -> left = was  /* a lease only grows */
		:: else ->
			SAY("redlock-run: renewed");
			older_keys_stale(0);
			pre_lease = pre_round;
#if WITNESS
			extended = extended || phase == RUN;
#endif
		fi;
		was = 0;
		age = 0;
		i = 0;
		do
		:: i < NS ->
			if
			:: ans[i] == A_NO -> req[i] = R_ACQ
			:: else
			fi;
			ans[i] = A_NONE;
			i++
		:: else -> break
		od;
		i = 0
	:: else ->
		if
		:: no > NS - MAJ -> lost = 1; SAY("redlock-run: the lock is lost")
		:: else -> SAY("redlock-run: no renewal")
		fi;
		forget_answers();
		age = 0
	fi;
	renewing = 0;
	yes = 0; no = 0
}

/* The command's group is gone, and with it what is checked; what the run does after that
 * (finish a renewal, release) only matters to the next holder, who may wait: the release
 * is sent at once, or never. */
inline ended() {
	renewing = 0;
	forget_answers();
	left = 0; lost = 0; armed = 0; paused = 0; gpaused = 0; susp = 0; susp_for = 0;
	phase = DONE
}

proctype Holder() {
	{ do
	/* Take the lock: SET NX PX, the lease timed from now (sent_at is read before the
	 * request is written). */
	:: d_step { phase == IDLE && CAN_RUN ->
		send_all(R_ACQ); pre_round = 0; phase = ACQ; printf("redlock-run: SET NX PX sent\n"); CANON }
	/* Decide the acquisition, on a machine whose clock runs slow, even or fast. */
	:: d_step { phase == ACQ && CAN_RUN -> decide_acquire(LAG); CANON }
	:: d_step { phase == ACQ && CAN_RUN -> decide_acquire(0); CANON }
	:: d_step { phase == ACQ && CAN_RUN -> decide_acquire(-LAG); CANON }

	/* Start the command. The child compares the clock with the lease's end right before
	 * its exec and does not start it on a lease that has run out (then there is nothing
	 * left to release either: release_deadline is None). */
	:: d_step { phase == HELD && CAN_RUN ->
		if
		:: left > 0 -> armed = 1 - NAMING_GAP; phase = RUN; SAY("the command starts")
		:: else -> ended(); printf("redlock-run: the lease ran out before the command's exec\n")
		fi; CANON }
	/* Name the command's group to the guardian: a step of its own only with NAMING_GAP. */
	:: d_step { phase == RUN && !armed && CAN_RUN ->
		armed = 1; printf("redlock-run: the guardian is told the group\n"); CANON }

	/* The renewal thread, from the lock's taking until the command has ended: a renewal
	 * is due RENEW_EVERY after the last one left, and is retried until give_up_at, at any
	 * moment in between (the thread may be slow). */
	:: d_step { (phase == HELD || phase == RUN) && CAN_RUN && !renewing && !lost &&
	            left <= LEASE - RENEW_EVERY && left > GRACE ->
		send_all(R_RENEW); pre_round = 0; renewing = 1; SAY("redlock-run: renewal sent"); CANON }
	:: d_step { renewing && CAN_RUN -> decide_renewal(LAG); CANON }
	:: d_step { renewing && CAN_RUN -> decide_renewal(0); CANON }
	:: d_step { renewing && CAN_RUN -> decide_renewal(-LAG); CANON }

	/* The supervisor: SIGKILL to the group at the lease's end at the latest. (SIGTERM at
	 * give_up_at only asks; the command may end at any moment anyway.) */
	:: d_step { phase == RUN && CAN_RUN && left <= 0 ->
		SAY("supervisor: SIGKILL"); ended(); CANON }
	/* The guardian: SIGKILL to the group once the lease it was told of has ended. */
	:: d_step { phase == RUN && armed && CAN_GUARD && left <= 0 ->
		SAY("guardian: SIGKILL"); ended(); CANON }
	/* The command ends by itself, at any moment; the lock is released if the lease still
	 * holds (release_deadline), or not at all (redlock-run was stopped until then). */
	:: d_step { phase == RUN && !susp ->
		if
		:: left > 1 -> send_all(R_REL)
		:: else
		fi;
		SAY("the command ends; released"); ended(); CANON }
	:: d_step { phase == RUN && !susp -> SAY("the command ends; not released"); ended(); CANON }

#if PAUSES
	/* redlock-run, or its guardian, stopped and continued at any moment, for any time. */
	:: d_step { phase != IDLE && !paused && (BOTH_PAUSED || !gpaused) ->
		paused = 1; SAY("redlock-run is stopped"); CANON }
	:: d_step { paused -> paused = 0; SAY("redlock-run continues"); CANON }
	:: d_step { phase == RUN && armed && !gpaused && (BOTH_PAUSED || !paused) ->
		gpaused = 1; SAY("the guardian is stopped"); CANON }
	:: d_step { gpaused -> gpaused = 0; SAY("the guardian continues"); CANON }
#endif
#if SUSPEND
	/* The whole machine suspended once, for up to SUSPEND ticks: its processes and its
	 * monotonic clock stop, while the server's clock runs on. */
	:: d_step { !suspended && phase != IDLE ->
		susp = 1; suspended = 1; SAY("the machine is suspended"); CANON }
	:: d_step { susp -> susp = 0; SAY("the machine resumes"); susp_for = 0; CANON }
#endif
	od } unless { phase == DONE }
}

/* ---- Time, and the servers' failures ----------------------------------------------------- */

inline tick() {
	i = 0;
	do
	:: i < NS * LIMIT ->
		if
		:: NS == 1 && holder[i] == OURS ->
			ttl_left[i]--;
			if
			:: ttl_left[i] == 0 -> holder[i] = FREE
			:: else
			fi
		:: else
		fi;
		i++
	:: else -> break
	od;
	i = 0;
	if
	:: susp -> susp_for++
	:: else ->
		if
		:: (phase == HELD || phase == RUN) && left > FLOOR -> left--
		:: else
		fi;
		if
		:: (WAITING || PENDING) && age < AGE_CAP -> age++
		:: !(WAITING || PENDING) -> age = 0
		:: else
		fi
	fi
}

inline restart(s) {
	restarts++;
	i = 0;
	do
	:: i < LIMIT -> holder[K(s, i)] = FREE; ttl_left[K(s, i)] = 0; i++
	:: else -> break
	od;
	i = 0;
	printf("server %d restarts, empty\n", s);
	down[s] = KEPT_OUT;
	pre_round = pre_round || WAITING;
	pre_lease = pre_lease || phase == HELD || phase == RUN
}

proctype Env() {
	{ do
	/* A tick passes, unless a deadline is due that someone able to act must meet first. */
	:: d_step { !BLOCKS ->
		tick();
		if
		:: phase == RUN && (left <= 2 || (NS == 1 && ttl_left[K(0, slot)] <= 2)) -> SAY("1 ms later")
		:: else
		fi;
		CANON }
#if RESTARTS
	/* A server restarts without persistence: every key on it is gone. */
	:: d_step { restarts < RESTARTS -> restart(0); CANON }
#if NS == 3
	:: d_step { restarts < RESTARTS -> restart(1); CANON }
	:: d_step { restarts < RESTARTS -> restart(2); CANON }
#endif
#endif
	od } unless { phase == DONE }
}

/* The property, in every state. */
proctype Monitor() {
end:	atomic { !CHECKED -> SAY("VIOLATED"); assert(false) }
}

init {
	atomic {
		run Monitor();
		run Holder();
		i = 0;
		do
		:: i < NS -> run Server(i); i++
		:: else -> break
		od;
		i = 0;
		run Env()
	}
}
