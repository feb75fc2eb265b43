"""Robustness of the call relay: half-closed streams,
DATA after a failure, non-gRPC HTTP answers, :authority, connect failures,
keepalive."""

import os
import struct
import unittest

import grpc

from harness import MaitredTest, maitred_only, needs_h2, CALL_LIMIT

ECHO_UNARY = "/maitred.testing.v1.Echo/Unary"
ECHO_BIDI = "/maitred.testing.v1.Echo/BidiStream"


def raw_upstream_class():
    import h2raw

    class Upstream(h2raw.H2Upstream):
        """H2Upstream with the answers these tests need:
          ("http", status, body, end_in_headers)  a non-gRPC HTTP answer
          ("frames", [bytes...])  200 headers, then each item as one DATA
                                  frame, all in one write (one read in
                                  maitred), no trailers
          ("authority",)          echo the request's :authority back in a
                                  gRPC message (an EchoResponse.instance)
        """

        def _act(self, conn, sid, headers):
            what = self.script(headers.get(":path", ""), headers)
            if what[0] == "http":
                _, status, body, end = what
                conn.send_headers(sid, [(":status", str(status)), ("content-type", "text/html")],
                                  end_stream=end)
                if not end:
                    conn.send_data(sid, body, end_stream=True)
            elif what[0] == "frames":
                conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
                for chunk in what[1]:
                    conn.send_data(sid, chunk)
            elif what[0] == "authority":
                from harness import pb
                resp = pb.EchoResponse(instance=headers.get(":authority", "")).SerializeToString()
                conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
                conn.send_data(sid, h2raw.grpc_frame(resp))
                conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)
            else:
                super()._act(conn, sid, headers)
    return Upstream


class HalfClosed(MaitredTest):
    def raw_upstream(self, script):
        up = raw_upstream_class()(script)
        self.addCleanup(up.close)
        return up

    @maitred_only
    @needs_h2
    def test_reset_after_response_cancels_open_request_upstream(self):
        # The upstream answers in full while the request half is still
        # open; the client then resets its stream. The upstream stream has
        # no request END_STREAM and can get none: maitred must cancel it,
        # or it (and its call) stays open for the connection's lifetime.
        import h2raw
        up = self.raw_upstream(lambda path, headers: ("respond", h2raw.echo_request()))
        m = self.start_maitred(self.config([self.service("*", [up.address])]))
        c = h2raw.H2Client(m.port)
        self.addCleanup(c.close)
        sid = c.call(ECHO_BIDI, [h2raw.echo_request()], end=False)
        st = c.wait(sid)
        sh = st.status_headers()
        self.assertIsNotNone(sh, "no response: %r" % st.events)
        self.assertEqual(sh.get("grpc-status"), "0", sh)
        rec = up.wait_request()
        self.assertEqual(rec["resets"], [])
        c.reset(sid)
        self.assertEqual(up.wait_reset(rec, limit=10), [8],
                         "the upstream stream was not cancelled after the client's RST_STREAM")

    @maitred_only
    @needs_h2
    def test_client_gone_after_response_cancels_open_request_upstream(self):
        # Same, with the client closing its connection instead.
        import h2raw
        up = self.raw_upstream(lambda path, headers: ("respond", h2raw.echo_request()))
        m = self.start_maitred(self.config([self.service("*", [up.address])]))
        c = h2raw.H2Client(m.port)
        sid = c.call(ECHO_BIDI, [h2raw.echo_request()], end=False)
        st = c.wait(sid)
        self.assertIsNotNone(st.status_headers(), "no response: %r" % st.events)
        rec = up.wait_request()
        c.close()
        self.assertEqual(up.wait_reset(rec, limit=10), [8],
                         "the upstream stream was not cancelled after the client left")


class SplitFrameTlsUpstream:
    """A TLS h2 upstream answering every request with 200 headers and one
    DATA frame whose payload starts with a bad gRPC prefix (compressed flag
    2) and goes on with zero bytes (which read as empty messages). The
    frame is cut into two TLS records sent in one TCP write, so maitred
    reads them in one turn as two chunks of the same frame: the call fails
    on the first chunk, before its RST_STREAM went out."""

    def __init__(self, ca):
        import ssl
        import threading
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(ca.server_cert, ca.server_key)
        self.ctx.set_alpn_protocols(["h2"])
        self.lsock = __import__("socket").socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.lsock.settimeout(0.2)
        self.address = "127.0.0.1:%d" % self.lsock.getsockname()[1]
        self.stop = threading.Event()
        self.answered = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                c, _ = self.lsock.accept()
            except OSError:
                continue
            try:
                self._serve(c)
            except Exception:  # noqa: BLE001 (the peer went away)
                pass
            finally:
                c.close()

    def _serve(self, sock):
        import ssl
        import h2.config
        import h2.connection
        import h2.events
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.ctx.wrap_bio(inc, out, server_side=True)
        sock.settimeout(0.2)

        def pump_out():
            data = out.read()
            if data:
                sock.sendall(data)

        def recv():
            try:
                data = sock.recv(65536)
            except OSError as e:
                if isinstance(e, __import__("socket").timeout):
                    return True
                return False
            if not data:
                return False
            inc.write(data)
            return True
        while not self.stop.is_set():
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pump_out()
                if not recv():
                    return
        pump_out()
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        conn.initiate_connection()
        tls.write(conn.data_to_send())
        pump_out()
        while not self.stop.is_set():
            if not recv():
                return
            while True:
                try:
                    data = tls.read(65536)
                except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                    break
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.RequestReceived):
                        conn.send_headers(ev.stream_id, [(":status", "200"), ("content-type", "application/grpc")])
                        payload = struct.pack(">BI", 2, 0) + bytes(10000)
                        conn.send_data(ev.stream_id, payload)
                        frames = conn.data_to_send()
                        cut = len(frames) - 5000  # inside the DATA payload
                        tls.write(frames[:cut])
                        tls.write(frames[cut:])
                        self.answered += 1
                    elif isinstance(ev, h2.events.DataReceived):
                        conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            tls.write(conn.data_to_send())
            pump_out()

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.lsock.close()


class AfterFailure(MaitredTest):
    @maitred_only
    @needs_h2
    def test_data_after_failure_in_same_turn_is_dropped(self):
        # The call fails on a bad gRPC prefix after its response headers
        # went out; the rest of that DATA frame, read in the same turn,
        # must not reach the client: it would get bytes (a torn message)
        # before the synthesized status.
        import os
        import shutil
        import tempfile
        import h2raw
        from harness import TestCA
        cadir = tempfile.mkdtemp(prefix="maitred-ca-")
        self.addCleanup(shutil.rmtree, cadir, True)
        ca = TestCA(os.path.join(cadir, "ca"), server_name="echo.test")
        up = SplitFrameTlsUpstream(ca)
        self.addCleanup(up.close)
        m = self.start_maitred(self.config([self.service(
            "*", [up.address], tls={"ca_file": ca.ca_file, "server_name": "echo.test"})]))
        c = h2raw.H2Client(m.port)
        self.addCleanup(c.close)
        for i in range(3):
            with self.subTest(call=i):
                st = c.wait(c.call(ECHO_UNARY, [h2raw.echo_request()]))
                sh = st.status_headers()
                self.assertIsNotNone(sh, "no status: %r" % st.events)
                self.assertEqual(sh.get("grpc-status"), str(grpc.StatusCode.INTERNAL.value[0]), sh)
                self.assertEqual(len(st.body), 0, "response bytes relayed after the call failed")
        self.assertEqual(up.answered, 3)


class HttpStatus(MaitredTest):
    @maitred_only
    @needs_h2
    def test_non_200_without_grpc_status_is_mapped(self):
        # gRPC http-grpc-status-mapping.md.
        want = {400: grpc.StatusCode.INTERNAL,
                401: grpc.StatusCode.UNAUTHENTICATED,
                403: grpc.StatusCode.PERMISSION_DENIED,
                404: grpc.StatusCode.UNIMPLEMENTED,
                429: grpc.StatusCode.UNAVAILABLE,
                502: grpc.StatusCode.UNAVAILABLE,
                503: grpc.StatusCode.UNAVAILABLE,
                504: grpc.StatusCode.UNAVAILABLE,
                500: grpc.StatusCode.UNKNOWN,
                302: grpc.StatusCode.UNKNOWN}

        def script(path, headers):
            # /<body|empty>.Svc/Http<code>
            code = int(path.rsplit("/", 1)[1][len("Http"):])
            body = path.startswith("/body.")
            return ("http", code, b"<html>error</html>", not body)
        up = raw_upstream_class()(script)
        self.addCleanup(up.close)
        m = self.start_maitred(self.config([self.service("*", [up.address])]))
        # A raw client sees what maitred sent (grpcio would map a raw 503
        # itself and hide whether maitred did).
        import h2raw
        c = h2raw.H2Client(m.port)
        self.addCleanup(c.close)
        for where in ("body", "empty"):
            for http, status in want.items():
                with self.subTest(http=http, body=where):
                    st = c.wait(c.call("/%s.Svc/Http%d" % (where, http), [b""]))
                    first = st.first_headers()
                    self.assertEqual(first.get(":status"), "200", st.events)
                    self.assertEqual(first.get("grpc-status"), str(status.value[0]), st.events)
                    self.assertIn("HTTP %d" % http, first.get("grpc-message", ""))
                    self.assertEqual(st.body, b"", "the HTTP body reached the gRPC client")
        # And a gRPC library gets the status and maitred's message.
        with self.assertRaises(grpc.RpcError) as cm:
            self.channel(m).unary_unary("/body.Svc/Http503")(b"", timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assertIn("HTTP 503", cm.exception.details())


class CutMessage(MaitredTest):
    """An upstream whose response ends inside a gRPC message, its
    trailers saying OK: the message was lost, the call did not succeed
    (grpcio would take the OK and return no message)."""

    @maitred_only
    def test_a_response_ended_mid_message_is_internal(self):
        import h2raw
        ok = [(":status", "200"), ("content-type", "application/grpc")]
        cuts = {"/cut.Svc/Prefix": h2raw.grpc_frame(b"hello")[:3],     # in the 5-byte prefix
                "/cut.Svc/Payload": h2raw.grpc_frame(b"hello")[:7],    # in the payload
                "/cut.Svc/Second": h2raw.grpc_frame(b"a") + h2raw.grpc_frame(b"hello")[:6],
                "/cut.Svc/Whole": h2raw.grpc_frame(b"hello")}
        # One call at a time on one connection: the upstream's nth stream
        # is the nth call.
        order = sorted(p for p in cuts if p != "/cut.Svc/Whole") + ["/cut.Svc/Whole"]

        def script(sid, enc):
            body = cuts[order[(sid - 1) // 2]]
            return (h2raw.raw_frame(0x1, 0x4, sid, enc(ok)) + h2raw.raw_frame(0x0, 0, sid, body) +
                    h2raw.raw_frame(0x1, 0x5, sid, enc([("grpc-status", "0")])))
        up = h2raw.RawUpstream(script)
        self.addCleanup(up.close)
        m = self.start_maitred(self.config([self.service("*", [up.address])]))
        c = h2raw.H2Client(m.port)
        self.addCleanup(c.close)
        for path in order[:-1]:
            with self.subTest(path=path):
                st = c.wait(c.call(path, [b"x"]))
                status = st.status_headers() or {}
                self.assertEqual(status.get("grpc-status"), "13", st.events)
                self.assertIn("middle of a message", status.get("grpc-message", ""))
        # A whole message and OK stays OK.
        st = c.wait(c.call("/cut.Svc/Whole", [b"x"]))
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)
        self.assertEqual(st.body, h2raw.grpc_frame(b"hello"))


class MalformedStatus(MaitredTest):
    """An upstream whose grpc-status is not 1*DIGIT (PROTOCOL-HTTP2):
    clients read "+0" as OK (grpc-go) or "abc" as UNKNOWN, while maitred
    counted the answer a failure. The client is told INTERNAL, naming what
    came, in trailers and in a Trailers-Only answer alike."""

    @maitred_only
    def test_a_malformed_grpc_status_is_internal(self):
        import h2raw
        ok = [(":status", "200"), ("content-type", "application/grpc")]
        cases = [("/bad.Svc/Plus", "+0", False), ("/bad.Svc/Word", "abc", False), ("/bad.Svc/Empty", "", False),
                 ("/bad.Svc/Long", "0000", False), ("/bad.Svc/OnlyPlus", "+0", True),
                 ("/bad.Svc/Good", "0", False), ("/bad.Svc/OnlyGood", "5", True)]

        def script(sid, enc):
            path, status, only = cases[(sid - 1) // 2]
            if only:
                return h2raw.raw_frame(0x1, 0x5, sid, enc(ok + [("grpc-status", status)]))
            return (h2raw.raw_frame(0x1, 0x4, sid, enc(ok)) + h2raw.raw_frame(0x0, 0, sid, h2raw.grpc_frame(b"hi")) +
                    h2raw.raw_frame(0x1, 0x5, sid, enc([("grpc-status", status)])))
        up = h2raw.RawUpstream(script)
        self.addCleanup(up.close)
        m = self.start_maitred(self.config([self.service("*", [up.address])]))
        c = h2raw.H2Client(m.port)
        self.addCleanup(c.close)
        for path, status, only in cases:
            with self.subTest(path=path):
                st = c.wait(c.call(path, [b"x"]))
                got = st.status_headers() or {}
                if status in ("0", "5"):
                    self.assertEqual(got.get("grpc-status"), status, st.events)
                    continue
                self.assertEqual(got.get("grpc-status"), "13", st.events)
                self.assertIn("malformed grpc-status", got.get("grpc-message", ""))


class OutOfDescriptors(MaitredTest):
    @maitred_only
    def test_socket_failure_fails_waiting_calls_promptly(self):
        # maitred at its descriptor limit (EMFILE): a call whose endpoint
        # has no connection yet cannot get one. It must end at once with
        # UNAVAILABLE naming the cause, not wait in the pool with nothing
        # to wake it until the client's deadline.
        import resource
        from harness import free_port, pb
        up = self.start_upstream("a")
        cfg = self.config([self.service("a.A", [up]),
                           self.service("*", ["127.0.0.1:%d" % free_port()])])
        m = self.start_maitred(cfg)
        ch = self.channel(m)
        stub = self.echo(m)
        # Client connection and one upstream connection up (service a.A
        # routes to the upstream; its Echo answers any method).
        ch.unary_unary("/a.A/Unary")(pb.EchoRequest().SerializeToString(), timeout=CALL_LIMIT)
        fd_dir = "/proc/%d/fd" % m.proc.pid
        used = {int(n) for n in os.listdir(fd_dir)}
        lowest_free = next(i for i in range(len(used) + 1) if i not in used)
        old = resource.prlimit(m.proc.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(m.proc.pid, resource.RLIMIT_NOFILE, (lowest_free, old[1]))
        try:
            with self.assertRaises(grpc.RpcError) as cm:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        finally:
            resource.prlimit(m.proc.pid, resource.RLIMIT_NOFILE, old)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assertIn("Too many open files", cm.exception.details())
        # With descriptors back, the working service still works.
        self.assertEqual(pb.EchoResponse.FromString(ch.unary_unary("/a.A/Unary")(
            pb.EchoRequest().SerializeToString(), timeout=CALL_LIMIT)).instance, "a")


class Authority(MaitredTest):
    @maitred_only
    @needs_h2
    def test_authority_kept_or_overridden(self):
        from harness import pb
        up = raw_upstream_class()(lambda path, headers: ("authority",))
        self.addCleanup(up.close)
        cfg = self.config([
            self.service("a.Keep", [up.address]),
            self.service("b.Literal", [up.address], authority="api.internal:8443"),
            self.service("c.Endpoint", [up.address], authority="FROM_ENDPOINT"),
        ])
        m = self.start_maitred(cfg)
        ch = self.channel(m)
        want = {"a.Keep": "127.0.0.1:%d" % m.port,   # the app's, unchanged
                "b.Literal": "api.internal:8443",
                "c.Endpoint": up.address}
        for svc, authority in want.items():
            with self.subTest(service=svc):
                raw = ch.unary_unary("/%s/Echo" % svc)(b"", timeout=CALL_LIMIT)
                self.assertEqual(pb.EchoResponse.FromString(raw).instance, authority)
        for rec in up.requests:
            names = [k for k, _ in rec["headers"]]
            self.assertEqual(names.count(":authority"), 1, rec["headers"])


if __name__ == "__main__":
    unittest.main()
