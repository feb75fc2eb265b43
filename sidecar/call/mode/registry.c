/* The fault-mode registry: one line per mode, indexed by enum
 * mtd_fault_mode (lib/fault/fault-t.h), so that a call finds its mode's
 * ops with one load (mtd_call_mode). */
#include "config.h"

#include "sidecar/call/mode/mode.h"

const struct mtd_fault_mode_ops *const mtd_fault_modes[] = {
        [MTD_FAULT_FAILFAST] = &mtd_fault_mode_failfast, [MTD_FAULT_FAILOVER] = &mtd_fault_mode_failover,
        [MTD_FAULT_FAILSAFE] = &mtd_fault_mode_failsafe, [MTD_FAULT_FAILBACK] = &mtd_fault_mode_failback,
        [MTD_FAULT_FORKING] = &mtd_fault_mode_forking,   [MTD_FAULT_BROADCAST] = &mtd_fault_mode_broadcast,
};

_Static_assert(sizeof(mtd_fault_modes) / sizeof(mtd_fault_modes[0]) == MTD_FAULT_BROADCAST + 1,
               "one ops table per fault mode");
