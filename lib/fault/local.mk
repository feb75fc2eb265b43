# lib/fault: the fault policy (pure: backoff, retry budget, pushback, the
# attempt state machine, the decision after a failed attempt).
lib_libmaitred_a_SOURCES += \
	lib/fault/fault-t.h lib/fault/fault.h \
	lib/fault/attempt.c lib/fault/backoff.c lib/fault/budget.c \
	lib/fault/latency.c lib/fault/policy.c

check_PROGRAMS += tests/unit/test_fault
TESTS += tests/unit/test_fault
tests_unit_test_fault_SOURCES = tests/unit/fault/test_fault.c
tests_unit_test_fault_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_fault_LDADD = $(TEST_UNIT_LIBS)
