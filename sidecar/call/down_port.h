/* The call engine's side of the downstream port (io/downstream-t.h): a
 * client's request stream is a call, made, fed and closed from here
 * (down_port.c), the one writer of the call's downstream fields. Worker
 * thread only. */
#ifndef MTD_DOWN_PORT_H
#define MTD_DOWN_PORT_H

#include "sidecar/io/downstream-t.h"

/* What worker.c hands mtd_down_setup. */
extern const struct mtd_down_port mtd_call_down_port;

#endif
