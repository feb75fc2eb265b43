# lib/admin: pure pieces of the admin endpoint (buffers, JSON, Prometheus
# text, /config_dump rendering). The server itself is sidecar/ops/admin.c.
lib_libmaitred_a_SOURCES += lib/admin/admin.h lib/admin/buf.c lib/admin/json.c \
	lib/admin/prom.c lib/admin/dump.c

check_PROGRAMS += tests/unit/test_admin
TESTS += tests/unit/test_admin
tests_unit_test_admin_SOURCES = tests/unit/admin/test_admin.c
tests_unit_test_admin_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_admin_LDADD = $(TEST_UNIT_LIBS)
