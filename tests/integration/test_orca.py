"""CLIENT_SIDE_WEIGHTED_ROUND_ROBIN through the real maitred: upstreams
that report their load (an ORCA OrcaLoadReport in the
endpoint-load-metrics-bin trailer, upstream.py --orca-*) get calls in
proportion to qps / utilization, after the blackout (round robin before),
an endpoint that stops reporting falls back to the mean of the others once
its weight expires, a report that does not parse is ignored and counted,
and the app receives the trailer as the upstream sent it.

One worker, calls one after another: the policy's sequence is
deterministic, so the counts are near exact; the bounds are still wide
(a tenth of the expected count and more). Waits are bounded and only wait
for the tick to publish what the test then checks by counts.
"""

import base64
import collections
import json
import os
import sys
import unittest

from h2raw import H2Client, grpc_messages  # noqa: E402
from harness import MaitredTest, maitred_only, pb, wait_until, free_port, port_accepts, CALL_LIMIT, HERE

sys.path.insert(0, HERE)
import upstream  # noqa: E402  (orca_report: what the upstreams send)
import test_admin as admin  # noqa: E402  (its helpers only: its tests stay in its file)

SVC = "maitred.testing.v1.Echo"
POLICY = "CLIENT_SIDE_WEIGHTED_ROUND_ROBIN"
ORCA_KEY = "endpoint-load-metrics-bin"
WEIGHT_LIMIT = 30.0  # seconds the tick gets to publish a weight (a bounded wait)


class OrcaTest(MaitredTest):
    def start_reporting(self, name, cpu, qps=100.0, app=0.0, eps=0.0, off_file=None):
        args = ["--orca-cpu", str(cpu), "--orca-qps", str(qps), "--orca-app", str(app), "--orca-eps", str(eps)]
        if off_file:
            args += ["--orca-off-file", off_file]
        return self.start_upstream(name, extra_args=args)

    def start_orca(self, ups, **orca):
        self.admin_port = free_port()
        svc = self.service(SVC, ups, policy=POLICY)
        svc["lb"]["orca"] = orca
        m = self.start_maitred(self.config([svc], admin="127.0.0.1:%d" % self.admin_port))
        wait_until(lambda: port_accepts(self.admin_port, 0.5), CALL_LIMIT, "the admin port")
        return m

    def clusters(self):
        st, _, body = admin.admin_request(self.admin_port, "GET", "/clusters")
        self.assertEqual(st, 200, body)
        svc = [s for s in json.loads(body)["services"] if s["name"] == SVC][0]
        return {e["address"]: e for e in svc["endpoints"]}

    def weights(self):
        return {a: e["orca"]["weight"] for a, e in self.clusters().items()}

    def metrics(self):
        st, _, body = admin.admin_request(self.admin_port, "GET", "/metrics")
        self.assertEqual(st, 200, body)
        return admin.samples(body)

    def count(self, stub, n, **req):
        c = collections.Counter()
        for _ in range(n):
            c[stub.Unary(pb.EchoRequest(**req), timeout=CALL_LIMIT).instance] += 1
        return c

    def raw_call(self, port, req):
        """(instance, the endpoint-load-metrics-bin value as on the wire,
        base64 text, or None) of one Unary call over a raw h2c client: gRPC
        libraries keep that trailer for their own balancers and never show
        it to the application."""
        c = H2Client(port)
        try:
            st = c.wait(c.call("/%s/Unary" % SVC, [req.SerializeToString()]))
        finally:
            c.close()
        block = st.status_headers()
        self.assertIsNotNone(block, st.events)
        self.assertEqual(block.get("grpc-status"), "0", block)
        resp = pb.EchoResponse.FromString(grpc_messages(st.body)[0])
        return resp.instance, block.get(ORCA_KEY)

    def assert_near(self, got, want, what):
        self.assertLessEqual(abs(got - want), max(10, want // 10), "%s: %d calls, expected about %d" % (what, got, want))


class Shares(OrcaTest):
    @maitred_only
    def test_shares_follow_reported_utilization_after_the_blackout(self):
        ups = [self.start_reporting("a", 0.2), self.start_reporting("b", 0.4), self.start_reporting("c", 0.8)]
        m = self.start_orca(ups, blackout_period="4s", weight_update_period="100ms")
        stub = self.echo(m)
        # The blackout: weights are not used yet, the calls go in turn
        # (checked only while /clusters says no weight is used, before
        # and after: a weight, once used, stays while reports come).
        self.assertEqual(set(self.weights().values()), {0.0})
        first = self.count(stub, 30)
        if set(self.weights().values()) == {0.0}:
            self.assertEqual(sorted(first.values()), [10, 10, 10], first)
        # Past it: qps / cpu = 500 : 250 : 125, i.e. 4 : 2 : 1.
        wait_until(lambda: all(w > 0 for w in self.weights().values()), WEIGHT_LIMIT, "the reported weights")
        w = self.weights()
        self.assertAlmostEqual(w[ups[0].address], 500.0, places=6)
        self.assertAlmostEqual(w[ups[1].address], 250.0, places=6)
        self.assertAlmostEqual(w[ups[2].address], 125.0, places=6)
        got = self.count(stub, 700)
        self.assert_near(got["a"], 400, "a (cpu 0.2)")
        self.assert_near(got["b"], 200, "b (cpu 0.4)")
        self.assert_near(got["c"], 100, "c (cpu 0.8)")
        # /clusters and /metrics show what was reported.
        cl = self.clusters()
        for u, cpu in zip(ups, (0.2, 0.4, 0.8)):
            o = cl[u.address]["orca"]
            self.assertAlmostEqual(o["utilization"], cpu)
            self.assertAlmostEqual(o["cpu_utilization"], cpu)
            self.assertAlmostEqual(o["qps"], 100.0)
            self.assertEqual(o["reports_invalid"], 0)
            self.assertGreater(o["reports"], 0)
        ss = self.metrics()
        self.assertAlmostEqual(admin.value(ss, "maitred_orca_utilization", service=SVC, endpoint=ups[2].address), 0.8)
        self.assertAlmostEqual(admin.value(ss, "maitred_orca_weight", service=SVC, endpoint=ups[0].address), 500.0)
        # The app receives the report as the upstream sent it, byte for
        # byte (the upstream asked directly for the same call).
        by_name = {u.name: u for u in ups}
        for _ in range(3):
            name, through = self.raw_call(m.port, pb.EchoRequest())
            _, direct = self.raw_call(by_name[name].port, pb.EchoRequest())
            self.assertIsNotNone(direct)
            self.assertEqual(through, direct)
            cpu = {"a": 0.2, "b": 0.4, "c": 0.8}[name]
            self.assertEqual(base64.b64decode(direct + "=" * (-len(direct) % 4)),
                             upstream.orca_report(cpu, 0.0, 100.0, 0.0))
        self.stop_maitred(m)

    @maitred_only
    def test_application_utilization_preferred_and_errors_penalised(self):
        # a: cpu 0.9 but application 0.25 -> 400; b: cpu 0.5 -> 200;
        # c: cpu 0.5, 100 qps with 100 eps, penalty 1 -> 100 / 1.5 = 66.7.
        ups = [self.start_reporting("a", 0.9, app=0.25), self.start_reporting("b", 0.5),
               self.start_reporting("c", 0.5, eps=100.0)]
        m = self.start_orca(ups, blackout_period="0s")
        stub = self.echo(m)
        self.count(stub, 3)
        wait_until(lambda: all(w > 0 for w in self.weights().values()), WEIGHT_LIMIT, "the reported weights")
        w = self.weights()
        self.assertAlmostEqual(w[ups[0].address], 400.0, places=6)
        self.assertAlmostEqual(w[ups[2].address], 100.0 / 1.5, places=6)
        got = self.count(stub, 667)  # 400 : 200 : 66.7 of 666.7
        self.assert_near(got["a"], 400, "a (application 0.25)")
        self.assert_near(got["b"], 200, "b (cpu 0.5)")
        self.assert_near(got["c"], 67, "c (errors)")
        self.stop_maitred(m)


class Reports(OrcaTest):
    @maitred_only
    def test_a_report_that_does_not_parse_is_ignored_and_counted(self):
        ups = [self.start_reporting("a", 0.2), self.start_reporting("b", 0.4)]
        m = self.start_orca(ups, blackout_period="0s")
        stub = self.echo(m)
        self.count(stub, 4)
        # The request asks the upstream for its own trailer: bytes that are
        # no OrcaLoadReport (a truncated varint). The call succeeds and
        # the app gets them unchanged.
        bad = b"\xff\xff\xff"
        req = pb.EchoRequest(status=pb.Status(code=0, trailers=[pb.Metadatum(key=ORCA_KEY, value=bad)]))
        for _ in range(5):
            _, text = self.raw_call(m.port, req)
            self.assertEqual(base64.b64decode(text + "=" * (-len(text) % 4)), bad)
        ss = self.metrics()
        invalid = sum(admin.value(ss, "maitred_orca_reports_invalid_total", service=SVC, endpoint=u.address) or 0
                      for u in ups)
        self.assertEqual(invalid, 5)
        # Nothing of them was used: the figures are the last good ones.
        cl = self.clusters()
        self.assertAlmostEqual(cl[ups[0].address]["orca"]["utilization"], 0.2)
        self.assertAlmostEqual(cl[ups[1].address]["orca"]["utilization"], 0.4)
        self.stop_maitred(m)

    @maitred_only
    def test_an_endpoint_that_stops_reporting_gets_the_mean(self):
        off = os.path.join(self.tmp, "c.off")
        ups = [self.start_reporting("a", 0.2), self.start_reporting("b", 0.4),
               self.start_reporting("c", 0.8, off_file=off)]
        m = self.start_orca(ups, blackout_period="0s", weight_expiration_period="2s")
        stub = self.echo(m)
        self.count(stub, 3)
        wait_until(lambda: all(w > 0 for w in self.weights().values()), WEIGHT_LIMIT, "the reported weights")
        with open(off, "w"):
            pass
        a, b, c = (u.address for u in ups)

        def c_has_the_mean():
            self.count(stub, 3)  # a and b keep reporting
            w = self.weights()
            return abs(w[c] - (w[a] + w[b]) / 2) < 1e-6 and w[a] == 500.0
        wait_until(c_has_the_mean, WEIGHT_LIMIT, "c's weight to expire to the mean", step=0.2)
        got = self.count(stub, 900)  # 500 : 250 : 375
        self.assert_near(got["a"], 400, "a")
        self.assert_near(got["b"], 200, "b")
        self.assert_near(got["c"], 300, "c (the mean)")
        self.stop_maitred(m)


if __name__ == "__main__":
    unittest.main()
