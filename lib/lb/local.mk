# lib/lb: the balancing strategies (pure code, no I/O). One file per
# strategy; registry.c lists them.
lib_libmaitred_a_SOURCES += \
	lib/lb/lb-t.h lib/lb/lb.h lib/lb/lb-impl.h \
	lib/lb/picker.c lib/lb/registry.c lib/lb/stats.c lib/lb/warmup.c \
	lib/lb/round_robin.c

EXTRA_DIST += tests/unit/lb/lb-test.h

# One Check suite per strategy/module.
LB_UNIT_TESTS = \
	tests/unit/test_lb_round_robin

check_PROGRAMS += $(LB_UNIT_TESTS)
TESTS += $(LB_UNIT_TESTS)

tests_unit_test_lb_round_robin_SOURCES = tests/unit/lb/test_round_robin.c tests/unit/lb/lb-test.h
tests_unit_test_lb_round_robin_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_round_robin_LDADD = $(TEST_UNIT_LIBS)
