# lib/pbwire: protobuf wire-format field extraction for hash keys.
lib_libmaitred_a_SOURCES += lib/pbwire/pbwire.h lib/pbwire/pbwire.c

check_PROGRAMS += tests/unit/test_pbwire
TESTS += tests/unit/test_pbwire
tests_unit_test_pbwire_SOURCES = tests/unit/pbwire/test_pbwire.c
tests_unit_test_pbwire_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_pbwire_LDADD = $(TEST_UNIT_LIBS)

EXTRA_DIST += fuzz/pbwire_fuzz.c fuzz/build.sh fuzz/corpus/pbwire
