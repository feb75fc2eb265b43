"""Each call type through maitred, compression, routing and round robin."""

import os
import queue
import unittest

import grpc

from harness import MaitredTest, maitred_only, pb, pb_grpc, call_id, CALL_LIMIT, MiB


def queue_iter(q):
    """Request iterator fed from a queue; None ends it. Bounded wait."""
    while True:
        item = q.get(timeout=CALL_LIMIT)
        if item is None:
            return
        yield item


class CallTypes(MaitredTest):
    def setUp(self):
        super().setUp()
        self.up = self.start_upstream("alpha")
        self.m = self.start_maitred(upstreams=[self.up])
        self.stub = self.echo(self.m)

    def test_unary(self):
        data = os.urandom(1000)
        resp, call = self.stub.Unary.with_call(pb.EchoRequest(payload=data, key="k1"), timeout=CALL_LIMIT)
        self.assertEqual(resp.payload, data)
        self.assertEqual(resp.instance, "alpha")
        self.assertEqual(resp.key, "k1")
        self.assertEqual(call.code(), grpc.StatusCode.OK)

    def test_unary_empty_message(self):
        resp = self.stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(resp.payload, b"")
        self.assertEqual(resp.instance, "alpha")

    def test_client_stream(self):
        sizes = [0, 1, 5, 1000, 70000, 3, 16384, 200000]
        msgs = [pb.EchoRequest(payload=os.urandom(n)) for n in sizes]
        resp = self.stub.ClientStream(iter(msgs), timeout=CALL_LIMIT)
        self.assertEqual(resp.messages_received, len(sizes))
        self.assertEqual(resp.bytes_received, sum(sizes))
        self.assertEqual(resp.instance, "alpha")

    def test_server_stream(self):
        got = list(self.stub.ServerStream(
            pb.EchoRequest(response_count=50, response_size=3000), timeout=CALL_LIMIT))
        self.assertEqual([r.index for r in got], list(range(50)))
        self.assertTrue(all(len(r.payload) == 3000 for r in got))

    def test_server_stream_empty(self):
        # A server stream that ends OK with no message at all.
        got = list(self.stub.ServerStream(
            pb.EchoRequest(response_count=1, status=pb.Status(code=0)), timeout=CALL_LIMIT))
        self.assertEqual(len(got), 1)

    def test_bidi_ping_pong(self):
        # Each request is answered before the next is sent: maitred must relay
        # messages as they come, not wait for the end of either stream.
        q = queue.Queue()
        responses = self.stub.BidiStream(queue_iter(q), timeout=CALL_LIMIT)
        for i in range(30):
            data = os.urandom(100 + i * 37)
            q.put(pb.EchoRequest(payload=data))
            r = next(responses)
            self.assertEqual(r.payload, data)
            self.assertEqual(r.index, i)
            self.assertEqual(r.messages_received, i + 1)
        q.put(None)
        self.assertEqual(list(responses), [])
        self.assertEqual(responses.code(), grpc.StatusCode.OK)

    def test_bidi_many_responses_per_request(self):
        reqs = [pb.EchoRequest(payload=b"x" * i, response_count=3) for i in range(10)]
        got = list(self.stub.BidiStream(iter(reqs), timeout=CALL_LIMIT))
        self.assertEqual(len(got), 30)
        self.assertEqual([r.index for r in got], list(range(30)))

    def test_server_stream_first_message_before_last(self):
        # The upstream holds the stream after the first response until
        # released: the client must get that first message meanwhile.
        cid = call_id()
        stream = self.stub.ServerStream(pb.EchoRequest(call_id=cid, response_count=3, hold_after=1),
                                        timeout=CALL_LIMIT)
        first = next(stream)
        self.assertEqual(first.index, 0)
        st = self.up.release(cid)
        self.assertFalse(st.ended, "upstream ended the call before release")
        self.assertEqual([r.index for r in stream], [1, 2])

    def test_gzip_request(self):
        # grpc-encoding: gzip from the client must reach the upstream intact
        # with the compressed flag; otherwise the upstream fails to decode.
        stub = self.echo(self.m, compression=grpc.Compression.Gzip)
        data = b"compress me please " * 50000
        resp = stub.Unary(pb.EchoRequest(payload=data), timeout=CALL_LIMIT)
        self.assertEqual(resp.payload, data)
        got = list(stub.BidiStream(iter([pb.EchoRequest(payload=data)] * 3), timeout=CALL_LIMIT))
        self.assertEqual([r.payload == data for r in got], [True] * 3)

    def test_gzip_response(self):
        resp = self.stub.Unary(pb.EchoRequest(response_size=MiB, compress_response=True), timeout=CALL_LIMIT)
        self.assertEqual(len(resp.payload), MiB)
        got = list(self.stub.ServerStream(
            pb.EchoRequest(response_count=5, response_size=100000, compress_response=True), timeout=CALL_LIMIT))
        self.assertEqual(len(got), 5)

    def test_many_sequential_calls_one_channel(self):
        for i in range(200):
            self.assertEqual(self.stub.Unary(pb.EchoRequest(key=str(i)), timeout=CALL_LIMIT).key, str(i))


class Balancing(MaitredTest):
    @maitred_only
    def test_round_robin_spread_over_three(self):
        ups = [self.start_upstream(n) for n in ("a", "b", "c")]
        m = self.start_maitred(upstreams=ups)
        stub = self.echo(m)
        counts = {"a": 0, "b": 0, "c": 0}
        for _ in range(300):
            counts[stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance] += 1
        # Round robin over three equal endpoints, calls one after another.
        for name, n in counts.items():
            self.assertTrue(99 <= n <= 101, "round robin spread %r" % counts)
        for up in ups:
            self.assertEqual(up.stats().total, counts[up.name])

    @maitred_only
    def test_round_robin_streams_too(self):
        ups = [self.start_upstream(n) for n in ("a", "b")]
        m = self.start_maitred(upstreams=ups)
        stub = self.echo(m)
        seen = []
        for _ in range(4):
            seen.append(list(stub.ServerStream(pb.EchoRequest(response_count=2), timeout=CALL_LIMIT))[0].instance)
            seen.append(stub.ClientStream(iter([pb.EchoRequest()]), timeout=CALL_LIMIT).instance)
        self.assertEqual(sorted(seen), ["a"] * 4 + ["b"] * 4, seen)


class Routing(MaitredTest):
    @maitred_only
    def test_service_entries_and_catch_all(self):
        a, b, c = (self.start_upstream(n) for n in ("a", "b", "c"))
        cfg = self.config([
            self.service("maitred.testing.v1.Echo", [a]),
            self.service("shop.Cart", [b]),
            self.service("*", [c]),
        ])
        m = self.start_maitred(cfg)
        ch = self.channel(m)
        req = pb.EchoRequest().SerializeToString()

        def call(path):
            resp = ch.unary_unary(path)(req, timeout=CALL_LIMIT)
            return pb.EchoResponse.FromString(resp).instance

        self.assertEqual(pb_grpc.EchoStub(ch).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "a")
        self.assertEqual(call("/shop.Cart/Unary"), "b")
        self.assertEqual(call("/shop.Cart.Other/Unary"), "c")   # no prefix match
        self.assertEqual(call("/shop.Carts/Unary"), "c")
        self.assertEqual(call("/other.Svc/Unary"), "c")
        self.assertEqual(c.stats().calls["/other.Svc/Unary"], 1)
        self.assertEqual(b.stats().calls["/shop.Cart/Unary"], 1)

    @maitred_only
    def test_streaming_routed_by_service(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        cfg = self.config([self.service("maitred.testing.v1.Echo", [a]), self.service("*", [b])])
        m = self.start_maitred(cfg)
        ch = self.channel(m)
        bidi = ch.stream_stream("/x.Y/BidiStream", request_serializer=pb.EchoRequest.SerializeToString,
                                response_deserializer=pb.EchoResponse.FromString)
        got = list(bidi(iter([pb.EchoRequest()] * 2), timeout=CALL_LIMIT))
        self.assertEqual([r.instance for r in got], ["b", "b"])
        got = list(pb_grpc.EchoStub(ch).BidiStream(iter([pb.EchoRequest()] * 2), timeout=CALL_LIMIT))
        self.assertEqual([r.instance for r in got], ["a", "a"])


if __name__ == "__main__":
    unittest.main()
