/* Unit tests for lib/admin: JSON writer, Prometheus text, /config_dump. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"
#include "maitred/config/v1/config.pb-c.h"

START_TEST(json_nesting_and_commas)
{
	struct mtd_abuf b = {0};
	struct mtd_json j;
	mtd_json_init(&j, &b);
	mtd_json_obj_begin(&j);
	mtd_json_key(&j, "a");
	mtd_json_u64(&j, 1);
	mtd_json_key(&j, "b");
	mtd_json_arr_begin(&j);
	mtd_json_i64(&j, -2);
	mtd_json_str(&j, "x");
	mtd_json_obj_begin(&j);
	mtd_json_obj_end(&j);
	mtd_json_null(&j);
	mtd_json_arr_end(&j);
	mtd_json_key(&j, "c");
	mtd_json_bool(&j, true);
	mtd_json_key(&j, "d");
	mtd_json_dbl(&j, NAN);
	mtd_json_key(&j, "e");
	mtd_json_dbl(&j, 0.5);
	mtd_json_obj_end(&j);
	ck_assert(!b.oom);
	ck_assert_str_eq(b.p, "{\"a\":1,\"b\":[-2,\"x\",{},null],\"c\":true,\"d\":null,\"e\":0.5}");
	mtd_abuf_clear(&b);
}
END_TEST

START_TEST(json_escapes_and_invalid_utf8)
{
	struct mtd_abuf b = {0};
	struct mtd_json j;
	mtd_json_init(&j, &b);
	static const char in[] = "q\"b\\n\n\x01\xc3\xa9\xff\xed\xa0\x80z";
	mtd_json_strn(&j, in, sizeof(in) - 1);
	/* é kept; a lone 0xff and a UTF-8 encoded surrogate are replaced. */
	ck_assert_str_eq(b.p, "\"q\\\"b\\\\n\\n\\u0001\xc3\xa9\\ufffd\\ufffd\\ufffd\\ufffdz\"");
	mtd_abuf_clear(&b);
}
END_TEST

START_TEST(prom_lines)
{
	struct mtd_abuf b = {0};
	const char *k[] = {"service", "method"};
	const char *v[] = {"a.B", "q\"\\\nx"};
	mtd_prom_family(&b, "maitred_x_total", "counter", "Calls\\n.");
	mtd_prom_sample_u64(&b, "maitred_x_total", NULL, k, v, 2, 18446744073709551615ull);
	mtd_prom_sample(&b, "maitred_y", NULL, NULL, NULL, 0, 0.25);
	mtd_prom_sample_le(&b, "maitred_h", k, v, 1, 0.005, 3);
	mtd_prom_sample_le(&b, "maitred_h", k, v, 1, INFINITY, 4);
	ck_assert_str_eq(b.p, "# HELP maitred_x_total Calls\\\\n.\n"
	                      "# TYPE maitred_x_total counter\n"
	                      "maitred_x_total{service=\"a.B\",method=\"q\\\"\\\\\\nx\"} 18446744073709551615\n"
	                      "maitred_y 0.25\n"
	                      "maitred_h_bucket{service=\"a.B\",le=\"0.005\"} 3\n"
	                      "maitred_h_bucket{service=\"a.B\",le=\"+Inf\"} 4\n");
	mtd_abuf_clear(&b);
}
END_TEST

START_TEST(abuf_grows)
{
	struct mtd_abuf b = {0};
	for (int i = 0; i < 5000; i++)
		mtd_abuf_printf(&b, "%04d", i % 10000);
	ck_assert_uint_eq(b.len, 20000);
	ck_assert(memcmp(b.p + 19996, "4999", 4) == 0);
	char big[1000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	mtd_abuf_printf(&b, "%s", big);
	ck_assert_uint_eq(b.len, 20999);
	ck_assert_uint_eq(strlen(b.p), 20999);
	mtd_abuf_clear(&b);
}
END_TEST

START_TEST(abuf_fixed_never_grows)
{
	char mem[8];
	struct mtd_abuf b;
	mtd_abuf_init_fixed(&b, mem, sizeof(mem));
	mtd_abuf_puts(&b, "1234567");
	ck_assert(!b.oom);
	ck_assert_str_eq(b.p, "1234567");
	ck_assert_ptr_eq(b.p, mem);
	mtd_abuf_puts(&b, "8");
	ck_assert(b.oom);
	ck_assert_uint_eq(b.len, 7);
	mtd_abuf_clear(&b);
	ck_assert_ptr_eq(b.p, mem);
	ck_assert(!b.oom);
	mtd_abuf_printf(&b, "%d", 42);
	ck_assert_str_eq(b.p, "42");
}
END_TEST

START_TEST(secret_names)
{
	ck_assert(mtd_admin_is_secret_field("password"));
	ck_assert(mtd_admin_is_secret_field("etcd_password"));
	ck_assert(mtd_admin_is_secret_field("client_secret"));
	ck_assert(mtd_admin_is_secret_field("token"));
	ck_assert(mtd_admin_is_secret_field("private_key"));
	ck_assert(mtd_admin_is_secret_field("key"));
	ck_assert(!mtd_admin_is_secret_field("key_file"));
	ck_assert(!mtd_admin_is_secret_field("password_file"));
	ck_assert(!mtd_admin_is_secret_field("cert_file"));
	ck_assert(!mtd_admin_is_secret_field("hash_key"));
	ck_assert(!mtd_admin_is_secret_field("name"));
}
END_TEST

START_TEST(dump_config_message)
{
	Maitred__Config__V1__Config c = MAITRED__CONFIG__V1__CONFIG__INIT;
	Maitred__Config__V1__Service s = MAITRED__CONFIG__V1__SERVICE__INIT;
	Maitred__Config__V1__Service *sp = &s;
	Maitred__Config__V1__LoadBalancing lb = MAITRED__CONFIG__V1__LOAD_BALANCING__INIT;
	Maitred__Config__V1__Tls tls = MAITRED__CONFIG__V1__TLS__INIT;
	Maitred__Config__V1__Endpoint e = MAITRED__CONFIG__V1__ENDPOINT__INIT, *ep = &e;
	Google__Protobuf__UInt32Value w = GOOGLE__PROTOBUF__UINT32_VALUE__INIT;
	Google__Protobuf__Duration dt = GOOGLE__PROTOBUF__DURATION__INIT;
	char listen[] = "127.0.0.1:1", name[] = "a.B", ca[] = "/ca.pem", key[] = "/k.key", addr[] = "127.0.0.1:2";
	c.listen = listen;
	c.workers = 2;
	c.n_services = 1;
	c.services = &sp;
	dt.seconds = 1;
	dt.nanos = 500000000;
	c.drain_timeout = &dt;
	s.name = name;
	lb.policy = MAITRED__CONFIG__V1__LOAD_BALANCING__POLICY__MAGLEV;
	s.lb = &lb;
	tls.ca_file = ca;
	tls.key_file = key;
	s.tls = &tls;
	w.value = 7;
	e.address = addr;
	e.weight = &w;
	s.n_endpoints = 1;
	s.endpoints = &ep;
	struct mtd_abuf b = {0};
	struct mtd_json j;
	mtd_json_init(&j, &b);
	mtd_admin_dump_message(&j, &c.base);
	ck_assert(!b.oom);
	ck_assert_str_eq(b.p,
	                 "{\"listen\":\"127.0.0.1:1\",\"workers\":2,\"services\":[{\"name\":\"a.B\",\"lb\":{\"policy\":"
	                 "\"MAGLEV\"},\"tls\":{\"ca_file\":\"/ca.pem\",\"key_file\":\"/k.key\"},\"endpoints\":[{"
	                 "\"address\":\"127.0.0.1:2\",\"weight\":7}]}],\"drain_timeout\":\"1.500s\"}");
	mtd_abuf_clear(&b);
}
END_TEST

START_TEST(dump_map_entries_show_keys_and_hide_header_values)
{
	Maitred__Config__V1__Config c = MAITRED__CONFIG__V1__CONFIG__INIT;
	Maitred__Config__V1__Tracing t = MAITRED__CONFIG__V1__TRACING__INIT;
	Maitred__Config__V1__Otlp o = MAITRED__CONFIG__V1__OTLP__INIT;
	Maitred__Config__V1__Otlp__HeadersEntry h = MAITRED__CONFIG__V1__OTLP__HEADERS_ENTRY__INIT, *hp = &h;
	Maitred__Config__V1__Service s = MAITRED__CONFIG__V1__SERVICE__INIT, *sp = &s;
	Maitred__Config__V1__Split sp_ = MAITRED__CONFIG__V1__SPLIT__INIT;
	Maitred__Config__V1__Split__WeightsEntry we = MAITRED__CONFIG__V1__SPLIT__WEIGHTS_ENTRY__INIT, *wp = &we;
	char hk[] = "x-api-key", hv[] = "sekrit-123", url[] = "http://c:4318", name[] = "a.B", v1[] = "v1";
	h.key = hk;
	h.value = hv;
	o.endpoint = url;
	o.n_headers = 1;
	o.headers = &hp;
	t.otlp = &o;
	c.tracing = &t;
	we.key = v1;
	we.value = 90;
	sp_.n_weights = 1;
	sp_.weights = &wp;
	s.name = name;
	s.split = &sp_;
	c.n_services = 1;
	c.services = &sp;
	struct mtd_abuf b = {0};
	struct mtd_json j;
	mtd_json_init(&j, &b);
	mtd_admin_dump_message(&j, &c.base);
	ck_assert(!b.oom);
	ck_assert_ptr_null(strstr(b.p, "sekrit"));
	ck_assert_ptr_nonnull(strstr(b.p, "\"headers\":[{\"key\":\"x-api-key\",\"value\":\"" MTD_ADMIN_REDACTED "\"}]"));
	ck_assert_ptr_nonnull(strstr(b.p, "\"weights\":[{\"key\":\"v1\",\"value\":90}]"));
	mtd_abuf_clear(&b);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("admin");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, json_nesting_and_commas);
	tcase_add_test(tc, json_escapes_and_invalid_utf8);
	tcase_add_test(tc, prom_lines);
	tcase_add_test(tc, abuf_grows);
	tcase_add_test(tc, abuf_fixed_never_grows);
	tcase_add_test(tc, secret_names);
	tcase_add_test(tc, dump_config_message);
	tcase_add_test(tc, dump_map_entries_show_keys_and_hide_header_values);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *r = srunner_create(suite());
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
