lib_libmaitred_a_SOURCES += lib/route/route.h lib/route/route.c

check_PROGRAMS += tests/unit/test_route
TESTS += tests/unit/test_route
tests_unit_test_route_SOURCES = tests/unit/route/test_route.c
tests_unit_test_route_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_route_LDADD = $(TEST_UNIT_LIBS)
