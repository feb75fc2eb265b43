/* Helpers lib/xds's translators share (not an API). */
#ifndef MTD_XDS_INT_H
#define MTD_XDS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config-t.h"
#include "google/protobuf/any.pb-c.h"
#include "google/protobuf/duration.pb-c.h"
#include <protobuf-c/protobuf-c.h>

/* Write the reason (printf) into why; returns -EINVAL. */
int mtd_xds__refuse(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A Duration in ms, in (0, 1 day]; absent: dflt; -1 when out of range. */
int64_t mtd_xds__dur_ms(const Google__Protobuf__Duration *d, int64_t dflt);
/* 1..MTD_XDS_NAME_MAX printable bytes. */
bool mtd_xds__name_ok(const char *s);

/* How deep a resource's messages may nest: no xDS message maitred reads
 * holds itself, so a decodable one nests as deep as its schema at most
 * (an HttpConnectionManager's, the deepest: 9; test_xds_route checks). */
#define MTD_XDS_NEST_MAX 32

/* Whether every string field of msg[0..len), read as a message of type
 * d, is free of NUL bytes: protobuf-c's char * ends at the first, so
 * "a\0x" reads as "a" and would alias the name "a" (a cluster, an EDS
 * service, a domain, a route's prefix, an address...). Nested messages
 * are walked into, their repeated and map fields and oneofs too; an
 * Any's value is bytes, checked where it is unpacked. The one guard of
 * lib/xds: mtd_xds__unpack runs it on every resource and Any payload
 * protobuf-c unpacks; cla.c's reader refuses a NUL in every string it
 * reads itself, and asks it which. 0; -EINVAL with why "WHERE: a NUL in
 * string field PATH" (PATH by name and index:
 * "virtual_hosts[0].domains[1]"; where NULL: no "WHERE: "), or messages
 * nested past MTD_XDS_NEST_MAX; -EBADMSG (why untouched) when the bytes
 * do not decode before any of that is found. */
int mtd_xds__strings_whole(const ProtobufCMessageDescriptor *d, const uint8_t *msg, size_t len, const char *where,
                           char *why, size_t whylen);

/* buf[0..len) unpacked by protobuf-c as a message of type d into *(T **)out
 * (with mtd_cfg__pb_allocator: T's free_unpacked with it frees it), then
 * held to mtd_xds__strings_whole. 0; -EBADMSG when protobuf-c refuses the
 * bytes or the guard's walk does (pbwire is the stricter: a field 0 in
 * a tag of two bytes or more, a field number past 2^29 - 1, a varint
 * past 64 bits, which protobuf-c reads as unknown fields; why untouched:
 * the caller names what does not decode); -EINVAL (why set). On error *out is NULL. Every resource and Any payload
 * lib/xds reads through protobuf-c is unpacked here. */
int mtd_xds__unpack(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len, const char *where, void *out,
                    char *why, size_t whylen);

/* An HTTPFault (the fault filter's config, or an override of it) into
 * fi; where names it in the refusal. 0 or -EINVAL (fi cleared). */
int mtd_xds__fault(const uint8_t *buf, size_t len, struct mtd_cfg_fault_injection *fi, const char *where, char *why,
                   size_t whylen);
/* An entry of typed_per_filter_config: an HTTPFault, or a FilterConfig
 * wrapping one (disabled: no fault), into fi: 1; another filter's
 * config: 0 (nothing); a bad one: -EINVAL. */
int mtd_xds__fault_override(const Google__Protobuf__Any *any, struct mtd_cfg_fault_injection *fi, const char *where,
                            char *why, size_t whylen);

/* A ClusterLoadAssignment as read from the wire by cla.c, before it is
 * translated: strings are slices of the input (no NUL inside), absent
 * ones empty; numbers as protobuf-c takes them (a uint32 or an enum: the
 * varint's low 32 bits). xds_fuzz compares it with protobuf-c's unpack. */
struct mtd_xds__wire_ep {
	const char *address; /* endpoint.address.socket_address.address */
	uint32_t address_len;
	uint32_t port;        /* port_value (port_case SA_PORT = 3) */
	uint32_t weight;      /* load_balancing_weight.value, has_weight */
	uint32_t protocol;    /* SocketAddress.protocol (0 = TCP) */
	int32_t health;       /* health_status */
	uint8_t host_case;    /* 0 none, 1 endpoint, 5 endpoint_name */
	uint8_t port_case;    /* 0 none, 3 port_value, 4 named_port */
	bool has_weight;
	bool has_address;     /* endpoint.address present */
	bool has_socket;      /* its socket_address present */
	bool resolver_name;   /* a non-empty resolver_name */
};

struct mtd_xds__wire_loc {
	const char *zone; /* locality.zone */
	uint32_t zone_len;
	uint32_t weight;  /* load_balancing_weight.value, has_weight */
	uint32_t priority;
	bool has_locality;
	bool has_weight;
	size_t first, n; /* its lb_endpoints: eps[first .. first + n) */
};

struct mtd_xds__wire_cla {
	const char *name; /* cluster_name */
	uint32_t name_len;
	struct mtd_xds__wire_loc *locs; /* one block with eps */
	struct mtd_xds__wire_ep *eps;
	size_t n_locs, n_eps;
};

/* Read buf[0..len) into w: 0, -ENOMEM, or -EBADMSG where protobuf-c's
 * unpack refuses the bytes, and more strictly also where a string it
 * reads holds a NUL or a message field or a oneof is written twice
 * (protobuf-c would merge or replace; no serializer writes that). On 0,
 * mtd_xds__cla_wire_clear(w) when done; on error w holds nothing. */
int mtd_xds__cla_read(const uint8_t *buf, size_t len, struct mtd_xds__wire_cla *w);
void mtd_xds__cla_wire_clear(struct mtd_xds__wire_cla *w);

#endif
