"""The upstream pool: the waiting-call bound, keepalive PINGs that catch a
dead peer, idle connections closed."""

import datetime
import re
import socket
import threading
import time

import grpc

from harness import MaitredTest, maitred_only, pb, call_id, free_port, wait_until, CALL_LIMIT, SLOW


class BlackHole:
    """Accepts TCP connections and never reads or writes: a peer that died
    without closing its sockets (a frozen VM, a dropped network path).
    With `settings`, it first sends an HTTP/2 server preface (an empty
    SETTINGS frame), so it dies after the connection was usable."""

    def __init__(self, settings=False):
        self.settings = settings
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.settings:
                c.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # RFC 9113 §6.5
            self.conns.append(c)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


class Pool(MaitredTest):
    @maitred_only
    def test_waiting_calls_are_bounded(self):
        # One connection of one stream, one call may wait: the third call in
        # flight is refused at once with UNAVAILABLE naming the bound.
        up = self.start_upstream("alpha", max_streams=1)
        svc = self.service("*", [up], upstream={"max_connections": 1, "max_pending": 1})
        m = self.start_maitred(self.config([svc]))
        stub = self.echo(m)
        first = call_id()
        f1 = stub.Unary.future(pb.EchoRequest(call_id=first, hold=True), timeout=CALL_LIMIT * 2)
        up.wait_call(first, "STARTED")
        # Two more calls: whichever reaches the pool first waits, the other
        # finds the queue full and is refused at once.
        f2 = stub.Unary.future(pb.EchoRequest(key="b"), timeout=CALL_LIMIT * 2)
        f3 = stub.Unary.future(pb.EchoRequest(key="c"), timeout=CALL_LIMIT * 2)
        # The refused one ends without the held call being released.
        deadline = time.monotonic() + CALL_LIMIT
        while not (f2.done() or f3.done()) and time.monotonic() < deadline:
            time.sleep(0.05)
        refused = f2 if f2.done() else f3
        waiting = f3 if refused is f2 else f2
        self.assertTrue(refused.done(), "neither extra call was refused while the pool was full")
        err = refused.exception()
        self.assertIsNotNone(err, "a call went through while one stream was held and one call waited")
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        self.assertIn("waiting", err.details())
        self.assertFalse(waiting.done())
        up.release(first)
        self.assertEqual(f1.result().instance, "alpha")
        self.assertIn(waiting.result().key, ("b", "c"))

    @maitred_only
    def test_keepalive_detects_a_silent_peer(self):
        # The peer accepts, sends its SETTINGS and then says nothing, ever.
        # Without keepalive the call would hang until its deadline (it has
        # none); with a 1 s PING interval and a 1 s ack deadline it ends
        # UNAVAILABLE.
        hole = BlackHole(settings=True)
        self.addCleanup(hole.close)
        svc = self.service("*", [hole.address],
                           upstream={"keepalive_interval": "1s", "keepalive_timeout": "1s"})
        m = self.start_maitred(self.config([svc]))
        stub = self.echo(m)
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assertTrue(m.proc.alive())
        self.assertIn("PING", m.proc.output())

    @maitred_only
    def test_peer_without_settings_fails_waiting_calls(self):
        # The peer accepts and never sends its SETTINGS: no stream is
        # opened on it (its stream limit is unknown), and connect_timeout
        # bounds the wait: the call ends UNAVAILABLE, long before its
        # deadline, naming what was missing.
        hole = BlackHole()
        self.addCleanup(hole.close)
        svc = self.service("*", [hole.address], upstream={"connect_timeout": "1s"})
        m = self.start_maitred(self.config([svc]))
        stub = self.echo(m)
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assertIn("SETTINGS", cm.exception.details())

    @maitred_only
    def test_idle_upstream_connection_is_closed(self):
        up = self.start_upstream("alpha")
        svc = self.service("*", [up], upstream={"idle_timeout": "1s"})
        m = self.start_maitred(self.config([svc]), args=["--log-level", "debug"])
        stub = self.echo(m)
        self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "alpha")
        deadline = time.monotonic() + CALL_LIMIT
        while "idle, closing" not in m.proc.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertIn("upstream %s: idle, closing" % up.address, m.proc.output())
        # The next call opens a fresh connection and works.
        self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "alpha")

    @maitred_only
    def test_dead_endpoint_is_avoided_and_logged_once(self):
        # Kill one of three: every later call still succeeds (calls that
        # meet the dead endpoint move on, and while its pool backs off new
        # calls avoid it), and the outage is one warning, not one per call.
        ups = [self.start_upstream(n) for n in ("a", "b", "c")]
        m = self.start_maitred(upstreams=ups)
        stub = self.echo(m)
        for _ in range(6):
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        victim = ups[1]
        victim.proc.kill()
        victim.proc.wait(CALL_LIMIT)
        seen = set()
        for i in range(90):
            seen.add(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance)
        self.assertEqual(seen, {"a", "c"})
        warnings = [l for l in m.proc.output().splitlines()
                    if " warn " in l and ("upstream %s: connect" % victim.address) in l]
        self.assertEqual(len(warnings), 1, "\n".join(warnings))

    @maitred_only
    def test_connect_backoff_doubles_to_10s_then_connected_again(self):
        # HACKING.md: a pool whose connects fail backs off 250 ms doubling
        # to 10 s, and new calls skip it while another endpoint is
        # eligible; the outage is one warning, the attempts during it debug
        # lines, and the end of it "connected again after N failed
        # attempts". The gaps are read from maitred's own timestamps: each
        # is at least its backoff (a loaded machine only makes it longer),
        # and the one past the cap is under the 16 s an uncapped doubling
        # would wait (calls arrive every few ms, so the attempt follows the
        # backoff's end closely: a margin of 6 s).
        live = self.start_upstream("live")
        dead_port = free_port()
        dead = "127.0.0.1:%d" % dead_port
        m = self.start_maitred(self.config([self.service("*", [live, dead])]), args=["--log-level", "debug"])
        stub = self.echo(m)
        rx = re.compile(r"^(\S+) (\w+) +upstream %s: connect: (.*)$" % re.escape(dead), re.M)

        def attempts():
            return rx.findall(m.proc.output())
        calls = [0]

        def failed(n):
            def enough():
                if len(attempts()) >= n:
                    return True
                self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "live")
                calls[0] += 1
                time.sleep(0.005)
                return False
            return enough
        # 8 failures: 7 gaps, 250 ms .. 8 s, then the 10 s cap (26 s in all).
        wait_until(failed(8), 60 * SLOW, "eight connect failures of %s" % dead, step=0)
        got = attempts()[:8]
        levels = [lv for _, lv, _ in got]
        self.assertEqual(levels, ["warn"] + ["debug"] * 7, "one warning per outage")
        self.assertTrue(got[0][2].startswith("Connection refused"), got[0])
        for k, (_, _, text) in enumerate(got[1:], start=2):
            self.assertTrue(text.endswith("(%d failures in a row)" % k), text)
        when = [datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ") for t, _, _ in got]
        gaps = [(b - a).total_seconds() * 1000 for a, b in zip(when, when[1:])]
        for k, gap in enumerate(gaps):
            want = min(250 * 2 ** k, 10000)
            self.assertGreaterEqual(gap, want - 1, "gap %d: %.0f ms, backoff %d ms (%r)" % (k + 1, gap, want, gaps))
        self.assertLess(gaps[6], 16000, "the backoff is not capped at 10 s: %r" % gaps)
        # Calls skipped it meanwhile: far fewer attempts than calls.
        self.assertGreater(calls[0], 10 * len(got), "calls %d, attempts %d" % (calls[0], len(got)))
        # The endpoint comes up: the next attempt connects, and says after
        # how many failures.
        up = self.start_upstream("revived", port=dead_port)
        again = re.compile(r"upstream %s: connected again after (\d+) failed attempts" % re.escape(dead))

        def revived():
            if again.search(m.proc.output()):
                return True
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            time.sleep(0.005)
            return False
        wait_until(revived, 60 * SLOW, "%s to be connected again" % dead, step=0)
        n = int(again.search(m.proc.output()).group(1))
        self.assertEqual(n, len(attempts()))
        seen = set(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(4))
        self.assertEqual(seen, {"live", "revived"})
        self.assertGreater(up.stats().total, 0)
