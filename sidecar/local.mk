bin_PROGRAMS += sidecar/maitred
sidecar_maitred_SOURCES = sidecar/main.c
sidecar_maitred_LDADD = $(MAITRED_LIBS)
