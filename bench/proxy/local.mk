# Proxy benchmark (bench/proxy/run.sh): the gRPC upstream it drives.
# Not installed, not part of `make check`.
noinst_PROGRAMS += bench/proxy/grpc_upstream
bench_proxy_grpc_upstream_SOURCES = bench/proxy/grpc_upstream.c
bench_proxy_grpc_upstream_CFLAGS = $(AM_CFLAGS)
bench_proxy_grpc_upstream_LDADD = $(NGHTTP2_LIBS) $(LIBEVENT_LIBS) $(OPENSSL_LIBS)
EXTRA_DIST += bench/proxy/README.md bench/proxy/run.sh bench/proxy/common.sh bench/proxy/procs.sh \
	bench/proxy/profile.sh bench/proxy/smaps.sh bench/proxy/idle_conns.py
# bench/proxy/bulk.sh's client: large messages over one h2c connection.
noinst_PROGRAMS += bench/proxy/grpc_bulk
bench_proxy_grpc_bulk_SOURCES = bench/proxy/grpc_bulk.c
bench_proxy_grpc_bulk_CFLAGS = $(AM_CFLAGS)
bench_proxy_grpc_bulk_LDADD = $(NGHTTP2_LIBS)
EXTRA_DIST += bench/proxy/bulk.sh
EXTRA_DIST += bench/proxy/steady.sh bench/proxy/mesh.sh bench/proxy/otlp_sink.py
# bench/proxy/splice_relay.sh's relay, source and sink: what splice(2) would
# save a relay of DATA payloads on loopback. No library.
noinst_PROGRAMS += bench/proxy/splice_relay
bench_proxy_splice_relay_SOURCES = bench/proxy/splice_relay.c
bench_proxy_splice_relay_CFLAGS = $(AM_CFLAGS)
EXTRA_DIST += bench/proxy/splice_relay.sh
# bench/proxy's "relay" row: a hop that only carries bytes, the floor of a
# proxy at a steady rate (README "The floor of a hop"). No library.
noinst_PROGRAMS += bench/proxy/tcp_relay
bench_proxy_tcp_relay_SOURCES = bench/proxy/tcp_relay.c
bench_proxy_tcp_relay_CFLAGS = $(AM_CFLAGS)
