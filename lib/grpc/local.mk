lib_libmaitred_a_SOURCES += lib/grpc/grpc.h lib/grpc/frame.c \
	lib/grpc/timeout.c lib/grpc/status.c

check_PROGRAMS += tests/unit/test_grpc
TESTS += tests/unit/test_grpc
tests_unit_test_grpc_SOURCES = tests/unit/grpc/test_grpc.c
tests_unit_test_grpc_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_grpc_LDADD = $(TEST_UNIT_LIBS)
