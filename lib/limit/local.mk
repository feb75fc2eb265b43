# lib/limit: rate_limit's token bucket (issue 18), pure.
lib_libmaitred_a_SOURCES += lib/limit/limit.h lib/limit/bucket.c

check_PROGRAMS += tests/unit/test_limit
TESTS += tests/unit/test_limit
tests_unit_test_limit_SOURCES = tests/unit/limit/test_limit.c
tests_unit_test_limit_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_limit_LDADD = $(TEST_UNIT_LIBS)
