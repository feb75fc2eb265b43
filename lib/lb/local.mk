# lib/lb: the balancing strategies (pure code, no I/O). One file per
# strategy; registry.c lists them.
lib_libmaitred_a_SOURCES += \
	lib/lb/lb-t.h lib/lb/lb.h lib/lb/lb-impl.h lib/lb/bounded.h \
	lib/lb/picker.c lib/lb/registry.c lib/lb/stats.c lib/lb/warmup.c \
	lib/lb/weights.c lib/lb/hash.c \
	lib/lb/random.c lib/lb/weighted_random.c \
	lib/lb/round_robin.c lib/lb/weighted_round_robin.c \
	lib/lb/smooth_wrr.c \
	lib/lb/least_active.c lib/lb/least_request.c \
	lib/lb/weighted_response_time.c lib/lb/peak_ewma.c \
	lib/lb/shortest_response.c \
	lib/lb/consistent_hash.c lib/lb/maglev.c

# One Check suite per strategy/module (tests/unit/lb/test_<name>.c).
LB_UNIT_TESTS = \
	tests/unit/test_lb_round_robin

check_PROGRAMS += $(LB_UNIT_TESTS)
TESTS += $(LB_UNIT_TESTS)

tests_unit_test_lb_round_robin_SOURCES = tests/unit/lb/test_round_robin.c tests/unit/lb/lb-test.h
tests_unit_test_lb_round_robin_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_round_robin_LDADD = $(TEST_UNIT_LIBS)
