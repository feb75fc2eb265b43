/* The attempt state machine: one upstream try of a call.
 *
 *   BACKOFF --START--> PENDING --STREAM--> OPEN --HEADERS--> ANSWERING
 *   (delay)            (in a pool)           |                   |
 *                                            +----TRAILERS-------+--> DONE
 *   any of BACKOFF/PENDING/OPEN/ANSWERING --FAIL--> FAILED
 *   any of BACKOFF/PENDING/OPEN/ANSWERING --CANCEL--> CANCELLED
 *
 * BACKOFF: holds nothing but a timer; PENDING: a pool slot (the pool's
 * FIFO); OPEN / ANSWERING: an upstream stream and a read position in the
 * call's retained request bytes. ANSWERING means the call committed to this
 * attempt (its response headers went to the client): it is never replayed.
 * DONE, FAILED, CANCELLED hold nothing; FAILED hands the outcome to
 * mtd_fault_decide(), which says what the call does next (another attempt,
 * or the call's end). An attempt whose stream is still open when it is
 * cancelled sends RST_STREAM CANCEL (the caller's job). */
#include "config.h"

#include "fault/fault.h"

#define X (-1)

static const signed char next_state[MTD_ATTEMPT_N_STATES][MTD_AEV_N_EVENTS] = {
        /*                START                STREAM            HEADERS                TRAILERS          FAIL                 CANCEL */
        [MTD_ATTEMPT_BACKOFF] = {MTD_ATTEMPT_PENDING, X, X, X, MTD_ATTEMPT_FAILED, MTD_ATTEMPT_CANCELLED},
        [MTD_ATTEMPT_PENDING] = {X, MTD_ATTEMPT_OPEN, X, X, MTD_ATTEMPT_FAILED, MTD_ATTEMPT_CANCELLED},
        [MTD_ATTEMPT_OPEN] = {X, X, MTD_ATTEMPT_ANSWERING, MTD_ATTEMPT_DONE, MTD_ATTEMPT_FAILED, MTD_ATTEMPT_CANCELLED},
        [MTD_ATTEMPT_ANSWERING] = {X, X, X, MTD_ATTEMPT_DONE, MTD_ATTEMPT_FAILED, MTD_ATTEMPT_CANCELLED},
        [MTD_ATTEMPT_DONE] = {X, X, X, X, X, X},
        [MTD_ATTEMPT_FAILED] = {X, X, X, X, X, X},
        [MTD_ATTEMPT_CANCELLED] = {X, X, X, X, X, X},
};

int mtd_fault_attempt_step(enum mtd_attempt_state s, enum mtd_attempt_event ev)
{
	if ((unsigned)s >= MTD_ATTEMPT_N_STATES || (unsigned)ev >= MTD_AEV_N_EVENTS)
		return -1;
	return next_state[s][ev];
}

bool mtd_fault_attempt_live(enum mtd_attempt_state s)
{
	return s == MTD_ATTEMPT_BACKOFF || s == MTD_ATTEMPT_PENDING || s == MTD_ATTEMPT_OPEN ||
	       s == MTD_ATTEMPT_ANSWERING;
}

const char *mtd_fault_attempt_state_name(enum mtd_attempt_state s)
{
	static const char *const names[MTD_ATTEMPT_N_STATES] = {
	        "BACKOFF", "PENDING", "OPEN", "ANSWERING", "DONE", "FAILED", "CANCELLED",
	};
	return (unsigned)s < MTD_ATTEMPT_N_STATES ? names[s] : "?";
}
