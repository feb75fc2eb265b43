"""The xDS test peers checked against a real xDS client: what
tests/xds/server.js serves, @grpc/grpc-js-xds (a proxyless gRPC client
that takes its listener, routes, clusters and endpoints from an ADS
server) understands, ACKs and NACKs as the protocol says. maitred's own
xDS tests rely on this server; this file is what makes it trustworthy.

No maitred here: the client calls the grpcio upstreams directly.
"""

import os

from harness import MaitredTest
import xds
from xds import (XdsServer, acked, nacked, cluster, assignment, locality, lb_endpoint,
                 listener, route_config, route_to, bootstrap, run_client)

NAME = "shop.Echo"


class XdsPeers(MaitredTest):
    def setUp(self):
        super().setUp()
        why = xds.node_missing()
        if why:
            self.fail(why)
        self.server = XdsServer(self.tmp).start()
        self.addCleanup(self.server.stop)
        self.ups = [self.start_upstream() for _ in range(3)]
        self.boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port,
                              node_id="witness-1", zone="z1")

    def serve(self, ups, lb="ROUND_ROBIN"):
        s = self.server
        s.set("listener", [listener(NAME, "routes-1")])
        s.set("route", [route_config("routes-1", [route_to(NAME)])])
        s.set("cluster", [cluster(NAME, lb_policy=lb, eds_name=NAME + "-eds")])
        s.set("endpoint", [assignment(NAME + "-eds", [locality([("127.0.0.1", u.port) for u in ups])])])

    def test_a_real_client_spreads_its_calls_over_the_served_endpoints(self):
        self.serve(self.ups)
        out = run_client(self.boot, "xds:///" + NAME, 30)
        self.assertEqual(out["failed"], {})
        self.assertEqual(out["ok"], 30)
        self.assertEqual(sorted(out["instances"]), sorted(u.name for u in self.ups))
        log = self.server.log()
        for t in (xds.LDS, xds.RDS, xds.CDS, xds.EDS):
            self.assertTrue(any(acked(r, t) for r in log), "no ACK of %s in %s" % (t, log))
        self.assertEqual({r["node_id"] for r in log}, {"witness-1"})
        self.assertEqual({r["zone"] for r in log}, {"z1"})
        eds = [r for r in log if r["type_url"] == xds.EDS and r["resource_names"]]
        self.assertEqual(eds[0]["resource_names"], [NAME + "-eds"])

    def test_an_endpoint_set_changed_by_the_server_moves_the_real_clients_calls(self):
        self.serve(self.ups)
        self.server.set("endpoint", [assignment(NAME + "-eds", [locality([("127.0.0.1", self.ups[2].port)])])])
        out = run_client(self.boot, "xds:///" + NAME, 10)
        self.assertEqual(out["ok"], 10)
        self.assertEqual(out["instances"], {self.ups[2].name: 10})

    def test_a_cluster_the_real_client_refuses_is_nacked_with_a_reason(self):
        self.serve(self.ups[:1])
        # gRPC takes only EDS and LOGICAL_DNS clusters (and aggregates): a
        # STATIC one is refused.
        bad = cluster(NAME, eds_name=NAME + "-eds")
        bad["type"] = "STATIC"
        self.server.set("cluster", [bad])
        out = run_client(self.boot, "xds:///" + NAME, 3)
        log = self.server.log()
        nacks = [r for r in log if nacked(r, xds.CDS)]
        self.assertTrue(nacks, "no NACK of the STATIC cluster: %s" % log)
        self.assertTrue(nacks[0]["error_detail"]["message"])
        # A fresh client never had a good cluster: its calls fail, which is
        # what shows the NACK was about this resource.
        self.assertEqual(out["ok"], 0)

    def test_weights_and_health_reach_the_real_client(self):
        s = self.server
        s.set("listener", [listener(NAME, "routes-1")])
        s.set("route", [route_config("routes-1", [route_to(NAME)])])
        s.set("cluster", [cluster(NAME)])
        s.set("endpoint", [assignment(NAME, [locality([
            lb_endpoint("127.0.0.1", self.ups[0].port),
            lb_endpoint("127.0.0.1", self.ups[1].port, health="UNHEALTHY"),
            lb_endpoint("127.0.0.1", self.ups[2].port, health="DRAINING")])])])
        out = run_client(self.boot, "xds:///" + NAME, 10)
        self.assertEqual(out["instances"], {self.ups[0].name: 10})

    def test_a_restarted_server_serves_on_the_same_port_what_was_set(self):
        self.serve(self.ups[:2])
        port = self.server.port
        self.server.stop()
        self.server.start(same_port=True)
        self.assertEqual(self.server.port, port)
        self.assertEqual(self.server.log(), [])
        out = run_client(self.boot, "xds:///" + NAME, 6)
        self.assertEqual(out["ok"], 6)
        self.assertEqual(sorted(out["instances"]), sorted(u.name for u in self.ups[:2]))

    def test_a_real_client_routes_by_path_and_header_patterns(self):
        """safe_regex as maitred reads it (test_xds's regex routes): a
        header's pattern and a path's, each matching the whole value."""
        s = self.server
        a, b = self.ups[0], self.ups[1]
        s.set("listener", [listener(NAME, "routes-1")])
        s.set("route", [route_config("routes-1", [
            {"match": {"prefix": "", "headers": [{"name": "x-track", "safe_regex_match": {"regex": "canary-[0-9]+"}}]},
             "route": {"cluster": "cl-a"}},
            {"match": {"safe_regex": {"regex": r"/maitred\.testing\.v1\.Ech[a-z]/Un.*"}}, "route": {"cluster": "cl-b"}},
            {"match": {"prefix": ""}, "route": {"cluster": "cl-a"}}])])
        s.set("cluster", [cluster("cl-a"), cluster("cl-b")])
        s.set("endpoint", [assignment("cl-a", [locality([("127.0.0.1", a.port)])]),
                           assignment("cl-b", [locality([("127.0.0.1", b.port)])])])
        for header, want in ((None, b), (("x-track", "canary-12"), a), (("x-track", "canary-12x"), b)):
            out = run_client(self.boot, "xds:///" + NAME, 4, header=header)
            self.assertEqual((out["ok"], sorted(out["instances"])), (4, [want.name]), (header, out))
        self.assertTrue(any(acked(r, xds.RDS) for r in self.server.log()))


if __name__ == "__main__":
    import unittest
    unittest.main()
