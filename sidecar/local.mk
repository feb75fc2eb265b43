# The daemon: everything that owns a socket, a thread or a signal.
bin_PROGRAMS += sidecar/maitred
sidecar_maitred_SOURCES = sidecar/sidecar.h sidecar/control.h sidecar/main.c sidecar/runtime.c \
	sidecar/worker.c sidecar/conn.c sidecar/transport.h sidecar/transport.c \
	sidecar/downstream.c sidecar/upstream.c sidecar/pool.c sidecar/call.c \
	sidecar/attempt.c sidecar/relay.c sidecar/headers.c sidecar/dns.c \
	sidecar/gclient.h sidecar/gclient.c \
	sidecar/health.h sidecar/health.c \
	sidecar/etcd.h sidecar/etcd-int.h sidecar/etcd.c sidecar/etcd_register.c sidecar/etcd_watch.c
sidecar_maitred_LDADD = $(MAITRED_LIBS)

# The transport against an in-process OpenSSL server; conn.c's waits on it.
check_PROGRAMS += tests/unit/test_transport
TESTS += tests/unit/test_transport
tests_unit_test_transport_SOURCES = tests/unit/sidecar/test_transport.c \
	sidecar/conn.c sidecar/transport.c
tests_unit_test_transport_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_transport_LDADD = $(TEST_UNIT_LIBS)
