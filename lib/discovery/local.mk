# lib/discovery: endpoint sources' pure parts: the endpoint record sources
# hand the runtime, the registry record, and the logic of live endpoint sets
# (matching by identity, the reclaim rule).
lib_libmaitred_a_SOURCES += lib/discovery/discovery-t.h lib/discovery/discovery.h \
	lib/discovery/diff.c lib/discovery/record.h lib/discovery/record.c

check_PROGRAMS += tests/unit/test_record tests/unit/test_discovery
TESTS += tests/unit/test_record tests/unit/test_discovery
tests_unit_test_record_SOURCES = tests/unit/discovery/test_record.c
tests_unit_test_record_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_record_LDADD = $(TEST_UNIT_LIBS)
tests_unit_test_discovery_SOURCES = tests/unit/discovery/test_discovery.c
tests_unit_test_discovery_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_discovery_LDADD = $(TEST_UNIT_LIBS)
