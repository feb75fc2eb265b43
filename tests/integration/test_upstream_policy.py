"""Upstream connections after a reload: what a reloaded maitred does with
the connections it made before must be what a fresh maitred on the new
config would do.

- A connection carries the service's TLS policy it was made under (TLS on
  or off, the CA, the client certificate, server_name, server_identity).
  A reload that changes that policy drains it: GOAWAY, the calls in flight
  finish, new calls connect under the new policy, and fail as a fresh
  maitred's would when the upstream does not satisfy it. A reload that
  keeps the policy keeps the connection.
- upstream.max_connection_age drains connections the same way.
- A retry of a call routed before a reload never goes to an endpoint the
  reload removed: it picks again among the endpoints the worker serves now.

Connections are counted at the upstream (the distinct client addresses it
saw); which server answered decides, never a timing.
"""

import os
import shutil
import tempfile
import types

import grpc

from harness import MaitredTest, TestCA, maitred_only, pb, call_id, wait_until, CALL_LIMIT, SLOW
from test_churn import Blackhole, ChurnBase
from test_inbound import MeshCA

NS = "spiffe://cluster.local/ns/shop/sa/"


class UpstreamTlsPolicy(ChurnBase):
    @classmethod
    def setUpClass(cls):
        cls.cadir = tempfile.mkdtemp(prefix="maitred-policy-")
        cls.ca = TestCA(os.path.join(cls.cadir, "good"), server_name="echo.test")
        cls.mesh = MeshCA(os.path.join(cls.cadir, "mesh"))
        cert, key = cls.mesh.leaf("cart-server", uri=NS + "cart-server")
        cls.cart_server = types.SimpleNamespace(server_cert=cert, server_key=key)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.cadir, ignore_errors=True)

    def call(self, m, **req):
        """One unary call: (response, None) or (None, RpcError)."""
        try:
            return self.echo(m).Unary(pb.EchoRequest(**req), timeout=CALL_LIMIT), None
        except grpc.RpcError as e:
            return None, e

    def hold(self, m, up):
        """A call held at `up` (in flight on its connection): (future, id)."""
        cid = call_id()
        fut = self.echo(m).Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT)
        self.assertTrue(up.wait_call(cid, "STARTED").started, "the held call did not reach the upstream")
        return fut, cid

    def assert_like_fresh(self, reloaded, cfg, expect):
        """A fresh maitred on cfg answers the next call as the reloaded one
        did: the same status, and the reason `expect` in both messages."""
        _, err = self.call(reloaded)
        self.assertIsNotNone(err, "the reloaded maitred still served the call over its old connection")
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        self.assertIn(expect, err.details())
        fresh = self.start_maitred(self.with_port(cfg))
        _, ferr = self.call(fresh)
        self.assertIsNotNone(ferr)
        self.assertEqual(ferr.code(), err.code())
        self.assertIn(expect, ferr.details())
        self.stop_maitred(fresh)

    def with_port(self, cfg):
        """cfg on a listener of its own (for a second maitred)."""
        other = self.config(cfg["services"])
        return dict(cfg, listen=other["listen"])

    @maitred_only
    def test_tls_turned_on_by_a_reload_reaches_the_open_connection(self):
        # The upstream speaks h2c. Turning `tls` on must not leave the next
        # calls on the cleartext connection made before: they connect with
        # TLS, and fail against this upstream as on a fresh maitred.
        up = self.start_upstream("plain")
        a = self.config([self.service("*", [up])])
        port = int(a["listen"].rsplit(":", 1)[1])
        m = self.start_maitred(a)
        resp, err = self.call(m)
        self.assertIsNone(err)
        held, cid = self.hold(m, up)
        b = self.config([self.service("*", [up], tls={"ca_file": self.ca.ca_file, "server_name": "echo.test"})],
                        port=port)
        self.reload(m, b)
        self.assert_like_fresh(m, b, "upstream %s: TLS handshake failed" % up.address)
        # The call in flight on the old connection finished there.
        up.release(cid)
        self.assertEqual(held.result(timeout=CALL_LIMIT).instance, "plain")
        self.assertEqual(up.stats().peers, 1, "the upstream saw another cleartext connection")
        self.stop_maitred(m)

    @maitred_only
    def test_server_identity_changed_by_a_reload_refuses_the_next_calls(self):
        up = self.start_upstream("cart", tls=self.cart_server)
        tls = {"ca_file": self.mesh.ca_file, "server_identity": NS + "cart-server"}
        a = self.config([self.service("*", [up], tls=tls)])
        port = int(a["listen"].rsplit(":", 1)[1])
        m = self.start_maitred(a)
        self.assertIsNone(self.call(m)[1])
        held, cid = self.hold(m, up)
        wrong = NS + "someone-else"
        b = self.config([self.service("*", [up], tls=dict(tls, server_identity=wrong))], port=port)
        self.reload(m, b)
        self.assert_like_fresh(m, b, "TLS server identity mismatch: expected %s" % wrong)
        up.release(cid)
        self.assertEqual(held.result(timeout=CALL_LIMIT).instance, "cart")
        # And back: the calls are served again, over a new connection.
        self.reload(m, a)
        resp, err = self.call(m)
        self.assertIsNone(err, err and err.details())
        self.assertEqual(resp.instance, "cart")
        self.stop_maitred(m)

    @maitred_only
    def test_a_reload_that_keeps_the_policy_keeps_the_connection(self):
        # Certificates read again under the same names, other settings
        # changed: the TLS policy is the same, and so is the connection.
        up = self.start_upstream("secure", tls=self.ca)
        tls = {"ca_file": self.ca.ca_file, "server_name": "echo.test"}
        a = self.config([self.service("*", [up], tls=tls)])
        port = int(a["listen"].rsplit(":", 1)[1])
        m = self.start_maitred(a)
        for _ in range(3):
            self.assertIsNone(self.call(m)[1])
        b = self.config([self.service("*", [up], tls=dict(tls), upstream={"idle_timeout": "4m"}),
                         self.service("other.Svc", [up])], port=port)
        self.reload(m, b)
        for _ in range(3):
            resp, err = self.call(m)
            self.assertIsNone(err, err and err.details())
        self.assertEqual(up.stats().peers, 1, "a reload that kept the TLS policy replaced the connection")
        self.stop_maitred(m)

    @maitred_only
    def test_max_connection_age_drains_old_connections(self):
        up = self.start_upstream("aged")
        m = self.start_maitred(self.config([self.service("*", [up], upstream={"max_connection_age": "1s"})]))
        self.assertIsNone(self.call(m)[1])
        held, cid = self.hold(m, up)
        # Calls go on; once the first connection is past its age they go
        # over another one: the upstream sees a second client connection.

        def second_connection():
            self.assertIsNone(self.call(m)[1])
            return up.stats().peers >= 2
        wait_until(second_connection, 20 * SLOW, "a second upstream connection after max_connection_age")
        # The call in flight on the drained connection finished there.
        up.release(cid)
        self.assertEqual(held.result(timeout=CALL_LIMIT).instance, "aged")
        self.stop_maitred(m)


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
