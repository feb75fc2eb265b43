/* FAILFAST: one attempt, and its failure is the call's (unless the
 * policy's fallback answers, or a refused stream is replayed: gRPC's
 * transparent retry, mtd_fault_decide's). Every hook is the engine's
 * default. */
#include "config.h"

#include "sidecar/call/mode/mode.h"

const struct mtd_fault_mode_ops mtd_fault_mode_failfast = {
        .name = "FAILFAST",
};
