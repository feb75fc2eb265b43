/* The DNS endpoint sources (dns.c, evdns on the control loop):
 * discovery.dns, and static endpoints written with a host name. */
#ifndef MTD_DNS_H
#define MTD_DNS_H

#include "sidecar/control/control.h"

extern const struct mtd_disc_source_ops mtd_dns_source_ops;
extern const struct mtd_disc_source_ops mtd_dns_static_source_ops;

#endif
