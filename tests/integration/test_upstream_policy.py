"""Upstream connections and endpoints after a reload: what a reloaded
maitred does must be what a fresh maitred on the new config would do.

- A retry of a call routed before a reload never goes to an endpoint the
  reload removed: it picks again among the endpoints the worker serves now.

Which server answered decides, never a timing.
"""

import grpc

from harness import maitred_only, pb, wait_until, CALL_LIMIT, SLOW
from test_churn import ChurnBase


@maitred_only
class RetryAfterRemoval(ChurnBase):
    def test_a_retry_never_reaches_an_endpoint_the_reload_removed(self):
        # FAILOVER over [x: accepts TCP, never answers; y]. The first
        # attempt waits on x (SMOOTH_WEIGHTED_ROUND_ROBIN starts at the first
        # endpoint); meanwhile a reload replaces y by z. When the attempt's
        # per_try_timeout ends it, the retry must pick among x and z: the
        # call routed before the reload used to retry on y, through a fresh
        # pool the worker never retired.
        x = self.blackhole()
        y = self.start_upstream("y")
        z = self.start_upstream("z")

        def cfg(eps, port=None):
            return self.config([self.service(
                "*", eps, policy="SMOOTH_WEIGHTED_ROUND_ROBIN",
                fault={"mode": "FAILOVER", "retries": 3, "per_try_timeout": "%gs" % (3 * SLOW)},
                upstream={"connect_timeout": "30s"})], port=port)
        first = cfg([x.address, y])
        port = int(first["listen"].rsplit(":", 1)[1])
        m = self.start_maitred(first)
        fut = self.echo(m).Unary.future(pb.EchoRequest(payload=b"r"), timeout=CALL_LIMIT + 10 * SLOW)
        wait_until(lambda: x.accepted > 0, CALL_LIMIT, "the first attempt to wait on the silent endpoint")
        self.reload(m, cfg([x.address, z], port))
        self.assertEqual(y.stats().total, 0, "the call reached y before the reload applied (per_try_timeout too short)")
        try:
            resp = fut.result()
        except grpc.RpcError as e:
            resp = None
            self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, e.details())
        self.assertEqual(y.stats().total, 0, "a retry reached y, which the reload removed")
        if resp is not None:
            self.assertEqual(resp.instance, "z")
        self.stop_maitred(m)
