"""Defects of the I/O layer (issue 15) that need a real maitred to show,
each a test that failed before its fix.

Every wait is bounded (a hang guard); no assertion depends on timing.
"""

import os
import re
import signal

import grpc

from harness import MaitredTest, maitred_only, pb, free_port, port_accepts, to_yaml, wait_until, CALL_LIMIT
from test_admin import admin_request, samples
from test_pool import BlackHole

SVC = "maitred.testing.v1.Echo"


class CircuitCount(MaitredTest):
    def rewrite(self, m, cfg):
        """Replace the file the way config tools do (write aside, rename),
        then SIGHUP, and wait until that reload applied."""
        applied = len(re.findall(r"reload: .* applied", m.proc.output()))
        tmp = m.config_path + ".new"
        with open(tmp, "w") as f:
            f.write(to_yaml(cfg) + "\n")
        os.rename(tmp, m.config_path)
        m.proc.signal(signal.SIGHUP)
        wait_until(lambda: len(re.findall(r"reload: .* applied", m.proc.output())) > applied, CALL_LIMIT,
                   "the reload to apply")

    def in_flight(self, admin_port):
        st, _, body = admin_request(admin_port, "GET", "/metrics")
        self.assertEqual(st, 200, body)
        ss = samples(body)
        return sum(v for (name, _), v in ss.items() if name == "maitred_calls_in_flight")

    @maitred_only
    def test_max_pending_turned_on_while_calls_wait(self):
        # Issue 15, defect 2: calls wait in a pool whose endpoint accepts
        # TCP and never answers HTTP/2 (no SETTINGS: no stream opens); a
        # reload turns circuit_breaker.max_pending on; the calls end. The
        # pool gave back to the service's count what it had never added
        # (the config in force then kept none), the count wrapped, and
        # every later call was refused RESOURCE_EXHAUSTED until a restart,
        # a healthy endpoint behind or not.
        hole = BlackHole()
        self.addCleanup(hole.close)
        up = self.start_upstream("alpha")
        admin_port = free_port()
        port = free_port()
        # connect_timeout far past the test: the calls end only when cancelled.
        waiting = {"connect_timeout": "300s"}

        def cfg(endpoints, **extra):
            return self.config([self.service(SVC, endpoints, upstream=waiting, **extra)], port=port,
                               admin="127.0.0.1:%d" % admin_port)

        m = self.start_maitred(cfg([hole.address]))
        wait_until(lambda: port_accepts(admin_port, 0.5), CALL_LIMIT, "the admin port")
        stub = self.echo(m)
        calls = [stub.Unary.future(pb.EchoRequest(payload=b"w"), timeout=CALL_LIMIT * 4) for _ in range(6)]
        wait_until(lambda: self.in_flight(admin_port) == 6, CALL_LIMIT, "six calls waiting in maitred")
        self.assertEqual([c for c in calls if c.done()], [], "a call ended while its pool waited")
        self.rewrite(m, cfg([hole.address], circuit_breaker={"max_pending": 100}))
        for c in calls:
            c.cancel()
        for c in calls:
            with self.assertRaises(grpc.FutureCancelledError):
                c.result(timeout=CALL_LIMIT)
        wait_until(lambda: self.in_flight(admin_port) == 0, CALL_LIMIT, "the cancelled calls to end in maitred")
        # The same service (its circuit counts go on across reloads), now
        # on a healthy endpoint.
        self.rewrite(m, cfg([up], circuit_breaker={"max_pending": 100}))
        refused = []
        for i in range(20):
            try:
                self.assertEqual(stub.Unary(pb.EchoRequest(payload=b"%d" % i), timeout=CALL_LIMIT).instance, "alpha")
            except grpc.RpcError as e:
                refused.append("%s: %s" % (e.code(), e.details()))
        self.assertEqual(refused, [], "calls to a healthy endpoint were refused")
        self.stop_maitred(m)


if __name__ == "__main__":
    import unittest
    unittest.main()
