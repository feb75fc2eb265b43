# The daemon: everything that owns a socket, a thread or a signal.
bin_PROGRAMS += sidecar/maitred
sidecar_maitred_SOURCES = sidecar/sidecar.h sidecar/control.h sidecar/main.c sidecar/runtime.c \
	sidecar/worker.c sidecar/conn.c sidecar/transport.h sidecar/transport.c \
	sidecar/downstream.c sidecar/upstream.c sidecar/pool.c sidecar/call.c \
	sidecar/attempt.c sidecar/failback.c sidecar/relay.c sidecar/headers.c sidecar/dns.c \
	sidecar/gclient.h sidecar/gclient.c \
	sidecar/mailbox.h sidecar/mailbox.c sidecar/health.h sidecar/health.c \
	sidecar/etcd.h sidecar/etcd-int.h sidecar/etcd.c sidecar/etcd_register.c sidecar/etcd_watch.c \
	sidecar/metrics.h sidecar/metrics.c sidecar/admin.h sidecar/admin.c
nodist_sidecar_maitred_SOURCES = sidecar/admin_page.c
sidecar_maitred_LDADD = $(MAITRED_LIBS)
EXTRA_DIST += sidecar/admin_page.html
BUILT_SOURCES += sidecar/admin_page.c
CLEANFILES += sidecar/admin_page.c

# The live page is embedded as bytes, so the binary serves it with no file
# beside it (and no outside asset: the page is self-contained).
sidecar/admin_page.c: $(srcdir)/sidecar/admin_page.html
	$(AM_V_GEN)mkdir -p sidecar && { \
	  echo '/* Generated from sidecar/admin_page.html by make; do not edit. */'; \
	  echo '#include <stddef.h>'; \
	  echo 'const char mtd_admin_page[] = {'; \
	  od -An -v -tx1 $(srcdir)/sidecar/admin_page.html | sed -e 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '0x00};'; \
	  echo 'const size_t mtd_admin_page_len = sizeof(mtd_admin_page) - 1;'; \
	} > $@.tmp && mv $@.tmp $@

# The transport against an in-process OpenSSL server; conn.c's waits on it.
check_PROGRAMS += tests/unit/test_transport
TESTS += tests/unit/test_transport
tests_unit_test_transport_SOURCES = tests/unit/sidecar/test_transport.c \
	sidecar/conn.c sidecar/transport.c
tests_unit_test_transport_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_transport_LDADD = $(TEST_UNIT_LIBS)

# The mailbox (mailbox.h): order, wake-up, leftovers, posters on threads.
check_PROGRAMS += tests/unit/test_mailbox
TESTS += tests/unit/test_mailbox
tests_unit_test_mailbox_SOURCES = tests/unit/sidecar/test_mailbox.c sidecar/mailbox.c
tests_unit_test_mailbox_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_mailbox_LDADD = $(TEST_UNIT_LIBS)
