lib_libmaitred_a_SOURCES += lib/core/log.h lib/core/log.c \
	lib/core/bufq.h lib/core/bufq.c \
	lib/core/slab.h lib/core/slab.c \
	lib/core/timers.h lib/core/timers.c \
	lib/core/clock.h lib/core/clock.c lib/core/bits.h lib/core/ref.h lib/core/hash.h \
	lib/core/addr.h lib/core/addr.c \
	lib/core/lazy.h lib/core/lazy.c \
	lib/core/base64.h lib/core/base64.c \
	lib/core/utf8.h lib/core/utf8.c

check_PROGRAMS += tests/unit/test_core
TESTS += tests/unit/test_core
tests_unit_test_core_SOURCES = tests/unit/core/test_core.c
tests_unit_test_core_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_core_LDADD = $(TEST_UNIT_LIBS)
