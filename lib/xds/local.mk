# lib/xds: xDS resources (Envoy's protos/envoy/) translated into maitred's
# terms: a Cluster into service options, a ClusterLoadAssignment into
# endpoint records, a RouteConfiguration into routes, a Listener into
# where its routes are; a DiscoveryResponse sliced from the wire. Pure;
# the ADS client is sidecar/control/xds*.c.
lib_libmaitred_a_SOURCES += lib/xds/xds-t.h lib/xds/xds.h lib/xds/xds-int.h \
	lib/xds/cluster.c lib/xds/cla.c lib/xds/route.c lib/xds/fault.c \
	lib/xds/response.c lib/xds/unpack.c

check_PROGRAMS += tests/unit/test_xds
TESTS += tests/unit/test_xds
tests_unit_test_xds_SOURCES = tests/unit/xds/test_xds.c
tests_unit_test_xds_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_xds_LDADD = $(TEST_UNIT_LIBS)

check_PROGRAMS += tests/unit/test_xds_route
TESTS += tests/unit/test_xds_route
tests_unit_test_xds_route_SOURCES = tests/unit/xds/test_xds_route.c
tests_unit_test_xds_route_CFLAGS = $(TEST_UNIT_CFLAGS)
tests_unit_test_xds_route_LDADD = $(TEST_UNIT_LIBS)
