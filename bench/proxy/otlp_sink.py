#!/usr/bin/env python3
"""bench/proxy/otlp_sink.py PORT: an OTLP/HTTP collector for benchmarks.

Answers every POST with 200 and an empty ExportTraceServiceResponse, after
reading the whole body, and counts requests and bytes (printed on SIGTERM
or SIGINT to stderr). It decodes nothing: what maitred sends is checked by
tests/integration (otlp.py), this only gives the exporter a collector that
keeps up, so that what a traced call costs is measured without drops or
retries."""
import http.server
import signal
import sys

count = {"requests": 0, "bytes": 0}


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        left = n
        while left > 0:
            chunk = self.rfile.read(min(left, 65536))
            if not chunk:
                break
            left -= len(chunk)
        count["requests"] += 1
        count["bytes"] += n
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def report(*_):
    print("otlp_sink: %d requests, %d bytes" % (count["requests"], count["bytes"]), file=sys.stderr)
    sys.exit(0)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: otlp_sink.py PORT")
    signal.signal(signal.SIGTERM, report)
    signal.signal(signal.SIGINT, report)
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
