"""An OTLP/HTTP trace receiver for the integration tests (no OpenTelemetry
collector is packaged for Debian or npm): POST /v1/traces with an
application/x-protobuf ExportTraceServiceRequest, decoded from OTLP's own
field numbers (protos/opentelemetry, compiled by protogen.py).
test_otlp_peers checks it against the OpenTelemetry JS SDK's exporter.

    r = OtlpReceiver().start()       # r.url: http://127.0.0.1:PORT/v1/traces
    r.spans()                        # every span received, as dicts (below)
    r.answer = 503                   # answer with this status (Retry-After: r.retry_after)
    r.delay = 5.0                    # wait this long before answering
    r.stop()                         # down: connections refused
    OtlpReceiver(tls=(cert, key, client_ca)).start()  # https (client_ca: mTLS)

A span: {trace_id, span_id, parent_span_id (hex, "" for none), trace_state,
name, kind (OTLP's number: 2 SERVER, 3 CLIENT), start_ns, end_ns, flags,
status_code (0 unset, 1 ok, 2 error), status_message, attributes (a dict of
Python values), resource (the resource's attributes), scope}.
"""

import http.server
import threading
import time

import protogen


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _attrs(kvs):
    return {kv.key: _value(kv.value) for kv in kvs}


class OtlpReceiver:
    def __init__(self, tls=None):
        self.tls = tls
        self.pb = protogen.load_otlp()
        self.answer = 200
        self.retry_after = None
        self.delay = 0.0
        self.requests = []       # (path, content-type, status answered)
        self._spans = []
        self._lock = threading.Lock()
        self._httpd = None
        self.port = 0

    @property
    def url(self):
        return "%s://127.0.0.1:%d/v1/traces" % ("https" if self.tls else "http", self.port)

    def start(self, same_port=False):
        recv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _chunked(self):
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return body
                    body += self.rfile.read(size)
                    self.rfile.readline()

            def do_POST(self):
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    body = self._chunked()
                else:
                    body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if recv.delay:
                    time.sleep(recv.delay)
                status = recv.answer
                ctype = self.headers.get("content-type", "")
                if status == 200 and (self.path != "/v1/traces" or ctype != "application/x-protobuf"):
                    status = 415 if self.path == "/v1/traces" else 404
                if status == 200:
                    try:
                        recv._take(body)
                    except Exception:  # noqa: BLE001 - a body that does not decode
                        status = 400
                with recv._lock:
                    recv.requests.append((self.path, ctype, status, dict(self.headers)))
                out = recv.pb.ExportTraceServiceResponse().SerializeToString() if status == 200 else b""
                self.send_response(status)
                if status != 200 and recv.retry_after is not None:
                    self.send_header("Retry-After", str(recv.retry_after))
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port if same_port else 0), Handler)
        self._httpd.daemon_threads = True
        if self.tls:
            import ssl
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.tls[0], self.tls[1])
            if len(self.tls) > 2 and self.tls[2]:
                ctx.load_verify_locations(self.tls[2])
                ctx.verify_mode = ssl.CERT_REQUIRED
            self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def _take(self, body):
        req = self.pb.ExportTraceServiceRequest.FromString(body)
        got = []
        for rs in req.resource_spans:
            res = _attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append({
                        "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(), "trace_state": s.trace_state,
                        "name": s.name, "kind": s.kind, "start_ns": s.start_time_unix_nano,
                        "end_ns": s.end_time_unix_nano, "flags": s.flags,
                        "status_code": s.status.code, "status_message": s.status.message,
                        "attributes": _attrs(s.attributes), "resource": res,
                        "scope": ss.scope.name,
                    })
        with self._lock:
            self._spans.extend(got)

    def spans(self):
        with self._lock:
            return list(self._spans)


class RawCollector:
    """A collector that misbehaves as a test scripts it: each connection is
    handed to script(sock, collector) on a thread of its own, after
    read_request() if the script wants the request. conns: [accepted_at,
    closed_at or None] per connection (closed_at: when the script returned,
    i.e. when maitred closed it, if the script reads until then).

        c = RawCollector(script)     # c.url; c.stop()
    """

    def __init__(self, script):
        import socket
        self.script = script
        self.stopped = False
        self.conns = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d/v1/traces" % self.port

    def _accept(self):
        while True:
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            rec = [time.monotonic(), None]
            self.conns.append(rec)
            threading.Thread(target=self._one, args=(c, rec), daemon=True).start()

    def _one(self, c, rec):
        try:
            self.script(c, self)
        except OSError:
            pass
        rec[1] = time.monotonic()
        c.close()

    def stop(self):
        self.stopped = True
        self._sock.close()


def read_request(sock):
    """One HTTP/1.1 request with a Content-Length: (head, body); OSError
    when the peer closes first."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = sock.recv(65536)
        if not d:
            raise OSError("closed")
        buf += d
    head, body = buf.split(b"\r\n\r\n", 1)
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    while len(body) < n:
        d = sock.recv(65536)
        if not d:
            raise OSError("closed")
        body += d
    return head, body
