# lib/discovery: endpoint sources' pure parts: the endpoint record sources
# hand the runtime (issue 7), the registry record.
lib_libmaitred_a_SOURCES += lib/discovery/discovery-t.h \
	lib/discovery/record.h lib/discovery/record.c

check_PROGRAMS += tests/unit/test_record
TESTS += tests/unit/test_record
tests_unit_test_record_SOURCES = tests/unit/discovery/test_record.c
tests_unit_test_record_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_record_LDADD = $(TEST_UNIT_LIBS)
