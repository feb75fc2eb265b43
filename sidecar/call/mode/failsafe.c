/* FAILSAFE: a call that failed is answered OK with an empty message
 * (mtd_fault_decide's SAFE_OK), and the failure logged. */
#include "config.h"

#include "core/clock.h"
#include "core/log.h"
#include "sidecar/call/mode/mode.h"
#include "sidecar/turn.h"

static void log_failsafe(struct mtd_call *call, const char *what)
{
	/* Logged, but at most a line a second per worker: an outage must not
	 * turn into a log flood. */
	uint64_t held;
	if (!mtd_log_gate_pass(&call->w->failsafe_log, mtd_now_ns(), 1000000000, &held))
		return;
	if (held)
		MTD_WARN("FAILSAFE: %s; answered OK with an empty message (and %llu more in the last second)", what,
		         (unsigned long long)held);
	else
		MTD_WARN("FAILSAFE: %s; answered OK with an empty message", what);
}

/* The verdict answers the call all the same: an empty OK is logged (a
 * fallback answer is the operator's own, and says what it is). */
static void on_answered_anyway(struct mtd_call *call, const char *what, enum mtd_fault_action action)
{
	if (action == MTD_FAULT_SAFE_OK)
		log_failsafe(call, what);
}

const struct mtd_fault_mode_ops mtd_fault_mode_failsafe = {
        .name = "FAILSAFE",
        .on_answered_anyway = on_answered_anyway,
};
