"""Raw HTTP/2 peers (python3-h2) for what a gRPC library hides: the frames
maitred sends, in order, and a client or upstream that does exactly what a
test says (never enforce a deadline, reset a stream with a chosen code).

H2Client: a blocking h2c client speaking gRPC framing by hand.
H2Upstream: a threaded h2c server that records every request's headers and
resets, and answers according to a per-path script.
"""

import socket
import struct
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

from harness import CALL_LIMIT, RawServer, pb


def grpc_frame(msg, compressed=False):
    return struct.pack(">BI", 1 if compressed else 0, len(msg)) + msg


def grpc_messages(data):
    """Split a gRPC body into its messages."""
    out = []
    while len(data) >= 5:
        flag, n = struct.unpack(">BI", data[:5])
        out.append(data[5:5 + n])
        data = data[5 + n:]
    return out


def _headers(hs):
    return [(k.decode() if isinstance(k, bytes) else k, v.decode() if isinstance(v, bytes) else v) for k, v in hs]


def _never_indexed(hs):
    """Names of the fields the sender encoded as never indexed (RFC 7541
    §6.2.3): hpack decodes them as NeverIndexedHeaderTuple (indexable False)."""
    return {(h[0].decode() if isinstance(h[0], bytes) else h[0]) for h in hs if getattr(h, "indexable", True) is False}


class Stream:
    """What one stream received, as an ordered list of events:
    ("headers", [(k, v)...], end_stream), ("data", bytes), ("trailers",
    [(k, v)...]), ("end",), ("reset", code)."""

    def __init__(self, sid):
        self.sid = sid
        self.events = []
        self.body = b""
        self.never_indexed = set()  # names of fields received never indexed

    @property
    def done(self):
        return any(e[0] in ("end", "reset") for e in self.events)

    def kinds(self):
        return [e[0] for e in self.events]

    def first_headers(self):
        for e in self.events:
            if e[0] in ("headers", "trailers"):
                return dict(e[1])
        return {}

    def status_headers(self):
        """The header block carrying grpc-status (trailers or Trailers-Only)."""
        for e in self.events:
            if e[0] in ("headers", "trailers") and any(k == "grpc-status" for k, _ in e[1]):
                return dict(e[1])
        return None

    def reset_code(self):
        for e in self.events:
            if e[0] == "reset":
                return e[1]
        return None


class RawGoaway:
    """A GOAWAY as read off the wire (the fields tests look at)."""

    def __init__(self, last_stream_id, error_code):
        self.last_stream_id = last_stream_id
        try:
            self.error_code = h2.errors.ErrorCodes(error_code)
        except ValueError:
            self.error_code = error_code


class H2Client:
    def __init__(self, port, host="127.0.0.1", tls=None, server_hostname=None):
        """h2c, or with `tls` (an ssl.SSLContext offering ALPN h2) over TLS:
        the same frames on an inbound listener (test_inbound)."""
        self.sock = socket.create_connection((host, port), timeout=5)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=server_hostname or host)
        self.sock.settimeout(0.2)
        cfg = h2.config.H2Configuration(client_side=True, header_encoding=None,
                                        validate_inbound_headers=False)
        self.conn = h2.connection.H2Connection(cfg)
        self.conn.initiate_connection()
        self.streams = {}
        self.goaway = None
        self.rsts = []  # (stream id, error code) of every RST_STREAM received
        self.closed = False
        self._raw = b""
        self._flush()

    def _scan_goaway(self, data):
        """Find GOAWAY frames in what the server sent, independently of
        python3-h2: h2 refuses frames on streams it never opened (this
        client sends raw frames behind its back), and the GOAWAY after such
        a frame would be lost with the exception."""
        self._raw += data
        while len(self._raw) >= 9:
            length = int.from_bytes(self._raw[:3], "big")
            if len(self._raw) < 9 + length:
                break
            ftype, payload = self._raw[3], self._raw[9:9 + length]
            sid = int.from_bytes(self._raw[5:9], "big") & 0x7FFFFFFF
            self._raw = self._raw[9 + length:]
            if ftype == 7 and length >= 8:
                last, code = struct.unpack(">II", payload[:8])
                self.goaway = RawGoaway(last & 0x7FFFFFFF, code)
            elif ftype == 3 and length == 4:
                # h2 drops a RST_STREAM on a stream it already closed.
                self.rsts.append((sid, struct.unpack(">I", payload)[0]))

    def _flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def call(self, path, messages=(), headers=(), end=True, timeout_header=None):
        """Start a gRPC call; returns the stream id."""
        sid = self.conn.get_next_available_stream_id()
        hs = [(":method", "POST"), (":scheme", "http"), (":path", path),
              (":authority", "maitred.test"), ("content-type", "application/grpc"),
              ("te", "trailers")]
        if timeout_header:
            hs.append(("grpc-timeout", timeout_header))
        hs += list(headers)
        body = b"".join(grpc_frame(m) for m in messages)
        self.conn.send_headers(sid, hs, end_stream=end and not body)
        self.streams[sid] = Stream(sid)
        if body:
            self.conn.send_data(sid, body, end_stream=end)
        self._flush()
        return sid

    def send(self, sid, message, end=False):
        self.conn.send_data(sid, grpc_frame(message), end_stream=end)
        self._flush()

    def end(self, sid):
        self.conn.end_stream(sid)
        self._flush()

    def reset(self, sid, code=h2.errors.ErrorCodes.CANCEL):
        self.conn.reset_stream(sid, code)
        self._flush()

    def pump(self, until, limit=CALL_LIMIT):
        """Read and handle frames until until() is true; False on timeout."""
        end = time.monotonic() + limit
        while not until():
            if time.monotonic() >= end or self.closed:
                return until()
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                self.closed = True
                continue
            if not data:
                self.closed = True
                continue
            self._scan_goaway(data)
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError:
                # python3-h2 treats a received GOAWAY as the end of the
                # connection and refuses the frames that follow it.
                self.closed = True
                continue
            for ev in events:
                self._event(ev)
            self._flush()
        return True

    def wait(self, sid, limit=CALL_LIMIT):
        """Stream `sid` once it ended or was reset (or the wait ran out)."""
        st = self.streams[sid]
        self.pump(lambda: st.done, limit)
        return st

    def _event(self, ev):
        st = self.streams.get(getattr(ev, "stream_id", None))
        if isinstance(ev, h2.events.ResponseReceived):
            st.events.append(("headers", _headers(ev.headers), ev.stream_ended is not None))
            st.never_indexed |= _never_indexed(ev.headers)
        elif isinstance(ev, h2.events.TrailersReceived):
            st.events.append(("trailers", _headers(ev.headers)))
            st.never_indexed |= _never_indexed(ev.headers)
        elif isinstance(ev, h2.events.DataReceived):
            st.events.append(("data", ev.data))
            st.body += ev.data
            self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            st.events.append(("end",))
        elif isinstance(ev, h2.events.StreamReset):
            if st is not None:
                st.events.append(("reset", int(ev.error_code)))
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = ev

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def close_after_peer_read(self, limit=5.0):
        """Close so that the peer reads every byte sent first: FIN after
        them, then what the peer sends is read and dropped until it closes
        too (at most `limit` seconds), then the socket is closed. A plain
        close with unread bytes sends an RST, and a peer's kernel that
        takes the RST before the peer read the last bytes drops them."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(limit)
            while self.sock.recv(65536):
                pass
        except OSError:
            pass
        self.close()


class H2Upstream(RawServer):
    """An h2c upstream on 127.0.0.1 that never enforces deadlines. For each
    request it records the headers and any RST_STREAM it receives, then acts
    on `script(path, headers)`, which returns one of:
      ("hold",)                 answer nothing (until reset)
      ("until", event, message) as "respond", once the threading.Event is
                                set (looked at every 0.2 s)
      ("reset", code)           RST_STREAM with that HTTP/2 error code
      ("respond", message)      200, one gRPC message, grpc-status 0
      ("headers_then_reset", code)  response headers, then RST_STREAM
      ("partial", declared, n)  response headers, then the 5-byte prefix of
                                a `declared`-byte message and n bytes of it
      ("status", code, extra)   Trailers-Only with grpc-status `code` and the
                                (name, value) pairs in `extra`
      ("http", code)            a bare HTTP answer: :status `code`, no
                                grpc-status, no body
    """

    def __init__(self, script):
        self.script = script
        self.cond = threading.Condition()
        self.requests = []   # dicts: headers, resets (list of codes)
        self.pings = 0       # PING frames received (h2 acknowledges them)
        self.settings = []   # (connection number, {setting: value}) of each SETTINGS received
        RawServer.__init__(self)

    def _serve(self, sock, n):
        sock.settimeout(0.2)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding=None, validate_inbound_headers=False))
        conn.initiate_connection()
        by_sid = {}
        self._later = []  # (event, sid, message) of "until" answers
        try:
            sock.sendall(conn.data_to_send())
            while not self.stop.is_set():
                for ev, sid, message in [x for x in self._later if x[0].is_set()]:
                    self._later.remove((ev, sid, message))
                    self._act_now(conn, sid, ("respond", message))
                    sock.sendall(conn.data_to_send())
                try:
                    data = sock.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    return
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.RequestReceived):
                        rec = {"headers": _headers(ev.headers), "resets": [], "sid": ev.stream_id,
                               "received": 0, "never_indexed": _never_indexed(ev.headers)}
                        by_sid[ev.stream_id] = rec
                        with self.cond:
                            self.requests.append(rec)
                            self.cond.notify_all()
                        self._act(conn, ev.stream_id, dict(rec["headers"]))
                    elif isinstance(ev, h2.events.DataReceived):
                        conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                        rec = by_sid.get(ev.stream_id)
                        if rec is not None:
                            with self.cond:
                                rec["received"] += len(ev.data)
                                self.cond.notify_all()
                    elif isinstance(ev, h2.events.RemoteSettingsChanged):
                        with self.cond:
                            self.settings.append((n, {int(k): v.new_value for k, v in ev.changed_settings.items()}))
                            self.cond.notify_all()
                    elif isinstance(ev, h2.events.PingReceived):
                        with self.cond:
                            self.pings += 1
                            self.cond.notify_all()
                    elif isinstance(ev, h2.events.StreamReset):
                        rec = by_sid.get(ev.stream_id)
                        if rec is not None:
                            with self.cond:
                                rec["resets"].append(int(ev.error_code))
                                self.cond.notify_all()
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
        except (OSError, h2.exceptions.ProtocolError):
            return
        finally:
            sock.close()

    def _act(self, conn, sid, headers):
        what = self.script(headers.get(":path", ""), headers)
        if what[0] == "until":
            self._later.append((what[1], sid, what[2]))
            return
        self._act_now(conn, sid, what)

    def _act_now(self, conn, sid, what):
        if what[0] == "hold":
            return
        if what[0] == "reset":
            try:
                conn.reset_stream(sid, what[1])
            except h2.exceptions.StreamClosedError:
                pass  # the peer's RST_STREAM came in the same read: h2 has it closed
        elif what[0] == "respond":
            conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
            conn.send_data(sid, grpc_frame(what[1]))
            conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)
        elif what[0] == "partial":
            conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
            n = min(what[2], conn.local_flow_control_window(sid) - 5, conn.max_outbound_frame_size - 5)
            conn.send_data(sid, struct.pack(">BI", 0, what[1]) + b"p" * n)
        elif what[0] == "status":
            conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc"),
                                    ("grpc-status", str(what[1]))] + list(what[2]), end_stream=True)
        elif what[0] == "http":
            conn.send_headers(sid, [(":status", str(what[1])), ("content-type", "text/plain")], end_stream=True)
        elif what[0] == "headers_then_reset":
            conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
            conn.reset_stream(sid, what[1])

    def wait_request(self, n=1, limit=CALL_LIMIT):
        with self.cond:
            self.cond.wait_for(lambda: len(self.requests) >= n, timeout=limit)
            return self.requests[n - 1] if len(self.requests) >= n else None

    def wait_received(self, rec, nbytes, limit=CALL_LIMIT):
        with self.cond:
            self.cond.wait_for(lambda: rec["received"] >= nbytes, timeout=limit)
            return rec["received"]

    def wait_reset(self, rec, limit=CALL_LIMIT):
        with self.cond:
            self.cond.wait_for(lambda: rec["resets"], timeout=limit)
            return list(rec["resets"])


def echo_request(**kw):
    return pb.EchoRequest(**kw).SerializeToString()


def raw_frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


class RawUpstream(RawServer):
    """An h2c upstream that answers each request with the raw frames
    `script(sid, encode)` returns (bytes; `encode` HPACK-encodes a header
    list with this connection's encoder), frames a well-behaved server
    never sends included; it records every frame maitred sends it, in
    order, as (type, flags, stream id, payload). One connection at a time
    is enough for the tests: each is served on its own thread."""

    def __init__(self, script, on_reset=None):
        import hpack
        self.on_reset = on_reset  # on_reset(sid, encode): bytes sent when maitred resets sid
        self._hpack = hpack
        self.script = script
        self.cond = threading.Condition()
        self.frames = []  # (conn no, type, flags, sid, payload) from maitred
        RawServer.__init__(self)

    def _serve(self, sock, n):
        sock.settimeout(0.2)
        enc = self._hpack.Encoder()
        buf, preface = b"", False
        try:
            sock.sendall(raw_frame(0x4, 0, 0))
            while not self.stop.is_set():
                try:
                    data = sock.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                buf += data
                if not preface:
                    if len(buf) < 24:
                        continue
                    buf, preface = buf[24:], True
                while len(buf) >= 9:
                    ln = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + ln:
                        break
                    f = (n, buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + ln])
                    buf = buf[9 + ln:]
                    with self.cond:
                        self.frames.append(f)
                        self.cond.notify_all()
                    _, ftype, flags, sid, _ = f
                    if ftype == 0x4 and not flags & 0x1:
                        sock.sendall(raw_frame(0x4, 0x1, 0))
                    elif ftype == 0x6 and not flags & 0x1:
                        sock.sendall(raw_frame(0x6, 0x1, 0, f[4]))
                    elif ftype in (0x0, 0x1) and flags & 0x1 and sid % 2:
                        # The request ended: answer it as scripted (a list:
                        # its parts written apart, a moment between them).
                        out = self.script(sid, enc.encode)
                        for i, part in enumerate(out if isinstance(out, list) else [out]):
                            if i:
                                time.sleep(0.2)
                            sock.sendall(part)
                    elif ftype == 0x3 and self.on_reset:
                        sock.sendall(self.on_reset(sid, enc.encode))
        except OSError:
            pass
        finally:
            sock.close()

    def wait_frame(self, pred, limit=CALL_LIMIT):
        """The first frame from maitred for which pred(type, flags, sid,
        payload) holds, or None when none came within limit."""
        with self.cond:
            found = []

            def seen():
                found[:] = [f for f in self.frames if pred(*f[1:])]
                return found
            self.cond.wait_for(seen, timeout=limit)
            return found[0][1:] if found else None

