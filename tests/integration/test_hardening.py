"""HTTP/2 abuse from the downstream side (the CVE-2019-95xx family and
its kin): what nghttp2 1.52 does not limit by itself, maitred does,
without hurting honest clients."""

import h2.errors

from h2raw import H2Client, echo_request
from harness import MaitredTest, maitred_only, pb, CALL_LIMIT

PATH = "/maitred.testing.v1.Echo/Unary"


class Hardening(MaitredTest):
    def setUp(self):
        super().setUp()
        self.up = self.start_upstream("a")
        self.m = self.start_maitred(upstreams=[self.up])

    def assert_still_serves(self):
        stub = self.echo(self.m)
        self.assertEqual(stub.Unary(pb.EchoRequest(key="k"), timeout=CALL_LIMIT).key, "k")

    @maitred_only
    def test_empty_data_flood_gets_enhance_your_calm(self):
        # CVE-2019-9518: empty DATA frames without END_STREAM cost work and
        # carry nothing; past the budget the connection is told to calm down.
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        sid = c.call(PATH, end=False)
        for _ in range(1500):
            c.conn.send_data(sid, b"", end_stream=False)
        c._flush()
        c.pump(lambda: c.goaway is not None or c.closed, CALL_LIMIT)
        self.assertIsNotNone(c.goaway, "no GOAWAY after 1500 empty DATA frames")
        self.assertEqual(c.goaway.error_code, h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        self.assert_still_serves()

    @maitred_only
    def test_priority_flood_gets_enhance_your_calm(self):
        # CVE-2019-9513: nghttp2 skips PRIORITY frames unread when RFC 7540
        # priorities are off, so maitred counts them itself.
        import struct
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        frame = struct.pack(">I", 5)[1:] + bytes([0x2, 0]) + struct.pack(">I", 3) + struct.pack(">IB", 0, 16)
        c.sock.sendall(frame * 1500)
        c.pump(lambda: c.goaway is not None or c.closed, CALL_LIMIT)
        self.assertIsNotNone(c.goaway, "no GOAWAY after 1500 PRIORITY frames")
        self.assertEqual(c.goaway.error_code, h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        self.assert_still_serves()

    @maitred_only
    def test_a_few_empty_data_frames_are_fine(self):
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        sid = c.call(PATH, end=False)
        for _ in range(20):
            c.conn.send_data(sid, b"", end_stream=False)
        c.send(sid, echo_request(key="x"), end=True)
        st = c.wait(sid)
        self.assertIsNone(c.goaway)
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)

    @maitred_only
    def test_oversized_header_list_resets_only_that_stream(self):
        # nghttp2 1.52 does not enforce SETTINGS_MAX_HEADER_LIST_SIZE on
        # what it receives; maitred counts name + value + 32 per field.
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        big = [("x-big-%d" % i, "v" * 4000) for i in range(20)]  # ~80 KiB > 64 KiB
        sid = c.call(PATH, messages=[b""], headers=big)
        st = c.wait(sid)
        self.assertTrue(st.done)
        self.assertIsNotNone(st.reset_code(), "stream with an 80 KiB header list was not reset: %r" % st.events)
        # The connection survives and serves the next call.
        sid2 = c.call(PATH, messages=[b""])
        st2 = c.wait(sid2)
        self.assertEqual((st2.status_headers() or {}).get("grpc-status"), "0", st2.events)
        self.assertIsNone(c.goaway)

    @maitred_only
    def test_many_cancels_are_normal_traffic(self):
        # gRPC clients cancel with RST_STREAM(CANCEL); 2000 of them in a row
        # must not get the connection closed (nghttp2's default reset rate
        # limit would, at 1000).
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        for _ in range(2000):
            sid = c.call(PATH, end=False)
            c.reset(sid, h2.errors.ErrorCodes.CANCEL)
        sid = c.call(PATH, messages=[b""])
        st = c.wait(sid)
        self.assertIsNone(c.goaway, "GOAWAY after 2000 cancels")
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)
