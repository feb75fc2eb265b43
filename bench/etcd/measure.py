#!/usr/bin/env python3
"""etcd discovery figures: the time from an etcd Put to the first call
that reaches the new instance (median and max of 20), and
maitred's memory and CPU with 1,000 instances under one prefix, for the
initial list and for one change among them.

A measurement, not a test: it prints figures and judges nothing. Run after
`make` (MAITRED_BIN picks the binary; a build without sanitizers gives the
figures that matter):

  python3 bench/etcd/measure.py
  MAITRED_BIN=/path/to/release/maitred python3 bench/etcd/measure.py
"""

import json
import os
import statistics
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))

from harness import pb, wait_until, CALL_LIMIT  # noqa: E402
import test_etcd  # noqa: E402
from test_etcd import Etcd, PREFIX, WAIT  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "20"))
N_BIG = int(os.environ.get("N_INSTANCES", "1000"))


def proc_figures(pid):
    """(RSS KiB, CPU seconds user+system) of a process, from /proc."""
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / tck


class Measure(test_etcd.EtcdTest):

    def test_put_to_first_call(self):
        etcd = Etcd(self)
        x, y = self.start_upstream("x"), self.start_upstream("y")
        etcd.put(PREFIX + "x", self.record(x))
        m = self.start_maitred(self.config([self.etcd_service([etcd])]))
        stub = self.echo(m)
        self.wait_set(stub, "x", "x")
        seen = []  # (start, end, instance)
        stop = threading.Event()

        def load():
            while not stop.is_set():
                t0 = time.monotonic()
                inst = stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance
                seen.append((t0, time.monotonic(), inst))
        t = threading.Thread(target=load, daemon=True)
        t.start()
        lat = []
        for _ in range(ROUNDS):
            put_at = time.monotonic()
            etcd.put(PREFIX + "y", self.record(y))
            first = wait_until(lambda: next((e for s, e, i in list(seen) if i == "y" and s >= put_at), None),
                               WAIT, "y after the put")
            lat.append((first - put_at) * 1000)
            etcd.delete(PREFIX + "y")
            gone_at = time.monotonic()
            wait_until(lambda: sum(1 for s, e, i in list(seen) if s >= gone_at and i == "x") >= 5 and
                       all(i != "y" for s, e, i in list(seen) if s >= gone_at + 0.2), WAIT, "y gone")
        stop.set()
        t.join(CALL_LIMIT)
        print("\nput -> first call reaching the new instance, %d rounds: median %.1f ms, max %.1f ms, min %.1f ms"
              % (len(lat), statistics.median(lat), max(lat), min(lat)))
        print("  (calls one after another, round robin over the set; a call takes %.2f ms on average)"
              % (statistics.mean(e - s for s, e, i in seen) * 1000))
        self.stop_maitred(m)

    def test_thousand_instances(self):
        etcd = Etcd(self)
        up = self.start_upstream("real")
        m = self.start_maitred(self.config([self.etcd_service([etcd], policy="ROUND_ROBIN")]))
        wait_until(lambda: self.log_lines(m, " 0 endpoints"), WAIT, "the first (empty) list")
        rss0, cpu0 = proc_figures(m.proc.pid)
        # 1,000 records (one real instance, the others on ports where
        # nothing listens: no call is made, the set is what is measured).
        for i in range(N_BIG - 1):
            etcd.put(PREFIX + "i%04d" % i, json.dumps({"address": "127.0.0.1:%d" % (20000 + i), "weight": 100,
                                                       "zone": "z%d" % (i % 3), "metadata": {"v": "1.%d" % i}}))
        etcd.put(PREFIX + "real", self.record(up))
        wait_until(lambda: self.log_lines(m, "%d endpoints" % N_BIG), 120, "%d endpoints" % N_BIG)
        time.sleep(1)  # let the last swap's reclaim happen
        rss1, cpu1 = proc_figures(m.proc.pid)
        # A restart of maitred lists all 1,000 at once: one Range, one swap.
        m2 = self.start_maitred(self.config([self.etcd_service([etcd], policy="ROUND_ROBIN")]))
        wait_until(lambda: self.log_lines(m2, "%d endpoints" % N_BIG), 120, "the list of %d" % N_BIG)
        time.sleep(1)
        rss2, cpu2 = proc_figures(m2.proc.pid)
        # One change among 1,000 (a re-weight), 20 times: CPU per change
        # (the CPU clock ticks at 10 ms, so the total is divided) and the
        # time until maitred has the new set.
        changes, seen_ms = 20, []
        cpu_b = proc_figures(m2.proc.pid)[1]
        for k in range(changes):
            before = len(self.log_lines(m2, "endpoints? \\(revision"))
            t0 = time.monotonic()
            etcd.put(PREFIX + "i0500", json.dumps({"address": "127.0.0.1:20500", "weight": 101 + k}))
            wait_until(lambda: len(self.log_lines(m2, "endpoints? \\(revision")) > before, WAIT, "the change")
            seen_ms.append((time.monotonic() - t0) * 1000)
        cpu_a = proc_figures(m2.proc.pid)[1]
        print("\n%d instances under one prefix:" % N_BIG)
        print("  maitred A (records put one by one, %d watch events): RSS %d KiB -> %d KiB (+%d KiB), CPU %.2f s"
              % (N_BIG, rss0, rss1, rss1 - rss0, cpu1 - cpu0))
        print("  maitred B (one list of %d at start): RSS %d KiB, CPU since start %.2f s" % (N_BIG, rss2, cpu2))
        print("  one re-weight among them (x%d): CPU %.2f ms per change, in maitred's log after median %.0f ms "
              "(the test polls the log)" % (changes, (cpu_a - cpu_b) * 1000 / changes, statistics.median(seen_ms)))
        self.stop_maitred(m2)
        self.stop_maitred(m)


if __name__ == "__main__":
    # Only the measurements, not the tests Measure inherits.
    unittest.main(verbosity=2, defaultTest=["Measure.test_put_to_first_call", "Measure.test_thousand_instances"])
