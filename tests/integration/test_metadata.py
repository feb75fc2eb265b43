"""Metadata, trailers and trailers-only responses pass through unchanged."""

import os
import unittest

import grpc

from harness import MaitredTest, needs_h2, pb, CALL_LIMIT

BLOB = bytes(range(256)) + b"\x00\xff\x00"


def upstream_view(resp):
    """Request metadata as the upstream saw it, in order."""
    return [(m.key, m.value) for m in resp.metadata]


def as_bytes(md):
    return [(k, v if isinstance(v, bytes) else v.encode()) for k, v in md]


def only_x(md):
    return [(k, v) for k, v in as_bytes(md) if k.startswith("x-")]


class Metadata(MaitredTest):
    def setUp(self):
        super().setUp()
        self.up = self.start_upstream("alpha")
        self.m = self.start_maitred(upstreams=[self.up])
        self.stub = self.echo(self.m)

    def test_ascii_metadata_round_trip(self):
        md = [("x-user", "alice"), ("x-trace-id", "0af7651916cd43dd8448eb211c80319c"),
              ("x-punct", "a b,c;d=e/f?g:h \"q\" ~!@#$%^&*()")]
        resp, call = self.stub.Unary.with_call(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT)
        want = as_bytes(md)
        self.assertEqual(only_x(upstream_view(resp)), want)
        self.assertEqual(only_x(call.initial_metadata()), want)
        self.assertEqual(only_x(call.trailing_metadata()), want)
        self.assertIn(("maitred-instance", "alpha"), list(call.initial_metadata()))
        self.assertIn(("maitred-instance", "alpha"), list(call.trailing_metadata()))

    def test_binary_metadata_round_trip(self):
        md = [("x-blob-bin", BLOB), ("x-one-bin", b"\x00"), ("x-text", "plain")]
        resp, call = self.stub.Unary.with_call(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT)
        want = as_bytes(md)
        self.assertEqual(only_x(upstream_view(resp)), want)
        self.assertEqual(only_x(call.initial_metadata()), want)
        self.assertEqual(only_x(call.trailing_metadata()), want)

    def test_repeated_keys_keep_order(self):
        md = [("x-multi", "1"), ("x-other", "o"), ("x-multi", "2"), ("x-multi", "3"),
              ("x-multi-bin", b"\x01"), ("x-multi-bin", b"\x02")]
        resp, call = self.stub.Unary.with_call(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT)
        seen = only_x(upstream_view(resp))
        for key in ("x-multi", "x-multi-bin"):
            self.assertEqual([v for k, v in seen if k == key], [v for k, v in as_bytes(md) if k == key])
            self.assertEqual([v for k, v in only_x(call.trailing_metadata()) if k == key],
                             [v for k, v in as_bytes(md) if k == key])

    def test_large_metadata_value(self):
        md = [("x-big", "v" * 16000), ("x-big-bin", os.urandom(8000))]
        resp, call = self.stub.Unary.with_call(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT)
        self.assertEqual(only_x(upstream_view(resp)), as_bytes(md))
        self.assertEqual(only_x(call.trailing_metadata()), as_bytes(md))

    def test_user_agent_passes(self):
        stub = self.echo(self.m, options=[("grpc.primary_user_agent", "maitred-it/1.0")])
        resp = stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        ua = dict(upstream_view(resp)).get("user-agent", b"")
        self.assertTrue(ua.startswith(b"maitred-it/1.0"), "upstream saw user-agent %r" % ua)

    def test_no_hop_by_hop_headers_upstream(self):
        resp = self.stub.Unary(pb.EchoRequest(), metadata=[("x-a", "1")], timeout=CALL_LIMIT)
        keys = {k for k, _ in upstream_view(resp)}
        for hop in ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "http2-settings"):
            self.assertNotIn(hop, keys)

    def test_metadata_on_every_call_type(self):
        md = [("x-k", "v"), ("x-k-bin", b"\xfe\xff")]
        want = as_bytes(md)
        st = self.stub.ServerStream(pb.EchoRequest(response_count=2), metadata=md, timeout=CALL_LIMIT)
        self.assertEqual(len(list(st)), 2)
        self.assertEqual(only_x(st.initial_metadata()), want)
        self.assertEqual(only_x(st.trailing_metadata()), want)

        resp, call = self.stub.ClientStream.with_call(iter([pb.EchoRequest()] * 3), metadata=md, timeout=CALL_LIMIT)
        self.assertEqual(resp.messages_received, 3)
        self.assertEqual(only_x(call.initial_metadata()), want)
        self.assertEqual(only_x(call.trailing_metadata()), want)

        bd = self.stub.BidiStream(iter([pb.EchoRequest()] * 2), metadata=md, timeout=CALL_LIMIT)
        self.assertEqual(len(list(bd)), 2)
        self.assertEqual(only_x(bd.initial_metadata()), want)
        self.assertEqual(only_x(bd.trailing_metadata()), want)

    def test_trailers_only_error(self):
        # No initial metadata from the upstream: a Trailers-Only response
        # (gRPC PROTOCOL-HTTP2) carrying status, message and custom trailers.
        req = pb.EchoRequest(trailers_only=True, status=pb.Status(
            code=grpc.StatusCode.NOT_FOUND.value[0], message="no such cart",
            trailers=[pb.Metadatum(key="x-reason", value=b"gone"),
                      pb.Metadatum(key="x-detail-bin", value=BLOB)]))
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.Unary(req, metadata=[("x-in", "1")], timeout=CALL_LIMIT)
        err = cm.exception
        self.assertEqual(err.code(), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(err.details(), "no such cart")
        trailers = only_x(err.trailing_metadata())
        self.assertIn(("x-reason", b"gone"), trailers)
        self.assertIn(("x-detail-bin", BLOB), trailers)
        self.assertIn(("x-in", b"1"), trailers)
        self.assertEqual(only_x(err.initial_metadata()), [])

    @needs_h2
    def test_trailers_only_framing(self):
        # Seen raw: one HEADERS frame with END_STREAM carrying :status 200,
        # content-type, grpc-status, grpc-message and the custom trailers.
        import h2raw
        c = h2raw.H2Client(self.m.port)
        self.addCleanup(c.close)
        req = h2raw.echo_request(trailers_only=True, status=pb.Status(
            code=5, message="nope ✓", trailers=[pb.Metadatum(key="x-reason", value=b"gone")]))
        st = c.wait(c.call("/maitred.testing.v1.Echo/Unary", [req]))
        self.assertEqual([k for k in st.kinds()], ["headers", "end"], st.events)
        self.assertTrue(st.events[0][2], "Trailers-Only HEADERS without END_STREAM")
        h = dict(st.events[0][1])
        self.assertEqual(h.get(":status"), "200")
        self.assertTrue(h.get("content-type", "").startswith("application/grpc"), h)
        self.assertEqual(h.get("grpc-status"), "5")
        self.assertEqual(h.get("grpc-message"), "nope %E2%9C%93")
        self.assertEqual(h.get("x-reason"), "gone")

    @needs_h2
    def test_response_has_no_hop_by_hop_headers(self):
        import h2raw
        c = h2raw.H2Client(self.m.port)
        self.addCleanup(c.close)
        st = c.wait(c.call("/maitred.testing.v1.Echo/Unary", [h2raw.echo_request()]))
        self.assertEqual(st.kinds(), ["headers", "data", "trailers", "end"], st.events)
        for block in (st.events[0][1], st.events[2][1]):
            keys = {k for k, _ in block}
            for hop in ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"):
                self.assertNotIn(hop, keys)
        self.assertEqual(dict(st.events[2][1]).get("grpc-status"), "0")

    def test_trailers_only_on_server_stream(self):
        req = pb.EchoRequest(trailers_only=True, status=pb.Status(
            code=grpc.StatusCode.PERMISSION_DENIED.value[0], message="denied",
            trailers=[pb.Metadatum(key="x-why", value=b"policy")]))
        st = self.stub.ServerStream(req, timeout=CALL_LIMIT)
        with self.assertRaises(grpc.RpcError):
            list(st)
        self.assertEqual(st.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(st.details(), "denied")
        self.assertIn(("x-why", b"policy"), only_x(st.trailing_metadata()))

    def test_error_after_headers_and_messages_keeps_trailers(self):
        req = pb.EchoRequest(response_count=5, status_after=2, status=pb.Status(
            code=grpc.StatusCode.DATA_LOSS.value[0], message="lost",
            trailers=[pb.Metadatum(key="x-after", value=b"2")]))
        st = self.stub.ServerStream(req, metadata=[("x-h", "h")], timeout=CALL_LIMIT)
        got = []
        with self.assertRaises(grpc.RpcError):
            for r in st:
                got.append(r.index)
        self.assertEqual(got, [0, 1])
        self.assertEqual(st.code(), grpc.StatusCode.DATA_LOSS)
        self.assertEqual(st.details(), "lost")
        self.assertIn(("x-h", b"h"), only_x(st.initial_metadata()))
        self.assertIn(("x-after", b"2"), only_x(st.trailing_metadata()))


if __name__ == "__main__":
    unittest.main()
