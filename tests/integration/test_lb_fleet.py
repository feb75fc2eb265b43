"""Balancing at fleet scale through the real maitred over three upstream
instances: zone preference and spill-over
when the local instance dies, canary routing by header and its fallback, and
the subset size honoured (connections each upstream accepted, counted by the
kernel: established TCP connections to its port), and subset.mode RING's
windows tiling a fleet of two sidecars.

Everything here is deterministic (round robin, one worker, calls one after
another, routing by exact rules); no assertion depends on timing.
"""

import grpc

from harness import MaitredTest, maitred_only, pb, tcp_sockets, CALL_LIMIT

SVC = "maitred.testing.v1.Echo"


def established_to(port):
    """Established TCP connections whose remote end is 127.0.0.1:port (the
    connections some client - here maitred - holds to that listener)."""
    return sum(1 for t in tcp_sockets() if t.state == "01" and t.remote_port == port)


class Fleet(MaitredTest):
    def calls(self, stub, n, metadata=None):
        return [stub.Unary(pb.EchoRequest(), metadata=metadata, timeout=CALL_LIMIT).instance for _ in range(n)]

    @maitred_only
    def test_zone_preference_and_spill_over_when_local_dies(self):
        a, b, c = (self.start_upstream(n) for n in ("a", "b", "c"))
        svc = self.service(SVC, [a, b, c])
        for ep, zone in zip(svc["endpoints"], ("eu-1a", "eu-1b", "eu-1c")):
            ep["zone"] = zone
        m = self.start_maitred(self.config([svc], zone="eu-1a"))
        stub = self.echo(m)
        # PREFER_LOCAL is the default once zone is set: all local.
        self.assertEqual(set(self.calls(stub, 12)), {"a"})
        rc, killed = a.proc.stop()
        self.assertFalse(a.proc.alive())
        # The local instance is gone: every call still succeeds, spilled
        # over to the other zones, round robin between them.
        got = self.calls(stub, 20)
        self.assertNotIn("a", got)
        self.assertEqual(set(got), {"b", "c"})

    @maitred_only
    def test_zone_strict_stays_home(self):
        a, b = (self.start_upstream(n) for n in ("a", "b"))
        svc = self.service(SVC, [a, b], locality={"mode": "STRICT"})
        svc["endpoints"][0]["zone"] = "z2"
        svc["endpoints"][1]["zone"] = "z1"
        m = self.start_maitred(self.config([svc], zone="z1"))
        stub = self.echo(m)
        self.assertEqual(set(self.calls(stub, 10)), {"b"})
        b.proc.stop()
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def canary_service(self, ups, **routing):
        r = {"header": "x-canary", "metadata_key": "version"}
        r.update(routing)
        svc = self.service(SVC, ups, routing=r)
        svc["endpoints"][2]["metadata"] = {"version": "v2"}
        return svc

    @maitred_only
    def test_canary_by_header_and_fallback(self):
        ups = [self.start_upstream(n) for n in ("a", "b", "c")]
        m = self.start_maitred(self.config([self.canary_service(ups)]))
        stub = self.echo(m)
        # x-canary: v2 goes only to the v2 instance.
        self.assertEqual(set(self.calls(stub, 10, (("x-canary", "v2"),))), {"c"})
        # Without the header: only the untagged ones, round robin.
        self.assertEqual(sorted(self.calls(stub, 10)), ["a"] * 5 + ["b"] * 5)
        # A version nobody has: the untagged ones (fallback by default).
        self.assertEqual(set(self.calls(stub, 6, (("x-canary", "v9"),))), {"a", "b"})
        # The canary dies: its calls fall back to the untagged ones.
        ups[2].proc.stop()
        self.assertEqual(set(self.calls(stub, 6, (("x-canary", "v2"),))), {"a", "b"})

    @maitred_only
    def test_canary_fallback_fail(self):
        ups = [self.start_upstream(n) for n in ("a", "b", "c")]
        m = self.start_maitred(self.config([self.canary_service(ups, fallback="FAIL")]))
        stub = self.echo(m)
        self.assertEqual(set(self.calls(stub, 4, (("x-canary", "v2"),))), {"c"})
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), metadata=(("x-canary", "v9"),), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        # Without the header the untagged ones still serve.
        self.assertEqual(set(self.calls(stub, 4)), {"a", "b"})

    @maitred_only
    def test_subset_ring_windows_tile_the_fleet(self):
        # subset.mode RING: two sidecars, index 0 and 1 of
        # count 2, size 2 over 4 upstreams: disjoint windows of the hash
        # ring that together cover every upstream, round robin inside each.
        ups = [self.start_upstream(n) for n in ("a", "b", "c", "d")]
        seen = []
        for index in (0, 1):
            sub = {"size": 2, "mode": "RING", "index": index, "count": 2}
            m = self.start_maitred(self.config([self.service(SVC, ups, subset=sub)]))
            got = self.calls(self.echo(m), 20)
            self.assertEqual(len(set(got)), 2, got)
            for name in set(got):
                self.assertEqual(got.count(name), 10)
            seen.append(set(got))
        self.assertEqual(seen[0] & seen[1], set())
        self.assertEqual(seen[0] | seen[1], {"a", "b", "c", "d"})

    @maitred_only
    def test_subset_size_honoured(self):
        ups = [self.start_upstream(n) for n in ("a", "b", "c")]
        before = {u.name: established_to(u.port) for u in ups}
        m = self.start_maitred(self.config([self.service(SVC, ups, subset={"size": 2})], node_id="sidecar-1"))
        stub = self.echo(m)
        got = self.calls(stub, 30)
        used = set(got)
        self.assertEqual(len(used), 2)
        # Round robin over the subset, and only the subset's upstreams hold
        # connections from maitred.
        for name in used:
            self.assertEqual(got.count(name), 15)
        for u in ups:
            conns = established_to(u.port) - before[u.name]
            if u.name in used:
                self.assertGreaterEqual(conns, 1, u.name)
            else:
                self.assertEqual(conns, 0, u.name)
                self.assertEqual(u.stats().total, 0)
