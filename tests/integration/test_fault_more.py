"""More of the fault policy: hedge_delay AUTO (the delay follows
the method's observed p95), no retry that cannot finish before the
deadline, BROADCAST (every endpoint, OK only if all are) and FAILBACK (OK
at once, re-sent in the background from a bounded queue).

Judged by what the instances saw, the statuses the client got and the
counters on /metrics; never by wall time (a figure's lower bound is a
delay the test itself put in)."""

import unittest

import grpc

from harness import MaitredTest, maitred_only, needs_h2, free_port, pb, pb_grpc, call_id, wait_until, CALL_LIMIT
from test_pool import BlackHole
from test_admin import admin_request, samples, value
import test_fault_modes as modes  # its helpers; a module name, so its tests are not collected here

fault_service = modes.fault_service

UNAVAILABLE = 14
SVC = "maitred.testing.v1.Echo"


class FaultBase(MaitredTest):
    def start_with_admin(self, services, **top):
        self.admin_port = free_port()
        return self.start_maitred(self.config(services, admin="127.0.0.1:%d" % self.admin_port, **top))

    def metrics(self):
        st, _, body = admin_request(self.admin_port, "GET", "/metrics")
        self.assertEqual(st, 200, body)
        return samples(body)

    def figure(self, name, method="Unary"):
        return value(self.metrics(), name, service=SVC, method=method) or 0

    # The raw h2 upstream helpers of test_fault_modes (one scripted answer
    # per request, the list of request headers seen).
    raw_upstream = modes.RawUpstreams.raw_upstream
    scripted = modes.RawUpstreams.scripted


class HedgeAuto(FaultBase):
    @maitred_only
    @needs_h2
    def test_auto_delay_follows_the_fast_majority(self):
        # Two instances answer after 200 ms (the request asks them to), a
        # third never answers. AUTO starts at 50 ms, then follows the p95
        # of the answers: at least the 200 ms the fast ones take, far
        # below "never".
        fast = [self.start_upstream(n) for n in ("f1", "f2")]
        slow, slow_seen = self.scripted([("hold",)])
        m = self.start_with_admin([fault_service([fast[0], slow.address, fast[1]],
                                                 {"mode": "FORKING", "forks": 2, "hedge_delay": "AUTO"})])
        stub = self.echo(m)
        n = 45
        for _ in range(n):
            r = stub.Unary(pb.EchoRequest(delay_ms=200), timeout=CALL_LIMIT)
            self.assertIn(r.instance, ("f1", "f2"))
        delay = value(self.metrics(), "maitred_hedge_delay_seconds", service=SVC, method="Unary")
        self.assertIsNotNone(delay, "no maitred_hedge_delay_seconds for an AUTO method")
        self.assertGreaterEqual(delay, 0.2)
        self.assertLess(delay, 2.0)
        # Round robin started about a third of the calls on the silent
        # instance: each was hedged, the hedge won, the silent one saw the
        # cancel. A hedge never went to an instance a call already used.
        hedges, wins = self.figure("maitred_hedges_total"), self.figure("maitred_hedge_wins_total")
        self.assertGreater(len(slow_seen), 0)
        self.assertGreaterEqual(wins, 1)
        self.assertGreaterEqual(hedges, wins)
        self.assertLessEqual(wins, len(slow_seen))
        self.assertLessEqual(hedges, n)
        for i in range(len(slow_seen)):
            self.assertEqual(slow.wait_reset(slow.wait_request(i + 1)), [8])


class DeadlineAwareRetry(FaultBase):
    @maitred_only
    def test_no_retry_that_cannot_finish_in_time(self):
        # "bad" fails every call at once; "good" answers after 3 s (the
        # request asks it to). Without a deadline FAILOVER moves every
        # failed call to good. With 1.5 s left, good's estimate (3 s) cannot
        # fit: the retry is not started and the call fails at once with
        # bad's status, not DEADLINE_EXCEEDED after a doomed retry. The
        # margins both ways are 1.5 s: the estimate is at least the 3 s the
        # request asks for, the time left at most the 1.5 s given, and
        # bad's failure has 1.5 s to come back.
        bad = self.start_upstream("bad", extra_args=["--fail-status", str(UNAVAILABLE)])
        good = self.start_upstream("good")
        m = self.start_maitred(self.config([fault_service([bad, good], {"mode": "FAILOVER"})]))
        stub = self.echo(m)
        # The estimate needs 5 answers: 12 at once (3 s in all, not 36).
        futs = [stub.Unary.future(pb.EchoRequest(delay_ms=3000), timeout=CALL_LIMIT) for _ in range(12)]
        self.assertEqual([f.result().instance for f in futs], ["good"] * 12)
        before = good.stats().total
        for _ in range(2):
            with self.assertRaises(grpc.RpcError) as cm:
                stub.Unary(pb.EchoRequest(delay_ms=3000), timeout=1.5)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
            self.assertIn("no retry: %s answers in about" % good.address, cm.exception.details())
        self.assertEqual(good.stats().total, before)


class Broadcast(FaultBase):
    def broadcast(self, ups, **fault):
        f = {"mode": "BROADCAST"}
        f.update(fault)
        return self.start_maitred(self.config([fault_service(ups, f)]))

    @maitred_only
    def test_every_instance_sees_the_call_once(self):
        ups = [self.start_upstream(n) for n in ("a", "b", "c")]
        stub = self.echo(self.broadcast(ups))
        for i in range(4):
            r = stub.Unary(pb.EchoRequest(payload=b"p" * (100 * i)), timeout=CALL_LIMIT)
            # One answer, an instance's own (documented: the first to begin).
            self.assertIn(r.instance, ("a", "b", "c"))
            self.assertEqual(r.request_payload_size, 100 * i)
            self.assertEqual([u.stats().total for u in ups], [i + 1] * 3)

    @maitred_only
    def test_one_failing_instance_fails_the_call_with_its_status(self):
        # FAILED_PRECONDITION: not in retry_on, still a failure here (OK
        # only if all are OK).
        good = [self.start_upstream(n) for n in ("a", "c")]
        bad = self.start_upstream("b", extra_args=["--fail-status", "9"])
        stub = self.echo(self.broadcast([good[0], bad, good[1]]))
        for i in range(2):
            with self.assertRaises(grpc.RpcError) as cm:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION, cm.exception.details())
            self.assertIn(bad.address, cm.exception.details())
            self.assertIn("BROADCAST: 1 of 3 attempts failed", cm.exception.details())
            # The others got the call all the same.
            self.assertEqual([u.stats().total for u in good + [bad]], [i + 1] * 3)

    @maitred_only
    def test_an_unreachable_instance_fails_the_call_naming_it(self):
        ups = [self.start_upstream(n) for n in ("a", "b")]
        dead = "127.0.0.1:%d" % free_port()
        stub = self.echo(self.broadcast([ups[0], dead, ups[1]]))
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assertIn(dead, cm.exception.details())
        self.assertEqual([u.stats().total for u in ups], [1, 1])

    @maitred_only
    def test_a_failed_call_leaves_its_client_connection_usable(self):
        # One endpoint answers, the other accepts TCP and never answers
        # HTTP/2: the call ends DEADLINE_EXCEEDED with the first answer
        # held. The held answer was given back to the client connection's
        # count of unread response bytes without having been added, the
        # count wrapped, and every later call on that connection (one per
        # channel in gRPC clients), to any service, failed
        # RESOURCE_EXHAUSTED "left 18446744073709547509 response bytes unread".
        up = self.start_upstream("a")
        hole = BlackHole()
        self.addCleanup(hole.close)
        bc = self.service("bcast.Bcast", [up, hole.address], fault={"mode": "BROADCAST"})
        m = self.start_maitred(self.config([bc, self.service(SVC, [up])]))
        ch = self.channel(m)
        bcast = ch.unary_unary("/bcast.Bcast/Unary", request_serializer=pb.EchoRequest.SerializeToString,
                               response_deserializer=pb.EchoResponse.FromString)
        with self.assertRaises(grpc.RpcError) as cm:
            bcast(pb.EchoRequest(response_size=4096), timeout=1.0)  # larger than the answers below
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED, cm.exception.details())
        wait_until(lambda: up.stats().total >= 1, CALL_LIMIT, "the answering instance to see the call")
        stub = pb_grpc.EchoStub(ch)  # the same channel, so the same connection
        for i in range(3):
            r = stub.Unary(pb.EchoRequest(payload=b"y" * 100), timeout=CALL_LIMIT)
            self.assertEqual((r.instance, r.request_payload_size), ("a", 100))

    @maitred_only
    def test_request_larger_than_the_replay_buffer_is_refused(self):
        ups = [self.start_upstream(n) for n in ("a", "b")]
        stub = self.echo(self.broadcast(ups, replay_buffer=1024))
        self.assertEqual(stub.Unary(pb.EchoRequest(payload=b"s" * 500), timeout=CALL_LIMIT).request_payload_size, 500)
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(payload=b"L" * 4096), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, cm.exception.details())
        self.assertIn("BROADCAST: the request is larger than the replay buffer", cm.exception.details())

    @maitred_only
    def test_streams_are_refused(self):
        ups = [self.start_upstream(n) for n in ("a", "b")]
        stub = self.echo(self.broadcast(ups))
        with self.assertRaises(grpc.RpcError) as cm:
            list(stub.ServerStream(pb.EchoRequest(response_count=3), timeout=CALL_LIMIT))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED, cm.exception.details())
        self.assertIn("BROADCAST is for unary calls", cm.exception.details())
        with self.assertRaises(grpc.RpcError) as cm:
            stub.ClientStream(iter([pb.EchoRequest(), pb.EchoRequest()]), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED, cm.exception.details())
        # A one-message stream is a unary call on the wire: answered.
        self.assertIn(stub.ClientStream(iter([pb.EchoRequest()]), timeout=CALL_LIMIT).instance, ("a", "b"))


class Failback(FaultBase):
    @maitred_only
    def test_answered_at_once_then_resent_when_the_instance_returns(self):
        first = self.start_upstream("first")
        port = first.port
        m = self.start_with_admin([fault_service([first], {
            "mode": "FAILBACK", "backoff": {"base": "100ms", "max": "500ms"},
            "failback": {"queue": 10, "retries": 100}})])
        stub = self.echo(m)
        self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "first")
        first.proc.kill()
        ids = [call_id() for _ in range(3)]
        for c in ids:
            # The instance is down: answered OK with the empty message at once.
            r = stub.Unary(pb.EchoRequest(call_id=c, payload=b"fire"), timeout=CALL_LIMIT)
            self.assertEqual(r, pb.EchoResponse())
        self.assertEqual(self.figure("maitred_failback_dropped_total"), 0)
        # Restarted on the same port: the re-sends reach it.
        up = self.start_upstream("back", port=port)
        wait_until(lambda: up.stats().total >= 3, CALL_LIMIT * 2, "the re-sent calls to reach the instance")
        for c in ids:
            self.assertTrue(up.wait_call(c, "ENDED").started, c)
        # Each call delivered once; nothing dropped.
        self.assertEqual(up.stats().total, 3)
        self.assertGreaterEqual(self.figure("maitred_failback_resent_total"), 3)
        self.assertEqual(self.figure("maitred_failback_dropped_total"), 0)

    @maitred_only
    def test_with_a_fallback_the_app_gets_it_and_the_call_is_resent(self):
        port = free_port()
        answer = pb.EchoResponse(instance="queued")
        import base64
        m = self.start_with_admin([fault_service(["127.0.0.1:%d" % port], {
            "mode": "FAILBACK", "backoff": {"base": "100ms", "max": "500ms"},
            "failback": {"retries": 100},
            "fallback": {"status": "OK",
                         "response_base64": base64.b64encode(answer.SerializeToString()).decode()}})])
        self.assertEqual(self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT), answer)
        up = self.start_upstream("back", port=port)
        wait_until(lambda: up.stats().total >= 1, CALL_LIMIT * 2, "the re-sent call to reach the instance")
        self.assertEqual(self.figure("maitred_failback_dropped_total"), 0)

    @maitred_only
    def test_a_full_queue_counts_its_drops_exactly(self):
        port = free_port()
        m = self.start_with_admin([fault_service(["127.0.0.1:%d" % port], {
            "mode": "FAILBACK", "backoff": {"base": "5s", "max": "5s"},
            "failback": {"queue": 2, "retries": 100}})])
        stub = self.echo(m)
        for _ in range(5):
            self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT), pb.EchoResponse())
        # Two wait in the queue (a failed re-send goes back into its own
        # place); three found it full.
        self.assertEqual(self.figure("maitred_failback_dropped_total"), 3)
        self.stop_maitred(m)
        self.assertIn("FAILBACK: 2 queued re-sends dropped at shutdown", m.proc.output())


if __name__ == "__main__":
    unittest.main()
