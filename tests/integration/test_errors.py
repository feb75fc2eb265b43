"""Status codes and messages pass through; errors maitred makes itself are
proper gRPC statuses with useful messages."""

import unittest

import grpc

from harness import MaitredTest, maitred_only, needs_h2, free_port, pb, CALL_LIMIT

BARE_HTTP = "Received http2 header with status"  # grpcio's text for a non-gRPC HTTP answer


class UpstreamStatuses(MaitredTest):
    def setUp(self):
        super().setUp()
        self.up = self.start_upstream("alpha")
        self.m = self.start_maitred(upstreams=[self.up])
        self.stub = self.echo(self.m)

    def test_every_status_code_unary(self):
        for code in grpc.StatusCode:
            if code == grpc.StatusCode.OK:
                continue
            with self.subTest(code=code):
                msg = "status %s from upstream" % code.name
                with self.assertRaises(grpc.RpcError) as cm:
                    self.stub.Unary(pb.EchoRequest(status=pb.Status(code=code.value[0], message=msg)),
                                    timeout=CALL_LIMIT)
                self.assertEqual(cm.exception.code(), code)
                self.assertEqual(cm.exception.details(), msg)

    def test_every_status_code_after_stream_messages(self):
        for code in grpc.StatusCode:
            if code == grpc.StatusCode.OK:
                continue
            with self.subTest(code=code):
                st = self.stub.ServerStream(pb.EchoRequest(
                    response_count=3, status_after=1,
                    status=pb.Status(code=code.value[0], message=code.name)), timeout=CALL_LIMIT)
                n = 0
                with self.assertRaises(grpc.RpcError):
                    for _ in st:
                        n += 1
                self.assertEqual(n, 1)
                self.assertEqual(st.code(), code)
                self.assertEqual(st.details(), code.name)

    def test_unicode_and_percent_in_grpc_message(self):
        # grpc-message is percent-encoded UTF-8 on the wire; it must arrive
        # decoded to exactly what the upstream sent.
        msgs = ["héllo wörld ✓", "100% sure", "%41%42 stays literal", "日本語のメッセージ",
                "tab\tnewline\nend", "emoji 🍽️ maître d'"]
        for msg in msgs:
            with self.subTest(msg=msg):
                for trailers_only in (False, True):
                    with self.assertRaises(grpc.RpcError) as cm:
                        self.stub.Unary(pb.EchoRequest(trailers_only=trailers_only, status=pb.Status(
                            code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message=msg)), timeout=CALL_LIMIT)
                    self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
                    self.assertEqual(cm.exception.details(), msg)

    def test_grpc_message_with_edge_spaces(self):
        # grpcio sends spaces unencoded (gRPC PROTOCOL-HTTP2 percent-encodes
        # only outside 0x20-0x7E), so this value starts and ends with a space,
        # which strict RFC 9113 section 8.2.1 validation rejects. gRPC peers
        # accept it; a gRPC proxy must relay it.
        msg = " leading and trailing "
        for trailers_only in (False, True):
            with self.subTest(trailers_only=trailers_only):
                with self.assertRaises(grpc.RpcError) as cm:
                    self.stub.Unary(pb.EchoRequest(trailers_only=trailers_only, status=pb.Status(
                        code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message=msg)), timeout=CALL_LIMIT)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION, cm.exception.details())
                self.assertEqual(cm.exception.details(), msg)

    def test_handler_exception_is_unknown(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.Unary(pb.EchoRequest(raise_error=True), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNKNOWN)

    def test_unknown_method_of_routed_service(self):
        # The service is routed; the upstream itself answers UNIMPLEMENTED.
        with self.assertRaises(grpc.RpcError) as cm:
            self.raw_unary(self.m, "/maitred.testing.v1.Control/Nope")(b"", timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    def test_calls_after_errors_still_work(self):
        for i in range(20):
            with self.assertRaises(grpc.RpcError):
                self.stub.Unary(pb.EchoRequest(status=pb.Status(code=13, message="x")), timeout=CALL_LIMIT)
            self.assertEqual(self.stub.Unary(pb.EchoRequest(key=str(i)), timeout=CALL_LIMIT).key, str(i))


class MaitredStatuses(MaitredTest):
    @maitred_only
    def test_unknown_service_is_unimplemented_naming_it(self):
        up = self.start_upstream("alpha")
        m = self.start_maitred(self.config([self.service("maitred.testing.v1.Echo", [up])]))
        ch = self.channel(m)
        for path in ("/no.such.Service/Method", "/shop.Cart/GetCart"):
            with self.subTest(path=path):
                with self.assertRaises(grpc.RpcError) as cm:
                    ch.unary_unary(path)(b"", timeout=CALL_LIMIT)
                err = cm.exception
                self.assertEqual(err.code(), grpc.StatusCode.UNIMPLEMENTED, err.details())
                self.assertIn(path.split("/")[1], err.details())
                self.assertNotIn(BARE_HTTP, err.details())
        # Streaming calls too.
        st = ch.stream_stream("/no.such.Service/Chat")(iter([b"", b""]), timeout=CALL_LIMIT)
        with self.assertRaises(grpc.RpcError):
            list(st)
        self.assertEqual(st.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("no.such.Service", st.details())
        self.assertEqual(up.stats().total, 0)
        # The known service still works on the same connection.
        self.assertEqual(self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "alpha")

    @maitred_only
    @needs_h2
    def test_own_error_while_request_open_is_sent_before_any_reset(self):
        # maitred answers an unknown service at once, while the client is
        # still sending (HEADERS without END_STREAM, as grpcio does): the
        # Trailers-Only HEADERS must go out; a RST_STREAM(NO_ERROR) may follow
        # it (RFC 9113 section 8.1), never replace it.
        import h2raw
        up = self.start_upstream("alpha")
        m = self.start_maitred(self.config([self.service("maitred.testing.v1.Echo", [up])]))
        c = h2raw.H2Client(m.port)
        self.addCleanup(c.close)
        for msgs, end in (([], True), ([b""], True), ([b"abc"], False), ([], False)):
            with self.subTest(messages=msgs, end_stream=end):
                st = c.wait(c.call("/no.such.Service/M", msgs, end=end))
                self.assertTrue(st.done, "no answer: %r" % st.events)
                self.assertEqual(st.kinds()[0], "headers", "frames received: %r" % st.events)
                sh = st.status_headers()
                self.assertIsNotNone(sh, "frames received: %r" % st.events)
                self.assertEqual(sh.get("grpc-status"), "12")
                self.assertIn("no.such.Service", sh.get("grpc-message", ""))

    @maitred_only
    def test_malformed_path_is_a_grpc_status(self):
        up = self.start_upstream("alpha")
        m = self.start_maitred(self.config([self.service("maitred.testing.v1.Echo", [up])]))
        ch = self.channel(m)
        for path in ("/nomethod", "/", "//Method"):
            with self.subTest(path=path):
                with self.assertRaises(grpc.RpcError) as cm:
                    ch.unary_unary(path)(b"", timeout=CALL_LIMIT)
                self.assertIn(cm.exception.code(), (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INVALID_ARGUMENT))
                self.assertNotIn(BARE_HTTP, cm.exception.details() or "")

    @maitred_only
    def test_unreachable_endpoint_is_unavailable_naming_it(self):
        port = free_port()  # nothing listens there
        m = self.start_maitred(self.config([self.service("*", ["127.0.0.1:%d" % port])]))
        stub = self.echo(m)
        for _ in range(3):
            with self.assertRaises(grpc.RpcError) as cm:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
            self.assertIn("127.0.0.1:%d" % port, cm.exception.details())
        st = stub.ServerStream(pb.EchoRequest(), timeout=CALL_LIMIT)
        with self.assertRaises(grpc.RpcError):
            list(st)
        self.assertEqual(st.code(), grpc.StatusCode.UNAVAILABLE)
        cs = stub.BidiStream(iter([pb.EchoRequest()] * 2), timeout=CALL_LIMIT)
        with self.assertRaises(grpc.RpcError):
            list(cs)
        self.assertEqual(cs.code(), grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
    unittest.main()
