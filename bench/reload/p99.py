#!/usr/bin/env python3
"""p99 of a steady load before and during config reloads. Three upstreams;
maitred on two workers starts with a and b; the client keeps CONC unary
calls in flight for PHASE seconds, then the same
while a SIGHUP every PERIOD seconds flips the config between {a, b} and
{a, b, c} (an endpoint added, then removed). Prints both latency
distributions and the failed calls. Not a test: nothing is asserted.

  python3 bench/reload/p99.py [PHASE_S] [PERIOD_S] [CONC]
"""
import os
import signal
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))

import grpc  # noqa: E402
import harness  # noqa: E402
from harness import pb  # noqa: E402

PHASE = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
PERIOD = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
CONC = int(sys.argv[3]) if len(sys.argv) > 3 else 8
SVC = "maitred.testing.v1.Echo"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] * 1000 if xs else float("nan")


class Bench(harness.MaitredTest):
    def runTest(self):
        a, b, c = (self.start_upstream(n) for n in "abc")
        port = harness.free_port()
        two = self.config([self.service(SVC, [a, b])], port=port, workers=2)
        three = self.config([self.service(SVC, [a, b, c])], port=port, workers=2)
        m = self.start_maitred(two)
        stub = self.echo(m)
        lat, fails, phase = {"before": [], "during": []}, [], ["warm"]
        stop = threading.Event()

        def client():
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    stub.Unary(pb.EchoRequest(payload=b"x"), timeout=30)
                    if phase[0] in lat:
                        lat[phase[0]].append(time.monotonic() - t0)
                except grpc.RpcError as e:
                    fails.append("%s %s" % (e.code(), e.details()))

        ths = [threading.Thread(target=client, daemon=True) for _ in range(CONC)]
        for t in ths:
            t.start()
        time.sleep(2)
        phase[0] = "before"
        time.sleep(PHASE)
        phase[0] = "during"
        end, n, flip = time.monotonic() + PHASE, 0, False
        while time.monotonic() < end:
            flip = not flip
            with open(m.config_path + ".new", "w") as f:
                f.write(harness.to_yaml(three if flip else two) + "\n")
            os.rename(m.config_path + ".new", m.config_path)
            m.proc.signal(signal.SIGHUP)
            n += 1
            time.sleep(PERIOD)
        stop.set()
        for t in ths:
            t.join(35)
        for k in ("before", "during"):
            xs = lat[k]
            print("%-7s calls %6d  p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms  max %6.2f ms"
                  % (k, len(xs), pct(xs, 50), pct(xs, 90), pct(xs, 99), max(xs) * 1000 if xs else 0))
        print("reloads during: %d (every %.2fs), failed calls: %d %s" % (n, PERIOD, len(fails), fails[:3]))
        self.stop_maitred(m)


if __name__ == "__main__":
    r = unittest.TextTestRunner(verbosity=0).run(Bench())
    sys.exit(0 if r.wasSuccessful() else 1)
