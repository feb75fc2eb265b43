lib_libmaitred_a_SOURCES += lib/authz/authz-t.h lib/authz/authz.h lib/authz/authz.c lib/authz/xfcc.c

check_PROGRAMS += tests/unit/test_authz
TESTS += tests/unit/test_authz
tests_unit_test_authz_SOURCES = tests/unit/authz/test_authz.c
tests_unit_test_authz_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_authz_LDADD = $(TEST_UNIT_LIBS)
