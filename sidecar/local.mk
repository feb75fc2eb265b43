# The daemon: everything that owns a socket, a thread or a signal.
bin_PROGRAMS += sidecar/maitred
# One folder per role (HACKING.md, "Code map"): io/ the sockets and the two
# kinds of HTTP/2 connection, call/ the call engine, control/ the control
# thread (snapshots, sources, health checks), ops/ what operators read.
sidecar_maitred_SOURCES = sidecar/main.c sidecar/worker-t.h sidecar/worker.h sidecar/worker.c \
	sidecar/worker_turn.h sidecar/worker_turn.c sidecar/turn.h sidecar/turn.c \
	sidecar/io/transport.h sidecar/io/transport.c \
	sidecar/io/conn-t.h sidecar/io/conn.h sidecar/io/conn.c \
	sidecar/io/downstream-t.h sidecar/io/downstream.h sidecar/io/downstream.c \
	sidecar/io/inbound.h sidecar/io/inbound.c sidecar/io/listen.h sidecar/io/listen.c \
	sidecar/io/upstream.h sidecar/io/upstream.c \
	sidecar/io/pool-t.h sidecar/io/pool.h sidecar/io/pool.c sidecar/io/stream-t.h \
	sidecar/call/headers-t.h sidecar/call/headers.h sidecar/call/headers.c \
	sidecar/call/call-t.h sidecar/call/call.h sidecar/call/call.c \
	sidecar/call/down_port.h sidecar/call/down_port.c \
	sidecar/call/inbound_call.h sidecar/call/inbound_call.c \
	sidecar/call/attempt.h sidecar/call/attempt.c sidecar/call/attempt_stream.c \
	sidecar/call/relay.h sidecar/call/relay.c \
	sidecar/call/trace.h sidecar/call/trace.c \
	sidecar/call/failback.h sidecar/call/failback.c \
	sidecar/call/policy.h sidecar/call/policy.c \
	sidecar/call/park.h sidecar/call/park.c \
	sidecar/call/mirror.h sidecar/call/mirror.c \
	sidecar/call/fault_mode-t.h sidecar/call/mode/mode.h sidecar/call/mode/registry.c \
	sidecar/call/mode/failfast.c sidecar/call/mode/failover.c sidecar/call/mode/failsafe.c \
	sidecar/call/mode/failback.c sidecar/call/mode/forking.c sidecar/call/mode/broadcast.c \
	sidecar/control/control-t.h sidecar/control/control.h sidecar/control/publish.c \
	sidecar/control/sources.h sidecar/control/sources.c \
	sidecar/control/xds.h sidecar/control/xds-int.h sidecar/control/xds.c \
	sidecar/control/xds_subscribe.c sidecar/control/xds_clusters.c sidecar/control/xds_listener.c \
	sidecar/control/xds_services.c sidecar/control/xds_dump.c \
	sidecar/control/xds_routes.h sidecar/control/xds_routes.c \
	sidecar/control/runtime-t.h sidecar/control/runtime.h sidecar/control/runtime-int.h \
	sidecar/control/runtime.c sidecar/control/runtime_service.c \
	sidecar/control/endpoint.c \
	sidecar/control/mailbox.h sidecar/control/mailbox.c \
	sidecar/control/dns.h sidecar/control/dns.c \
	sidecar/control/health.h sidecar/control/health.c \
	sidecar/control/orca_oob.h sidecar/control/orca_oob.c \
	sidecar/control/certwatch.h sidecar/control/certwatch.c \
	sidecar/control/reload.h sidecar/control/reload.c \
	sidecar/control/gclient.h sidecar/control/gclient.c \
	sidecar/control/etcd.h sidecar/control/etcd-int.h sidecar/control/etcd.c \
	sidecar/control/etcd_register.c sidecar/control/etcd_watch.c \
	sidecar/ops/history.h sidecar/ops/history.c \
	sidecar/ops/metrics-t.h sidecar/ops/metrics-int.h sidecar/ops/metrics.h sidecar/ops/metrics.c \
	sidecar/ops/access_log.h sidecar/ops/access_log.c \
	sidecar/ops/prometheus.h sidecar/ops/prometheus.c \
	sidecar/ops/mesh.h sidecar/ops/mesh.c \
	sidecar/ops/trace_export.h sidecar/ops/trace_export.c \
	sidecar/ops/admin.h sidecar/ops/admin.c
nodist_sidecar_maitred_SOURCES = sidecar/ops/admin_page.c
sidecar_maitred_LDADD = $(MAITRED_LIBS)
sidecar_maitred_CFLAGS = $(AM_CFLAGS) $(LTO_CFLAGS)
sidecar_maitred_LDFLAGS = $(AM_LDFLAGS) $(LTO_CFLAGS)
EXTRA_DIST += sidecar/ops/admin_page.html
BUILT_SOURCES += sidecar/ops/admin_page.c
CLEANFILES += sidecar/ops/admin_page.c

# The live page is embedded as bytes, so the binary serves it with no file
# beside it (and no outside asset: the page is self-contained).
sidecar/ops/admin_page.c: $(srcdir)/sidecar/ops/admin_page.html
	$(AM_V_GEN)mkdir -p sidecar/ops && { \
	  echo '/* Generated from sidecar/ops/admin_page.html by make; do not edit. */'; \
	  echo '#include <stddef.h>'; \
	  echo 'const char mtd_admin_page[] = {'; \
	  od -An -v -tx1 $(srcdir)/sidecar/ops/admin_page.html | sed -e 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '0x00};'; \
	  echo 'const size_t mtd_admin_page_len = sizeof(mtd_admin_page) - 1;'; \
	} > $@.tmp && mv $@.tmp $@

# The transport against an in-process OpenSSL server; conn.c's waits on it.
check_PROGRAMS += tests/unit/test_transport
TESTS += tests/unit/test_transport
tests_unit_test_transport_SOURCES = tests/unit/sidecar/test_transport.c \
	sidecar/io/conn.c sidecar/io/transport.c
tests_unit_test_transport_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_transport_LDADD = $(TEST_UNIT_LIBS)
# read(2), send(2) and event_add fail on demand (what a socket or
# libevent may answer).
tests_unit_test_transport_LDFLAGS = -Wl,--wrap=read,--wrap=send,--wrap=sendmsg,--wrap=event_add

# Pools and upstream connections (pool.c, upstream.c) over loopback, the
# call engine and health checks stubbed; event_add fails on demand.
check_PROGRAMS += tests/unit/test_pool
TESTS += tests/unit/test_pool
tests_unit_test_pool_SOURCES = tests/unit/sidecar/test_pool.c \
	sidecar/io/pool.c sidecar/io/upstream.c sidecar/io/conn.c sidecar/io/transport.c \
	sidecar/control/endpoint.c
tests_unit_test_pool_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_pool_LDADD = $(TEST_UNIT_LIBS)
tests_unit_test_pool_LDFLAGS = -Wl,--wrap=event_add

# An endpoint identity's allocation (endpoint.c): its address, its
# registry names, what it refuses, its size.
check_PROGRAMS += tests/unit/test_endpoint
TESTS += tests/unit/test_endpoint
tests_unit_test_endpoint_SOURCES = tests/unit/sidecar/test_endpoint.c sidecar/control/endpoint.c
tests_unit_test_endpoint_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_endpoint_LDADD = $(TEST_UNIT_LIBS)

# A worker's timers on a real libevent loop (turn.c): woken at their due
# time through the timerfd, never a turn early, the fd quiet when idle; its
# snapshot holds: a runtime dropped only when the worker moved past it and
# its last call let go, those let go mid-turn at the reap.
check_PROGRAMS += tests/unit/test_turn
TESTS += tests/unit/test_turn
tests_unit_test_turn_SOURCES = tests/unit/sidecar/test_turn.c sidecar/turn.c sidecar/control/mailbox.c
tests_unit_test_turn_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_turn_LDADD = $(TEST_UNIT_LIBS)

# The refusal log's gates (ops/mesh.c): per address, and bounded over many.
check_PROGRAMS += tests/unit/test_mesh
TESTS += tests/unit/test_mesh
tests_unit_test_mesh_SOURCES = tests/unit/sidecar/test_mesh.c sidecar/ops/mesh.c
tests_unit_test_mesh_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_mesh_LDADD = $(TEST_UNIT_LIBS)

# The mailbox (mailbox.h): order, wake-up, leftovers, posters on threads.
check_PROGRAMS += tests/unit/test_mailbox
TESTS += tests/unit/test_mailbox
tests_unit_test_mailbox_SOURCES = tests/unit/sidecar/test_mailbox.c sidecar/control/mailbox.c
tests_unit_test_mailbox_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_mailbox_LDADD = $(TEST_UNIT_LIBS)

# The call engine driven through attempts, retries, hedges, cancels,
# reroutes and reloads by a scripted app and scripted endpoints: nghttp2
# sessions in memory, no socket, a clock the test moves.
# What is real and what is faked: tests/unit/sidecar/call_seam.c.
check_PROGRAMS += tests/unit/test_call
TESTS += tests/unit/test_call
tests_unit_test_call_SOURCES = tests/unit/sidecar/test_call.c \
	tests/unit/sidecar/call_seam.h tests/unit/sidecar/call_seam.c \
	sidecar/turn.c sidecar/worker_turn.c \
	sidecar/call/call.c sidecar/call/down_port.c sidecar/call/inbound_call.c \
	sidecar/call/attempt.c sidecar/call/attempt_stream.c sidecar/call/relay.c sidecar/call/policy.c \
	sidecar/call/mirror.c sidecar/call/trace.c sidecar/call/park.c \
	sidecar/call/failback.c sidecar/call/headers.c sidecar/call/mode/registry.c sidecar/call/mode/failfast.c \
	sidecar/call/mode/failover.c sidecar/call/mode/failsafe.c sidecar/call/mode/failback.c \
	sidecar/call/mode/forking.c sidecar/call/mode/broadcast.c \
	sidecar/io/conn.c sidecar/io/downstream.c sidecar/io/upstream.c sidecar/io/pool.c \
	sidecar/control/runtime.c sidecar/control/runtime_service.c sidecar/control/endpoint.c \
	sidecar/control/mailbox.c
tests_unit_test_call_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_call_LDFLAGS = $(AM_LDFLAGS) -Wl,--wrap=mtd_now_ns -Wl,--wrap=mtd_wall_ms -Wl,--wrap=mtd_up_connect \
	-Wl,--wrap=mtd_slab_malloc -Wl,--wrap=mtd_slab_calloc -Wl,--wrap=mtd_slab_realloc \
	-Wl,--wrap=mtd_slab_free
tests_unit_test_call_LDADD = $(TEST_UNIT_LIBS)
