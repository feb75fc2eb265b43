# The daemon: everything that owns a socket, a thread or a signal.
bin_PROGRAMS += sidecar/maitred
sidecar_maitred_SOURCES = sidecar/sidecar.h sidecar/main.c sidecar/runtime.c \
	sidecar/worker.c sidecar/conn.c sidecar/transport.c \
	sidecar/downstream.c sidecar/upstream.c sidecar/pool.c sidecar/call.c
sidecar_maitred_LDADD = $(MAITRED_LIBS)
