/* FAILBACK (Dubbo's failback cluster, for fire-and-forget calls): a call
 * that failed is answered OK at once (or with the fallback) and a copy of
 * it is re-sent in the background (call/failback.c: the worker's queue
 * and the copies' tries). */
#include "config.h"

#include "sidecar/call/failback.h"
#include "sidecar/call/mode/mode.h"

/* Whatever the call is answered (an empty OK, or the fallback), a copy is
 * queued to be re-sent. */
static void on_answered_anyway(struct mtd_call *call, const char *what, enum mtd_fault_action action)
{
	(void)action;
	mtd_failback_enqueue(call, what);
}

const struct mtd_fault_mode_ops mtd_fault_mode_failback = {
        .name = "FAILBACK",
        .on_answered_anyway = on_answered_anyway,
};
