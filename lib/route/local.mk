lib_libmaitred_a_SOURCES += lib/route/route.h lib/route/route.c lib/route/regex.h lib/route/regex.c

check_PROGRAMS += tests/unit/test_route tests/unit/test_route_regex
TESTS += tests/unit/test_route tests/unit/test_route_regex
tests_unit_test_route_SOURCES = tests/unit/route/test_route.c
tests_unit_test_route_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_route_LDADD = $(TEST_UNIT_LIBS)
tests_unit_test_route_regex_SOURCES = tests/unit/route/test_regex.c
tests_unit_test_route_regex_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_route_regex_LDADD = $(TEST_UNIT_LIBS)
