/*
 * The shared mode (-s/--shared beside -x/--exclusive) of redlock-run, as a Promela model for
 * Spin: several runs, each shared or exclusive, on one server that holds the data layout of
 * the shared mode's design (docs/design.md, "Shared mode"): K (free, an
 * exclusive holder's value or a group value), every share's expiry ({K}:shares:exp), the waiters' queue ({K}:queue)
 * with the shared marks ({K}:queue:shared) and the woken record ({K}:woken).
 * README.md beside this file says what is modelled, what is abstracted, and the bounds.
 *
 * lease.pml checks one holder's lease in full detail (clock rates, the guardian's rounding,
 * Redlock): while its command runs, its key is on the server. This model keeps that
 * mechanism in small numbers (a lease counted from the request's send, the server's expiry
 * from its arrival, SIGKILL at the lease's end, pauses) and checks what lease.pml cannot:
 * how the shares, the group value, the queue and the wake-ups of several runs fit together.
 *
 * A tick is one unit of the server's clock; every deadline is a countdown.
 */

/* ---- Numbers (small: the detailed timing is lease.pml's) --------------------------------- */
#define TTL        4    /* a share's expiry, K's PTTL: TTL ticks from the script that set it */
#define VALIDITY   3    /* the lease on the holder's clock, from the request's send (TTL - drift) */
#define RENEW_AT   2    /* a renewal is due once the lease has at most this left */
#define GRACE      1    /* no renewal answer is taken with this or less left (give_up_at) */
#ifndef DELAY
#define DELAY      1    /* most ticks a request spends on the wire */
#endif
#define WORK       2    /* LIVE: a command ends by itself within WORK ticks of its start */
#define RETRY_MAX  TTL  /* a waiter comes back at the pttl it was told, at most this */

/* ---- Configuration (model/check sets these with -D) -------------------------------------- */
#ifndef MODE1
#define MODE1 SH        /* run 0 is exclusive; runs 1 and 2 are MODE1 and MODE2 */
#endif
#ifndef MODE2
#define MODE2 SH
#endif
#ifndef PAUSES
#define PAUSES 1        /* redlock-run of a holder may be stopped and continued at any moment */
#endif
#ifndef DIES
#define DIES 0          /* LIVE: run 2's redlock-run may die (SIGKILL) while its command runs: no release */
#endif
#ifndef LIVE
#define LIVE 0          /* check that the exclusive run 0 is not starved (LTL, weak fairness) */
#endif
#ifndef TOGETHER
#define TOGETHER 0      /* check that shared waiters woken by an exclusive release all get in */
#endif
/* What the implementation should do where the first sketch of the design is read as written, and broken ones. */
#ifndef FIX_AHEAD
#define FIX_AHEAD 1     /* a share joins a group unless an exclusive waiter is queued AHEAD of it (0: the first sketch: unless one is queued at all) */
#endif
#ifndef ADMIT_PAST_WRITER
#define ADMIT_PAST_WRITER 0 /* broken: a share joins a group with an exclusive waiter queued */
#endif
#ifndef NO_GROUP_CHECK
#define NO_GROUP_CHECK 0    /* broken: a share is added without checking K holds a group value */
#endif
#ifndef WITNESS
#define WITNESS 0       /* 1, 2, 3: check instead that something the model must reach is never reached */
#endif
#ifndef LEASE_CHECK
#define LEASE_CHECK 1       /* check also that a running command's entry is on the server */
#endif
#ifndef RELEASE_ANY_K
#define RELEASE_ANY_K 0     /* broken: a share's release ends K when no share is left, whatever K holds */
#endif
#ifndef NO_K_EXTEND
#define NO_K_EXTEND 0       /* broken: a share joins (or renews) without raising K's PTTL */
#endif

#define NP 3
#define EX 0            /* modes */
#define SH 1

/* Phases of a run (one process plays one run after another, each with a fresh token). */
#define IDLE  0         /* between runs */
#define ACQ   1         /* its acquisition is on the wire */
#define WAIT  2         /* busy: queued, listening on its channel, until woken or its retry time */
#define HELD  3         /* won; the command is not started yet */
#define RUN   4         /* the command runs (the critical section) */
#define REL   5         /* the command has ended; the release is on the wire (or none is sent) */
#define DEAD  6         /* redlock-run died for good (DIES); the command has been killed */

#define R_NONE  0
#define R_ACQ   1
#define R_RENEW 2
#define R_REL   3
#define A_NONE  0
#define A_NO    1
#define A_YES   2

/* K */
#define FREE  0
#define EXCL  1
#define GROUP 2

/* ---- State -------------------------------------------------------------------------------- */
byte kst;               /* what K holds */
byte kown;              /* EXCL: whose value */
byte kttl;              /* K's PTTL, in ticks (0: no expiry pending; K free) */
byte sexp[NP];          /* {K}:shares:exp: ticks until run p's share expires; 0: no share */
byte q[NP];             /* {K}:queue in arrival order: p + 1 per entry, 0 past the end */
bit qsh[NP];            /* {K}:queue:shared: run p is queued in shared mode */
bit woken[NP];          /* {K}:woken: run p was woken and has not tried since */

bit mode[NP];
byte ph[NP];
byte left[NP];          /* ticks until the lease's end on the holder's clock (HELD, RUN) */
byte age[NP];           /* ticks since the request on the wire (or its answer) left */
byte req[NP];
byte ans[NP];
bit renewing[NP];
bit lost[NP];
bit paused[NP];
bit msg[NP];            /* a wake-up on run p's channel, not yet read */
byte rt[NP];            /* WAIT: ticks until it comes back by itself (the pttl it was told) */
byte work[NP];          /* LIVE: ticks until the command ends by itself */
bit bywx[NP];           /* TOGETHER: woken by an exclusive release, and not tried since */

byte i, j, n, m;        /* scratch, 0 between steps */
bit overlap_seen;       /* set by the monitor, at a violation only */
bit lease_gone;
#if WITNESS == 2
bit killed_paused[NP];  /* its command was killed at the lease's end while redlock-run was stopped */
#endif
#if WITNESS == 3
bit renewed_running;    /* a share was renewed while its command ran */
#endif

/* What a replay of a counterexample (spin -t) prints, one line a step; the checker prints
 * nothing. Runs are named by number (run 0 is the exclusive one), K as free, x<run> or
 * group, the shares as their expiries, the queue as <run><s|x>, ! for woken. */
#define QSAY(k) printf(" %c%c%c", (q[k] == 0 -> '-' : '0' + q[k] - 1), \
	(q[k] == 0 -> ' ' : (qsh[q[k] - 1] -> 's' : 'x')), (q[k] != 0 && woken[q[k] - 1] -> '!' : ' '))
#define SAY(p, what) printf("run %d (%c) ", p, (mode[p] == EX -> 'x' : 's')); printf(what); \
	printf("   | K %c%c ttl %d; share expiries %d %d %d; queue", \
		(kst == FREE -> '-' : (kst == EXCL -> 'x' : 'G')), (kst == EXCL -> '0' + kown : ' '), \
		kttl, sexp[0], sexp[1], sexp[2]); \
	QSAY(0); QSAY(1); QSAY(2); \
	printf("; leases %d %d %d\n", left[0], left[1], left[2])

#define LIVE_W(w) ((ph[w] == ACQ || ph[w] == WAIT))  /* subscribed: PUBLISH would count it */


/* ---- Symmetry -------------------------------------------------------------------------------
 * Runs 1 and 2 are both shared: two states that differ only by swapping them are alike to
 * every property checked, and each step ends by putting the one with the smaller state
 * first (up to half the states). Not with the witnesses and the LTL, which name run 1 or
 * follow processes. */
#ifndef SYMMETRY
#define SYMMETRY (MODE1 == MODE2 && !LIVE && !WITNESS)
#endif
#define SKEY(p) ((ph[p] << 23) + (left[p] << 21) + (age[p] << 19) + (req[p] << 17) + \
	(ans[p] << 15) + (renewing[p] << 14) + (lost[p] << 13) + (paused[p] << 12) + \
	(msg[p] << 11) + (bywx[p] << 10) + (rt[p] << 7) + (work[p] << 5) + (sexp[p] << 2) + \
	(qsh[p] << 1) + woken[p])
#define SWAP(a) n = a[1]; a[1] = a[2]; a[2] = n
#if SYMMETRY
int k1, k2;             /* scratch of `canon`, 0 between steps */
inline canon() {
	k1 = SKEY(1) * 4; k2 = SKEY(2) * 4;
	m = 0;
	do
	:: m < NP ->
		if :: q[m] == 2 -> k1 = k1 + m + 1 :: q[m] == 3 -> k2 = k2 + m + 1 :: else fi; m++
	:: else -> break
	od;
	if
	:: k1 > k2 ->
		SWAP(ph); SWAP(left); SWAP(age); SWAP(req); SWAP(ans); SWAP(renewing); SWAP(lost);
		SWAP(paused); SWAP(msg); SWAP(bywx); SWAP(rt); SWAP(work); SWAP(sexp); SWAP(qsh);
		SWAP(woken);
		m = 0;
		do
		:: m < NP ->
			if :: q[m] == 2 -> q[m] = 3 :: q[m] == 3 -> q[m] = 2 :: else fi; m++
		:: else -> break
		od;
		if :: kst == EXCL && kown == 1 -> kown = 2 :: kst == EXCL && kown == 2 -> kown = 1 :: else fi
	:: else
	fi;
	m = 0; n = 0; k1 = 0; k2 = 0
}
#define CANON canon()
#else
#define CANON skip
#endif

/* ---- The queue ---------------------------------------------------------------------------- */
inline enqueue(p, shared) {
	/* ZADD NX: a run keeps its place; SADD the mark with a shared one. */
	m = 0;
	do
	:: m < NP && q[m] != 0 && q[m] != p + 1 -> m++
	:: else -> break
	od;
	if
	:: m < NP && q[m] == 0 -> q[m] = p + 1; qsh[p] = shared
	:: else
	fi;
	m = 0
}

inline dequeue(p) {
	/* ZREM, SREM, HDEL */
	m = 0;
	do
	:: m < NP && q[m] != p + 1 -> m++
	:: else -> break
	od;
	if
	:: m < NP ->
		do
		:: m < NP - 1 -> q[m] = q[m + 1]; m++
		:: else -> break
		od;
		q[NP - 1] = 0
	:: else
	fi;
	qsh[p] = 0; woken[p] = 0;
	m = 0
}

/* Drops the waiters found gone (no subscriber) at the queue's head: what wake_next does as
 * it meets them. Used only where a gone waiter would otherwise decide something. */
inline drop_gone() {
	do
	:: q[0] != 0 && !LIVE_W(q[0] - 1) -> n = q[0] - 1; dequeue(n); n = 0
	:: else -> break
	od
}

/* n := whether a live exclusive waiter is queued before run p (all of the queue when p is
 * not in it); gone ones met on the way are dropped (their PUBLISH is heard by nobody). j :=
 * the first such waiter + 1. */
inline excl_ahead(p) {
	n = 0; j = 0;
	do
	:: j < NP && q[j] != 0 && q[j] != p + 1 && n == 0 ->
		if
		:: !LIVE_W(q[j] - 1) -> i = q[j] - 1; dequeue(i); i = 0
		:: else ->
			if
			:: !qsh[q[j] - 1] -> n = q[j]
			:: else
			fi;
			j++
		fi
	:: else -> break
	od;
	j = 0
}

/* wake_next: the first live waiter that was not woken already is woken. */
inline wake_one() {
	j = 0;
	do
	:: j < NP && q[j] != 0 ->
		if
		:: !LIVE_W(q[j] - 1) -> i = q[j] - 1; dequeue(i); i = 0
		:: woken[q[j] - 1] -> j++
		:: else -> woken[q[j] - 1] = 1; msg[q[j] - 1] = 1; break
		fi
	:: else -> break
	od;
	j = 0
}

/* An exclusive release: the leading run of live shared waiters is woken, all at once, or
 * the first waiter when it is exclusive. */
inline wake_after_exclusive() {
	drop_gone();
	j = 0;
	if
	:: q[0] != 0 && !qsh[q[0] - 1] ->
		woken[q[0] - 1] = 1; msg[q[0] - 1] = 1
	:: q[0] != 0 && qsh[q[0] - 1] ->
		do
		:: j < NP && q[j] != 0 && !LIVE_W(q[j] - 1) -> i = q[j] - 1; dequeue(i); i = 0
		:: j < NP && q[j] != 0 && LIVE_W(q[j] - 1) && qsh[q[j] - 1] ->
			woken[q[j] - 1] = 1; msg[q[j] - 1] = 1;
#if TOGETHER
			bywx[q[j] - 1] = 1;
#endif
			j++
		:: else -> break
		od
	:: else
	fi;
	j = 0
}

/* ---- The server's scripts ------------------------------------------------------------------ */
/* Expired shares are pruned by the tick itself (an expiry of 0 is no member): every script
 * prunes before deciding anything. */

inline max_share() {
	n = 0; i = 0;
	do
	:: i < NP -> if :: sexp[i] > n -> n = sexp[i] :: else fi; i++
	:: else -> break
	od;
	i = 0
}

inline join(p) {
	sexp[p] = TTL;
#if !NO_K_EXTEND
	if :: kttl < TTL -> kttl = TTL :: else fi;
#endif
	dequeue(p);
	ans[p] = A_YES
}

inline busy(p, pttl) {
	enqueue(p, mode[p]);
	rt[p] = pttl;
	ans[p] = A_NO
}

inline acquire_shared(p) {
	if
	:: kst == FREE ->
		excl_ahead(p);
		if
		:: n == 0 ->
			kst = GROUP; kttl = TTL; join(p)
		:: else ->
			/* The exclusive waiter ahead is woken (it may not know K is free). */
			if :: !woken[n - 1] -> woken[n - 1] = 1; msg[n - 1] = 1 :: else fi;
			busy(p, TTL)
		fi
	:: kst == GROUP || (NO_GROUP_CHECK && kst == EXCL) ->
#if FIX_AHEAD
		excl_ahead(p);
#else
		excl_ahead(NP);  /* any live exclusive waiter queued */
#endif
		if
		:: n == 0 || ADMIT_PAST_WRITER -> join(p)
		:: else ->
#if TOGETHER
			/* woken with its fellow readers, who got in: it must get in too */
			assert(!bywx[p]);
#endif
			busy(p, kttl)
		fi
	:: else -> busy(p, kttl)
	fi;
	n = 0
}

inline acquire_exclusive(p) {
	if
	:: kst == FREE -> kst = EXCL; kown = p; kttl = TTL; dequeue(p); ans[p] = A_YES
	:: else -> busy(p, kttl)
	fi
}

inline renew(p) {
	if
	:: mode[p] == EX && kst == EXCL && kown == p -> kttl = TTL; ans[p] = A_YES
	:: mode[p] == SH && kst == GROUP && sexp[p] > 0 ->
		sexp[p] = TTL;
#if !NO_K_EXTEND
		if :: kttl < TTL -> kttl = TTL :: else fi;
#endif
		ans[p] = A_YES
	:: else -> ans[p] = A_NO
	fi
}

inline release(p) {
	if
	:: mode[p] == EX && kst == EXCL && kown == p ->
		kst = FREE; kttl = 0; wake_after_exclusive()
	:: mode[p] == SH && (kst == GROUP || (RELEASE_ANY_K && kst != FREE)) ->
		sexp[p] = 0;
		max_share();
		if
		:: n > 0 -> kttl = n
		:: else -> kst = FREE; kttl = 0; wake_one()
		fi;
		n = 0
	:: else
	fi
}

inline serve(p) {
	if
	:: req[p] == R_ACQ ->
		woken[p] = 0;   /* trying is acting on its wake-up */
		if
		:: mode[p] == SH -> acquire_shared(p)
		:: else -> acquire_exclusive(p)
		fi;
		if
		:: ans[p] == A_YES -> SAY(p, "server: acquire: taken")
		:: else -> SAY(p, "server: acquire: busy, queued")
		fi;
		bywx[p] = 0
	:: req[p] == R_RENEW -> renew(p); SAY(p, "server: renewal")
	:: req[p] == R_REL -> release(p); ph[p] = IDLE; age[p] = 0; SAY(p, "server: released")
	fi;
	req[p] = R_NONE
}

proctype Server() {
	do
	:: d_step { req[0] != R_NONE -> serve(0); CANON }
	:: d_step { req[1] != R_NONE -> serve(1); CANON }
	:: d_step { req[2] != R_NONE -> serve(2); CANON }
	od
}

/* ---- A run of redlock-run ------------------------------------------------------------------ */

/* The command has ended (by itself, or killed); the release is sent only while the lease
 * holds (release_deadline) and redlock-run is not stopped. */
inline ended(p, send) {
	renewing[p] = 0; lost[p] = 0; paused[p] = 0; work[p] = 0; ans[p] = A_NONE;
	if
	:: send -> left[p] = 0; req[p] = R_REL; age[p] = 0; ph[p] = REL
	:: else -> left[p] = 0; age[p] = 0; ph[p] = IDLE
	fi
}

/* No token of its last run is left anywhere: the next run is new to the server (a model of
 * fresh tokens with one process). */
#define GONE(p) (sexp[p] == 0 && !(kst == EXCL && kown == p) && req[p] == R_NONE)

#define CAN(p) (!paused[p])

proctype Run(byte p) {
	do
	/* A new run: its acquisition (with its mode) leaves now; its lease counts from now. */
	:: d_step { ph[p] == IDLE && GONE(p) && CAN(p) -> msg[p] = 0; rt[p] = 0; req[p] = R_ACQ; age[p] = 0; ans[p] = A_NONE; ph[p] = ACQ;
		SAY(p, "a new run asks for the lock"); CANON }
	/* The answer: the lock, with a lease of VALIDITY from the send, or busy: wait. */
	:: d_step { ph[p] == ACQ && ans[p] == A_YES && CAN(p) ->
		ans[p] = A_NONE;
		if
		:: age[p] < VALIDITY -> left[p] = VALIDITY - age[p]; ph[p] = HELD
		:: else -> ended(p, 0)   /* the lease ran out on the way: nothing to run */
		fi; age[p] = 0; CANON }
	:: d_step { ph[p] == ACQ && ans[p] == A_NO && CAN(p) -> ans[p] = A_NONE; age[p] = 0; ph[p] = WAIT; SAY(p, "waits"); CANON }
	/* A waiter tries again when woken, or at its retry time. */
	:: d_step { ph[p] == WAIT && (msg[p] || rt[p] == 0) && CAN(p) ->
		if :: msg[p] -> SAY(p, "woken: tries again") :: else -> SAY(p, "its retry time: tries again") fi;
		msg[p] = 0; rt[p] = 0; req[p] = R_ACQ; age[p] = 0; ph[p] = ACQ; CANON }
	/* The command starts, if the lease holds (the check before exec). */
	:: d_step { ph[p] == HELD && CAN(p) -> msg[p] = 0; work[p] = LIVE * WORK; ph[p] = RUN; SAY(p, "the command starts"); CANON }
	/* Renewal: due at RENEW_AT, sent until give_up_at. */
	:: d_step { (ph[p] == HELD || ph[p] == RUN) && CAN(p) && !renewing[p] && !lost[p] &&
	            left[p] <= RENEW_AT && left[p] > GRACE ->
		req[p] = R_RENEW; age[p] = 0; renewing[p] = 1; SAY(p, "renewal sent"); CANON }
	:: d_step { renewing[p] && ans[p] != A_NONE && CAN(p) ->
		if
		:: ans[p] == A_YES && left[p] > GRACE && VALIDITY - age[p] > left[p] ->
			left[p] = VALIDITY - age[p]; SAY(p, "renewed");
#if WITNESS == 3
			renewed_running = renewed_running || (mode[p] == SH && ph[p] == RUN);
#endif
		:: ans[p] == A_NO -> lost[p] = 1; SAY(p, "renewal refused: the lock is lost")
		:: else
		fi;
		ans[p] = A_NONE; age[p] = 0; renewing[p] = 0; CANON }
	/* The lock is lost: the command is stopped (exit 76). */
	:: d_step { ph[p] == RUN && lost[p] && CAN(p) -> ended(p, 0); SAY(p, "lost: the command is stopped"); CANON }
	/* The supervisor's SIGKILL at the lease's end; the guardian's, even while redlock-run
	 * is stopped (it is never stopped at the same time: lease.pml's both-stopped limit). */
	:: d_step { ph[p] == RUN && left[p] == 0 ->
		n = paused[p]; ended(p, 0); paused[p] = n;
#if WITNESS == 2
		killed_paused[p] = n;
#endif
		n = 0; SAY(p, "the lease's end: SIGKILL"); CANON }
	:: d_step { ph[p] == HELD && left[p] == 0 -> ended(p, 0); CANON }
	/* The command ends by itself, at any moment (LIVE: within WORK ticks). */
	:: d_step { ph[p] == RUN && !LIVE -> ended(p, CAN(p) && left[p] > 1); SAY(p, "the command ends"); CANON }
	:: d_step { ph[p] == RUN && LIVE && work[p] == 0 && !lost[p] -> ended(p, CAN(p) && left[p] > 1); SAY(p, "the command ends"); CANON }
#if PAUSES
	:: d_step { (ph[p] == HELD || ph[p] == RUN) && !paused[p] -> paused[p] = 1; SAY(p, "redlock-run is stopped"); CANON }
	:: d_step { paused[p] -> paused[p] = 0; SAY(p, "redlock-run continues"); CANON }
#endif
#if DIES
	/* redlock-run dies while its command runs: the guardian kills the command at the
	 * lease's end; nothing is released. */
	:: d_step { ph[p] == RUN && p == 2 -> renewing[p] = 0; req[p] = R_NONE; ans[p] = A_NONE; ph[p] = DEAD; SAY(p, "redlock-run dies"); CANON }
	/* its guardian kills the command at the lease's end; the process is gone (its share
	 * stays until its expiry), and plays a new run once nothing of it is left */
	:: d_step { ph[p] == DEAD && left[p] == 0 -> ph[p] = IDLE; CANON }
#endif
	od
}

/* ---- Time --------------------------------------------------------------------------------- */
/* A tick may not pass a deadline that someone able to act must meet first. */
#define DUE(p) ((ph[p] == RUN && left[p] == 0) || (ph[p] == HELD && (left[p] == 0 || CAN(p))) || \
	(ph[p] == DEAD && left[p] == 0) || \
	(req[p] != R_NONE && (req[p] != R_REL || LIVE) && age[p] >= DELAY) || \
	(ph[p] == WAIT && rt[p] == 0 && CAN(p)) || \
	(LIVE && ph[p] == RUN && work[p] == 0 && CAN(p)) || \
	(ans[p] != A_NONE && (ph[p] == ACQ || renewing[p]) && age[p] >= 2 * DELAY && CAN(p)))

inline tick_run(p) {
	if :: sexp[p] > 0 -> sexp[p]-- :: else fi;
	if :: (ph[p] == HELD || ph[p] == RUN || ph[p] == DEAD) && left[p] > 0 -> left[p]-- :: else fi;
	if :: (req[p] != R_NONE && (req[p] != R_REL || LIVE) || ans[p] != A_NONE) && age[p] < VALIDITY -> age[p]++ :: else fi;
	if :: ph[p] == WAIT && rt[p] > 0 -> rt[p]-- :: else fi;
	if :: ph[p] == RUN && work[p] > 0 -> work[p]-- :: else fi
}

proctype Env() {
	do
	:: d_step { !DUE(0) && !DUE(1) && !DUE(2) ->
		tick_run(0); tick_run(1); tick_run(2);
		printf("-- 1 tick\n");
		if
		:: kttl > 0 -> kttl--;
			if :: kttl == 0 -> kst = FREE; kown = 0 :: else fi
		:: else
		fi;
		skip; CANON }
	od
}

/* ---- What is checked ----------------------------------------------------------------------- */
#define RUNS(p) (ph[p] == RUN || (ph[p] == DEAD && left[p] > 0))
#define OVERLAP(a, b) (RUNS(a) && RUNS(b) && (mode[a] == EX || mode[b] == EX))
#define ON_SERVER(p) (!LEASE_CHECK || !RUNS(p) || (mode[p] == EX && kst == EXCL && kown == p) || \
	(mode[p] == SH && kst == GROUP && sexp[p] > 0 && kttl >= sexp[p]))

#if WITNESS == 1
#define BAD (RUNS(1) && RUNS(2))        /* two shares run together */
#elif WITNESS == 2
/* the exclusive run runs after a stopped shared holder's command was killed, its share
 * expired, before that holder continued */
#define BAD (RUNS(0) && paused[1] && killed_paused[1])
#elif WITNESS == 3
#define BAD (renewed_running && RUNS(0))  /* a renewed share, and later the exclusive run */
#else
#define BAD (OVERLAP(0, 1) || OVERLAP(0, 2) || OVERLAP(1, 2) || \
             !ON_SERVER(0) || !ON_SERVER(1) || !ON_SERVER(2))
#endif

#if !LIVE
proctype Monitor() {
end:	atomic { BAD ->
		SAY(0, "VIOLATED");
#if WITNESS
		assert(false);
#endif
		overlap_seen = OVERLAP(0, 1) || OVERLAP(0, 2) || OVERLAP(1, 2);
		assert(!overlap_seen);   /* an exclusive command runs beside another command */
		lease_gone = 1;
		assert(!lease_gone)      /* a command runs while its entry is gone from the server */
	}
}
#else
/* The exclusive run 0, once it asks, gets to run its command. */
#define XWANTS (ph[0] == ACQ || ph[0] == WAIT)
#define XRUNS  (ph[0] == RUN)
ltl writer_not_starved { [] (XWANTS -> <> XRUNS) }
#endif

init {
	atomic {
		mode[0] = EX; mode[1] = MODE1; mode[2] = MODE2;
#if !LIVE
		run Monitor();
#endif
		run Server();
		run Run(0); run Run(1); run Run(2);
		run Env()
	}
}
