"""RFC 9113 conformance where nghttp2 1.52, run the way maitred runs it (no
closed-stream state, no RFC 7540 priorities), lets a peer's mistake pass:
frames on closed streams (§5.1), stream ids going backwards (§5.1.1),
PRIORITY on stream 0 or on itself (§5.3.1, §6.3); and the stream limit
(§5.1.2). On maitred's listener (a raw client; python3-h2 encodes the
header blocks) and on its upstream connections (a raw upstream: h2spec's
client cases 5.1/5, 5.1/6, 5.1/8, 5.1/9, 6.1/2 and 6.3/1)."""

import socket
import struct
import time

import h2.errors

from h2raw import H2Client, RawUpstream, Stream
from harness import MaitredTest, maitred_only, CALL_LIMIT

PATH = "/maitred.testing.v1.Echo/Unary"
DATA, HEADERS, PRIORITY, RST_STREAM, WINDOW_UPDATE, CONTINUATION = 0x0, 0x1, 0x2, 0x3, 0x8, 0x9
END_STREAM, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x4, 0x8, 0x20
E = h2.errors.ErrorCodes


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


class Conformance(MaitredTest):
    def setUp(self):
        super().setUp()
        self.up = self.start_upstream("a")
        self.m = self.start_maitred(upstreams=[self.up])
        self.c = H2Client(self.m.port)
        self.addCleanup(self.c.close)

    def block(self):
        """A request header block, encoded with the connection's HPACK state."""
        return self.c.conn.encoder.encode([
            (":method", "POST"), (":scheme", "http"), (":path", PATH), (":authority", "maitred.test"),
            ("content-type", "application/grpc"), ("te", "trailers")])

    def send(self, data):
        self.c.sock.sendall(data)

    def finished_call(self):
        """A call both sides ended with END_STREAM: its stream is closed."""
        sid = self.c.call(PATH, messages=[b""])
        st = self.c.wait(sid)
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)
        return sid

    def reset_call(self):
        """A call the client reset: its stream is closed."""
        sid = self.c.call(PATH, end=False)
        self.c.reset(sid, E.CANCEL)
        return sid

    def assert_goaway(self, code):
        self.c.pump(lambda: self.c.goaway is not None or self.c.closed, CALL_LIMIT)
        self.assertIsNotNone(self.c.goaway, "no GOAWAY")
        self.assertEqual(self.c.goaway.error_code, code)

    def assert_still_serves(self):
        self.assertIsNone(self.c.goaway)
        sid = self.c.call(PATH, messages=[b""])
        st = self.c.wait(sid)
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)
        self.assertIsNone(self.c.goaway)

    # --- a graceful close (issue 16 §2; h2spec http2/7/1) ---------------------
    @maitred_only
    def test_goaway_is_not_lost_to_a_reset(self):
        # A connection error dooms the connection: maitred sends GOAWAY and
        # reads no more. The client's PING that follows stays unread; a
        # close() with unread bytes makes the kernel send a RST, and the
        # client may lose the GOAWAY. maitred shuts its side down, reads
        # and drops for a bounded linger, then closes: the client reads the
        # GOAWAY and then a clean end of stream, never a reset.
        ping = frame(0x6, 0, 0, b"12345678")
        self.send(frame(PRIORITY, 0, 0, b"\0\0\0\1\x10") + ping)
        time.sleep(0.2)
        for _ in range(20):  # more bytes it will not read, while it closes
            try:
                self.send(ping)
            except (BrokenPipeError, ConnectionResetError):
                self.fail("maitred reset the connection instead of closing it")
        self.c.sock.settimeout(CALL_LIMIT)
        got = b""
        deadline = time.monotonic() + CALL_LIMIT
        while time.monotonic() < deadline:
            try:
                chunk = self.c.sock.recv(65536)
            except ConnectionResetError:
                self.fail("connection reset by maitred after %d bytes" % len(got))
            except socket.timeout:
                self.fail("maitred never closed the connection")
            if not chunk:
                break
            got += chunk
        # GOAWAY (type 7) with PROTOCOL_ERROR (1) is among what arrived.
        i, seen = 0, False
        while i + 9 <= len(got):
            n = int.from_bytes(got[i:i + 3], "big")
            if got[i + 3] == 0x7 and n >= 8 and int.from_bytes(got[i + 13:i + 17], "big") == E.PROTOCOL_ERROR:
                seen = True
            i += 9 + n
        self.assertTrue(seen, "no GOAWAY(PROTOCOL_ERROR) in %r" % got[:200])

    # --- §5.1: frames on a stream closed by END_STREAM ---------------------------
    @maitred_only
    def test_data_on_a_stream_closed_by_end_stream(self):
        sid = self.finished_call()
        self.send(frame(DATA, END_STREAM, sid, b"\0\0\0\0\0"))
        self.assert_goaway(E.STREAM_CLOSED)

    @maitred_only
    def test_headers_on_a_stream_closed_by_end_stream(self):
        sid = self.finished_call()
        self.send(frame(HEADERS, END_STREAM | END_HEADERS, sid, self.block()))
        self.assert_goaway(E.STREAM_CLOSED)

    @maitred_only
    def test_continuation_on_a_stream_closed_by_end_stream(self):
        # A header block begun on the closed stream and continued: the
        # HEADERS is the frame on a closed stream (a CONTINUATION alone
        # is the §6.10 PROTOCOL_ERROR, tested below).
        sid = self.finished_call()
        blk = self.block()
        self.send(frame(HEADERS, END_STREAM, sid, blk[:2]) + frame(CONTINUATION, END_HEADERS, sid, blk[2:]))
        self.assert_goaway(E.STREAM_CLOSED)

    @maitred_only
    def test_a_lone_continuation_is_a_protocol_error(self):
        sid = self.finished_call()
        self.send(frame(CONTINUATION, END_HEADERS, sid, self.block()))
        self.assert_goaway(E.PROTOCOL_ERROR)

    @maitred_only
    def test_window_update_on_a_stream_closed_by_end_stream_is_allowed(self):
        # RFC 9113 §5.1 "closed", §6.9: it may have been in flight.
        sid = self.finished_call()
        self.send(frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", 1024)))
        self.assert_still_serves()

    # --- §5.1: frames on a stream closed by the client's RST_STREAM --------------
    @maitred_only
    def test_data_on_a_stream_closed_by_rst_stream(self):
        # The §5.1 stream error, not a connection error: grpc-java on Netty
        # sends the DATA it had queued after its RST_STREAM(CANCEL)
        # (test_interop_java), and closing would lose its other calls.
        other = self.c.call(PATH, end=False)
        sid = self.reset_call()
        self.send(frame(DATA, 0, sid, b"\0\0\0\0\0") + frame(DATA, END_STREAM, sid, b"\0\0\0\0\0"))
        self.c.pump(lambda: self.c.rsts or self.c.goaway is not None, CALL_LIMIT)
        self.assertEqual(self.c.rsts, [(sid, E.STREAM_CLOSED)], (self.c.goaway, self.c.closed, self.m.proc.output()[-2000:]))
        self.assert_still_serves()
        # Once nghttp2 forgot the stream too (a later read): answered once.
        self.send(frame(DATA, 0, sid, b"\0\0\0\0\0"))
        self.assert_still_serves()
        # RST_STREAM and DATA in one read (what Netty writes).
        sid2 = self.c.call(PATH, end=False)
        self.send(frame(RST_STREAM, 0, sid2, struct.pack(">I", E.CANCEL)) + frame(DATA, 0, sid2, b"\0\0\0\0\0"))
        self.c.pump(lambda: len(self.c.rsts) > 1 or self.c.goaway is not None, CALL_LIMIT)
        self.assertEqual(self.c.rsts, [(sid, E.STREAM_CLOSED), (sid2, E.STREAM_CLOSED)])
        self.assert_still_serves()
        self.c.send(other, b"", end=True)
        st = self.c.wait(other)
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)

    @maitred_only
    def test_data_on_several_reset_streams_in_one_read(self):
        # Each stream gets its §5.1 answer, once, though one read carries
        # the late DATA of all three, interleaved (a client cancelling a
        # burst of calls).
        sids = [self.reset_call() for _ in range(3)]
        self.send(b"".join(frame(DATA, 0, sid, b"\0\0\0\0\0") for sid in sids + sids))
        self.c.pump(lambda: len(self.c.rsts) >= 3 or self.c.goaway is not None, CALL_LIMIT)
        self.assertEqual(sorted(self.c.rsts), [(sid, E.STREAM_CLOSED) for sid in sids], self.c.goaway)
        self.assert_still_serves()

    @maitred_only
    def test_headers_on_a_stream_closed_by_rst_stream(self):
        sid = self.reset_call()
        self.send(frame(HEADERS, END_STREAM | END_HEADERS, sid, self.block()))
        self.assert_goaway(E.STREAM_CLOSED)

    @maitred_only
    def test_continuation_on_a_stream_closed_by_rst_stream(self):
        sid = self.reset_call()
        blk = self.block()
        self.send(frame(HEADERS, END_STREAM, sid, blk[:2]) + frame(CONTINUATION, END_HEADERS, sid, blk[2:]))
        self.assert_goaway(E.STREAM_CLOSED)

    @maitred_only
    def test_window_update_on_a_stream_closed_by_rst_stream(self):
        sid = self.reset_call()
        self.send(frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", 1024)))
        self.assert_goaway(E.STREAM_CLOSED)

    @maitred_only
    def test_a_second_rst_stream_on_a_reset_stream_is_ignored(self):
        # What grpc-java on Netty sends when response HEADERS cross its
        # RST_STREAM(CANCEL) (test_interop_java): the stream error §5.1 asks
        # for would be a RST_STREAM, which §5.4.2 forbids in answer to one,
        # and a connection error would lose the connection's other calls.
        other = self.c.call(PATH, end=False)
        sid = self.reset_call()
        self.send(frame(RST_STREAM, 0, sid, struct.pack(">I", E.STREAM_CLOSED)))
        self.assert_still_serves()
        self.c.send(other, b"", end=True)
        st = self.c.wait(other)
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)

    @maitred_only
    def test_frames_after_maitreds_own_reset_are_ignored(self):
        # maitred reset the stream (header list too large) while the client
        # was still sending: the client's DATA may have been in flight.
        big = [("x-big-%d" % i, "v" * 4000) for i in range(20)]
        sid = self.c.call(PATH, headers=big, end=False)
        st = self.c.wait(sid)
        self.assertIsNotNone(st.reset_code(), st.events)
        self.send(frame(DATA, END_STREAM, sid, b"\0\0\0\0\0"))
        self.assert_still_serves()

    # --- §5.1.1: stream ids only go up ---------------------------------------------
    @maitred_only
    def test_headers_with_a_lower_stream_id_than_one_used(self):
        # One write, so that maitred reads both in one turn: sent apart, the
        # upstream could answer stream 5 first, and python3-h2, which never
        # opened stream 5 itself, would refuse that answer and stop reading
        # before the GOAWAY (the test's race, not maitred's).
        self.send(frame(HEADERS, END_STREAM | END_HEADERS, 5, self.block()) +
                  frame(HEADERS, END_STREAM | END_HEADERS, 3, self.block()))
        self.assert_goaway(E.PROTOCOL_ERROR)

    # --- §6.3 / §5.3.1: PRIORITY rules hold without RFC 7540 priorities ---------
    @maitred_only
    def test_priority_on_stream_zero(self):
        self.send(frame(PRIORITY, 0, 0, struct.pack(">IB", 1, 16)))
        self.assert_goaway(E.PROTOCOL_ERROR)

    @maitred_only
    def test_priority_making_a_stream_depend_on_itself(self):
        self.send(frame(PRIORITY, 0, 1, struct.pack(">IB", 1, 16)))
        self.assert_goaway(E.PROTOCOL_ERROR)

    @maitred_only
    def test_headers_making_a_stream_depend_on_itself(self):
        self.send(frame(HEADERS, END_STREAM | END_HEADERS | PRIORITY_FLAG, 1,
                        struct.pack(">IB", 1, 16) + self.block()))
        self.assert_goaway(E.PROTOCOL_ERROR)

    @maitred_only
    def test_valid_priority_frames_are_still_accepted(self):
        # A PRIORITY split across writes, a HEADERS with a valid dependency
        # and padded DATA: the frame scanner follows them, nothing is wrong.
        p = frame(PRIORITY, 0, 7, struct.pack(">IB", 0, 16))
        self.send(p[:11])
        self.send(p[11:])
        c = self.c
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", PATH),
                                  (":authority", "maitred.test"), ("content-type", "application/grpc"),
                                  ("te", "trailers")], priority_weight=16, priority_depends_on=0)
        c.conn.send_data(sid, b"\0\0\0\0\0", end_stream=True, pad_length=7)
        c.streams[sid] = Stream(sid)
        c._flush()
        st = c.wait(sid)
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)
        self.assert_still_serves()


class StreamLimit(MaitredTest):
    """RFC 9113 §5.1.2, deterministically: h2spec's http2/5.1.2/1 opens its
    streams one after another and each is answered before the next comes,
    so it never exceeds the limit; here five streams are open at once
    against SETTINGS_MAX_CONCURRENT_STREAMS 4 (raw frames: h2 itself would
    not send the fifth). The fifth is refused (REFUSED_STREAM: the client
    may retry it), the connection and the four others go on, whether or
    not the client acknowledged the SETTINGS (nghttp2 1.52 on its own
    ended the connection with GOAWAY(PROTOCOL_ERROR) once it had)."""

    def frames(self, sock, buf, until):
        """Read frames until until(ftype, flags, sid, payload) is true or
        the connection ends; returns (what is left of buf, frames seen)."""
        seen = []
        deadline = time.monotonic() + CALL_LIMIT
        while time.monotonic() < deadline:
            while len(buf) >= 9:
                n = int.from_bytes(buf[0:3], "big")
                if len(buf) < 9 + n:
                    break
                f = (buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n])
                buf = buf[9 + n:]
                seen.append(f)
                if until(*f):
                    return buf, seen
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf, seen

    def over_the_limit(self, acknowledge):
        import hpack
        up = self.start_upstream("a")
        m = self.start_maitred(self.config([self.service("*", [up])], downstream={"max_concurrent_streams": 4}))
        sock = socket.create_connection(("127.0.0.1", m.port), timeout=CALL_LIMIT)
        self.addCleanup(sock.close)
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(0x4, 0, 0))
        buf, seen = self.frames(sock, b"", lambda t, fl, sid, p: t == 0x4 and not fl & 0x1)
        settings = [p for t, fl, sid, p in seen if t == 0x4 and not fl & 0x1]
        self.assertTrue(settings, "no SETTINGS from maitred")
        advertised = {int.from_bytes(settings[0][i:i + 2], "big"): int.from_bytes(settings[0][i + 2:i + 6], "big")
                      for i in range(0, len(settings[0]), 6)}
        self.assertEqual(advertised.get(0x3), 4, "SETTINGS_MAX_CONCURRENT_STREAMS advertised")
        if acknowledge:
            # The ACK, then a PING: its answer says maitred read the ACK.
            sock.sendall(frame(0x4, 0x1, 0) + frame(0x6, 0, 0, b"acked..."))
            buf, _ = self.frames(sock, buf, lambda t, fl, sid, p: t == 0x6 and fl & 0x1)
        enc = hpack.Encoder()
        hs = [(":method", "POST"), (":scheme", "http"), (":path", PATH), (":authority", "maitred.test"),
              ("content-type", "application/grpc"), ("te", "trailers")]
        sock.sendall(b"".join(frame(HEADERS, END_HEADERS, sid, enc.encode(hs)) for sid in (1, 3, 5, 7, 9)))
        buf, seen = self.frames(sock, buf, lambda t, fl, sid, p: t in (RST_STREAM, 0x7))
        resets = {sid: int.from_bytes(p[:4], "big") for t, fl, sid, p in seen if t == RST_STREAM}
        goaway = [int.from_bytes(p[4:8], "big") for t, fl, sid, p in seen if t == 0x7]
        self.assertEqual(goaway, [], "a stream over the limit is a stream error, not the connection's")
        self.assertEqual(resets, {9: E.REFUSED_STREAM}, "the fifth stream alone is refused, and so")
        # The four within the limit still get their answers.
        sock.sendall(b"".join(frame(DATA, END_STREAM, sid, b"\0\0\0\0\0") for sid in (1, 3, 5, 7)))
        answered = set()

        def answer(t, fl, sid, p):
            if t == HEADERS and fl & END_STREAM:
                answered.add(sid)
            self.assertNotEqual(t, RST_STREAM, "stream %d reset" % sid)
            self.assertNotEqual(t, 0x7, "GOAWAY")
            return len(answered) == 4
        self.frames(sock, buf, answer)
        self.assertEqual(answered, {1, 3, 5, 7})
        # And the connection takes new calls (a refused call retried).
        answered.clear()
        sock.sendall(frame(HEADERS, END_HEADERS | END_STREAM, 11, enc.encode(hs)))
        self.frames(sock, b"", lambda *f: answer(*f) or 11 in answered)
        self.assertEqual(answered, {11})
        self.stop_maitred(m)

    @maitred_only
    def test_a_stream_over_the_limit_is_refused_the_others_go_on(self):
        self.over_the_limit(acknowledge=False)

    @maitred_only
    def test_once_the_client_acknowledged_the_limit_too(self):
        self.over_the_limit(acknowledge=True)


RESP = [(":status", "200"), ("content-type", "application/grpc")]
TRAILERS_ONLY = RESP + [("grpc-status", "0")]


def answer(sid, encode, msg=b"ok"):
    """A well-formed answer: headers, one message, trailers."""
    return (frame(HEADERS, END_HEADERS, sid, encode(RESP)) +
            frame(DATA, 0, sid, struct.pack(">BI", 0, len(msg)) + msg) +
            frame(HEADERS, END_HEADERS | END_STREAM, sid, encode([("grpc-status", "0")])))


class UpstreamConformance(MaitredTest):
    """maitred as an HTTP/2 client: what it answers to an upstream that
    sends frames on a stream already closed, or PRIORITY on stream 0 (the
    upstream side had no closed-stream state: such frames were ignored)."""

    def run_case(self, script, on_reset=None, timeout=5):
        up = RawUpstream(script, on_reset)
        self.addCleanup(up.close)
        m = self.start_maitred(self.config([self.service("*", [up.address])]))
        call = self.raw_unary(m, "/raw.Upstream/Call")
        fut = call.future(b"x", timeout=timeout)
        return up, m, call, fut

    def assert_answer(self, up, ftype, code, sid=1):
        f = up.wait_frame(lambda t, fl, s, p: t in (RST_STREAM, 0x7))
        self.assertIsNotNone(f, "maitred answered nothing: %r" % [x[1:4] for x in up.frames])
        t, _, s, p = f
        got = int.from_bytes(p[:4] if t == RST_STREAM else p[4:8], "big")
        self.assertEqual((t, got), (ftype, code), "maitred's first RST_STREAM / GOAWAY (stream %d)" % s)
        if t == RST_STREAM:
            self.assertEqual(s, sid)

    @maitred_only
    def test_data_after_the_upstreams_rst_stream(self):
        # 5.1/5: a stream error STREAM_CLOSED; the connection goes on.
        def script(sid, encode):
            return (frame(HEADERS, END_HEADERS, sid, encode(RESP)) +
                    frame(RST_STREAM, 0, sid, struct.pack(">I", E.CANCEL)) +
                    frame(DATA, END_STREAM, sid, b"\0\0\0\0\0"))
        up, m, _, fut = self.run_case(script)
        self.assert_answer(up, RST_STREAM, E.STREAM_CLOSED)
        self.assertIsNone(up.wait_frame(lambda t, *_: t == 0x7, 0.5), "a stream error cost the connection")
        self.stop_maitred(m)

    @maitred_only
    def test_headers_after_the_upstreams_rst_stream(self):
        # 5.1/6: "any frame other than PRIORITY after receiving a
        # RST_STREAM" is a stream error STREAM_CLOSED (RFC 9113 §5.1); the
        # connection goes on. gRPC's C core sends exactly this when a
        # deadline races its answer (its reset, then the trailers it had
        # queued): a connection error there cost every call on the
        # connection (test_interop_java's racing deadlines).
        def script(sid, encode):
            return (frame(HEADERS, END_HEADERS, sid, encode(RESP)) +
                    frame(RST_STREAM, 0, sid, struct.pack(">I", E.CANCEL)) +
                    frame(HEADERS, END_HEADERS | END_STREAM, sid, encode(TRAILERS_ONLY)))
        up, m, _, _ = self.run_case(script)
        self.assert_answer(up, RST_STREAM, E.STREAM_CLOSED)
        self.assertIsNone(up.wait_frame(lambda t, *_: t == 0x7, 0.5), "a stream error cost the connection")
        self.stop_maitred(m)

    def data_after_end(self, apart):
        # 5.1/8 and 6.1/2: the upstream ended its half, then sent DATA.
        def script(sid, encode):
            parts = [frame(HEADERS, END_HEADERS | END_STREAM, sid, encode(TRAILERS_ONLY)),
                     frame(DATA, END_STREAM, sid, b"\0\0\0\0\0")]
            return parts if apart else b"".join(parts)
        up, m, _, _ = self.run_case(script)
        self.assert_answer(up, 0x7, E.STREAM_CLOSED)
        self.stop_maitred(m)

    @maitred_only
    def test_data_after_the_upstreams_end_stream_in_one_read(self):
        self.data_after_end(apart=False)

    @maitred_only
    def test_data_after_the_upstreams_end_stream_later(self):
        self.data_after_end(apart=True)

    @maitred_only
    def test_trailers_after_the_upstreams_end_stream(self):
        # 5.1/9, a second trailers block: the stream error STREAM_CLOSED,
        # not the connection error the RFC allows. gRPC's C core sends one
        # when a call's deadline fires as its handler answers, and a
        # connection error cost every call on the connection.
        def script(sid, encode):
            return [frame(HEADERS, END_HEADERS | END_STREAM, sid, encode(TRAILERS_ONLY)),
                    frame(HEADERS, END_HEADERS | END_STREAM, sid, encode(TRAILERS_ONLY))]
        up, m, _, _ = self.run_case(script)
        self.assert_answer(up, RST_STREAM, E.STREAM_CLOSED)
        self.assertIsNone(up.wait_frame(lambda t, *_: t == 0x7, 0.5), "a stream error cost the connection")
        self.stop_maitred(m)

    @maitred_only
    def test_headers_without_end_stream_after_the_upstreams_end_stream(self):
        # 5.1/9 otherwise: HEADERS that ends nothing, after both ends, is
        # the connection error STREAM_CLOSED.
        def script(sid, encode):
            return [frame(HEADERS, END_HEADERS | END_STREAM, sid, encode(TRAILERS_ONLY)),
                    frame(HEADERS, END_HEADERS, sid, encode(RESP))]
        up, m, _, _ = self.run_case(script)
        self.assert_answer(up, 0x7, E.STREAM_CLOSED)
        self.stop_maitred(m)

    @maitred_only
    def test_priority_on_stream_zero_from_the_upstream(self):
        # 6.3/1
        def script(sid, encode):
            return frame(PRIORITY, 0, 0, struct.pack(">IB", 1, 16)) + answer(sid, encode)
        up, m, _, _ = self.run_case(script)
        self.assert_answer(up, 0x7, E.PROTOCOL_ERROR)
        self.stop_maitred(m)

    @maitred_only
    def test_repeated_goaways_from_the_upstream_are_logged_and_obeyed_once(self):
        # §6.8 lets a server send GOAWAY more than once (last_stream_id
        # never rising). A hostile one sent 20,000 in one write: maitred
        # logged a line for each (20,000 lines, a write each), and each
        # "too_many_pings" doubled the endpoint's keepalive interval, to
        # its 12-day ceiling in 16 frames. One connection's GOAWAY is
        # logged once and doubles the interval once (gRPC A8: per GOAWAY
        # received, and a server sends one before it closes).
        goaway = frame(0x7, 0, 0, struct.pack(">II", 1, E.ENHANCE_YOUR_CALM) + b"too_many_pings")

        def script(sid, encode):
            return (frame(HEADERS, END_HEADERS, sid, encode(RESP)) + goaway * 200 +
                    frame(DATA, 0, sid, b"\0\0\0\0\0") +
                    frame(HEADERS, END_HEADERS | END_STREAM, sid, encode([("grpc-status", "0")])))
        up, m, _, fut = self.run_case(script)
        self.assertEqual(fut.result(timeout=CALL_LIMIT), b"")
        out = m.proc.output()
        self.assertEqual(out.count("upstream %s: GOAWAY (" % up.address), 1, "GOAWAY lines")
        self.assertEqual(out.count("too many PINGs for its policy"), 1, "keepalive doublings")
        self.stop_maitred(m)

    @maitred_only
    def test_frames_after_maitreds_own_reset_are_ignored(self):
        # maitred cancelled the stream (the client's deadline) while the
        # upstream was answering: what the upstream had in flight is
        # ignored (§5.1 "closed"), and the next call on the same connection
        # is served.
        calls = []

        def script(sid, encode):
            calls.append(sid)
            return b"" if len(calls) == 1 else answer(sid, encode)

        def late(sid, encode):
            return answer(sid, encode) + frame(DATA, 0, sid, b"\0\0\0\0\0")
        up, m, call, fut = self.run_case(script, on_reset=late, timeout=0.5)
        wait_rst = up.wait_frame(lambda t, fl, s, p: t == RST_STREAM and s == 1)
        self.assertIsNotNone(wait_rst, "maitred did not cancel the stream")
        self.assertEqual(int.from_bytes(wait_rst[3][:4], "big"), E.CANCEL)
        self.assertEqual(call(b"y", timeout=CALL_LIMIT), b"ok")
        self.assertEqual(up.conns, 1, "the connection was lost")
        self.assertEqual([f for f in up.frames if f[1] == 0x7], [], "GOAWAY")
        self.stop_maitred(m)
