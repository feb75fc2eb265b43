/* FAILOVER: a failed attempt is replayed on another endpoint, from the
 * call's kept request bytes, while no response header reached the app
 * (fault.retries, backoff, the retry budget: mtd_fault_decide's). Every
 * hook is the engine's default; a failure once no endpoint is left says
 * so. */
#include "config.h"

#include "sidecar/call/mode/mode.h"

const struct mtd_fault_mode_ops mtd_fault_mode_failover = {
        .name = "FAILOVER",
        .fails_over = true,
};
