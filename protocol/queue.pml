/*
 * The claim / lease / fence protocol of django_dbqueue, as the code implements it, for Spin.
 *
 * docs/explanation/protocol-model.md explains the model beside the claim protocol; what each
 * step stands for in the code is said at the step. One Promela step that is `atomic` stands for
 * one database transaction (or one statement): the database serialises them, and the row locks
 * that matter across transactions (atomic mode's fenced SELECT … FOR UPDATE, which the rescue's
 * and the claim's SKIP LOCKED pass by) are modelled as `lk`.
 *
 * Time: each row keeps what is left of its lease (`left`, locked_until - now, in ticks of the
 * database's clock) and the Clock process takes one tick off every lease at once. Time is thus
 * unbounded while the state space stays finite, and a worker that is not scheduled while the
 * clock ticks is a worker paused past its lease (GC, SIGSTOP).
 *
 * Tokens are fresh per claim: the smallest token that nothing in the system remembers (no
 * worker, no row, negated or not, no cancel request), which is what 62 random bits give the
 * code. A token > 0 on a row is a live claim's; 0 is cleared (NULL) or RUN_ALONE (the `alone`
 * bit says which); < 0 is the negated token of the claim that ended the row.
 *
 * Parameters (-D on spin's command line):
 *   NW      workers (3)                 NR      rows (2; a claim takes up to BATCH of them)
 *   BATCH   rows per claim (2)          L       lease, in ticks (1)
 *   MAXATT  max attempts (2)            ATOMIC  1: queue_atomic, 0: lease mode (1)
 *   FAULTS  crashes + lost connections of all workers together (1)
 *   ADMIN   admin actions: cancel-running requests and bulk actions together (1)
 *   FAILS   handler failures in all (1) MAXREN  renewals per claim (1)
 *   GIVES   claims given back unprocessed, in all (1)
 * Mutations (plausible code mistakes; the checker must find a counterexample for each):
 *   MUT_OUTCOME_UNFENCED  the outcome UPDATE without the token (WHERE pk AND state = RUNNING)
 *   MUT_RESCUE_KEEPS_TOKEN  the rescue puts a row back READY without clearing its token
 *   MUT_RENEW_UNFENCED    renew without the token, so a renew after the lease expired and the
 *                         row was taken over still "succeeds" (WHERE pk AND state = RUNNING)
 */

#ifndef NW
#define NW 3
#endif
#ifndef NR
#define NR 2
#endif
#ifndef BATCH
#define BATCH 2
#endif
#ifndef L
#define L 1
#endif
#ifndef MAXATT
#define MAXATT 2
#endif
#ifndef ATOMIC
#define ATOMIC 1
#endif
#ifndef FAULTS
#define FAULTS 1
#endif
#ifndef ADMIN
#define ADMIN 1
#endif
#ifndef FAILS
#define FAILS 1
#endif
#ifndef GIVES
#define GIVES 1
#endif
#ifndef MAXREN
#define MAXREN 1
#endif

/* Enough tokens that a fresh one always exists: one per worker, per row, per cancel request. */
#define NTOK (NW + 2 * NR + 1)

mtype = { IDLE, READY, RUNNING, SUCCEEDED, FAILED, CANCELLED };

typedef Row {
    mtype st;
    short tok;     /* queue_token (see above) */
    bit alone;     /* the token is RUN_ALONE */
    byte left;     /* lease ticks left: queue_locked_until - now */
    byte att;      /* queue_attempts */
    byte lk;       /* a row lock held across statements: 0, or the worker's number */
    short creq;    /* a CancelRequest naming this claim's token, 0: none */
    /* ghosts: not in the database, for the properties */
    byte owner;    /* the worker whose claim is the row's current one, 0: none */
    byte effects;  /* atomic mode: handler effects committed since the row was enqueued */
}

Row row[NR];

/* What each worker remembers of its claim (index 1..NW; 0 unused). */
short mytok[NW + 1];
byte mine[NW + 1];     /* bitmask of the rows it holds */
byte wleft[(NW + 1) * NR];  /* ghost: each row's lease as the worker last wrote it (ticks left) */
#define WL(w, r) wleft[(w) * NR + (r)]
byte locked[NW + 1];   /* atomic mode: r + 1 while its transaction holds row r's lock */
byte rolled_back[NW + 1];  /* atomic mode: r + 1 once that transaction rolled back */

byte i;             /* init's loops */
byte faults = FAULTS;
byte admin = ADMIN;
byte fails = FAILS;
byte gives = GIVES;

#define final(r) (row[r].st == SUCCEEDED || row[r].st == FAILED || row[r].st == CANCELLED)
#define held(w, r) ((mine[w] & (1 << (r))) != 0)
#define live(w, r) ((held(w, r) && WL(w, r) > 0) || locked[w] == (r) + 1)

/* The fence of every write after a claim: WHERE pk = r AND queue_token = <the claim's>. */
#ifdef MUT_OUTCOME_UNFENCED
#define fenced(w, r) (mytok[w] > 0 && row[r].st == RUNNING)
#else
#define fenced(w, r) (mytok[w] > 0 && row[r].tok == mytok[w])  /* NULL matches nothing */
#endif

#ifdef MUT_RENEW_UNFENCED
#define renewable(w, r) (mytok[w] > 0 && row[r].st == RUNNING)
#else
#define renewable(w, r) (mytok[w] > 0 && row[r].tok == mytok[w])
#endif

/* -- the properties, checked in every state ------------------------------------------------ */

/* 1. No row is held by two live claims. */
#define two_live(r) ( \
    (live(1, r) && live(2, r)) || (NW > 2 && live(1, r) && live(3, r)) || \
    (NW > 2 && live(2, r) && live(3, r)))
/* 3. No stuck row: every row is final, claimable (READY), or RUNNING under a live claim's
 * token, whose lease runs down (the rescue takes it once it is out) or whose worker's
 * transaction holds it (and ends, or dies, rolling back). */
#define stuck(r) ((row[r].st == RUNNING && row[r].tok <= 0) || \
    (row[r].lk != 0 && locked[row[r].lk] != (r) + 1))
/* 4. Atomic mode: a SUCCEEDED row's effects committed exactly once, and never twice. */
#define doubled(r) (row[r].effects > 1 || (ATOMIC && row[r].st == SUCCEEDED && row[r].effects != 1))

#define bad(r) (two_live(r) || stuck(r) || doubled(r))

#define no_two_live_claims (!two_live(0) && (NR < 2 || !two_live(1)))
#define no_stuck_row (!stuck(0) && (NR < 2 || !stuck(1)))
#define effects_once (!doubled(0) && (NR < 2 || !doubled(1)))

bit two_live_claims, stuck_row, effects_twice;

active proctype Invariants() {
    /* 2. "a late outcome is never written" is asserted where each outcome is written. */
    atomic {
        (bad(0) || (NR > 1 && bad(1))) ->
        /* named flags, so that the report names the property broken */
        two_live_claims = !no_two_live_claims; stuck_row = !no_stuck_row; effects_twice = !effects_once;
        assert(!two_live_claims); assert(!stuck_row); assert(!effects_twice)
    }
}

/* -- writes after a claim: record() ---------------------------------------------------------- */

/* An outcome of worker w's claim on row r: the ghost says whether the claim was still the
 * row's (a late outcome is one written after its claim ended). */
inline late_check(w, r) {
    assert(row[r].owner == w)
}

/* The worker is done with row r of its claim (written, rejected or lost); with nothing left
 * of the claim it forgets the token. */
inline drop(w, r) {
    mine[w] = mine[w] & ~(1 << (r));
    WL(w, r) = 0;
    if
    :: mine[w] == 0 -> mytok[w] = 0
    :: else -> skip
    fi
}

inline ended(r) {
    row[r].owner = 0;
    row[r].left = 0;
    row[r].creq = 0   /* cancellation.forget(): the request goes with the claim's end */
}

/* SUCCEEDED: statements.succeed(); the token negated. */
inline succeed(w, r) {
    if
    :: fenced(w, r) ->
        late_check(w, r);
        row[r].st = SUCCEEDED; row[r].tok = -mytok[w]; row[r].alone = 0; ended(r)
    :: else -> skip    /* rejected: logged, job_rejected */
    fi
}

/* FAILED group: READY again (token cleared) while attempts are left, else FAILED (negated). */
inline fail(w, r) {
    if
    :: fenced(w, r) ->
        late_check(w, r);
        if
        :: row[r].att < MAXATT -> row[r].st = READY; row[r].tok = 0; row[r].alone = 0
        :: else -> row[r].st = FAILED; row[r].tok = -mytok[w]
        fi;
        ended(r)
    :: else -> skip
    fi
}

/* CANCELLED (worker or lease keeper, on a request for this claim). */
inline cancel_outcome(w, r) {
    if
    :: fenced(w, r) ->
        late_check(w, r);
        row[r].st = CANCELLED; row[r].tok = -mytok[w]; ended(r)
    :: else -> skip
    fi
}

/* GIVEN_BACK: READY, token cleared, the attempt not counted. */
inline give_back(w, r) {
    if
    :: fenced(w, r) ->
        late_check(w, r);
        row[r].st = READY; row[r].tok = 0; row[r].alone = 0; row[r].att = row[r].att - 1; ended(r)
    :: else -> skip
    fi
}

/* The lease keeper's renew (record.renew): fenced by the token only. */
inline renew(w) {
    atomic {
        for (r : 0 .. NR - 1) {
            if
            :: held(w, r) && locked[w] != r + 1 ->
                if
                :: renewable(w, r) -> row[r].left = L; WL(w, r) = L
                :: else -> drop(w, r)   /* lost: the keeper forgets it */
                fi
            :: else -> skip
            fi
        }
    }
}

/* -- the claim ------------------------------------------------------------------------------ */

inline fresh_token(t) {
    t = 1;
    do
    :: t > NTOK -> assert(false)   /* NTOK too small */
    :: else ->
        if
        :: (mytok[1] == t || (NW > 1 && mytok[2] == t) || (NW > 2 && mytok[3] == t) ||
            row[0].tok == t || row[0].tok == -t || row[0].creq == t ||
            (NR > 1 && (row[1].tok == t || row[1].tok == -t || row[1].creq == t))) -> t++
        :: else -> break
        fi
    od
}

/* SELECT … WHERE state = READY ORDER BY … LIMIT BATCH FOR UPDATE SKIP LOCKED, then one
 * UPDATE: RUNNING, a fresh token, the lease, attempts + 1 (queryset._take). The rows taken
 * follow run_alone_apart(): up to the first RUN_ALONE row, or that row alone when it comes
 * first. */
#define claimable ((row[0].st == READY && row[0].lk == 0) || (NR > 1 && row[1].st == READY && row[1].lk == 0))

inline claim(w) {
    d_step {
        fresh_token(t);
        mytok[w] = t;
        n = 0;
        for (r : 0 .. NR - 1) {
            if
            :: n < BATCH && row[r].st == READY && row[r].lk == 0 && row[r].alone && n > 0 ->
                n = BATCH   /* a RUN_ALONE row after others: the claim ends before it */
            :: n < BATCH && row[r].st == READY && row[r].lk == 0 && !(row[r].alone && n > 0) ->
                if
                :: n == 0 && row[r].alone -> n = BATCH   /* alone: nothing after it */
                :: else -> n++
                fi;
                row[r].st = RUNNING; row[r].tok = t; row[r].alone = 0; row[r].left = L;
                row[r].att++; row[r].owner = w; WL(w, r) = L;
                mine[w] = mine[w] | (1 << r)
            :: else -> skip
            fi
        }
    }
}

/* -- a worker --------------------------------------------------------------------------------- */

/* The worker's death (SIGKILL, OOM) or its connection's: the server rolls its open transaction
 * back (the lock goes, the effects with it). A crashed worker forgets its claim; after a lost
 * connection (atomic mode) it records the failure on a fresh one (atomic._one: rolled_back).
 * A paused worker is a worker the scheduler leaves behind while the clock ticks. */
inline crash(w) {
    atomic {
        faults > 0 -> faults--;
        if
        :: locked[w] > 0 -> row[locked[w] - 1].lk = 0; locked[w] = 0
        :: else -> skip
        fi;
        mine[w] = 0; mytok[w] = 0; rolled_back[w] = 0;
        for (r : 0 .. NR - 1) { WL(w, r) = 0 }
        r = 0
    }
}

proctype Worker(byte w) {
    short t; byte n; byte r; bit ren;
    /* Each option is one atomic step (one transaction or statement), its locals reset at its
     * end so that they do not multiply the states. */
    do
    :: atomic { mine[w] == 0 && rolled_back[w] == 0 && claimable -> claim(w); t = 0; n = 0; r = 0; ren = 0 }
    :: atomic { mine[w] != 0 && ren < MAXREN -> ren++; renew(w); r = 0 }
    /* The lease keeper found a cancel request for its claim: the row ends CANCELLED (lease
     * keeper's write; a row in the worker's own transaction is checked by the worker, below). */
    :: atomic {
        (held(w, 0) && locked[w] != 1 && row[0].creq == mytok[w] && mytok[w] != 0) ->
            cancel_outcome(w, 0); drop(w, 0)
       }
    :: atomic {
        (NR > 1 && held(w, 1) && locked[w] != 2 && row[1].creq == mytok[w] && mytok[w] != 0) ->
            cancel_outcome(w, 1); drop(w, 1)
       }
    :: crash(w)
#if ATOMIC
    /* Atomic mode, one row per transaction (worker/atomic.py _one): lock the own row with a
     * fenced SELECT … FOR UPDATE (it waits for another transaction's lock), run the handler,
     * record the outcome, commit. */
    :: atomic {
        mine[w] != 0 && locked[w] == 0 && rolled_back[w] == 0 && ((held(w, 0) && row[0].lk == 0) ||
                                                                   (!held(w, 0) && NR > 1 && row[1].lk == 0)) ->
        if
        :: held(w, 0) -> r = 0
        :: else -> r = 1
        fi;
        if
        :: mytok[w] > 0 && row[r].tok == mytok[w] -> row[r].lk = w; locked[w] = r + 1
        :: else -> drop(w, r)   /* lost: claimed.lost(row) */
        fi;
        r = 0
       }
    /* the handler returned, no cancel request: its effects and SUCCEEDED commit together */
    :: atomic {
        locked[w] > 0 && row[locked[w] - 1].creq != mytok[w] ->
        r = locked[w] - 1;
        succeed(w, r);
        if
        :: row[r].st == SUCCEEDED && row[r].tok == -mytok[w] -> row[r].effects++
        :: else -> skip
        fi;
        row[r].lk = 0; locked[w] = 0; drop(w, r); r = 0
       }
    /* the handler raised, was asked to cancel, or the connection was lost: rollback (the
     * effects go with it); the failure or the cancellation is written after, fenced, on the
     * connection (a fresh one) — as a step of its own: a pause may come in between. */
    :: atomic {
        locked[w] > 0 && (fails > 0 || row[locked[w] - 1].creq == mytok[w] || faults > 0) ->
        r = locked[w] - 1;
        if
        :: fails > 0 -> fails--
        :: row[r].creq == mytok[w] -> skip
        :: faults > 0 -> faults--
        fi;
        row[r].lk = 0; locked[w] = 0; rolled_back[w] = r + 1; r = 0
       }
    :: atomic {
        rolled_back[w] > 0 ->
        r = rolled_back[w] - 1;
        if
        :: row[r].creq == mytok[w] && mytok[w] != 0 -> cancel_outcome(w, r)
        :: else -> fail(w, r)
        fi;
        drop(w, r); rolled_back[w] = 0; r = 0
       }
#else
    /* Lease mode: the handler ran (outside any transaction); each row's outcome is recorded
     * fenced, the successes of the batch together (statements.succeed). */
    :: atomic {
        mine[w] != 0 ->
            for (r : 0 .. NR - 1) {
                if
                :: held(w, r) ->
                    if
                    :: true -> succeed(w, r)
                    :: fails > 0 -> fails--; fail(w, r)
                    :: gives > 0 -> gives--; give_back(w, r)   /* shutting down: given back */
                    fi
                :: else -> skip
                fi
            }
            mine[w] = 0; mytok[w] = 0; r = 0;
            for (r : 0 .. NR - 1) { WL(w, r) = 0 }
            r = 0
       }
#endif
    od
}

/* -- the rescue, the admin, the clock --------------------------------------------------------- */

/* rescue.py _rescue: RUNNING rows whose lease ran out, SKIP LOCKED (a row whose worker's
 * transaction holds its lock is passed by), each claim's rows recorded as that claim's
 * outcomes: cancelled if asked; READY alone if expired with others of its claim or with
 * attempts left; FAILED if alone on its last attempt. */
inline rescue_row(r, spared) {
    if
    :: row[r].creq == row[r].tok -> row[r].st = CANCELLED; row[r].tok = -row[r].tok
    :: else ->
        if
        :: !spared && row[r].att >= MAXATT -> row[r].st = FAILED; row[r].tok = -row[r].tok
        :: else ->
            row[r].st = READY; row[r].alone = 1;
#ifndef MUT_RESCUE_KEEPS_TOKEN
            row[r].tok = 0
#else
            skip
#endif
        fi
    fi;
    ended(r)
}

#define expired(r) (row[r].st == RUNNING && row[r].left == 0 && row[r].lk == 0)

active proctype Rescuer() {
    bit both;
    do
    :: atomic {
        (expired(0) || (NR > 1 && expired(1))) ->
        both = (NR > 1 && expired(0) && expired(1) && row[0].tok == row[1].tok);
        if
        :: expired(0) -> rescue_row(0, both)
        :: else -> skip
        fi;
        if
        :: NR > 1 && expired(1) -> rescue_row(1, both)
        :: else -> skip
        fi
       }
    od
}

/* An operator: cancel_running() (a request naming the running claim's token), and the
 * QuerySet's bulk actions, one UPDATE each, none touching a RUNNING row: cancel() of READY
 * rows, retry_now() of READY and FAILED rows (token cleared; FAILED ones start over), and
 * enqueue() of rows that are not RUNNING (a new enqueue: its effects count afresh). */
active proctype Admin() {
    byte r;
    do
    :: admin > 0 ->
        if
        :: r = 0
        :: NR > 1 -> r = 1
        fi;
        atomic {
            if
            :: row[r].st == RUNNING -> row[r].creq = row[r].tok
            :: row[r].st == READY -> row[r].st = CANCELLED
            :: row[r].st == READY || row[r].st == FAILED ->
                if
                :: row[r].st == FAILED -> row[r].att = 0
                :: else -> skip
                fi;
                row[r].st = READY; row[r].tok = 0; row[r].alone = 0
            :: row[r].st != RUNNING ->
                row[r].st = READY; row[r].tok = 0; row[r].alone = 0; row[r].att = 0;
                row[r].effects = 0
            :: else -> skip
            fi;
            admin--;
            r = 0
        }
    :: admin == 0 -> break
    od
}

active proctype Clock() {
    byte j;
    do
    :: d_step {
        for (j : 0 .. NR - 1) {
            if
            :: row[j].left > 0 -> row[j].left--
            :: else -> skip
            fi
        }
        for (j : NR .. (NW + 1) * NR - 1) {
            if
            :: wleft[j] > 0 -> wleft[j]--
            :: else -> skip
            fi
        }
        j = 0
       }
    od
}

/* Every row enqueued (READY, due now), then the workers start. */
init {
    atomic {
        for (i : 0 .. NR - 1) { row[i].st = READY }
        for (i : 1 .. NW) { run Worker(i) }
        i = 0
    }
}

/* Liveness (spin -a, pan -a -f, with -DLIVENESS): with the faults, failures and admin actions
 * bounded and every process scheduled fairly, every row ends in a final state. */
#ifdef LIVENESS
ltl every_row_ends { <>[] (final(0) && (NR < 2 || final(1))) }
#endif
