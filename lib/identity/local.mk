# lib/identity: typed workload identities (URI or DNS SAN), the X509-SVID
# rule, and the principal patterns both directions of mesh mode match.
lib_libmaitred_a_SOURCES += lib/identity/identity.h lib/identity/identity.c

check_PROGRAMS += tests/unit/test_identity
TESTS += tests/unit/test_identity
tests_unit_test_identity_SOURCES = tests/unit/identity/test_identity.c
tests_unit_test_identity_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_identity_LDADD = $(TEST_UNIT_LIBS)
