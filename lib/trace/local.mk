# lib/trace: W3C trace context, the ids' keyed hash, span records, OTLP
# encoding; pure.
lib_libmaitred_a_SOURCES += lib/trace/context.h lib/trace/context.c \
	lib/trace/siphash.h lib/trace/siphash.c \
	lib/trace/span.h lib/trace/span.c lib/trace/otlp.h lib/trace/otlp.c

check_PROGRAMS += tests/unit/test_trace
TESTS += tests/unit/test_trace
tests_unit_test_trace_SOURCES = tests/unit/trace/test_trace.c
tests_unit_test_trace_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_trace_LDADD = $(TEST_UNIT_LIBS)
