# lib/health: the filter before the rule (outlier ejection; pure code).
lib_libmaitred_a_SOURCES += lib/health/health-t.h lib/health/outlier.h lib/health/outlier.c

check_PROGRAMS += tests/unit/test_health
TESTS += tests/unit/test_health
tests_unit_test_health_SOURCES = tests/unit/health/test_outlier.c
tests_unit_test_health_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_health_LDADD = $(TEST_UNIT_LIBS)
