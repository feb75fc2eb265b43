"""xDS discovery through the real maitred against tests/xds/server.js, a
state-of-the-world ADS management server (test_xds_peers checks it
against a real gRPC xDS client): clusters (CDS) and their endpoints (EDS)
spread calls over grpcio upstreams; an endpoint added and removed under
load without a failed call; a bad resource NACKed while the last good one
serves; priority failover; the management server down and back with a
changed assignment; a static service beside an xDS cluster of its name;
TLS to the management server; a reload that keeps or restarts the stream;
an EDS change right behind a CDS push applied while the push's rebuilds
are still pending (test-only MAITRED_TEST_XDS_SLICE / _GAP_MS), and that
a rebuild whose background slices never run still ends (_LATE_MS);
unusable xds.tls files refused at start; a server that drops every
connection never said to be back; locality weights that decide the share
beside maitred's own zone, as the grpc-js-xds client spreads them.

Every wait is bounded and only a hang guard: what is asserted is which
instances calls reached, how many calls failed, and what maitred sent the
server (ACKs, NACKs and their reasons, from the server's request log).
"""

import json
import os
import re
import shutil
import signal
import unittest

import grpc

from harness import (MaitredTest, TestCA, can_bind_mount, hosts_wrap, maitred_only, pb, call_id, free_port, wait_until,
                     CALL_LIMIT)
from test_admin import admin_request, samples, value
from test_etcd import Load
import xds
from xds import XdsServer, acked, nacked, cluster, assignment, locality, lb_endpoint, bootstrap

SVC = "maitred.testing.v1.Echo"
WAIT = 30.0  # hang guard for a change to show up


class XdsBase(MaitredTest):
    def setUp(self):
        super().setUp()
        why = xds.node_missing()
        if why:
            self.fail(why)
        self.server = XdsServer(self.tmp)
        self.addCleanup(self.server.stop)

    # --- helpers -------------------------------------------------------------

    def xds_config(self, services=None, admin=False, **xds_block):
        block = {"server": "127.0.0.1:%d" % self.server.port, "node_id": "maitred-1", "zone": "z1"}
        block.update(xds_block)
        top = {"xds": block}
        if admin:
            top["admin"] = "127.0.0.1:%d" % admin
        return self.config(services or [{"name": SVC, "discovery": {"xds": {}}}], **top)

    def spread(self, stub, n):
        return [stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(n)]

    def wait_set(self, stub, names, what):
        """Until a window of calls reaches exactly the instances `names`
        (failures meanwhile only mean "not yet")."""
        want = set(names)
        n = 4 * max(len(want), 1)

        def reached():
            try:
                return set(self.spread(stub, n)) == want
            except grpc.RpcError:
                return False
        wait_until(reached, WAIT, what, step=0.1)

    def serve(self, ups, name=SVC, lb="ROUND_ROBIN", eds_name=None, **extra):
        self.server.set("cluster", [cluster(name, lb_policy=lb, eds_name=eds_name, **extra)])
        self.server.set("endpoint", [assignment(eds_name or name,
                                                [locality([("127.0.0.1", u.port) for u in ups], zone="z1")])])

    def log_lines(self, m, pattern):
        return [line for line in m.proc.output().splitlines() if re.search(pattern, line)]



class XdsTest(XdsBase):
    # --- the cases -------------------------------------------------------------

    @maitred_only
    def test_cds_and_eds_spread_calls_over_the_served_endpoints(self):
        ups = [self.start_upstream(n) for n in "abc"]
        self.server.start()
        self.serve(ups, eds_name=SVC + "-eds")
        m = self.start_maitred(self.xds_config())
        stub = self.echo(m)
        self.wait_set(stub, "abc", "calls spread over a, b and c")
        got = self.spread(stub, 30)
        self.assertEqual({i: got.count(i) for i in "abc"}, {"a": 10, "b": 10, "c": 10})
        log = self.server.log()
        self.assertTrue(any(acked(r, xds.CDS) for r in log), log)
        self.assertTrue(any(acked(r, xds.EDS) for r in log), log)
        # Exactly what the service names, then its EDS name; who we are.
        cds = [r for r in log if r["type_url"] == xds.CDS]
        eds = [r for r in log if r["type_url"] == xds.EDS]
        self.assertEqual({tuple(r["resource_names"]) for r in cds}, {(SVC,)})
        self.assertEqual({tuple(r["resource_names"]) for r in eds}, {(SVC + "-eds",)})
        self.assertEqual({r["node_id"] for r in log}, {"maitred-1"})
        self.assertEqual({r["zone"] for r in log}, {"z1"})
        self.assertFalse([r for r in log if r["error_detail"]], "a NACK: %s" % log)
        self.stop_maitred(m)

    @maitred_only
    def test_maitred_and_a_real_xds_client_reach_the_same_upstreams(self):
        """The same resources, read by maitred and by @grpc/grpc-js-xds (a
        proxyless gRPC client, through the listener and route it needs):
        both spread over the same upstreams, and both follow a change of
        the assignment the same way."""
        ups = [self.start_upstream(n) for n in "abc"]
        self.server.start()
        s = self.server
        s.set("listener", [xds.listener(SVC, "routes-1")])
        s.set("route", [xds.route_config("routes-1", [xds.route_to(SVC)])])
        self.serve(ups, eds_name=SVC + "-eds")
        m = self.start_maitred(self.xds_config())
        stub = self.echo(m)
        self.wait_set(stub, "abc", "maitred over a, b and c")
        boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port, node_id="witness")
        out = xds.run_client(boot, "xds:///" + SVC, 30)
        self.assertEqual(out["ok"], 30, out)
        self.assertEqual(sorted(out["instances"]), ["a", "b", "c"])
        self.serve(ups[1:], eds_name=SVC + "-eds")
        self.wait_set(stub, "bc", "maitred over b and c after the change")
        out = xds.run_client(boot, "xds:///" + SVC, 20)
        self.assertEqual(out["ok"], 20, out)
        self.assertEqual(sorted(out["instances"]), ["b", "c"])
        # maitred asked for the cluster and its assignment only, never the
        # listener or the route it does not read yet.
        mine = [r for r in self.server.log() if r["node_id"] == "maitred-1"]
        self.assertEqual({r["type_url"] for r in mine}, {xds.CDS, xds.EDS})
        self.stop_maitred(m)

    @maitred_only
    def test_unavailable_naming_xds_until_the_cluster_and_its_endpoints_arrive(self):
        """Calls wait up to discovery.initial_wait for the first set
        (test_first_wait), then fail naming what is awaited."""
        up = self.start_upstream("a")
        self.server.start()
        m = self.start_maitred(self.xds_config([{"name": SVC, "discovery": {"xds": {}, "initial_wait": "200ms"}}]))
        stub = self.echo(m)
        self.server.wait_for(lambda log: any(r["type_url"] == xds.CDS for r in log), WAIT, "a CDS request")
        with self.assertRaises(grpc.RpcError) as e:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("xds: waiting for", e.exception.details())
        self.assertIn("discovery.initial_wait", e.exception.details())
        self.assertIn(SVC, e.exception.details())
        self.server.set("cluster", [cluster(SVC)])
        self.server.wait_for(lambda log: any(acked(r, xds.CDS) for r in log), WAIT, "the CDS ACK")

        def waiting_for_endpoints():
            try:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            except grpc.RpcError as err:
                return "waiting for the endpoints of cluster" in err.details()
            return False
        wait_until(waiting_for_endpoints, WAIT, "UNAVAILABLE naming the awaited endpoints")
        self.server.set("endpoint", [assignment(SVC, [locality([("127.0.0.1", up.port)])])])
        self.wait_set(stub, "a", "a once its assignment came")
        self.stop_maitred(m)

    @maitred_only
    def test_an_endpoint_added_and_removed_under_load_fails_no_call(self):
        a, b, c = (self.start_upstream(n) for n in "abc")
        self.server.start()
        self.serve([a, b])
        m = self.start_maitred(self.xds_config())
        stub = self.echo(m)
        self.wait_set(stub, "ab", "a and b")
        load = Load(self.echo(m))
        self.serve([a, b, c])
        self.wait_set(stub, "abc", "c added while calls run")
        self.serve([b, c])
        self.wait_set(stub, "bc", "a removed while calls run")
        before = load.count()
        wait_until(lambda: load.count() >= before + 20, WAIT, "more calls after the changes")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed while endpoints changed")
        self.assertIn("c", load.instances)
        self.stop_maitred(m)

    @maitred_only
    def test_a_bad_resource_is_nacked_and_the_last_good_one_serves(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        admin = free_port()
        self.server.start()
        self.serve([a])
        m = self.start_maitred(self.xds_config(admin=admin))
        stub = self.echo(m)
        self.wait_set(stub, "a", "a")
        # An endpoint without a numeric address: the assignment is refused.
        bad = assignment(SVC, [locality([lb_endpoint("a.example", b.port)])])
        v = self.server.set("endpoint", [bad])
        log = self.server.wait_for(lambda log: any(nacked(r, xds.EDS) for r in log), WAIT, "the EDS NACK")
        nack = [r for r in log if nacked(r, xds.EDS)][0]
        self.assertIn("is not a numeric IP", nack["error_detail"]["message"])
        self.assertIn(SVC, nack["error_detail"]["message"])
        self.assertEqual(nack["error_detail"]["code"], 3)
        self.assertNotEqual(nack["version_info"], str(v), "a NACK names the last version accepted")
        self.assertEqual(set(self.spread(stub, 10)), {"a"}, "the last good assignment serves on")
        # An unsupported policy: the cluster is refused, the last good one serves.
        self.server.set("cluster", [cluster(SVC, lb_policy="CLUSTER_PROVIDED")])
        log = self.server.wait_for(lambda log: any(nacked(r, xds.CDS) for r in log), WAIT, "the CDS NACK")
        self.assertIn("lb_policy", [r for r in log if nacked(r, xds.CDS)][0]["error_detail"]["message"])
        self.assertEqual(set(self.spread(stub, 10)), {"a"})
        self.assertTrue(self.log_lines(m, r"xds: NACK of endpoint resources .*is not a numeric IP"),
                        m.proc.output())
        # Figures and the dump say so.
        metrics = admin_request(admin, "GET", "/metrics")[2]
        self.assertGreaterEqual(value(samples(metrics), "maitred_xds_nacks_total"), 2)
        self.assertGreaterEqual(value(samples(metrics), "maitred_xds_acks_total"), 2)
        self.assertEqual(value(samples(metrics), "maitred_xds_connected"), 1)
        dump = json.loads(admin_request(admin, "GET", "/config_dump")[2])["xds"]
        self.assertIn("lb_policy", dump["clusters"]["last_nack"])
        self.assertIn("numeric IP", dump["endpoints"]["resources"][0]["last_nack"])
        self.assertEqual(dump["endpoints"]["resources"][0]["endpoints"], 1)
        # A good one again: accepted and in force.
        self.serve([b])
        self.wait_set(stub, "b", "b after a good assignment again")
        self.stop_maitred(m)

    @maitred_only
    def test_a_cluster_named_with_a_nul_is_nacked_and_the_last_good_one_serves(self):
        """A cluster named SVC + "\\0x": protobuf-c's C string would end at
        the NUL and read it as SVC's cluster (its EDS name taking the calls
        to b); it is NACKed naming the field, removes no cluster, and the
        last good cluster serves on."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.every = "cluster"  # the NUL-named one is no name maitred asks for
        self.server.start()
        self.serve([a])
        m = self.start_maitred(self.xds_config())
        stub = self.echo(m)
        self.wait_set(stub, "a", "a")
        self.server.set("endpoint", [assignment(SVC, [locality([("127.0.0.1", a.port)], zone="z1")]),
                                     assignment("evil", [locality([("127.0.0.1", b.port)], zone="z1")])])
        self.server.set("cluster", [cluster(SVC + "\0x", eds_name="evil")])
        log = self.server.wait_for(lambda log: any(nacked(r, xds.CDS) for r in log), WAIT, "the CDS NACK")
        nack = [r for r in log if nacked(r, xds.CDS)][0]["error_detail"]
        self.assertIn("(unnamed): a NUL in string field name", nack["message"])
        self.assertEqual(nack["code"], 3)
        self.assertEqual(set(self.spread(stub, 10)), {"a"}, "the last good cluster serves on")
        self.assertTrue(self.log_lines(m, r"xds: NACK of cluster resources .*a NUL in string field name"),
                        m.proc.output())
        self.stop_maitred(m)

    @maitred_only
    def test_discovery_figures_follow_each_services_assignment(self):
        """maitred_discovery_endpoints{source="xds"} of each service
        follows its own cluster's assignment, push after push (the figures'
        entry is found once per service, not at each set)."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        admin = free_port()
        self.server.start()
        services = [{"name": SVC, "discovery": {"xds": {"cluster": "cl-echo"}}},
                    {"name": "other.v1.Other", "discovery": {"xds": {"cluster": "cl-other"}}}]
        self.server.set("cluster", [cluster("cl-echo"), cluster("cl-other")])

        def assign(n_echo, n_other):
            ports = [a.port, b.port]
            self.server.set("endpoint", [
                assignment("cl-echo", [locality([("127.0.0.1", p) for p in ports[:n_echo]])]),
                assignment("cl-other", [locality([("127.0.0.%d" % (9 + i), 9) for i in range(n_other)])])])

        def figures():
            ss = samples(admin_request(admin, "GET", "/metrics")[2])
            return tuple(value(ss, "maitred_discovery_endpoints", service=s, source="xds")
                         for s in (SVC, "other.v1.Other"))
        assign(2, 3)
        m = self.start_maitred(self.xds_config(services, admin=admin))
        stub = self.echo(m)
        self.wait_set(stub, "ab", "a and b")
        wait_until(lambda: figures() == (2, 3), WAIT, "figures 2 and 3")
        assign(1, 3)
        self.wait_set(stub, "a", "a alone")
        wait_until(lambda: figures() == (1, 3), WAIT, "figures 1 and 3")
        assign(1, 5)
        wait_until(lambda: figures() == (1, 5), WAIT, "figures 1 and 5")
        self.stop_maitred(m)

    @maitred_only
    def test_an_eds_push_rebuilds_only_the_services_whose_assignment_changed(self):
        """A state-of-the-world EDS response resends every assignment: one
        equal to the one in force is not applied again (its "updates" in
        /config_dump stays), the changed one is; both take the version."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        admin = free_port()
        self.server.start()
        services = [{"name": SVC, "discovery": {"xds": {"cluster": "cl-echo"}}},
                    {"name": "other.v1.Other", "discovery": {"xds": {"cluster": "cl-other"}}}]
        self.server.set("cluster", [cluster("cl-echo"), cluster("cl-other")])

        def assign(echo_ports):
            return self.server.set("endpoint", [
                assignment("cl-echo", [locality([("127.0.0.1", p) for p in echo_ports])]),
                assignment("cl-other", [locality([("127.0.0.9", 9)])])])

        def resources():
            dump = json.loads(admin_request(admin, "GET", "/config_dump")[2])["xds"]
            return {r["name"]: r for r in dump["endpoints"]["resources"]}
        assign([a.port])
        m = self.start_maitred(self.xds_config(services, admin=admin))
        stub = self.echo(m)
        self.wait_set(stub, "a", "a")
        wait_until(lambda: all(r["state"] == "ACKED" for r in resources().values()), WAIT, "both ACKED")
        self.assertEqual({n: r["updates"] for n, r in resources().items()}, {"cl-echo": 1, "cl-other": 1})
        v = assign([b.port])
        self.wait_set(stub, "b", "b after the change of cl-echo")
        self.server.wait_for(lambda log: any(acked(r, xds.EDS, v) for r in log), WAIT, "the ACK")
        got = resources()
        self.assertEqual({n: r["updates"] for n, r in got.items()}, {"cl-echo": 2, "cl-other": 1},
                         "only the changed assignment was applied again")
        self.assertEqual({n: r["version"] for n, r in got.items()}, {"cl-echo": str(v), "cl-other": str(v)})
        self.stop_maitred(m)

    @maitred_only
    def test_a_cluster_change_applies_the_assignment_kept_as_its_bytes(self):
        """An assignment is kept only as the bytes that came: a CDS change
        alone gives each service its assignment translated again, a small
        one (2 endpoints) and a large one (70, whose translation on
        arrival serves until it is applied), and the calls go on."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        admin = free_port()
        self.server.start()
        services = [{"name": SVC, "discovery": {"xds": {"cluster": "cl-echo"}}},
                    {"name": "other.v1.Other", "discovery": {"xds": {"cluster": "cl-big"}}}]
        big = ["127.0.1.%d:9" % (i + 1) for i in range(70)]

        def clusters(lb):
            self.server.set("cluster", [cluster("cl-echo", lb_policy=lb), cluster("cl-big", lb_policy=lb)])

        def assign(n_big):
            self.server.set("endpoint", [
                assignment("cl-echo", [locality([("127.0.0.1", a.port), ("127.0.0.1", b.port)])]),
                assignment("cl-big", [locality([(e.split(":")[0], 9) for e in big[:n_big]])])])

        def state():
            got = json.loads(admin_request(admin, "GET", "/clusters")[2])["services"]
            return {s["name"]: (s["policy"], sorted(e["address"] for e in s["endpoints"])) for s in got}

        def want(lb, n_big):
            return {SVC: (lb, sorted("127.0.0.1:%d" % u.port for u in (a, b))),
                    "other.v1.Other": (lb, sorted(big[:n_big]))}
        clusters("ROUND_ROBIN")
        assign(70)
        m = self.start_maitred(self.xds_config(services, admin=admin))
        stub = self.echo(m)
        self.wait_set(stub, "ab", "a and b")
        wait_until(lambda: state() == want("WEIGHTED_ROUND_ROBIN", 70), WAIT, "both sets")
        load = Load(self.echo(m))
        clusters("LEAST_REQUEST")
        wait_until(lambda: state() == want("LEAST_REQUEST", 70), WAIT, "the new policy over the same sets")
        assign(66)
        wait_until(lambda: state() == want("LEAST_REQUEST", 66), WAIT, "66 endpoints")
        before = load.count()
        wait_until(lambda: load.count() >= before + 20, WAIT, "more calls after the changes")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed across the changes")
        self.assertEqual(set(load.instances), {"a", "b"})
        self.stop_maitred(m)

    # The pending rebuilds (sidecar/control/xds_services.c, struct xds_pending): a
    # CDS response is answered at once and its services rebuilt a slice per
    # event-loop turn. MAITRED_TEST_XDS_SLICE and _GAP_MS (test-only) make
    # the slices one service each, a day apart: the rebuild stays pending
    # for the whole test, whatever the machine's speed.
    SLOW_REBUILD = {"MAITRED_TEST_XDS_SLICE": "1", "MAITRED_TEST_XDS_SLICE_GAP_MS": "86400000"}

    def four_services(self, a):
        """SVC on cl-echo (upstream a), three others on fake endpoints."""
        others = ["other.v1.B", "other.v1.C", "other.v1.D"]
        services = [{"name": SVC, "discovery": {"xds": {"cluster": "cl-echo"}}}] + \
            [{"name": n, "discovery": {"xds": {"cluster": "cl-" + n[-1].lower()}}} for n in others]
        fake = {"cl-b": "127.0.0.11", "cl-c": "127.0.0.12", "cl-d": "127.0.0.13"}
        return services, others, fake

    def clusters_state(self, admin):
        got = json.loads(admin_request(admin, "GET", "/clusters")[2])["services"]
        return {s["name"]: (s["policy"], sorted(e["address"] for e in s["endpoints"])) for s in got}

    def many_services(self, n, env):
        """maitred (environment env) with SVC on cl-echo (an upstream) and
        n others on a fake endpoint each, every service on its cluster;
        (maitred, its admin port, the cluster names)."""
        a = self.start_upstream("a")
        admin = free_port()
        self.server.start()
        names = ["other.v1.S%02d" % i for i in range(n)]
        services = [{"name": SVC, "discovery": {"xds": {"cluster": "cl-echo"}}}] + \
            [{"name": s, "discovery": {"xds": {"cluster": "cl-" + s[-3:]}}} for s in names]
        cls = ["cl-echo"] + ["cl-" + s[-3:] for s in names]
        self.server.set("cluster", [cluster(c) for c in cls])
        self.server.set("endpoint", [assignment("cl-echo", [locality([("127.0.0.1", a.port)])])] +
                        [assignment(c, [locality([("127.0.1.%d" % i, 9)])]) for i, c in enumerate(cls[1:])])
        m = self.start_maitred(self.xds_config(services, admin=admin), env=env)
        self.wait_set(self.echo(m), "a", "a")
        wait_until(lambda: {p for p, _ in self.clusters_state(admin).values()} == {"WEIGHTED_ROUND_ROBIN"}, WAIT,
                   "every service on its cluster")
        return m, admin, cls

    def rebuilds_pending(self, admin):
        ss = samples(admin_request(admin, "GET", "/metrics")[2])
        dump = json.loads(admin_request(admin, "GET", "/config_dump")[2])["xds"]
        return value(ss, "maitred_xds_rebuilds_pending"), dump.get("rebuilds_pending")

    @maitred_only
    def test_an_eds_change_right_behind_a_cds_push_is_not_delayed_by_its_rebuild(self):
        """A CDS push changing every cluster, then an EDS change of one, back
        to back on the stream: the CDS response is ACKed and its services
        queued; the EDS change is applied at once, with the newest cluster,
        while the others still wait for their rebuild. A newer CDS push
        queues each service once; a reconnect keeps what is queued; a reload
        gives every service the newest, as a fresh maitred would, and so
        does a new stream after a reload that changes the xds block."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        admin = free_port()
        self.server.start()
        services, others, fake = self.four_services(a)

        def clusters(lb):
            return [cluster(n, lb_policy=lb) for n in ["cl-echo"] + sorted(fake)]

        def assign(echo_port):
            return [assignment("cl-echo", [locality([("127.0.0.1", echo_port)])])] + \
                [assignment(n, [locality([(h, 9)])]) for n, h in sorted(fake.items())]

        def want(echo_lb, echo_up, other_lb):
            w = {SVC: (echo_lb, ["127.0.0.1:%d" % echo_up.port])}
            w.update({n: (other_lb, [fake["cl-" + n[-1].lower()] + ":9"]) for n in others})
            return w
        self.server.set("cluster", clusters("ROUND_ROBIN"))
        self.server.set("endpoint", assign(a.port))
        cfg = self.xds_config(services, admin=admin)
        m = self.start_maitred(cfg, env=self.SLOW_REBUILD)
        stub = self.echo(m)
        # The first CDS response queues all four; each is given its
        # cluster with its assignment by the EDS response.
        self.wait_set(stub, "a", "a")
        wait_until(lambda: self.clusters_state(admin) == want("WEIGHTED_ROUND_ROBIN", a, "WEIGHTED_ROUND_ROBIN"),
                   WAIT, "every service on its cluster")

        cv, ev = self.server.batch([("cluster", clusters("LEAST_REQUEST")), ("endpoint", assign(b.port))])
        self.wait_set(stub, "b", "b, the EDS change behind the CDS push")
        self.server.wait_for(lambda log: any(acked(r, xds.CDS, cv) for r in log), WAIT, "the CDS ACK")
        self.server.wait_for(lambda log: any(acked(r, xds.EDS, ev) for r in log), WAIT, "the EDS ACK")
        self.assertEqual(self.clusters_state(admin), want("LEAST_REQUEST", b, "WEIGHTED_ROUND_ROBIN"),
                         "the EDS change took the newest cluster; the others wait for their rebuild")
        self.assertEqual(self.rebuilds_pending(admin), (3, 3))

        # A newer CDS push: every service queued once (four, not seven).
        cv = self.server.set("cluster", clusters("RANDOM"))
        self.server.wait_for(lambda log: any(acked(r, xds.CDS, cv) for r in log), WAIT, "the second CDS ACK")
        self.assertEqual(self.rebuilds_pending(admin), (4, 4))
        self.assertEqual(self.clusters_state(admin), want("LEAST_REQUEST", b, "WEIGHTED_ROUND_ROBIN"))

        # The server away and back with the same resources: nothing is
        # queued again, nothing leaves the queue; an EDS change of cl-b
        # on the new stream rebuilds other.v1.B at once, with RANDOM.
        self.server.stop()
        wait_until(lambda: self.log_lines(m, r"xds: 127\.0\.0\.1:\d+: .*last good resources stay"), WAIT,
                   "maitred to notice the server went")
        self.assertEqual(self.rebuilds_pending(admin), (4, 4))
        self.server.start(same_port=True)
        self.server.wait_for(lambda log: sum(1 for r in log if acked(r, xds.EDS)) >= 1, WAIT,
                             "an EDS ACK on the new stream")
        self.assertEqual(self.rebuilds_pending(admin), (4, 4))
        fake["cl-b"] = "127.0.0.21"
        ev = self.server.set("endpoint", assign(b.port))
        self.server.wait_for(lambda log: any(acked(r, xds.EDS, ev) for r in log), WAIT, "the EDS ACK of cl-b")
        got = self.clusters_state(admin)
        self.assertEqual(got["other.v1.B"], ("WEIGHTED_RANDOM", ["127.0.0.21:9"]))
        self.assertEqual(got["other.v1.C"], ("WEIGHTED_ROUND_ROBIN", ["127.0.0.12:9"]))
        self.assertEqual(self.rebuilds_pending(admin), (3, 3))

        # A reload (the same services, another setting): its services are
        # given the newest clusters at once, nothing stays queued.
        load = Load(self.echo(m))
        cfg["drain_timeout"] = "4s"
        self.write_config(cfg, os.path.basename(m.config_path))
        wait_until(lambda: self.clusters_state(admin) == want("WEIGHTED_RANDOM", b, "WEIGHTED_RANDOM"), WAIT,
                   "every service on the newest cluster after the reload")
        self.assertEqual(self.rebuilds_pending(admin), (0, 0))
        before = load.count()
        wait_until(lambda: load.count() >= before + 20, WAIT, "more calls after the reload")

        # Rebuilds pending, then a reload that changes the xds block: the
        # old client goes with its queue; the new stream's responses give
        # every service the newest cluster.
        cv = self.server.set("cluster", clusters("LEAST_REQUEST"))
        self.server.wait_for(lambda log: any(acked(r, xds.CDS, cv) for r in log), WAIT, "the third CDS ACK")
        self.assertEqual(self.rebuilds_pending(admin), (4, 4))
        cfg["xds"]["node_id"] = "maitred-2"
        self.write_config(cfg, os.path.basename(m.config_path))
        # The reload's snapshot already carries the old client's newest
        # clusters (mtd_xds_over_now); the new stream's, translated again,
        # are rebuilt in the background: none stays queued.
        wait_until(lambda: self.clusters_state(admin) == want("LEAST_REQUEST", b, "LEAST_REQUEST") and
                   self.rebuilds_pending(admin) == (0, 0), WAIT,
                   "every service on the newest cluster through the new stream, no rebuild left")
        before = load.count()
        wait_until(lambda: load.count() >= before + 20, WAIT, "more calls after the second reload")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed across the reloads")
        self.stop_maitred(m)

    @maitred_only
    def test_a_cds_push_is_rebuilt_a_slice_at_a_time_to_the_end(self):
        """One service per slice, no delay: every service of a CDS push of
        every cluster reaches the new policy, the queue empties, and no
        call fails meanwhile."""
        m, admin, cls = self.many_services(12, {"MAITRED_TEST_XDS_SLICE": "1"})
        load = Load(self.echo(m))
        self.server.set("cluster", [cluster(c, lb_policy="LEAST_REQUEST") for c in cls])
        wait_until(lambda: {p for p, _ in self.clusters_state(admin).values()} == {"LEAST_REQUEST"}, WAIT,
                   "every service on the new policy")
        self.assertEqual(self.rebuilds_pending(admin), (0, 0))
        self.assertEqual(len(self.log_lines(m, r"test-only rebuild limits: 1 service")), 1)
        before = load.count()
        wait_until(lambda: load.count() >= before + 20, WAIT, "more calls after the change")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed across the rebuild")
        self.stop_maitred(m)

    @maitred_only
    def test_a_rebuild_whose_background_slices_never_run_still_ends(self):
        """The slices run at a background priority, after every other event
        of the control loop; a loop busy in every turn would hold them back
        for good. A timer of normal priority bounds the wait: here the
        background slices are a day apart (as if starved) and the bound is
        50 ms, and the rebuild of every service still ends."""
        m, admin, cls = self.many_services(6, dict(self.SLOW_REBUILD, MAITRED_TEST_XDS_SLICE_LATE_MS="50"))
        self.server.set("cluster", [cluster(c, lb_policy="LEAST_REQUEST") for c in cls])
        wait_until(lambda: {p for p, _ in self.clusters_state(admin).values()} == {"LEAST_REQUEST"}, WAIT,
                   "every service on the new policy, the background slices a day apart")
        self.assertEqual(self.rebuilds_pending(admin), (0, 0))
        self.assertEqual(len(self.log_lines(m, r"test-only rebuild limits: 1 service.*, 50 ms at most")), 1)
        self.stop_maitred(m)

    @maitred_only
    def test_bad_test_only_rebuild_limits_are_refused(self):
        """The test-only limits refuse what is not a count: "-1" is not
        read as no limit (strtoull's largest value), 0 ms is no bound."""
        self.server.start()
        env = {"MAITRED_TEST_XDS_SLICE": "-1", "MAITRED_TEST_XDS_SLICE_LATE_MS": "0"}
        m = self.start_maitred(self.xds_config([{"name": SVC, "discovery": {"xds": {"cluster": "cl-echo"}}}]),
                               env=env)
        wait_until(lambda: self.log_lines(m, r"MAITRED_TEST_XDS_SLICE_LATE_MS=0 is not"), WAIT,
                   "the bad bound refused")
        self.assertEqual(len(self.log_lines(m, r"MAITRED_TEST_XDS_SLICE=-1 is not 1\.\.\d+: ignored")), 1)
        self.assertEqual(self.log_lines(m, r"test-only rebuild limits"), [])
        self.stop_maitred(m)

    @maitred_only
    def test_the_clusters_policy_and_the_weights_decide_the_spread(self):
        """The service's own lb is plain ROUND_ROBIN (weights ignored); the
        cluster's ROUND_ROBIN is Envoy's, weighted: 3:1 endpoint weights
        and then 1:3 locality weights show in the spread."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.server.set("cluster", [cluster(SVC)])
        self.server.set("endpoint", [assignment(SVC, [locality([lb_endpoint("127.0.0.1", a.port, weight=3),
                                                                lb_endpoint("127.0.0.1", b.port, weight=1)])])])
        svc = {"name": SVC, "lb": {"policy": "ROUND_ROBIN"}, "discovery": {"xds": {}}}
        m = self.start_maitred(self.xds_config([svc]))
        stub = self.echo(m)
        self.wait_set(stub, "ab", "a and b")
        got = self.spread(stub, 40)
        self.assertEqual((got.count("a"), got.count("b")), (30, 10), got)
        self.assertTrue(self.log_lines(m, r"service %s: 2 endpoints, policy WEIGHTED_ROUND_ROBIN" % re.escape(SVC)),
                        m.proc.output())
        self.server.set("endpoint", [assignment(SVC, [locality([("127.0.0.1", a.port)], zone="z1", weight=1),
                                                      locality([("127.0.0.1", b.port)], zone="z2", weight=3)])])

        def b_three_of_four():
            got = self.spread(stub, 40)
            return (got.count("a"), got.count("b")) == (10, 30)
        wait_until(b_three_of_four, WAIT, "the locality weights' 1:3 spread")
        # Another policy from the cluster: LEAST_REQUEST, in force.
        self.server.set("cluster", [cluster(SVC, lb_policy="LEAST_REQUEST",
                                            least_request_lb_config={"choice_count": 2})])
        wait_until(lambda: self.log_lines(m, r"service %s: 2 endpoints, policy LEAST_REQUEST" % re.escape(SVC)),
                   WAIT, "the cluster's new policy")
        self.stop_maitred(m)

    @maitred_only
    def test_locality_weights_decide_the_share_whatever_maitreds_zone(self):
        """maitred's zone is z1 (top level: zone routing on). Localities
        z1 and z2 weighted 1:3 get a quarter and three quarters of the
        calls, as the grpc-js-xds client spreads them (before: all 40 on
        z1); without locality weights, the zone routing meets the
        localities' zones: every call on z1."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.server.set("cluster", [cluster(SVC)])
        weighted = [locality([("127.0.0.1", a.port)], zone="z1", weight=1),
                    locality([("127.0.0.1", b.port)], zone="z2", weight=3)]
        self.server.set("endpoint", [assignment(SVC, weighted)])
        self.server.set("listener", [xds.listener(SVC, "routes-1")])
        self.server.set("route", [xds.route_config("routes-1", [xds.route_to(SVC)])])
        cfg = self.xds_config()
        cfg["zone"] = "z1"
        del cfg["xds"]["zone"]
        m = self.start_maitred(cfg)
        stub = self.echo(m)
        self.wait_set(stub, "ab", "a and b")
        got = self.spread(stub, 40)
        self.assertEqual((got.count("a"), got.count("b")), (10, 30), got)
        boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port, node_id="witness", zone="z1")
        out = xds.run_client(boot, "xds:///" + SVC, 40)
        self.assertEqual(out["ok"], 40, out)
        self.assertEqual(sorted(out["instances"]), ["a", "b"], out)
        unweighted = [dict(loc) for loc in weighted]
        for loc in unweighted:
            del loc["load_balancing_weight"]
        self.server.set("endpoint", [assignment(SVC, unweighted)])
        self.wait_set(stub, "a", "every call on maitred's own zone")
        self.stop_maitred(m)

    @maitred_only
    def test_the_clusters_circuit_breaker_limits_the_calls_in_flight(self):
        """circuit_breakers.thresholds max_requests 2 (the service's own
        config has no circuit breaker): a third call while two are held
        ends RESOURCE_EXHAUSTED."""
        up = self.start_upstream("a")
        self.server.start()
        self.serve([up], circuit_breakers={"thresholds": [{"max_requests": 2}]})
        m = self.start_maitred(self.xds_config())
        stub = self.echo(m)
        self.wait_set(stub, "a", "a")
        ids = [call_id() for _ in range(2)]
        futs = [stub.Unary.future(pb.EchoRequest(call_id=c, hold=True), timeout=CALL_LIMIT) for c in ids]
        for c in ids:
            self.assertTrue(up.wait_call(c).started)
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        for c in ids:
            up.release(c)
        for f in futs:
            f.result()
        self.assertEqual(set(self.spread(stub, 3)), {"a"})
        self.stop_maitred(m)

    @maitred_only
    def test_a_cluster_the_server_stops_sending_leaves_its_service_without_endpoints(self):
        a = self.start_upstream("a")
        self.server.start()
        self.serve([a])
        m = self.start_maitred(self.xds_config())
        stub = self.echo(m)
        self.wait_set(stub, "a", "a")
        self.server.set("cluster", [])

        def removed():
            try:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            except grpc.RpcError as e:
                return e.code() == grpc.StatusCode.UNAVAILABLE and "was removed by" in e.details()
            return False
        wait_until(removed, WAIT, "UNAVAILABLE naming the removed cluster")
        self.serve([a])
        self.wait_set(stub, "a", "a again once the cluster is back")
        self.stop_maitred(m)

    @maitred_only
    def test_priority_one_serves_while_priority_zero_has_no_healthy_endpoint(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.server.set("cluster", [cluster(SVC)])

        def cla(a_health):
            return assignment(SVC, [locality([lb_endpoint("127.0.0.1", a.port, health=a_health)], zone="z1"),
                                    locality([("127.0.0.1", b.port)], zone="z2", priority=1)])
        self.server.set("endpoint", [cla("HEALTHY")])
        m = self.start_maitred(self.xds_config())
        stub = self.echo(m)
        self.wait_set(stub, "a", "priority 0 only")
        self.server.set("endpoint", [cla("UNHEALTHY")])
        self.wait_set(stub, "b", "priority 1 while priority 0 has no healthy endpoint")
        self.server.set("endpoint", [cla("DRAINING")])
        self.assertEqual(set(self.spread(stub, 10)), {"b"})
        self.server.set("endpoint", [cla("HEALTHY")])
        self.wait_set(stub, "a", "back to priority 0")
        self.stop_maitred(m)

    @maitred_only
    def test_the_server_down_and_back_with_a_changed_assignment(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.serve([a])
        m = self.start_maitred(self.xds_config())
        stub = self.echo(m)
        self.wait_set(stub, "a", "a")
        self.server.stop()
        # The last good resources serve while the server is away.
        wait_until(lambda: self.log_lines(m, r"xds: 127\.0\.0\.1:\d+: .*last good resources stay"), WAIT,
                   "maitred to notice the server went")
        self.assertEqual(set(self.spread(stub, 10)), {"a"})
        self.server.start(same_port=True)
        self.serve([b])
        self.wait_set(stub, "b", "b, the assignment the server has after its restart")
        self.assertTrue(self.log_lines(m, r"xds: 127\.0\.0\.1:\d+ answers again"), m.proc.output())
        log = self.server.log()
        self.assertTrue(any(acked(r, xds.EDS) for r in log), log)
        self.stop_maitred(m)

    @maitred_only
    @unittest.skipUnless(can_bind_mount(), "needs root and mount namespaces (unshare --mount) for a private /etc/hosts")
    def test_a_server_name_is_looked_up_again_at_each_reconnect(self):
        """The management server written with a name (as istiod's Service
        is): when the server moves, the name's new address is where the
        next reconnect goes, not the address found at load; a name that
        no longer resolves keeps the last address. maitred runs with its
        own /etc/hosts (the test's file, rewritten in place)."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        name = "xds.maitred.test"
        hosts = self.hosts_file("127.0.0.1 localhost\n127.0.0.1 %s\n" % name)
        self.server.start()
        port = self.server.port
        self.serve([a])
        m = self.start_maitred(self.xds_config(server="%s:%d" % (name, port)), wrap=hosts_wrap(hosts))
        stub = self.echo(m)
        self.wait_set(stub, "a", "a")
        # The server moves to 127.0.0.2 (the same port); the name follows it.
        self.server.stop()
        self.hosts_file("127.0.0.1 localhost\n127.0.0.2 %s\n" % name)
        self.server = XdsServer(self.tmp, host="127.0.0.2")
        self.addCleanup(self.server.stop)
        self.server.port = port
        self.server.start(same_port=True)
        self.serve([b])
        self.wait_set(stub, "b", "b, from the server at the name's new address")
        self.assertTrue(self.log_lines(m, r"xds: %s:%d: connecting to 127\.0\.0\.2:%d \(was 127\.0\.0\.1:%d\)"
                                       % (re.escape(name), port, port, port)), m.proc.output())
        # The name goes from the hosts file: the last address serves on.
        self.server.stop()
        self.hosts_file("127.0.0.1 localhost\n")
        self.server.start(same_port=True)
        self.serve([a])
        self.wait_set(stub, "a", "a, from the last address the name had")
        self.assertTrue(self.log_lines(m, r"xds: %s:%d: cannot look up %s \(.*\): connecting to its last address, "
                                          r"127\.0\.0\.2:%d" % (re.escape(name), port, re.escape(name), port)),
                        m.proc.output())
        self.stop_maitred(m)

    NAME = "xds.maitred.test"

    def lookup_pending(self, resolver_ip):
        """maitred (its own /etc/hosts and resolv.conf) on a management
        server it found by NAME, then the name gone from the hosts file
        and the server stopped: the reconnect asks the resolver at
        resolver_ip, a socket that reads and never answers, and returns
        once the lookup is pending. Returns maitred, its Echo stub, its
        config, the upstream and the wrap."""
        import socket
        a = self.start_upstream("a")
        hosts = self.hosts_file("127.0.0.1 localhost\n127.0.0.1 %s\n" % self.NAME)
        silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(silent.close)
        silent.bind((resolver_ip, 53))
        silent.settimeout(WAIT)
        resolv = os.path.join(self.tmp, "resolv.conf")
        with open(resolv, "w") as f:
            f.write("nameserver %s\n" % resolver_ip)
        self.server.start()
        self.serve([a])
        cfg = self.xds_config(server="%s:%d" % (self.NAME, self.server.port))
        m = self.start_maitred(cfg, wrap=hosts_wrap(hosts, resolv))
        stub = self.echo(m)
        self.wait_set(stub, "a", "a")
        self.hosts_file("127.0.0.1 localhost\n")
        self.server.stop()
        silent.recvfrom(512)  # the lookup is pending
        return m, stub, cfg, a

    @maitred_only
    @unittest.skipUnless(can_bind_mount(), "needs root and mount namespaces (unshare --mount) for a private /etc/hosts")
    def test_a_reload_while_the_servers_name_is_looked_up(self):
        """The xds block changes (a reload) while the server's name is
        being looked up (a resolver that never answers): the old client
        and its resolver go at once, the lookup's late callback touches
        neither, and the new client connects. Red under memcheck before
        (MAITRED_WRAP: libevent's deferred cancel read the freed
        resolver)."""
        m, stub, cfg, a = self.lookup_pending("127.0.0.77")
        # The name back (the reload resolves it at load), the xds block
        # changed: the client with the pending lookup is freed.
        self.hosts_file("127.0.0.1 localhost\n127.0.0.1 %s\n" % self.NAME)
        cfg["xds"]["node_id"] = "maitred-2"
        self.write_config(cfg, os.path.basename(m.config_path))
        m.proc.signal(signal.SIGHUP)
        wait_until(lambda: self.log_lines(m, r"xds: the xds block changed"), WAIT, "the reload")
        self.server.start(same_port=True)
        self.serve([a])
        self.server.wait_for(lambda log: any(r.get("node_id") == "maitred-2" for r in log), WAIT,
                             "the new client's stream")
        self.wait_set(stub, "a", "a, through the new client")
        self.assertEqual(self.log_lines(m, r"ERROR"), [], m.proc.output())
        self.stop_maitred(m)

    @maitred_only
    @unittest.skipUnless(can_bind_mount(), "needs root and mount namespaces (unshare --mount) for a private /etc/hosts")
    def test_sigterm_while_the_servers_name_is_looked_up_exits_clean(self):
        """SIGTERM while the server's name is being looked up (a resolver
        that never answers): the client is freed after the control loop
        ended, its resolver with it, which fails the lookup; libevent
        defers that callback, which frees its records of the lookup. Red
        before under ASan (LeakSanitizer at exit: about 1.5 KiB, the
        callback never ran)."""
        m, _, _, _ = self.lookup_pending("127.0.0.78")
        self.stop_maitred(m)

    @maitred_only
    def test_a_server_that_drops_each_connection_is_never_said_to_be_back(self):
        """A port that accepts each connection and closes it: maitred
        retries (the first retry within 1 s, then backing off), says that
        the stream ended, and never that the server is back."""
        import socket
        ls = socket.socket()
        self.addCleanup(ls.close)
        ls.bind(("127.0.0.1", 0))
        ls.listen(8)
        ls.settimeout(CALL_LIMIT)
        self.server.port = ls.getsockname()[1]
        m = self.start_maitred(self.xds_config())
        for _ in range(3):  # the first connection and two retries (about 0.5-1 s, then 1-2 s later)
            ls.accept()[0].close()
        self.assertTrue(self.log_lines(m, r"xds: 127\.0\.0\.1:\d+: .*; nothing received from it yet: the services "
                                          r"with discovery\.xds wait for it"), m.proc.output())
        self.assertEqual(self.log_lines(m, r"last good resources"), [])
        self.assertEqual(self.log_lines(m, r"again"), [])
        self.stop_maitred(m)

    @maitred_only
    def test_a_static_service_beside_a_cluster_of_its_name_is_never_changed(self):
        a, b, c = (self.start_upstream(n) for n in "abc")
        self.server.start()
        other = "maitred.testing.v1.Other"
        self.server.set("cluster", [cluster(SVC), cluster("echo-xds")])
        self.server.set("endpoint", [assignment(SVC, [locality([("127.0.0.1", b.port)])]),
                                     assignment("echo-xds", [locality([("127.0.0.1", c.port)])])])
        cfg = self.xds_config([self.service(SVC, [a]),
                               {"name": other, "discovery": {"xds": {"cluster": "echo-xds"}}}])
        m = self.start_maitred(cfg)
        self.wait_set(self.echo(m), "a", "the static service's own endpoint")
        # The xDS service next to it follows its cluster; maitred asks
        # for that one only, never for the static service's name.
        raw = self.raw_unary(m, "/%s/Unary" % other)
        wait_until(lambda: self._other_reaches(raw, "c"), WAIT, "the xds service's endpoint c")
        log = self.server.log()
        self.assertEqual({tuple(r["resource_names"]) for r in log if r["type_url"] == xds.CDS}, {("echo-xds",)})
        self.assertEqual(set(self.spread(self.echo(m), 10)), {"a"})
        self.stop_maitred(m)

    def _other_reaches(self, raw, name):
        try:
            reply = pb.EchoResponse.FromString(raw(pb.EchoRequest().SerializeToString(), timeout=CALL_LIMIT))
            return reply.instance == name
        except grpc.RpcError:
            return False

    @maitred_only
    def test_tls_to_the_management_server(self):
        ca = TestCA(os.path.join(self.tmp, "ca"), server_name="xds.test")
        up = self.start_upstream("a")
        self.server = XdsServer(self.tmp, tls=dict(cert=ca.server_cert, key=ca.server_key))
        self.addCleanup(self.server.stop)  # setUp's cleanup stops the plain server it replaced
        self.server.start()
        self.serve([up])
        m = self.start_maitred(self.xds_config(tls={"ca_file": ca.ca_file, "server_name": "xds.test"}))
        self.wait_set(self.echo(m), "a", "a, learnt over TLS")
        self.assertTrue(self.log_lines(m, r"xds: management server .* \(TLS\)"), m.proc.output())
        self.stop_maitred(m)

    @maitred_only
    def test_an_unusable_xds_tls_file_is_refused_at_start(self):
        """As a reload refuses it, and as a service's own TLS files are:
        not a maitred that runs on and whose xDS services never get an
        endpoint."""
        self.server.start()
        bad = os.path.join(self.tmp, "not-a-ca.pem")
        with open(bad, "w") as f:
            f.write("not a certificate\n")
        m = self.start_maitred(self.xds_config(tls={"ca_file": bad}), check_exit=False, wait=False)
        self.assertEqual(m.proc.wait(CALL_LIMIT + 10), 1, m.proc.output())
        m.proc.checked = True
        self.assertIn("xds.tls: %s" % bad, m.proc.output())

    @maitred_only
    def test_the_clusters_upstream_tls_reaches_an_mtls_upstream(self):
        """transport_socket: an UpstreamTlsContext of file names (CA,
        client certificate, SNI) makes the service's upstream connections
        mTLS; the service's own config says nothing of TLS."""
        ca = TestCA(os.path.join(self.tmp, "ca"), server_name="echo.test")
        up = self.start_upstream("secure", tls=ca, client_ca=ca)
        self.server.start()
        tls = {"name": "envoy.transport_sockets.tls",
               "typed_config": {
                   "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                   "common_tls_context": {
                       "tls_certificates": [{"certificate_chain": {"filename": ca.client_cert},
                                             "private_key": {"filename": ca.client_key}}],
                       "validation_context": {"trusted_ca": {"filename": ca.ca_file}}},
                   "sni": "echo.test"}}
        self.serve([up], transport_socket=tls)
        m = self.start_maitred(self.xds_config())
        self.wait_set(self.echo(m), ["secure"], "the mTLS upstream, through the cluster's TLS")
        self.server.wait_for(lambda log: any(acked(r, xds.CDS) for r in log), WAIT, "the CDS ACK")
        # Inline key material is not taken: NACKed, the last good cluster serves.
        inline = json.loads(json.dumps(tls))
        inline["typed_config"]["common_tls_context"]["tls_certificates"][0]["private_key"] = {
            "inline_string": "-----BEGIN PRIVATE KEY-----"}
        self.server.set("cluster", [cluster(SVC, transport_socket=inline)])
        log = self.server.wait_for(lambda log: any(nacked(r, xds.CDS) for r in log), WAIT, "the CDS NACK")
        self.assertIn("file name only", [r for r in log if nacked(r, xds.CDS)][0]["error_detail"]["message"])
        self.assertEqual(set(self.spread(self.echo(m), 5)), {"secure"})
        self.stop_maitred(m)

    @maitred_only
    def test_a_clusters_tls_from_certificate_providers_rotates_and_serves_a_real_client_too(self):
        """gRFC A29: the cluster names certificate provider instances of
        the bootstrap (file_watcher), not files, as control planes for
        proxyless gRPC send it (a real gRPC client refuses file names).
        maitred takes the instances' files; a client certificate the
        upstream refuses, rotated in place on disk, is taken for new
        connections; grpc-js-xds, with the same bootstrap and the same
        resources, reaches the same mTLS upstream."""
        ca = TestCA(os.path.join(self.tmp, "ca"), server_name="echo.test")
        other = TestCA(os.path.join(self.tmp, "other"), server_name="echo.test", ca_name="another CA")
        up = self.start_upstream("secure", tls=ca, client_ca=ca)
        ident = os.path.join(self.tmp, "ident")
        os.makedirs(ident)
        crt, key = os.path.join(ident, "cert.pem"), os.path.join(ident, "key.pem")
        shutil.copyfile(other.client_cert, crt)  # a certificate the upstream refuses
        shutil.copyfile(other.client_key, key)
        self.server.start()
        boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port, node_id="maitred-1",
                         providers={"identity": {"certificate_file": crt, "private_key_file": key,
                                                 "refresh_interval": "1s"},
                                    "roots": {"ca_certificate_file": ca.ca_file, "refresh_interval": "1s"}})
        tls = {"name": "envoy.transport_sockets.tls",
               "typed_config": {
                   "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                   "common_tls_context": {
                       "tls_certificate_provider_instance": {"instance_name": "identity"},
                       "combined_validation_context": {"default_validation_context": {
                           "ca_certificate_provider_instance": {"instance_name": "roots",
                                                                "certificate_name": "ROOTCA"},
                           "match_subject_alt_names": [{"exact": "echo.test"}]}}},
                   "sni": "echo.test"}}
        self.server.set("listener", [xds.listener(SVC, "routes-1")])
        self.server.set("route", [xds.route_config("routes-1", [xds.route_to(SVC)])])
        self.serve([up], transport_socket=tls)
        admin = free_port()
        cfg = self.config([{"name": SVC, "discovery": {"xds": {}}}], xds={"bootstrap": boot},
                          admin="127.0.0.1:%d" % admin)
        m = self.start_maitred(cfg)
        self.server.wait_for(lambda log: any(acked(r, xds.CDS) for r in log), WAIT, "the CDS ACK")
        with self.assertRaises(grpc.RpcError) as refused:
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.UNAVAILABLE)
        # Rotated on disk: the key first, then the certificate (a pair
        # that does not match yet is not taken).
        shutil.copyfile(ca.client_key, key + ".new")
        os.replace(key + ".new", key)
        shutil.copyfile(ca.client_cert, crt + ".new")
        os.replace(crt + ".new", crt)
        self.wait_set(self.echo(m), ["secure"], "the mTLS upstream, with the rotated client certificate")
        dump = json.loads(admin_request(admin, "GET", "/config_dump")[2])
        cl = [c for c in dump["xds"]["clusters"]["resources"] if c["name"] == SVC][0]
        self.assertEqual((cl["transport"], cl["ca_certificate_provider_instance"],
                          cl["tls_certificate_provider_instance"]), ("tls", "roots", "identity"))
        # The witness: a real xDS client, the same bootstrap and resources.
        out = xds.run_client(boot, "xds:///" + SVC, 5, xds_creds=True)
        self.assertEqual((out["ok"], out["failed"], out["instances"]), (5, {}, {"secure": 5}), out)
        self.assertFalse([r for r in self.server.log() if nacked(r, xds.CDS)])
        # An instance the bootstrap lacks: NACKed, the last good cluster serves.
        bad = json.loads(json.dumps(tls))
        bad["typed_config"]["common_tls_context"]["tls_certificate_provider_instance"]["instance_name"] = "nope"
        self.server.set("cluster", [cluster(SVC, transport_socket=bad)])
        log = self.server.wait_for(lambda log: any(nacked(r, xds.CDS) for r in log), WAIT, "the CDS NACK")
        self.assertIn('tls_certificate_provider_instance "nope": not among the bootstrap\'s certificate_providers',
                      [r for r in log if nacked(r, xds.CDS)][0]["error_detail"]["message"])
        self.assertEqual(set(self.spread(self.echo(m), 5)), {"secure"})
        self.stop_maitred(m)

    @maitred_only
    def test_clusters_naming_the_same_provider_instances_share_one_context(self):
        """Twenty clusters naming the same certificate provider instances
        (as a control plane for proxyless gRPC sends every cluster of a
        mesh) use one TLS context, as services of the file with the same
        files do: a rotation is one context rebuilt and one snapshot
        published, not twenty. Red before: the batch an xDS response builds
        gave each cluster a context of its own (a CA store each, 20
        rebuilds and 20 runtimes published per rotation)."""
        ca = TestCA(os.path.join(self.tmp, "ca"), server_name="echo.test")
        other = TestCA(os.path.join(self.tmp, "other"), server_name="echo.test", ca_name="another CA")
        up = self.start_upstream("secure", tls=ca, client_ca=ca)
        ident = os.path.join(self.tmp, "ident")
        os.makedirs(ident)
        crt, key = os.path.join(ident, "cert.pem"), os.path.join(ident, "key.pem")
        shutil.copyfile(other.client_cert, crt)  # a certificate the upstream refuses
        shutil.copyfile(other.client_key, key)
        self.server.start()
        boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port, node_id="maitred-1",
                         providers={"identity": {"certificate_file": crt, "private_key_file": key},
                                    "roots": {"ca_certificate_file": ca.ca_file}})
        tls = xds.provider_tls()
        names = [SVC] + ["c%02d" % i for i in range(19)]
        self.server.set("cluster", [cluster(n, transport_socket=tls) for n in names])
        self.server.set("endpoint", [assignment(n, [locality([("127.0.0.1", up.port)], zone="z1")]) for n in names])
        services = [{"name": SVC, "discovery": {"xds": {}}}] + [
            {"name": "s." + n, "discovery": {"xds": {"cluster": n}}} for n in names[1:]]
        m = self.start_maitred(self.config(services, xds={"bootstrap": boot}))
        wait_until(lambda: len(self.log_lines(m, r"service \S+: 1 endpoint")) >= len(names), WAIT, "the endpoints")
        shutil.copyfile(ca.client_key, key + ".new")
        os.replace(key + ".new", key)
        shutil.copyfile(ca.client_cert, crt + ".new")
        os.replace(crt + ".new", crt)
        self.wait_set(self.echo(m), ["secure"], "the mTLS upstream, with the rotated client certificate")
        self.assertEqual(len(self.log_lines(m, r"TLS files of service \S+ changed")), 1,
                         "one context for the twenty clusters")
        self.stop_maitred(m)

    @maitred_only
    def test_a_clusters_provider_files_are_still_watched_after_a_reload(self):
        """SIGHUP, the config and bootstrap unchanged: the cluster's TLS
        files (a certificate provider instance's) are still watched, and a
        rotation on disk after the reload reaches new connections. Red
        before: the reload's own entries (made before the xDS client gave
        its services their clusters' TLS again, mtd_sources_start) were
        taken after the follow of that batch, so the cluster's context
        was no longer watched until the next xDS change."""
        ca = TestCA(os.path.join(self.tmp, "ca"), server_name="echo.test")
        other = TestCA(os.path.join(self.tmp, "other"), server_name="echo.test", ca_name="another CA")
        up = self.start_upstream("secure", tls=ca, client_ca=ca)
        ident = os.path.join(self.tmp, "ident")
        os.makedirs(ident)
        crt, key = os.path.join(ident, "cert.pem"), os.path.join(ident, "key.pem")
        shutil.copyfile(other.client_cert, crt)  # a certificate the upstream refuses
        shutil.copyfile(other.client_key, key)
        self.server.start()
        boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port, node_id="maitred-1",
                         providers={"identity": {"certificate_file": crt, "private_key_file": key},
                                    "roots": {"ca_certificate_file": ca.ca_file}})
        tls = xds.provider_tls()
        self.serve([up], transport_socket=tls)
        m = self.start_maitred(self.config([{"name": SVC, "discovery": {"xds": {}}}], xds={"bootstrap": boot}))
        self.server.wait_for(lambda log: any(acked(r, xds.CDS) for r in log), WAIT, "the CDS ACK")
        wait_until(lambda: self.log_lines(m, r"service %s: 1 endpoint" % re.escape(SVC)), WAIT, "the endpoint")
        with self.assertRaises(grpc.RpcError) as refused:
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.UNAVAILABLE)
        m.proc.signal(signal.SIGHUP)
        wait_until(lambda: self.log_lines(m, r"reload: .* applied"), WAIT, "the reload")
        shutil.copyfile(ca.client_key, key + ".new")
        os.replace(key + ".new", key)
        shutil.copyfile(ca.client_cert, crt + ".new")
        os.replace(crt + ".new", crt)
        wait_until(lambda: self.log_lines(m, r"TLS files of service %s changed" % re.escape(SVC)), 15,
                   "the rotation after the reload")
        self.wait_set(self.echo(m), ["secure"], "the mTLS upstream, with the rotated client certificate")
        self.stop_maitred(m)

    @maitred_only
    def test_a_reload_that_changes_the_bootstraps_certificate_providers_reads_the_clusters_again(self):
        """The instances are part of the xds block: a reload (SIGHUP) after
        the bootstrap names other files for "identity" opens a new stream,
        and the cluster, resent as it was, now uses the new files, as a
        fresh maitred with that bootstrap would."""
        ca = TestCA(os.path.join(self.tmp, "ca"), server_name="echo.test")
        other = TestCA(os.path.join(self.tmp, "other"), server_name="echo.test", ca_name="another CA")
        up = self.start_upstream("secure", tls=ca, client_ca=ca)
        self.server.start()
        path = os.path.join(self.tmp, "bootstrap.json")

        def write_bootstrap(who):
            bootstrap(path, self.server.port, node_id="maitred-1",
                      providers={"identity": {"certificate_file": who.client_cert,
                                              "private_key_file": who.client_key, "refresh_interval": "60s"},
                                 "roots": {"ca_certificate_file": ca.ca_file, "refresh_interval": "60s"}})
        write_bootstrap(other)  # a client certificate the upstream refuses
        tls = xds.provider_tls()
        self.serve([up], transport_socket=tls)
        m = self.start_maitred(self.config([{"name": SVC, "discovery": {"xds": {}}}], xds={"bootstrap": path}))
        self.server.wait_for(lambda log: any(acked(r, xds.CDS) for r in log), WAIT, "the CDS ACK")
        with self.assertRaises(grpc.RpcError) as refused:
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.UNAVAILABLE)
        streams = self.server.streams()
        write_bootstrap(ca)
        m.proc.signal(signal.SIGHUP)
        self.wait_set(self.echo(m), ["secure"], "the mTLS upstream, with the instance's new files")
        self.assertTrue(self.log_lines(m, r"xds: the xds block changed"))
        self.assertEqual(self.server.streams(), streams)  # the old one closed
        self.stop_maitred(m)

    @maitred_only
    def test_a_reload_whose_stream_refuses_the_cluster_keeps_its_tls(self):
        """A reload (SIGHUP) after the bootstrap lost the instance the
        cluster names: the new stream NACKs the cluster, and the last good
        one serves on, TLS and all. Before, the reload's snapshot carried the
        cluster's endpoints without its settings (a service's own config has
        no TLS) until the stream gave them again, which a refused cluster
        never does: calls went to the mTLS upstream in plaintext."""
        ca = TestCA(os.path.join(self.tmp, "ca"), server_name="echo.test")
        up = self.start_upstream("secure", tls=ca, client_ca=ca)
        self.server.start()
        path = os.path.join(self.tmp, "bootstrap.json")
        roots = {"roots": {"ca_certificate_file": ca.ca_file, "refresh_interval": "60s"}}
        bootstrap(path, self.server.port, node_id="maitred-1",
                  providers=dict(roots, identity={"certificate_file": ca.client_cert,
                                                  "private_key_file": ca.client_key, "refresh_interval": "60s"}))
        tls = xds.provider_tls()
        self.serve([up], transport_socket=tls)
        m = self.start_maitred(self.config([{"name": SVC, "discovery": {"xds": {}}}], xds={"bootstrap": path}))
        self.wait_set(self.echo(m), ["secure"], "the mTLS upstream")
        nacks = len([r for r in self.server.log() if nacked(r, xds.CDS)])
        bootstrap(path, self.server.port, node_id="maitred-1", providers=roots)
        m.proc.signal(signal.SIGHUP)
        self.server.wait_for(lambda log: len([r for r in log if nacked(r, xds.CDS)]) > nacks, WAIT,
                             "the new stream's NACK of the cluster")
        # New connections too: the upstream restarted on its port.
        up.proc.stop()
        up = self.start_upstream("secure", tls=ca, client_ca=ca, port=up.port)
        self.wait_set(self.echo(m), ["secure"], "the mTLS upstream again, over TLS")
        self.assertEqual(set(self.spread(self.echo(m), 8)), {"secure"})
        self.stop_maitred(m)

    @maitred_only
    def test_a_bootstrap_file_names_the_server_and_the_node(self):
        up = self.start_upstream("a")
        self.server.start()
        self.serve([up])
        boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port, node_id="boot-7", zone="z9")
        cfg = self.config([{"name": SVC, "discovery": {"xds": {}}}], xds={})
        m = self.start_maitred(cfg, env={"GRPC_XDS_BOOTSTRAP": boot})
        self.wait_set(self.echo(m), "a", "a, from the server the bootstrap file names")
        log = self.server.log()
        self.assertEqual({r["node_id"] for r in log}, {"boot-7"})
        self.assertEqual({r["zone"] for r in log}, {"z9"})
        self.stop_maitred(m)

    @maitred_only
    def test_a_reload_that_changes_which_clusters_are_named(self):
        """Three services on three clusters; a reload drops one and adds
        another: the subscription follows (the kept clusters kept, with
        their endpoints, the new one asked for)."""
        ups = {n: self.start_upstream(n) for n in "acd"}
        self.server.start()
        names = {n: "maitred.testing.v1.%s" % n.upper() for n in "abcd"}
        self.server.set("cluster", [cluster("cl-" + n) for n in "abcd"])
        self.server.set("endpoint", [assignment("cl-" + n, [locality([("127.0.0.1", ups[n if n in ups else "a"].port)])])
                                     for n in "abcd"])

        def services(which):
            return [{"name": names[n], "discovery": {"xds": {"cluster": "cl-" + n}}} for n in which]
        cfg = self.xds_config(services("abc"))
        m = self.start_maitred(cfg)
        for n in "ac":
            raw = self.raw_unary(m, "/%s/Unary" % names[n])
            wait_until(lambda: self._other_reaches(raw, n), WAIT, "service %s's endpoint" % n)
        cfg["services"] = services("acd")
        self.write_config(cfg, os.path.basename(m.config_path))
        self.server.wait_for(lambda log: any(r["type_url"] == xds.CDS and r["resource_names"] == ["cl-a", "cl-c", "cl-d"]
                                             for r in log), WAIT, "the CDS subscription after the reload")
        for n in "acd":
            raw = self.raw_unary(m, "/%s/Unary" % names[n])
            wait_until(lambda: self._other_reaches(raw, n), WAIT, "service %s's endpoint after the reload" % n)
        self.stop_maitred(m)

    @maitred_only
    def test_a_reload_keeps_the_stream_unless_the_xds_block_changed(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.serve([a])
        cfg = self.xds_config()
        m = self.start_maitred(cfg)
        stub = self.echo(m)
        self.wait_set(stub, "a", "a")
        streams = self.server.streams()
        # Another setting, the same xds block: the stream stays.
        cfg["drain_timeout"] = "4s"
        self.write_config(cfg, os.path.basename(m.config_path))
        wait_until(lambda: self.log_lines(m, r"reload"), WAIT, "the reload")
        self.assertEqual(self.server.streams(), streams)
        self.assertEqual(set(self.spread(stub, 10)), {"a"})
        # Another node_id: a new stream, and the set served all along.
        load = Load(self.echo(m))
        cfg["xds"]["node_id"] = "maitred-2"
        self.write_config(cfg, os.path.basename(m.config_path))
        self.server.wait_for(lambda log: any(r["node_id"] == "maitred-2" and acked(r, xds.EDS) for r in log),
                             WAIT, "an EDS ACK on the new stream")
        self.serve([b])
        self.wait_set(stub, "b", "b, through the new stream")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed across the restart of the stream")
        self.stop_maitred(m)


class XdsRoutesTest(XdsBase):
    """LDS and RDS: xds.listener names the Listener whose routes route the
    calls to the services of their clusters (pool-a on cluster-a, pool-b on
    cluster-b: names no :path reaches, so only the routes do)."""

    LIS = SVC  # what a grpc-js-xds client asks for with target xds:///SVC

    def pools(self, a, b):
        self.server.set("cluster", [cluster("cluster-a"), cluster("cluster-b")])
        self.server.set("endpoint", [
            assignment("cluster-a", [locality([("127.0.0.1", u.port) for u in a], zone="z1")]),
            assignment("cluster-b", [locality([("127.0.0.1", u.port) for u in b], zone="z1")])])

    def routes_config(self, admin=False, extra=()):
        services = [{"name": "pool-a", "discovery": {"xds": {"cluster": "cluster-a"}}},
                    {"name": "pool-b", "discovery": {"xds": {"cluster": "cluster-b"}}}]
        return self.xds_config(services + list(extra), admin=admin, listener=self.LIS)

    def set_routes(self, routes, name="routes-1"):
        return self.server.set("route", [xds.route_config(name, routes)])

    @staticmethod
    def header_route(header, value, cluster_name):
        return {"match": {"prefix": "", "headers": [{"name": header, "string_match": {"exact": value}}]},
                "route": {"cluster": cluster_name}}

    def by_header(self, stub, n, track=None):
        md = (("x-track", track),) if track else ()
        return [stub.Unary(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT).instance for _ in range(n)]

    @maitred_only
    def test_a_header_route_and_a_default_route_reach_their_clusters(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.pools([a], [b])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        self.set_routes([self.header_route("x-track", "beta", "cluster-b"), xds.route_to("cluster-a", prefix="")])
        m = self.start_maitred(self.routes_config())
        stub = self.echo(m)
        self.wait_set(stub, "a", "the default route to cluster-a")
        self.assertEqual(set(self.by_header(stub, 10)), {"a"})
        self.assertEqual(set(self.by_header(stub, 10, "beta")), {"b"})
        self.assertEqual(set(self.by_header(stub, 10, "stable")), {"a"})
        log = self.server.log()
        lds = [r for r in log if r["type_url"] == xds.LDS]
        rds = [r for r in log if r["type_url"] == xds.RDS]
        self.assertEqual({tuple(r["resource_names"]) for r in lds}, {(self.LIS,)})
        self.assertEqual({tuple(r["resource_names"]) for r in rds}, {("routes-1",)})
        self.assertTrue(any(acked(r, xds.LDS) for r in lds), lds)
        self.assertTrue(any(acked(r, xds.RDS) for r in rds), rds)
        self.assertFalse([r for r in log if r["error_detail"]], "a NACK: %s" % log)
        self.stop_maitred(m)

    @maitred_only
    def test_weighted_clusters_spread_calls_by_their_weights(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.pools([a], [b])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        self.set_routes([{"match": {"prefix": ""}, "route": {"weighted_clusters": {"clusters": [
            {"name": "cluster-a", "weight": 3}, {"name": "cluster-b", "weight": 1}]}}}])
        m = self.start_maitred(self.routes_config())
        stub = self.echo(m)
        self.wait_set(stub, "ab", "calls over both clusters")
        got = self.spread(stub, 400)
        # A draw per call: 300 expected on a; 240..360 is over 6 standard
        # deviations either side.
        self.assertTrue(240 <= got.count("a") <= 360, {i: got.count(i) for i in "ab"})
        self.assertEqual(got.count("a") + got.count("b"), 400)
        self.stop_maitred(m)

    @maitred_only
    def test_a_route_update_applies_without_a_failed_call(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.pools([a], [b])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        self.set_routes([xds.route_to("cluster-a", prefix="")])
        m = self.start_maitred(self.routes_config())
        stub = self.echo(m)
        self.wait_set(stub, "a", "the route to cluster-a")
        load = Load(self.echo(m))
        wait_until(lambda: load.count() > 20, WAIT, "calls under way")
        version = self.set_routes([xds.route_to("cluster-b", prefix="")])
        self.server.wait_for(lambda log: any(acked(r, xds.RDS, version) for r in log), WAIT,
                             "the ACK of the new routes")
        self.wait_set(stub, "b", "the route to cluster-b")
        n = load.count()
        wait_until(lambda: load.count() > n + 20, WAIT, "more calls after the change")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed across the route change")
        self.assertIn("a", load.instances)
        self.assertEqual(load.instances[-1], "b")
        self.stop_maitred(m)

    @maitred_only
    def test_a_bad_route_configuration_is_nacked_and_the_last_good_kept(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.pools([a], [b])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        self.set_routes([xds.route_to("cluster-a", prefix="")])
        admin = free_port()
        static = {"name": "shop.Static", "endpoints": [{"address": "127.0.0.1:%d" % b.port}]}
        m = self.start_maitred(self.routes_config(admin=admin, extra=[static]))
        stub = self.echo(m)
        self.wait_set(stub, "a", "the route to cluster-a")
        # A cluster named after a static service: xDS never takes it over.
        self.set_routes([xds.route_to("shop.Static", prefix="")])
        log = self.server.wait_for(lambda log: any(nacked(r, xds.RDS) for r in log), WAIT, "an RDS NACK")
        why = [r["error_detail"] for r in log if nacked(r, xds.RDS)][-1]
        self.assertIn("service shop.Static of that name is not an xDS service", json.dumps(why))
        self.assertEqual(set(self.spread(stub, 10)), {"a"})
        # A path form maitred does not take: refused.
        self.set_routes([{"match": {"path_separated_prefix": "/x"}, "route": {"cluster": "cluster-b"}}])
        log = self.server.wait_for(lambda log: len([r for r in log if nacked(r, xds.RDS)]) >= 2, WAIT,
                                   "a second RDS NACK")
        why = [r["error_detail"] for r in log if nacked(r, xds.RDS)][-1]
        self.assertIn("only prefix, path and safe_regex are supported", json.dumps(why))
        self.assertEqual(set(self.spread(stub, 10)), {"a"})
        self.assertTrue(self.log_lines(m, r"xds: NACK of route resources"))
        # /config_dump shows both resources, the last NACK on the route.
        dump = json.loads(admin_request(admin, "GET", "/config_dump")[2])["xds"]
        self.assertEqual(dump["listeners"]["resources"][0]["state"], "ACKED")
        self.assertIn("rds routes-1", dump["listeners"]["resources"][0]["detail"])
        self.assertIn("only prefix, path and safe_regex", dump["routes"]["resources"][0]["last_nack"])
        # A good one again applies.
        self.set_routes([xds.route_to("cluster-b", prefix="")])
        self.wait_set(stub, "b", "the route to cluster-b")
        self.stop_maitred(m)

    def nack_of_prefix(self, prefix):
        """maitred on routes to cluster-a, then a route whose prefix is
        refused: the RDS NACK's error_detail.message, the stub and maitred."""
        a = self.start_upstream("a")
        self.server.start()
        self.pools([a], [a])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        self.set_routes([xds.route_to("cluster-a", prefix="")])
        m = self.start_maitred(self.routes_config())
        stub = self.echo(m)
        self.wait_set(stub, "a", "the route to cluster-a")
        self.set_routes([xds.route_to("cluster-a", prefix=prefix)])
        log = self.server.wait_for(lambda log: any(nacked(r, xds.RDS) for r in log), WAIT, "an RDS NACK")
        return [r for r in log if nacked(r, xds.RDS)][-1]["error_detail"]["message"], stub, m

    @maitred_only
    def test_a_nack_cut_inside_a_character_is_still_utf8(self):
        """A NACK quotes a refused prefix cut at 128 bytes: here in the
        middle of an "é" (its first byte the 128th). error_detail.message is
        a proto3 string, which a strict server (protobuf-go's, protobuf's
        C++) refuses to decode unless it is UTF-8, failing the whole
        request: the half character must not go out as it is (the harness's
        decoder shows it as U+FFFD)."""
        msg, _, m = self.nack_of_prefix("/" + "a" * 126 + "\u00e9" + "z")
        self.assertIn("a gRPC path", msg)
        self.assertIn("/" + "a" * 126, msg)
        self.assertNotIn("\ufffd", msg, "error_detail.message is not UTF-8: %r" % msg)
        self.stop_maitred(m)

    @maitred_only
    def test_a_nack_quotes_no_control_byte(self):
        """A refused prefix holding an escape sequence and a line break is
        quoted with '?' for each control byte: the NACK's text lands in the
        control plane's logs, where the resource's author must not write."""
        msg, stub, m = self.nack_of_prefix("bad\x1b[2J\nprefix\x7f")
        self.assertIn("bad?[2J?prefix?", msg)
        self.assertFalse(any(ord(c) < 0x20 or ord(c) == 0x7f for c in msg), "a control byte in %r" % msg)
        self.assertEqual(set(self.spread(stub, 4)), {"a"}, "the last good routes still serve")
        self.stop_maitred(m)

    # Patterns (safe_regex): a header's, then a path's, then the rest.
    REGEX_ROUTES = [
        {"match": {"prefix": "", "headers": [{"name": "x-track", "string_match": {
            "safe_regex": {"regex": "canary-[0-9]+"}}}]}, "route": {"cluster": "cluster-a"}},
        {"match": {"safe_regex": {"regex": r"/maitred\.testing\.v1\.Ech[a-z]/Un.*"}},
         "route": {"cluster": "cluster-b"}},
        {"match": {"prefix": ""}, "route": {"cluster": "cluster-a"}},
    ]

    @maitred_only
    def test_regex_routes_send_calls_by_path_and_header_as_a_real_xds_client_does(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.pools([a], [b])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        version = self.set_routes(self.REGEX_ROUTES)
        admin = free_port()
        m = self.start_maitred(self.routes_config(admin=admin))
        stub = self.echo(m)
        # Unary by the path's pattern, ServerStream (another method) by the rest.
        self.wait_set(stub, "b", "Unary on cluster-b by the path's pattern")
        self.server.wait_for(lambda log: any(acked(r, xds.RDS, version) for r in log), WAIT, "the RDS ACK")
        streamed = [r.instance for r in stub.ServerStream(pb.EchoRequest(), timeout=CALL_LIMIT)]
        self.assertEqual(set(streamed), {"a"})
        # The header's pattern matches the whole value, or the call goes on.
        self.assertEqual(set(self.by_header(stub, 10, "canary-42")), {"a"})
        self.assertEqual(set(self.by_header(stub, 10, "canary-42x")), {"b"})
        self.assertEqual(set(self.by_header(stub, 10, "xcanary-4")), {"b"})
        self.assertEqual(set(self.by_header(stub, 10)), {"b"})
        # A real xDS client routes the same calls the same way.
        boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port, node_id="witness")
        for header, want in ((None, "b"), (("x-track", "canary-7"), "a"), (("x-track", "canary-"), "b")):
            out = xds.run_client(boot, "xds:///" + SVC, 6, header=header)
            self.assertEqual((out["ok"], sorted(out["instances"])), (6, [want]), (header, out))
        # A pattern maitred refuses: NACKed with the construct and its
        # byte, and the routes in force keep routing.
        self.set_routes([{"match": {"safe_regex": {"regex": "(?i)/maitred.*"}}, "route": {"cluster": "cluster-a"}}])
        log = self.server.wait_for(lambda log: any(nacked(r, xds.RDS) for r in log), WAIT, "the RDS NACK")
        why = json.loads(json.dumps([r["error_detail"] for r in log if nacked(r, xds.RDS)][-1]))["message"]
        self.assertIn('routes[0].match.safe_regex.regex "(?i)/maitred.*": flags (?...) are not supported at byte 0',
                      why)
        self.assertEqual(set(self.by_header(stub, 10)), {"b"})
        self.assertEqual(set(self.by_header(stub, 10, "canary-1")), {"a"})
        dump = json.loads(admin_request(admin, "GET", "/config_dump")[2])["xds"]
        self.assertIn("flags (?...) are not supported", dump["routes"]["resources"][0]["last_nack"])
        self.stop_maitred(m)

    @maitred_only
    def test_a_listener_named_as_a_host_routes_by_the_virtual_host_a_real_client_takes(self):
        """gRPC's xDS clients match a route configuration's domains against
        their target's authority, which names their listener, in Envoy's
        order (exact, longest suffix wildcard, longest prefix wildcard,
        "*"); maitred's calls of services no host names take the host its
        listener's name selects, the one such a client takes."""
        host = "echo.testing.svc:8080"
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.pools([a], [b])
        self.server.set("listener", [xds.listener(host, "routes-1")])

        def vhost(name, domains, cluster_name):
            return {"name": name, "domains": domains, "routes": [xds.route_to(cluster_name, prefix="")]}
        self.server.set("route", [{"name": "routes-1", "virtual_hosts": [
            vhost("any", ["*"], "cluster-a"),
            vhost("short", ["*.svc:8080"], "cluster-a"),
            vhost("long", ["*.testing.svc:8080"], "cluster-b"),
            vhost("prefix", ["echo.*"], "cluster-a")]}])
        services = [{"name": "pool-a", "discovery": {"xds": {"cluster": "cluster-a"}}},
                    {"name": "pool-b", "discovery": {"xds": {"cluster": "cluster-b"}}}]
        m = self.start_maitred(self.xds_config(services, listener=host))
        stub = self.echo(m)
        self.wait_set(stub, "b", "cluster-b, the host *.testing.svc:8080")
        self.assertEqual(set(self.by_header(stub, 10)), {"b"})
        boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port, node_id="witness")
        out = xds.run_client(boot, "xds:///" + host, 6)
        self.assertEqual((out["ok"], sorted(out["instances"])), (6, ["b"]), out)
        self.assertFalse([r for r in self.server.log() if r["error_detail"]], "a NACK")
        self.stop_maitred(m)

    @maitred_only
    def test_a_reload_that_renames_the_listener_takes_the_host_the_new_name_selects(self):
        """Two listeners share one route configuration whose hosts are
        selected by the listener's name: a reload to the other name, and
        one while a call waits for a third name's routes, route by the
        host the new name selects, not by the routes derived for the
        old one (they are not carried: the RDS resource is read again)."""
        one, two, three = "one.testing.svc:8080", "two.testing.svc:8080", "three.testing.svc:8080"
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.pools([a], [b])
        self.server.set("listener", [xds.listener(one, "routes-1"), xds.listener(two, "routes-1"),
                                     xds.listener(three, "routes-3")])
        self.server.set("route", [{"name": "routes-1", "virtual_hosts": [
            {"name": "one", "domains": ["one.*"], "routes": [xds.route_to("cluster-a", prefix="")]},
            {"name": "two", "domains": ["*o.testing.svc:8080"], "routes": [xds.route_to("cluster-b", prefix="")]}]}])
        admin = free_port()
        services = [{"name": "pool-a", "discovery": {"xds": {"cluster": "cluster-a"}}},
                    {"name": "pool-b", "discovery": {"xds": {"cluster": "cluster-b"}}}]
        cfg = self.xds_config(services, admin=admin, listener=one, initial_wait="60s")
        m = self.start_maitred(cfg)
        stub = self.echo(m)
        self.wait_set(stub, "a", "cluster-a, the host one.* of listener one")
        cfg["xds"]["listener"] = two
        self.write_config(cfg, os.path.basename(m.config_path))
        self.wait_set(stub, "b", "cluster-b, the host of listener two after the reload")
        self.assertEqual(set(self.by_header(stub, 10)), {"b"})
        # A third name whose route configuration the server lacks: calls wait.
        cfg["xds"]["listener"] = three
        self.write_config(cfg, os.path.basename(m.config_path))
        self.server.wait_for(lambda log: any(r["type_url"] == xds.RDS and r["resource_names"] == ["routes-3"]
                                             for r in log), WAIT, "an RDS request for routes-3")
        def waiting():
            return sum(v for (n, _), v in samples(admin_request(admin, "GET", "/metrics")[2]).items()
                       if n == "maitred_first_endpoints_waiting")
        f = stub.Unary.future(pb.EchoRequest(), timeout=CALL_LIMIT)
        wait_until(lambda: waiting() == 1, WAIT, "the call waiting for the routes of listener three")
        # Back to the first name while it waits: the waiting call takes one's host.
        cfg["xds"]["listener"] = one
        self.write_config(cfg, os.path.basename(m.config_path))
        self.assertEqual(f.result(timeout=CALL_LIMIT).instance, "a")
        self.assertEqual(set(self.by_header(stub, 10)), {"a"})
        self.assertFalse([r for r in self.server.log() if r["error_detail"]], "a NACK")
        self.stop_maitred(m)

    @maitred_only
    def test_a_real_xds_client_takes_the_same_routes(self):
        """The listener and routes maitred follows route a grpc-js-xds
        client the same way (its default route's cluster)."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.pools([a], [b])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        self.set_routes([xds.route_to("cluster-b", prefix="")])
        m = self.start_maitred(self.routes_config())
        stub = self.echo(m)
        self.wait_set(stub, "b", "maitred on cluster-b")
        boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port, node_id="witness")
        out = xds.run_client(boot, "xds:///" + SVC, 10)
        self.assertEqual(out["ok"], 10, out)
        self.assertEqual(sorted(out["instances"]), ["b"])
        # Weighted clusters 1:1: both reach both (40 calls miss one cluster
        # with a chance of 2 in 10^12).
        self.set_routes([{"match": {"prefix": ""}, "route": {"weighted_clusters": {"clusters": [
            {"name": "cluster-a", "weight": 1}, {"name": "cluster-b", "weight": 1}]}}}])
        self.wait_set(stub, "ab", "maitred over both clusters")
        out = xds.run_client(boot, "xds:///" + SVC, 40)
        self.assertEqual(out["ok"], 40, out)
        self.assertEqual(sorted(out["instances"]), ["a", "b"])
        self.stop_maitred(m)

    @maitred_only
    def test_retry_policy_and_max_stream_duration_of_a_route(self):
        """The default route retries UNAVAILABLE (its cluster has an
        instance failing every call with it); the header route caps the
        deadline at 300 ms."""
        bad = self.start_upstream("bad", extra_args=["--fail-status", "14"])  # UNAVAILABLE
        good, b = self.start_upstream("g"), self.start_upstream("b")
        self.server.start()
        self.pools([bad, good], [b])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        slow = self.header_route("x-track", "slow", "cluster-b")
        slow["route"]["max_stream_duration"] = {"max_stream_duration": "0.300s"}
        dflt = xds.route_to("cluster-a", prefix="")
        dflt["route"]["retry_policy"] = {"retry_on": "5xx,unavailable", "num_retries": 3}
        self.set_routes([slow, dflt])
        m = self.start_maitred(self.routes_config())
        stub = self.echo(m)
        self.wait_set(stub, "g", "the default route answered by g (bad's failures retried)")
        self.assertEqual(set(self.spread(stub, 20)), {"g"})  # none failed: each retried
        md = (("x-track", "slow"),)
        self.assertEqual(stub.Unary(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT).instance, "b")
        with self.assertRaises(grpc.RpcError) as e:
            stub.Unary(pb.EchoRequest(delay_ms=4000), metadata=md, timeout=CALL_LIMIT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED, e.exception.details())
        self.stop_maitred(m)

    @maitred_only
    def test_a_routes_hash_policy_header_is_the_calls_hash_key(self):
        """cluster-a hashes (RING_HASH); its route's hash_policy names
        x-user: a user's calls all reach one instance, users spread over
        them, and a call without the header is answered (a random hash)."""
        ups = [self.start_upstream(n) for n in "abcd"]
        self.server.start()
        self.server.set("cluster", [cluster("cluster-a", lb_policy="RING_HASH"), cluster("cluster-b")])
        self.server.set("endpoint", [
            assignment("cluster-a", [locality([("127.0.0.1", u.port) for u in ups], zone="z1")]),
            assignment("cluster-b", [locality([("127.0.0.1", ups[0].port)], zone="z1")])])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        route = xds.route_to("cluster-a", prefix="")
        route["route"]["hash_policy"] = [{"header": {"header_name": "X-User"}}]
        self.set_routes([route])
        m = self.start_maitred(self.routes_config())
        stub = self.echo(m)
        # Without the header each call hashes at random: all four answer.
        self.wait_set(stub, "abcd", "calls without x-user over the four instances")

        def user_calls(user, n):
            md = (("x-user", user),)
            return {stub.Unary(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT).instance for _ in range(n)}
        seen = {}
        for i in range(40):
            got = user_calls("user-%d" % i, 10)
            self.assertEqual(len(got), 1, "user-%d reached %s" % (i, got))
            seen["user-%d" % i] = got.pop()
        # 40 users on at most two of four equal shares of the ring: a
        # chance of 6 in 2^40.
        self.assertGreaterEqual(len(set(seen.values())), 3, seen)
        self.assertEqual(user_calls("user-7", 10), {seen["user-7"]})
        self.assertFalse([r for r in self.server.log() if r["error_detail"]], "a NACK")
        self.stop_maitred(m)

    def injected(self, admin, kind):
        """Calls of the :path's service aborted or delayed (whatever pool)."""
        ss = samples(admin_request(admin, "GET", "/metrics")[2])
        return value(ss, "maitred_fault_injected_total", service=SVC, method="Unary", fault=kind) or 0

    @maitred_only
    def test_the_fault_filter_aborts_delays_and_a_routes_override_wins(self):
        """The listener's fault filter aborts every call with ABORTED; the
        route for x-track: slow overrides it with a delay, x-track: half
        with an abort of half the calls (UNAVAILABLE, from HTTP 503), and
        x-track: off has it disabled; a grpc-js-xds client reads the
        same filter."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.pools([a], [b])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1", fault=xds.fault_abort(10))])
        slow = self.header_route("x-track", "slow", "cluster-b")
        slow["typed_per_filter_config"] = {"fault": dict({"@type": xds.FAULT}, **xds.fault_delay("1s"))}
        half = self.header_route("x-track", "half", "cluster-b")
        half["typed_per_filter_config"] = {
            "fault": dict({"@type": xds.FAULT}, **xds.fault_abort(503, 500000, "MILLION", http=True))}
        off = self.header_route("x-track", "off", "cluster-b")
        off["typed_per_filter_config"] = {"fault": {"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig",
                                                    "config": {"@type": xds.FAULT}, "disabled": True}}
        self.set_routes([slow, half, xds.route_to("cluster-a", prefix="")])
        admin = free_port()
        m = self.start_maitred(self.routes_config(admin=admin))
        stub = self.echo(m)

        def aborted():
            try:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            except grpc.RpcError as e:
                return e.code() == grpc.StatusCode.ABORTED
            return False
        wait_until(aborted, WAIT, "the default route's calls aborted")
        for _ in range(20):
            with self.assertRaises(grpc.RpcError) as e:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            self.assertEqual(e.exception.code(), grpc.StatusCode.ABORTED)
            self.assertIn("fault_injection", e.exception.details())
        self.assertEqual(a.stats().total, 0)  # never reached
        aborts = self.injected(admin, "abort")
        self.assertGreaterEqual(aborts, 21)
        # The route's override replaces the filter's config: a delay, no abort.
        md = (("x-track", "slow"),)
        with self.assertRaises(grpc.RpcError) as e:
            stub.Unary(pb.EchoRequest(), metadata=md, timeout=0.3)
        self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual(b.stats().total, 0)  # it ended while delayed
        self.assertEqual(stub.Unary(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT).instance, "b")
        self.assertEqual(self.injected(admin, "delay"), 2)
        # Half the calls: 200 calls, 100 expected; 60..140 is over 5
        # standard deviations either side.
        md = (("x-track", "half"),)
        ok = failed = 0
        for _ in range(200):
            try:
                stub.Unary(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT)
                ok += 1
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE)
                failed += 1
        self.assertTrue(60 <= failed <= 140, "%d of 200 aborted" % failed)
        self.assertEqual(self.injected(admin, "abort"), aborts + failed)
        self.assertFalse([r for r in self.server.log() if r["error_detail"]], "a NACK")
        # A real xDS client reads the same filter: its default route's
        # calls are aborted too.
        boot = bootstrap(os.path.join(self.tmp, "bootstrap.json"), self.server.port, node_id="witness")
        out = xds.run_client(boot, "xds:///" + SVC, 10)
        self.assertEqual(out["ok"], 0, out)
        self.assertEqual(sum(v for k, v in out["failed"].items() if k.startswith("ABORTED")), 10, out)
        # Disabled for a route (a FilterConfig, which grpc-js-xds 1.x
        # misreads: after its check): no fault.
        version = self.set_routes([slow, half, off, xds.route_to("cluster-a", prefix="")])
        self.server.wait_for(lambda log: any(acked(r, xds.RDS, version) for r in log), WAIT,
                             "the ACK of the routes with x-track: off")
        self.assertEqual(set(self.by_header(stub, 10, "off")), {"b"})
        # A fault a request header would decide is refused, naming it.
        self.server.set("listener", [xds.listener(self.LIS, "routes-1", fault={"abort": {"header_abort": {}}})])
        log = self.server.wait_for(lambda log: any(nacked(r, xds.LDS) for r in log), WAIT, "an LDS NACK")
        why = [r["error_detail"] for r in log if nacked(r, xds.LDS)][-1]
        self.assertIn("header_abort is not supported", json.dumps(why))
        self.assertTrue(aborted(), "the last good filter config stays in force")
        self.stop_maitred(m)

    @maitred_only
    def test_a_route_to_a_cluster_no_service_follows_creates_its_service(self):
        """The routes name cluster SVC, which no service of the config
        follows: a service SVC is created on it (its endpoints from EDS),
        kept across a SIGHUP reload of the same file, and gone once no
        route names it (calls to it are then an unknown service's). No
        service is created for a static service's name, nor for "*"."""
        a, c = self.start_upstream("a"), self.start_upstream("c")
        self.server.start()
        self.server.set("cluster", [cluster("cluster-a"), cluster("cluster-b"), cluster(SVC)])
        self.server.set("endpoint", [
            assignment(name, [locality([("127.0.0.1", u.port)], zone="z1")])
            for name, u in (("cluster-a", a), ("cluster-b", a), (SVC, c))])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        self.set_routes([xds.route_to(SVC, prefix="")])
        static = {"name": "shop.Static", "endpoints": [{"address": "127.0.0.1:%d" % a.port}]}
        m = self.start_maitred(self.routes_config(extra=[static]))
        stub = self.echo(m)
        self.wait_set(stub, "c", "calls on the created service's endpoints")
        self.assertTrue(any(r["type_url"] == xds.CDS and SVC in r["resource_names"] for r in self.server.log()))
        self.assertTrue(self.log_lines(m, r"xds: 1 service created for the clusters of route configuration"))
        # SIGHUP, the file unchanged: the service stays, no call fails.
        load = Load(self.echo(m))
        wait_until(lambda: load.count() > 20, WAIT, "calls under way")
        m.proc.signal(signal.SIGHUP)
        wait_until(lambda: self.log_lines(m, r"reload: .* applied \(4 services\)"), WAIT, "the reload")
        n = load.count()
        wait_until(lambda: load.count() > n + 20, WAIT, "calls after the reload")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed across the reload")
        self.assertEqual(set(load.instances), {"c"})
        # A static service's name is never taken: refused, nothing created.
        self.set_routes([xds.route_to("shop.Static", prefix="")])
        log = self.server.wait_for(lambda log: any(nacked(r, xds.RDS) for r in log), WAIT, "an RDS NACK")
        why = [r["error_detail"] for r in log if nacked(r, xds.RDS)][-1]
        self.assertIn("service shop.Static of that name is not an xDS service", json.dumps(why))
        self.assertEqual(set(self.spread(stub, 10)), {"c"})
        # Nor is "*": a service of that name would be the catch-all of
        # every service the config does not name (SVC's calls among them).
        self.set_routes([xds.route_to("*", prefix="/nothing.Here/")])
        self.server.wait_for(lambda log: any(nacked(r, xds.RDS) and "catch-all" in json.dumps(r["error_detail"])
                                             for r in log), WAIT, "the NACK of cluster *")
        self.assertEqual(set(self.spread(stub, 10)), {"c"})
        # No route names it any more: it goes; a call in flight on it
        # (answered after 3 s) finishes there.
        slow = stub.Unary.future(pb.EchoRequest(delay_ms=3000), timeout=CALL_LIMIT)
        version = self.set_routes([xds.route_to("cluster-a", prefix="/other.Svc/")])
        self.server.wait_for(lambda log: any(acked(r, xds.RDS, version) for r in log), WAIT,
                             "the ACK of the routes without it")

        def unknown():
            try:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            except grpc.RpcError as e:
                return e.code() == grpc.StatusCode.UNIMPLEMENTED and "unknown service" in e.details()
            return False
        wait_until(unknown, WAIT, "calls to the removed service refused as an unknown service's")
        self.assertTrue(self.log_lines(m, r"xds: 0 services created"))
        self.assertEqual(slow.result().instance, "c")
        self.stop_maitred(m)

    @maitred_only
    def test_a_reload_keeps_the_routes_without_a_failed_call(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        self.server.start()
        self.pools([a], [b])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        self.set_routes([self.header_route("x-track", "beta", "cluster-b"), xds.route_to("cluster-a", prefix="")])
        cfg = self.routes_config()
        m = self.start_maitred(cfg)
        stub = self.echo(m)
        self.wait_set(stub, "a", "the default route to cluster-a")
        load = Load(self.echo(m))
        for i in range(3):
            cfg["drain_timeout"] = "%ds" % (4 + i)
            self.write_config(cfg, os.path.basename(m.config_path))
            wait_until(lambda: len(self.log_lines(m, r"reload: .* applied")) > i, WAIT, "reload %d" % (i + 1))
        n = load.count()
        wait_until(lambda: load.count() > n + 20, WAIT, "calls after the reloads")
        # Another node_id: a new stream, the same listener: the routes in
        # force serve until the new stream brings them again.
        cfg["xds"]["node_id"] = "maitred-2"
        self.write_config(cfg, os.path.basename(m.config_path))
        self.server.wait_for(lambda log: any(r["node_id"] == "maitred-2" and acked(r, xds.RDS) for r in log),
                             WAIT, "an RDS ACK on the new stream")
        n = load.count()
        wait_until(lambda: load.count() > n + 20, WAIT, "calls after the new stream")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed across the reloads")
        self.assertEqual(set(load.instances), {"a"})
        self.assertEqual(set(self.by_header(stub, 10, "beta")), {"b"})
        self.stop_maitred(m)
