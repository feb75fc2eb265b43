# lib/lb: the balancing strategies (pure code, no I/O). One file per
# strategy; registry.c lists them.
lib_libmaitred_a_SOURCES += \
	lib/lb/lb-t.h lib/lb/lb.h lib/lb/lb-impl.h lib/lb/bounded.h \
	lib/lb/picker.c lib/lb/registry.c lib/lb/stats.c lib/lb/warmup.c \
	lib/lb/weights.c lib/lb/hash.c lib/lb/mintree.c lib/lb/least.c lib/lb/hotkeys.c \
	lib/lb/subset.c lib/lb/layer.c lib/lb/split.c \
	lib/lb/random.c lib/lb/weighted_random.c \
	lib/lb/round_robin.c lib/lb/weighted_round_robin.c \
	lib/lb/smooth_wrr.c \
	lib/lb/least_active.c lib/lb/least_request.c \
	lib/lb/weighted_response_time.c lib/lb/peak_ewma.c \
	lib/lb/shortest_response.c \
	lib/lb/consistent_hash.c lib/lb/maglev.c \
	lib/lb/orca.c lib/lb/client_side_wrr.c

# One Check suite per strategy/module (tests/unit/lb/test_<name>.c).
LB_UNIT_TESTS = \
	tests/unit/test_lb_round_robin \
	tests/unit/test_lb_random \
	tests/unit/test_lb_weighted_round_robin \
	tests/unit/test_lb_least \
	tests/unit/test_lb_latency \
	tests/unit/test_lb_hash \
	tests/unit/test_lb_warmup \
	tests/unit/test_lb_failmalloc \
	tests/unit/test_lb_threads \
	tests/unit/test_lb_ring \
	tests/unit/test_lb_layer \
	tests/unit/test_lb_split \
	tests/unit/test_lb_orca

check_PROGRAMS += $(LB_UNIT_TESTS)
TESTS += $(LB_UNIT_TESTS)

tests_unit_test_lb_round_robin_SOURCES = tests/unit/lb/test_round_robin.c tests/unit/lb/lb-test.h
tests_unit_test_lb_round_robin_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_round_robin_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_random_SOURCES = tests/unit/lb/test_random.c tests/unit/lb/lb-test.h
tests_unit_test_lb_random_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_random_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_weighted_round_robin_SOURCES = tests/unit/lb/test_weighted_round_robin.c tests/unit/lb/lb-test.h
tests_unit_test_lb_weighted_round_robin_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_weighted_round_robin_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_least_SOURCES = tests/unit/lb/test_least.c tests/unit/lb/lb-test.h
tests_unit_test_lb_least_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_least_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_latency_SOURCES = tests/unit/lb/test_latency.c tests/unit/lb/lb-test.h
tests_unit_test_lb_latency_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_latency_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_hash_SOURCES = tests/unit/lb/test_hash.c tests/unit/lb/lb-test.h
tests_unit_test_lb_hash_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_hash_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_warmup_SOURCES = tests/unit/lb/test_warmup.c tests/unit/lb/lb-test.h
tests_unit_test_lb_warmup_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_warmup_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_failmalloc_SOURCES = tests/unit/lb/test_failmalloc.c tests/unit/lb/lb-test.h
tests_unit_test_lb_failmalloc_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_failmalloc_LDADD = $(TEST_UNIT_LIBS)
# The fail-malloc suite interposes the allocator calls of lib/lb.
tests_unit_test_lb_failmalloc_LDFLAGS = $(AM_LDFLAGS) \
	-Wl,--wrap=malloc,--wrap=calloc,--wrap=aligned_alloc,--wrap=free

tests_unit_test_lb_threads_SOURCES = tests/unit/lb/test_threads.c tests/unit/lb/lb-test.h
tests_unit_test_lb_threads_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_threads_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_ring_SOURCES = tests/unit/lb/test_ring.c tests/unit/lb/lb-test.h
tests_unit_test_lb_ring_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_ring_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_layer_SOURCES = tests/unit/lb/test_layer.c tests/unit/lb/lb-test.h
tests_unit_test_lb_layer_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_layer_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_split_SOURCES = tests/unit/lb/test_split.c tests/unit/lb/lb-test.h
tests_unit_test_lb_split_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_split_LDADD = $(TEST_UNIT_LIBS)

tests_unit_test_lb_orca_SOURCES = tests/unit/lb/test_orca.c tests/unit/lb/lb-test.h
tests_unit_test_lb_orca_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_lb_orca_LDADD = $(TEST_UNIT_LIBS)
