/* Unit tests of lib/config/: the proto3-JSON loader, validation, defaults,
 * the embedded default and deploy/maitred.example.yaml. Every error class
 * is checked with its exact FILE:LINE:COL and field path. */
#include <config.h> /* autoconf */

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "fault/fault.h"
#include "health/outlier.h"
#include "config/config-int.h"
#include "lb/lb.h"
#include "pbwire/pbwire.h"

#define EP "    endpoints: [{address: \"127.0.0.1:50051\"}]\n"

static const char *srcdir(void)
{
	const char *s = getenv("MAITRED_SRCDIR");

	return s != NULL ? s : ".";
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static struct mtd_cfg *load_ok(const char *yaml)
{
	struct mtd_cfg *cfg = NULL;
	struct mtd_cfg_errors errs = {0};
	int rc = mtd_cfg_load_buffer("t.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_AUTO, &cfg, &errs);

	for (size_t i = 0; i < errs.n; i++)
		fprintf(stderr, "unexpected: %s\n", errs.msgs[i]);
	ck_assert_int_eq(rc, 0);
	ck_assert_ptr_nonnull(cfg);
	ck_assert_uint_eq(errs.n, 0);
	mtd_cfg_errors_clear(&errs);
	return cfg;
}

/* want: the exact message, where each '*' stands for any run of
 * characters (a trailing one: a prefix). */
static bool matches(const char *msg, const char *want)
{
	const char *star = strchr(want, '*');

	if (star == NULL)
		return strcmp(msg, want) == 0;
	size_t n = (size_t)(star - want);
	if (strncmp(msg, want, n) != 0)
		return false;
	for (const char *m = msg + n;; m++) {
		if (matches(m, star + 1))
			return true;
		if (*m == '\0')
			return false;
	}
}

static void expect_errors_fmt(const char *name, const void *data, size_t len, enum mtd_cfg_format fmt,
                              const char *const *want)
{
	struct mtd_cfg *cfg = (struct mtd_cfg *)1;
	struct mtd_cfg_errors errs = {0};
	int rc = mtd_cfg_load_buffer(name, data, len, fmt, &cfg, &errs);

	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_ptr_null(cfg);
	for (; *want != NULL; want++) {
		bool found = false;

		for (size_t i = 0; i < errs.n && !found; i++)
			found = matches(errs.msgs[i], *want);
		if (!found) {
			for (size_t i = 0; i < errs.n; i++)
				fprintf(stderr, "  got: %s\n", errs.msgs[i]);
			ck_abort_msg("missing error: %s", *want);
		}
	}
	mtd_cfg_errors_clear(&errs);
	ck_assert_uint_eq(errs.n, 0);
}

static void expect_error(const char *yaml, const char *want)
{
	const char *const list[] = {want, NULL};

	expect_errors_fmt("t.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_YAML, list);
}

/* Exactly one error, this one: a rule checked twice would say it twice. */
static void expect_only(const char *yaml, const char *want)
{
	struct mtd_cfg *cfg = (struct mtd_cfg *)1;
	struct mtd_cfg_errors errs = {0};
	int rc = mtd_cfg_load_buffer("t.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_YAML, &cfg, &errs);

	for (size_t i = 0; i < errs.n; i++)
		if (errs.n != 1 || !matches(errs.msgs[i], want))
			fprintf(stderr, "  got: %s\n", errs.msgs[i]);
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_ptr_null(cfg);
	ck_assert_uint_eq(errs.n, 1);
	ck_assert_msg(matches(errs.msgs[0], want), "want: %s", want);
	mtd_cfg_errors_clear(&errs);
}

/* What sidecar/control/runtime.c does with a loaded config: one picker per service
 * and per method over the service's endpoints. A config that loads must
 * never make that fail (only memory may). */
static void assert_pickers_build(const struct mtd_cfg *cfg)
{
	for (size_t s = 0; s < cfg->n_services; s++) {
		const struct mtd_cfg_service *svc = &cfg->services[s];
		struct mtd_lb_endpoint *eps = calloc(svc->local->n_endpoints, sizeof(*eps));
		struct mtd_lb_stats *st = calloc(svc->local->n_endpoints, sizeof(*st));
		struct mtd_lb_picker *p;

		ck_assert_ptr_nonnull(eps);
		ck_assert_ptr_nonnull(st);
		for (size_t i = 0; i < svc->local->n_endpoints; i++)
			eps[i] = (struct mtd_lb_endpoint){
			        .id = svc->local->endpoints[i].addr.text,
			        .weight = svc->local->endpoints[i].weight,
			        .stats = &st[i],
			};
		p = mtd_lb_picker_new(&svc->lb, eps, svc->local->n_endpoints, NULL);
		ck_assert_msg(p != NULL, "service %s: no picker", svc->local->name);
		mtd_lb_picker_free(p);
		for (size_t m = 0; m < svc->n_methods; m++) {
			p = mtd_lb_picker_new(&svc->methods[m].lb, eps, svc->local->n_endpoints, NULL);
			ck_assert_msg(p != NULL, "method %s: no picker", svc->methods[m].name);
			mtd_lb_picker_free(p);
		}
		free(st);
		free(eps);
	}
}

/* ---- error classes ----------------------------------------------------- */

START_TEST(err_unknown_key)
{
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    lb:\n"
	             "      polcy: ROUND_ROBIN\n" EP,
	             "t.yaml:4:7: services[0].lb.polcy: unknown field (expected one "
	             "of policy, choice_count, active_request_bias, ring_points, "
	             "table_size, bounded_load_factor, decay, hot_keys, orca)");
	{
		static const char json[] = "{\n  \"workers\": 1,\n  \"listn\": \"x\"\n}";
		/* '*': other helpers' top-level keys follow (field order) */
		static const char *const want[] = {"t.json:3:3: listn: unknown field (expected one of listen, admin, "
		                                   "workers, services, downstream, drain_timeout*",
		                                   NULL};

		expect_errors_fmt("t.json", json, strlen(json), MTD_CFG_FORMAT_AUTO, want);
	}
	expect_error("listn: \"127.0.0.1:1\"\n", "t.yaml:1:1: listn: unknown field (expected one of listen, "
	                                         "admin, workers, services, downstream, drain_timeout*");
}
END_TEST

START_TEST(err_duplicate_key)
{
	expect_error("workers: 1\nworkers: 2\n", "t.yaml:2:1: workers: duplicate key (first at line 1)");
	/* snake_case and lowerCamel name the same field */
	expect_error("drain_timeout: 1s\ndrainTimeout: 2s\n",
	             "t.yaml:2:1: drain_timeout: duplicate key (first at line 1)");
}
END_TEST

START_TEST(err_wrong_type)
{
	expect_error("workers: many\n", "t.yaml:1:10: workers: expected an integer (uint32), got \"many\"");
	expect_error("listen: [a]\n", "t.yaml:1:9: listen: expected a scalar, got a list");
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    endpoints: {address: \"127.0.0.1:50051\"}\n",
	             "t.yaml:3:16: services[0].endpoints: expected a list, got a mapping");
	expect_error("services: [{name: \"*\", tls: yes-please}]\n",
	             "t.yaml:1:29: services[0].tls: expected a mapping (Tls), got a scalar");
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    hash_key: {header: x, on_missing: FAIL}\n"
	             "    lb: {policy: CONSISTENT_HASH, bounded_load_factor: high}\n" EP,
	             "t.yaml:4:56: services[0].lb.bounded_load_factor: expected a "
	             "number, got \"high\"");
}
END_TEST

START_TEST(err_bad_enum)
{
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    lb:\n"
	             "      policy: ROUND_ROBBIN\n" EP,
	             "t.yaml:4:15: services[0].lb.policy: unknown value \"ROUND_ROBBIN\" "
	             "(expected one of POLICY_UNSPECIFIED, RANDOM, WEIGHTED_RANDOM, "
	             "ROUND_ROBIN, *");
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    lb: {policy: 99}\n" EP,
	             "t.yaml:3:18: services[0].lb.policy: unknown value \"99\" *");
}
END_TEST

START_TEST(err_bad_duration)
{
	expect_error("drain_timeout: 10\n", "t.yaml:1:16: drain_timeout: bad duration \"10\": missing unit "
	                                    "(e.g. \"10s\", \"250ms\")");
	expect_error("drain_timeout: 10parsecs\n", "t.yaml:1:16: drain_timeout: bad duration \"10parsecs\": unknown "
	                                           "unit (use h, m, s, ms, us or ns)");
	expect_error("drain_timeout: -1s\n", "t.yaml:1:16: drain_timeout: must not be negative");
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    upstream:\n"
	             "      connect_timeout: fast\n" EP,
	             "t.yaml:4:24: services[0].upstream.connect_timeout: bad duration "
	             "\"fast\": expected a number followed by a unit, e.g. \"10s\", "
	             "\"250ms\"");
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    upstream: {connect_timeout: 0s}\n" EP,
	             "t.yaml:3:33: services[0].upstream.connect_timeout: must be at "
	             "least 1ms");
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    upstream: {write_timeout: 0s}\n" EP,
	             "t.yaml:3:31: services[0].upstream.write_timeout: must be at "
	             "least 1ms");
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    upstream: {max_connection_age: 0s}\n" EP,
	             "t.yaml:3:36: services[0].upstream.max_connection_age: must be at "
	             "least 1ms");
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    upstream: {max_connection_age: 500ms}\n" EP,
	             "t.yaml:3:36: services[0].upstream.max_connection_age: must be at "
	             "least 1s (connections are checked once a second), got 500 ms");
}
END_TEST

START_TEST(err_out_of_range)
{
	expect_error("workers: 4294967296\n", "t.yaml:1:10: workers: value 4294967296 out of range for uint32 "
	                                      "(0..4294967295)");
	expect_error("workers: -1\n", "t.yaml:1:10: workers: negative value -1 for an unsigned field (uint32)");
	expect_error("workers: 1.5\n", "t.yaml:1:10: workers: expected an integer (uint32), got \"1.5\"");
	/* Fraction and exponent forms: whole is whole, however written. */
	expect_error("workers: 2.5e0\n", "t.yaml:1:10: workers: expected an integer (uint32), got \"2.5e0\"");
	expect_error("workers: 1e20\n", "t.yaml:1:10: workers: value 1e20 out of range for uint32 (0..4294967295)");
	expect_error("workers: -4e19\n", "t.yaml:1:10: workers: value -4e19 out of range for uint32 (0..4294967295)");
	{
		struct mtd_cfg *cfg = load_ok("workers: 3.0\nservices:\n  - name: a.B\n" EP);
		ck_assert_uint_eq(cfg->workers, 3);
		mtd_cfg_free(cfg);
		cfg = load_ok("workers: 2e1\nservices:\n  - name: a.B\n" EP);
		ck_assert_uint_eq(cfg->workers, 20);
		mtd_cfg_free(cfg);
	}
	expect_error("workers: 2000\n", "t.yaml:1:10: workers: must be at most 1024 (0 = one per CPU)");
	expect_error("downstream:\n"
	             "  initial_window_size: 2147483648\n",
	             "t.yaml:2:24: downstream.initial_window_size: must be at most "
	             "2147483647, got 2147483648");
	expect_error("downstream: {max_connections: 16777217}\n",
	             "t.yaml:1:31: downstream.max_connections: must be at most 16777216, got 16777217");
	expect_error("downstream: {preface_timeout: 0s}\n",
	             "t.yaml:1:31: downstream.preface_timeout: must be at least 1ms");
	expect_error("downstream: {header_timeout: 0s}\n",
	             "t.yaml:1:30: downstream.header_timeout: must be at least 1ms");
	expect_error("downstream: {write_timeout: 0s}\n",
	             "t.yaml:1:29: downstream.write_timeout: must be at least 1ms");
	expect_error("downstream: {initial_window_size: 65536, max_buffered_response: 1000}\n",
	             "t.yaml:1:65: downstream.max_buffered_response: must be at least initial_window_size "
	             "(65536), got 1000");
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    endpoints:\n"
	             "      - address: \"127.0.0.1:50051\"\n"
	             "        weight: 4294967295\n"
	             "    lb: {policy: WEIGHTED_RANDOM}\n",
	             "t.yaml:5:17: services[0].endpoints[0].weight: must be at most "
	             "2147483647");
}
END_TEST

START_TEST(err_bad_address)
{
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    endpoints:\n"
	             "      - address: \"127.0.0.1\"\n",
	             "t.yaml:4:18: services[0].endpoints[0].address: bad address "
	             "\"127.0.0.1\": expected \"HOST:PORT\"");
	expect_error("listen: \"::1:50051\"\n", "t.yaml:1:9: listen: bad address \"::1:50051\": an IPv6 address "
	                                        "must be in brackets, e.g. \"[::1]:50051\"");
	expect_error("listen: \"127.0.0.1:0\"\n", "t.yaml:1:9: listen: bad address \"127.0.0.1:0\": port must be "
	                                          "a number in 1..65535");
	expect_error("listen: \"127.0.0.1:65536\"\n", "t.yaml:1:9: listen: bad address \"127.0.0.1:65536\": port must "
	                                              "be a number in 1..65535");
	expect_error("admin: \"[::1:80\"\n", "t.yaml:1:8: admin: bad address \"[::1:80\": missing ']' after "
	                                     "the IPv6 address");
	expect_error("listen: \"127.0.0.1:9\"\nadmin: \"127.0.0.1:9\"\n",
	             "t.yaml:2:8: admin: \"127.0.0.1:9\" is also the listen address");
	{
		/* RFC 1035: 253 characters as text; also bounds a ring's ids */
		char yaml[400], host[260], want[400];

		memset(host, 'a', 254);
		host[254] = '\0';
		snprintf(yaml, sizeof(yaml),
		         "listen: \"%s:80\"\n"
		         "services:\n  - name: a.B\n" EP,
		         host);
		snprintf(want, sizeof(want),
		         "t.yaml:1:9: listen: bad address "
		         "\"%s:80\": host name longer than 253 characters "
		         "(RFC 1035 §2.3.4: 255 octets)",
		         host);
		expect_only(yaml, want);
		/* the longest name passes the syntax (no DNS: numeric only) */
		host[253] = '\0';
		snprintf(yaml, sizeof(yaml),
		         "listen: \"%s:80\"\n"
		         "services:\n  - name: a.B\n" EP,
		         host);
		mtd_cfg__numeric_hosts_only(true);
		expect_error(yaml, "t.yaml:1:9: listen: cannot resolve *");
		mtd_cfg__numeric_hosts_only(false);
	}
	expect_error("admin: \"[nope]:80\"\n", "t.yaml:1:8: admin: bad address \"[nope]:80\": not an IPv6 "
	                                       "address inside [ ]");
}
END_TEST

START_TEST(err_unresolvable)
{
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    endpoints:\n"
	             "      - address: \"nosuch.invalid:50051\"\n",
	             "t.yaml:4:18: services[0].endpoints[0].address: cannot resolve "
	             "\"nosuch.invalid\": *");
}
END_TEST

START_TEST(err_duplicate_service)
{
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    endpoints: [{address: \"127.0.0.1:1\"}]\n"
	             "  - name: a.B\n"
	             "    endpoints: [{address: \"127.0.0.1:1\"}]\n",
	             "t.yaml:4:11: services[1].name: duplicate service \"a.B\" "
	             "(also services[0])");
}
END_TEST

/* Each later one names the first of its name, in the services' order;
 * other names between them are not duplicates. */
START_TEST(err_duplicate_services_many)
{
	const char *yaml = "services:\n"
	                   "  - {name: c.D, endpoints: [{address: \"127.0.0.1:1\"}]}\n"
	                   "  - {name: a.B, endpoints: [{address: \"127.0.0.1:1\"}]}\n"
	                   "  - {name: e.F, endpoints: [{address: \"127.0.0.1:1\"}]}\n"
	                   "  - {name: a.B, endpoints: [{address: \"127.0.0.1:1\"}]}\n"
	                   "  - {name: c.D, endpoints: [{address: \"127.0.0.1:1\"}]}\n"
	                   "  - {name: a.B, endpoints: [{address: \"127.0.0.1:1\"}]}\n";
	struct mtd_cfg *cfg = NULL;
	struct mtd_cfg_errors errs = {0};

	ck_assert_int_eq(mtd_cfg_load_buffer("t.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_AUTO, &cfg, &errs), -EINVAL);
	ck_assert_uint_eq(errs.n, 3);
	ck_assert_str_eq(errs.msgs[0], "t.yaml:5:12: services[3].name: duplicate service \"a.B\" (also services[1])");
	ck_assert_str_eq(errs.msgs[1], "t.yaml:6:12: services[4].name: duplicate service \"c.D\" (also services[0])");
	ck_assert_str_eq(errs.msgs[2], "t.yaml:7:12: services[5].name: duplicate service \"a.B\" (also services[1])");
	mtd_cfg_errors_clear(&errs);
}
END_TEST

START_TEST(err_two_catch_all)
{
	expect_error("services:\n"
	             "  - name: \"*\"\n"
	             "    endpoints: [{address: \"127.0.0.1:1\"}]\n"
	             "  - name: \"*\"\n"
	             "    endpoints: [{address: \"127.0.0.1:2\"}]\n",
	             "t.yaml:4:11: services[1].name: a second catch-all \"*\" "
	             "(the first is services[0])");
}
END_TEST

START_TEST(err_bad_names)
{
	expect_error("services:\n"
	             "  - name: \"pkg..Svc\"\n" EP,
	             "t.yaml:2:11: services[0].name: \"pkg..Svc\" is not a "
	             "fully-qualified gRPC service name (\"package.Service\") or \"*\", nor an entry that routes or "
	             "a mirror reach");
	expect_error("services:\n"
	             "  - name: \"/pkg.Svc/\"\n" EP,
	             "t.yaml:2:11: services[0].name: \"/pkg.Svc/\" is not a *");
	expect_error("services:\n"
	             "  - endpoints: [{address: \"127.0.0.1:1\"}]\n",
	             "t.yaml:2:5: services[0].name: is required (\"package.Service\" "
	             "or \"*\")");
	expect_error("services:\n"
	             "  - name: a.B\n" EP "    methods: [{name: \"Get/Cart\"}]\n",
	             "t.yaml:4:22: services[0].methods[0].name: \"Get/Cart\" is not a "
	             "valid method name");
}
END_TEST

START_TEST(err_missing_endpoints)
{
	expect_error("services:\n"
	             "  - name: a.B\n",
	             "t.yaml:2:5: services[0].endpoints: a service needs exactly one endpoint source: "
	             "endpoints | discovery.etcd | discovery.dns | discovery.xds");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    endpoints: []\n",
	             "t.yaml:3:16: services[0].endpoints: a service needs exactly one endpoint source: "
	             "endpoints | discovery.etcd | discovery.dns | discovery.xds");
	expect_error("listen: \"127.0.0.1:1\"\n", "t.yaml:1:1: services: at least one service is required*");
}
END_TEST

/* Exactly one endpoint source, errors naming the field. */
START_TEST(err_endpoint_sources)
{
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    endpoints: [{address: \"127.0.0.1:1\"}]\n"
	            "    discovery: {dns: {name: a.example, port: 1}}\n",
	            "t.yaml:4:22: services[0].discovery.dns: a service has exactly one endpoint source: "
	            "endpoints | discovery.etcd | discovery.dns | discovery.xds (this one makes 2)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery: {}\n",
	             "t.yaml:3:16: services[0].discovery: needs etcd, dns or xds");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery:\n"
	             "      etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: /p/}\n"
	             "      dns: {name: a.example, port: 1}\n",
	             "t.yaml:5:12: services[0].discovery.dns: a service has exactly one endpoint source: *");
	/* discovery.etcd loads (sidecar/control/etcd_watch.c reads it). */
	{
		struct mtd_cfg *cfg = load_ok("services:\n"
		                              "  - name: a.B\n"
		                              "    discovery:\n"
		                              "      etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: /p/}\n");

		ck_assert_int_eq(cfg->services[0].local->source, MTD_CFG_SOURCE_ETCD);
		ck_assert_uint_eq(cfg->services[0].local->n_endpoints, 0);
		ck_assert_str_eq(cfg->services[0].local->etcd->prefix, "/p/");
		ck_assert_uint_eq(cfg->services[0].local->etcd->n_endpoints, 1);
		mtd_cfg_free(cfg);
	}
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery:\n"
	             "      etcd: {prefix: /p/, username: u}\n",
	             "t.yaml:4:13: services[0].discovery.etcd.endpoints: is required *");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery:\n"
	             "      etcd: {endpoints: [\"127.0.0.1:2379\"], username: u}\n",
	             "t.yaml:4:55: services[0].discovery.etcd.password_file: username and password_file must be set "
	             "together");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery:\n"
	             "      etcd: {endpoints: [\"127.0.0.1:2379\"]}\n",
	             "t.yaml:4:13: services[0].discovery.etcd.prefix: is required *");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery: {dns: {port: 80}}\n",
	             "t.yaml:3:22: services[0].discovery.dns.name: is required *");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery: {dns: {name: \"a..b\", port: 80}}\n",
	             "t.yaml:3:29: services[0].discovery.dns.name: \"a..b\" is not a host name");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery: {dns: {name: a.example}}\n",
	             "t.yaml:3:22: services[0].discovery.dns.port: is required, 1..65535");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery: {dns: {name: a.example, port: 70000}}\n",
	             "t.yaml:3:46: services[0].discovery.dns.port: is required, 1..65535 (out of range)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery: {dns: {name: a.example, port: 1, refresh: 0s}}\n",
	             "t.yaml:3:58: services[0].discovery.dns.refresh: must be at least 1ms");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery: {dns: {name: a.example, port: 1, resolvers: [\"localhost:53\"]}}\n",
	             "t.yaml:3:60: services[0].discovery.dns.resolvers[0]: \"localhost\" is not an IP address");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery: {dns: {name: a.example, port: 1}, initial_wait: 2h}\n",
	             "t.yaml:3:64: services[0].discovery.initial_wait: must be at most 1h *");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    discovery: {dns: {name: a.example, port: 1}, initial_wait: -1s}\n",
	             "t.yaml:3:64: services[0].discovery.initial_wait: must not be negative");
}
END_TEST

/* discovery.initial_wait: 15 s unless set, 0 allowed (no wait), none
 * for static endpoints. */
START_TEST(initial_wait)
{
	struct mtd_cfg *cfg = load_ok("services:\n"
	                              "  - name: a.A\n"
	                              "    discovery: {dns: {name: a.example, port: 1}}\n"
	                              "  - name: a.B\n"
	                              "    discovery: {dns: {name: a.example, port: 1}, initial_wait: 0s}\n"
	                              "  - name: a.C\n"
	                              "    discovery: {dns: {name: a.example, port: 1}, initial_wait: 250ms}\n"
	                              "  - name: a.D\n"
	                              "    endpoints: [{address: \"127.0.0.1:1\"}]\n");
	ck_assert_int_eq(cfg->services[0].local->initial_wait_ms, 15000);
	ck_assert_int_eq(cfg->services[1].local->initial_wait_ms, 0);
	ck_assert_int_eq(cfg->services[2].local->initial_wait_ms, 250);
	ck_assert_int_eq(cfg->services[3].local->initial_wait_ms, 0);
	mtd_cfg_free(cfg);
}
END_TEST

/* The top-level xds block and discovery.xds. */
START_TEST(xds_ok)
{
	struct mtd_cfg *cfg;

	unsetenv("GRPC_XDS_BOOTSTRAP");
	cfg = load_ok("node_id: n1\n"
	              "zone: z0\n"
	              "xds: {server: \"127.0.0.1:18000\"}\n"
	              "services:\n"
	              "  - name: shop.Echo\n"
	              "    discovery: {xds: {}}\n"
	              "  - name: shop.Cart\n"
	              "    discovery: {xds: {cluster: \"outbound|8080||cart\"}}\n");
	ck_assert_ptr_nonnull(cfg->xds);
	ck_assert_str_eq(cfg->xds->server.text, "127.0.0.1:18000");
	ck_assert_str_eq(cfg->xds->node_id, "n1");
	ck_assert_str_eq(cfg->xds->zone, "z0");
	ck_assert_ptr_null(cfg->xds->tls);
	ck_assert_ptr_null(cfg->xds->bootstrap);
	ck_assert_ptr_null(cfg->xds->listener);
	ck_assert_int_eq(cfg->services[0].local->source, MTD_CFG_SOURCE_XDS);
	ck_assert_str_eq(cfg->services[0].local->xds_cluster, "shop.Echo");
	ck_assert_str_eq(cfg->services[1].local->xds_cluster, "outbound|8080||cart");
	mtd_cfg_free(cfg);

	cfg = load_ok("xds: {server: \"127.0.0.1:18000\", node_id: cart-7f9c, zone: eu-1a}\n"
	              "services:\n"
	              "  - name: shop.Echo\n"
	              "    endpoints: [{address: \"127.0.0.1:1\"}]\n");
	ck_assert_str_eq(cfg->xds->node_id, "cart-7f9c");
	ck_assert_str_eq(cfg->xds->zone, "eu-1a");
	ck_assert_int_eq(cfg->services[0].local->source, MTD_CFG_SOURCE_STATIC);
	ck_assert_ptr_null(cfg->services[0].local->xds_cluster);
	mtd_cfg_free(cfg);

	cfg = load_ok("xds: {server: \"127.0.0.1:18000\", listener: maitred.outbound}\n"
	              "services: [{name: shop.Echo, discovery: {xds: {}}}]\n");
	ck_assert_str_eq(cfg->xds->listener, "maitred.outbound");
	ck_assert_int_eq(cfg->xds->initial_wait_ms, 15000); /* the default */
	mtd_cfg_free(cfg);

	/* xds.initial_wait: a call's wait for the listener's first routes. */
	cfg = load_ok("xds: {server: \"127.0.0.1:18000\", listener: l, initial_wait: 0s}\n"
	              "services: [{name: shop.Echo, discovery: {xds: {}}}]\n");
	ck_assert_int_eq(cfg->xds->initial_wait_ms, 0);
	mtd_cfg_free(cfg);
	cfg = load_ok("xds: {server: \"127.0.0.1:18000\", listener: l, initial_wait: 2500ms}\n"
	              "services: [{name: shop.Echo, discovery: {xds: {}}}]\n");
	ck_assert_int_eq(cfg->xds->initial_wait_ms, 2500);
	mtd_cfg_free(cfg);
	expect_error("xds: {server: \"127.0.0.1:18000\", listener: l, initial_wait: 2h}\n"
	             "services: [{name: shop.Echo, discovery: {xds: {}}}]\n",
	             "t.yaml:1:61: xds.initial_wait: must be at most 1h *");
	expect_error("xds: {server: \"127.0.0.1:18000\", initial_wait: 5s}\n"
	             "services: [{name: shop.Echo, discovery: {xds: {}}}]\n",
	             "t.yaml:1:*: xds.initial_wait: is the wait for xds.listener's first routes, and no listener is set *");
}
END_TEST

/* Services a control plane's routes name: the config as loaded plus one
 * per cluster, options at their defaults, replaced as a whole each time. */
START_TEST(xds_created_services)
{
	struct mtd_cfg *base = load_ok("xds: {server: \"127.0.0.1:18000\", listener: maitred.outbound}\n"
	                               "services:\n"
	                               "  - {name: pool-a, discovery: {xds: {cluster: cluster-a}}}\n"
	                               "  - {name: shop.Static, endpoints: [{address: \"127.0.0.1:1\"}]}\n");
	struct mtd_cfg_errors errs = {0};
	struct mtd_cfg *two, *one, *none;
	const char *const names[] = {"outbound|8080||cart", "shop.Cart"};

	ck_assert_int_eq(mtd_cfg_with_xds_services(base, names, 2, &two, &errs), 0);
	ck_assert_uint_eq(two->n_routed, 4);
	ck_assert(!two->services[0].local->xds_created && !two->services[1].local->xds_created);
	for (size_t i = 2; i < 4; i++) {
		const struct mtd_cfg_service *s = &two->services[i];
		ck_assert(s->local->xds_created);
		ck_assert_str_eq(s->local->name, names[i - 2]);
		ck_assert_int_eq(s->local->source, MTD_CFG_SOURCE_XDS);
		ck_assert_str_eq(s->local->xds_cluster, names[i - 2]);
		/* The defaults of an entry without options: pool-a's. */
		ck_assert_ptr_eq(s->lb.ops, two->services[0].lb.ops);
		ck_assert_int_eq(s->local->fault.mode, two->services[0].local->fault.mode);
		ck_assert_ptr_null(s->tls);
	}
	ck_assert_str_eq(two->services[1].local->name, "shop.Static");
	ck_assert_str_eq(two->source, base->source);
	/* Replaced, not added to; none again is the file's own. */
	ck_assert_int_eq(mtd_cfg_with_xds_services(two, &names[1], 1, &one, &errs), 0);
	ck_assert_uint_eq(one->n_routed, 3);
	ck_assert_str_eq(one->services[2].local->name, "shop.Cart");
	ck_assert(one->services[2].local->xds_created);
	ck_assert_int_eq(mtd_cfg_with_xds_services(one, NULL, 0, &none, &errs), 0);
	ck_assert_uint_eq(none->n_routed, 2);
	ck_assert(!none->services[1].local->xds_created);
	ck_assert_uint_eq(errs.n, 0);
	mtd_cfg_free(none);
	mtd_cfg_free(one);
	/* Out of memory anywhere: -ENOMEM, nothing built, nothing leaked. */
	unsigned long k;
	for (k = 1; k < 100000; k++) {
		struct mtd_cfg *cfg = NULL;
		mtd_cfg__fail_alloc_after(k);
		int rc = mtd_cfg_with_xds_services(two, names, 2, &cfg, &errs);
		bool failed = mtd_cfg__alloc_failed();
		mtd_cfg__fail_alloc_after(0);
		mtd_cfg_errors_clear(&errs);
		if (!failed) {
			ck_assert_int_eq(rc, 0);
			ck_assert_uint_eq(cfg->n_routed, 4);
			mtd_cfg_free(cfg);
			break;
		}
		ck_assert_msg(rc == -ENOMEM, "allocation %lu: rc %d", k, rc);
		ck_assert_ptr_null(cfg);
	}
	ck_assert_uint_gt(k, 20);
	mtd_cfg_free(two);
	mtd_cfg_free(base);
}
END_TEST

/* A control plane's cluster named "*" gets no service: one of that name
 * would be the catch-all, taking the calls of every service maitred
 * does not know. */
START_TEST(xds_created_not_catch_all)
{
	struct mtd_cfg *base = load_ok("xds: {server: \"127.0.0.1:18000\", listener: maitred.outbound}\n"
	                               "services:\n"
	                               "  - {name: pool-a, discovery: {xds: {cluster: cluster-a}}}\n");
	struct mtd_cfg_errors errs = {0};
	struct mtd_cfg *cfg = NULL;
	const char *const names[] = {"*", "shop.Cart"};

	ck_assert_int_eq(mtd_cfg_with_xds_services(base, names, 2, &cfg, &errs), -EINVAL);
	ck_assert_ptr_null(cfg);
	ck_assert_uint_eq(errs.n, 1);
	ck_assert_msg(strstr(errs.msgs[0], "catch-all") != NULL, "%s", errs.msgs[0]);
	mtd_cfg_errors_clear(&errs);
	mtd_cfg_free(base);
}
END_TEST

START_TEST(xds_errors)
{
	unsetenv("GRPC_XDS_BOOTSTRAP");
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    discovery: {xds: {}}\n",
	            "t.yaml:3:22: services[0].discovery.xds: needs the top-level xds block (the management server: "
	            "xds: {server: \"HOST:PORT\"})");
	expect_only("xds: {server: \"127.0.0.1:1\", bootstrap: b.json}\n"
	            "services: [{name: a.B, discovery: {xds: {}}}]\n",
	            "t.yaml:1:41: xds.bootstrap: and xds.server are both set: the server comes from one of them");
	expect_error("xds: {server: \"127.0.0.1\"}\n"
	             "services: [{name: a.B, discovery: {xds: {}}}]\n",
	             "t.yaml:1:15: xds.server: *");
	expect_only("xds: {}\n"
	            "services: [{name: a.B, discovery: {xds: {}}}]\n",
	            "t.yaml:1:6: xds.server: is required (\"HOST:PORT\"), or xds.bootstrap, or GRPC_XDS_BOOTSTRAP in "
	            "the environment");
	expect_only("xds: {server: \"127.0.0.1:1\", listener: \"maitred outbound\"}\n"
	            "services: [{name: a.B, discovery: {xds: {}}}]\n",
	            "t.yaml:1:40: xds.listener: must be a Listener name: at most 1024 printable characters, no spaces");
	expect_error("xds: {server: \"127.0.0.1:1\"}\n"
	             "services:\n"
	             "  - name: a.B\n"
	             "    discovery: {xds: {}, dns: {name: a.example, port: 1}}\n",
	             "t.yaml:4:22: services[0].discovery.xds: a service has exactly one endpoint source: *");
	expect_error("xds: {server: \"127.0.0.1:1\", tls: {ca_file: /nonexistent/ca.pem}}\n"
	             "services: [{name: a.B, discovery: {xds: {}}}]\n",
	             "t.yaml:1:45: xds.tls.ca_file: cannot read \"/nonexistent/ca.pem\"*");
}
END_TEST

/* Some error contains text. */
static void expect_error_with(const char *yaml, const char *text)
{
	struct mtd_cfg *cfg = (struct mtd_cfg *)1;
	struct mtd_cfg_errors errs = {0};
	bool found = false;

	ck_assert_int_eq(mtd_cfg_load_buffer("t.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_YAML, &cfg, &errs), -EINVAL);
	for (size_t i = 0; i < errs.n; i++)
		found = found || strstr(errs.msgs[i], text) != NULL;
	for (size_t i = 0; i < errs.n && !found; i++)
		fprintf(stderr, "  got: %s\n", errs.msgs[i]);
	ck_assert_msg(found, "no error says: %s", text);
	mtd_cfg_errors_clear(&errs);
}

/* A gRPC xDS bootstrap file: xds.bootstrap, or GRPC_XDS_BOOTSTRAP. */
static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

START_TEST(xds_bootstrap)
{
	char dir[] = "/tmp/mtd-xds-XXXXXX", file[64], yaml[512];
	struct mtd_cfg *cfg;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/bootstrap.json", dir);
	write_file(file, "{\"xds_servers\": [{\"server_uri\": \"127.0.0.1:18001\", \"channel_creds\": "
	                 "[{\"type\": \"insecure\"}], \"server_features\": [\"xds_v3\"]}],\n"
	                 " \"node\": {\"id\": \"sidecar~10.0.0.1~cart\", \"metadata\": {\"A\": [1, {}]}, "
	                 "\"locality\": {\"zone\": \"eu-1b\"}}, \"certificate_providers\": {}}\n");
	unsetenv("GRPC_XDS_BOOTSTRAP");
	snprintf(yaml, sizeof(yaml),
	         "zone: z0\nxds: {bootstrap: \"%s\"}\nservices: [{name: a.B, discovery: {xds: {}}}]\n", file);
	cfg = load_ok(yaml);
	ck_assert_str_eq(cfg->xds->server.text, "127.0.0.1:18001");
	ck_assert_str_eq(cfg->xds->node_id, "sidecar~10.0.0.1~cart");
	ck_assert_str_eq(cfg->xds->zone, "eu-1b");
	ck_assert_str_eq(cfg->xds->bootstrap, file);
	mtd_cfg_free(cfg);

	/* The config's own node_id beats the file's. */
	snprintf(yaml, sizeof(yaml), "xds: {bootstrap: \"%s\", node_id: mine}\nservices: [{name: a.B, discovery: {xds: {}}}]\n",
	         file);
	cfg = load_ok(yaml);
	ck_assert_str_eq(cfg->xds->node_id, "mine");
	mtd_cfg_free(cfg);

	/* GRPC_XDS_BOOTSTRAP when the block names no server. */
	setenv("GRPC_XDS_BOOTSTRAP", file, 1);
	cfg = load_ok("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n");
	ck_assert_str_eq(cfg->xds->server.text, "127.0.0.1:18001");
	ck_assert_str_eq(cfg->xds->bootstrap, file);
	mtd_cfg_free(cfg);
	cfg = load_ok("xds: {server: \"127.0.0.1:18002\"}\nservices: [{name: a.B, discovery: {xds: {}}}]\n");
	ck_assert_str_eq(cfg->xds->server.text, "127.0.0.1:18002");
	ck_assert_ptr_null(cfg->xds->bootstrap);
	mtd_cfg_free(cfg);

	/* TLS creds need xds.tls; no server_uri; not JSON; missing file. */
	write_file(file, "{\"xds_servers\": [{\"server_uri\": \"127.0.0.1:1\", \"channel_creds\": [{\"type\": "
	                 "\"google_default\"}]}]}");
	expect_only("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n",
	            "t.yaml:1:6: xds (GRPC_XDS_BOOTSTRAP): channel_creds \"google_default\": maitred speaks h2c, or "
	            "TLS with xds.tls {ca_file, ...}");
	/* The first channel_creds maitred speaks, as gRPC takes them. */
	write_file(file, "{\"xds_servers\": [{\"server_uri\": \"127.0.0.1:1\", \"channel_creds\": [{\"type\": "
	                 "\"google_default\"}, {\"type\": \"insecure\"}]}]}");
	cfg = load_ok("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n");
	ck_assert_str_eq(cfg->xds->server.text, "127.0.0.1:1");
	mtd_cfg_free(cfg);
	write_file(file, "{\"xds_servers\": [{\"server_uri\": \"127.0.0.1:1\", \"channel_creds\": [{\"type\": "
	                 "\"google_default\"}, {\"type\": \"tls\"}, {\"type\": \"insecure\"}]}]}");
	expect_only("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n",
	            "t.yaml:1:6: xds (GRPC_XDS_BOOTSTRAP): channel_creds \"tls\": maitred speaks h2c, or "
	            "TLS with xds.tls {ca_file, ...}");
	write_file(file, "{\"xds_servers\": [{\"server_uri\": \"unix:///etc/istio/proxy/XDS\"}]}");
	expect_only("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n",
	            "t.yaml:1:6: xds (GRPC_XDS_BOOTSTRAP): xds_servers[0].server_uri \"unix:///etc/istio/proxy/XDS\" is "
	            "a Unix socket: maitred dials HOST:PORT (h2c or TLS)");
	write_file(file, "{\"node\": {\"id\": \"x\"}}");
	expect_error_with("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n",
	                  "/bootstrap.json\": xds_servers[0].server_uri is required");
	write_file(file, "{\"xds_servers\": [");
	expect_error_with("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n", "/bootstrap.json\" is not JSON");
	write_file(file, "[1, 2]");
	expect_error_with("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n",
	                  "/bootstrap.json\": not a JSON object");
	write_file(file, "{\"xds_servers\": [{\"server_uri\": \"no-port\"}]}");
	expect_error_with("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n",
	                  "xds.bootstrap: xds_servers[0].server_uri");
	unlink(file);
	expect_error("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n",
	             "t.yaml:1:6: xds (GRPC_XDS_BOOTSTRAP): cannot read*");
	/* A missing xds.bootstrap said once. */
	expect_only("xds: {bootstrap: /nonexistent/b.json}\nservices: [{name: a.B, discovery: {xds: {}}}]\n",
	            "t.yaml:1:18: xds.bootstrap: cannot read \"/nonexistent/b.json\": No such file or directory");
	unsetenv("GRPC_XDS_BOOTSTRAP");
	rmdir(dir);
}
END_TEST

/* The bootstrap's certificate_providers (gRFC A29, plugin file_watcher):
 * read with their files resolved against the bootstrap's directory and
 * readable; gRPC's rules on what an instance holds; one clear error each. */
static void providers_file(const char *file, const char *providers)
{
	char text[2048];

	snprintf(text, sizeof(text),
	         "{\"xds_servers\": [{\"server_uri\": \"127.0.0.1:1\", \"channel_creds\": [{\"type\": "
	         "\"insecure\"}]}], \"certificate_providers\": %s}",
	         providers);
	write_file(file, text);
}

START_TEST(xds_bootstrap_certificate_providers)
{
	char dir[] = "/tmp/mtd-xds-XXXXXX", file[64], crt[64], key[64], ca[64], yaml[512];
	const char *svc = "services: [{name: a.B, discovery: {xds: {}}}]\n";
	struct mtd_cfg *cfg;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/bootstrap.json", dir);
	snprintf(crt, sizeof(crt), "%s/cert.pem", dir);
	snprintf(key, sizeof(key), "%s/key.pem", dir);
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	write_file(crt, "c");
	write_file(key, "k");
	write_file(ca, "a");
	snprintf(yaml, sizeof(yaml), "xds: {bootstrap: \"%s\"}\n%s", file, svc);

	/* Relative names against the bootstrap's directory; absolute as is. */
	char two[512];
	snprintf(two, sizeof(two),
	         "{\"id\": {\"plugin_name\": \"file_watcher\", \"config\": {\"certificate_file\": \"cert.pem\", "
	         "\"private_key_file\": \"key.pem\", \"refresh_interval\": \"1.5s\"}}, "
	         "\"roots\": {\"plugin_name\": \"file_watcher\", \"config\": {\"ca_certificate_file\": \"%s\"}}}",
	         ca);
	providers_file(file, two);
	cfg = load_ok(yaml);
	ck_assert_uint_eq(cfg->xds->providers.n, 2);
	const struct mtd_cfg_cert_provider *id = mtd_cfg_cert_provider_find(&cfg->xds->providers, "id");
	const struct mtd_cfg_cert_provider *roots = mtd_cfg_cert_provider_find(&cfg->xds->providers, "roots");
	ck_assert_ptr_nonnull(id);
	ck_assert_ptr_nonnull(roots);
	ck_assert_ptr_null(mtd_cfg_cert_provider_find(&cfg->xds->providers, "default"));
	ck_assert_str_eq(id->cert_file, crt);
	ck_assert_str_eq(id->key_file, key);
	ck_assert_ptr_null(id->ca_file);
	ck_assert_int_eq(id->refresh_ms, 1500);
	ck_assert_str_eq(roots->ca_file, ca);
	ck_assert_ptr_null(roots->cert_file);
	ck_assert_int_eq(roots->refresh_ms, 600000);
	/* Copied and compared as the xDS client keeps them. */
	struct mtd_cfg_cert_providers copy;
	ck_assert_int_eq(mtd_cfg_cert_providers_copy(&copy, &cfg->xds->providers), 0);
	ck_assert(mtd_cfg_cert_providers_same(&copy, &cfg->xds->providers));
	copy.e[0].refresh_ms++;
	ck_assert(!mtd_cfg_cert_providers_same(&copy, &cfg->xds->providers));
	mtd_cfg_cert_providers_fini(&copy);
	mtd_cfg_cert_providers_fini(&copy); /* twice is fine */
	mtd_cfg_free(cfg);

	/* What gRPC refuses, refused with the instance named. */
	static const struct {
		const char *providers, *error;
	} bad[] = {
	        {"[1]", "certificate_providers: must be an object"},
	        {"{\"a\": 1}", "certificate_providers[\"a\"]: an object with a plugin_name is required"},
	        {"{\"a\": {\"plugin_name\": \"pem_file\", \"config\": {}}}",
	         "certificate_providers[\"a\"].plugin_name \"pem_file\": maitred reads file_watcher only"},
	        {"{\"a\": {\"plugin_name\": \"file_watcher\"}}",
	         "certificate_providers[\"a\"].config: must be an object"},
	        {"{\"a\": {\"plugin_name\": \"file_watcher\", \"config\": {\"certificate_file\": \"cert.pem\"}}}",
	         "certificate_providers[\"a\"].config: certificate_file and private_key_file go together"},
	        {"{\"a\": {\"plugin_name\": \"file_watcher\", \"config\": {\"refresh_interval\": \"1s\"}}}",
	         "certificate_providers[\"a\"].config: certificate_file and private_key_file, or ca_certificate_file, "
	         "are required"},
	        {"{\"a\": {\"plugin_name\": \"file_watcher\", \"config\": {\"ca_certificate_file\": \"nope.pem\"}}}",
	         "certificate_providers[\"a\"].config.ca_certificate_file: cannot read \""},
	        {"{\"a\": {\"plugin_name\": \"file_watcher\", \"config\": {\"ca_certificate_file\": [1]}}}",
	         "certificate_providers[\"a\"].config.ca_certificate_file: must be a file name"},
	        {"{\"a\": {\"plugin_name\": \"file_watcher\", \"config\": {\"ca_certificate_file\": \"ca.pem\", "
	         "\"refresh_interval\": \"soon\"}}}",
	         "certificate_providers[\"a\"].config.refresh_interval: "},
	        {"{\"a\": {\"plugin_name\": \"file_watcher\", \"config\": {\"ca_certificate_file\": \"ca.pem\", "
	         "\"refresh_interval\": \"0s\"}}}",
	         "(1ms to 366 days)"},
	        {"{\"a\": {\"plugin_name\": \"file_watcher\", \"config\": {\"ca_certificate_file\": \"ca.pem\"}}, "
	         "\"a\": {\"plugin_name\": \"file_watcher\", \"config\": {\"ca_certificate_file\": \"ca.pem\"}}}",
	         "certificate_providers: \"a\" twice"},
	        /* A NUL inside a name: read as the bytes before it, "a\0b"
	         * would be the instance a cluster names "a", and
	         * "ca.pem\0x" the file ca.pem. */
	        {"{\"a\\u0000b\": {\"plugin_name\": \"file_watcher\", \"config\": {\"ca_certificate_file\": "
	         "\"ca.pem\"}}}",
	         "certificate_providers: an instance name must be 1 to 256 characters, no NUL"},
	        {"{\"a\": {\"plugin_name\": \"file_watcher\", \"config\": {\"ca_certificate_file\": "
	         "\"ca.pem\\u0000x\"}}}",
	         "certificate_providers[\"a\"].config.ca_certificate_file: must be a file name"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		providers_file(file, bad[i].providers);
		expect_error_with(yaml, bad[i].error);
	}
	/* A directory, or a FIFO with no writer (which would block open()). */
	char fifo[64], what[512];
	snprintf(fifo, sizeof(fifo), "%s/fifo.pem", dir);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	const char *not_files[][2] = {{dir, "a directory"}, {fifo, "a FIFO"}};
	for (size_t i = 0; i < 2; i++) {
		snprintf(what, sizeof(what),
		         "{\"a\": {\"plugin_name\": \"file_watcher\", \"config\": {\"ca_certificate_file\": \"%s\"}}}",
		         not_files[i][0]);
		providers_file(file, what);
		snprintf(what, sizeof(what),
		         "certificate_providers[\"a\"].config.ca_certificate_file: cannot read \"%s\": "
		         "not a regular file (%s)",
		         not_files[i][0], not_files[i][1]);
		expect_error_with(yaml, what);
	}
	unlink(fifo);
	unlink(file);
	unlink(crt);
	unlink(key);
	unlink(ca);
	rmdir(dir);
}
END_TEST

/* libyaml loads a document nested N flow levels deep in O(N^2) time (its
 * scanner walks every open level at each token): 40,000 "[" took seconds,
 * 200,000 minutes, and a config or bootstrap file may hold millions. The
 * load refuses past 256 levels of nesting before libyaml builds the
 * document, once, at the collection too deep (the root's mapping is level
 * 1); JSON, YAML and a gRPC bootstrap file alike. */
static char *nested(const char *head, size_t depth, const char *tail)
{
	size_t h = strlen(head), t = strlen(tail);
	char *s = malloc(h + 2 * depth + t + 1);

	ck_assert_ptr_nonnull(s);
	memcpy(s, head, h);
	memset(s + h, '[', depth);
	memset(s + h + depth, ']', depth);
	memcpy(s + h + 2 * depth, tail, t + 1);
	return s;
}

START_TEST(err_flow_nesting)
{
	char *text = nested("services: ", 5000, "\n");
	const char *const json_want[] = {"t.json:1:269: nesting deeper than 256 levels", NULL};

	expect_only(text, "t.yaml:1:266: nesting deeper than 256 levels");
	free(text);
	/* 256 levels are still read (and refused by the schema, with its path). */
	text = nested("services: ", 255, "\n");
	expect_error(text, "t.yaml:1:12: services[0]: expected a mapping (Service), got a list");
	free(text);
	/* A million levels: refused at once, not after libyaml's minutes. */
	text = nested("{\"services\": ", 1000000, "}\n");
	expect_errors_fmt("t.json", text, strlen(text), MTD_CFG_FORMAT_JSON, json_want);
	free(text);

	char dir[] = "/tmp/mtd-xds-XXXXXX", file[64], yaml[256];

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/bootstrap.json", dir);
	text = nested("{\"xds_servers\": ", 500000, "}\n");
	write_file(file, text);
	free(text);
	snprintf(yaml, sizeof(yaml), "xds: {bootstrap: \"%s\"}\nservices: [{name: a.B, discovery: {xds: {}}}]\n", file);
	expect_error_with(yaml, "/bootstrap.json\" is not JSON: nesting deeper than 256 levels (line 1)");
	unlink(file);
	rmdir(dir);
}
END_TEST

/* A file whose top is not a mapping (a word, a list) gets that one error:
 * it got "services: at least one service is required" first, with no
 * line, as if the file had been read and found empty. */
START_TEST(err_top_not_a_mapping)
{
	expect_only("hello\n", "t.yaml:1:1: expected a mapping (Config), got a scalar");
	expect_only("- a\n- b\n", "t.yaml:1:1: expected a mapping (Config), got a list");
	const char *const want[] = {"t.json:1:1: expected a mapping (Config), got a list", NULL};
	expect_errors_fmt("t.json", "[{\"services\": []}]", strlen("[{\"services\": []}]"), MTD_CFG_FORMAT_JSON, want);
	/* An empty file is read as an empty config: the error says what it lacks. */
	expect_only("", "t.yaml: services: at least one service is required*");
}
END_TEST

/* A value of the wrong shape is said once, where it is: the check that
 * then finds nothing there ("a service needs exactly one endpoint
 * source", "at least one service is required") came first in the file's
 * order and sent the reader to add what was written wrong. */
START_TEST(err_shape_said_once)
{
	expect_only("services:\n  - name: a.B\n    endpoints: [\"127.0.0.1:1\"]\n",
	            "t.yaml:3:17: services[0].endpoints[0]: expected a mapping (Endpoint), got a scalar");
	expect_only("services:\n  - name: a.B\n    endpoints: \"127.0.0.1:1\"\n",
	            "t.yaml:3:16: services[0].endpoints: expected a list, got a scalar");
	expect_only("services: {name: a.B, endpoints: [{address: \"127.0.0.1:1\"}]}\n",
	            "t.yaml:1:11: services: expected a list, got a mapping");
	/* Nothing written wrong there: the checks still say what is missing. */
	expect_only("services:\n  - name: a.B\n", "t.yaml:2:5: services[0].endpoints: a service needs exactly one *");
	expect_only("services: []\n", "t.yaml:1:11: services: at least one service is required*");
	/* A neighbour's error ("services[1]...") is not one under services[0]. */
	expect_error("services:\n  - name: a.B\n  - name: c.D\n    endpoints: [1]\n",
	             "t.yaml:2:5: services[0].endpoints: a service needs exactly one *");
}
END_TEST

/* A config path that is no regular file, or too large, is refused at once
 * with the reason: a FIFO with no writer blocked the load in open() (the
 * start, --check-config, a reload on the control thread), and the reason
 * read "not a regular file of at most 64 MiB: Invalid argument". */
static void expect_file_error(const char *path, const char *want)
{
	struct mtd_cfg *cfg = NULL;
	struct mtd_cfg_errors errs = {0};

	ck_assert_int_lt(mtd_cfg_load_file(path, MTD_CFG_FORMAT_AUTO, &cfg, &errs), 0);
	ck_assert_ptr_null(cfg);
	ck_assert_uint_eq(errs.n, 1);
	ck_assert_msg(matches(errs.msgs[0], want), "got: %s, want: %s", errs.msgs[0], want);
	mtd_cfg_errors_clear(&errs);
}

START_TEST(err_config_file_kind)
{
	char dir[] = "/tmp/mtd-cfgfile-XXXXXX", fifo[64], big[64];

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/fifo.yaml", dir);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	alarm(20); /* the old open() never returned */
	expect_file_error(fifo, "*/fifo.yaml: not a regular file (a FIFO)");
	alarm(0);
	expect_file_error(dir, "/tmp/mtd-cfgfile-*: not a regular file (a directory)");
	snprintf(big, sizeof(big), "%s/big.yaml", dir);
	int fd = open(big, O_WRONLY | O_CREAT, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (64 << 20) + 1), 0);
	close(fd);
	expect_file_error(big, "*/big.yaml: larger than 64 MiB (67108865 bytes)");
	unlink(big);
	unlink(fifo);
	rmdir(dir);
}
END_TEST

/* A TLS (or password, bootstrap) file that is a FIFO or a directory is
 * refused at load, saying so: a FIFO with no writer blocked the load in
 * open(), and a directory passed ("readable") until the start refused it. */
START_TEST(err_tls_file_kind)
{
	char dir[] = "/tmp/mtd-tlsfile-XXXXXX", fifo[64], yaml[512];

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/ca.pem", dir);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	snprintf(yaml, sizeof(yaml), "services: [{name: a.B, endpoints: [{address: \"127.0.0.1:1\"}], tls: {ca_file: \"%s\"}}]\n",
	         fifo);
	alarm(20); /* the old open() never returned */
	expect_error(yaml, "t.yaml:1:*: services[0].tls.ca_file: cannot read \"*/ca.pem\": not a regular file (a FIFO)");
	alarm(0);
	snprintf(yaml, sizeof(yaml), "services: [{name: a.B, endpoints: [{address: \"127.0.0.1:1\"}], tls: {ca_file: \"%s\"}}]\n",
	         dir);
	expect_error(yaml, "t.yaml:1:*: services[0].tls.ca_file: cannot read \"/tmp/mtd-tlsfile-*\": not a regular file (a directory)");
	/* GRPC_XDS_BOOTSTRAP naming one. */
	setenv("GRPC_XDS_BOOTSTRAP", fifo, 1);
	alarm(20);
	expect_error("xds: {}\nservices: [{name: a.B, discovery: {xds: {}}}]\n",
	             "t.yaml:1:6: xds (GRPC_XDS_BOOTSTRAP): \"*/ca.pem\": not a regular file (a FIFO)");
	alarm(0);
	unsetenv("GRPC_XDS_BOOTSTRAP");
	unlink(fifo);
	rmdir(dir);
}
END_TEST

/* A bool written in quotes: the error says the quotes are what is wrong
 * (it said 'expected true or false, got "true"'). */
START_TEST(err_bool_quoted)
{
	expect_only("admin_allow_remote: \"true\"\nservices: [{name: a.B, endpoints: [{address: \"127.0.0.1:1\"}]}]\n",
	            "t.yaml:1:21: admin_allow_remote: expected true or false, got the string \"true\" (write it without "
	            "quotes)");
	expect_only("admin_allow_remote: \"yes\"\nservices: [{name: a.B, endpoints: [{address: \"127.0.0.1:1\"}]}]\n",
	            "t.yaml:1:21: admin_allow_remote: expected true or false, got \"yes\"");
}
END_TEST

/* The duplicate checks of endpoints and methods were quadratic: 100,000
 * endpoints (MTD_LB_MAX_ENDPOINTS, the most a service may have) took 30 s
 * to load in a release build, 100,000 methods 40 s, on the control thread
 * at a reload. They still name the first of the two. */
START_TEST(many_endpoints_and_methods_load_in_time)
{
	size_t n = MTD_LB_MAX_ENDPOINTS, cap = 64 + n * 48, len = 0;
	char *y = malloc(cap);
	struct timespec t0, t1;

	ck_assert_ptr_nonnull(y);
	len += (size_t)snprintf(y + len, cap - len, "services:\n  - name: a.B\n    endpoints:\n");
	for (size_t i = 0; i < n - 1; i++)
		len += (size_t)snprintf(y + len, cap - len, "      - {address: \"10.%zu.%zu.%zu:80\"}\n", i >> 16,
		                        (i >> 8) & 255, i & 255);
	len += (size_t)snprintf(y + len, cap - len, "      - {address: \"10.0.0.5:80\"}\n");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	expect_only(y, "t.yaml:*: services[0].endpoints[99999].address: duplicate endpoint \"10.0.0.5:80\" (also "
	               "endpoints[5])");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ck_assert_msg(t1.tv_sec - t0.tv_sec < 20, "100,000 endpoints took %lld s", (long long)(t1.tv_sec - t0.tv_sec));

	len = 0;
	len += (size_t)snprintf(y + len, cap - len,
	                        "services:\n  - name: a.B\n    endpoints: [{address: \"127.0.0.1:1\"}]\n    methods:\n");
	for (size_t i = 0; i < n - 1; i++)
		len += (size_t)snprintf(y + len, cap - len, "      - {name: M%zu}\n", i);
	len += (size_t)snprintf(y + len, cap - len, "      - {name: M7}\n");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	expect_only(y, "t.yaml:*: services[0].methods[99999].name: duplicate method \"M7\" (also methods[7])");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ck_assert_msg(t1.tv_sec - t0.tv_sec < 20, "100,000 methods took %lld s", (long long)(t1.tv_sec - t0.tv_sec));
	free(y);
}
END_TEST

/* Inbound listeners (mesh mode). */
#define FX "%s/tests/unit/config/fixtures/certs/"

START_TEST(inbound_ok)
{
	char yaml[2048];
	struct mtd_cfg *cfg;

	/* No service at all: a maitred that only serves inbound calls. */
	snprintf(yaml, sizeof(yaml),
	         "inbound:\n"
	         "  - listen: \"127.0.0.1:15443\"\n"
	         "    app: \"127.0.0.1:50051\"\n"
	         "    tls: {cert_file: " FX "client.pem, key_file: " FX "client.key, client_ca_file: " FX "ca.pem}\n"
	         "    max_concurrent_calls: 8\n"
	         "    authorization:\n"
	         "      default: ALLOW_AUTHENTICATED\n"
	         "      rules:\n"
	         "        - principals: [\"spiffe://cluster.local/ns/shop/*\"]\n"
	         "          methods: [\"/shop.Cart/*\", \"/shop.Pay/Charge\"]\n"
	         "        - methods: [\"/grpc.health.v1.Health/Check\"]\n",
	         srcdir(), srcdir(), srcdir());
	cfg = load_ok(yaml);
	ck_assert_uint_eq(cfg->n_routed, 0);
	ck_assert_uint_eq(cfg->n_services, 1);
	ck_assert_uint_eq(cfg->n_inbound, 1);
	const struct mtd_cfg_inbound *in = &cfg->inbound[0];
	ck_assert_str_eq(in->listen.text, "127.0.0.1:15443");
	ck_assert_str_eq(in->app.text, "127.0.0.1:50051");
	ck_assert_uint_eq(in->max_concurrent_calls, 8);
	ck_assert_uint_eq(in->max_connections, 1024); /* its own, apart from downstream's */
	ck_assert_int_eq(in->max_connection_age_ms, 0);
	ck_assert_int_eq(in->authz.def, MTD_AUTHZ_ALLOW_AUTHENTICATED);
	ck_assert_uint_eq(in->authz.n_rules, 2);
	ck_assert_uint_eq(in->authz.rules[0].n_methods, 2);
	ck_assert_uint_eq(in->authz.rules[1].n_principals, 0);
	ck_assert_ptr_nonnull(in->client_ca_file);
	const struct mtd_cfg_service *app = &cfg->services[in->service];
	ck_assert_int_eq(app->local->inbound, 0);
	ck_assert_str_eq(app->local->name, "inbound:127.0.0.1:15443");
	ck_assert_uint_eq(app->local->n_endpoints, 1);
	ck_assert_int_eq(app->local->fault.mode, MTD_FAULT_FAILFAST);
	mtd_cfg_free(cfg);

	/* Without a client CA, only ALLOW_ALL lets anyone in; unset is DENY. */
	snprintf(yaml, sizeof(yaml),
	         "services: [{name: a.B, endpoints: [{address: \"127.0.0.1:50052\"}],\n"
	         "            tls: {ca_file: " FX "ca.pem, server_identity: \"spiffe://x/y\"}}]\n"
	         "inbound:\n"
	         "  - listen: \"0.0.0.0:15443\"\n"
	         "    app: \"127.0.0.1:50051\"\n"
	         "    tls: {cert_file: " FX "client.pem, key_file: " FX "client.key}\n"
	         "  - listen: \"127.0.0.1:15444\"\n"
	         "    app: \"127.0.0.1:50053\"\n"
	         "    tls: {cert_file: " FX "client.pem, key_file: " FX "client.key}\n"
	         "    authorization: {default: ALLOW_ALL}\n"
	         "    max_connections: 7\n"
	         "    max_connection_age: 90s\n",
	         srcdir(), srcdir(), srcdir(), srcdir(), srcdir());
	cfg = load_ok(yaml);
	ck_assert_uint_eq(cfg->n_routed, 1);
	ck_assert_uint_eq(cfg->n_services, 3);
	ck_assert_str_eq(cfg->services[0].tls->server_identity, "spiffe://x/y");
	ck_assert(!cfg->services[0].tls->server_identity_registry);
	ck_assert_uint_eq(cfg->services[0].tls->n_allowed_identities, 0);
	ck_assert_int_eq(cfg->inbound[0].authz.def, MTD_AUTHZ_DENY);
	ck_assert_ptr_null(cfg->inbound[0].client_ca_file);
	ck_assert_int_eq(cfg->inbound[1].authz.def, MTD_AUTHZ_ALLOW_ALL);
	ck_assert_uint_eq(cfg->inbound[1].service, 2);
	ck_assert_uint_eq(cfg->inbound[1].max_connections, 7);
	ck_assert_int_eq(cfg->inbound[1].max_connection_age_ms, 90000);
	ck_assert_int_eq(cfg->services[2].local->inbound, 1);
	mtd_cfg_free(cfg);

	/* A register entry on an inbound listener's port advertises it (the
	 * wildcard listener: any host), and names its certificate. */
	snprintf(yaml, sizeof(yaml),
	         "inbound:\n"
	         "  - listen: \"0.0.0.0:15443\"\n"
	         "    app: \"127.0.0.1:50051\"\n"
	         "    tls: {cert_file: " FX "client.pem, key_file: " FX "client.key}\n"
	         "register:\n"
	         "  - {service: a.B, address: \"10.1.2.3:15443\", etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: /p/}}\n"
	         "  - {service: a.B, address: \"10.1.2.3:50051\", etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: /p/}}\n",
	         srcdir(), srcdir());
	cfg = load_ok(yaml);
	ck_assert_ptr_nonnull(cfg->registers[0].identity_cert);
	ck_assert(strstr(cfg->registers[0].identity_cert, "client.pem") != NULL);
	ck_assert_ptr_null(cfg->registers[1].identity_cert);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(err_inbound)
{
	char yaml[2048];

	expect_error("inbound:\n"
	             "  - app: \"127.0.0.1:50051\"\n",
	             "t.yaml:2:5: inbound[0].listen: is required (where the other sidecars connect, e.g. "
	             "\"0.0.0.0:15443\")");
	expect_error("inbound:\n"
	             "  - listen: \"127.0.0.1:15443\"\n",
	             "t.yaml:2:5: inbound[0].app: is required (the local app, h2c, e.g. \"127.0.0.1:50051\")");
	expect_error("inbound:\n"
	             "  - listen: \"127.0.0.1:15443\"\n"
	             "    app: \"127.0.0.1:50051\"\n",
	             "t.yaml:2:5: inbound[0].tls: is required*");
	snprintf(yaml, sizeof(yaml),
	         "listen: \"127.0.0.1:15001\"\n"
	         "inbound:\n"
	         "  - listen: \"0.0.0.0:15001\"\n"
	         "    app: \"127.0.0.1:15001\"\n"
	         "    tls: {cert_file: " FX "client.pem, key_file: " FX "client.key}\n"
	         "    authorization:\n"
	         "      default: ALLOW_AUTHENTICATED\n"
	         "      rules:\n"
	         "        - principals: [\"spiffe://*/x\"]\n"
	         "          methods: [\"/shop.Cart\"]\n"
	         "        - {}\n",
	         srcdir(), srcdir());
	const char *want[] = {
	        "t.yaml:3:13: inbound[0].listen: \"0.0.0.0:15001\" is also the listen address (127.0.0.1:15001)",
	        "t.yaml:4:10: inbound[0].app: \"127.0.0.1:15001\" is one of maitred's own listeners, not the app",
	        "t.yaml:7:16: inbound[0].authorization.default: ALLOW_AUTHENTICATED needs tls.client_ca_file*",
	        "t.yaml:9:11: inbound[0].authorization.rules[0]: a rule needs tls.client_ca_file*",
	        "t.yaml:9:23: inbound[0].authorization.rules[0].principals[0]: \"spiffe://*/x\": '*' may only end a "
	        "principal (a prefix)",
	        "t.yaml:10:20: inbound[0].authorization.rules[0].methods[0]: \"/shop.Cart\": a method is "
	        "\"/package.Service/Method\" or \"/package.Service/*\"",
	        "t.yaml:11:11: inbound[0].authorization.rules[1]: needs principals or methods*",
	        NULL};
	expect_errors_fmt("t.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_AUTO, want);
	/* Two inbound listeners on one port. */
	snprintf(yaml, sizeof(yaml),
	         "inbound:\n"
	         "  - {listen: \"127.0.0.1:15443\", app: \"127.0.0.1:1\", tls: {cert_file: " FX
	         "client.pem, key_file: " FX "client.key}}\n"
	         "  - {listen: \"0.0.0.0:15443\", app: \"127.0.0.1:2\", tls: {cert_file: " FX
	         "client.pem, key_file: " FX "client.key}}\n",
	         srcdir(), srcdir(), srcdir(), srcdir());
	expect_error(yaml, "t.yaml:3:14: inbound[1].listen: \"0.0.0.0:15443\" is also inbound[0].listen");
	/* One address, spelled by name and by number: one listener (a reload
	 * would keep one socket set for both and serve the first entry). */
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
	if (getaddrinfo("localhost", "15443", &hints, &res) == 0 && res->ai_family == AF_INET &&
	    ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK)) {
		snprintf(yaml, sizeof(yaml),
		         "inbound:\n"
		         "  - {listen: \"127.0.0.1:15443\", app: \"127.0.0.1:1\", tls: {cert_file: " FX
		         "client.pem, key_file: " FX "client.key}}\n"
		         "  - {listen: \"localhost:15443\", app: \"127.0.0.1:2\", tls: {cert_file: " FX
		         "client.pem, key_file: " FX "client.key}}\n",
		         srcdir(), srcdir(), srcdir(), srcdir());
		expect_error(yaml, "t.yaml:3:14: inbound[1].listen: \"localhost:15443\" is also inbound[0].listen");
	}
	if (res)
		freeaddrinfo(res);
	/* The listener's own connection limit and age. */
	snprintf(yaml, sizeof(yaml),
	         "inbound:\n"
	         "  - {listen: \"127.0.0.1:15443\", app: \"127.0.0.1:1\", tls: {cert_file: " FX
	         "client.pem, key_file: " FX "client.key},\n"
	         "     max_connections: 20000000, max_connection_age: -1s}\n",
	         srcdir(), srcdir());
	const char *want_limits[] = {
	        "t.yaml:3:23: inbound[0].max_connections: must be at most 16777216, got 20000000",
	        "t.yaml:3:53: inbound[0].max_connection_age: must not be negative", NULL};
	expect_errors_fmt("t.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_AUTO, want_limits);
	snprintf(yaml, sizeof(yaml),
	         "inbound:\n"
	         "  - {listen: \"127.0.0.1:15443\", app: \"127.0.0.1:1\", tls: {cert_file: " FX
	         "client.pem, key_file: " FX "client.key},\n"
	         "     max_connection_age: 500ms}\n",
	         srcdir(), srcdir());
	expect_error(yaml, "t.yaml:3:26: inbound[0].max_connection_age: must be at least 1s (connections are checked "
	                   "once a second), got 500 ms");
	/* Secure naming. */
	snprintf(yaml, sizeof(yaml),
	         "services:\n"
	         "  - name: a.B\n"
	         "    tls: {server_identity: FROM_REGISTRY, ca_file: " FX "ca.pem}\n" EP,
	         srcdir());
	expect_error(yaml, "t.yaml:3:28: services[0].tls.server_identity: FROM_REGISTRY needs discovery.etcd*");
	snprintf(yaml, sizeof(yaml),
	         "services:\n"
	         "  - name: a.B\n"
	         "    tls: {server_identity: \"spiffe://x/*\", ca_file: " FX "ca.pem}\n" EP,
	         srcdir());
	expect_error(yaml, "t.yaml:3:28: services[0].tls.server_identity: \"spiffe://x/*\" is not an identity*");
	/* Typed: a DNS name says "dns:"; an untyped one is refused. */
	snprintf(yaml, sizeof(yaml),
	         "services:\n"
	         "  - name: a.B\n"
	         "    tls: {server_identity: \"cart.shop.svc\", ca_file: " FX "ca.pem}\n" EP,
	         srcdir());
	expect_error(yaml, "t.yaml:3:28: services[0].tls.server_identity: \"cart.shop.svc\" is not an identity*");
	/* allowed_identities constrains FROM_REGISTRY's records only. */
	snprintf(yaml, sizeof(yaml),
	         "services:\n"
	         "  - name: a.B\n"
	         "    tls: {server_identity: \"dns:cart.shop.svc\", allowed_identities: [\"dns:*\"], ca_file: " FX
	         "ca.pem}\n" EP,
	         srcdir());
	expect_only(yaml, "t.yaml:3:69: services[0].tls.allowed_identities: constrains the identities registry records name: it "
	                  "needs server_identity: FROM_REGISTRY");
	snprintf(yaml, sizeof(yaml),
	         "services:\n"
	         "  - name: a.B\n"
	         "    tls: {server_identity: FROM_REGISTRY, allowed_identities: [\"spiffe://x/*\", \"spiffe*\"], "
	         "ca_file: " FX "ca.pem}\n"
	         "    discovery: {etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: \"/p/\"}}\n",
	         srcdir());
	expect_only(yaml, "t.yaml:3:63: services[0].tls.allowed_identities[1]: \"spiffe*\": a principal is a URI*");
	snprintf(yaml, sizeof(yaml),
	         "services:\n"
	         "  - name: a.B\n"
	         "    tls: {server_identity: FROM_REGISTRY, allowed_identities: [\"spiffe://x/*\", \"dns:*\"], "
	         "ca_file: " FX "ca.pem}\n"
	         "    discovery: {etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: \"/p/\"}}\n",
	         srcdir());
	struct mtd_cfg *cfg = load_ok(yaml);
	ck_assert(cfg->services[0].tls->server_identity_registry);
	ck_assert_uint_eq(cfg->services[0].tls->n_allowed_identities, 2);
	ck_assert_str_eq(cfg->services[0].tls->allowed_identities[1], "dns:*");
	mtd_cfg_free(cfg);
}
END_TEST

/* Config.register. */
START_TEST(register_ok)
{
	struct mtd_cfg *cfg =
	        load_ok("services:\n"
	                "  - name: a.B\n" EP "register:\n"
	                "  - service: shop.Cart\n"
	                "    address: \"10.1.2.3:8080\"\n"
	                "    etcd: {endpoints: [\"127.0.0.1:2379\", \"127.0.0.1:22379\"], prefix: /m/shop.Cart/}\n"
	                "  - service: shop.Pay\n"
	                "    address: \"[::1]:9090\"\n"
	                "    weight: 0\n"
	                "    ttl: 30s\n"
	                "    when_serving: true\n"
	                "    etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: /m/shop.Pay/}\n");

	ck_assert_uint_eq(cfg->n_registers, 2);
	ck_assert_str_eq(cfg->registers[0].service, "shop.Cart");
	ck_assert_str_eq(cfg->registers[0].address.text, "10.1.2.3:8080");
	ck_assert_uint_eq(cfg->registers[0].address.port, 8080);
	ck_assert_int_eq(cfg->registers[0].weight, 100);
	ck_assert_int_eq(cfg->registers[0].ttl_ms, 10000);
	ck_assert(!cfg->registers[0].when_serving);
	ck_assert_uint_eq(cfg->registers[0].etcd->n_endpoints, 2);
	ck_assert_str_eq(cfg->registers[0].etcd->prefix, "/m/shop.Cart/");
	ck_assert_int_eq(cfg->registers[1].weight, 0);
	ck_assert_int_eq(cfg->registers[1].ttl_ms, 30000);
	ck_assert(cfg->registers[1].when_serving);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(err_register)
{
	const char *svc = "services:\n  - name: a.B\n" EP "register:\n";
	char y[1024];

#define REG(body) (snprintf(y, sizeof(y), "%s%s", svc, body), y)
	expect_error(REG("  - {address: \"10.0.0.1:1\", etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: /p/}}\n"),
	             "t.yaml:5:5: register[0].service: is required *");
	expect_error(REG("  - {service: \"*\", address: \"10.0.0.1:1\", etcd: {endpoints: [\"127.0.0.1:2379\"], "
	                 "prefix: /p/}}\n"),
	             "t.yaml:5:15: register[0].service: \"*\" is not a gRPC service name");
	expect_error(REG("  - {service: a.B, etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: /p/}}\n"),
	             "t.yaml:5:5: register[0].address: is required *");
	expect_error(REG("  - {service: a.B, address: \"app.local:80\", etcd: {endpoints: [\"127.0.0.1:2379\"], "
	                 "prefix: /p/}}\n"),
	             "t.yaml:5:29: register[0].address: \"app.local\" is not an IP address");
	expect_error(REG("  - {service: a.B, address: \"10.0.0.1:1\", weight: 1000001, etcd: {endpoints: "
	                 "[\"127.0.0.1:2379\"], prefix: /p/}}\n"),
	             "t.yaml:5:51: register[0].weight: must be at most 1000000 *");
	expect_error(REG("  - {service: a.B, address: \"10.0.0.1:1\", ttl: 1500ms, etcd: {endpoints: "
	                 "[\"127.0.0.1:2379\"], prefix: /p/}}\n"),
	             "t.yaml:5:48: register[0].ttl: must be whole seconds in 2s..1h");
	expect_error(REG("  - {service: a.B, address: \"10.0.0.1:1\"}\n"),
	             "t.yaml:5:5: register[0].etcd: is required *");
	expect_error(REG("  - {service: a.B, address: \"10.0.0.1:1\", etcd: {endpoints: [\"127.0.0.1:2379\"]}}\n"),
	             "t.yaml:5:49: register[0].etcd.prefix: is required *");
	expect_error(REG("  - {service: a.B, address: \"10.0.0.1:1\", etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: "
	                 "/p/}}\n"
	                 "  - {service: a.C, address: \"10.0.0.1:1\", etcd: {endpoints: [\"127.0.0.1:2379\"], prefix: "
	                 "/p/}}\n"),
	             "t.yaml:6:29: register[1].address: \"10.0.0.1:1\" under prefix \"/p/\" is also register[0]");
#undef REG
}
END_TEST

START_TEST(ok_dns_source)
{
	struct mtd_cfg *cfg = load_ok("services:\n"
	                              "  - name: a.B\n"
	                              "    discovery:\n"
	                              "      dns: {name: a.example, port: 8080, resolvers: [\"127.0.0.1:5353\"]}\n");
	const struct mtd_cfg_service *s = &cfg->services[0];

	ck_assert_int_eq(s->local->source, MTD_CFG_SOURCE_DNS);
	ck_assert_uint_eq(s->local->n_endpoints, 0);
	ck_assert_ptr_nonnull(s->local->dns);
	ck_assert_str_eq(s->local->dns->name, "a.example");
	ck_assert_uint_eq(s->local->dns->port, 8080);
	ck_assert_int_eq(s->local->dns->refresh_ms, 5000);
	ck_assert_uint_eq(s->local->dns->n_resolvers, 1);
	ck_assert_uint_eq(s->local->dns->resolvers[0].port, 5353);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(err_duplicate_endpoint)
{
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    endpoints:\n"
	             "      - address: \"[::1]:50051\"\n"
	             "      - address: \"[0::1]:50051\"\n",
	             "t.yaml:5:18: services[0].endpoints[1].address: duplicate "
	             "endpoint \"[0::1]:50051\" (also endpoints[0])");
}
END_TEST

START_TEST(err_tls)
{
	char yaml[1024];

	snprintf(yaml, sizeof(yaml),
	         "services:\n"
	         "  - name: a.B\n"
	         "    tls:\n"
	         "      ca_file: %s/tests/unit/config/fixtures/certs/ca.pem\n"
	         "      cert_file: %s/tests/unit/config/fixtures/certs/client.pem\n" EP,
	         srcdir(), srcdir());
	expect_error(yaml, "t.yaml:5:18: services[0].tls.cert_file: cert_file and "
	                   "key_file must be set together (mTLS)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    tls:\n"
	             "      ca_file: /nonexistent/ca.pem\n" EP,
	             "t.yaml:4:16: services[0].tls.ca_file: cannot read "
	             "\"/nonexistent/ca.pem\": No such file or directory");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    tls:\n"
	             "      server_name: x\n" EP,
	             "t.yaml:4:7: services[0].tls.ca_file: is required when tls is set");
}
END_TEST

START_TEST(err_authority)
{
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    authority: \"user@host\"\n" EP,
	             "t.yaml:3:16: services[0].authority: \"user@host\" is neither FROM_ENDPOINT nor a "
	             "host[:port] authority (RFC 3986 §3.2, no userinfo)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    authority: \"a b\"\n" EP,
	             "t.yaml:3:16: services[0].authority: \"a b\" is neither FROM_ENDPOINT nor a "
	             "host[:port] authority (RFC 3986 §3.2, no userinfo)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    authority: \"host/path\"\n" EP,
	             "t.yaml:3:16: services[0].authority: \"host/path\" is neither FROM_ENDPOINT nor a "
	             "host[:port] authority (RFC 3986 §3.2, no userinfo)");
}
END_TEST

START_TEST(ok_authority)
{
	struct mtd_cfg *cfg = load_ok("services:\n"
	                              "  - name: a.B\n" EP "  - name: c.D\n"
	                              "    authority: \"api.internal:8443\"\n" EP "  - name: e.F\n"
	                              "    authority: FROM_ENDPOINT\n" EP "  - name: g.H\n"
	                              "    authority: \"[::1]:50051\"\n" EP);
	ck_assert_uint_eq(cfg->n_services, 4);
	ck_assert_ptr_null(cfg->services[0].local->authority);
	ck_assert(!cfg->services[0].local->authority_from_endpoint);
	ck_assert_str_eq(cfg->services[1].local->authority, "api.internal:8443");
	ck_assert(!cfg->services[1].local->authority_from_endpoint);
	ck_assert_ptr_null(cfg->services[2].local->authority);
	ck_assert(cfg->services[2].local->authority_from_endpoint);
	ck_assert_str_eq(cfg->services[3].local->authority, "[::1]:50051");
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(err_hash_key_on_round_robin)
{
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    hash_key:\n"
	             "      header: x-user\n" EP,
	             "t.yaml:4:7: services[0].hash_key: policy ROUND_ROBIN does not "
	             "use a hash key");
	expect_error("services:\n"
	             "  - name: a.B\n" EP "    methods:\n"
	             "      - name: Get\n"
	             "        hash_key: {field: \"1\"}\n",
	             "t.yaml:6:19: services[0].methods[0].hash_key: policy ROUND_ROBIN "
	             "does not use a hash key");
}
END_TEST

START_TEST(err_hashing_without_key)
{
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb:\n"
	             "      policy: CONSISTENT_HASH\n" EP,
	             "t.yaml:4:15: services[0].lb.policy: policy CONSISTENT_HASH needs "
	             "a hash_key (on the service or its methods)");
	expect_error("services:\n"
	             "  - name: a.B\n" EP "    methods:\n"
	             "      - name: Get\n"
	             "        lb: {policy: MAGLEV}\n",
	             "t.yaml:6:22: services[0].methods[0].lb.policy: policy MAGLEV "
	             "needs a hash_key (on the method or its service)");
}
END_TEST

START_TEST(err_hash_key_shape)
{
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CONSISTENT_HASH}\n"
	             "    hash_key:\n"
	             "      field: \"2..1\"\n" EP,
	             "t.yaml:5:14: services[0].hash_key.field: bad field path \"2..1\": "
	             "expected field numbers separated by '.', e.g. \"2.1\"");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CONSISTENT_HASH}\n"
	             "    hash_key:\n"
	             "      field: \"0\"\n" EP,
	             "t.yaml:5:14: services[0].hash_key.field: bad field path \"0\": "
	             "field number out of range 1..536870911");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CONSISTENT_HASH}\n"
	             "    hash_key:\n"
	             "      field: \"536870912\"\n" EP,
	             "t.yaml:5:14: services[0].hash_key.field: bad field path "
	             "\"536870912\": field number out of range 1..536870911");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CONSISTENT_HASH}\n"
	             "    hash_key:\n"
	             "      field: \"1.2.3.4.5.6.7.8.9\"\n" EP,
	             "t.yaml:5:14: services[0].hash_key.field: bad field path "
	             "\"1.2.3.4.5.6.7.8.9\": path deeper than 8 fields");
	/* The data plane's extractor (mtd_pbwire_path_parse) decides; config
	 * only explains. It refuses leading zeros, as it always did. */
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CONSISTENT_HASH}\n"
	             "    hash_key:\n"
	             "      field: \"2.01\"\n" EP,
	             "t.yaml:5:14: services[0].hash_key.field: bad field path "
	             "\"2.01\": field number \"01\" has a leading zero");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CONSISTENT_HASH}\n"
	             "    hash_key:\n"
	             "      field: \"2.\"\n" EP,
	             "t.yaml:5:14: services[0].hash_key.field: bad field path "
	             "\"2.\": expected field numbers separated by '.', e.g. \"2.1\"");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CONSISTENT_HASH}\n"
	             "    hash_key:\n"
	             "      field: \"3.19500\"\n" EP,
	             "t.yaml:5:14: services[0].hash_key.field: bad field path "
	             "\"3.19500\": field numbers 19000..19999 are reserved by "
	             "protobuf");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CONSISTENT_HASH}\n"
	             "    hash_key:\n"
	             "      header: \":authority\"\n" EP,
	             "t.yaml:5:15: services[0].hash_key.header: \":authority\" is a "
	             "pseudo-header; use a metadata key");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CONSISTENT_HASH}\n"
	             "    hash_key:\n"
	             "      header: \"x user\"\n" EP,
	             "t.yaml:5:15: services[0].hash_key.header: \"x user\" is not a "
	             "valid HTTP/2 field name (RFC 9110 §5.6.2)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CONSISTENT_HASH}\n"
	             "    hash_key:\n"
	             "      header: x\n"
	             "      field: \"1\"\n" EP,
	             "t.yaml:6:14: services[0].hash_key: set exactly one of header "
	             "or field, not both");
}
END_TEST

START_TEST(err_policy_options)
{
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: ROUND_ROBIN, choice_count: 3}\n" EP,
	             "t.yaml:3:45: services[0].lb.choice_count: policy ROUND_ROBIN "
	             "does not use choice_count");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: RANDOM, decay: 5s}\n" EP,
	             "t.yaml:3:33: services[0].lb.decay: policy RANDOM does not use decay");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: PEAK_EWMA, bounded_load_factor: 2}\n" EP,
	             "t.yaml:3:50: services[0].lb.bounded_load_factor: policy "
	             "PEAK_EWMA does not use bounded_load_factor");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    hash_key: {header: x}\n"
	             "    lb: {policy: MAGLEV, table_size: 65536}\n" EP,
	             "t.yaml:4:38: services[0].lb.table_size: must be a prime of at "
	             "most 5000011, got 65536");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    hash_key: {header: x}\n"
	             "    lb: {policy: MAGLEV, bounded_load_factor: 1.0}\n" EP,
	             "t.yaml:4:47: services[0].lb.bounded_load_factor: must be 0 "
	             "(unbounded) or greater than 1");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: LEAST_ACTIVE, hot_keys: {spread: 3}}\n" EP,
	             "t.yaml:3:42: services[0].lb.hot_keys: policy LEAST_ACTIVE "
	             "does not use hot_keys");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    hash_key: {header: x}\n"
	             "    lb: {policy: MAGLEV, hot_keys: {spread: 1}}\n" EP,
	             "t.yaml:4:45: services[0].lb.hot_keys.spread: must be in 2..16, got 1");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    warmup: {duration: 30s}\n" EP,
	             "t.yaml:3:13: services[0].warmup: policy ROUND_ROBIN does not "
	             "apply warmup");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    endpoints:\n"
	             "      - address: \"127.0.0.1:1\"\n"
	             "      - address: \"127.0.0.1:2\"\n"
	             "        weight: 50\n",
	             "t.yaml:6:17: services[0].endpoints[1].weight: policy ROUND_ROBIN "
	             "ignores endpoint weights (use a weighted policy)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: WEIGHTED_RANDOM}\n"
	             "    warmup: {duration: 30s, aggression: 2}\n" EP,
	             "t.yaml:4:41: services[0].warmup.aggression: applies only to "
	             "curve SLOW_START");
}
END_TEST

/* lib/lb's own ranges (mtd_lb_config_check) are config errors, said once,
 * at the value, with lib/lb's limits: values the loader used to accept and
 * the picker then refused at startup. */
START_TEST(err_lb_strategy_rules)
{
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    hash_key: {header: x}\n"
	            "    lb: {policy: CONSISTENT_HASH, ring_points: 10001}\n" EP,
	            "t.yaml:4:48: services[0].lb.ring_points: must be in 1..10000, "
	            "got 10001");
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    hash_key: {header: x}\n"
	            "    lb: {policy: MAGLEV, table_size: 16777259}\n" EP,
	            "t.yaml:4:38: services[0].lb.table_size: must be a prime of at "
	            "most 5000011, got 16777259");
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    lb: {policy: LEAST_REQUEST, active_request_bias: -0.5}\n" EP,
	            "t.yaml:3:54: services[0].lb.active_request_bias: must be a "
	            "finite number >= 0");
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    lb: {policy: LEAST_REQUEST, choice_count: 65}\n" EP,
	            "t.yaml:3:47: services[0].lb.choice_count: must be in 2..64, "
	            "got 65");
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    lb: {policy: LEAST_REQUEST, choice_count: 1}\n" EP,
	            "t.yaml:3:47: services[0].lb.choice_count: must be in 2..64, "
	            "got 1");
	/* a method's own block */
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    hash_key: {header: x}\n" EP "    methods:\n"
	            "      - name: Get\n"
	            "        lb:\n"
	            "          policy: CONSISTENT_HASH\n"
	            "          ring_points: 65536\n",
	            "t.yaml:9:24: services[0].methods[0].lb.ring_points: must be in "
	            "1..10000, got 65536");
	/* every refused field of one block, not only the first */
	{
		static const char yaml[] = "services:\n"
		                           "  - name: a.B\n"
		                           "    hash_key: {header: x}\n"
		                           "    lb:\n"
		                           "      policy: CONSISTENT_HASH\n"
		                           "      ring_points: 20000\n"
		                           "      bounded_load_factor: 0.5\n" EP;
		static const char *const want[] = {"t.yaml:6:20: services[0].lb.ring_points: must be in 1..10000, "
		                                   "got 20000",
		                                   "t.yaml:7:28: services[0].lb.bounded_load_factor: must be 0 "
		                                   "(unbounded) or greater than 1",
		                                   NULL};

		expect_errors_fmt("t.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_YAML, want);
	}
}
END_TEST

/* maglev.c needs a table slot per endpoint taking traffic; fewer used to
 * pass the loader and stop maitred with "out of memory". */
START_TEST(err_maglev_table_too_small)
{
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    hash_key: {header: x}\n"
	            "    lb: {policy: MAGLEV, table_size: 2}\n"
	            "    endpoints:\n"
	            "      - address: \"127.0.0.1:1\"\n"
	            "      - address: \"127.0.0.1:2\"\n"
	            "      - address: \"127.0.0.1:3\"\n",
	            "t.yaml:4:38: services[0].lb.table_size: 2 is smaller than the "
	            "3 endpoints taking traffic (policy MAGLEV needs a slot for "
	            "each); use a prime of at least 3, e.g. 3");
	/* the hint is the next size lib/lb accepts: a prime */
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    hash_key: {header: x}\n"
	            "    endpoints:\n"
	            "      - {address: \"127.0.0.1:1\", weight: 1}\n"
	            "      - {address: \"127.0.0.1:2\", weight: 1}\n"
	            "      - {address: \"127.0.0.1:3\", weight: 1}\n"
	            "      - {address: \"127.0.0.1:4\", weight: 1}\n"
	            "    methods:\n"
	            "      - name: Get\n"
	            "        lb: {policy: MAGLEV, table_size: 3}\n",
	            "t.yaml:11:42: services[0].methods[0].lb.table_size: 3 is "
	            "smaller than the 4 endpoints taking traffic (policy MAGLEV "
	            "needs a slot for each); use a prime of at least 4, e.g. 5");
	/* weight 0 takes no slot (unless every weight is 0) */
	{
		struct mtd_cfg *cfg = load_ok("services:\n"
		                              "  - name: a.B\n"
		                              "    hash_key: {header: x}\n"
		                              "    lb: {policy: MAGLEV, table_size: 2}\n"
		                              "    endpoints:\n"
		                              "      - {address: \"127.0.0.1:1\", weight: 0}\n"
		                              "      - address: \"127.0.0.1:2\"\n"
		                              "      - address: \"127.0.0.1:3\"\n");

		assert_pickers_build(cfg);
		mtd_cfg_free(cfg);
	}
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    hash_key: {header: x}\n"
	            "    lb: {policy: MAGLEV, table_size: 2}\n"
	            "    endpoints:\n"
	            "      - {address: \"127.0.0.1:1\", weight: 0}\n"
	            "      - {address: \"127.0.0.1:2\", weight: 0}\n"
	            "      - {address: \"127.0.0.1:3\", weight: 0}\n",
	            "t.yaml:4:38: services[0].lb.table_size: 2 is smaller than the "
	            "3 endpoints taking traffic (policy MAGLEV needs a slot for "
	            "each); use a prime of at least 3, e.g. 3");
	/* a method that inherits the service's block is not reported again */
	expect_only("services:\n"
	            "  - name: a.B\n"
	            "    hash_key: {header: x}\n"
	            "    lb: {policy: MAGLEV, table_size: 2}\n"
	            "    endpoints:\n"
	            "      - address: \"127.0.0.1:1\"\n"
	            "      - address: \"127.0.0.1:2\"\n"
	            "      - address: \"127.0.0.1:3\"\n"
	            "    methods:\n"
	            "      - name: Get\n",
	            "t.yaml:4:38: services[0].lb.table_size: *");
}
END_TEST

/* mtd_lb_picker_new() takes at most MTD_LB_MAX_ENDPOINTS endpoints. */
START_TEST(err_too_many_endpoints)
{
	static const char head[] = "services:\n  - name: a.B\n    endpoints: [";
	size_t n = MTD_LB_MAX_ENDPOINTS + 1, len = 0;
	char *yaml = malloc(sizeof(head) + 3 * n + 8);
	char want[128];

	ck_assert_ptr_nonnull(yaml);
	memcpy(yaml, head, sizeof(head) - 1);
	len = sizeof(head) - 1;
	for (size_t i = 0; i < n; i++) {
		memcpy(yaml + len, "{},", 3);
		len += 3;
	}
	memcpy(yaml + len - 1, "]\n", 3);
	snprintf(want, sizeof(want),
	         "t.yaml:3:16: services[0].endpoints: at most %u endpoints per "
	         "service, got %zu",
	         MTD_LB_MAX_ENDPOINTS, n);
	expect_only(yaml, want);
	free(yaml);
}
END_TEST

START_TEST(err_duplicate_method)
{
	expect_error("services:\n"
	             "  - name: a.B\n" EP "    methods:\n"
	             "      - name: Get\n"
	             "      - name: Get\n",
	             "t.yaml:6:15: services[0].methods[1].name: duplicate method "
	             "\"Get\" (also methods[0])");
}
END_TEST

START_TEST(err_all_collected_in_file_order)
{
	const char *yaml = "listn: x\n"
	                   "services:\n"
	                   "  - name: a.B\n"
	                   "    lb: {policy: NOPE}\n"
	                   "    endpoints: [{address: \"127.0.0.1\"}]\n"
	                   "  - name: a.B\n"
	                   "    endpoints: [{address: \"127.0.0.1:1\"}]\n";
	struct mtd_cfg *cfg;
	struct mtd_cfg_errors errs = {0};

	ck_assert_int_eq(mtd_cfg_load_buffer("t.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_YAML, &cfg, &errs), -EINVAL);
	ck_assert_uint_eq(errs.n, 4);
	ck_assert(matches(errs.msgs[0], "t.yaml:1:1: listn: unknown field *"));
	ck_assert(matches(errs.msgs[1], "t.yaml:4:18: services[0].lb.policy: unknown value \"NOPE\" *"));
	ck_assert(matches(errs.msgs[2], "t.yaml:5:27: services[0].endpoints[0].address: bad address *"));
	ck_assert(matches(errs.msgs[3], "t.yaml:6:11: services[1].name: duplicate service *"));
	mtd_cfg_errors_clear(&errs);
}
END_TEST

START_TEST(err_syntax)
{
	expect_error("services: [\n", "t.yaml:2:1: syntax error: *");
	expect_error("a: 1\n---\nb: 2\n", "t.yaml:3:1: only one YAML document is allowed");
}
END_TEST

START_TEST(err_binary)
{
	static const char *const garbage[] = {"t.bin: not a valid serialized maitred.config.v1.Config", NULL};
	static const char *const no_eps[] = {"t.pb: services[0].endpoints: a service needs exactly one endpoint "
	                                     "source: endpoints | discovery.etcd | discovery.dns | discovery.xds",
	                                     NULL};
	Maitred__Config__V1__Config c = MAITRED__CONFIG__V1__CONFIG__INIT;
	Maitred__Config__V1__Service s = MAITRED__CONFIG__V1__SERVICE__INIT;
	Maitred__Config__V1__Service *ss[] = {&s};
	uint8_t buf[256];
	size_t n;

	expect_errors_fmt("t.bin", "\xff\xff\xff\xff", 4, MTD_CFG_FORMAT_BINARY, garbage);
	s.name = (char *)"a.B";
	c.n_services = 1;
	c.services = ss;
	n = protobuf_c_message_pack(&c.base, buf);
	expect_errors_fmt("t.pb", buf, n, MTD_CFG_FORMAT_BINARY, no_eps);
}
END_TEST

START_TEST(err_file_missing)
{
	struct mtd_cfg *cfg;
	struct mtd_cfg_errors errs = {0};

	ck_assert_int_eq(mtd_cfg_load_file("/nonexistent/m.yaml", MTD_CFG_FORMAT_AUTO, &cfg, &errs), -ENOENT);
	ck_assert_ptr_null(cfg);
	ck_assert_uint_eq(errs.n, 1);
	ck_assert_str_eq(errs.msgs[0], "/nonexistent/m.yaml: cannot open: No such "
	                               "file or directory");
	mtd_cfg_errors_clear(&errs);
}
END_TEST

/* ---- positive ------------------------------------------------------------ */

START_TEST(ok_defaults)
{
	struct mtd_cfg *cfg = load_ok("services: [{name: \"*\", endpoints: "
	                              "[{address: \"127.0.0.1:50051\"}]}]\n");
	const struct mtd_cfg_service *s = &cfg->services[0];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	ck_assert_str_eq(cfg->source, "t.yaml");
	ck_assert_str_eq(cfg->listen.text, "127.0.0.1:15001");
	ck_assert_str_eq(cfg->listen.host, "127.0.0.1");
	ck_assert_uint_eq(cfg->listen.port, 15001);
	ck_assert_int_eq(cfg->listen.sa.sa.sa_family, AF_INET);
	ck_assert_ptr_null(cfg->admin);
	ck_assert_uint_eq(cfg->workers, cpus < 1 ? 1 : (unsigned)cpus);
	ck_assert_uint_eq(cfg->downstream.max_concurrent_streams, 1024);
	ck_assert_uint_eq(cfg->downstream.initial_window_size, 1u << 20);
	ck_assert_uint_eq(cfg->downstream.max_header_list_size, 65536);
	ck_assert_uint_eq(cfg->downstream.max_message_size, 64u << 20);
	ck_assert_uint_eq(cfg->downstream.reset_burst, 10000);
	ck_assert_uint_eq(cfg->downstream.reset_rate, 1000);
	ck_assert_int_eq(cfg->downstream.idle_timeout_ms, 600000);
	ck_assert_uint_eq(cfg->downstream.max_connections, 10000);
	ck_assert_int_eq(cfg->downstream.write_timeout_ms, 30000);
	ck_assert_int_eq(cfg->downstream.preface_timeout_ms, 10000);
	ck_assert_int_eq(cfg->downstream.header_timeout_ms, 10000);
	ck_assert_uint_eq(cfg->downstream.max_buffered_response, 64u << 20);
	ck_assert_int_eq(cfg->drain_timeout_ms, 15000);
	ck_assert_uint_eq(cfg->n_services, 1);
	ck_assert_str_eq(s->local->name, "*");
	ck_assert_str_eq(s->lb.ops->name, "ROUND_ROBIN");
	ck_assert_uint_eq(s->lb.choice_count, 2);
	ck_assert(s->lb.active_request_bias == 1.0);
	ck_assert_uint_eq(s->lb.ring_points, 160);
	ck_assert_uint_eq(s->lb.table_size, 65537);
	ck_assert(s->lb.bounded_load_factor == 0);
	ck_assert_int_eq(s->lb.decay_ms, 10000);
	ck_assert_int_eq(s->lb.warmup.duration_ms, 0);
	ck_assert_int_eq(s->lb.warmup.curve, MTD_LB_WARMUP_LINEAR);
	ck_assert(s->lb.warmup.aggression == 1.0);
	ck_assert(s->lb.warmup.min_weight_percent == 10);
	ck_assert_uint_eq(s->lb.n_workers, cfg->workers);
	ck_assert_int_eq(s->local->hash_key.kind, MTD_CFG_HASH_NONE);
	ck_assert_ptr_null(s->tls);
	ck_assert_uint_eq(s->local->n_endpoints, 1);
	ck_assert_int_eq(s->local->endpoints[0].weight, 100);
	ck_assert_uint_eq(s->local->endpoints[0].addr.port, 50051);
	ck_assert_uint_eq(s->n_methods, 0);
	ck_assert_int_eq(s->upstream.connect_timeout_ms, 2000);
	ck_assert_int_eq(s->upstream.idle_timeout_ms, 300000);
	ck_assert_int_eq(s->upstream.keepalive_interval_ms, 30000);
	ck_assert_int_eq(s->upstream.keepalive_timeout_ms, 10000);
	ck_assert_uint_eq(s->upstream.max_connections, 4);
	ck_assert_uint_eq(s->upstream.max_concurrent_streams, 1000);
	ck_assert_uint_eq(s->upstream.max_pending, 1024);
	ck_assert_int_eq(s->upstream.write_timeout_ms, 30000);
	ck_assert_int_eq(s->upstream.max_connection_age_ms, 0);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(ok_yaml_values2)
{
	struct mtd_cfg *cfg = load_ok("listen: \"[::1]:15001\"\n"
	                              "admin: \"localhost:15000\"\n"
	                              "workers: \"3\"\n"
	                              "drain_timeout: 1m30s\n"
	                              "downstream: {initial_window_size: 2147483647, idle_timeout: 250ms,\n"
	                              "  max_connections: 7, write_timeout: 2s, preface_timeout: 300ms,\n"
	                              "  header_timeout: 1.5s}\n"
	                              "services:\n"
	                              "  - name: grpc.testing.TestService\n"
	                              "    lb: {policy: 10}\n"
	                              "    endpoints: &eps\n"
	                              "      - address: \"127.0.0.1:50051\"\n"
	                              "        weight: 0\n"
	                              "      - {address: \"127.0.0.1:50052\", weight: 300}\n"
	                              "    upstream: {keepalive_interval: 0s, connect_timeout: 1.5s,\n"
	                              "      write_timeout: 4s, max_connection_age: 10m}\n"
	                              "  - name: other.Svc\n"
	                              "    endpoints: *eps\n"
	                              "    lb: {policy: SMOOTH_WEIGHTED_ROUND_ROBIN}\n"
	                              "    warmup: {duration: 2m, curve: SLOW_START, aggression: 0.5, "
	                              "min_weight_percent: 25}\n");
	const struct mtd_cfg_service *s0 = &cfg->services[0], *s1 = &cfg->services[1];

	ck_assert_int_eq(cfg->listen.sa.sa.sa_family, AF_INET6);
	ck_assert_str_eq(cfg->listen.host, "::1");
	ck_assert_ptr_nonnull(cfg->admin);
	ck_assert_str_eq(cfg->admin->host, "localhost");
	ck_assert_uint_eq(cfg->admin->port, 15000);
	ck_assert_uint_eq(cfg->workers, 3);
	ck_assert_int_eq(cfg->drain_timeout_ms, 90000);
	ck_assert_uint_eq(cfg->downstream.initial_window_size, 2147483647u);
	ck_assert_int_eq(cfg->downstream.idle_timeout_ms, 250);
	/* The response budget follows a stream window larger than its default. */
	ck_assert_uint_eq(cfg->downstream.max_buffered_response, 2147483647u);
	ck_assert_uint_eq(cfg->downstream.max_connections, 7);
	ck_assert_int_eq(cfg->downstream.write_timeout_ms, 2000);
	ck_assert_int_eq(cfg->downstream.preface_timeout_ms, 300);
	ck_assert_int_eq(cfg->downstream.header_timeout_ms, 1500);
	ck_assert_str_eq(s0->lb.ops->name, "SHORTEST_RESPONSE");
	ck_assert_uint_eq(s0->lb.n_workers, 3);
	ck_assert_int_eq(s0->local->endpoints[0].weight, 0);
	ck_assert_int_eq(s0->local->endpoints[1].weight, 300);
	ck_assert_int_eq(s0->upstream.keepalive_interval_ms, 30000);
	ck_assert_int_eq(s0->upstream.connect_timeout_ms, 1500);
	ck_assert_int_eq(s0->upstream.write_timeout_ms, 4000);
	ck_assert_int_eq(s0->upstream.max_connection_age_ms, 600000);
	ck_assert_uint_eq(s1->local->n_endpoints, 2);
	ck_assert_int_eq(s1->local->endpoints[1].weight, 300);
	ck_assert_int_eq(s1->lb.warmup.duration_ms, 120000);
	ck_assert_int_eq(s1->lb.warmup.curve, MTD_LB_WARMUP_SLOW_START);
	ck_assert(s1->lb.warmup.aggression == 0.5);
	ck_assert(s1->lb.warmup.min_weight_percent == 25);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(ok_routing_layer_options)
{
	struct mtd_cfg *cfg;
	const struct mtd_cfg_service *s0;
	const struct mtd_cfg_endpoint *e1;
	static const char yaml[] = "zone: eu-1a\n"
	                           "node_id: pod-7\n"
	                           "services:\n"
	                           "  - name: a.B\n"
	                           "    subset: {size: 25}\n"
	                           "    routing: {header: X-Canary, metadata_key: version, fallback: FAIL}\n"
	                           "    endpoints:\n"
	                           "      - address: \"127.0.0.1:1\"\n"
	                           "      - address: \"127.0.0.1:2\"\n"
	                           "        zone: eu-1b\n"
	                           "        metadata: {version: v2, team: cart}\n"
	                           "    methods:\n"
	                           "      - name: Get\n"
	                           "        routing: {header: x-tag, metadata_key: tag}\n"
	                           "      - name: Put\n"
	                           "  - name: c.D\n"
	                           "    locality: {mode: STRICT, min_healthy_percent: 50}\n" EP;

	cfg = load_ok(yaml);
	s0 = &cfg->services[0];
	e1 = &s0->local->endpoints[1];
	ck_assert_str_eq(cfg->zone, "eu-1a");
	ck_assert_str_eq(cfg->node_id, "pod-7");
	ck_assert_uint_eq(s0->local->layer.subset.size, 25);
	ck_assert_int_eq(s0->local->layer.locality, MTD_LB_LOCALITY_PREFER_LOCAL); /* the default with a zone */
	ck_assert(s0->local->layer.min_healthy_percent == 70);
	ck_assert_str_eq(s0->local->layer.zone, "eu-1a");
	ck_assert_str_eq(s0->local->layer.node_id, "pod-7");
	ck_assert_str_eq(s0->local->routing.header, "x-canary");
	ck_assert_str_eq(s0->local->layer.metadata_key, "version");
	ck_assert(s0->local->layer.fallback_fail);
	ck_assert_ptr_null(s0->local->endpoints[0].zone);
	ck_assert_str_eq(e1->zone, "eu-1b");
	ck_assert_uint_eq(e1->n_meta, 2);
	ck_assert_str_eq(e1->meta[0].key, "team"); /* sorted by key */
	ck_assert_str_eq(e1->meta[1].value, "v2");
	/* methods sorted by name: Get has its own routing, Put the service's */
	ck_assert_str_eq(s0->methods[0].routing.header, "x-tag");
	ck_assert_str_eq(s0->methods[0].layer.metadata_key, "tag");
	ck_assert(!s0->methods[0].layer.fallback_fail);
	ck_assert_uint_eq(s0->methods[0].layer.subset.size, 25);
	ck_assert_str_eq(s0->methods[1].routing.header, "x-canary");
	ck_assert_int_eq(cfg->services[1].local->layer.locality, MTD_LB_LOCALITY_STRICT);
	ck_assert(cfg->services[1].local->layer.min_healthy_percent == 50);
	mtd_cfg_free(cfg);

	/* Without a zone: locality off; node_id is the host name. */
	cfg = load_ok("services:\n  - name: a.B\n" EP);
	ck_assert_ptr_null(cfg->zone);
	ck_assert_ptr_nonnull(cfg->node_id);
	ck_assert_int_eq(cfg->services[0].local->layer.locality, MTD_LB_LOCALITY_OFF);
	mtd_cfg_free(cfg);
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    locality: {mode: STRICT}\n" EP,
	             "t.yaml:3:22: services[0].locality.mode: needs the top-level zone (this sidecar's zone)");
	expect_error("zone: z\n"
	             "services:\n"
	             "  - name: a.B\n"
	             "    locality: {min_healthy_percent: 120}\n" EP,
	             "t.yaml:4:37: services[0].locality.min_healthy_percent: must be in 0..100");
	/* subset.mode: RING with index and count; the default is
	 * RING once count is set, RENDEZVOUS without. */
	cfg = load_ok("services:\n"
	              "  - name: a.B\n"
	              "    subset: {size: 25, mode: RING, index: 0, count: 100}\n" EP "  - name: c.D\n"
	              "    subset: {size: 25, index: 99, count: 100}\n" EP "  - name: e.F\n"
	              "    subset: {size: 25}\n" EP);
	ck_assert_int_eq(cfg->services[0].local->layer.subset.mode, MTD_LB_SUBSET_RING);
	ck_assert_uint_eq(cfg->services[0].local->layer.subset.index, 0);
	ck_assert_uint_eq(cfg->services[0].local->layer.subset.count, 100);
	ck_assert_int_eq(cfg->services[1].local->layer.subset.mode, MTD_LB_SUBSET_RING);
	ck_assert_uint_eq(cfg->services[1].local->layer.subset.index, 99);
	ck_assert_int_eq(cfg->services[2].local->layer.subset.mode, MTD_LB_SUBSET_RENDEZVOUS);
	ck_assert_uint_eq(cfg->services[2].local->layer.subset.size, 25);
	mtd_cfg_free(cfg);
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    subset: {size: 25, mode: RING, count: 10}\n" EP,
	             "t.yaml:3:43: services[0].subset.index: is required with mode RING (this sidecar's index, 0 .. "
	             "count - 1)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    subset: {size: 25, mode: RING, index: 3}\n" EP,
	             "t.yaml:3:30: services[0].subset.count: is required with mode RING (how many sidecars share the "
	             "service)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    subset: {size: 25, index: 10, count: 10}\n" EP,
	             "t.yaml:3:31: services[0].subset.index: 10 is not below count (10)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    subset: {size: 25, index: 3}\n" EP,
	             "t.yaml:3:31: services[0].subset.index: needs count (how many sidecars share the service)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    subset: {size: 25, mode: RENDEZVOUS, count: 10}\n" EP,
	             "t.yaml:3:49: services[0].subset.count: is for mode RING (RENDEZVOUS places this sidecar by "
	             "node_id)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    subset: {mode: RING, index: 0, count: 10}\n" EP,
	             "t.yaml:3:13: services[0].subset.size: is required with mode, index or count (0 keeps every "
	             "endpoint)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    subset: {size: 25, mode: ROUNDS}\n" EP,
	             "t.yaml:3:30: services[0].subset.mode: unknown value \"ROUNDS\" (expected one of "
	             "MODE_UNSPECIFIED, RENDEZVOUS, RING)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    routing: {metadata_key: version}\n" EP,
	             "t.yaml:3:14: services[0].routing.header: is required (the request metadata key carrying the "
	             "tag)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    routing: {header: \":path\", metadata_key: v}\n" EP,
	             "t.yaml:3:23: services[0].routing.header: \":path\" is a pseudo-header; use a metadata key");
}
END_TEST

/* ---- traffic policy ------------------------------------------------------- */

START_TEST(ok_traffic_policy)
{
	struct mtd_cfg *cfg = load_ok("routes:\n"
	                              "  - match: {service: a.B, method: Get, header: {name: X-Tenant, value: acme}}\n"
	                              "    to: beta-pool\n"
	                              "  - match: {service: \"*\", header: {name: x-beta, prefix: \"on\"}}\n"
	                              "    to: beta-pool\n"
	                              "  - match: {service: a.B, header: {name: x-any, present: true}}\n"
	                              "    to: a.B\n"
	                              "  - match: {service: a.B, header: {name: x-e, value: \"\"}}\n"
	                              "    to: beta-pool\n"
	                              "services:\n"
	                              "  - name: a.B\n"
	                              "    routing: {header: x-canary, metadata_key: version}\n"
	                              "    split:\n"
	                              "      metadata_key: version\n"
	                              "      weights: {v2: 10, v1: 90}\n"
	                              "      guard: {max_p99_ratio: 0, min_calls: 50, window: 10s}\n"
	                              "    rate_limit: {calls_per_second: 50}\n"
	                              "    mirror: {service: beta-pool, percent: 12.5}\n"
	                              "    fault_injection:\n"
	                              "      abort: {status: UNAVAILABLE}\n"
	                              "      delay: {percent: 50, duration: 100ms}\n"
	                              "    methods:\n"
	                              "      - name: Put\n"
	                              "        rate_limit: {calls_per_second: 5, burst: 2}\n"
	                              "        split: {metadata_key: version, weights: {v1: 1}}\n"
	                              "        fault_injection: {abort: {percent: 20, status: INTERNAL}}\n"
	                              "      - name: Get\n" EP "  - name: beta-pool\n" EP);
	const struct mtd_cfg_service *s = &cfg->services[0];

	ck_assert_uint_eq(cfg->n_routes, 4);
	ck_assert_str_eq(cfg->routes[0].service, "a.B");
	ck_assert_str_eq(cfg->routes[0].method, "Get");
	ck_assert_str_eq(cfg->routes[0].header, "x-tenant"); /* lower-cased */
	ck_assert_int_eq(cfg->routes[0].kind, MTD_ROUTE_HEADER_VALUE);
	ck_assert_str_eq(cfg->routes[0].value, "acme");
	ck_assert_int_eq(cfg->routes[0].to, 1);
	ck_assert_ptr_null(cfg->routes[1].method);
	ck_assert_int_eq(cfg->routes[1].kind, MTD_ROUTE_HEADER_PREFIX);
	ck_assert_int_eq(cfg->routes[2].kind, MTD_ROUTE_HEADER_PRESENT);
	ck_assert_int_eq(cfg->routes[2].to, 0);
	ck_assert_int_eq(cfg->routes[3].kind, MTD_ROUTE_HEADER_VALUE);
	ck_assert_uint_eq(cfg->routes[3].value_len, 0);
	ck_assert(!cfg->services[1].local->by_path);
	/* split: weights sorted by value, guard defaults where unset. */
	ck_assert_ptr_nonnull(s->local->split);
	ck_assert_uint_eq(s->local->split->lb.n, 2);
	ck_assert_str_eq(s->local->split->lb.weights[0].value, "v1");
	ck_assert_uint_eq(s->local->split->lb.weights[0].weight, 90);
	ck_assert(s->local->split->lb.guard.on);
	ck_assert_double_eq(s->local->split->lb.guard.max_error_ratio, 2.0);
	ck_assert_double_eq(s->local->split->lb.guard.max_p99_ratio, 0.0);
	ck_assert_uint_eq(s->local->split->lb.guard.min_calls, 50);
	ck_assert_int_eq(s->local->split->lb.guard.window_ms, 10000);
	ck_assert_ptr_eq(s->local->layer.split, &s->local->split->lb);
	ck_assert_str_eq(s->local->layer.metadata_key, "version");
	/* rate_limit: burst defaults to the rate. */
	ck_assert(s->local->rate_limit.set);
	ck_assert_uint_eq(s->local->rate_limit.per_second, 50);
	ck_assert_uint_eq(s->local->rate_limit.burst, 50);
	ck_assert_int_eq(s->local->mirror, 1);
	ck_assert_double_eq(s->local->mirror_percent, 12.5);
	ck_assert(s->local->fault_injection.abort);
	ck_assert_double_eq(s->local->fault_injection.abort_percent, 100.0);
	ck_assert_int_eq(s->local->fault_injection.abort_status, 14);
	ck_assert(s->local->fault_injection.delay);
	ck_assert_double_eq(s->local->fault_injection.delay_percent, 50.0);
	ck_assert_int_eq(s->local->fault_injection.delay_ms, 100);
	/* Methods sorted by name: Get inherits, Put has its own. */
	const struct mtd_cfg_method *get = mtd_cfg_service_method(s, "Get", 3);
	const struct mtd_cfg_method *put = mtd_cfg_service_method(s, "Put", 3);
	ck_assert_ptr_eq(get->split, s->local->split);
	ck_assert_ptr_eq(get->layer.split, &s->local->split->lb);
	ck_assert(!get->rate_limit.set);
	ck_assert(get->fault_injection.delay);
	ck_assert(put->split_own);
	ck_assert_ptr_eq(put->layer.split, &put->split->lb);
	ck_assert(put->rate_limit.set);
	ck_assert_uint_eq(put->rate_limit.burst, 2);
	ck_assert(put->fault_injection.abort);
	ck_assert(!put->fault_injection.delay);
	ck_assert_int_eq(put->fault_injection.abort_status, 13);
	ck_assert_int_eq(cfg->services[1].local->mirror, -1);
	assert_pickers_build(cfg);
	mtd_cfg_free(cfg);
	/* A split alone: its key makes the layer's groups. */
	cfg = load_ok("services:\n  - name: a.B\n    split: {metadata_key: tier, weights: {gold: 1}}\n" EP);
	ck_assert_str_eq(cfg->services[0].local->layer.metadata_key, "tier");
	ck_assert_ptr_null(cfg->services[0].local->routing.header);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(err_traffic_policy)
{
	/* An unknown `to` and mirror: FILE:LINE:COL. */
	expect_error("routes:\n"
	             "  - match: {service: a.B}\n"
	             "    to: nowhere\n"
	             "services:\n"
	             "  - name: a.B\n" EP,
	             "t.yaml:3:9: routes[0].to: no services[] entry is named \"nowhere\"");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    mirror: {service: b.C}\n" EP,
	             "t.yaml:3:23: services[0].mirror.service: no services[] entry is named \"b.C\"");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    mirror: {service: a.B}\n" EP,
	             "t.yaml:3:23: services[0].mirror.service: \"a.B\" is this entry: a mirror goes to another");
	/* Any name only for an entry something reaches. */
	expect_error("services:\n"
	             "  - name: beta-pool\n" EP,
	             "t.yaml:2:11: services[0].name: \"beta-pool\" is not a fully-qualified gRPC service name *");
	expect_error("routes:\n"
	             "  - to: a.B\n"
	             "services:\n"
	             "  - name: a.B\n" EP,
	             "t.yaml:2:5: routes[0].match: is required *");
	expect_error("routes:\n"
	             "  - match: {service: a.B, header: {name: x-t}}\n"
	             "    to: a.B\n"
	             "services:\n"
	             "  - name: a.B\n" EP,
	             "t.yaml:2:35: routes[0].match.header: needs one of value, prefix, present");
	expect_error("routes:\n"
	             "  - match: {service: a.B, header: {name: x-t, value: a, prefix: b}}\n"
	             "    to: a.B\n"
	             "services:\n"
	             "  - name: a.B\n" EP,
	             "t.yaml:2:65: routes[0].match.header.prefix: only one field of its oneof may be set");
	expect_error("routes:\n"
	             "  - match: {service: a.B, header: {name: \":path\", present: true}}\n"
	             "    to: a.B\n"
	             "services:\n"
	             "  - name: a.B\n" EP,
	             "t.yaml:2:42: routes[0].match.header.name: \":path\" is a pseudo-header; use a metadata key");
	/* split */
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    split: {metadata_key: version, weights: {v1: 0, v2: 0}}\n" EP,
	             "t.yaml:3:45: services[0].split.weights: the weights sum to 0: no group would take a call");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    split: {weights: {v1: 1}}\n" EP,
	             "t.yaml:3:12: services[0].split.metadata_key: is required *");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    routing: {header: x-c, metadata_key: tier}\n"
	             "    split: {metadata_key: version, weights: {v1: 1}}\n" EP,
	             "t.yaml:4:12: services[0].split.metadata_key: \"version\" differs from routing.metadata_key "
	             "\"tier\": a pinned value must name a split group");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    split: {metadata_key: v, weights: {a: 1}, guard: {max_error_ratio: 0.5}}\n" EP,
	             "t.yaml:3:72: services[0].split.guard.max_error_ratio: must be more than 1 (or 0: this rule off)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    split: {metadata_key: v, weights: {a: 1}, guard: {window: 2h}}\n" EP,
	             "t.yaml:3:63: services[0].split.guard.window: must be in 1s..1h");
	/* rate_limit, fault_injection, mirror */
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    rate_limit: {burst: 5}\n" EP,
	             "t.yaml:3:17: services[0].rate_limit.calls_per_second: is required (1..1000000)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    rate_limit: {calls_per_second: 2000000}\n" EP,
	             "t.yaml:3:36: services[0].rate_limit.calls_per_second: must be in 1..1000000, got 2000000");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    fault_injection: {abort: {percent: 10}}\n" EP,
	             "t.yaml:3:30: services[0].fault_injection.abort.status: is required, and not OK *");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    fault_injection: {delay: {percent: 101, duration: 1s}}\n" EP,
	             "t.yaml:3:40: services[0].fault_injection.delay.percent: must be in 0..100");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    fault_injection: {delay: {percent: 1}}\n" EP,
	             "t.yaml:3:30: services[0].fault_injection.delay.duration: is required *");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    fault_injection: {}\n" EP,
	             "t.yaml:3:22: services[0].fault_injection: needs abort or delay (or both)");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    mirror: {service: c.D, percent: -1}\n" EP "  - name: c.D\n" EP,
	             "t.yaml:3:37: services[0].mirror.percent: must be in 0..100");
}
END_TEST

START_TEST(err_lb_orca)
{
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: ROUND_ROBIN, orca: {}}\n" EP,
	             "t.yaml:3:*: services[0].lb.orca: policy ROUND_ROBIN does not use orca");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CLIENT_SIDE_WEIGHTED_ROUND_ROBIN, orca: {out_of_band: true, oob_reporting_period: 50ms}}\n" EP,
	             "t.yaml:3:*: services[0].lb.orca.oob_reporting_period: must be at least 100ms, got 50ms");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CLIENT_SIDE_WEIGHTED_ROUND_ROBIN, orca: {oob_reporting_period: 0s}}\n" EP,
	             "t.yaml:3:*: services[0].lb.orca.oob_reporting_period: *");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CLIENT_SIDE_WEIGHTED_ROUND_ROBIN, orca: {weight_update_period: 50ms}}\n" EP,
	             "t.yaml:3:*: services[0].lb.orca.weight_update_period: must be at least 100ms, got 50ms");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CLIENT_SIDE_WEIGHTED_ROUND_ROBIN, orca: {weight_expiration_period: 0s}}\n" EP,
	             "t.yaml:3:*: services[0].lb.orca.weight_expiration_period: *");
	expect_error("services:\n"
	             "  - name: a.B\n"
	             "    lb: {policy: CLIENT_SIDE_WEIGHTED_ROUND_ROBIN, orca: {error_utilization_penalty: -1}}\n" EP,
	             "t.yaml:3:*: services[0].lb.orca.error_utilization_penalty: must be a finite number >= 0, got -1");
}
END_TEST

START_TEST(ok_lb_orca)
{
	struct mtd_cfg *cfg =
	        load_ok("services:\n"
	                "  - name: a.B\n"
	                "    lb: {policy: CLIENT_SIDE_WEIGHTED_ROUND_ROBIN, orca: {blackout_period: 0s,\n"
	                "         weight_expiration_period: 3s, weight_update_period: 100ms,\n"
	                "         error_utilization_penalty: 0.5, out_of_band: true, oob_reporting_period: 250ms}}\n" EP
	                "  - name: c.D\n"
	                "    lb: {policy: CLIENT_SIDE_WEIGHTED_ROUND_ROBIN}\n" EP);
	const struct mtd_lb_orca_config *o = &cfg->services[0].lb.orca, *d = &cfg->services[1].lb.orca;

	ck_assert(o->blackout_ms == 0 && o->expiration_ms == 3000 && o->update_ms == 100 && o->error_penalty == 0.5);
	ck_assert(o->out_of_band && o->oob_period_ms == 250);
	ck_assert(d->blackout_ms == 10000 && d->expiration_ms == 180000 && d->update_ms == 1000 &&
	          d->error_penalty == 1.0 && !d->out_of_band && d->oob_period_ms == 10000);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(ok_lb_fleet_options)
{
	struct mtd_cfg *cfg =
	        load_ok("services:\n"
	                "  - name: a.B\n"
	                "    hash_key: {header: x-user}\n"
	                "    lb: {policy: CONSISTENT_HASH, hot_keys: {threshold_per_second: 250, spread: 4}}\n"
	                "    warmup: {duration: 30s}\n" EP "  - name: c.D\n"
	                "    hash_key: {header: x-user}\n"
	                "    lb: {policy: MAGLEV, hot_keys: {}}\n" EP);

	ck_assert_uint_eq(cfg->services[0].lb.hot_keys.threshold_per_second, 250);
	ck_assert_uint_eq(cfg->services[0].lb.hot_keys.spread, 4);
	/* Ring policies take warmup now. */
	ck_assert_int_eq(cfg->services[0].lb.warmup.duration_ms, 30000);
	/* An empty block: the documented defaults. */
	ck_assert_uint_eq(cfg->services[1].lb.hot_keys.threshold_per_second, 100);
	ck_assert_uint_eq(cfg->services[1].lb.hot_keys.spread, 3);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(ok_lower_camel)
{
	struct mtd_cfg *cfg =
	        load_ok("drainTimeout: 2s\n"
	                "downstream: {maxConcurrentStreams: 7, initialWindowSize: 65535}\n"
	                "services:\n"
	                "  - name: a.B\n"
	                "    lb: {policy: LEAST_REQUEST, choiceCount: 5, activeRequestBias: 0.5}\n"
	                "    hashKey: {header: X-Tenant, onMissing: FAIL}\n"
	                "    endpoints: [{address: \"127.0.0.1:1\"}]\n"
	                "    methods:\n"
	                "      - name: Get\n"
	                "        lb: {policy: CONSISTENT_HASH, ringPoints: 10, boundedLoadFactor: 1.5}\n");
	const struct mtd_cfg_service *s = &cfg->services[0];
	const struct mtd_cfg_method *m = mtd_cfg_service_method(s, "Get", 3);

	ck_assert_int_eq(cfg->drain_timeout_ms, 2000);
	ck_assert_uint_eq(cfg->downstream.max_concurrent_streams, 7);
	ck_assert_uint_eq(cfg->downstream.initial_window_size, 65535);
	ck_assert_uint_eq(s->lb.choice_count, 5);
	ck_assert(s->lb.active_request_bias == 0.5);
	ck_assert_int_eq(s->local->hash_key.kind, MTD_CFG_HASH_HEADER);
	ck_assert_str_eq(s->local->hash_key.header, "x-tenant");
	ck_assert(s->local->hash_key.fail_on_missing);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(m->lb.ops->name, "CONSISTENT_HASH");
	ck_assert_uint_eq(m->lb.ring_points, 10);
	ck_assert(m->lb.bounded_load_factor == 1.5);
	ck_assert_str_eq(m->hash_key.header, "x-tenant");
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(ok_method_inheritance)
{
	struct mtd_cfg *cfg = load_ok("services:\n"
	                              "  - name: a.B\n"
	                              "    lb: {policy: CONSISTENT_HASH, ring_points: 50}\n"
	                              "    hash_key: {header: X-User}\n"
	                              "    endpoints: [{address: \"127.0.0.1:1\", weight: 5}]\n"
	                              "    methods:\n"
	                              "      - name: M2\n"
	                              "        hash_key: {field: \"2.1\", on_missing: FAIL}\n"
	                              "      - name: M1\n"
	                              "      - name: M3\n"
	                              "        lb: {policy: ROUND_ROBIN}\n");
	const struct mtd_cfg_service *s = &cfg->services[0];
	const struct mtd_cfg_method *m1, *m2, *m3;

	ck_assert_uint_eq(s->n_methods, 3);
	/* sorted by name for the per-call binary search */
	ck_assert_str_eq(s->methods[0].name, "M1");
	ck_assert_str_eq(s->methods[2].name, "M3");
	m1 = mtd_cfg_service_method(s, "M1xyz", 2); /* not NUL-terminated */
	m2 = mtd_cfg_service_method(s, "M2", 2);
	m3 = mtd_cfg_service_method(s, "M3", 2);
	ck_assert_ptr_null(mtd_cfg_service_method(s, "M", 1));
	ck_assert_ptr_null(mtd_cfg_service_method(s, "M4", 2));
	ck_assert_ptr_nonnull(m1);
	ck_assert_ptr_nonnull(m2);
	ck_assert_ptr_nonnull(m3);
	/* M1: the service's lb and hash key, whole */
	ck_assert_ptr_eq(m1->lb.ops, s->lb.ops);
	ck_assert_uint_eq(m1->lb.ring_points, 50);
	ck_assert_int_eq(m1->hash_key.kind, MTD_CFG_HASH_HEADER);
	ck_assert_str_eq(m1->hash_key.header, "x-user");
	ck_assert_ptr_ne(m1->hash_key.header, s->local->hash_key.header); /* own copy */
	/* M2: the service's lb, its own key */
	ck_assert_uint_eq(m2->lb.ring_points, 50);
	ck_assert_int_eq(m2->hash_key.kind, MTD_CFG_HASH_FIELD);
	ck_assert_uint_eq(m2->hash_key.field_depth, 2);
	ck_assert_uint_eq(m2->hash_key.field_path[0], 2);
	ck_assert_uint_eq(m2->hash_key.field_path[1], 1);
	ck_assert(m2->hash_key.fail_on_missing);
	/* M3: its own lb, defaults applied */
	ck_assert_str_eq(m3->lb.ops->name, "ROUND_ROBIN");
	ck_assert_uint_eq(m3->lb.ring_points, 160);
	ck_assert_uint_eq(m3->lb.n_workers, cfg->workers);
	mtd_cfg_free(cfg);
}
END_TEST

/* A hash_key.field is accepted exactly when the data plane's extractor
 * parses it (bar protobuf's reserved numbers), into the same path. */
START_TEST(ok_field_path_agrees_with_pbwire)
{
	static const char *const paths[] = {
	        "1",
	        "2.1",
	        "536870911",
	        "536870912",
	        "1.2.3.4.5.6.7.8",
	        "1.2.3.4.5.6.7.8.9",
	        "0",
	        "01",
	        "10.0",
	        "2..1",
	        ".1",
	        "1.",
	        "+1",
	        " 1",
	        "1 ",
	        "1.-2",
	        "99999999999",
	        "18999.20000",
	        "19000",
	        "",
	};

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		char yaml[512];
		uint32_t want[MTD_PBWIRE_MAX_DEPTH];
		size_t depth = 0;
		bool ok = mtd_pbwire_path_parse(paths[i], want, &depth) == 0;
		bool reserved = false;
		struct mtd_cfg *cfg = NULL;
		struct mtd_cfg_errors errs = {0};
		int rc;

		for (size_t k = 0; ok && k < depth; k++)
			reserved |= want[k] >= 19000 && want[k] <= 19999;
		snprintf(yaml, sizeof(yaml),
		         "services:\n"
		         "  - name: a.B\n"
		         "    lb: {policy: MAGLEV}\n"
		         "    hash_key: {field: \"%s\"}\n" EP,
		         paths[i]);
		rc = mtd_cfg_load_buffer("t.yaml", yaml, strlen(yaml), MTD_CFG_FORMAT_YAML, &cfg, &errs);
		ck_assert_msg((rc == 0) == (ok && !reserved && paths[i][0] != '\0'), "\"%s\": config rc %d, pbwire %d",
		              paths[i], rc, ok);
		if (rc == 0) {
			const struct mtd_cfg_hash_key *hk = &cfg->services[0].local->hash_key;

			ck_assert_int_eq(hk->kind, MTD_CFG_HASH_FIELD);
			ck_assert_uint_eq(hk->field_depth, depth);
			for (size_t k = 0; k < depth; k++)
				ck_assert_uint_eq(hk->field_path[k], want[k]);
		}
		mtd_cfg_free(cfg);
		mtd_cfg_errors_clear(&errs);
	}
}
END_TEST

/* The largest values the loader accepts are ones lib/lb builds pickers
 * with: the two agree on every boundary. */
START_TEST(ok_lb_limits_build_pickers)
{
	struct mtd_cfg *cfg = load_ok("services:\n"
	                              "  - name: a.B\n"
	                              "    hash_key: {header: x}\n"
	                              "    lb: {policy: MAGLEV, table_size: 3, bounded_load_factor: 1.0001}\n"
	                              "    endpoints:\n"
	                              "      - address: \"127.0.0.1:1\"\n"
	                              "      - address: \"127.0.0.1:2\"\n"
	                              "      - address: \"127.0.0.1:3\"\n"
	                              "    methods:\n"
	                              "      - name: Big\n"
	                              "        lb: {policy: MAGLEV, table_size: 5000011}\n"
	                              "      - name: Ring\n"
	                              "        lb: {policy: CONSISTENT_HASH, ring_points: 10000}\n"
	                              "      - name: Few\n"
	                              "        lb: {policy: CONSISTENT_HASH, ring_points: 1}\n"
	                              "      - name: Choice\n"
	                              "        lb: {policy: LEAST_REQUEST, choice_count: 64, "
	                              "active_request_bias: 0}\n");

	ck_assert_uint_eq(cfg->services[0].lb.table_size, 3);
	assert_pickers_build(cfg);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(ok_json)
{
	char path[PATH_MAX];
	struct mtd_cfg *cfg;
	struct mtd_cfg_errors errs = {0};
	const char *json = "{\"services\": [{\"name\": \"a.B\", \"endpoints\": [{\"address\":"
	                   "\"127.0.0.1:1\"}], \"upstream\": {\"maxPending\": \"12\", "
	                   "\"idleTimeout\": \"3.000000001s\"}}], \"workers\": 1e0}";

	cfg = load_ok(json);
	ck_assert_uint_eq(cfg->workers, 1);
	ck_assert_uint_eq(cfg->services[0].upstream.max_pending, 12);
	ck_assert_int_eq(cfg->services[0].upstream.idle_timeout_ms, 3000);
	mtd_cfg_free(cfg);

	snprintf(path, sizeof(path), "%s/tests/unit/config/fixtures/good.json", srcdir());
	ck_assert_int_eq(mtd_cfg_load_file(path, MTD_CFG_FORMAT_AUTO, &cfg, &errs), 0);
	ck_assert_uint_eq(cfg->workers, 3);
	ck_assert_uint_eq(cfg->listen.port, 15002);
	ck_assert_str_eq(cfg->services[0].lb.ops->name, "LEAST_REQUEST");
	ck_assert_uint_eq(cfg->services[0].lb.choice_count, 3);
	ck_assert_int_eq(cfg->services[0].local->endpoints[0].weight, 7);
	/* a UTF-16 surrogate pair escape, which libyaml alone rejects */
	ck_assert_str_eq(cfg->services[0].tls->server_name, "\xf0\x9f\x98\x80.example");
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(ok_file_relative_tls)
{
	char path[PATH_MAX], ca[PATH_MAX];
	struct mtd_cfg *cfg;
	struct mtd_cfg_errors errs = {0};

	snprintf(path, sizeof(path), "%s/tests/unit/config/fixtures/good.yaml", srcdir());
	snprintf(ca, sizeof(ca), "%s/tests/unit/config/fixtures/certs/ca.pem", srcdir());
	ck_assert_int_eq(mtd_cfg_load_file(path, MTD_CFG_FORMAT_AUTO, &cfg, &errs), 0);
	ck_assert_str_eq(cfg->source, path);
	ck_assert_str_eq(cfg->services[0].tls->ca_file, ca);
	ck_assert_ptr_null(cfg->services[0].tls->server_name);
	ck_assert_int_eq(cfg->drain_timeout_ms, 1500);
	ck_assert_int_eq(cfg->listen.sa.sa.sa_family, AF_INET6);
	mtd_cfg_free(cfg);
}
END_TEST

static uint8_t *pack_sample(size_t *n)
{
	Maitred__Config__V1__Config c = MAITRED__CONFIG__V1__CONFIG__INIT;
	Maitred__Config__V1__Service s = MAITRED__CONFIG__V1__SERVICE__INIT;
	Maitred__Config__V1__LoadBalancing lb = MAITRED__CONFIG__V1__LOAD_BALANCING__INIT;
	Maitred__Config__V1__Endpoint e1 = MAITRED__CONFIG__V1__ENDPOINT__INIT;
	Maitred__Config__V1__Endpoint e2 = MAITRED__CONFIG__V1__ENDPOINT__INIT;
	Maitred__Config__V1__Method m = MAITRED__CONFIG__V1__METHOD__INIT;
	Google__Protobuf__UInt32Value w = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
	Google__Protobuf__Duration dt = GOOGLE__PROTOBUF__DURATION__INIT;
	Maitred__Config__V1__Service *ss[] = {&s};
	Maitred__Config__V1__Endpoint *eps[] = {&e1, &e2};
	Maitred__Config__V1__Method *ms[] = {&m};
	uint8_t *buf;

	c.listen = (char *)"127.0.0.1:15009";
	c.workers = 2;
	dt.seconds = 3;
	dt.nanos = 500000000;
	c.drain_timeout = &dt;
	s.name = (char *)"pkg.Svc";
	lb.policy = MAITRED__CONFIG__V1__LOAD_BALANCING__POLICY__WEIGHTED_RANDOM;
	s.lb = &lb;
	e1.address = (char *)"127.0.0.1:50051";
	w.value = 5;
	e1.weight = &w;
	e2.address = (char *)"127.0.0.1:50052";
	s.n_endpoints = 2;
	s.endpoints = eps;
	m.name = (char *)"Get";
	s.n_methods = 1;
	s.methods = ms;
	c.n_services = 1;
	c.services = ss;
	*n = protobuf_c_message_get_packed_size(&c.base);
	buf = malloc(*n);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(protobuf_c_message_pack(&c.base, buf), *n);
	return buf;
}

START_TEST(ok_binary_round_trip)
{
	size_t n;
	uint8_t *buf = pack_sample(&n);
	struct mtd_cfg *cfg;
	struct mtd_cfg_errors errs = {0};

	/* AUTO: sniffed as binary */
	ck_assert_int_eq(mtd_cfg_load_buffer("t.pb", buf, n, MTD_CFG_FORMAT_AUTO, &cfg, &errs), 0);
	ck_assert_uint_eq(cfg->listen.port, 15009);
	ck_assert_uint_eq(cfg->workers, 2);
	ck_assert_int_eq(cfg->drain_timeout_ms, 3500);
	ck_assert_str_eq(cfg->services[0].local->name, "pkg.Svc");
	ck_assert_str_eq(cfg->services[0].lb.ops->name, "WEIGHTED_RANDOM");
	ck_assert_int_eq(cfg->services[0].local->endpoints[0].weight, 5);
	ck_assert_int_eq(cfg->services[0].local->endpoints[1].weight, 100);
	ck_assert_str_eq(cfg->services[0].methods[0].lb.ops->name, "WEIGHTED_RANDOM");
	mtd_cfg_free(cfg);
	ck_assert_int_eq(mtd_cfg_load_buffer("t", buf, n, MTD_CFG_FORMAT_BINARY, &cfg, &errs), 0);
	mtd_cfg_free(cfg);
	free(buf);
}
END_TEST

START_TEST(ok_embedded_default)
{
	struct mtd_cfg *cfg;
	struct mtd_cfg_errors errs = {0};

	ck_assert_int_eq(mtd_cfg_load_file(NULL, MTD_CFG_FORMAT_AUTO, &cfg, &errs), 0);
	ck_assert_str_eq(cfg->source, "<embedded default>");
	ck_assert_str_eq(cfg->listen.text, "127.0.0.1:15001");
	ck_assert_uint_eq(cfg->workers, 1);
	ck_assert_uint_eq(cfg->n_services, 1);
	ck_assert_str_eq(cfg->services[0].local->name, "*");
	ck_assert_str_eq(cfg->services[0].lb.ops->name, "ROUND_ROBIN");
	ck_assert_uint_eq(cfg->services[0].local->n_endpoints, 3);
	for (unsigned i = 0; i < 3; i++) {
		ck_assert_str_eq(cfg->services[0].local->endpoints[i].addr.host, "127.0.0.1");
		ck_assert_uint_eq(cfg->services[0].local->endpoints[i].addr.port, 50051 + i);
	}
	mtd_cfg_free(cfg);
}
END_TEST

/* The example's TLS files are "certs/..." relative to the config; the
 * fixtures directory has such files, so load it from there. */
static char *example(size_t *len)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/deploy/maitred.example.yaml", srcdir());
	return slurp(path, len);
}

START_TEST(ok_example_file)
{
	char dir[PATH_MAX];
	size_t len;
	char *text = example(&len);
	struct mtd_cfg *cfg;
	struct mtd_cfg_errors errs = {0};
	const struct mtd_cfg_service *cart;
	const struct mtd_cfg_method *m;
	int rc;

	snprintf(dir, sizeof(dir), "%s/tests/unit/config/fixtures", srcdir());
	ck_assert_int_eq(chdir(dir), 0);
	rc = mtd_cfg_load_buffer("maitred.example.yaml", text, len, MTD_CFG_FORMAT_AUTO, &cfg, &errs);
	for (size_t i = 0; i < errs.n; i++)
		fprintf(stderr, "example: %s\n", errs.msgs[i]);
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(cfg->n_routed, 5);
	/* ... and the inbound listener's app, served as a service of its own. */
	ck_assert_uint_eq(cfg->n_services, 6);
	ck_assert_uint_eq(cfg->n_inbound, 1);
	ck_assert_uint_eq(cfg->inbound[0].service, 5);
	ck_assert_str_eq(cfg->services[5].local->name, "inbound:0.0.0.0:15443");
	ck_assert_int_eq(cfg->services[5].local->inbound, 0);
	ck_assert_int_eq(cfg->services[0].local->inbound, -1);
	ck_assert_str_eq(cfg->services[5].local->endpoints[0].addr.text, "127.0.0.1:50051");
	ck_assert_ptr_null(cfg->services[5].tls);
	ck_assert_int_eq(cfg->inbound[0].authz.def, MTD_AUTHZ_DENY);
	ck_assert_uint_eq(cfg->inbound[0].authz.n_rules, 1);
	ck_assert_str_eq(cfg->inbound[0].authz.rules[0].methods[0], "/shop.Cart/*");
	ck_assert_str_eq(cfg->inbound[0].client_ca_file, "certs/ca.pem");
	ck_assert_int_eq(cfg->services[3].local->source, MTD_CFG_SOURCE_DNS);
	/* beta-pool is reached by routes and a mirror only. */
	ck_assert_str_eq(cfg->services[4].local->name, "beta-pool");
	ck_assert(!cfg->services[4].local->by_path);
	ck_assert(cfg->services[0].local->by_path);
	ck_assert_int_eq(cfg->services[0].local->mirror, 4);
	ck_assert_uint_eq(cfg->n_routes, 2);
	ck_assert_int_eq(cfg->routes[0].to, 4);
	ck_assert_int_eq(cfg->routes[1].kind, MTD_ROUTE_HEADER_PRESENT);
	ck_assert_ptr_nonnull(cfg->services[0].local->split);
	ck_assert_uint_eq(cfg->services[0].local->split->lb.n, 2);
	ck_assert(cfg->services[0].local->split->lb.guard.on);
	ck_assert_ptr_eq(cfg->services[0].local->layer.split, &cfg->services[0].local->split->lb);
	ck_assert_uint_eq(cfg->services[0].local->rate_limit.burst, 200);
	ck_assert_ptr_nonnull(cfg->admin);
	ck_assert_str_eq(cfg->services[0].tls->ca_file, "certs/ca.pem");
	ck_assert_str_eq(cfg->services[0].tls->server_name, "svc.example");
	ck_assert_str_eq(cfg->services[0].tls->key_file, "certs/client.key");
	ck_assert_int_eq(cfg->services[0].local->endpoints[1].addr.sa.sa.sa_family, AF_INET6);
	cart = &cfg->services[1];
	ck_assert_int_eq(cart->lb.warmup.duration_ms, 60000);
	m = mtd_cfg_service_method(cart, "GetCart", 7);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(m->lb.ops->name, "CONSISTENT_HASH");
	ck_assert_str_eq(m->hash_key.header, "x-user-id");
	ck_assert_int_eq(m->lb.warmup.duration_ms, 60000);
	m = mtd_cfg_service_method(cart, "Checkout", 8);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->hash_key.kind, MTD_CFG_HASH_FIELD);
	ck_assert(m->hash_key.fail_on_missing);
	ck_assert_str_eq(cfg->services[2].local->name, "*");
	assert_pickers_build(cfg);
	mtd_cfg_free(cfg);
	free(text);
}
END_TEST

/* Every field of every maitred message appears as a key in the example, so
 * the example cannot fall behind the .proto. */
static void assert_keys_in(const char *text, const ProtobufCMessageDescriptor *d, unsigned depth)
{
	char key[128];

	ck_assert_uint_lt(depth, 16);
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *fd = &d->fields[i];
		const ProtobufCMessageDescriptor *sub;

		bool found;

		/* a key at the start of a line or after indentation / "- ";
		 * a trailing '_' is not written (its json name, pbjson.c) */
		snprintf(key, sizeof(key), " %.*s:", (int)(strlen(fd->name) - (fd->name[strlen(fd->name) - 1] == '_')),
		         fd->name);
		found = strstr(text, key) != NULL;
		key[0] = '\n';
		found = found || strstr(text, key) != NULL;
		ck_assert_msg(found, "deploy/maitred.example.yaml lacks %s.%s", d->name, fd->name);
		if (fd->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		sub = fd->descriptor;
		/* A map's entries are written as a mapping, not as key/value. */
		if (fd->label == PROTOBUF_C_LABEL_REPEATED && sub->n_fields == 2 &&
		    strcmp(sub->fields[0].name, "key") == 0 && strcmp(sub->fields[1].name, "value") == 0)
			continue;
		if (strcmp(sub->package_name, "maitred.config.v1") == 0)
			assert_keys_in(text, sub, depth + 1);
	}
}

START_TEST(ok_example_covers_schema)
{
	size_t len;
	char *text = example(&len);

	assert_keys_in(text, &maitred__config__v1__config__descriptor, 0);
	free(text);
}
END_TEST

START_TEST(ok_durations)
{
	static const struct {
		const char *text;
		int64_t s;
		int32_t ns;
	} ok[] = {
	        {"1.5s", 1, 500000000}, {"-1.5s", -1, -500000000}, {"250ms", 0, 250000000},
	        {"100us", 0, 100000},   {"10ns", 0, 10},           {"2m", 120, 0},
	        {"1h", 3600, 0},        {"1m30s", 90, 0},          {"0.000000001s", 0, 1},
	        {"0s", 0, 0},           {"1.5m", 90, 0},           {"3.0000000019s", 3, 1},
	};
	static const char *const bad[] = {"", "s", "1", "1x", "1.s5", "--1s", "1 s", "99999999999999999999h"};
	int64_t s;
	int32_t ns;
	const char *why;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(mtd_cfg__parse_duration(ok[i].text, &s, &ns, &why) == 0, "%s", ok[i].text);
		ck_assert_int_eq(s, ok[i].s);
		ck_assert_int_eq(ns, ok[i].ns);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(mtd_cfg__parse_duration(bad[i], &s, &ns, &why) == -EINVAL, "%s", bad[i]);
}
END_TEST

/* ---- out of memory ----------------------------------------------------- */

/* Fail allocation 1, 2, 3, ... until a load needs no more: each must end in
 * -ENOMEM (never a crash, never a leak: ASan/LSan check the rest). */
static void oom_loop(const void *data, size_t len, enum mtd_cfg_format fmt, int want_rc)
{
	unsigned long n;

	for (n = 1; n < 100000; n++) {
		struct mtd_cfg *cfg = (struct mtd_cfg *)1;
		struct mtd_cfg_errors errs = {0};
		int rc;

		mtd_cfg__fail_alloc_after(n);
		rc = mtd_cfg_load_buffer("oom.yaml", data, len, fmt, &cfg, &errs);
		if (!mtd_cfg__alloc_failed()) {
			mtd_cfg__fail_alloc_after(0);
			ck_assert_int_eq(rc, want_rc);
			mtd_cfg_free(cfg);
			mtd_cfg_errors_clear(&errs);
			break;
		}
		mtd_cfg__fail_alloc_after(0);
		ck_assert_msg(rc == -ENOMEM, "allocation %lu: rc %d", n, rc);
		ck_assert_ptr_null(cfg);
		mtd_cfg_errors_clear(&errs);
	}
	ck_assert_uint_gt(n, 20);
	ck_assert_uint_lt(n, 100000);
}

START_TEST(oom_example)
{
	char dir[PATH_MAX];
	size_t len;
	char *text = example(&len);

	snprintf(dir, sizeof(dir), "%s/tests/unit/config/fixtures", srcdir());
	ck_assert_int_eq(chdir(dir), 0);
	oom_loop(text, len, MTD_CFG_FORMAT_YAML, 0);
	free(text);
}
END_TEST

START_TEST(oom_errors)
{
	const char *yaml = "listn: x\n"
	                   "services:\n"
	                   "  - name: a.B\n"
	                   "    lb: {policy: NOPE, choiceCount: 3}\n"
	                   "    endpoints: [{address: \"127.0.0.1\"}]\n"
	                   "  - name: a.B\n"
	                   "    endpoints: [{address: \"127.0.0.1:1\"}]\n";

	oom_loop(yaml, strlen(yaml), MTD_CFG_FORMAT_YAML, -EINVAL);
}
END_TEST

START_TEST(oom_json_and_binary)
{
	size_t n;
	uint8_t *buf = pack_sample(&n);
	const char *json = "{\"services\": [{\"name\": \"a.B\", \"tls\": {\"caFile\":"
	                   "\"/nonexistent\", \"serverName\": \"\\ud83d\\ude00\"},"
	                   "\"endpoints\": [{\"address\": \"127.0.0.1:1\"}]}]}";

	oom_loop(buf, n, MTD_CFG_FORMAT_BINARY, 0);
	oom_loop(json, strlen(json), MTD_CFG_FORMAT_JSON, -EINVAL);
	free(buf);
}
END_TEST

/* ---- fault ---------------------------------------------------------------- */

START_TEST(ok_fault)
{
	struct mtd_cfg *cfg = load_ok("replay_buffer_total: 1048576\n"
	                              "services:\n"
	                              "  - name: shop.Cart\n" EP "    fault:\n"
	                              "      mode: FAILOVER\n"
	                              "      retries: 3\n"
	                              "      retryOn: [UNAVAILABLE, INTERNAL]\n"
	                              "      per_try_timeout: 1s\n"
	                              "      backoff: { base: 10ms, max: 80ms }\n"
	                              "      replay_buffer: 4096\n"
	                              "      fallback: { status: OK, response_base64: \"CgNhYmM=\" }\n"
	                              "    retry_budget: { ratio: 0.5 }\n"
	                              "    methods:\n"
	                              "      - name: Get\n"
	                              "        fault: { mode: FAILSAFE }\n"
	                              "      - name: Put\n"
	                              "        fault: { fallback: { status: UNAVAILABLE, message: \"down\" } }\n"
	                              "      - name: List\n"
	                              "  - name: other.Svc\n" EP);
	const struct mtd_cfg_service *s = &cfg->services[0];
	const struct mtd_fault_policy *f = &s->local->fault;
	const struct mtd_cfg_method *m;

	ck_assert_uint_eq(cfg->replay_buffer_total, 1048576);
	ck_assert_int_eq(f->mode, MTD_FAULT_FAILOVER);
	ck_assert_uint_eq(f->retries, 3);
	ck_assert_uint_eq(f->retry_on, (1u << 14) | (1u << 13));
	ck_assert_int_eq(f->per_try_timeout_ms, 1000);
	ck_assert_int_eq(f->backoff_base_ms, 10);
	ck_assert_int_eq(f->backoff_max_ms, 80);
	ck_assert_uint_eq(f->replay_buffer, 4096);
	ck_assert(f->fallback.set);
	ck_assert_int_eq(f->fallback.status, 0);
	ck_assert_uint_eq(f->fallback.response_len, 5);
	ck_assert_mem_eq(f->fallback.response,
	                 "\x0a\x03"
	                 "abc",
	                 5);
	ck_assert(s->local->retry_budget.set);
	ck_assert_double_eq(s->local->retry_budget.ratio, 0.5);
	ck_assert_uint_eq(s->local->retry_budget.min_per_second, 10);
	/* A method's fault replaces the service's whole; without one it has the service's. */
	m = mtd_cfg_service_method(s, "Get", 3);
	ck_assert_int_eq(m->fault.mode, MTD_FAULT_FAILSAFE);
	ck_assert_uint_eq(m->fault.retry_on, 1u << 14);
	ck_assert(!m->fault.fallback.set);
	m = mtd_cfg_service_method(s, "Put", 3);
	ck_assert_int_eq(m->fault.mode, MTD_FAULT_FAILFAST);
	ck_assert_int_eq(m->fault.fallback.status, 14);
	ck_assert_str_eq(m->fault.fallback.message, "down");
	m = mtd_cfg_service_method(s, "List", 4);
	ck_assert_int_eq(m->fault.mode, MTD_FAULT_FAILOVER);
	ck_assert_uint_eq(m->fault.retries, 3);
	/* Defaults: FAILFAST, not budgeted. */
	f = &cfg->services[1].local->fault;
	ck_assert_int_eq(f->mode, MTD_FAULT_FAILFAST);
	ck_assert_uint_eq(f->replay_buffer, 256 * 1024);
	ck_assert_int_eq(f->per_try_timeout_ms, 0);
	ck_assert(!cfg->services[1].local->retry_budget.set);
	mtd_cfg_free(cfg);
	cfg = load_ok("services:\n  - name: a.B\n" EP);
	ck_assert_uint_eq(cfg->replay_buffer_total, 64u << 20);
	mtd_cfg_free(cfg);
	/* FAILBACK: the queue and its re-sends; defaults 100 and 3. */
	cfg = load_ok(
	        "services:\n  - name: a.B\n    fault: { mode: FAILBACK, backoff: { base: 1s }, failback: { queue: "
	        "7, retries: 9 } }\n" EP "  - name: c.D\n    fault: { mode: FAILBACK }\n" EP);
	ck_assert_int_eq(cfg->services[0].local->fault.mode, MTD_FAULT_FAILBACK);
	ck_assert_uint_eq(cfg->services[0].local->fault.failback_queue, 7);
	ck_assert_uint_eq(cfg->services[0].local->fault.failback_retries, 9);
	ck_assert_int_eq(cfg->services[0].local->fault.backoff_base_ms, 1000);
	ck_assert_uint_eq(cfg->services[1].local->fault.failback_queue, 100);
	ck_assert_uint_eq(cfg->services[1].local->fault.failback_retries, 3);
	mtd_cfg_free(cfg);
	/* hedge_delay: AUTO (the delay follows the method's p95). */
	cfg = load_ok("services:\n  - name: a.B\n    fault: { mode: FORKING, hedge_delay: AUTO }\n" EP);
	ck_assert_int_eq(cfg->services[0].local->fault.hedge_delay_ms, MTD_FAULT_HEDGE_AUTO);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(err_fault)
{
#define SVC "services:\n  - name: a.B\n" EP
	expect_only(SVC "    fault: { mode: FAILFAST, retries: 2 }\n",
	            "t.yaml:4:39: services[0].fault.retries: mode FAILFAST does not use retries");
	expect_only(SVC "    fault: { mode: FAILSAFE, backoff: { base: 1ms } }\n",
	            "t.yaml:4:39: services[0].fault.backoff: mode FAILSAFE does not use backoff");
	expect_only(SVC "    fault: { mode: FAILOVER, forks: 3 }\n",
	            "t.yaml:4:37: services[0].fault.forks: mode FAILOVER does not use forks");
	expect_only(SVC "    fault: { mode: FAILOVER, hedge_delay: 5ms }\n",
	            "t.yaml:4:43: services[0].fault.hedge_delay: mode FAILOVER does not use hedge_delay");
	expect_only(SVC "    fault: { mode: FAILOVER, retries: 11 }\n",
	            "t.yaml:4:39: services[0].fault.retries: must be in 0..10, got 11");
	expect_only(SVC "    fault: { retry_on: [UNAVAILABLE, OK] }\n",
	            "t.yaml:4:24: services[0].fault.retry_on[1]: OK is not a failure");
	expect_only(SVC "    fault: { mode: FAILOVER, backoff: { base: 100ms, max: 10ms } }\n",
	            "t.yaml:4:59: services[0].fault.backoff.max: must not be below base (100 ms)");
	expect_only(SVC "    fault: { per_try_timeout: 0s }\n",
	            "t.yaml:4:31: services[0].fault.per_try_timeout: must be at least 1ms");
	expect_only(SVC "    fault: { replay_buffer: 67108865 }\n",
	            "t.yaml:4:29: services[0].fault.replay_buffer: must be at most 67108864, got 67108865");
	expect_only(SVC "    fault: { fallback: { status: OK, message: x } }\n",
	            "t.yaml:4:47: services[0].fault.fallback.message: a grpc-message goes with a non-OK status");
	expect_only(SVC "    fault: { fallback: { status: INTERNAL, response_base64: AAAA } }\n",
	            "t.yaml:4:61: services[0].fault.fallback.response_base64: a response message goes with status OK");
	expect_only(SVC "    retry_budget: { ratio: -1 }\n",
	            "t.yaml:4:28: services[0].retry_budget.ratio: must be in 0..1000");
	/* Modes the data plane does not do yet are refused, not ignored. */
	expect_only(SVC "    fault: { mode: BROADCAST, retries: 1 }\n",
	            "t.yaml:4:40: services[0].fault.retries: mode BROADCAST does not use retries");
	expect_only(SVC "    fault: { mode: FAILOVER, failback: { queue: 5 } }\n",
	            "t.yaml:4:40: services[0].fault.failback: mode FAILOVER does not use failback");
	expect_only(SVC "    fault: { mode: FAILBACK, failback: { queue: 100001 } }\n",
	            "t.yaml:4:49: services[0].fault.failback.queue: must be at most 100000, got 100001");
	expect_only(SVC "    fault: { mode: FORKING, hedge_delay: 61s }\n",
	            "t.yaml:4:42: services[0].fault.hedge_delay: must be at most 60s");
	expect_only(SVC "    fault: { mode: FORKING, forks: 1 }\n",
	            "t.yaml:4:36: services[0].fault.forks: must be in 2..16, got 1");
#undef SVC
}
END_TEST

START_TEST(health_options)
{
	struct mtd_cfg *cfg =
	        load_ok("services:\n"
	                "  - name: shop.Cart\n" EP "    outlier_detection:\n"
	                "      consecutive_failures: 3\n"
	                "      failure_percentage: 40\n"
	                "      interval: 2s\n"
	                "      base_ejection_time: 1s\n"
	                "      max_ejection_percent: 50\n"
	                "      failure_statuses: [UNAVAILABLE, RESOURCE_EXHAUSTED]\n"
	                "      method_scoped: true\n"
	                "    circuit_breaker: { max_calls: 7, max_pending: 3, max_calls_per_endpoint: 2 }\n"
	                "    health_check: { interval: 2s, unhealthy_threshold: 4, service_name: cart }\n"
	                "  - name: other.Svc\n" EP);
	const struct mtd_cfg_service *s = &cfg->services[0];
	ck_assert(s->outlier.enabled);
	ck_assert_uint_eq(s->outlier.consecutive_failures, 3);
	ck_assert_uint_eq(s->outlier.failure_percentage, 40);
	ck_assert_uint_eq(s->outlier.min_requests, MTD_OUTLIER_DEFAULT_MIN_REQUESTS);
	ck_assert_int_eq(s->outlier.interval_ms, 2000);
	ck_assert_int_eq(s->outlier.base_ejection_ms, 1000);
	ck_assert_int_eq(s->outlier.max_ejection_ms, MTD_OUTLIER_DEFAULT_MAX_MS);
	ck_assert_uint_eq(s->outlier.max_ejection_percent, 50);
	ck_assert_uint_eq(s->outlier.panic_percent, MTD_OUTLIER_DEFAULT_PANIC_PERCENT);
	ck_assert_uint_eq(s->local->failure_statuses, (1u << 14) | (1u << 8));
	ck_assert(s->outlier_method_scoped);
	ck_assert_uint_eq(s->circuit.max_calls, 7);
	ck_assert_uint_eq(s->circuit.max_pending, 3);
	ck_assert_uint_eq(s->circuit.max_calls_per_endpoint, 2);
	ck_assert(s->local->health_check.enabled);
	ck_assert_int_eq(s->local->health_check.interval_ms, 2000);
	ck_assert_int_eq(s->local->health_check.timeout_ms, 1000);
	ck_assert_uint_eq(s->local->health_check.unhealthy_threshold, 4);
	ck_assert_uint_eq(s->local->health_check.healthy_threshold, 2);
	ck_assert_str_eq(s->local->health_check.service_name, "cart");
	/* Absent blocks: no ejection, no limits, the default failure list. */
	const struct mtd_cfg_service *o = &cfg->services[1];
	ck_assert(!o->outlier.enabled);
	ck_assert_uint_eq(o->local->failure_statuses, MTD_FAULT_FAILURE_STATUSES);
	ck_assert_uint_eq(o->circuit.max_calls, 0);
	ck_assert(!o->local->health_check.enabled);
	mtd_cfg_free(cfg);

#define SVC "services:\n  - name: a.B\n" EP
	expect_only(SVC "    outlier_detection: { max_ejection_percent: 101 }\n",
	            "t.yaml:4:48: services[0].outlier_detection.max_ejection_percent: must be a percentage, 0..100");
	expect_only(SVC "    outlier_detection: { failure_statuses: [OK] }\n",
	            "t.yaml:4:44: services[0].outlier_detection.failure_statuses[0]: OK is not a failure");
	expect_only(SVC "    outlier_detection: { consecutive_failures: 0 }\n",
	            "t.yaml:4:24: services[0].outlier_detection: ejects nothing*");
	expect_only(
	        SVC "    outlier_detection: { base_ejection_time: 10s, max_ejection_time: 5s }\n",
	        "t.yaml:4:70: services[0].outlier_detection.max_ejection_time: must be at least base_ejection_time");
	expect_only(SVC "    health_check: { timeout: 0s }\n", "t.yaml:4:30: services[0].health_check.timeout: *");
#undef SVC
}
END_TEST

/* The admin endpoint has no authentication; only loopback unless
 * admin_allow_remote. And the log block. */
START_TEST(err_admin_and_log)
{
	expect_error("admin: \"0.0.0.0:15000\"\nservices:\n  - name: a.B\n" EP,
	             "t.yaml:1:8: admin: \"0.0.0.0:15000\" is not a loopback address: the admin endpoint has no "
	             "authentication and POST /drain stops maitred; set admin_allow_remote: true to expose it anyway");
	expect_error("admin: \"[::]:15000\"\nservices:\n  - name: a.B\n" EP,
	             "t.yaml:1:8: admin: \"[::]:15000\" is not a loopback address*");
	expect_error("log: {access: {sample: 0.5}}\nservices:\n  - name: a.B\n" EP,
	             "t.yaml:1:15: log.access.path: required (a file name, or \"-\" for stderr)");
	expect_error("log: {access: {path: \"-\", sample: 1.5}}\nservices:\n  - name: a.B\n" EP,
	             "t.yaml:1:35: log.access.sample: must be in [0, 1] (got 1.5)");
	expect_error("log: {format: XML}\nservices:\n  - name: a.B\n" EP, "t.yaml:1:15: log.format: unknown value*");
}
END_TEST

START_TEST(ok_admin_and_log)
{
	struct mtd_cfg *cfg = load_ok("admin: \"0.0.0.0:15000\"\nadmin_allow_remote: true\n"
	                              "services:\n  - name: a.B\n" EP);
	ck_assert_ptr_nonnull(cfg->admin);
	ck_assert(cfg->admin_allow_remote);
	ck_assert(!cfg->log.json);
	ck_assert_int_eq(cfg->log.level, -1);
	ck_assert_ptr_null(cfg->log.access);
	ck_assert_uint_gt(cfg->pb_len, 0);
	mtd_cfg_free(cfg);
	cfg = load_ok("admin: \"127.0.0.9:15000\"\nlog: {format: JSON, level: WARN, access: {path: \"-\"}}\n"
	              "services:\n  - name: a.B\n" EP);
	ck_assert(cfg->log.json);
	ck_assert_int_eq(cfg->log.level, 2); /* MTD_LOG_WARN */
	ck_assert_str_eq(cfg->log.access->path, "-");
	ck_assert(cfg->log.access->sample == 1.0);
	mtd_cfg_free(cfg);
	cfg = load_ok("admin: \"[::1]:15000\"\nlog: {access: {path: a.log, sample: 0}}\nservices:\n  - name: a.B\n" EP);
	ck_assert(cfg->log.access->sample == 0.0);
	mtd_cfg_free(cfg);
}
END_TEST

#define SVC1 "services:\n  - name: a.B\n    endpoints: [{address: \"127.0.0.1:1\"}]\n"

START_TEST(ok_tracing_defaults_and_overrides)
{
	struct mtd_cfg *cfg = load_ok("node_id: n-1\n"
	                              "tracing:\n  otlp: {endpoint: \"http://127.0.0.1:4318\"}\n"
	                              "services:\n  - name: a.B\n    endpoints: [{address: \"127.0.0.1:1\"}]\n"
	                              "    tracing: {sample: 0.5}\n"
	                              "    methods: [{name: M, tracing: {sample: 1}}, {name: N}]\n"
	                              "  - name: c.D\n    endpoints: [{address: \"127.0.0.1:1\"}]\n");
	const struct mtd_cfg_tracing *t = cfg->tracing;
	ck_assert_ptr_nonnull(t);
	ck_assert(!t->https);
	ck_assert_str_eq(t->host, "127.0.0.1");
	ck_assert_uint_eq(t->port, 4318);
	ck_assert_str_eq(t->path, "/v1/traces");
	ck_assert_int_eq(t->timeout_ms, 5000);
	ck_assert(t->sample == 0.01);
	ck_assert_str_eq(t->service_name, "n-1");
	ck_assert(cfg->services[0].local->trace_sample == 0.5);
	ck_assert(cfg->services[0].methods[0].trace_sample == 1.0);
	ck_assert(cfg->services[0].methods[1].trace_sample == 0.5);
	ck_assert(cfg->services[1].local->trace_sample == 0.01);
	mtd_cfg_free(cfg);

	char yaml[1024];
	snprintf(yaml, sizeof(yaml),
	         "tracing:\n  otlp:\n    endpoint: \"https://[::1]:9443/otlp/traces?x=1\"\n"
	         "    tls: {ca_file: " FX "ca.pem, server_name: collector}\n"
	         "    headers: {X-Api-Key: abc, b: \"c d\"}\n    timeout: 250ms\n"
	         "  sample: 0\n  service_name: cart\n" SVC1,
	         srcdir());
	cfg = load_ok(yaml);
	t = cfg->tracing;
	ck_assert(t->https);
	ck_assert_str_eq(t->host, "::1");
	ck_assert_uint_eq(t->port, 9443);
	ck_assert_str_eq(t->path, "/otlp/traces?x=1");
	ck_assert_str_eq(t->tls->server_name, "collector");
	ck_assert_uint_eq(t->n_headers, 2);
	ck_assert_str_eq(t->header_names[0], "b");
	ck_assert_str_eq(t->header_names[1], "x-api-key");
	ck_assert_str_eq(t->header_values[1], "abc");
	ck_assert_int_eq(t->timeout_ms, 250);
	ck_assert(t->sample == 0);
	ck_assert_str_eq(t->service_name, "cart");
	mtd_cfg_free(cfg);

	cfg = load_ok(SVC1);
	ck_assert_ptr_null(cfg->tracing);
	ck_assert(cfg->services[0].local->trace_sample == 0);
	mtd_cfg_free(cfg);
}
END_TEST

START_TEST(err_tracing)
{
	expect_error("tracing: {sample: 0.1}\n" SVC1, "t.yaml:1:*tracing.otlp.endpoint: is required*");
	expect_error("tracing: {otlp: {endpoint: \"grpc://c:4317\"}}\n" SVC1,
	             "t.yaml:1:*tracing.otlp.endpoint: \"grpc://c:4317\" must start with http:// or https://*");
	expect_error("tracing: {otlp: {endpoint: \"http://c:0\"}}\n" SVC1, "*the port must be in 1..65535");
	expect_error("tracing: {otlp: {endpoint: \"http://c:99999\"}}\n" SVC1, "*the port must be in 1..65535");
	expect_error("tracing: {otlp: {endpoint: \"http://c:x1\"}}\n" SVC1, "*the port must be in 1..65535");
	expect_error("tracing: {otlp: {endpoint: \"http://u:p@c:1\"}}\n" SVC1, "*credentials in the URL*");
	expect_error("tracing: {otlp: {endpoint: \"http://[::1:1\"}}\n" SVC1, "*closing ']'");
	expect_error("tracing: {otlp: {endpoint: \"http://:1/v1/traces\"}}\n" SVC1, "*the host must be*");
	expect_error("tracing: {otlp: {endpoint: \"http://a b:1\"}}\n" SVC1, "*a space or a control character");
	expect_error("tracing: {otlp: {endpoint: \"https://c:1\"}}\n" SVC1, "*tracing.otlp.tls: is required for an https*");
	char yaml[512];
	snprintf(yaml, sizeof(yaml), "tracing: {otlp: {endpoint: \"http://c:1\", tls: {ca_file: " FX "ca.pem}}}\n" SVC1,
	         srcdir());
	expect_error(yaml, "*tracing.otlp.tls: is for an https:// endpoint*");
	expect_error("tracing: {otlp: {endpoint: \"http://c:1\", headers: {content-type: x}}}\n" SVC1,
	             "*is set by maitred itself");
	expect_error("tracing: {otlp: {endpoint: \"http://c:1\", headers: {\"a b\": x}}}\n" SVC1,
	             "*is not an HTTP header name");
	expect_error("tracing: {otlp: {endpoint: \"http://c:1\", headers: {a: \"x\\r\\nevil: 1\"}}}\n" SVC1,
	             "*the value has a control character*");
	expect_error("tracing: {otlp: {endpoint: \"http://c:1\", headers: {A: x, a: y}}}\n" SVC1,
	             "*written twice*");
	expect_error("tracing: {otlp: {endpoint: \"http://c:1\", timeout: 61s}}\n" SVC1, "*must be at most 60s");
	expect_error("tracing: {otlp: {endpoint: \"http://c:1\"}, sample: 1.5}\n" SVC1,
	             "t.yaml:*tracing.sample: must be in [0, 1] (got 1.5)");
	expect_error(SVC1 "    tracing: {sample: 0.5}\n",
	             "t.yaml:*services[0].tracing: needs the top-level tracing block*");
	expect_error("tracing: {otlp: {endpoint: \"http://c:1\"}}\n" SVC1 "    methods: [{name: M, tracing: {sample: -1}}]\n",
	             "t.yaml:*services[0].methods[0].tracing.sample: must be in [0, 1] (got -1)");
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *errors = tcase_create("errors");
	TCase *ok = tcase_create("ok");
	TCase *oom = tcase_create("oom");

	tcase_add_test(errors, err_unknown_key);
	tcase_add_test(errors, err_flow_nesting);
	tcase_add_test(errors, err_top_not_a_mapping);
	tcase_add_test(errors, err_shape_said_once);
	tcase_add_test(errors, err_config_file_kind);
	tcase_add_test(errors, err_tls_file_kind);
	tcase_add_test(errors, err_bool_quoted);
	tcase_add_test(errors, many_endpoints_and_methods_load_in_time);
	tcase_add_test(errors, err_fault);
	tcase_add_test(errors, ok_fault);
	tcase_add_test(errors, health_options);
	tcase_add_test(errors, err_admin_and_log);
	tcase_add_test(ok, ok_admin_and_log);
	tcase_add_test(errors, err_duplicate_key);
	tcase_add_test(errors, err_wrong_type);
	tcase_add_test(errors, err_bad_enum);
	tcase_add_test(errors, err_bad_duration);
	tcase_add_test(errors, err_out_of_range);
	tcase_add_test(errors, err_bad_address);
	tcase_add_test(errors, err_unresolvable);
	tcase_add_test(errors, err_duplicate_service);
	tcase_add_test(errors, err_duplicate_services_many);
	tcase_add_test(errors, err_two_catch_all);
	tcase_add_test(errors, err_bad_names);
	tcase_add_test(errors, err_missing_endpoints);
	tcase_add_test(errors, err_duplicate_endpoint);
	tcase_add_test(errors, err_endpoint_sources);
	tcase_add_test(errors, inbound_ok);
	tcase_add_test(errors, xds_errors);
	tcase_add_test(ok, xds_ok);
	tcase_add_test(ok, initial_wait);
	tcase_add_test(ok, xds_created_services);
	tcase_add_test(errors, xds_created_not_catch_all);
	tcase_add_test(ok, xds_bootstrap);
	tcase_add_test(ok, xds_bootstrap_certificate_providers);
	tcase_add_test(errors, err_inbound);
	tcase_add_test(errors, register_ok);
	tcase_add_test(errors, err_register);
	tcase_add_test(errors, err_tls);
	tcase_add_test(errors, err_authority);
	tcase_add_test(errors, err_hash_key_on_round_robin);
	tcase_add_test(errors, err_hashing_without_key);
	tcase_add_test(errors, err_hash_key_shape);
	tcase_add_test(errors, err_policy_options);
	tcase_add_test(errors, err_lb_strategy_rules);
	tcase_add_test(errors, err_maglev_table_too_small);
	tcase_add_test(errors, err_too_many_endpoints);
	tcase_add_test(errors, err_duplicate_method);
	tcase_add_test(errors, err_all_collected_in_file_order);
	tcase_add_test(errors, err_syntax);
	tcase_add_test(errors, err_binary);
	tcase_add_test(errors, err_file_missing);
	suite_add_tcase(s, errors);

	tcase_add_test(ok, ok_defaults);
	tcase_add_test(ok, ok_authority);
	tcase_add_test(ok, ok_yaml_values2);
	tcase_add_test(ok, ok_lb_fleet_options);
	tcase_add_test(ok, ok_lb_orca);
	tcase_add_test(ok, err_lb_orca);
	tcase_add_test(ok, ok_routing_layer_options);
	tcase_add_test(ok, ok_traffic_policy);
	tcase_add_test(errors, err_traffic_policy);
	tcase_add_test(ok, ok_lower_camel);
	tcase_add_test(ok, ok_method_inheritance);
	tcase_add_test(ok, ok_field_path_agrees_with_pbwire);
	tcase_add_test(ok, ok_lb_limits_build_pickers);
	tcase_add_test(ok, ok_json);
	tcase_add_test(ok, ok_file_relative_tls);
	tcase_add_test(ok, ok_binary_round_trip);
	tcase_add_test(ok, ok_embedded_default);
	tcase_add_test(ok, ok_example_file);
	tcase_add_test(ok, ok_tracing_defaults_and_overrides);
	tcase_add_test(errors, err_tracing);
	tcase_add_test(ok, ok_example_covers_schema);
	tcase_add_test(ok, ok_durations);
	tcase_add_test(ok, ok_dns_source);
	suite_add_tcase(s, ok);

	tcase_set_timeout(oom, 300);
	tcase_add_test(oom, oom_example);
	tcase_add_test(oom, oom_errors);
	tcase_add_test(oom, oom_json_and_binary);
	suite_add_tcase(s, oom);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
