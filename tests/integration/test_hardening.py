"""HTTP/2 abuse from the downstream side (the CVE-2019-95xx family and
its kin): what nghttp2 1.52 does not limit by itself, maitred does,
without hurting honest clients."""

import os

import h2.errors

from h2raw import H2Client, echo_request, raw_frame
from harness import MaitredTest, maitred_only, pb, call_id, wait_until, CALL_LIMIT

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
    def test_padding_only_data_flood_gets_enhance_your_calm(self):
        # The same flood with each DATA frame PADDED (a Pad Length byte and
        # no data): its frame length is not 0, its payload is.
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        sid = c.call(PATH, end=False)
        c.sock.sendall(raw_frame(0x0, 0x8, sid, b"\0") * 1500)
        c.pump(lambda: c.goaway is not None or c.closed, CALL_LIMIT)
        self.assertIsNotNone(c.goaway, "no GOAWAY after 1500 DATA frames of padding alone")
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
    def test_unknown_frame_flood_gets_enhance_your_calm(self):
        # RFC 9113 §4.1: a frame of a type the receiver does not know is
        # skipped; nghttp2 skips it unread, so maitred counts it (HARDENING:
        # unknown frames are glitches), on stream 0 and on others.
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        c.sock.sendall((raw_frame(0xfa, 0, 0, b"x" * 8) + raw_frame(0x21, 0, 7, b"")) * 750)
        c.pump(lambda: c.goaway is not None or c.closed, CALL_LIMIT)
        self.assertIsNotNone(c.goaway, "no GOAWAY after 1500 frames of unknown types")
        self.assertEqual(c.goaway.error_code, h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        self.assert_still_serves()

    @maitred_only
    def test_a_few_unknown_frames_are_fine(self):
        # Clients that GREASE (RFC 8701's idea, for HTTP/2 frame types)
        # send one now and then: each call that ends gives one back.
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        for i in range(40):
            c.sock.sendall(raw_frame(0x0b + 0x1f * (i % 7), 0, 0, b"grease"))
            sid = c.call(PATH, end=False)
            c.send(sid, echo_request(key="x"), end=True)
            st = c.wait(sid)
            self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)
        self.assertIsNone(c.goaway)

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
    def test_streams_the_client_makes_maitred_reset_get_enhance_your_calm(self):
        # CVE-2025-8671 (MadeYouReset): each request is valid, then broken
        # by the client (more DATA than its content-length), so that
        # maitred resets it, not the client: nghttp2's reset limit never
        # sees these, and each one started a call. Past the glitch budget
        # the connection ends.
        import socket
        import struct
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        c.sock.settimeout(0)
        hs = [(":method", "POST"), (":scheme", "http"), (":path", PATH), (":authority", "maitred.test"),
              ("content-type", "application/grpc"), ("te", "trailers"), ("content-length", "0")]

        def drain():
            try:
                while True:
                    data = c.sock.recv(65536)
                    if not data:
                        return
                    c._scan_goaway(data)
            except (BlockingIOError, socket.timeout):
                pass
            except OSError:
                pass
        sid = 1
        for _ in range(20):
            batch = b""
            for _ in range(100):
                batch += raw_frame(0x1, 0x4, sid, c.conn.encoder.encode(hs))
                batch += raw_frame(0x0, 0x1, sid, struct.pack(">BI", 0, 0))
                sid += 2
            try:
                c.sock.sendall(batch)
            except (BlockingIOError, OSError):
                break
            drain()
            if c.goaway is not None:
                break
        c.sock.settimeout(0.2)
        wait_until(lambda: drain() or c.goaway is not None, CALL_LIMIT, "a GOAWAY")
        self.assertEqual(c.goaway.error_code, h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        self.assert_still_serves()

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
    def test_oversized_request_trailers_reset_only_that_stream(self):
        # Request trailers go nowhere (gRPC has none), but nghttp2 still
        # checks every field it decodes: without the header list budget a
        # 4 KB field inserted once and then named by 1-byte references,
        # 144 KB of them per trailers block, made maitred check 576 MB
        # (an HPACK bomb: about 0.8 s of CPU per MB sent). Past the budget
        # the stream is reset and nghttp2 stops looking at the fields.
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        sid = c.call(PATH, messages=[echo_request(key="t")], end=False,
                     headers=[("x-bomb", "b" * 4000)])  # into the HPACK table (index 62)
        ref = bytes([0x80 | 62]) * 16000
        c.sock.sendall(raw_frame(0x1, 0x1, sid, ref) + b"".join(raw_frame(0x9, 0, sid, ref) for _ in range(7)) +
                       raw_frame(0x9, 0x4, sid, ref))
        c.conn.encoder.header_table.add(b"x-bomb", b"b" * 4000)  # keep h2's encoder in step
        st = c.wait(sid)
        self.assertTrue(st.done)
        self.assertIsNotNone(st.reset_code(), "stream with 144,000 trailer fields was not reset: %r" % st.kinds())
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


class OneOwner(MaitredTest):
    """A hostile client against the call's one owner: every close a client
    can make is recorded by io/ and run by the engine at the end of the
    turn (docs/architecture.md, "No re-entry from io/"). Each call ends
    once: its access-log line is written once, whatever state it was in."""

    def setUp(self):
        super().setUp()
        self.up = self.start_upstream("a")
        self.access = os.path.join(self.tmp, "access.log")
        cfg = self.config([self.service("*", [self.up])], log={"access": {"path": self.access}})
        self.m = self.start_maitred(cfg)

    def access_lines(self):
        try:
            with open(self.access) as f:
                return [ln for ln in f.read().splitlines() if " access " in ln]
        except FileNotFoundError:
            return []

    def assert_lines_settle_at(self, n):
        """Exactly n access lines: wait for n, then one more call (written
        after every earlier one ended) makes n + 1, and no more."""
        wait_until(lambda: len(self.access_lines()) >= n, CALL_LIMIT, "%d access lines" % n)
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        st = c.wait(c.call(PATH, messages=[echo_request(key="last")]))
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)
        wait_until(lambda: len(self.access_lines()) >= n + 1, CALL_LIMIT, "the last call's access line")
        self.assertEqual(len(self.access_lines()), n + 1)

    @maitred_only
    def test_a_burst_opened_and_reset_in_one_write(self):
        # 600 streams in one write: half reset after their HEADERS and a
        # DATA frame (the request still open), half after END_STREAM (the
        # call started upstream). The ready list takes every close at the
        # end of the turn that read them.
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        flush = c._flush
        c._flush = lambda: None
        n = 600
        for i in range(n):
            sid = c.call(PATH, messages=[echo_request(key="k%d" % i)], end=bool(i % 2))
            c.reset(sid, h2.errors.ErrorCodes.CANCEL)
        c._flush = flush
        c._flush()
        sid = c.call(PATH, messages=[echo_request(key="after")])
        st = c.wait(sid)
        self.assertIsNone(c.goaway, "GOAWAY after a burst of resets")
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)
        self.assert_lines_settle_at(n + 1)

    @maitred_only
    def test_the_connection_closed_with_calls_in_every_state(self):
        # Calls in every state a client can leave them in, then its
        # connection closes: a request open (no END_STREAM), a call held
        # upstream, one reset by the client in the same write, one whose
        # answer is due, and one whose header block never ended.
        cid = call_id()
        c = H2Client(self.m.port)
        flush = c._flush
        c._flush = lambda: None
        c.call(PATH, messages=[echo_request(key="open")], end=False)
        c.call(PATH, messages=[echo_request(key="held", call_id=cid, hold=True)])
        r = c.call(PATH, messages=[echo_request(key="reset")])
        c.reset(r, h2.errors.ErrorCodes.CANCEL)
        c.call(PATH, messages=[echo_request(key="answered")])
        data = c.conn.data_to_send()
        c._flush = flush
        c.sock.sendall(data)
        self.assertTrue(self.up.wait_call(cid, "STARTED").started)
        # Half a header block on a new stream (no END_HEADERS), then close.
        blk = c.conn.encoder.encode([(":method", "POST"), (":scheme", "http"), (":path", PATH),
                                     (":authority", "maitred.test"), ("content-type", "application/grpc")])
        c.sock.sendall(raw_frame(0x1, 0, 99, blk[:3]))
        # Closed once maitred has read it all: an RST (a close with the
        # answers unread) could overtake the half block in maitred's
        # kernel, and the stream would never have begun.
        c.close_after_peer_read()
        # The held call is cancelled upstream, and maitred serves on.
        self.assertTrue(self.up.wait_call(cid, "ENDED").ended)
        self.assert_lines_settle_at(5)

    @maitred_only
    def test_a_reset_before_the_header_block_ends(self):
        # HEADERS without END_HEADERS, then RST_STREAM where CONTINUATION
        # must come: a connection error (RFC 9113 §6.10). The call begun
        # for the stream ends once, with its connection.
        c = H2Client(self.m.port)
        self.addCleanup(c.close)
        blk = c.conn.encoder.encode([(":method", "POST"), (":scheme", "http"), (":path", PATH),
                                     (":authority", "maitred.test"), ("content-type", "application/grpc")])
        c.sock.sendall(raw_frame(0x1, 0, 1, blk[:4]) + raw_frame(0x3, 0, 1, b"\0\0\0\x08"))
        c.pump(lambda: c.goaway is not None or c.closed, CALL_LIMIT)
        self.assertIsNotNone(c.goaway, "no GOAWAY")
        self.assertEqual(c.goaway.error_code, h2.errors.ErrorCodes.PROTOCOL_ERROR)
        self.assert_lines_settle_at(1)
