# lib/config: the config loader (YAML/JSON/binary -> protobuf -> struct mtd_cfg).
lib_libmaitred_a_SOURCES += \
	lib/config/config-t.h lib/config/config.h lib/config/config-int.h \
	lib/config/diag.c lib/config/pbjson.c lib/config/load.c \
	lib/config/build-int.h lib/config/build.c lib/config/build_common.c \
	lib/config/build_service.c lib/config/build_lb.c lib/config/build_tls.c \
	lib/config/build_discovery.c lib/config/build_fault.c \
	lib/config/build_health.c lib/config/build_layer.c \
	lib/config/build_policy.c lib/config/build_inbound.c lib/config/build_tracing.c \
	lib/config/build_xds.c lib/config/cert_provider.c \
	lib/config/free.c lib/config/default.c

check_PROGRAMS += tests/unit/test_config
TESTS += tests/unit/test_config
tests_unit_test_config_SOURCES = tests/unit/config/test_config.c
tests_unit_test_config_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_config_LDADD = $(TEST_UNIT_LIBS)
EXTRA_DIST += deploy/maitred.example.yaml \
	tests/unit/config/fixtures/certs/ca.pem \
	tests/unit/config/fixtures/certs/client.pem \
	tests/unit/config/fixtures/certs/client.key \
	tests/unit/config/fixtures/good.yaml \
	tests/unit/config/fixtures/good.json
