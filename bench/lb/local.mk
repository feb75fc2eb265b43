# Balancer benchmark and simulation (bench/lb/README.md). Built by `make`,
# run by hand; not part of `make check`.
noinst_PROGRAMS += bench/lb/lb_bench
bench_lb_lb_bench_SOURCES = bench/lb/lb_bench.c
bench_lb_lb_bench_CFLAGS = $(AM_CFLAGS)
bench_lb_lb_bench_LDADD = $(MAITRED_LIBS)
EXTRA_DIST += bench/lb/README.md
