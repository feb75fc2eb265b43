"""One client can never stall another (issue 6, section 1): a client that
stops reading costs its own calls and its own connection, never a window or
a read loop other clients share; slow or silent connections end."""

import socket
import statistics
import sys
import time

import grpc

from h2raw import H2Client, echo_request
from harness import MaitredTest, call_id, maitred_only, pb, wait_until, CALL_LIMIT, MiB

PATH = "/maitred.testing.v1.Echo/Unary"


def rss_kib(pid, field="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class StuckClient(MaitredTest):
    @maitred_only
    def test_a_client_that_never_reads_does_not_stall_the_others(self):
        # One upstream connection, so every call shares its connection
        # window (16 x the 1 MiB stream window): before the fix, the stuck
        # client's unread responses filled it and every other call waited.
        up = self.start_upstream("a")
        cfg = self.config([self.service("*", [up], upstream={"max_connections": 1})])
        m = self.start_maitred(cfg)
        pid = m.proc.p.pid
        stub = self.echo(m)

        def unary_latencies(n):
            out = []
            for i in range(n):
                t = time.monotonic()
                r = stub.Unary(pb.EchoRequest(key="k%d" % i), timeout=5)
                out.append(time.monotonic() - t)
                self.assertEqual(r.key, "k%d" % i)
            return out

        before = unary_latencies(20)
        rss0 = rss_kib(pid)

        stuck = H2Client(m.port)
        self.addCleanup(stuck.close)
        for _ in range(100):
            stuck.call(PATH, messages=[echo_request(response_size=MiB)])
        # The stuck client's responses reach maitred: more than the shared
        # connection window (16 MiB) of them is buffered before we judge.
        wait_until(lambda: up.stats().total >= 120, CALL_LIMIT, "the stuck client's calls to reach the upstream")
        wait_until(lambda: rss_kib(pid) - rss0 > 20 * 1024, CALL_LIMIT,
                   "maitred to buffer the stuck client's responses")

        during = []
        try:
            during = unary_latencies(20)
        except grpc.RpcError as e:
            self.fail("a well-behaved call failed while another client was stuck: %s %s" % (e.code(), e.details()))
        hwm = rss_kib(pid, "VmHWM")
        sys.stderr.write("\n  unary latency without the stuck client: median %.1f ms, max %.1f ms\n"
                         "  with it: median %.1f ms, max %.1f ms; maitred peak RSS %.1f MB\n"
                         % (statistics.median(before) * 1e3, max(before) * 1e3,
                            statistics.median(during) * 1e3, max(during) * 1e3, hwm / 1024))
        self.assertLess(hwm, 200 * 1024, "maitred's peak RSS with the stuck client")
        # The stuck client is still connected: maitred did not close it.
        self.assertTrue(m.proc.alive())
        self.stop_maitred(m)

    @maitred_only
    def test_past_its_budget_a_stuck_client_loses_its_own_calls(self):
        # downstream.max_buffered_response bounds what maitred holds for
        # one client: the call whose response would go past it ends with
        # RESOURCE_EXHAUSTED; the client's other calls complete.
        up = self.start_upstream("a")
        cfg = self.config([self.service("*", [up], upstream={"max_connections": 1})],
                          downstream={"max_buffered_response": MiB})
        m = self.start_maitred(cfg)
        c = H2Client(m.port)
        self.addCleanup(c.close)
        ids = [call_id() for _ in range(8)]
        # Each response fits in its stream window, so the upstream finishes
        # every call while the client reads nothing (64 KiB window).
        sids = [c.call(PATH, messages=[echo_request(response_size=512 * 1024, call_id=i)]) for i in ids]
        for i in ids:
            self.assertTrue(up.wait_call(i, "ENDED").ended, "call %s did not end at the upstream" % i)
        codes = []
        for sid in sids:
            st = c.wait(sid)
            codes.append((st.status_headers() or {}).get("grpc-status"))
        self.assertIn("8", codes, "no call ended RESOURCE_EXHAUSTED past the budget: %r" % codes)
        self.assertIn("0", codes, "every call failed: %r" % codes)
        # Another client is served meanwhile and afterwards.
        self.assertEqual(self.echo(m).Unary(pb.EchoRequest(key="z"), timeout=5).key, "z")
        self.stop_maitred(m)
