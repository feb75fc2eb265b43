/* Unit tests of lib/xds/route.c: RouteConfigurations and Listeners, built
 * with protobuf-c and serialized as a management server sends them, into
 * maitred's routes; the routes then route calls through lib/route as the
 * sidecar would; every refusal names its reason, none crashes. */
#include <config.h> /* autoconf */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config-int.h"
#include "envoy/config/cluster/v3/cluster.pb-c.h"
#include "envoy/config/endpoint/v3/endpoint.pb-c.h"
#include "envoy/config/listener/v3/listener.pb-c.h"
#include "envoy/config/route/v3/route.pb-c.h"
#include "envoy/extensions/filters/http/fault/v3/fault.pb-c.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb-c.h"
#include "envoy/extensions/transport_sockets/tls/v3/tls.pb-c.h"
#include "grpc/grpc.h"
#include "route/route.h"
#include "xds/xds-int.h"
#include "xds/xds.h"

typedef Envoy__Config__Route__V3__RouteConfiguration PbRouteConfig;
typedef Envoy__Config__Route__V3__VirtualHost PbVhost;
typedef Envoy__Config__Route__V3__Route PbRoute;
typedef Envoy__Config__Route__V3__RouteMatch PbMatch;
typedef Envoy__Config__Route__V3__HeaderMatcher PbHeader;
typedef Envoy__Config__Route__V3__RouteAction PbAction;
typedef Envoy__Config__Listener__V3__Listener PbListener;
typedef Envoy__Extensions__Filters__Network__HttpConnectionManager__V3__HttpConnectionManager PbHcm;
typedef Envoy__Extensions__Filters__Network__HttpConnectionManager__V3__HttpFilter PbHttpFilter;

static char why[512];
static uint8_t wire[1 << 20];

/* ---- building resources ------------------------------------------------------- */

/* A route with its own match and action: what the tests then change. */
struct rt {
	PbRoute r;
	PbMatch m;
	PbAction a;
	PbHeader h;
	PbHeader *hs[2];
};

static void rt_prefix(struct rt *t, const char *prefix, const char *cluster)
{
	envoy__config__route__v3__route__init(&t->r);
	envoy__config__route__v3__route_match__init(&t->m);
	envoy__config__route__v3__route_action__init(&t->a);
	envoy__config__route__v3__header_matcher__init(&t->h);
	t->m.path_specifier_case = ENVOY__CONFIG__ROUTE__V3__ROUTE_MATCH__PATH_SPECIFIER_PREFIX;
	t->m.prefix = (char *)prefix;
	t->a.cluster_specifier_case = ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__CLUSTER_SPECIFIER_CLUSTER;
	t->a.cluster = (char *)cluster;
	t->r.match = &t->m;
	t->r.action_case = ENVOY__CONFIG__ROUTE__V3__ROUTE__ACTION_ROUTE;
	t->r.route = &t->a;
}

static void rt_header_exact(struct rt *t, const char *name, const char *value)
{
	t->h.name = (char *)name;
	t->h.header_match_specifier_case = ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_EXACT_MATCH;
	t->h.exact_match = (char *)value;
	t->hs[0] = &t->h;
	t->m.n_headers = 1;
	t->m.headers = t->hs;
}

static void vhost(PbVhost *v, char **domains, size_t nd, PbRoute **routes, size_t nr)
{
	envoy__config__route__v3__virtual_host__init(v);
	v->name = (char *)"vh";
	v->domains = domains;
	v->n_domains = nd;
	v->routes = routes;
	v->n_routes = nr;
}

static size_t pack_rc(const PbRouteConfig *m)
{
	size_t n = envoy__config__route__v3__route_configuration__get_packed_size(m);

	ck_assert_uint_lt(n, sizeof(wire));
	return envoy__config__route__v3__route_configuration__pack(m, wire);
}

/* m's routes as the Listener called host (NULL: none) takes them. */
static int parse_rc_for(const PbRouteConfig *m, const char *host, struct mtd_xds_routes **out)
{
	size_t n = pack_rc(m);

	why[0] = '\0';
	return mtd_xds_routes_parse(wire, n, host, out, why, sizeof(why));
}

static int parse_rc(const PbRouteConfig *m, struct mtd_xds_routes **out)
{
	return parse_rc_for(m, NULL, out);
}

/* One "*" host of the given routes. */
static int parse_routes(PbRoute **routes, size_t n, struct mtd_xds_routes **out)
{
	PbRouteConfig rc = ENVOY__CONFIG__ROUTE__V3__ROUTE_CONFIGURATION__INIT;
	PbVhost v, *vs[] = {&v};
	char *any[] = {(char *)"*"};

	vhost(&v, any, 1, routes, n);
	rc.name = (char *)"rc";
	rc.virtual_hosts = vs;
	rc.n_virtual_hosts = 1;
	return parse_rc(&rc, out);
}

static void refused(struct rt *t, const char *reason)
{
	PbRoute *rs[] = {&t->r};
	struct mtd_xds_routes *out = (void *)1;

	ck_assert_int_eq(parse_routes(rs, 1, &out), -EINVAL);
	ck_assert_msg(strstr(why, reason) != NULL, "reason \"%s\" lacks \"%s\"", why, reason);
	ck_assert_ptr_null(out);
}

/* ---- routing a call with the result ----------------------------------------- */

struct hdrs {
	const char *name, *value;
};

static const char *hdr(void *arg, const char *name, size_t *len)
{
	const struct hdrs *h = arg;
	for (; h != NULL && h->name != NULL; h++)
		if (strcmp(h->name, name) == 0) {
			*len = strlen(h->value);
			return h->value;
		}
	return NULL;
}

/* The cluster a call of path with headers h goes to: "" = the route has
 * none (fails), NULL = no route. */
static const char *route_call(const struct mtd_xds_routes *r, const char *path, const struct hdrs *h)
{
	static struct mtd_route_rule rules[MTD_XDS_ROUTES_MAX];
	struct mtd_route_path p;

	ck_assert_int_eq(mtd_route_parse_path(path, strlen(path), &p), 0);
	for (size_t i = 0; i < r->n; i++)
		rules[i] = r->routes[i].rule;
	int i = mtd_route_match(rules, r->n, &p, hdr, (void *)h);
	if (i < 0)
		return NULL;
	ck_assert_int_eq(r->routes[i].rule.to, i);
	return r->routes[i].act.n_clusters ? r->routes[i].act.clusters[0] : "";
}

/* ---- tests ---------------------------------------------------------------------- */

START_TEST(test_header_route_and_default)
{
	struct rt canary, dflt;
	PbRoute *rs[] = {&canary.r, &dflt.r};
	struct mtd_xds_routes *out;
	struct hdrs beta[] = {{"x-track", "beta"}, {NULL, NULL}};
	struct hdrs other[] = {{"x-track", "stable"}, {NULL, NULL}};

	rt_prefix(&canary, "", "cart-beta");
	rt_header_exact(&canary, "X-Track", "beta");
	rt_prefix(&dflt, "/", "cart");
	ck_assert_int_eq(parse_routes(rs, 2, &out), 0);
	ck_assert_str_eq(out->name, "rc");
	ck_assert_uint_eq(out->n, 2);
	ck_assert_str_eq(out->routes[0].rule.header, "x-track"); /* lower-cased */
	ck_assert_int_eq(out->routes[0].rule.kind, MTD_ROUTE_HEADER_VALUE);
	ck_assert_uint_eq(out->routes[0].act.weights[0], 1);
	ck_assert(!out->routes[0].act.retry);
	ck_assert_int_eq(out->routes[0].act.deadline_cap_ms, 0);
	ck_assert_str_eq(route_call(out, "/shop.Cart/Get", beta), "cart-beta");
	ck_assert_str_eq(route_call(out, "/shop.Cart/Get", other), "cart");
	ck_assert_str_eq(route_call(out, "/any.Thing/Do", NULL), "cart");
	mtd_xds_routes_free(out);
}
END_TEST

/* Header matchers in the older fields and in string_match. */
START_TEST(test_header_forms)
{
	struct rt a, b, c, d;
	PbRoute *rs[] = {&a.r, &b.r, &c.r, &d.r};
	Envoy__Type__Matcher__V3__StringMatcher sm = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__INIT;
	struct mtd_xds_routes *out;

	rt_prefix(&a, "", "by-prefix");
	rt_header_exact(&a, "x-user", NULL);
	a.h.header_match_specifier_case = ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_PREFIX_MATCH;
	a.h.prefix_match = (char *)"vip-";
	rt_prefix(&b, "", "by-string-exact");
	rt_header_exact(&b, "x-user", NULL);
	b.h.header_match_specifier_case = ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_STRING_MATCH;
	sm.match_pattern_case = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_EXACT;
	sm.exact = (char *)"bob";
	b.h.string_match = &sm;
	rt_prefix(&c, "", "by-present");
	rt_header_exact(&c, "x-debug", NULL);
	c.h.header_match_specifier_case =
	        ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_PRESENT_MATCH;
	c.h.present_match = true;
	rt_prefix(&d, "", "rest");
	ck_assert_int_eq(parse_routes(rs, 4, &out), 0);
	ck_assert_str_eq(route_call(out, "/a.B/C", (struct hdrs[]){{"x-user", "vip-1"}, {NULL, NULL}}), "by-prefix");
	ck_assert_str_eq(route_call(out, "/a.B/C", (struct hdrs[]){{"x-user", "bob"}, {NULL, NULL}}),
	                 "by-string-exact");
	ck_assert_str_eq(route_call(out, "/a.B/C", (struct hdrs[]){{"x-user", "bobby"}, {NULL, NULL}}), "rest");
	ck_assert_str_eq(route_call(out, "/a.B/C", (struct hdrs[]){{"x-debug", ""}, {NULL, NULL}}), "by-present");
	ck_assert_str_eq(route_call(out, "/a.B/C", NULL), "rest");
	mtd_xds_routes_free(out);
	sm.match_pattern_case = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_PREFIX;
	sm.prefix = (char *)"b";
	ck_assert_int_eq(parse_routes(rs, 4, &out), 0);
	ck_assert_str_eq(route_call(out, "/a.B/C", (struct hdrs[]){{"x-user", "bobby"}, {NULL, NULL}}),
	                 "by-string-exact");
	mtd_xds_routes_free(out);
}
END_TEST

/* Paths: a service's prefix, a whole path, and a host named for a
 * service: its routes first, the rest of its calls failed, then "*". */
START_TEST(test_paths_and_hosts)
{
	struct rt get, svc, all, other;
	PbRoute *named[] = {&get.r, &other.r}, *star[] = {&svc.r, &all.r};
	PbRouteConfig rc = ENVOY__CONFIG__ROUTE__V3__ROUTE_CONFIGURATION__INIT;
	PbVhost v1, v2, *vs[] = {&v2, &v1}; /* "*" first: named hosts still win */
	char *cart[] = {(char *)"shop.Cart", (char *)"*.svc.local"}, *any[] = {(char *)"*"};
	struct mtd_xds_routes *out;

	rt_prefix(&get, "", "cart-get");
	get.m.path_specifier_case = ENVOY__CONFIG__ROUTE__V3__ROUTE_MATCH__PATH_SPECIFIER_PATH;
	get.m.path = (char *)"/shop.Cart/Get";
	rt_prefix(&other, "/shop.Other/", "never"); /* another service in shop.Cart's host */
	rt_prefix(&svc, "/shop.Pay/", "pay");
	rt_prefix(&all, "", "default");
	vhost(&v1, cart, 2, named, 2);
	vhost(&v2, any, 1, star, 2);
	rc.name = (char *)"rc";
	rc.virtual_hosts = vs;
	rc.n_virtual_hosts = 2;
	ck_assert_int_eq(parse_rc(&rc, &out), 0);
	ck_assert_uint_eq(out->n, 4); /* Get, shop.Cart's rest, shop.Pay, default */
	ck_assert_str_eq(route_call(out, "/shop.Cart/Get", NULL), "cart-get");
	ck_assert_str_eq(route_call(out, "/shop.Cart/Put", NULL), ""); /* its host has no route for it */
	ck_assert_str_eq(route_call(out, "/shop.Pay/Charge", NULL), "pay");
	ck_assert_str_eq(route_call(out, "/shop.Other/X", NULL), "default");
	mtd_xds_routes_free(out);

	/* A configuration without a "*" host leaves other calls unrouted. */
	rc.virtual_hosts = &vs[1];
	rc.n_virtual_hosts = 1;
	ck_assert_int_eq(parse_rc(&rc, &out), 0);
	ck_assert_ptr_null(route_call(out, "/shop.Pay/Charge", NULL));
	mtd_xds_routes_free(out);

	/* The same name in two hosts, two "*" hosts: refused. */
	PbVhost *twice[] = {&v1, &v1};
	rc.virtual_hosts = twice;
	rc.n_virtual_hosts = 2;
	ck_assert_int_eq(parse_rc(&rc, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "\"shop.Cart\" is also host 0's"));
	PbVhost *stars[] = {&v2, &v2};
	rc.virtual_hosts = stars;
	ck_assert_int_eq(parse_rc(&rc, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "domain \"*\" is also host 0's"));
}
END_TEST

/* The cluster a call of another service than shop.Cart takes, with the
 * hosts vs[0..n) and the listener called host. */
static const char *other_call_for(PbVhost **vs, size_t n, const char *host)
{
	PbRouteConfig rc = ENVOY__CONFIG__ROUTE__V3__ROUTE_CONFIGURATION__INIT;
	static char got[32];
	struct mtd_xds_routes *out;

	rc.name = (char *)"rc";
	rc.virtual_hosts = vs;
	rc.n_virtual_hosts = n;
	ck_assert_int_eq(parse_rc_for(&rc, host, &out), 0);
	ck_assert_str_eq(route_call(out, "/shop.Cart/Get", NULL), "cart"); /* its own host, whatever the listener */
	const char *c = route_call(out, "/shop.Pay/Charge", NULL);
	snprintf(got, sizeof(got), "%s", c ? c : "(none)");
	mtd_xds_routes_free(out);
	return got;
}

/* A gRPC client whose target names the listener matches the virtual
 * hosts' domains against that name (Envoy's search order): maitred's
 * calls of services no host names take the host it would. */
START_TEST(test_the_listener_name_selects_a_host_as_a_clients_authority)
{
	enum { CART, EXACT, LONG, SHORT, PREFIX, BAD, ANY, N };
	static const char *clusters[N] = {"cart", "exact", "suffix-long", "suffix-short", "prefix", "bad", "any"};
	char *doms[N][2] = {{(char *)"shop.Cart"},
	                    {(char *)"API.shop.svc:8080"},
	                    {(char *)"*.shop.svc:8080"},
	                    {(char *)"*.svc:8080"},
	                    {(char *)"api.*"},
	                    {(char *)"a*i.shop.svc:8080", (char *)"**"},
	                    {(char *)"*"}};
	static const size_t nd[N] = {1, 1, 1, 1, 1, 2, 1};
	struct rt r[N];
	PbRoute *rs[N][1];
	PbVhost v[N], *all[N];

	for (int i = 0; i < N; i++) {
		rt_prefix(&r[i], "", clusters[i]);
		rs[i][0] = &r[i].r;
		vhost(&v[i], doms[i], nd[i], rs[i], 1);
	}
	/* All, then the best left out in turn: exact (case aside), the
	 * longer suffix, the shorter, the prefix, "*". "*" listed first and
	 * the wildcards out of order: the rank decides, not the order. */
	PbVhost *order[N] = {&v[ANY], &v[CART], &v[SHORT], &v[BAD], &v[PREFIX], &v[LONG], &v[EXACT]};
	static const char *want[] = {"exact", "suffix-long", "suffix-short", "prefix", "any"};
	for (int drop = 0; drop < 5; drop++) {
		size_t n = 0;
		for (int i = 0; i < N; i++) {
			int k = (int)(order[i] - v);
			if ((k == EXACT && drop >= 1) || (k == LONG && drop >= 2) || (k == SHORT && drop >= 3) ||
			    (k == PREFIX && drop >= 4))
				continue;
			all[n++] = order[i];
		}
		ck_assert_msg(strcmp(other_call_for(all, n, "api.shop.svc:8080"), want[drop]) == 0,
		              "with %d left out: %s, not %s", drop, other_call_for(all, n, "api.shop.svc:8080"), want[drop]);
	}
	/* No listener name: "*" only. */
	for (int i = 0; i < N; i++)
		all[i] = order[i];
	ck_assert_str_eq(other_call_for(all, N, NULL), "any");
	/* A wildcard stands for one character or more: ".svc:8080" is not
	 * "*.svc:8080"'s, nor "api." "api.*"'s. */
	ck_assert_str_eq(other_call_for(all, N, ".svc:8080"), "any");
	ck_assert_str_eq(other_call_for(all, N, "api."), "any");
	ck_assert_str_eq(other_call_for(all, N, "api.x"), "prefix");
	/* "a*i..." matches nothing; "**" is the suffix "*", no name here's. */
	ck_assert_str_eq(other_call_for(all, N, "axi.shop.svc:8080"), "suffix-long");
	/* Without "*", a name nothing matches leaves other calls unrouted. */
	ck_assert_str_eq(other_call_for(all + 1, N - 1, "cart.other"), "(none)");
	/* A listener named as a service: that service's host takes every
	 * other call too (the client's channel would), not "*". */
	ck_assert_str_eq(other_call_for(all, N, "shop.cart"), "cart");
}
END_TEST

/* A "*" first makes the rest a suffix and a "*" last the rest a prefix,
 * whatever else they hold, as Envoy, gRPC C-core and grpc-js classify a
 * domain ("*b*" is the suffix "b*", "a**" the prefix "a*"); only a "*"
 * neither first nor last matches nothing. xds.listener may hold a "*". */
START_TEST(test_a_wildcard_first_or_last_reads_the_rest_as_text)
{
	enum { CART, SUF, PRE, MID, ANY, N };
	static const char *clusters[N] = {"cart", "suffix", "prefix", "mid", "any"};
	char *doms[N][1] = {{(char *)"shop.Cart"}, {(char *)"*b*"}, {(char *)"a**"}, {(char *)"a*b"}, {(char *)"*"}};
	struct rt r[N];
	PbRoute *rs[N][1];
	PbVhost v[N], *all[N], *no_prefix[N - 1];

	for (int i = 0; i < N; i++) {
		rt_prefix(&r[i], "", clusters[i]);
		rs[i][0] = &r[i].r;
		vhost(&v[i], doms[i], 1, rs[i], 1);
		all[i] = &v[i];
	}
	ck_assert_str_eq(other_call_for(all, N, "xb*"), "suffix");
	ck_assert_str_eq(other_call_for(all, N, "a*z"), "prefix");
	ck_assert_str_eq(other_call_for(all, N, "b*"), "any"); /* the "*" stands for one character or more */
	no_prefix[0] = &v[CART];
	no_prefix[1] = &v[SUF];
	no_prefix[2] = &v[MID];
	no_prefix[3] = &v[ANY];
	ck_assert_str_eq(other_call_for(no_prefix, N - 1, "a*b"), "any");
}
END_TEST

START_TEST(test_weighted_clusters)
{
	struct rt t;
	Envoy__Config__Route__V3__WeightedCluster wc = ENVOY__CONFIG__ROUTE__V3__WEIGHTED_CLUSTER__INIT;
	Envoy__Config__Route__V3__WeightedCluster__ClusterWeight a, b;
	Envoy__Config__Route__V3__WeightedCluster__ClusterWeight *cws[] = {&a, &b};
	Google__Protobuf__UInt32Value wa = GOOGLE__PROTOBUF__UINT32_VALUE__INIT,
	                              wb = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
	PbRoute *rs[] = {&t.r};
	struct mtd_xds_routes *out;

	envoy__config__route__v3__weighted_cluster__cluster_weight__init(&a);
	envoy__config__route__v3__weighted_cluster__cluster_weight__init(&b);
	a.name = (char *)"cart-v1";
	wa.value = 75;
	a.weight = &wa;
	b.name = (char *)"cart-v2";
	wb.value = 25;
	b.weight = &wb;
	wc.clusters = cws;
	wc.n_clusters = 2;
	rt_prefix(&t, "", NULL);
	t.a.cluster_specifier_case = ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__CLUSTER_SPECIFIER_WEIGHTED_CLUSTERS;
	t.a.weighted_clusters = &wc;
	ck_assert_int_eq(parse_routes(rs, 1, &out), 0);
	ck_assert_uint_eq(out->routes[0].act.n_clusters, 2);
	ck_assert_str_eq(out->routes[0].act.clusters[1], "cart-v2");
	ck_assert_uint_eq(out->routes[0].act.weights[0], 75);
	ck_assert_uint_eq(out->routes[0].act.weights[1], 25);
	mtd_xds_routes_free(out);

	wb.value = UINT32_MAX;
	refused(&t, "the weights sum to 4294967370");
	wa.value = 0;
	wb.value = 0;
	refused(&t, "the weights sum to 0");
	wa.value = 1;
	b.name = (char *)"cart-v1";
	refused(&t, "cluster \"cart-v1\" twice");
	b.name = (char *)"";
	refused(&t, "clusters[1].name: empty");
	b.name = (char *)"cart-v2";
	b.cluster_header = (char *)"x-cluster";
	refused(&t, "clusters[1].cluster_header is not supported");
	wc.n_clusters = 0;
	refused(&t, "weighted_clusters: 0 clusters");
}
END_TEST

START_TEST(test_timeouts_retry_hash)
{
	struct rt t;
	Google__Protobuf__Duration to = GOOGLE__PROTOBUF__DURATION__INIT, msd = GOOGLE__PROTOBUF__DURATION__INIT;
	Google__Protobuf__Duration per = GOOGLE__PROTOBUF__DURATION__INIT, base = GOOGLE__PROTOBUF__DURATION__INIT;
	Google__Protobuf__Duration max = GOOGLE__PROTOBUF__DURATION__INIT;
	Envoy__Config__Route__V3__RouteAction__MaxStreamDuration md =
	        ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__MAX_STREAM_DURATION__INIT;
	Envoy__Config__Route__V3__RetryPolicy rp = ENVOY__CONFIG__ROUTE__V3__RETRY_POLICY__INIT;
	Envoy__Config__Route__V3__RetryPolicy__RetryBackOff bo =
	        ENVOY__CONFIG__ROUTE__V3__RETRY_POLICY__RETRY_BACK_OFF__INIT;
	Google__Protobuf__UInt32Value nr = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
	Envoy__Config__Route__V3__RouteAction__HashPolicy
	        hp1 = ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__HASH_POLICY__INIT,
	        hp2 = ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__HASH_POLICY__INIT;
	Envoy__Config__Route__V3__RouteAction__HashPolicy__Header hh =
	        ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__HASH_POLICY__HEADER__INIT;
	Envoy__Config__Route__V3__RouteAction__HashPolicy *hps[] = {&hp1, &hp2};
	PbRoute *rs[] = {&t.r};
	struct mtd_xds_routes *out;

	rt_prefix(&t, "", "cart");
	to.seconds = 5;
	t.a.timeout = &to;
	ck_assert_int_eq(parse_routes(rs, 1, &out), 0);
	ck_assert_int_eq(out->routes[0].act.deadline_cap_ms, 5000);
	mtd_xds_routes_free(out);
	/* max_stream_duration over timeout; 0 = no cap. */
	msd.nanos = 250000000;
	md.max_stream_duration = &msd;
	t.a.max_stream_duration = &md;
	ck_assert_int_eq(parse_routes(rs, 1, &out), 0);
	ck_assert_int_eq(out->routes[0].act.deadline_cap_ms, 250);
	mtd_xds_routes_free(out);
	msd.nanos = 0;
	ck_assert_int_eq(parse_routes(rs, 1, &out), 0);
	ck_assert_int_eq(out->routes[0].act.deadline_cap_ms, 0);
	mtd_xds_routes_free(out);
	to.seconds = -1;
	refused(&t, "routes[0].route.timeout: out of range");
	to.seconds = 5;

	/* retry_policy: gRPC codes only, HTTP conditions ignored. */
	rp.retry_on = (char *)"5xx, unavailable,cancelled ,reset,resource-exhausted";
	t.a.retry_policy = &rp;
	ck_assert_int_eq(parse_routes(rs, 1, &out), 0);
	const struct mtd_xds_action *a = &out->routes[0].act;
	ck_assert(a->retry);
	ck_assert_uint_eq(a->retry_on, (1u << MTD_GRPC_UNAVAILABLE) | (1u << MTD_GRPC_CANCELLED) |
	                                       (1u << MTD_GRPC_RESOURCE_EXHAUSTED));
	ck_assert_uint_eq(a->retries, 1);
	ck_assert_int_eq(a->backoff_base_ms, 25);
	ck_assert_int_eq(a->backoff_max_ms, 250);
	ck_assert_int_eq(a->per_try_timeout_ms, 0);
	mtd_xds_routes_free(out);
	nr.value = 1000;
	rp.num_retries = &nr;
	per.nanos = 100000000;
	rp.per_try_timeout = &per;
	base.nanos = 10000000;
	max.seconds = 1;
	bo.base_interval = &base;
	bo.max_interval = &max;
	rp.retry_back_off = &bo;
	ck_assert_int_eq(parse_routes(rs, 1, &out), 0);
	a = &out->routes[0].act;
	ck_assert_uint_eq(a->retries, 10); /* capped */
	ck_assert_int_eq(a->per_try_timeout_ms, 100);
	ck_assert_int_eq(a->backoff_base_ms, 10);
	ck_assert_int_eq(a->backoff_max_ms, 1000);
	mtd_xds_routes_free(out);
	rp.retry_on = (char *)"5xx,gateway-error";
	ck_assert_int_eq(parse_routes(rs, 1, &out), 0);
	ck_assert(!out->routes[0].act.retry);
	mtd_xds_routes_free(out);
	rp.retry_on = (char *)"unavailable";
	max.seconds = 0;
	max.nanos = 1000000;
	refused(&t, "retry_back_off.max_interval: out of range or below base_interval");
	bo.base_interval = NULL;
	refused(&t, "retry_back_off.base_interval: required");
	rp.retry_back_off = NULL;

	/* hash_policy: the header, lower-cased; another kind ignored; two headers refused. */
	hh.header_name = (char *)"X-User";
	hp2.policy_specifier_case = ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__HASH_POLICY__POLICY_SPECIFIER_HEADER;
	hp2.header = &hh;
	t.a.hash_policy = hps;
	t.a.n_hash_policy = 2;
	ck_assert_int_eq(parse_routes(rs, 1, &out), 0);
	ck_assert_str_eq(out->routes[0].act.hash_header, "x-user");
	mtd_xds_routes_free(out);
	hp1 = hp2;
	refused(&t, "two header policies");
	t.a.n_hash_policy = 1;
	hh.header_name = (char *)":authority";
	refused(&t, "hash_policy[0].header.header_name: empty, too long or a pseudo-header");
}
END_TEST

static void rt_regex(struct rt *t, Envoy__Type__Matcher__V3__RegexMatcher *rm, const char *regex, const char *cluster)
{
	rt_prefix(t, "", cluster);
	envoy__type__matcher__v3__regex_matcher__init(rm);
	rm->regex = (char *)regex;
	t->m.path_specifier_case = ENVOY__CONFIG__ROUTE__V3__ROUTE_MATCH__PATH_SPECIFIER_SAFE_REGEX;
	t->m.safe_regex = rm;
}

/* safe_regex on the path (a whole match, in a named host only its
 * service's calls), in safe_regex_match and in string_match. */
START_TEST(test_regex_matches)
{
	struct rt get, hdr, str, all, pay;
	Envoy__Type__Matcher__V3__RegexMatcher r1, r2, r3, r4;
	Envoy__Type__Matcher__V3__StringMatcher sm = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__INIT;
	Envoy__Type__Matcher__V3__RegexMatcher__GoogleRE2 re2 =
	        ENVOY__TYPE__MATCHER__V3__REGEX_MATCHER__GOOGLE_RE2__INIT;
	Google__Protobuf__BoolValue no = GOOGLE__PROTOBUF__BOOL_VALUE__INIT;
	PbRoute *named[] = {&pay.r}, *star[] = {&get.r, &hdr.r, &str.r, &all.r};
	PbRouteConfig rc = ENVOY__CONFIG__ROUTE__V3__ROUTE_CONFIGURATION__INIT;
	PbVhost v1, v2, *vs[] = {&v1, &v2};
	char *paydom[] = {(char *)"shop.Pay"}, *any[] = {(char *)"*"};
	struct mtd_xds_routes *out;

	rt_regex(&pay, &r4, "/shop\\.\\w+/Get.*", "pay-get"); /* in shop.Pay's host: its calls only */
	rt_regex(&get, &r1, "/shop\\.(Cart|Pay)/Get[A-Z]\\w*", "get");
	get.m.case_sensitive = &no; /* ignored for safe_regex, as Envoy does */
	envoy__type__matcher__v3__regex_matcher__init(&r2);
	r2.regex = (char *)"v[0-9]+(-beta)?";
	r2.engine_type_case = ENVOY__TYPE__MATCHER__V3__REGEX_MATCHER__ENGINE_TYPE_GOOGLE_RE2;
	r2.google_re2 = &re2; /* deprecated, read as nothing */
	rt_prefix(&hdr, "", "by-version");
	rt_header_exact(&hdr, "X-Version", NULL);
	hdr.h.header_match_specifier_case =
	        ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_SAFE_REGEX_MATCH;
	hdr.h.safe_regex_match = &r2;
	envoy__type__matcher__v3__regex_matcher__init(&r3);
	r3.regex = (char *)"(alice|bob)@[a-z]+\\.example";
	rt_prefix(&str, "", "by-user");
	rt_header_exact(&str, "x-user", NULL);
	str.h.header_match_specifier_case =
	        ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_STRING_MATCH;
	sm.match_pattern_case = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_SAFE_REGEX;
	sm.safe_regex = &r3;
	str.h.string_match = &sm;
	rt_prefix(&all, "", "default");
	vhost(&v1, paydom, 1, named, 1);
	vhost(&v2, any, 1, star, 4);
	rc.name = (char *)"rc";
	rc.virtual_hosts = vs;
	rc.n_virtual_hosts = 2;
	ck_assert_int_eq(parse_rc(&rc, &out), 0);
	ck_assert_uint_eq(out->n, 6); /* pay-get, shop.Pay's rest, get, by-version, by-user, default */
	ck_assert_str_eq(out->routes[0].rule.service, "shop.Pay");
	ck_assert_str_eq(out->routes[2].rule.service, "*");
	ck_assert_int_eq(out->routes[3].rule.kind, MTD_ROUTE_HEADER_REGEX);
	ck_assert_str_eq(route_call(out, "/shop.Pay/GetAll", NULL), "pay-get");
	ck_assert_str_eq(route_call(out, "/shop.Pay/Put", NULL), ""); /* its host has no route for it */
	ck_assert_str_eq(route_call(out, "/shop.Cart/GetItems", NULL), "get");
	ck_assert_str_eq(route_call(out, "/shop.Cart/Getitems", NULL), "default");  /* case-sensitive */
	ck_assert_str_eq(route_call(out, "/shop.Carts/GetItems", NULL), "default"); /* a whole match */
	ck_assert_str_eq(route_call(out, "/x.Y/Z", (struct hdrs[]){{"x-version", "v12-beta"}, {NULL, NULL}}),
	                 "by-version");
	ck_assert_str_eq(route_call(out, "/x.Y/Z", (struct hdrs[]){{"x-version", "v12-beta2"}, {NULL, NULL}}),
	                 "default");
	ck_assert_str_eq(route_call(out, "/x.Y/Z", (struct hdrs[]){{"x-user", "bob@eu.example"}, {NULL, NULL}}),
	                 "by-user");
	ck_assert_str_eq(route_call(out, "/x.Y/Z", (struct hdrs[]){{"x-user", "bob@eu.example.org"}, {NULL, NULL}}),
	                 "default");
	ck_assert_str_eq(route_call(out, "/x.Y/Z", NULL), "default"); /* missing headers match no pattern */
	mtd_xds_routes_free(out);
}
END_TEST

/* A pattern refused: the route named by position, the field, the
 * pattern and the construct at its byte. */
START_TEST(test_refused_regexes)
{
	struct rt t;
	Envoy__Type__Matcher__V3__RegexMatcher rm;
	Envoy__Type__Matcher__V3__StringMatcher sm = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__INIT;
	ProtobufCMessageUnknownField uf = {
	        .tag = 3, .wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, .len = 1, .data = (uint8_t *)"\0"};

	rt_regex(&t, &rm, "(?i)/shop.*", "c");
	refused(&t, "routes[0].match.safe_regex.regex \"(?i)/shop.*\": flags (?...) are not supported at byte 0");
	rt_regex(&t, &rm, "(a{1000}){1000}", "c");
	refused(&t, "the program is over 2048 instructions (counted repetitions expanded) at byte 9");
	rt_regex(&t, &rm, "", "c");
	refused(&t, "routes[0].match.safe_regex.regex: empty");
	rt_regex(&t, &rm, ".*", "c");
	rm.base.n_unknown_fields = 1;
	rm.base.unknown_fields = &uf;
	refused(&t, "routes[0].match.safe_regex: a field maitred does not know");
	rm.base.n_unknown_fields = 0;
	rt_prefix(&t, "", "c");
	rt_header_exact(&t, "x-a", NULL);
	t.h.header_match_specifier_case =
	        ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_SAFE_REGEX_MATCH;
	t.h.safe_regex_match = &rm;
	rm.regex = (char *)"a\\1";
	refused(&t, "routes[0].match.headers[0].safe_regex_match.regex \"a\\1\": backreferences (\\1) are not "
	            "supported at byte 1");
	t.h.header_match_specifier_case = ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_STRING_MATCH;
	t.h.string_match = &sm;
	sm.match_pattern_case = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_SAFE_REGEX;
	sm.safe_regex = &rm;
	rm.regex = (char *)"[z-a]";
	refused(&t, "headers[0].string_match.safe_regex.regex \"[z-a]\": a reversed range z-a at byte 1");
	rm.regex = (char *)"\x01[z-a]"; /* not quoted: a NACK's message stays printable */
	refused(&t, "headers[0].string_match.safe_regex.regex: a reversed range z-a at byte 2");
	sm.ignore_case = true;
	rm.regex = (char *)"a";
	refused(&t, "ignore_case is not supported");
}
END_TEST

START_TEST(test_refused_matches)
{
	struct rt t;
	Envoy__Type__Matcher__V3__StringMatcher sm = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__INIT;
	Google__Protobuf__BoolValue no = GOOGLE__PROTOBUF__BOOL_VALUE__INIT;
	ProtobufCMessageUnknownField uf = {
	        .tag = 7, .wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, .len = 1, .data = (uint8_t *)"\0"};

	rt_prefix(&t, "", "c");
	t.m.path_specifier_case = ENVOY__CONFIG__ROUTE__V3__ROUTE_MATCH__PATH_SPECIFIER__NOT_SET;
	refused(&t, "routes[0].match: only prefix, path and safe_regex are supported");
	rt_prefix(&t, "/shop.Ca", "c");
	refused(&t, "a prefix ending inside a name is not supported");
	rt_prefix(&t, "/shop.Cart/Ge", "c"); /* a whole path as a prefix is fine */
	t.m.prefix = (char *)"/shop.Cart/G/x";
	refused(&t, "is not \"\", \"/\", \"/SERVICE/\" or a gRPC path");
	rt_prefix(&t, "", "c");
	t.m.path_specifier_case = ENVOY__CONFIG__ROUTE__V3__ROUTE_MATCH__PATH_SPECIFIER_PATH;
	t.m.path = (char *)"/shop.Cart/";
	refused(&t, "match.path: \"/shop.Cart/\" is not a gRPC path");
	rt_prefix(&t, "", "c");
	t.m.case_sensitive = &no;
	refused(&t, "case_sensitive: false is not supported");
	rt_prefix(&t, "", "c");
	t.m.base.n_unknown_fields = 1;
	t.m.base.unknown_fields = &uf;
	refused(&t, "query_parameters and runtime_fraction are not supported");

	rt_prefix(&t, "", "c");
	rt_header_exact(&t, "x-a", "1");
	t.hs[1] = &t.h;
	t.m.n_headers = 2;
	refused(&t, "2 matchers; maitred's routes test at most one header");
	rt_header_exact(&t, ":path", "1");
	refused(&t, "headers[0].name: empty, too long or a pseudo-header");
	rt_header_exact(&t, "", "1");
	refused(&t, "headers[0].name: empty");
	rt_header_exact(&t, "x-a", "1");
	t.h.invert_match = true;
	refused(&t, "invert_match is not supported");
	t.h.invert_match = false;
	t.h.treat_missing_header_as_empty = true;
	refused(&t, "treat_missing_header_as_empty is not supported");
	t.h.treat_missing_header_as_empty = false;
	t.h.header_match_specifier_case = ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER__NOT_SET;
	refused(&t, "only exact_match, prefix_match, present_match, safe_regex_match and string_match");
	t.h.header_match_specifier_case =
	        ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_PRESENT_MATCH;
	t.h.present_match = false;
	refused(&t, "present_match: false is not supported");
	t.h.header_match_specifier_case = ENVOY__CONFIG__ROUTE__V3__HEADER_MATCHER__HEADER_MATCH_SPECIFIER_STRING_MATCH;
	t.h.string_match = &sm;
	sm.match_pattern_case = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_SUFFIX;
	sm.suffix = (char *)"x";
	refused(&t, "string_match: only exact, prefix and safe_regex are supported");
	sm.match_pattern_case = ENVOY__TYPE__MATCHER__V3__STRING_MATCHER__MATCH_PATTERN_EXACT;
	sm.exact = (char *)"x";
	sm.ignore_case = true;
	refused(&t, "ignore_case is not supported");
}
END_TEST

START_TEST(test_refused_actions)
{
	struct rt t;

	rt_prefix(&t, "", "c");
	t.r.action_case = ENVOY__CONFIG__ROUTE__V3__ROUTE__ACTION__NOT_SET;
	refused(&t, "routes[0]: only a route action is supported");
	rt_prefix(&t, "", "c");
	t.a.cluster_specifier_case = ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__CLUSTER_SPECIFIER__NOT_SET;
	refused(&t, "only cluster and weighted_clusters are supported");
	rt_prefix(&t, "", "");
	refused(&t, "route.cluster: empty");
	rt_prefix(&t, "", "bad\nname");
	refused(&t, "route.cluster: empty, too long or not printable");
	t.r.match = NULL;
	refused(&t, "routes[0].match: required");
}
END_TEST

/* A route table too big for a per-call walk is refused, at the bound. */
START_TEST(test_limits)
{
	static struct rt ts[MTD_XDS_ROUTES_MAX + 1];
	static PbRoute *rs[MTD_XDS_ROUTES_MAX + 1];
	struct mtd_xds_routes *out;

	for (size_t i = 0; i <= MTD_XDS_ROUTES_MAX; i++) {
		rt_prefix(&ts[i], "", "c");
		rs[i] = &ts[i].r;
	}
	ck_assert_int_eq(parse_routes(rs, MTD_XDS_ROUTES_MAX, &out), 0);
	ck_assert_uint_eq(out->n, MTD_XDS_ROUTES_MAX);
	mtd_xds_routes_free(out);
	ck_assert_int_eq(parse_routes(rs, MTD_XDS_ROUTES_MAX + 1, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "more than 1024 routes in all"));

	/* Many names for one host multiply its routes: bounded the same. */
	static char names[MTD_XDS_ROUTES_MAX][16];
	static char *doms[MTD_XDS_ROUTES_MAX];
	PbRouteConfig rc = ENVOY__CONFIG__ROUTE__V3__ROUTE_CONFIGURATION__INIT;
	PbVhost v, *vs[] = {&v};
	for (size_t i = 0; i < MTD_XDS_ROUTES_MAX; i++) {
		snprintf(names[i], sizeof(names[i]), "s%zu", i);
		doms[i] = names[i];
	}
	vhost(&v, doms, MTD_XDS_ROUTES_MAX, rs, 2);
	rc.name = (char *)"rc";
	rc.virtual_hosts = vs;
	rc.n_virtual_hosts = 1;
	ck_assert_int_eq(parse_rc(&rc, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "more than 1024 routes in all"));
	static char *many[5000];
	for (size_t i = 0; i < 5000; i++)
		many[i] = (char *)"*.x";
	vhost(&v, many, 5000, rs, 1);
	ck_assert_int_eq(parse_rc(&rc, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "5000 domains in all (at most 4096)"));
	rc.name = (char *)"";
	v.n_domains = 1;
	ck_assert_int_eq(parse_rc(&rc, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "name: empty"));
}
END_TEST

/* ---- Listeners ------------------------------------------------------------------ */

static Google__Protobuf__Any hcm_any = GOOGLE__PROTOBUF__ANY__INIT, router_any = GOOGLE__PROTOBUF__ANY__INIT;

/* f: the router filter called name (its typed_config an empty Router). */
static void router_filter(PbHttpFilter *f, const char *name)
{
	envoy__extensions__filters__network__http_connection_manager__v3__http_filter__init(f);
	router_any.type_url = (char *)MTD_XDS_TYPE_ROUTER;
	f->name = (char *)name;
	f->config_type_case =
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_FILTER__CONFIG_TYPE_TYPED_CONFIG;
	f->typed_config = &router_any;
}
static uint8_t hcm_buf[1 << 16];

static void pack_hcm(PbHcm *h)
{
	hcm_any.type_url = (char *)MTD_XDS_TYPE_HCM;
	hcm_any.value.len =
	        envoy__extensions__filters__network__http_connection_manager__v3__http_connection_manager__pack(
	                h, hcm_buf);
	hcm_any.value.data = hcm_buf;
}

static int parse_listener(const PbListener *m, struct mtd_xds_listener *out)
{
	size_t n = envoy__config__listener__v3__listener__pack(m, wire);

	why[0] = '\0';
	return mtd_xds_listener_parse(wire, n, out, why, sizeof(why));
}

START_TEST(test_listener)
{
	PbHcm h = ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__INIT;
	Envoy__Extensions__Filters__Network__HttpConnectionManager__V3__Rds rds =
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__RDS__INIT;
	Envoy__Config__Core__V3__ConfigSource cs = ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__INIT;
	Envoy__Config__Core__V3__AggregatedConfigSource ads = ENVOY__CONFIG__CORE__V3__AGGREGATED_CONFIG_SOURCE__INIT;
	PbHttpFilter fault, router, *fs[] = {&fault, &router};
	Envoy__Config__Listener__V3__ApiListener api = ENVOY__CONFIG__LISTENER__V3__API_LISTENER__INIT;
	Envoy__Config__Listener__V3__Filter f = ENVOY__CONFIG__LISTENER__V3__FILTER__INIT, *ffs[] = {&f};
	Envoy__Config__Listener__V3__FilterChain fc = ENVOY__CONFIG__LISTENER__V3__FILTER_CHAIN__INIT, *fcs[] = {&fc};
	PbListener l = ENVOY__CONFIG__LISTENER__V3__LISTENER__INIT;
	struct mtd_xds_listener out;

	envoy__extensions__filters__network__http_connection_manager__v3__http_filter__init(&fault);
	router_filter(&router, "envoy.filters.http.router");
	fault.name = (char *)"envoy.filters.http.fault";
	cs.config_source_specifier_case = ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__CONFIG_SOURCE_SPECIFIER_ADS;
	cs.ads = &ads;
	rds.config_source = &cs;
	rds.route_config_name = (char *)"outbound-routes";
	h.route_specifier_case =
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__ROUTE_SPECIFIER_RDS;
	h.rds = &rds;
	h.http_filters = &fs[1];
	h.n_http_filters = 1;
	pack_hcm(&h);
	api.api_listener = &hcm_any;
	l.name = (char *)"maitred.outbound";
	l.api_listener = &api;
	ck_assert_int_eq(parse_listener(&l, &out), 0);
	ck_assert_str_eq(out.name, "maitred.outbound");
	ck_assert_str_eq(out.rds_name, "outbound-routes");
	ck_assert_ptr_null(out.routes);
	mtd_xds_listener_clear(&out);

	/* A normal listener: its first chain's connection manager, inline routes. */
	struct rt t;
	PbRoute *rs[] = {&t.r};
	PbRouteConfig rc = ENVOY__CONFIG__ROUTE__V3__ROUTE_CONFIGURATION__INIT;
	PbVhost v, *vs[] = {&v};
	char *any[] = {(char *)"*"};
	rt_prefix(&t, "", "cart");
	vhost(&v, any, 1, rs, 1);
	rc.name = (char *)"inline";
	rc.virtual_hosts = vs;
	rc.n_virtual_hosts = 1;
	h.route_specifier_case =
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__ROUTE_SPECIFIER_ROUTE_CONFIG;
	h.route_config = &rc;
	pack_hcm(&h);
	f.name = (char *)"envoy.filters.network.http_connection_manager";
	f.config_type_case = ENVOY__CONFIG__LISTENER__V3__FILTER__CONFIG_TYPE_TYPED_CONFIG;
	f.typed_config = &hcm_any;
	fc.filters = ffs;
	fc.n_filters = 1;
	l.api_listener = NULL;
	l.filter_chains = fcs;
	l.n_filter_chains = 1;
	ck_assert_int_eq(parse_listener(&l, &out), 0);
	ck_assert_ptr_null(out.rds_name);
	ck_assert_str_eq(out.routes->name, "inline");
	ck_assert_str_eq(out.routes->routes[0].act.clusters[0], "cart");
	mtd_xds_listener_clear(&out);

	/* An inline route refused names where. */
	t.a.cluster = (char *)"";
	pack_hcm(&h);
	ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "route_config: virtual_hosts[0].routes[0].route.cluster: empty"));
	ck_assert_ptr_null(out.name);

	/* Filters: the router last; another only when optional. */
	t.a.cluster = (char *)"cart";
	h.http_filters = fs;
	h.n_http_filters = 2;
	pack_hcm(&h);
	ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "http_filters[0] \"envoy.filters.http.fault\": not supported"));
	fault.is_optional = true;
	pack_hcm(&h);
	ck_assert_int_eq(parse_listener(&l, &out), 0);
	mtd_xds_listener_clear(&out);
	h.n_http_filters = 1;
	pack_hcm(&h);
	ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "http_filters: the last must be the router"));
	h.n_http_filters = 0;
	pack_hcm(&h);
	ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "http_filters: empty"));

	/* Where the manager is, and where RDS comes from. */
	h.http_filters = &fs[1];
	h.n_http_filters = 1;
	h.route_specifier_case =
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__ROUTE_SPECIFIER__NOT_SET;
	pack_hcm(&h);
	ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "neither rds nor route_config"));
	h.route_specifier_case =
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__ROUTE_SPECIFIER_RDS;
	h.rds = &rds; /* a union with route_config */
	cs.config_source_specifier_case = ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__CONFIG_SOURCE_SPECIFIER__NOT_SET;
	pack_hcm(&h);
	ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "rds.config_source: must be ads or self"));
	f.typed_config = &router_any;
	ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "filter_chains[0]: no HttpConnectionManager filter"));
	l.n_filter_chains = 0;
	ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "neither api_listener nor filter_chains"));
	api.api_listener = &router_any;
	l.api_listener = &api;
	ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "api_listener: not an HttpConnectionManager"));
	l.name = (char *)"";
	ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "name: empty"));

	/* The names of both kinds, for a NACK. */
	char name[64];
	l.name = (char *)"lis";
	size_t n = envoy__config__listener__v3__listener__pack(&l, wire);
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_LISTENER, wire, n, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "lis");
	n = pack_rc(&rc);
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_ROUTE, wire, n, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "inline");
}
END_TEST

/* ---- the fault filter (A33) -------------------------------------------------- */

typedef Envoy__Extensions__Filters__Http__Fault__V3__HTTPFault PbHttpFault;

/* An HTTPFault packed into any (its bytes in buf), extra appended to
 * the wire (fields maitred's proto leaves out). */
static void pack_fault(const PbHttpFault *f, Google__Protobuf__Any *any, uint8_t *buf, const uint8_t *extra,
                       size_t extra_len)
{
	size_t n = envoy__extensions__filters__http__fault__v3__httpfault__pack(f, buf);
	if (extra_len > 0)
		memcpy(buf + n, extra, extra_len);
	google__protobuf__any__init(any);
	any->type_url = (char *)MTD_XDS_TYPE_FAULT;
	any->value.data = buf;
	any->value.len = n + extra_len;
}

START_TEST(test_fault_filter)
{
	PbHcm h = ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__INIT;
	Envoy__Extensions__Filters__Network__HttpConnectionManager__V3__Rds rds =
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__RDS__INIT;
	Envoy__Config__Core__V3__ConfigSource cs = ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__INIT;
	Envoy__Config__Core__V3__AggregatedConfigSource ads = ENVOY__CONFIG__CORE__V3__AGGREGATED_CONFIG_SOURCE__INIT;
	PbHttpFilter fault, fault2, router, *fs[] = {&fault, &fault2, &router};
	Envoy__Config__Listener__V3__ApiListener api = ENVOY__CONFIG__LISTENER__V3__API_LISTENER__INIT;
	PbListener l = ENVOY__CONFIG__LISTENER__V3__LISTENER__INIT;
	PbHttpFault hf = ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__HTTPFAULT__INIT;
	Envoy__Extensions__Filters__Http__Fault__V3__FaultAbort ab =
	        ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__INIT;
	Envoy__Extensions__Filters__Http__Fault__V3__FaultAbort__HeaderAbort hab =
	        ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__HEADER_ABORT__INIT;
	Envoy__Extensions__Filters__Common__Fault__V3__FaultDelay dl =
	        ENVOY__EXTENSIONS__FILTERS__COMMON__FAULT__V3__FAULT_DELAY__INIT;
	Envoy__Extensions__Filters__Common__Fault__V3__FaultDelay__HeaderDelay hdl =
	        ENVOY__EXTENSIONS__FILTERS__COMMON__FAULT__V3__FAULT_DELAY__HEADER_DELAY__INIT;
	Envoy__Type__V3__FractionalPercent pa = ENVOY__TYPE__V3__FRACTIONAL_PERCENT__INIT,
	                                   pd = ENVOY__TYPE__V3__FRACTIONAL_PERCENT__INIT;
	Google__Protobuf__Duration d200 = GOOGLE__PROTOBUF__DURATION__INIT;
	Google__Protobuf__Any fany, fany2;
	static uint8_t fbuf[512], fbuf2[512];
	struct mtd_xds_listener out;

	envoy__extensions__filters__network__http_connection_manager__v3__http_filter__init(&fault);
	envoy__extensions__filters__network__http_connection_manager__v3__http_filter__init(&fault2);
	router_filter(&router, "router");
	cs.config_source_specifier_case = ENVOY__CONFIG__CORE__V3__CONFIG_SOURCE__CONFIG_SOURCE_SPECIFIER_ADS;
	cs.ads = &ads;
	rds.config_source = &cs;
	rds.route_config_name = (char *)"routes";
	h.route_specifier_case =
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__ROUTE_SPECIFIER_RDS;
	h.rds = &rds;
	h.http_filters = &fs[1];
	h.n_http_filters = 2;
	l.name = (char *)"lis";
	l.api_listener = &api;

	/* abort UNAVAILABLE for 50 in 100 calls; delay 200 ms for 10,000 in a million. */
	ab.error_type_case = ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__ERROR_TYPE_GRPC_STATUS;
	ab.grpc_status = MTD_GRPC_UNAVAILABLE;
	pa.numerator = 50;
	ab.percentage = &pa;
	d200.nanos = 200000000;
	dl.fault_delay_secifier_case =
	        ENVOY__EXTENSIONS__FILTERS__COMMON__FAULT__V3__FAULT_DELAY__FAULT_DELAY_SECIFIER_FIXED_DELAY;
	dl.fixed_delay = &d200;
	pd.numerator = 10000;
	pd.denominator = ENVOY__TYPE__V3__FRACTIONAL_PERCENT__DENOMINATOR_TYPE__MILLION;
	dl.percentage = &pd;
	hf.abort = &ab;
	hf.delay = &dl;
	pack_fault(&hf, &fany, fbuf, NULL, 0);
	fault2.name = (char *)"envoy.filters.http.fault";
	fault2.config_type_case =
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_FILTER__CONFIG_TYPE_TYPED_CONFIG;
	fault2.typed_config = &fany;
	pack_hcm(&h);
	api.api_listener = &hcm_any;
	ck_assert_int_eq(parse_listener(&l, &out), 0);
	ck_assert_str_eq(out.fault.filter, "envoy.filters.http.fault");
	ck_assert(out.fault.fi.abort);
	ck_assert_int_eq(out.fault.fi.abort_status, MTD_GRPC_UNAVAILABLE);
	ck_assert_double_eq_tol(out.fault.fi.abort_percent, 50.0, 1e-9);
	ck_assert(out.fault.fi.delay);
	ck_assert_int_eq(out.fault.fi.delay_ms, 200);
	ck_assert_double_eq_tol(out.fault.fi.delay_percent, 1.0, 1e-9);
	mtd_xds_listener_clear(&out);

	/* An HTTP status as a gRPC client reads it; a numerator over its
	 * denominator is every call; no percentage is none. */
	ab.error_type_case = ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__ERROR_TYPE_HTTP_STATUS;
	ab.http_status = 403;
	pa.numerator = 20000;
	pa.denominator = ENVOY__TYPE__V3__FRACTIONAL_PERCENT__DENOMINATOR_TYPE__TEN_THOUSAND;
	dl.percentage = NULL;
	pack_fault(&hf, &fany, fbuf, NULL, 0);
	pack_hcm(&h);
	ck_assert_int_eq(parse_listener(&l, &out), 0);
	ck_assert_int_eq(out.fault.fi.abort_status, MTD_GRPC_PERMISSION_DENIED);
	ck_assert_double_eq_tol(out.fault.fi.abort_percent, 100.0, 1e-9);
	ck_assert(out.fault.fi.delay);
	ck_assert_double_eq_tol(out.fault.fi.delay_percent, 0.0, 1e-9);
	mtd_xds_listener_clear(&out);
	ab.http_status = 200;
	pack_fault(&hf, &fany, fbuf, NULL, 0);
	pack_hcm(&h);
	ck_assert_int_eq(parse_listener(&l, &out), 0);
	ck_assert_int_eq(out.fault.fi.abort_status, MTD_GRPC_UNKNOWN);
	mtd_xds_listener_clear(&out);

	/* Refused: statuses out of range, faults a header decides, the
	 * fields maitred does not run, two fault filters. */
	struct {
		int what;
		const char *reason;
	} bad[] = {
	        {0, "abort.http_status: 600 is not in 200..599"},
	        {1, "abort.grpc_status: 0 is not a gRPC status other than OK"},
	        {2, "abort.header_abort is not supported"},
	        {3, "delay.header_delay is not supported"},
	        {4, "delay.fixed_delay: out of range"},
	        {5, "max_active_faults is not supported"},
	        {6, "headers is not supported"},
	        {7, "a second fault filter"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		static const uint8_t max_active[] = {0x32, 0x02, 0x08, 0x05}; /* 6: {value: 5} */
		static const uint8_t headers[] = {0x22, 0x03, 0x0a, 0x01, 0x78}; /* 4: {name: "x"} */
		const uint8_t *extra = NULL;
		size_t extra_len = 0;
		ab.error_type_case = ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__ERROR_TYPE_GRPC_STATUS;
		ab.grpc_status = MTD_GRPC_INTERNAL;
		dl.fault_delay_secifier_case =
		        ENVOY__EXTENSIONS__FILTERS__COMMON__FAULT__V3__FAULT_DELAY__FAULT_DELAY_SECIFIER_FIXED_DELAY;
		dl.fixed_delay = &d200;
		h.http_filters = &fs[1];
		h.n_http_filters = 2;
		switch (bad[i].what) {
		case 0:
			ab.error_type_case =
			        ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__ERROR_TYPE_HTTP_STATUS;
			ab.http_status = 600;
			break;
		case 1:
			ab.grpc_status = 0;
			break;
		case 2:
			ab.error_type_case =
			        ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__ERROR_TYPE_HEADER_ABORT;
			ab.header_abort = &hab;
			break;
		case 3:
			dl.fault_delay_secifier_case =
			        ENVOY__EXTENSIONS__FILTERS__COMMON__FAULT__V3__FAULT_DELAY__FAULT_DELAY_SECIFIER_HEADER_DELAY;
			dl.header_delay = &hdl;
			break;
		case 4:
			d200.seconds = 3601;
			break;
		case 5:
			extra = max_active, extra_len = sizeof(max_active);
			break;
		case 6:
			extra = headers, extra_len = sizeof(headers);
			break;
		case 7:
			h.http_filters = fs;
			h.n_http_filters = 3;
			fault.name = (char *)"fault-1";
			fault.config_type_case = fault2.config_type_case;
			fault.typed_config = &fany2;
			break;
		}
		pack_fault(&hf, &fany, fbuf, extra, extra_len);
		pack_fault(&hf, &fany2, fbuf2, NULL, 0);
		pack_hcm(&h);
		ck_assert_int_eq(parse_listener(&l, &out), -EINVAL);
		ck_assert_msg(strstr(why, bad[i].reason) != NULL, "reason \"%s\" lacks \"%s\"", why, bad[i].reason);
		ck_assert_ptr_null(out.fault.filter);
		d200.seconds = 0;
	}
}
END_TEST

/* typed_per_filter_config: a route's own override first, then its
 * virtual host's; a FilterConfig wrapping one, disabled = no fault;
 * other filters' configs skipped; per weighted cluster refused. */
START_TEST(test_fault_overrides)
{
	struct rt a, b;
	PbRoute *rs[] = {&a.r, &b.r};
	PbRouteConfig rc = ENVOY__CONFIG__ROUTE__V3__ROUTE_CONFIGURATION__INIT;
	PbVhost v, *vs[] = {&v};
	char *any[] = {(char *)"*"};
	PbHttpFault hf = ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__HTTPFAULT__INIT;
	Envoy__Extensions__Filters__Http__Fault__V3__FaultAbort ab =
	        ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__INIT;
	Envoy__Type__V3__FractionalPercent pct = ENVOY__TYPE__V3__FRACTIONAL_PERCENT__INIT;
	Google__Protobuf__Any route_any, vhost_any, other_any = GOOGLE__PROTOBUF__ANY__INIT, wrapped_any;
	Envoy__Config__Route__V3__FilterConfig fcfg = ENVOY__CONFIG__ROUTE__V3__FILTER_CONFIG__INIT;
	Envoy__Config__Route__V3__Route__TypedPerFilterConfigEntry re =
	        ENVOY__CONFIG__ROUTE__V3__ROUTE__TYPED_PER_FILTER_CONFIG_ENTRY__INIT, *res[] = {&re};
	Envoy__Config__Route__V3__VirtualHost__TypedPerFilterConfigEntry ve =
	        ENVOY__CONFIG__ROUTE__V3__VIRTUAL_HOST__TYPED_PER_FILTER_CONFIG_ENTRY__INIT,
	                                                                 vo = ENVOY__CONFIG__ROUTE__V3__VIRTUAL_HOST__TYPED_PER_FILTER_CONFIG_ENTRY__INIT,
	                                                                 *ves[] = {&vo, &ve};
	static uint8_t rbuf[256], vbuf[256], wbuf[512];
	struct mtd_xds_routes *out;

	ab.error_type_case = ENVOY__EXTENSIONS__FILTERS__HTTP__FAULT__V3__FAULT_ABORT__ERROR_TYPE_GRPC_STATUS;
	pct.numerator = 100;
	ab.percentage = &pct;
	hf.abort = &ab;
	ab.grpc_status = MTD_GRPC_ABORTED;
	pack_fault(&hf, &route_any, rbuf, NULL, 0);
	ab.grpc_status = MTD_GRPC_DATA_LOSS;
	pack_fault(&hf, &vhost_any, vbuf, NULL, 0);
	other_any.type_url = (char *)"type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute";
	rt_prefix(&a, "/x.Y/", "c1");
	rt_prefix(&b, "", "c2");
	re.key = (char *)"fault";
	re.value = &route_any;
	a.r.typed_per_filter_config = res;
	a.r.n_typed_per_filter_config = 1;
	ve.key = (char *)"fault";
	ve.value = &vhost_any;
	vo.key = (char *)"rbac";
	vo.value = &other_any;
	vhost(&v, any, 1, rs, 2);
	v.typed_per_filter_config = ves;
	v.n_typed_per_filter_config = 2;
	rc.name = (char *)"rc";
	rc.virtual_hosts = vs;
	rc.n_virtual_hosts = 1;
	ck_assert_int_eq(parse_rc(&rc, &out), 0);
	ck_assert_uint_eq(out->routes[0].n_faults, 1);
	ck_assert_str_eq(out->routes[0].faults[0].filter, "fault");
	ck_assert_int_eq(out->routes[0].faults[0].fi.abort_status, MTD_GRPC_ABORTED);
	ck_assert_uint_eq(out->routes[1].n_faults, 1);
	ck_assert_int_eq(out->routes[1].faults[0].fi.abort_status, MTD_GRPC_DATA_LOSS);
	ck_assert_double_eq_tol(out->routes[1].faults[0].fi.abort_percent, 100.0, 1e-9);
	mtd_xds_routes_free(out);

	/* A FilterConfig: wrapping an HTTPFault, or disabled (no fault). */
	fcfg.config = &route_any;
	size_t n = envoy__config__route__v3__filter_config__pack(&fcfg, wbuf);
	google__protobuf__any__init(&wrapped_any);
	wrapped_any.type_url = (char *)MTD_XDS_TYPE_FILTER_CONFIG;
	wrapped_any.value.data = wbuf;
	wrapped_any.value.len = n;
	ve.value = &wrapped_any;
	ck_assert_int_eq(parse_rc(&rc, &out), 0);
	ck_assert_int_eq(out->routes[1].faults[0].fi.abort_status, MTD_GRPC_ABORTED);
	mtd_xds_routes_free(out);
	fcfg.config = NULL;
	fcfg.disabled = true;
	wrapped_any.value.len = envoy__config__route__v3__filter_config__pack(&fcfg, wbuf);
	ck_assert_int_eq(parse_rc(&rc, &out), 0);
	ck_assert_uint_eq(out->routes[1].n_faults, 1);
	ck_assert(!out->routes[1].faults[0].fi.abort && !out->routes[1].faults[0].fi.delay);
	mtd_xds_routes_free(out);

	/* A bad override names where it is. */
	ab.grpc_status = 17;
	pack_fault(&hf, &route_any, rbuf, NULL, 0);
	ck_assert_int_eq(parse_rc(&rc, &out), -EINVAL);
	ck_assert_msg(strstr(why, "virtual_hosts[0].routes[0].typed_per_filter_config[\"fault\"].abort.grpc_status") !=
	                      NULL,
	              "%s", why);

	/* Per weighted cluster: refused. */
	ab.grpc_status = MTD_GRPC_ABORTED;
	pack_fault(&hf, &route_any, rbuf, NULL, 0);
	Envoy__Config__Route__V3__WeightedCluster wc = ENVOY__CONFIG__ROUTE__V3__WEIGHTED_CLUSTER__INIT;
	Envoy__Config__Route__V3__WeightedCluster__ClusterWeight cw =
	        ENVOY__CONFIG__ROUTE__V3__WEIGHTED_CLUSTER__CLUSTER_WEIGHT__INIT, *cws[] = {&cw};
	Envoy__Config__Route__V3__WeightedCluster__ClusterWeight__TypedPerFilterConfigEntry ce =
	        ENVOY__CONFIG__ROUTE__V3__WEIGHTED_CLUSTER__CLUSTER_WEIGHT__TYPED_PER_FILTER_CONFIG_ENTRY__INIT,
	        *ces[] = {&ce};
	Google__Protobuf__UInt32Value w1 = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
	w1.value = 1;
	cw.name = (char *)"c1";
	cw.weight = &w1;
	ce.key = (char *)"fault";
	ce.value = &route_any;
	cw.typed_per_filter_config = ces;
	cw.n_typed_per_filter_config = 1;
	wc.clusters = cws;
	wc.n_clusters = 1;
	b.a.cluster_specifier_case = ENVOY__CONFIG__ROUTE__V3__ROUTE_ACTION__CLUSTER_SPECIFIER_WEIGHTED_CLUSTERS;
	b.a.weighted_clusters = &wc;
	ck_assert_int_eq(parse_rc(&rc, &out), -EINVAL);
	ck_assert_msg(strstr(why, "a fault override per cluster is not supported") != NULL, "%s", why);
}
END_TEST

/* Bytes that are not a resource, or a resource cut anywhere: refused or
 * translated, never a crash (ASan). */
START_TEST(test_garbage)
{
	struct rt a, b;
	PbRoute *rs[] = {&a.r, &b.r};
	PbRouteConfig rc = ENVOY__CONFIG__ROUTE__V3__ROUTE_CONFIGURATION__INIT;
	PbVhost v, *vs[] = {&v};
	char *any[] = {(char *)"*"};
	static uint8_t full[4096];
	struct mtd_xds_routes *out;
	struct mtd_xds_listener l;

	rt_prefix(&a, "/x.Y/", "c1");
	rt_header_exact(&a, "x-a", "1");
	rt_prefix(&b, "", "c2");
	vhost(&v, any, 1, rs, 2);
	rc.name = (char *)"rc";
	rc.virtual_hosts = vs;
	rc.n_virtual_hosts = 1;
	size_t n = envoy__config__route__v3__route_configuration__pack(&rc, full);
	for (size_t cut = 0; cut <= n; cut++) {
		int r = mtd_xds_routes_parse(full, cut, NULL, &out, why, sizeof(why));
		ck_assert(r == 0 || r == -EINVAL);
		mtd_xds_routes_free(out);
		r = mtd_xds_listener_parse(full, cut, &l, why, sizeof(why));
		ck_assert(r == 0 || r == -EINVAL);
		mtd_xds_listener_clear(&l);
	}
	for (size_t i = 0; i < n; i++) {
		full[i] ^= 0x5a;
		int r = mtd_xds_routes_parse(full, n, NULL, &out, why, sizeof(why));
		ck_assert(r == 0 || r == -EINVAL);
		mtd_xds_routes_free(out);
		full[i] ^= 0x5a;
	}
}
END_TEST

/* Every allocation failing in turn: -ENOMEM or refused, nothing kept,
 * nothing leaked (ASan). */
START_TEST(test_failmalloc)
{
	struct rt a, b;
	PbRoute *rs[] = {&a.r, &b.r};
	PbRouteConfig rc = ENVOY__CONFIG__ROUTE__V3__ROUTE_CONFIGURATION__INIT;
	PbVhost v1, v2, *vs[] = {&v1, &v2};
	char *named[] = {(char *)"x.Y"}, *any[] = {(char *)"*"};
	Envoy__Config__Route__V3__RetryPolicy rp = ENVOY__CONFIG__ROUTE__V3__RETRY_POLICY__INIT;
	static uint8_t buf[4096];
	bool done = false;

	rt_prefix(&a, "/x.Y/Z", "c1");
	rt_header_exact(&a, "X-A", "1");
	rp.retry_on = (char *)"unavailable";
	a.a.retry_policy = &rp;
	Envoy__Type__Matcher__V3__RegexMatcher rm;
	rt_regex(&b, &rm, "/x\\.Y/.*", "c2"); /* its program freed with its route */
	vhost(&v1, named, 1, rs, 2);
	vhost(&v2, any, 1, rs, 2);
	rc.name = (char *)"rc";
	rc.virtual_hosts = vs;
	rc.n_virtual_hosts = 2;
	size_t n = envoy__config__route__v3__route_configuration__pack(&rc, buf);
	for (unsigned long k = 1; k < 10000 && !done; k++) {
		struct mtd_xds_routes *out = (void *)1;
		mtd_cfg__fail_alloc_after(k);
		int r = mtd_xds_routes_parse(buf, n, NULL, &out, why, sizeof(why));
		done = !mtd_cfg__alloc_failed();
		mtd_cfg__fail_alloc_after(0);
		if (done) {
			ck_assert_int_eq(r, 0);
			ck_assert_uint_eq(out->n, 5); /* x.Y's two, its rest, "*"'s two */
		} else {
			ck_assert(r == -ENOMEM || r == -EINVAL);
			ck_assert_ptr_null(out);
		}
		mtd_xds_routes_free(out);
	}
	ck_assert(done);
}
END_TEST

/* buf[0..n) with every '#' made a NUL: a string protobuf-c cuts there. */
static void hash_to_nul(uint8_t *buf, size_t n)
{
	for (uint8_t *p = buf; (p = memchr(p, '#', (size_t)(buf + n - p))) != NULL;)
		*p++ = '\0';
}

/* The refusal of the routes of two hosts, domains d0 and d1, routes
 * r[0] and r[1], with every '#' in them a NUL (a length of 35 would be
 * one too: the refusal would not name the field), through RDS, and inline
 * in the Listener api.shop, whose refusal names the same field in its
 * route_config. RDS's is returned. */
static const char *nul_refusal(char *d0, char *d1, struct rt *r)
{
	static char got[sizeof(why)];
	PbRouteConfig rc = ENVOY__CONFIG__ROUTE__V3__ROUTE_CONFIGURATION__INIT;
	PbRoute *rs[2][1] = {{&r[0].r}, {&r[1].r}};
	char *doms[2][1] = {{d0}, {d1}};
	PbVhost v[2], *vs[] = {&v[0], &v[1]};
	struct mtd_xds_routes *out = (void *)1;
	struct mtd_xds_listener l;
	char inline_why[sizeof(got) + 64];
	const char *field = "a NUL in string field ";

	for (int i = 0; i < 2; i++)
		vhost(&v[i], doms[i], 1, rs[i], 1);
	rc.name = (char *)"rc";
	rc.virtual_hosts = vs;
	rc.n_virtual_hosts = 2;
	size_t n = pack_rc(&rc);
	hash_to_nul(wire, n);
	ck_assert_int_eq(mtd_xds_routes_parse(wire, n, "api.shop", &out, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_null(out);
	snprintf(got, sizeof(got), "%s", why);
	ck_assert_msg(strncmp(got, field, strlen(field)) == 0, "%s", got);

	PbHcm h = ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__INIT;
	PbHttpFilter router, *fs[] = {&router};
	Envoy__Config__Listener__V3__ApiListener api = ENVOY__CONFIG__LISTENER__V3__API_LISTENER__INIT;
	PbListener pl = ENVOY__CONFIG__LISTENER__V3__LISTENER__INIT;
	router_filter(&router, "envoy.filters.http.router");
	h.http_filters = fs;
	h.n_http_filters = 1;
	h.route_specifier_case =
	        ENVOY__EXTENSIONS__FILTERS__NETWORK__HTTP_CONNECTION_MANAGER__V3__HTTP_CONNECTION_MANAGER__ROUTE_SPECIFIER_ROUTE_CONFIG;
	h.route_config = &rc;
	pack_hcm(&h);
	hash_to_nul(hcm_buf, hcm_any.value.len);
	api.api_listener = &hcm_any;
	pl.name = (char *)"api.shop";
	pl.api_listener = &api;
	n = envoy__config__listener__v3__listener__pack(&pl, wire);
	ck_assert_int_eq(mtd_xds_listener_parse(wire, n, &l, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_null(l.routes);
	snprintf(inline_why, sizeof(inline_why), "the HttpConnectionManager: %sroute_config.%s", field,
	         got + strlen(field));
	ck_assert_str_eq(why, inline_why);
	return got;
}

/* A string with a NUL inside refuses the whole RouteConfiguration (or
 * Listener), naming the field: protobuf-c cuts it at the NUL, and the
 * rest would alias another name ("*\0x" the host "*", "c\0x" the
 * cluster "c", "/x.Other/\0" the prefix "/x.Other/"). */
START_TEST(test_a_nul_in_a_string_refuses_the_routes)
{
	struct rt r[2];
	struct mtd_xds_listener l;
	char name[64];

	rt_prefix(&r[0], "", "c0");
	rt_prefix(&r[1], "", "c1");
	ck_assert_str_eq(nul_refusal((char *)"*#x", (char *)"other.*", r),
	                 "a NUL in string field virtual_hosts[0].domains[0]");
	ck_assert_str_eq(nul_refusal((char *)"*", (char *)"api.shop#x", r),
	                 "a NUL in string field virtual_hosts[1].domains[0]");
	rt_prefix(&r[1], "/x.Other/M#", "c1");
	ck_assert_str_eq(nul_refusal((char *)"*", (char *)"x.Other", r),
	                 "a NUL in string field virtual_hosts[1].routes[0].match.prefix");
	rt_prefix(&r[1], "", "c#1");
	ck_assert_str_eq(nul_refusal((char *)"*", (char *)"x.Other", r),
	                 "a NUL in string field virtual_hosts[1].routes[0].route.cluster");
	rt_prefix(&r[1], "", "c1");
	rt_header_exact(&r[1], "x-user", "a#b");
	ck_assert_str_eq(nul_refusal((char *)"*", (char *)"x.Other", r),
	                 "a NUL in string field virtual_hosts[1].routes[0].match.headers[0].exact_match");

	/* A Listener's name: refused, and not named "api" in the NACK. */
	PbListener pl = ENVOY__CONFIG__LISTENER__V3__LISTENER__INIT;
	pl.name = (char *)"api#shop";
	size_t n = envoy__config__listener__v3__listener__pack(&pl, wire);
	hash_to_nul(wire, n);
	ck_assert_int_eq(mtd_xds_listener_parse(wire, n, &l, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "a NUL in string field name");
	ck_assert_int_eq(mtd_xds_resource_name(MTD_XDS_TYPE_LISTENER, wire, n, name, sizeof(name)), -EINVAL);
}
END_TEST

/* How deep messages of type d nest (0: no message field), -1 when d
 * holds itself somewhere; stack[0..n) the types it is inside. */
static int nest_depth(const ProtobufCMessageDescriptor *d, const ProtobufCMessageDescriptor **stack, int n)
{
	int deepest = 0;

	for (int i = 0; i < n; i++)
		if (stack[i] == d)
			return -1;
	if (n == MTD_XDS_NEST_MAX)
		return MTD_XDS_NEST_MAX; /* too deep already */
	stack[n] = d;
	for (unsigned f = 0; f < d->n_fields; f++) {
		if (d->fields[f].type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		int k = nest_depth(d->fields[f].descriptor, stack, n + 1);
		if (k < 0)
			return -1;
		if (k + 1 > deepest)
			deepest = k + 1;
	}
	return deepest;
}

/* The guard's bound on nesting (xds-int.h) refuses no resource
 * protobuf-c decodes: no type lib/xds unpacks holds itself, and none
 * nests as deep as MTD_XDS_NEST_MAX. */
START_TEST(test_no_resource_nests_past_the_guards_bound)
{
	static const ProtobufCMessageDescriptor *const types[] = {
	        &envoy__config__cluster__v3__cluster__descriptor,
	        &envoy__extensions__transport_sockets__tls__v3__upstream_tls_context__descriptor,
	        &envoy__config__endpoint__v3__cluster_load_assignment__descriptor,
	        &envoy__config__route__v3__route_configuration__descriptor,
	        &envoy__config__listener__v3__listener__descriptor,
	        &envoy__extensions__filters__network__http_connection_manager__v3__http_connection_manager__descriptor,
	        &envoy__extensions__filters__http__fault__v3__httpfault__descriptor,
	        &envoy__config__route__v3__filter_config__descriptor,
	};
	const ProtobufCMessageDescriptor *stack[MTD_XDS_NEST_MAX + 1];

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		int k = nest_depth(types[i], stack, 0);
		ck_assert_msg(k >= 0 && k < MTD_XDS_NEST_MAX, "%s nests %d deep", types[i]->name, k);
	}
}
END_TEST

static Suite *xds_route_suite(void)
{
	Suite *s = suite_create("xds_route");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_header_route_and_default);
	tcase_add_test(tc, test_regex_matches);
	tcase_add_test(tc, test_refused_regexes);
	tcase_add_test(tc, test_header_forms);
	tcase_add_test(tc, test_paths_and_hosts);
	tcase_add_test(tc, test_the_listener_name_selects_a_host_as_a_clients_authority);
	tcase_add_test(tc, test_a_wildcard_first_or_last_reads_the_rest_as_text);
	tcase_add_test(tc, test_a_nul_in_a_string_refuses_the_routes);
	tcase_add_test(tc, test_no_resource_nests_past_the_guards_bound);
	tcase_add_test(tc, test_weighted_clusters);
	tcase_add_test(tc, test_timeouts_retry_hash);
	tcase_add_test(tc, test_refused_matches);
	tcase_add_test(tc, test_refused_actions);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_listener);
	tcase_add_test(tc, test_fault_filter);
	tcase_add_test(tc, test_fault_overrides);
	tcase_add_test(tc, test_garbage);
	tcase_add_test(tc, test_failmalloc);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(xds_route_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
