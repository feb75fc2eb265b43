"""Upstream failures: killed mid-call, restarted, graceful stop (GOAWAY),
connections closed or answered with garbage; a bad client connection."""

import signal
import socket
import threading
import time
import unittest

import grpc

from harness import (MaitredTest, maitred_only, needs_h2, free_port, pb, call_id, wait_until, holder,
                     CALL_LIMIT, START_LIMIT)

PROTOCOL_ERROR_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL)


class Killed(MaitredTest):
    def kill_one_mid_call(self):
        ups = [self.start_upstream(n) for n in ("a", "b", "c")]
        m = self.start_maitred(upstreams=ups)
        stub = self.echo(m)
        cid = call_id()
        fut = stub.Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2)
        victim = holder(ups, cid)
        victim.proc.kill()
        with self.assertRaises(grpc.RpcError) as cm:
            fut.result()
        return m, stub, ups, victim, cm.exception

    @maitred_only
    def test_upstream_killed_mid_call_is_unavailable(self):
        m, stub, ups, victim, err = self.kill_one_mid_call()
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        self.assertTrue(m.proc.alive(), "maitred died with its upstream")
        # maitred keeps serving: every call ends, OK from a live instance or
        # UNAVAILABLE naming the dead one; calls do reach the live ones.
        live = {u.name for u in ups if u is not victim}
        ok = 0
        for _ in range(30):
            try:
                self.assertIn(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, live)
                ok += 1
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, e.details())
                self.assertIn(victim.address, e.details())
        self.assertGreater(ok, 0)

    @maitred_only
    def test_calls_after_kill_succeed_on_the_others(self):
        m, stub, ups, victim, err = self.kill_one_mid_call()
        live = {u.name for u in ups if u is not victim}
        failures = []
        seen = set()
        for i in range(30):
            try:
                seen.add(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance)
            except grpc.RpcError as e:
                failures.append("call %d: %s %s" % (i, e.code(), e.details()))
        self.assertEqual(failures, [], "%d of 30 calls after %s was killed failed" % (len(failures), victim.name))
        self.assertEqual(seen, live)

    @maitred_only
    def test_upstream_killed_mid_stream(self):
        up = self.start_upstream("a")
        m = self.start_maitred(upstreams=[up])
        cid = call_id()
        st = self.echo(m).ServerStream(pb.EchoRequest(call_id=cid, response_count=3, hold_after=1),
                                       timeout=CALL_LIMIT * 2)
        self.assertEqual(next(st).index, 0)
        up.proc.kill()
        with self.assertRaises(grpc.RpcError):
            next(st)
        self.assertEqual(st.code(), grpc.StatusCode.UNAVAILABLE, st.details())
        self.assertTrue(m.proc.alive())

    @maitred_only
    def test_upstream_restarted_on_same_port(self):
        port = free_port()
        up = self.start_upstream("first", port=port)
        m = self.start_maitred(upstreams=[up])
        stub = self.echo(m)
        self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "first")
        up.proc.kill()
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.start_upstream("second", port=port)

        def served():
            try:
                return stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance == "second"
            except grpc.RpcError:
                return False
        wait_until(served, START_LIMIT * 2, "calls to reach the restarted upstream", step=0.2)

    @maitred_only
    def test_upstream_graceful_stop_lets_call_finish(self):
        # SIGTERM to the upstream: grpcio sends GOAWAY and lets in-flight
        # calls finish; maitred must not cut the call.
        # Both with a long grace: either may hold the call, and a short grace
        # would cancel it on a slow machine (CANCELLED, seen once).
        a = self.start_upstream("a", grace=60)
        b = self.start_upstream("b", grace=60)
        m = self.start_maitred(upstreams=[a, b])
        stub = self.echo(m)
        cid = call_id()
        fut = stub.Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2)
        victim = holder([a, b], cid)
        victim.proc.signal(signal.SIGTERM)
        # New calls now go elsewhere or fail cleanly; none hangs.
        for _ in range(6):
            try:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, e.details())
        victim.release(cid)
        resp = fut.result()
        self.assertEqual(resp.instance, victim.name)
        self.assertEqual(victim.proc.wait(CALL_LIMIT), 0)


class BrokenUpstreams(MaitredTest):
    def bad_server(self, reply):
        """A TCP server that answers each connection with `reply` bytes and
        closes it."""
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(16)
        lsock.settimeout(0.2)
        stop = threading.Event()

        def serve():
            while not stop.is_set():
                try:
                    c, _ = lsock.accept()
                except OSError:
                    continue
                try:
                    c.settimeout(1)
                    try:
                        c.recv(65536)
                    except OSError:
                        pass
                    if reply:
                        c.sendall(reply)
                finally:
                    c.close()
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        self.addCleanup(lambda: (stop.set(), t.join(5), lsock.close()))
        return "127.0.0.1:%d" % lsock.getsockname()[1]

    def check_errors(self, addr):
        m = self.start_maitred(self.config([self.service("*", [addr])]))
        stub = self.echo(m)
        for _ in range(3):
            with self.assertRaises(grpc.RpcError) as cm:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            self.assertIn(cm.exception.code(), PROTOCOL_ERROR_CODES, cm.exception.details())
            self.assertNotEqual(cm.exception.details(), "")
        self.assertTrue(m.proc.alive())

    @maitred_only
    def test_upstream_closes_at_once(self):
        self.check_errors(self.bad_server(b""))

    @maitred_only
    def test_upstream_speaks_http1(self):
        self.check_errors(self.bad_server(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))

    @maitred_only
    def test_upstream_sends_garbage_frames(self):
        self.check_errors(self.bad_server(b"\x00\x00\x04\x99\xff\x00\x00\x00\x01garbagegarbage" * 8))


class BadClients(MaitredTest):
    @maitred_only
    def test_garbage_client_does_not_hurt_others(self):
        up = self.start_upstream("a")
        m = self.start_maitred(upstreams=[up])
        stub = self.echo(m)
        cid = call_id()
        fut = stub.Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2)
        self.assertTrue(up.wait_call(cid).started)
        for junk in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
                     b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64, b""):
            s = socket.create_connection(("127.0.0.1", m.port), timeout=5)
            try:
                if junk:
                    s.sendall(junk)
                s.shutdown(socket.SHUT_WR)
                end = time.monotonic() + CALL_LIMIT
                while time.monotonic() < end:  # maitred closes it
                    try:
                        if not s.recv(65536):
                            break
                    except socket.timeout:
                        continue
                    except OSError:
                        break
                else:
                    self.fail("maitred kept a connection that sent %r open" % junk[:20])
            finally:
                s.close()
        self.assertEqual(stub.Unary(pb.EchoRequest(key="still"), timeout=CALL_LIMIT).key, "still")
        up.release(cid)
        self.assertEqual(fut.result().instance, "a")

    @maitred_only
    @needs_h2
    def test_rapid_reset_is_stopped(self):
        # CVE-2023-44487: open and reset streams as fast as possible. With a
        # small reset budget maitred must end that connection (GOAWAY or
        # close), keep running, and keep serving other clients.
        import h2raw
        up = self.start_upstream("a")
        m = self.start_maitred(self.config([self.service("*", [up])],
                                           downstream={"reset_burst": 50, "reset_rate": 10}))
        c = h2raw.H2Client(m.port)
        self.addCleanup(c.close)
        req = h2raw.echo_request(hold=True)
        try:
            for _ in range(2000):
                sid = c.call("/maitred.testing.v1.Echo/Unary", [req])
                c.reset(sid)
                c.pump(lambda: True, 0)
                if c.goaway is not None or c.closed:
                    break
        except OSError:
            c.closed = True
        c.pump(lambda: c.goaway is not None or c.closed, CALL_LIMIT)
        self.assertTrue(c.goaway is not None or c.closed, "2000 stream resets in a row were all accepted")
        self.assertTrue(m.proc.alive())
        self.assertEqual(self.echo(m).Unary(pb.EchoRequest(key="k"), timeout=CALL_LIMIT).key, "k")

    @maitred_only
    @needs_h2
    def test_oversized_header_list_refused(self):
        import h2raw
        up = self.start_upstream("a")
        m = self.start_maitred(self.config([self.service("*", [up])],
                                           downstream={"max_header_list_size": 16384}))
        c = h2raw.H2Client(m.port)
        self.addCleanup(c.close)
        sid = c.call("/maitred.testing.v1.Echo/Unary", [h2raw.echo_request()],
                     headers=[("x-huge", "h" * 40000)])
        st = c.wait(sid)
        sh = st.status_headers() or {}
        self.assertTrue(st.reset_code() is not None or c.goaway is not None or c.closed
                        or sh.get("grpc-status", "0") != "0",
                        "a 40 KB header list was served: %r" % st.events)
        self.assertEqual(up.stats().total, 0, "the oversized request reached the upstream")
        self.assertEqual(self.echo(m).Unary(pb.EchoRequest(key="k"), timeout=CALL_LIMIT).key, "k")

    @maitred_only
    def test_client_vanishes_mid_call_upstream_cancelled(self):
        # Close the client's channel (its TCP connection goes away) with a
        # call in flight: the upstream call must be reset.
        up = self.start_upstream("a")
        m = self.start_maitred(upstreams=[up])
        ch = self.channel(m)
        from harness import pb_grpc
        cid = call_id()
        fut = pb_grpc.EchoStub(ch).Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2)
        self.assertTrue(up.wait_call(cid).started)
        ch.close()
        st = up.wait_call(cid, "ENDED")
        self.assertTrue(st.ended and st.cancelled, "upstream call state after the client left: %s" % st)
        with self.assertRaises(grpc.RpcError):
            fut.result()
        self.assertEqual(self.echo(m).Unary(pb.EchoRequest(key="k"), timeout=CALL_LIMIT).key, "k")


if __name__ == "__main__":
    unittest.main()
