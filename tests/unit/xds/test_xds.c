/* Unit tests of lib/xds: Clusters and ClusterLoadAssignments, built with
 * protobuf-c and serialized as a management server sends them, into
 * maitred's terms; every refusal names its reason, and none crashes. */
#include <config.h> /* autoconf */

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/config/cluster/v3/cluster.pb-c.h"
#include "envoy/config/endpoint/v3/endpoint.pb-c.h"
#include "envoy/extensions/transport_sockets/tls/v3/tls.pb-c.h"
#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "config/config-int.h"
#include "lb/lb-t.h"
#include "xds/xds.h"

typedef Envoy__Config__Cluster__V3__Cluster PbCluster;
typedef Envoy__Config__Endpoint__V3__ClusterLoadAssignment PbCla;
typedef Envoy__Config__Endpoint__V3__LocalityLbEndpoints PbLocality;
typedef Envoy__Config__Endpoint__V3__LbEndpoint PbLbEndpoint;

static char why[512];
static uint8_t wire[1 << 16];

/* ---- building Clusters ---------------------------------------------------- */

static Envoy__Config__Core__V3__AggregatedConfigSource ads = ENVOY__CONFIG__CORE__V3__AGGREGATED_CONFIG_SOURCE__INIT;
static Envoy__Config__Core__V3__ConfigSource eds_src = ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__INIT;
static Envoy__Config__Cluster__V3__Cluster__EdsClusterConfig eds_cfg =
        ENVOY__CONFIG__CLUSTER__V3__CLUSTER__EDS_CLUSTER_CONFIG__INIT;

/* An EDS cluster over ADS, round robin: what the tests then change. */
static void eds_cluster(PbCluster *m, const char *name)
{
	envoy__config__cluster__v3__cluster__init(m);
	envoy__config__core__v3__config_source__init(&eds_src);
	envoy__config__cluster__v3__cluster__eds_cluster_config__init(&eds_cfg);
	eds_src.config_source_specifier_case = ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__CONFIG_SOURCE_SPECIFIER_ADS;
	eds_src.ads = &ads;
	eds_cfg.eds_config = &eds_src;
	m->name = (char *)name;
	m->cluster_discovery_type_case = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__CLUSTER_DISCOVERY_TYPE_TYPE;
	m->type = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__DISCOVERY_TYPE__EDS;
	m->eds_cluster_config = &eds_cfg;
}

static int parse_cluster(const PbCluster *m, struct mtd_xds_cluster *c)
{
	size_t n = envoy__config__cluster__v3__cluster__get_packed_size(m);

	ck_assert_uint_lt(n, sizeof(wire));
	envoy__config__cluster__v3__cluster__pack(m, wire);
	why[0] = '\0';
	return mtd_xds_cluster_parse(wire, n, NULL, c, why, sizeof(why));
}

static void cluster_refused(const PbCluster *m, const char *reason)
{
	struct mtd_xds_cluster c;

	ck_assert_int_eq(parse_cluster(m, &c), -EINVAL);
	ck_assert_msg(strstr(why, reason) != NULL, "reason \"%s\" lacks \"%s\"", why, reason);
	ck_assert_ptr_null(c.name);
	ck_assert_ptr_null(c.tls);
}

START_TEST(test_cluster_round_robin)
{
	PbCluster m;
	struct mtd_xds_cluster c;

	eds_cluster(&m, "shop.Echo");
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_str_eq(c.name, "shop.Echo");
	ck_assert_str_eq(c.eds_name, "shop.Echo");
	ck_assert_str_eq(c.lb.ops->name, "WEIGHTED_ROUND_ROBIN");
	ck_assert_int_eq(c.lb.warmup.duration_ms, 0);
	ck_assert_int_eq(c.connect_timeout_ms, 0);
	ck_assert(!c.outlier.enabled);
	ck_assert_uint_eq(c.circuit.max_calls, 0);
	ck_assert_ptr_null(c.tls);

	struct mtd_xds_cluster d;
	eds_cfg.service_name = (char *)"shop-eds";
	Google__Protobuf__Duration ct = GOOGLE__PROTOBUF__DURATION__INIT;
	ct.seconds = 1;
	ct.nanos = 500000000;
	m.connect_timeout = &ct;
	ck_assert_int_eq(parse_cluster(&m, &d), 0);
	ck_assert_str_eq(d.eds_name, "shop-eds");
	ck_assert_int_eq(d.connect_timeout_ms, 1500);
	ck_assert(!mtd_xds_cluster_equal(&c, &d));
	mtd_xds_cluster_clear(&d);
	ck_assert_int_eq(parse_cluster(&m, &d), 0);
	struct mtd_xds_cluster e;
	ck_assert_int_eq(parse_cluster(&m, &e), 0);
	ck_assert(mtd_xds_cluster_equal(&d, &e));
	mtd_xds_cluster_clear(&c);
	mtd_xds_cluster_clear(&d);
	mtd_xds_cluster_clear(&e);
	mtd_xds_cluster_clear(&e); /* twice is fine */
}
END_TEST

/* mtd_xds_ring_points for n endpoints of one weight. */
static uint32_t ring_points(const struct mtd_xds_cluster *c, size_t n, int32_t weight)
{
	static struct mtd_xds_ep eps[2048];

	ck_assert_uint_le(n, 2048);
	for (size_t i = 0; i < n; i++)
		eps[i] = (struct mtd_xds_ep){"127.0.0.1:1", NULL, weight};
	return mtd_xds_ring_points(c, eps, n);
}

START_TEST(test_cluster_policies)
{
	PbCluster m;
	struct mtd_xds_cluster c;

	eds_cluster(&m, "a");
	m.lb_policy = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__RANDOM;
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_str_eq(c.lb.ops->name, "WEIGHTED_RANDOM");
	mtd_xds_cluster_clear(&c);

	Envoy__Config__Cluster__V3__Cluster__LeastRequestLbConfig lr =
	        ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LEAST_REQUEST_LB_CONFIG__INIT;
	Google__Protobuf__UInt32Value cc = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
	m.lb_policy = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__LEAST_REQUEST;
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_str_eq(c.lb.ops->name, "LEAST_REQUEST");
	ck_assert_uint_eq(c.lb.choice_count, 2);
	mtd_xds_cluster_clear(&c);
	m.lb_config_case = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_CONFIG_LEAST_REQUEST_LB_CONFIG;
	m.least_request_lb_config = &lr;
	lr.choice_count = &cc;
	cc.value = 5;
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_uint_eq(c.lb.choice_count, 5);
	mtd_xds_cluster_clear(&c);
	cc.value = 1;
	cluster_refused(&m, "choice_count: 1 is not in 2..100");

	/* slow start */
	Envoy__Config__Cluster__V3__Cluster__SlowStartConfig ss =
	        ENVOY__CONFIG__CLUSTER__V3__CLUSTER__SLOW_START_CONFIG__INIT;
	Google__Protobuf__Duration win = GOOGLE__PROTOBUF__DURATION__INIT;
	Envoy__Config__Core__V3__RuntimeDouble agg = ENVOY__CONFIG__CORE__V3__RUNTIME_DOUBLE__INIT;
	cc.value = 2;
	win.seconds = 30;
	ss.slow_start_window = &win;
	agg.default_value = 2.0;
	ss.aggression = &agg;
	lr.slow_start_config = &ss;
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_int_eq(c.lb.warmup.duration_ms, 30000);
	ck_assert_int_eq(c.lb.warmup.curve, MTD_LB_WARMUP_SLOW_START);
	ck_assert(c.lb.warmup.aggression == 2.0);
	mtd_xds_cluster_clear(&c);
	agg.default_value = -1;
	cluster_refused(&m, "aggression");
	agg.default_value = 1;
	win.seconds = -1;
	cluster_refused(&m, "slow_start_window");

	/* ring hash */
	Envoy__Config__Cluster__V3__Cluster__RingHashLbConfig rh =
	        ENVOY__CONFIG__CLUSTER__V3__CLUSTER__RING_HASH_LB_CONFIG__INIT;
	Google__Protobuf__UInt64Value mn = GOOGLE__PROTOBUF__UINT64_VALUE__INIT,
	                              mx = GOOGLE__PROTOBUF__UINT64_VALUE__INIT;
	m.lb_policy = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__RING_HASH;
	m.lb_config_case = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_CONFIG_RING_HASH_LB_CONFIG;
	m.ring_hash_lb_config = &rh;
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_str_eq(c.lb.ops->name, "CONSISTENT_HASH");
	ck_assert_uint_eq(c.ring_min, 1024);
	ck_assert_uint_eq(ring_points(&c, 10, 100), 103);
	ck_assert_uint_eq(ring_points(&c, 0, 100), 1);
	/* The points follow the weights' scale: with locality weights an
	 * endpoint's weight is its share of MTD_XDS_WEIGHT_SCALE, and one
	 * point per 100 of it is already 10,000 points (not 10 million);
	 * endpoints of weight 1 get the most maitred gives. */
	ck_assert_uint_eq(ring_points(&c, 1, MTD_XDS_WEIGHT_SCALE), 1);
	ck_assert_uint_eq(ring_points(&c, 4, MTD_XDS_WEIGHT_SCALE / 4), 1);
	ck_assert_uint_eq(ring_points(&c, 4, 1), MTD_LB_MAX_RING_POINTS);
	ck_assert_uint_eq(ring_points(&c, 1024, 1), 100);
	mtd_xds_cluster_clear(&c);
	mn.value = 100;
	mx.value = 200;
	rh.minimum_ring_size = &mn;
	rh.maximum_ring_size = &mx;
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_uint_eq(ring_points(&c, 3, 100), 34);
	ck_assert_uint_eq(ring_points(&c, 150, 100), 1);
	ck_assert_uint_eq(ring_points(&c, 1, 100), 100);
	mtd_xds_cluster_clear(&c);
	mn.value = 300;
	cluster_refused(&m, "ring sizes");
	mn.value = 0;
	cluster_refused(&m, "ring sizes");

	/* maglev */
	Envoy__Config__Cluster__V3__Cluster__MaglevLbConfig mg =
	        ENVOY__CONFIG__CLUSTER__V3__CLUSTER__MAGLEV_LB_CONFIG__INIT;
	Google__Protobuf__UInt64Value ts = GOOGLE__PROTOBUF__UINT64_VALUE__INIT;
	m.lb_policy = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__MAGLEV;
	m.lb_config_case = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_CONFIG_MAGLEV_LB_CONFIG;
	m.maglev_lb_config = &mg;
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_str_eq(c.lb.ops->name, "MAGLEV");
	ck_assert_uint_eq(c.lb.table_size, 65537);
	mtd_xds_cluster_clear(&c);
	mg.table_size = &ts;
	ts.value = 65536;
	cluster_refused(&m, "table_size");
	ts.value = UINT64_MAX;
	cluster_refused(&m, "table_size");

	m.lb_config_case = 0;
	m.lb_policy = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__CLUSTER_PROVIDED;
	cluster_refused(&m, "lb_policy 6");
	m.lb_policy = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__LB_POLICY__LOAD_BALANCING_POLICY_CONFIG;
	cluster_refused(&m, "lb_policy 7");
	m.lb_policy = 42; /* an enum value from a newer Envoy */
	cluster_refused(&m, "lb_policy 42");
}
END_TEST

START_TEST(test_cluster_refused_shapes)
{
	PbCluster m;

	eds_cluster(&m, "");
	cluster_refused(&m, "name: empty");
	char *long_name = malloc(MTD_XDS_NAME_MAX + 2);
	memset(long_name, 'x', MTD_XDS_NAME_MAX + 1);
	long_name[MTD_XDS_NAME_MAX + 1] = '\0';
	eds_cluster(&m, long_name);
	cluster_refused(&m, "too long");
	free(long_name);
	eds_cluster(&m, "bad\nname");
	cluster_refused(&m, "not printable");

	eds_cluster(&m, "a");
	m.type = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__DISCOVERY_TYPE__STRICT_DNS;
	cluster_refused(&m, "type must be EDS");
	eds_cluster(&m, "a");
	m.cluster_discovery_type_case = 0; /* absent: STATIC */
	cluster_refused(&m, "type must be EDS");
	eds_cluster(&m, "a");
	m.eds_cluster_config = NULL;
	cluster_refused(&m, "eds_config must be ads");
	eds_cluster(&m, "a");
	eds_src.config_source_specifier_case = 0;
	cluster_refused(&m, "eds_config must be ads");

	/* bytes that are no Cluster */
	struct mtd_xds_cluster c;
	static const uint8_t junk[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 'a'};
	ck_assert_int_eq(mtd_xds_cluster_parse(junk, sizeof(junk), NULL, &c, why, sizeof(why)), -EINVAL);
	ck_assert(strstr(why, "does not decode") != NULL);
	ck_assert_int_eq(mtd_xds_cluster_parse(NULL, 0, NULL, &c, why, sizeof(why)), -EINVAL); /* empty: no name */
}
END_TEST

START_TEST(test_cluster_limits)
{
	PbCluster m;
	struct mtd_xds_cluster c;
	Envoy__Config__Cluster__V3__CircuitBreakers cb = ENVOY__CONFIG__CLUSTER__V3__CIRCUIT_BREAKERS__INIT;
	Envoy__Config__Cluster__V3__CircuitBreakers__Thresholds t0 =
	        ENVOY__CONFIG__CLUSTER__V3__CIRCUIT_BREAKERS__THRESHOLDS__INIT;
	Envoy__Config__Cluster__V3__CircuitBreakers__Thresholds t1 =
	        ENVOY__CONFIG__CLUSTER__V3__CIRCUIT_BREAKERS__THRESHOLDS__INIT;
	Envoy__Config__Cluster__V3__CircuitBreakers__Thresholds *ts[] = {&t1, &t0};
	Google__Protobuf__UInt32Value mr = GOOGLE__PROTOBUF__UINT32_VALUE__INIT,
	                              mp = GOOGLE__PROTOBUF__UINT32_VALUE__INIT,
	                              hi = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;

	eds_cluster(&m, "a");
	m.circuit_breakers = &cb;
	cb.n_thresholds = 2;
	cb.thresholds = ts;
	t1.priority = ENVOY__CONFIG__CORE__V3__ROUTING_PRIORITY__HIGH;
	hi.value = 0; /* HIGH is not maitred's: not even checked */
	t1.max_requests = &hi;
	mr.value = 100;
	mp.value = 7;
	t0.max_requests = &mr;
	t0.max_pending_requests = &mp;
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_uint_eq(c.circuit.max_calls, 100);
	ck_assert_uint_eq(c.circuit.max_pending, 7);
	mtd_xds_cluster_clear(&c);
	mp.value = 0;
	cluster_refused(&m, "max_pending_requests: 0 would refuse");

	eds_cluster(&m, "a");
	Envoy__Config__Cluster__V3__OutlierDetection od = ENVOY__CONFIG__CLUSTER__V3__OUTLIER_DETECTION__INIT;
	Google__Protobuf__UInt32Value c5 = GOOGLE__PROTOBUF__UINT32_VALUE__INIT,
	                              ef = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
	Google__Protobuf__Duration base = GOOGLE__PROTOBUF__DURATION__INIT;
	m.outlier_detection = &od;
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert(c.outlier.enabled);
	ck_assert_uint_eq(c.outlier.consecutive_failures, 5);
	ck_assert_uint_eq(c.outlier.failure_percentage, 0);
	ck_assert_int_eq(c.outlier.base_ejection_ms, 30000);
	ck_assert_uint_eq(c.outlier.max_ejection_percent, 10);
	mtd_xds_cluster_clear(&c);
	c5.value = 3;
	od.consecutive_5xx = &c5;
	ef.value = 100;
	od.enforcing_failure_percentage = &ef;
	base.seconds = 5;
	od.base_ejection_time = &base;
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_uint_eq(c.outlier.consecutive_failures, 3);
	ck_assert_uint_eq(c.outlier.failure_percentage, 85);
	ck_assert_int_eq(c.outlier.base_ejection_ms, 5000);
	mtd_xds_cluster_clear(&c);
	ef.value = 101;
	cluster_refused(&m, "percentage above 100");
	ef.value = 0;
	base.seconds = INT64_MAX;
	cluster_refused(&m, "duration out of range");
}
END_TEST

/* ---- TLS -------------------------------------------------------------------- */

static Google__Protobuf__Any tls_any = GOOGLE__PROTOBUF__ANY__INIT;
static uint8_t tls_wire[4096];
static Envoy__Config__Core__V3__TransportSocket tsock = ENVOY__CONFIG__CORE__V3__TRANSPORT_SOCKET__INIT;

static void with_tls(PbCluster *m, const Envoy__Extensions__TransportSockets__Tls__V3__UpstreamTlsContext *t)
{
	tls_any.type_url = (char *)MTD_XDS_TYPE_TLS;
	tls_any.value.len = envoy__extensions__transport_sockets__tls__v3__upstream_tls_context__pack(t, tls_wire);
	tls_any.value.data = tls_wire;
	tsock.name = (char *)"envoy.transport_sockets.tls";
	tsock.config_type_case = ENVOY__CONFIG__CORE__V3__TRANSPORT_SOCKET__CONFIG_TYPE_TYPED_CONFIG;
	tsock.typed_config = &tls_any;
	m->transport_socket = &tsock;
}

/* transport_socket_matches (field 43, not in maitred's proto) is not
 * read, as gRPC's clients do not: a cluster whose TLS is only there is
 * h2c, and says so (the control thread warns); with a transport_socket
 * beside it, the cluster's TLS is that one. */
/* A LEN field of number f (one-byte tag and length: f < 16, len < 128)
 * holding len bytes of p, written at out; returns its size. */
static size_t len_field(uint8_t *out, uint8_t f, const void *p, size_t len)
{
	ck_assert_uint_lt(len, 128);
	out[0] = (uint8_t)(f << 3 | 2);
	out[1] = (uint8_t)len;
	memcpy(out + 2, p, len);
	return 2 + len;
}

/* transport_socket_matches' one entry (field 43): {name "tlsMode-...",
 * transport_socket {name "tls", typed_config {type_url}}} (type_url NULL:
 * no typed_config). */
static size_t socket_match(uint8_t *out, const char *type_url)
{
	uint8_t any[128], ts[160], match[200];
	size_t a = type_url ? len_field(any, 1, type_url, strlen(type_url)) : 0;
	size_t t = len_field(ts, 1, "tls", 3);
	if (type_url)
		t += len_field(ts + t, 3, any, a);
	size_t n = len_field(match, 1, "tlsMode-istio", 13);
	n += len_field(match + n, 3, ts, t);
	ck_assert_uint_lt(n, 128);
	out[0] = 0xda; /* 43 << 3 | 2, as a varint */
	out[1] = 0x02;
	out[2] = (uint8_t)n;
	memcpy(out + 3, match, n);
	return 3 + n;
}

START_TEST(test_cluster_tls_only_in_matches)
{
	PbCluster m;
	struct mtd_xds_cluster c, d;
	uint8_t match[256];
	size_t n_match = socket_match(match, MTD_XDS_TYPE_TLS);

	eds_cluster(&m, "a");
	size_t n = envoy__config__cluster__v3__cluster__pack(&m, wire);
	ck_assert_int_eq(mtd_xds_cluster_parse(wire, n, NULL, &d, why, sizeof(why)), 0);
	ck_assert(!d.tls_only_in_matches);
	memcpy(wire + n, match, n_match);
	ck_assert_int_eq(mtd_xds_cluster_parse(wire, n + n_match, NULL, &c, why, sizeof(why)), 0);
	ck_assert_ptr_null(c.tls);
	ck_assert(c.tls_only_in_matches);
	ck_assert(!mtd_xds_cluster_equal(&c, &d)); /* a change: its services are rebuilt, the warning given */
	mtd_xds_cluster_clear(&c);
	mtd_xds_cluster_clear(&d);
	/* A match with no TLS in it (Istio's tlsMode-disabled raw_buffer, or
	 * no typed_config): nothing the cluster would have, nothing to say. */
	static const char *const no_tls[] = {
	        "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer", NULL};
	for (size_t k = 0; k < 2; k++) {
		size_t nm = socket_match(match, no_tls[k]);
		n = envoy__config__cluster__v3__cluster__pack(&m, wire);
		memcpy(wire + n, match, nm);
		ck_assert_int_eq(mtd_xds_cluster_parse(wire, n + nm, NULL, &c, why, sizeof(why)), 0);
		ck_assert_msg(!c.tls_only_in_matches, "a match without TLS (%s) taken for TLS",
		              no_tls[k] ? no_tls[k] : "no typed_config");
		mtd_xds_cluster_clear(&c);
	}
	n_match = socket_match(match, MTD_XDS_TYPE_TLS);
	/* Field 43 of another wire type (a varint, a fixed32) is not a list
	 * of matches: no TLS is there to warn of. */
	static const struct {
		uint8_t b[6];
		size_t len;
	} not_matches[] = {{{0xd8, 0x02, 0x01}, 3}, {{0xdd, 0x02, 1, 2, 3, 4}, 6}};
	for (size_t k = 0; k < 2; k++) {
		n = envoy__config__cluster__v3__cluster__pack(&m, wire);
		memcpy(wire + n, not_matches[k].b, not_matches[k].len);
		ck_assert_int_eq(mtd_xds_cluster_parse(wire, n + not_matches[k].len, NULL, &c, why, sizeof(why)), 0);
		ck_assert_msg(!c.tls_only_in_matches, "field 43 of wire type %d taken for transport_socket_matches",
		              k == 0 ? 0 : 5);
		mtd_xds_cluster_clear(&c);
	}
	/* Both: the transport_socket is the cluster's TLS. */
	Envoy__Extensions__TransportSockets__Tls__V3__UpstreamTlsContext up =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__UPSTREAM_TLS_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CommonTlsContext ctx =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CertificateValidationContext vc =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__CERTIFICATE_VALIDATION_CONTEXT__INIT;
	Envoy__Config__Core__V3__DataSource ca = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__INIT;
	ca.specifier_case = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__SPECIFIER_FILENAME;
	ca.filename = (char *)"/etc/ca.pem";
	vc.trusted_ca = &ca;
	ctx.validation_context_type_case =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__VALIDATION_CONTEXT_TYPE_VALIDATION_CONTEXT;
	ctx.validation_context = &vc;
	up.common_tls_context = &ctx;
	with_tls(&m, &up);
	n = envoy__config__cluster__v3__cluster__pack(&m, wire);
	memcpy(wire + n, match, n_match);
	ck_assert_int_eq(mtd_xds_cluster_parse(wire, n + n_match, NULL, &c, why, sizeof(why)), 0);
	ck_assert_ptr_nonnull(c.tls);
	ck_assert(!c.tls_only_in_matches);
	mtd_xds_cluster_clear(&c);
}
END_TEST

START_TEST(test_cluster_tls)
{
	PbCluster m;
	struct mtd_xds_cluster c;
	Envoy__Extensions__TransportSockets__Tls__V3__UpstreamTlsContext up =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__UPSTREAM_TLS_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CommonTlsContext ctx =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CertificateValidationContext vc =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__CERTIFICATE_VALIDATION_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__TlsCertificate tc =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__TLS_CERTIFICATE__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__TlsCertificate *tcs[] = {&tc, &tc};
	Envoy__Config__Core__V3__DataSource ca = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__INIT,
	                                    crt = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__INIT,
	                                    key = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__SubjectAltNameMatcher sm =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__SUBJECT_ALT_NAME_MATCHER__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__SubjectAltNameMatcher *sms[] = {&sm, &sm};
	Envoy__Type__Matcher__V3__StringMatcher str = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__INIT;

	eds_cluster(&m, "a");
	up.common_tls_context = &ctx;
	with_tls(&m, &up);
	cluster_refused(&m, "validation_context with trusted_ca or ca_certificate_provider_instance is required");

	ca.specifier_case = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__SPECIFIER_FILENAME;
	ca.filename = (char *)"/etc/ca.pem";
	vc.trusted_ca = &ca;
	ctx.validation_context_type_case =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__VALIDATION_CONTEXT_TYPE_VALIDATION_CONTEXT;
	ctx.validation_context = &vc;
	up.sni = (char *)"echo.shop";
	with_tls(&m, &up);
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_str_eq(c.tls->ca_file, "/etc/ca.pem");
	ck_assert_str_eq(c.tls->server_name, "echo.shop");
	ck_assert_ptr_null(c.tls->cert_file);
	ck_assert_ptr_null(c.tls->server_identity);
	mtd_xds_cluster_clear(&c);

	crt.specifier_case = key.specifier_case = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__SPECIFIER_FILENAME;
	crt.filename = (char *)"/etc/c.pem";
	key.filename = (char *)"/etc/k.pem";
	tc.certificate_chain = &crt;
	tc.private_key = &key;
	ctx.n_tls_certificates = 1;
	ctx.tls_certificates = tcs;
	sm.san_type = ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__SUBJECT_ALT_NAME_MATCHER__SAN_TYPE__URI;
	str.match_pattern_case = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_EXACT;
	str.exact = (char *)"spiffe://cluster.local/ns/shop/sa/echo";
	sm.matcher = &str;
	vc.n_match_typed_subject_alt_names = 1;
	vc.match_typed_subject_alt_names = sms;
	with_tls(&m, &up);
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_str_eq(c.tls->cert_file, "/etc/c.pem");
	ck_assert_str_eq(c.tls->key_file, "/etc/k.pem");
	ck_assert_str_eq(c.tls->server_identity, "spiffe://cluster.local/ns/shop/sa/echo");
	mtd_xds_cluster_clear(&c);

	sm.san_type = ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__SUBJECT_ALT_NAME_MATCHER__SAN_TYPE__DNS;
	str.exact = (char *)"echo.shop.svc";
	with_tls(&m, &up);
	ck_assert_int_eq(parse_cluster(&m, &c), 0);
	ck_assert_str_eq(c.tls->server_identity, "dns:echo.shop.svc");
	mtd_xds_cluster_clear(&c);

	str.match_pattern_case = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_PREFIX;
	str.prefix = (char *)"echo";
	with_tls(&m, &up);
	cluster_refused(&m, "must be exact");
	str.match_pattern_case = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_EXACT;
	str.exact = (char *)"echo.shop.svc";
	vc.n_match_typed_subject_alt_names = 2;
	with_tls(&m, &up);
	cluster_refused(&m, "one SAN");
	vc.n_match_typed_subject_alt_names = 1;
	sm.san_type = ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__SUBJECT_ALT_NAME_MATCHER__SAN_TYPE__EMAIL;
	with_tls(&m, &up);
	cluster_refused(&m, "only URI and DNS");
	vc.n_match_typed_subject_alt_names = 0;

	ctx.n_tls_certificates = 2;
	with_tls(&m, &up);
	cluster_refused(&m, "one certificate at most");
	ctx.n_tls_certificates = 1;
	key.specifier_case = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__SPECIFIER_INLINE_STRING;
	key.inline_string = (char *)"-----BEGIN PRIVATE KEY-----";
	with_tls(&m, &up);
	cluster_refused(&m, "private_key: maitred takes a file name only");
	tc.private_key = NULL;
	with_tls(&m, &up);
	cluster_refused(&m, "go together");

	/* Another transport socket, or a TLS context that does not decode. */
	with_tls(&m, &up);
	tls_any.type_url = (char *)"type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";
	cluster_refused(&m, "UpstreamTlsContext only");
	tls_any.type_url = (char *)MTD_XDS_TYPE_TLS;
	static uint8_t junk[] = {0x0a, 0x80};
	tls_any.value.data = junk;
	tls_any.value.len = sizeof(junk);
	cluster_refused(&m, "does not decode");
}
END_TEST

/* A CommonTlsContext field maitred's proto lacks (protobuf-c keeps and
 * packs it as unknown, its bytes after the tag: here the length prefix
 * of an empty message): an empty message of field number tag. */
static ProtobufCMessageUnknownField unknown_field(uint32_t tag)
{
	static uint8_t empty[1] = {0x00};
	ProtobufCMessageUnknownField f = {
	        .tag = tag, .wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, .len = 1, .data = empty};
	return f;
}

/* TLS from the bootstrap's certificate provider instances (gRFC A29):
 * tls_certificate_provider_instance and ca_certificate_provider_instance
 * (in validation_context or combined_validation_context's default) name
 * instances whose files the cluster's TLS then uses; an unknown instance,
 * one without the file asked of it, both forms at once, SDS and the
 * deprecated provider fields are refused. */
START_TEST(test_cluster_tls_from_certificate_providers)
{
	PbCluster m;
	struct mtd_xds_cluster c, d;
	Envoy__Extensions__TransportSockets__Tls__V3__UpstreamTlsContext up =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__UPSTREAM_TLS_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CommonTlsContext ctx =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CommonTlsContext__CombinedCertificateValidationContext cvc =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__COMBINED_CERTIFICATE_VALIDATION_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CertificateValidationContext vc =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__CERTIFICATE_VALIDATION_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CertificateProviderPluginInstance
	        idi = ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__CERTIFICATE_PROVIDER_PLUGIN_INSTANCE__INIT,
	        cai = ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__CERTIFICATE_PROVIDER_PLUGIN_INSTANCE__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__TlsCertificate tc =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__TLS_CERTIFICATE__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__TlsCertificate *tcs[] = {&tc};
	Envoy__Config__Core__V3__DataSource file = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__INIT;
	struct mtd_cfg_cert_provider e[] = {
	        {.name = (char *)"id", .cert_file = (char *)"/p/c.pem", .key_file = (char *)"/p/k.pem"},
	        {.name = (char *)"roots", .ca_file = (char *)"/p/ca.pem"},
	        {.name = (char *)"default",
	         .cert_file = (char *)"/d/c.pem",
	         .key_file = (char *)"/d/k.pem",
	         .ca_file = (char *)"/d/ca.pem"},
	};
	struct mtd_cfg_cert_providers ps = {e, 3};
	ProtobufCMessageUnknownField uf;
	size_t n;

#define PARSE_WITH(pr, out)                                                      \
	(n = envoy__config__cluster__v3__cluster__pack(&m, wire), why[0] = '\0', \
	 mtd_xds_cluster_parse(wire, n, (pr), (out), why, sizeof(why)))
#define REFUSED_WITH(pr, reason)                                                                           \
	do {                                                                                               \
		with_tls(&m, &up);                                                                         \
		ck_assert_int_eq(PARSE_WITH(pr, &d), -EINVAL);                                             \
		ck_assert_msg(strstr(why, (reason)) != NULL, "reason \"%s\" lacks \"%s\"", why, (reason)); \
		ck_assert_ptr_null(d.tls);                                                                 \
	} while (0)

	eds_cluster(&m, "a");
	up.common_tls_context = &ctx;
	idi.instance_name = (char *)"id";
	cai.instance_name = (char *)"roots";
	cai.certificate_name = (char *)"ROOTCA"; /* the plugin's to read: file_watcher has one */
	ctx.tls_certificate_provider_instance = &idi;
	vc.ca_certificate_provider_instance = &cai;
	ctx.validation_context_type_case =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__VALIDATION_CONTEXT_TYPE_VALIDATION_CONTEXT;
	ctx.validation_context = &vc;
	with_tls(&m, &up);
	ck_assert_int_eq(PARSE_WITH(&ps, &c), 0);
	ck_assert_str_eq(c.tls->ca_file, "/p/ca.pem");
	ck_assert_str_eq(c.tls->cert_file, "/p/c.pem");
	ck_assert_str_eq(c.tls->key_file, "/p/k.pem");
	ck_assert_str_eq(c.tls->ca_instance, "roots");
	ck_assert_str_eq(c.tls->cert_instance, "id");

	/* combined_validation_context's default_validation_context, as
	 * gRPC's control planes send it: the same cluster. */
	cvc.default_validation_context = &vc;
	ctx.validation_context_type_case =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__VALIDATION_CONTEXT_TYPE_COMBINED_VALIDATION_CONTEXT;
	ctx.combined_validation_context = &cvc;
	with_tls(&m, &up);
	ck_assert_int_eq(PARSE_WITH(&ps, &d), 0);
	ck_assert(mtd_xds_cluster_equal(&c, &d));
	mtd_xds_cluster_clear(&d);
	uf = unknown_field(2); /* validation_context_sds_secret_config */
	cvc.base.n_unknown_fields = 1;
	cvc.base.unknown_fields = &uf;
	REFUSED_WITH(&ps, "combined_validation_context: only default_validation_context is read");
	cvc.base.n_unknown_fields = 0;
	cvc.default_validation_context = NULL;
	REFUSED_WITH(&ps, "validation_context with trusted_ca or ca_certificate_provider_instance is required");
	cvc.default_validation_context = &vc;

	/* An instance with no name is "default"; the same files from another
	 * instance are another cluster (the dump names the instances). */
	idi.instance_name = (char *)"";
	cai.instance_name = (char *)"";
	with_tls(&m, &up);
	ck_assert_int_eq(PARSE_WITH(&ps, &d), 0);
	ck_assert_str_eq(d.tls->ca_file, "/d/ca.pem");
	ck_assert_str_eq(d.tls->cert_file, "/d/c.pem");
	ck_assert_str_eq(d.tls->cert_instance, "default");
	ck_assert(!mtd_xds_cluster_equal(&c, &d));
	mtd_xds_cluster_clear(&d);
	idi.instance_name = (char *)"id";
	cai.instance_name = (char *)"roots";

	/* Instances the bootstrap lacks, or without the file asked of them. */
	REFUSED_WITH(NULL,
	             "ca_certificate_provider_instance \"roots\": not among the bootstrap's certificate_providers");
	idi.instance_name = (char *)"nope";
	REFUSED_WITH(&ps,
	             "tls_certificate_provider_instance \"nope\": not among the bootstrap's certificate_providers");
	idi.instance_name = (char *)"id";
	cai.instance_name = (char *)"nope";
	REFUSED_WITH(&ps, "ca_certificate_provider_instance \"nope\": not among the bootstrap's certificate_providers");
	cai.instance_name = (char *)"id";
	REFUSED_WITH(&ps, "ca_certificate_provider_instance \"id\": the instance has no ca_certificate_file");
	cai.instance_name = (char *)"roots";
	idi.instance_name = (char *)"roots";
	REFUSED_WITH(&ps, "tls_certificate_provider_instance \"roots\": the instance has no certificate_file");
	idi.instance_name = (char *)"id";

	/* One form or the other, never both. */
	file.specifier_case = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__SPECIFIER_FILENAME;
	file.filename = (char *)"/etc/f.pem";
	vc.trusted_ca = &file;
	REFUSED_WITH(&ps, "trusted_ca and ca_certificate_provider_instance are both set");
	vc.ca_certificate_provider_instance = NULL;
	with_tls(&m, &up);
	ck_assert_int_eq(PARSE_WITH(&ps, &d), 0); /* trusted_ca beside an identity instance */
	ck_assert_str_eq(d.tls->ca_file, "/etc/f.pem");
	ck_assert_ptr_null(d.tls->ca_instance);
	ck_assert_str_eq(d.tls->cert_file, "/p/c.pem");
	mtd_xds_cluster_clear(&d);
	tc.certificate_chain = tc.private_key = &file;
	ctx.n_tls_certificates = 1;
	ctx.tls_certificates = tcs;
	REFUSED_WITH(&ps, "tls_certificates and tls_certificate_provider_instance are both set");
	ctx.n_tls_certificates = 0;
	vc.trusted_ca = NULL;
	vc.ca_certificate_provider_instance = &cai;

	/* SDS and the deprecated provider fields: refused, not ignored (a
	 * connection without the certificate the control plane meant). */
	static const struct {
		uint32_t tag;
		const char *reason;
	} refused[] = {
	        {6, "tls_certificate_sds_secret_configs: SDS is not read"},
	        {7, "validation_context_sds_secret_config: SDS is not read"},
	        {9, "a deprecated certificate provider field"},
	        {10, "a deprecated certificate provider field"},
	        {11, "a deprecated certificate provider field"},
	        {12, "a deprecated certificate provider field"},
	        {13, "custom_handshaker: maitred makes TLS handshakes only"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		uf = unknown_field(refused[i].tag);
		ctx.base.n_unknown_fields = 1;
		ctx.base.unknown_fields = &uf;
		REFUSED_WITH(&ps, refused[i].reason);
	}
	uf = unknown_field(4242); /* any other unknown field: ignored, as before */
	with_tls(&m, &up);
	ck_assert_int_eq(PARSE_WITH(&ps, &d), 0);
	ck_assert(mtd_xds_cluster_equal(&c, &d));
	mtd_xds_cluster_clear(&d);
	ctx.base.n_unknown_fields = 0;
	mtd_xds_cluster_clear(&c);
#undef PARSE_WITH
#undef REFUSED_WITH
}
END_TEST

/* The checks of a CertificateValidationContext maitred does not make
 * (not in its tls.proto, so protobuf-c keeps them unknown):
 * verify_certificate_hash (2), verify_certificate_spki (3),
 * require_signed_certificate_timestamp (6), crl (7),
 * custom_validator_config (12). Each narrows which upstream certificates
 * the control plane trusts: ignored, maitred would trust more than it
 * meant. NACKed, as grpc-js-xds 1.14 NACKs each of them; with trusted_ca
 * or a CA instance, in validation_context or combined's default. */
START_TEST(test_cluster_tls_validation_checks_not_made_are_refused)
{
	PbCluster m;
	struct mtd_xds_cluster c;
	Envoy__Extensions__TransportSockets__Tls__V3__UpstreamTlsContext up =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__UPSTREAM_TLS_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CommonTlsContext ctx =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CommonTlsContext__CombinedCertificateValidationContext cvc =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__COMBINED_CERTIFICATE_VALIDATION_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CertificateValidationContext vc =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__CERTIFICATE_VALIDATION_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CertificateProviderPluginInstance cai =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__CERTIFICATE_PROVIDER_PLUGIN_INSTANCE__INIT;
	Envoy__Config__Core__V3__DataSource file = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__INIT;
	struct mtd_cfg_cert_provider e[] = {{.name = (char *)"roots", .ca_file = (char *)"/p/ca.pem"}};
	struct mtd_cfg_cert_providers ps = {e, 1};
	static uint8_t hash[] = {4, 'a', 'b', 'c', 'd'}, empty[] = {0}, yes[] = {1};
	static const struct {
		uint32_t tag;
		ProtobufCWireType wt;
		uint8_t *data;
		size_t len;
		const char *reason;
	} checks[] = {
	        {2, PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, hash, sizeof(hash), "verify_certificate_hash"},
	        {3, PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, hash, sizeof(hash), "verify_certificate_spki"},
	        {6, PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, empty, sizeof(empty), "require_signed_certificate_timestamp"},
	        {6, PROTOBUF_C_WIRE_TYPE_VARINT, yes, sizeof(yes), "require_signed_certificate_timestamp"},
	        {7, PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, empty, sizeof(empty), "crl"},
	        {12, PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, empty, sizeof(empty), "custom_validator_config"},
	};
	ProtobufCMessageUnknownField uf;
	size_t n;

	eds_cluster(&m, "a");
	up.common_tls_context = &ctx;
	file.specifier_case = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__SPECIFIER_FILENAME;
	file.filename = (char *)"/etc/ca.pem";
	cai.instance_name = (char *)"roots";
	cvc.default_validation_context = &vc;
	for (int form = 0; form < 4; form++) {
		/* trusted_ca or the instance; validation_context or combined's */
		vc.trusted_ca = form % 2 == 0 ? &file : NULL;
		vc.ca_certificate_provider_instance = form % 2 == 1 ? &cai : NULL;
		if (form < 2) {
			ctx.validation_context_type_case =
			        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__VALIDATION_CONTEXT_TYPE_VALIDATION_CONTEXT;
			ctx.validation_context = &vc;
		} else {
			ctx.validation_context_type_case =
			        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__VALIDATION_CONTEXT_TYPE_COMBINED_VALIDATION_CONTEXT;
			ctx.combined_validation_context = &cvc;
		}
		vc.base.n_unknown_fields = 0;
		with_tls(&m, &up);
		n = envoy__config__cluster__v3__cluster__pack(&m, wire);
		ck_assert_int_eq(mtd_xds_cluster_parse(wire, n, &ps, &c, why, sizeof(why)), 0);
		mtd_xds_cluster_clear(&c);
		for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
			uf = (ProtobufCMessageUnknownField){
			        .tag = checks[i].tag, .wire_type = checks[i].wt, .len = checks[i].len, .data = checks[i].data};
			vc.base.n_unknown_fields = 1;
			vc.base.unknown_fields = &uf;
			with_tls(&m, &up);
			n = envoy__config__cluster__v3__cluster__pack(&m, wire);
			why[0] = '\0';
			ck_assert_msg(mtd_xds_cluster_parse(wire, n, &ps, &c, why, sizeof(why)) == -EINVAL,
			              "form %d: %s (field %u) taken and ignored", form, checks[i].reason, checks[i].tag);
			ck_assert_msg(strstr(why, checks[i].reason) != NULL, "reason \"%s\" lacks \"%s\"", why,
			              checks[i].reason);
			ck_assert_ptr_null(c.tls);
		}
		vc.base.n_unknown_fields = 0;
	}
	/* Another unknown field of the validation context: ignored, as before. */
	uf = (ProtobufCMessageUnknownField){
	        .tag = 4242, .wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, .len = 1, .data = empty};
	vc.base.n_unknown_fields = 1;
	vc.base.unknown_fields = &uf;
	with_tls(&m, &up);
	n = envoy__config__cluster__v3__cluster__pack(&m, wire);
	ck_assert_int_eq(mtd_xds_cluster_parse(wire, n, &ps, &c, why, sizeof(why)), 0);
	mtd_xds_cluster_clear(&c);
}
END_TEST

/* ---- assignments ------------------------------------------------------------ */

#define MAX_EPS 8
struct loc {
	PbLocality l;
	Envoy__Config__Core__V3__Locality where;
	Google__Protobuf__UInt32Value lw;
	PbLbEndpoint e[MAX_EPS];
	PbLbEndpoint *ep[MAX_EPS];
	Envoy__Config__Endpoint__V3__Endpoint end[MAX_EPS];
	Envoy__Config__Core__V3__Address addr[MAX_EPS];
	Envoy__Config__Core__V3__SocketAddress sa[MAX_EPS];
	Google__Protobuf__UInt32Value w[MAX_EPS];
};

static void loc_init(struct loc *L, const char *zone, uint32_t priority, uint32_t weight)
{
	memset(L, 0, sizeof(*L));
	envoy__config__endpoint__v3__locality_lb_endpoints__init(&L->l);
	envoy__config__core__v3__locality__init(&L->where);
	L->where.zone = (char *)zone;
	L->l.locality = &L->where;
	L->l.priority = priority;
	if (weight > 0) {
		google__protobuf__uint32_value__init(&L->lw);
		L->lw.value = weight;
		L->l.load_balancing_weight = &L->lw;
	}
	L->l.lb_endpoints = L->ep;
}

static PbLbEndpoint *loc_add(struct loc *L, const char *ip, uint32_t port, uint32_t weight)
{
	size_t i = L->l.n_lb_endpoints++;

	ck_assert_uint_lt(i, MAX_EPS);
	envoy__config__endpoint__v3__lb_endpoint__init(&L->e[i]);
	envoy__config__endpoint__v3__endpoint__init(&L->end[i]);
	envoy__config__core__v3__address__init(&L->addr[i]);
	envoy__config__core__v3__socket_address__init(&L->sa[i]);
	L->sa[i].address = (char *)ip;
	L->sa[i].port_specifier_case = ENVOY__CONFIG__CORE__V3__SOCKET_ADDRESS__PORT_SPECIFIER_PORT_VALUE;
	L->sa[i].port_value = port;
	L->addr[i].address_case = ENVOY__CONFIG__CORE__V3__ADDRESS__ADDRESS_SOCKET_ADDRESS;
	L->addr[i].socket_address = &L->sa[i];
	L->end[i].address = &L->addr[i];
	L->e[i].host_identifier_case = ENVOY__CONFIG__ENDPOINT__V3__LB_ENDPOINT__HOST_IDENTIFIER_ENDPOINT;
	L->e[i].endpoint = &L->end[i];
	if (weight > 0) {
		google__protobuf__uint32_value__init(&L->w[i]);
		L->w[i].value = weight;
		L->e[i].load_balancing_weight = &L->w[i];
	}
	L->ep[i] = &L->e[i];
	return &L->e[i];
}

static int parse_cla(const char *name, struct loc **locs, size_t n, struct mtd_xds_cla **out)
{
	PbCla m = ENVOY__CONFIG__ENDPOINT__V3__CLUSTER_LOAD_ASSIGNMENT__INIT;
	PbLocality *ls[8];

	for (size_t i = 0; i < n; i++)
		ls[i] = &locs[i]->l;
	m.cluster_name = (char *)name;
	m.n_endpoints = n;
	m.endpoints = ls;
	size_t len = envoy__config__endpoint__v3__cluster_load_assignment__pack(&m, wire);
	why[0] = '\0';
	return mtd_xds_cla_parse(wire, len, out, why, sizeof(why));
}

static void cla_refused(const char *name, struct loc **locs, size_t n, const char *reason)
{
	struct mtd_xds_cla *c = (void *)1;

	ck_assert_int_eq(parse_cla(name, locs, n, &c), -EINVAL);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(why, reason) != NULL, "reason \"%s\" lacks \"%s\"", why, reason);
}

/* An address's text is inet_ntop's, whatever its digits. */
START_TEST(test_cla_address_text)
{
	static const char *const ips[] = {"0.0.0.0", "255.255.255.255", "10.0.100.9", "1.20.255.0", "::",
	                                  "2001:db8::1", "::ffff:10.0.0.1", "fe80:0:0:0:0:0:0:1"};
	static const uint32_t ports[] = {1, 65535, 80, 9090, 7, 443, 10000, 59999};
	struct loc a;
	struct loc *ls[] = {&a};
	struct mtd_xds_cla *c;
	size_t n = sizeof(ips) / sizeof(ips[0]);

	loc_init(&a, "", 0, 0);
	for (size_t i = 0; i < n; i++)
		loc_add(&a, ips[i], ports[i], 0);
	ck_assert_int_eq(parse_cla("x", ls, 1, &c), 0);
	ck_assert_uint_eq(c->n, n);
	for (size_t i = 0; i < n; i++) {
		unsigned char bin[16];
		char host[INET6_ADDRSTRLEN], want[INET6_ADDRSTRLEN + 8];
		int v6 = strchr(ips[i], ':') != NULL;
		ck_assert_int_eq(inet_pton(v6 ? AF_INET6 : AF_INET, ips[i], bin), 1);
		inet_ntop(v6 ? AF_INET6 : AF_INET, bin, host, sizeof(host));
		snprintf(want, sizeof(want), v6 ? "[%s]:%u" : "%s:%u", host, ports[i]);
		ck_assert_str_eq(c->eps[i].address, want);
	}
	mtd_xds_cla_free(c);
}
END_TEST

START_TEST(test_cla_localities)
{
	struct loc a, b;
	struct loc *ls[] = {&a, &b};
	struct mtd_xds_cla *c;

	/* No locality weight: the endpoints' own weights (default 1). */
	loc_init(&a, "z1", 0, 0);
	loc_add(&a, "127.0.0.1", 5001, 0);
	loc_add(&a, "127.0.0.2", 5002, 3);
	loc_init(&b, "", 0, 0);
	loc_add(&b, "::1", 5003, 0);
	ck_assert_int_eq(parse_cla("shop.Echo", ls, 2, &c), 0);
	ck_assert_str_eq(c->name, "shop.Echo");
	ck_assert_uint_eq(c->n, 3);
	ck_assert_str_eq(c->eps[0].address, "127.0.0.1:5001");
	ck_assert_str_eq(c->eps[0].zone, "z1");
	ck_assert_int_eq(c->eps[0].weight, 1);
	ck_assert_int_eq(c->eps[1].weight, 3);
	ck_assert_str_eq(c->eps[2].address, "[::1]:5003");
	ck_assert_ptr_null(c->eps[2].zone);
	struct sockaddr_storage ss;
	socklen_t sl;
	ck_assert_int_eq(mtd_xds_sockaddr(c->eps[2].address, &ss, &sl), 0);
	ck_assert_int_eq(ss.ss_family, AF_INET6);
	ck_assert_uint_eq(ntohs(((struct sockaddr_in6 *)&ss)->sin6_port), 5003);
	ck_assert_int_eq(mtd_xds_sockaddr(c->eps[1].address, &ss, &sl), 0);
	ck_assert_int_eq(ss.ss_family, AF_INET);
	ck_assert_uint_eq(sl, sizeof(struct sockaddr_in));
	/* The parse kept beside the text is the text's parse. */
	for (size_t i = 0; i < c->n; i++) {
		struct sockaddr_storage kept;
		socklen_t kl;
		ck_assert_int_eq(mtd_xds_sockaddr(c->eps[i].address, &ss, &sl), 0);
		mtd_xds_ep_sockaddr(&c->eps[i], &kept, &kl);
		ck_assert_uint_eq(kl, sl);
		ck_assert_int_eq(memcmp(&kept, &ss, sizeof(ss)), 0);
	}
	mtd_xds_cla_free(c);

	/* Locality weights 3:1, the first locality's calls split 1:3. */
	loc_init(&a, "z1", 0, 3);
	loc_add(&a, "10.0.0.1", 1, 1);
	loc_add(&a, "10.0.0.2", 1, 3);
	loc_init(&b, "z2", 0, 1);
	loc_add(&b, "10.0.0.3", 1, 0);
	ck_assert_int_eq(parse_cla("x", ls, 2, &c), 0);
	ck_assert_int_eq(c->eps[0].weight, 187500);
	ck_assert_int_eq(c->eps[1].weight, 562500);
	ck_assert_int_eq(c->eps[2].weight, 250000);
	ck_assert_str_eq(c->eps[2].zone, "z2");
	mtd_xds_cla_free(c);

	/* Weights past maitred's range are scaled down, never to 0. */
	loc_init(&a, "", 0, 0);
	loc_add(&a, "10.0.0.1", 1, UINT32_MAX);
	loc_add(&a, "10.0.0.2", 1, 1);
	ck_assert_int_eq(parse_cla("x", ls, 1, &c), 0);
	ck_assert_int_eq(c->eps[0].weight, MTD_XDS_WEIGHT_SCALE);
	ck_assert_int_eq(c->eps[1].weight, 1);
	mtd_xds_cla_free(c);
}
END_TEST

START_TEST(test_cla_priority_and_health)
{
	struct loc p0, p1;
	struct loc *ls[] = {&p1, &p0};
	struct mtd_xds_cla *c;

	loc_init(&p0, "z1", 0, 0);
	loc_add(&p0, "10.0.0.1", 80, 0);
	loc_add(&p0, "10.0.0.2", 80, 0)->health_status = ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__DRAINING;
	loc_init(&p1, "z2", 1, 0);
	loc_add(&p1, "10.0.1.1", 80, 0);
	ck_assert_int_eq(parse_cla("x", ls, 2, &c), 0);
	ck_assert_uint_eq(c->priority, 0);
	ck_assert_uint_eq(c->n, 1);
	ck_assert_uint_eq(c->n_skipped, 2);
	ck_assert_str_eq(c->eps[0].address, "10.0.0.1:80");
	mtd_xds_cla_free(c);

	/* Priority 0 has nothing that may be picked: priority 1 serves. */
	p0.e[0].health_status = ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__UNHEALTHY;
	ck_assert_int_eq(parse_cla("x", ls, 2, &c), 0);
	ck_assert_uint_eq(c->priority, 1);
	ck_assert_uint_eq(c->n, 1);
	ck_assert_str_eq(c->eps[0].address, "10.0.1.1:80");
	mtd_xds_cla_free(c);

	/* HEALTHY, UNKNOWN and DEGRADED are picked; TIMEOUT is not. */
	p0.e[0].health_status = ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__DEGRADED;
	p0.e[1].health_status = ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__HEALTHY;
	ck_assert_int_eq(parse_cla("x", ls, 2, &c), 0);
	ck_assert_uint_eq(c->n, 2);
	mtd_xds_cla_free(c);
	p0.e[0].health_status = p0.e[1].health_status = ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__TIMEOUT;
	p1.e[0].health_status = ENVOY__CONFIG__CORE__V3__HEALTH_STATUS__UNHEALTHY;
	ck_assert_int_eq(parse_cla("x", ls, 2, &c), 0);
	ck_assert_uint_eq(c->n, 0); /* valid: the service has no endpoint */
	mtd_xds_cla_free(c);

	/* The same address in two priorities is fine, twice in one is not. */
	p0.e[0].health_status = p0.e[1].health_status = p1.e[0].health_status = 0;
	p1.sa[0].address = (char *)"10.0.0.1";
	ck_assert_int_eq(parse_cla("x", ls, 2, &c), 0);
	mtd_xds_cla_free(c);
	p0.sa[1].address = (char *)"10.0.0.1";
	cla_refused("x", ls, 2, "endpoint 10.0.0.1:80 appears twice in priority 0");
	p0.sa[1].address = (char *)"010.0.0.1"; /* not canonical: refused by inet_pton */
	cla_refused("x", ls, 2, "not a numeric IP");
}
END_TEST

START_TEST(test_cla_refused)
{
	struct loc a;
	struct loc *ls[] = {&a};
	struct mtd_xds_cla *c;

	loc_init(&a, "z", 0, 0);
	loc_add(&a, "10.0.0.1", 80, 0);
	cla_refused("", ls, 1, "cluster_name");
	a.sa[0].port_value = 0;
	cla_refused("x", ls, 1, "port_value must be 1..65535");
	a.sa[0].port_value = 70000;
	cla_refused("x", ls, 1, "port_value must be 1..65535");
	a.sa[0].port_value = 80;
	a.sa[0].port_specifier_case = ENVOY__CONFIG__CORE__V3__SOCKET_ADDRESS__PORT_SPECIFIER_NAMED_PORT;
	a.sa[0].named_port = (char *)"http";
	cla_refused("x", ls, 1, "port_value must be");
	a.sa[0].port_specifier_case = ENVOY__CONFIG__CORE__V3__SOCKET_ADDRESS__PORT_SPECIFIER_PORT_VALUE;
	a.sa[0].port_value = 80; /* the oneof's union held the name */
	a.sa[0].address = (char *)"echo.shop.svc";
	cla_refused("x", ls, 1, "endpoints[0].lb_endpoints[0]: address \"echo.shop.svc\" is not a numeric IP");
	a.sa[0].address = (char *)"";
	cla_refused("x", ls, 1, "not a numeric IP");
	a.sa[0].address = (char *)"10.0.0.1";
	a.sa[0].resolver_name = (char *)"dns";
	cla_refused("x", ls, 1, "resolver_name");
	a.sa[0].resolver_name = (char *)"";
	a.sa[0].protocol = ENVOY__CONFIG__CORE__V3__SOCKET_ADDRESS__PROTOCOL__UDP;
	cla_refused("x", ls, 1, "protocol must be TCP");
	a.sa[0].protocol = 0;
	a.addr[0].address_case = 0;
	cla_refused("x", ls, 1, "needs endpoint.address.socket_address");
	a.addr[0].address_case = ENVOY__CONFIG__CORE__V3__ADDRESS__ADDRESS_SOCKET_ADDRESS;
	a.end[0].address = NULL;
	cla_refused("x", ls, 1, "needs endpoint.address");
	a.end[0].address = &a.addr[0];
	a.e[0].host_identifier_case = ENVOY__CONFIG__ENDPOINT__V3__LB_ENDPOINT__HOST_IDENTIFIER_ENDPOINT_NAME;
	a.e[0].endpoint_name = (char *)"leds";
	cla_refused("x", ls, 1, "needs endpoint");
	a.e[0].host_identifier_case = ENVOY__CONFIG__ENDPOINT__V3__LB_ENDPOINT__HOST_IDENTIFIER_ENDPOINT;
	a.e[0].endpoint = &a.end[0];
	google__protobuf__uint32_value__init(&a.w[0]);
	a.w[0].value = 0;
	a.e[0].load_balancing_weight = &a.w[0];
	cla_refused("x", ls, 1, "load_balancing_weight: must be >= 1");
	a.e[0].load_balancing_weight = NULL;
	a.l.priority = 129;
	cla_refused("x", ls, 1, "priority: 129 is above 128");
	a.l.priority = 0;
	google__protobuf__uint32_value__init(&a.lw);
	a.l.load_balancing_weight = &a.lw;
	cla_refused("x", ls, 1, "endpoints[0].load_balancing_weight");
	a.l.load_balancing_weight = NULL;
	a.where.zone = (char *)"z\x11"; /* a control character (found by fuzz/xds_fuzz.c) */
	cla_refused("x", ls, 1, "endpoints[0].locality.zone: longer than 255 or not printable");
	a.where.zone = (char *)"z";
	ck_assert_int_eq(parse_cla("x", ls, 1, &c), 0);
	mtd_xds_cla_free(c);

	static const uint8_t junk[] = {0x12, 0x05, 0x0a};
	ck_assert_int_eq(mtd_xds_cla_parse(junk, sizeof(junk), &c, why, sizeof(why)), -EINVAL);
	ck_assert(strstr(why, "does not decode") != NULL);
	ck_assert_ptr_null(c);

	struct sockaddr_storage ss;
	socklen_t sl;
	ck_assert_int_eq(mtd_xds_sockaddr("10.0.0.1", &ss, &sl), -EINVAL);
	ck_assert_int_eq(mtd_xds_sockaddr("10.0.0.1:0", &ss, &sl), -EINVAL);
	ck_assert_int_eq(mtd_xds_sockaddr("[::1:80", &ss, &sl), -EINVAL);
	ck_assert_int_eq(mtd_xds_sockaddr("[]:80", &ss, &sl), -EINVAL);
	ck_assert_int_eq(mtd_xds_sockaddr("x:80", &ss, &sl), -EINVAL);
}
END_TEST

/* A field: its tag and, for LEN, a one-byte length and the bytes. */
static size_t put_len(uint8_t *p, unsigned field, const void *data, size_t n)
{
	ck_assert_uint_lt(n, 128);
	p[0] = (uint8_t)(field << 3 | 2);
	p[1] = (uint8_t)n;
	memcpy(p + 2, data, n);
	return n + 2;
}

/* An assignment "x" of one endpoint whose SocketAddress is sa[0..n),
 * written as a serializer would around it. */
static int cla_with_socket(const uint8_t *sa, size_t n, struct mtd_xds_cla **out)
{
	uint8_t a[128], e[128], lbe[128], loc[128];
	size_t na = put_len(a, 1, sa, n);          /* Address.socket_address */
	size_t ne = put_len(e, 1, a, na);          /* Endpoint.address */
	size_t nl = put_len(lbe, 1, e, ne);        /* LbEndpoint.endpoint */
	size_t nloc = put_len(loc, 2, lbe, nl);    /* LocalityLbEndpoints.lb_endpoints */
	size_t len = put_len(wire, 1, "x", 1);     /* cluster_name */
	len += put_len(wire + len, 2, loc, nloc);  /* endpoints */
	why[0] = '\0';
	*out = (void *)1;
	return mtd_xds_cla_parse(wire, len, out, why, sizeof(why));
}

/* The assignment is read from the wire as protobuf-c reads it, and more
 * strictly where protobuf-c would quietly cut or merge: a NUL inside the
 * address (protobuf-c's C string ends there: "10.0.0.1\0junk" was read as
 * 10.0.0.1), a message field written twice (protobuf-c merges the two).
 * No serializer writes either. */
START_TEST(test_cla_wire_strictness)
{
	struct mtd_xds_cla *c;
	uint8_t sa[64];
	size_t n;

	/* address "10.0.0.1", port_value 80: read. */
	n = put_len(sa, 2, "10.0.0.1", 8);
	sa[n++] = 3 << 3;
	sa[n++] = 80;
	ck_assert_int_eq(cla_with_socket(sa, n, &c), 0);
	ck_assert_uint_eq(c->n, 1);
	ck_assert_str_eq(c->eps[0].address, "10.0.0.1:80");
	mtd_xds_cla_free(c);
	/* port_value as a varint past 32 bits: its low 32 bits, as protobuf-c. */
	n = put_len(sa, 2, "10.0.0.1", 8);
	memcpy(sa + n, "\x18\xd0\x80\x80\x80\x10", 6); /* 2^32 + 80 */
	n += 6;
	ck_assert_int_eq(cla_with_socket(sa, n, &c), 0);
	ck_assert_str_eq(c->eps[0].address, "10.0.0.1:80");
	mtd_xds_cla_free(c);
	/* A NUL inside the address: refused, the field named. */
	n = put_len(sa, 2, "10.0.0.1\0junk", 13);
	sa[n++] = 3 << 3;
	sa[n++] = 80;
	ck_assert_int_eq(cla_with_socket(sa, n, &c), -EINVAL);
	ck_assert_ptr_null(c);
	ck_assert_str_eq(why,
	                 "a NUL in string field endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address");
	/* The port as a string where a varint belongs. */
	n = put_len(sa, 2, "10.0.0.1", 8);
	n += put_len(sa + n, 3, "80", 2);
	ck_assert_int_eq(cla_with_socket(sa, n, &c), -EINVAL);
	ck_assert_str_eq(why, "the ClusterLoadAssignment does not decode");
	/* The socket address written twice, its address in the first and its
	 * port in the second. */
	{
		uint8_t one[32], two[8], a[64], e[80], lbe[96], loc[112];
		size_t n1 = put_len(one, 2, "10.0.0.1", 8), n2 = 0, na;
		two[n2++] = 3 << 3;
		two[n2++] = 80;
		na = put_len(a, 1, one, n1);
		na += put_len(a + na, 1, two, n2);
		size_t ne = put_len(e, 1, a, na);
		size_t nl = put_len(lbe, 1, e, ne);
		size_t nloc = put_len(loc, 2, lbe, nl);
		size_t len = put_len(wire, 1, "x", 1);
		len += put_len(wire + len, 2, loc, nloc);
		c = (void *)1;
		ck_assert_int_eq(mtd_xds_cla_parse(wire, len, &c, why, sizeof(why)), -EINVAL);
		ck_assert_ptr_null(c);
		ck_assert_str_eq(why, "the ClusterLoadAssignment does not decode");
	}
}
END_TEST

/* buf[0..n) with every '#' made a NUL: a string protobuf-c cuts there. */
static void hash_to_nul(uint8_t *buf, size_t n)
{
	for (uint8_t *p = buf; (p = memchr(p, '#', (size_t)(buf + n - p))) != NULL;)
		*p++ = '\0';
}

/* cluster m packed, its '#' made NULs: refused for reason. */
static void nul_cluster_refused(const PbCluster *m, const char *reason)
{
	struct mtd_xds_cluster c;
	size_t n = envoy__config__cluster__v3__cluster__pack(m, wire);

	hash_to_nul(wire, n);
	ck_assert_int_eq(mtd_xds_cluster_parse(wire, n, NULL, &c, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, reason);
	ck_assert_ptr_null(c.name);
}

/* A string with a NUL inside refuses the whole resource, naming the
 * field: protobuf-c's C string ends at the NUL, and the rest would alias
 * another name (the cluster "a\0x" read as the cluster "a"). */
START_TEST(test_a_nul_in_a_string_refuses_the_resource)
{
	PbCluster m;
	char name[64];
	struct loc a;
	struct mtd_xds_cla *c;

	eds_cluster(&m, "a#x");
	nul_cluster_refused(&m, "a NUL in string field name");
	/* Not named "a" in the NACK either. */
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_CLUSTER, wire,
	                                       envoy__config__cluster__v3__cluster__get_packed_size(&m), name,
	                                       sizeof(name)),
	                 -EINVAL);
	eds_cluster(&m, "a");
	eds_cfg.service_name = (char *)"svc#x";
	nul_cluster_refused(&m, "a NUL in string field eds_cluster_config.service_name");
	/* In the UpstreamTlsContext, unpacked on its own. */
	Envoy__Extensions__TransportSockets__Tls__V3__UpstreamTlsContext up =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__UPSTREAM_TLS_CONTEXT__INIT;
	eds_cluster(&m, "a");
	up.sni = (char *)"api#x";
	with_tls(&m, &up);
	nul_cluster_refused(&m, "transport_socket.typed_config: a NUL in string field sni");
	/* An assignment's name, an endpoint's address (the one
	 * test_cla_wire_strictness writes by hand), a locality's zone. */
	PbCla m2 = ENVOY__CONFIG__ENDPOINT__V3__CLUSTER_LOAD_ASSIGNMENT__INIT;
	PbLocality *l2[] = {&a.l};
	m2.n_endpoints = 1;
	m2.endpoints = l2;
	static const struct {
		const char *name, *ip, *zone, *why;
	} cases[] = {
	        {"c#x", "10.0.0.1", "z1", "a NUL in string field cluster_name"},
	        {"c", "10.0.0.1#", "z1",
	         "a NUL in string field endpoints[0].lb_endpoints[1].endpoint.address.socket_address.address"},
	        {"c", "10.0.0.2", "z#1", "a NUL in string field endpoints[0].locality.zone"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		loc_init(&a, cases[i].zone, 0, 0);
		loc_add(&a, "10.0.0.9", 80, 0);
		loc_add(&a, cases[i].ip, 80, 0);
		m2.cluster_name = (char *)cases[i].name;
		size_t n = envoy__config__endpoint__v3__cluster_load_assignment__pack(&m2, wire);
		hash_to_nul(wire, n);
		c = (void *)1;
		ck_assert_int_eq(mtd_xds_cla_parse(wire, n, &c, why, sizeof(why)), -EINVAL);
		ck_assert_ptr_null(c);
		ck_assert_str_eq(why, cases[i].why);
	}
}
END_TEST

/* The endpoint count bound holds before anything is allocated per
 * endpoint: a locality claiming more than MTD_LB_MAX_ENDPOINTS. */
START_TEST(test_cla_too_many)
{
	size_t n = MTD_LB_MAX_ENDPOINTS + 1;
	PbCla m = ENVOY__CONFIG__ENDPOINT__V3__CLUSTER_LOAD_ASSIGNMENT__INIT;
	PbLocality l = ENVOY__CONFIG__ENDPOINT__V3__LOCALITY_LB_ENDPOINTS__INIT;
	PbLocality *ls[] = {&l};
	PbLbEndpoint e = ENVOY__CONFIG__ENDPOINT__V3__LB_ENDPOINT__INIT;
	PbLbEndpoint **eps = calloc(n, sizeof(*eps));
	struct mtd_xds_cla *c;

	for (size_t i = 0; i < n; i++)
		eps[i] = &e; /* each an empty LbEndpoint: 2 bytes on the wire */
	l.n_lb_endpoints = n;
	l.lb_endpoints = eps;
	m.cluster_name = (char *)"x";
	m.n_endpoints = 1;
	m.endpoints = ls;
	size_t len = envoy__config__endpoint__v3__cluster_load_assignment__get_packed_size(&m);
	uint8_t *buf = malloc(len);
	envoy__config__endpoint__v3__cluster_load_assignment__pack(&m, buf);
	ck_assert_int_eq(mtd_xds_cla_parse(buf, len, &c, why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "more than 100000 endpoints") != NULL, "%s", why);
	free(buf);
	free(eps);
}
END_TEST

START_TEST(test_resource_name)
{
	PbCluster m;
	char name[64];
	struct loc a;
	struct loc *ls[] = {&a};
	struct mtd_xds_cla *c;

	eds_cluster(&m, "named");
	m.type = ENVOY__CONFIG__CLUSTER__V3__CLUSTER__DISCOVERY_TYPE__STATIC; /* refused, but named */
	size_t n = envoy__config__cluster__v3__cluster__pack(&m, wire);
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_CLUSTER, wire, n, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "named");
	/* Sure, but longer than cap - 1: no name asked for (name ""). */
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_CLUSTER, wire, n, name, 3), MTD_XDS_NAME_LONG);
	ck_assert_str_eq(name, "");
	ck_assert_int_eq(mtd_xds_resource_name("type.googleapis.com/x", wire, n, name, sizeof(name)), -EINVAL);
	/* Cut short: it does not decode, its name is still read (the last
	 * one written before the bytes end), as for the other types, but
	 * only as a guess: the resource may be any other. */
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_CLUSTER, wire, n - 1, name, sizeof(name)),
	                 MTD_XDS_NAME_GUESS);
	ck_assert_str_eq(name, "named");
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_LISTENER, wire, n - 1, name, sizeof(name)),
	                 MTD_XDS_NAME_GUESS);
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_CLUSTER, wire, 3, name, sizeof(name)), -EINVAL);
	/* Sure only when the top level decodes and every field 1 is a string:
	 * a name, then field 1 as a varint (protobuf refuses the resource),
	 * then another name. */
	static const uint8_t twice[] = {0x0a, 1, 'a', 0x08, 5, 0x0a, 1, 'b'}, last_ok[] = {0x0a, 1, 'a', 0x0a, 1, 'b'};
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_ENDPOINT, twice, sizeof(twice), name, sizeof(name)),
	                 MTD_XDS_NAME_GUESS);
	ck_assert_str_eq(name, "b");
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_ENDPOINT, twice, 5, name, sizeof(name)), -EINVAL);
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_ROUTE, last_ok, sizeof(last_ok), name, sizeof(name)),
	                 MTD_XDS_NAME_EXACT);
	ck_assert_str_eq(name, "b");
	/* An empty name is none (the same message as one without it). */
	static const uint8_t empty[] = {0x10, 3, 0x0a, 0};
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_CLUSTER, empty, 2, name, sizeof(name)), -EINVAL);
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_CLUSTER, empty, 4, name, sizeof(name)), -EINVAL);
	/* A sure name need not be printable (it is compared, never logged
	 * unescaped); a guess must be. */
	uint8_t ctl[] = {0x0a, 2, 'a', 0x1b, 0x10}; /* then field 2's tag, its value cut */
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_LISTENER, ctl, 4, name, sizeof(name)), MTD_XDS_NAME_EXACT);
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_LISTENER, ctl, 5, name, sizeof(name)), -EINVAL);
	ctl[3] = 'b';
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_LISTENER, ctl, 5, name, sizeof(name)), MTD_XDS_NAME_GUESS);
	ck_assert_str_eq(name, "ab");
	/* Stricter than protobuf-c, as pbwire is: after the name, a field 0
	 * whose tag takes two bytes, a field number past 2^29 - 1, a varint
	 * of 10 bytes past 64 bits. protobuf-c unpacks each (named "x"); to
	 * the reader they do not decode (a guess), and the Cluster does not
	 * parse: maitred's decoding is pbwire's. */
	static const struct {
		uint8_t b[14];
		size_t n;
	} lax[] = {
		{{0x0a, 1, 'x', 0x80, 0x00, 0x05}, 6},
		{{0x0a, 1, 'x', 0x80, 0x80, 0x80, 0x80, 0x10, 0x05}, 9},
		{{0x0a, 1, 'x', 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 14},
	};
	for (size_t i = 0; i < sizeof(lax) / sizeof(lax[0]); i++) {
		PbCluster *u = envoy__config__cluster__v3__cluster__unpack(NULL, lax[i].n, lax[i].b);
		ck_assert_ptr_nonnull(u);
		ck_assert_str_eq(u->name, "x");
		envoy__config__cluster__v3__cluster__free_unpacked(u, NULL);
		ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_CLUSTER, lax[i].b, lax[i].n, name, sizeof(name)),
		                 MTD_XDS_NAME_GUESS);
		struct mtd_xds_cluster cl;
		ck_assert_int_eq(mtd_xds_cluster_parse(lax[i].b, lax[i].n, NULL, &cl, why, sizeof(why)), -EINVAL);
		ck_assert_str_eq(why, "the Cluster does not decode");
	}
	loc_init(&a, "", 0, 0);
	loc_add(&a, "bad", 1, 0);
	cla_refused("cla-name", ls, 1, "numeric");
	/* a refused assignment still has its name for the NACK */
	PbCla m2 = ENVOY__CONFIG__ENDPOINT__V3__CLUSTER_LOAD_ASSIGNMENT__INIT;
	PbLocality *l2[] = {&a.l};
	m2.cluster_name = (char *)"cla-name";
	m2.n_endpoints = 1;
	m2.endpoints = l2;
	n = envoy__config__endpoint__v3__cluster_load_assignment__pack(&m2, wire);
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_ENDPOINT, wire, n, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "cla-name");
	ck_assert_int_eq(mtd_xds_cla_parse(wire, n, &c, why, sizeof(why)), -EINVAL);
}
END_TEST

/* A DiscoveryResponse read from the wire says what protobuf-c's unpack
 * says: the three strings, each resource's type URL and bytes, in order;
 * a field written twice counts last; what does not decode is refused. */
START_TEST(test_response_read)
{
	Envoy__Service__Discovery__V3__DiscoveryResponse m = ENVOY__SERVICE__DISCOVERY__V3__DISCOVERY_RESPONSE__INIT;
	Google__Protobuf__Any a1 = GOOGLE__PROTOBUF__ANY__INIT, a2 = GOOGLE__PROTOBUF__ANY__INIT,
	                      a3 = GOOGLE__PROTOBUF__ANY__INIT;
	Google__Protobuf__Any *res[] = {&a1, &a2, &a3};
	struct mtd_xds_response r;
	static uint8_t v1[] = {0x0a, 0x01, 'a'};

	m.version_info = (char *)"v7";
	m.type_url = (char *)MTD_XDS_TYPE_CLUSTER;
	m.nonce = (char *)"n-1";
	m.canary = true; /* skipped */
	a1.type_url = (char *)MTD_XDS_TYPE_CLUSTER;
	a1.value.data = v1;
	a1.value.len = sizeof(v1);
	a2.type_url = (char *)"type.googleapis.com/other";
	a3.type_url = (char *)MTD_XDS_TYPE_CLUSTER; /* no value: proto3's empty bytes */
	m.resources = res;
	m.n_resources = 3;
	size_t n = envoy__service__discovery__v3__discovery_response__pack(&m, wire);
	ck_assert_int_eq(mtd_xds_response_read(wire, n, &r), 0);
	ck_assert_str_eq(r.version_info, "v7");
	ck_assert_str_eq(r.type_url, MTD_XDS_TYPE_CLUSTER);
	ck_assert_str_eq(r.nonce, "n-1");
	ck_assert_uint_eq(r.n_res, 3);
	ck_assert(mtd_xds_any_is(&r.res[0], MTD_XDS_TYPE_CLUSTER));
	ck_assert(!mtd_xds_any_is(&r.res[0], MTD_XDS_TYPE_ENDPOINT));
	ck_assert(!mtd_xds_any_is(&r.res[0], "type.googleapis.com/envoy.config.cluster.v3.Cluste"));
	ck_assert_uint_eq(r.res[0].len, sizeof(v1));
	ck_assert_mem_eq(r.res[0].value, v1, sizeof(v1));
	ck_assert(r.res[0].value >= wire && r.res[0].value < wire + n); /* a slice, not a copy */
	ck_assert(mtd_xds_any_is(&r.res[1], "type.googleapis.com/other"));
	ck_assert_uint_eq(r.res[2].len, 0);
	ck_assert_ptr_nonnull(r.res[2].value);
	mtd_xds_response_clear(&r);

	/* More resources than MTD_XDS_MAX_RESOURCES (empty ones, 2 bytes
	 * each): the strings only, none sliced (they would take 32 bytes
	 * each); a resource of the wrong wire type is still refused. */
	size_t big_n = 2 * (MTD_XDS_MAX_RESOURCES + 1) + 4;
	uint8_t *big = malloc(big_n + 2);
	ck_assert_ptr_nonnull(big);
	for (size_t i = 0; i < MTD_XDS_MAX_RESOURCES + 1; i++) {
		big[2 * i] = 0x12;
		big[2 * i + 1] = 0;
	}
	memcpy(big + big_n - 4, "\x2a\x02n3", 4);
	ck_assert_int_eq(mtd_xds_response_read(big, big_n, &r), 0);
	ck_assert_uint_eq(r.too_many, MTD_XDS_MAX_RESOURCES + 1);
	ck_assert_uint_eq(r.n_res, 0);
	ck_assert_ptr_null(r.res);
	ck_assert_str_eq(r.nonce, "n3");
	mtd_xds_response_clear(&r);
	big[big_n] = 0x10; /* field 2 as a varint */
	big[big_n + 1] = 1;
	ck_assert_int_eq(mtd_xds_response_read(big, big_n + 2, &r), -EBADMSG);
	free(big);

	/* Nothing at all: proto3's defaults. */
	ck_assert_int_eq(mtd_xds_response_read(wire, 0, &r), 0);
	ck_assert_str_eq(r.version_info, "");
	ck_assert_str_eq(r.nonce, "");
	ck_assert_uint_eq(r.n_res, 0);
	mtd_xds_response_clear(&r);

	/* The nonce twice: the last counts, as protobuf-c's unpack says. */
	wire[n++] = 0x2a;
	wire[n++] = 2;
	wire[n++] = 'n';
	wire[n++] = '2';
	ck_assert_int_eq(mtd_xds_response_read(wire, n, &r), 0);
	ck_assert_str_eq(r.nonce, "n2");
	Envoy__Service__Discovery__V3__DiscoveryResponse *pb =
	        envoy__service__discovery__v3__discovery_response__unpack(NULL, n, wire);
	ck_assert_ptr_nonnull(pb);
	ck_assert_str_eq(pb->nonce, r.nonce);
	envoy__service__discovery__v3__discovery_response__free_unpacked(pb, NULL);
	mtd_xds_response_clear(&r);

	/* Refused, as protobuf-c refuses them: cut short; the nonce as a
	 * varint; a resource as a varint; an Any whose value is a varint; an
	 * Any with a tag in 6 bytes. And a NUL inside the version, which
	 * protobuf-c lets through. */
	ck_assert_int_eq(mtd_xds_response_read(wire, n - 1, &r), -EBADMSG);
	ck_assert_ptr_null(r.res);
	static const uint8_t bad[][10] = {{0x28, 0x01},
	                                  {0x10, 0x01},
	                                  {0x12, 0x02, 0x10, 0x01},
	                                  {0x12, 0x07, 0x98, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01},
	                                  {0x0a, 0x03, 'v', 0, '1'}};
	static const size_t bad_len[] = {2, 2, 4, 9, 5};
	for (size_t i = 0; i < 5; i++) {
		pb = envoy__service__discovery__v3__discovery_response__unpack(NULL, bad_len[i], bad[i]);
		ck_assert_msg(pb == NULL || i == 4, "protobuf-c takes bad[%zu]", i);
		if (pb != NULL)
			envoy__service__discovery__v3__discovery_response__free_unpacked(pb, NULL);
		ck_assert_int_eq(mtd_xds_response_read(bad[i], bad_len[i], &r), -EBADMSG);
		ck_assert_ptr_null(r.version_info);
	}
}
END_TEST

/* Every allocation failing in turn: -ENOMEM (or the decode refused, when
 * protobuf-c's own allocation failed), nothing kept, nothing leaked (ASan). */
START_TEST(test_failmalloc)
{
	PbCluster m;
	struct loc a, b;
	Envoy__Config__Cluster__V3__CircuitBreakers cb = ENVOY__CONFIG__CLUSTER__V3__CIRCUIT_BREAKERS__INIT;
	Envoy__Config__Cluster__V3__OutlierDetection od = ENVOY__CONFIG__CLUSTER__V3__OUTLIER_DETECTION__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__UpstreamTlsContext up =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__UPSTREAM_TLS_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CommonTlsContext ctx =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__INIT;
	Envoy__Extensions__TransportSockets__Tls__V3__CertificateValidationContext vc =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__CERTIFICATE_VALIDATION_CONTEXT__INIT;
	Envoy__Config__Core__V3__DataSource ca = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__INIT;
	bool done = false;
	size_t clen, alen;
	static uint8_t cbuf[4096], abuf[4096];

	eds_cluster(&m, "a");
	m.circuit_breakers = &cb;
	m.outlier_detection = &od;
	ca.specifier_case = ENVOY__CONFIG__CORE__V3__DATA_SOURCE__SPECIFIER_FILENAME;
	ca.filename = (char *)"/etc/ca.pem";
	vc.trusted_ca = &ca;
	ctx.validation_context_type_case =
	        ENVOY__EXTENSIONS__TRANSPORT_SOCKETS__TLS__V3__COMMON_TLS_CONTEXT__VALIDATION_CONTEXT_TYPE_VALIDATION_CONTEXT;
	ctx.validation_context = &vc;
	up.common_tls_context = &ctx;
	up.sni = (char *)"echo.shop";
	with_tls(&m, &up);
	clen = envoy__config__cluster__v3__cluster__pack(&m, cbuf);
	loc_init(&a, "z1", 0, 2);
	loc_add(&a, "10.0.0.1", 80, 0);
	loc_add(&a, "10.0.0.2", 80, 0);
	loc_init(&b, "z2", 0, 1);
	loc_add(&b, "::1", 80, 0);
	alen = 0;
	{
		PbCla cm = ENVOY__CONFIG__ENDPOINT__V3__CLUSTER_LOAD_ASSIGNMENT__INIT;
		PbLocality *pl[] = {&a.l, &b.l};
		cm.cluster_name = (char *)"x";
		cm.n_endpoints = 2;
		cm.endpoints = pl;
		alen = envoy__config__endpoint__v3__cluster_load_assignment__pack(&cm, abuf);
	}
	for (unsigned long n = 1; n < 10000 && !done; n++) {
		struct mtd_xds_cluster c;
		struct mtd_xds_cla *cla = NULL;
		int rc1, rc2;

		mtd_cfg__fail_alloc_after(n);
		rc1 = mtd_xds_cluster_parse(cbuf, clen, NULL, &c, why, sizeof(why));
		rc2 = mtd_xds_cla_parse(abuf, alen, &cla, why, sizeof(why));
		done = !mtd_cfg__alloc_failed();
		mtd_cfg__fail_alloc_after(0);
		if (done) {
			ck_assert_int_eq(rc1, 0);
			ck_assert_int_eq(rc2, 0);
			ck_assert_ptr_nonnull(c.tls);
			ck_assert_uint_eq(cla->n, 3);
		} else {
			ck_assert(rc1 == 0 || rc1 == -ENOMEM || rc1 == -EINVAL);
			ck_assert(rc2 == 0 || rc2 == -ENOMEM || rc2 == -EINVAL);
			if (rc1 != 0)
				ck_assert_ptr_null(c.name);
			if (rc2 != 0)
				ck_assert_ptr_null(cla);
		}
		mtd_xds_cluster_clear(&c);
		mtd_xds_cla_free(cla);
	}
	ck_assert(done);
}
END_TEST

static Suite *xds_suite(void)
{
	Suite *s = suite_create("xds");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_cluster_round_robin);
	tcase_add_test(tc, test_cluster_policies);
	tcase_add_test(tc, test_cluster_refused_shapes);
	tcase_add_test(tc, test_cluster_limits);
	tcase_add_test(tc, test_cluster_tls);
	tcase_add_test(tc, test_cla_localities);
	tcase_add_test(tc, test_cla_address_text);
	tcase_add_test(tc, test_cla_priority_and_health);
	tcase_add_test(tc, test_cla_refused);
	tcase_add_test(tc, test_cla_too_many);
	tcase_add_test(tc, test_cla_wire_strictness);
	tcase_add_test(tc, test_a_nul_in_a_string_refuses_the_resource);
	tcase_add_test(tc, test_resource_name);
	tcase_add_test(tc, test_cluster_tls_only_in_matches);
	tcase_add_test(tc, test_cluster_tls_from_certificate_providers);
	tcase_add_test(tc, test_cluster_tls_validation_checks_not_made_are_refused);
	tcase_add_test(tc, test_failmalloc);
	tcase_add_test(tc, test_response_read);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(xds_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
