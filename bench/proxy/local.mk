# Proxy benchmark (bench/proxy/run.sh): the gRPC upstream it drives.
# Not installed, not part of `make check`.
noinst_PROGRAMS += bench/proxy/grpc_upstream
bench_proxy_grpc_upstream_SOURCES = bench/proxy/grpc_upstream.c
bench_proxy_grpc_upstream_CFLAGS = $(AM_CFLAGS)
bench_proxy_grpc_upstream_LDADD = $(NGHTTP2_LIBS) $(LIBEVENT_LIBS) $(OPENSSL_LIBS)
EXTRA_DIST += bench/proxy/README.md bench/proxy/run.sh bench/proxy/common.sh \
	bench/proxy/profile.sh bench/proxy/smaps.sh bench/proxy/idle_conns.py
