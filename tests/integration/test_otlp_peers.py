"""The tests' OTLP receiver (otlp.py) checked against a real OpenTelemetry
exporter: the OpenTelemetry JS SDK (tests/otel/export.js) exports spans with
known ids, kinds, parents, statuses and attributes over OTLP/HTTP with
protobuf bodies, and the receiver must decode exactly those. maitred's
tracing tests rely on this receiver; this file is what makes it
trustworthy. No maitred here.
"""

import json
import os
import subprocess
import unittest

import nodepeers
from harness import MaitredTest
from otlp import OtlpReceiver

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("MAITRED_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
PEER = os.path.join(SRC, "tests", "otel")


def install_peer():
    """npm ci in tests/otel once."""
    nodepeers.install("otel")


class OtlpPeers(MaitredTest):
    def setUp(self):
        super().setUp()
        install_peer()
        self.recv = OtlpReceiver().start()
        self.addCleanup(self.recv.stop)

    def export(self):
        r = subprocess.run(["node", os.path.join(PEER, "export.js"), "--url", self.recv.url],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        return json.loads(r.stdout.decode().strip().splitlines()[-1])

    def test_the_receiver_decodes_exactly_what_the_sdk_exported(self):
        made = self.export()
        got = self.recv.spans()
        self.assertEqual(len(made), 3)
        keys = ("trace_id", "span_id", "parent_span_id", "name", "kind", "status_code", "status_message",
                "attributes")
        self.assertEqual(sorted(({k: s[k] for k in keys} for s in got), key=lambda s: s["span_id"]),
                         sorted(made, key=lambda s: s["span_id"]))
        for s in got:
            self.assertEqual(s["resource"]["service.name"], "otel-witness")
            self.assertEqual(s["scope"], "maitred-tests")
            self.assertGreater(s["end_ns"], 0)
            self.assertLessEqual(s["start_ns"], s["end_ns"])
        # The typed attributes keep their types through the wire.
        root = next(s for s in got if s["kind"] == 2)
        self.assertIs(root["attributes"]["maitred.hedge"], False)
        self.assertEqual(root["attributes"]["x.ratio"], 0.25)
        self.assertIsInstance(root["attributes"]["rpc.grpc.status_code"], int)
        path, ctype, status, _ = self.recv.requests[0]
        self.assertEqual((path, ctype, status), ("/v1/traces", "application/x-protobuf", 200))

    def test_a_refusing_receiver_keeps_nothing(self):
        self.recv.answer = 503
        self.recv.retry_after = 1
        subprocess.run(["node", os.path.join(PEER, "export.js"), "--url", self.recv.url],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(self.recv.spans(), [])
        self.assertTrue(self.recv.requests)
        self.assertTrue(all(st == 503 for _, _, st, _ in self.recv.requests))


if __name__ == "__main__":
    unittest.main()
