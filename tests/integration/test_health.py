"""Health, the filter before the rule: outlier ejection takes an
instance that fails out of rotation and brings it back after its ejection
time, per method when method-scoped; circuit breaking ends calls past the
service's limits at once with RESOURCE_EXHAUSTED naming the limit.

Judged by what the instances saw (call counts) and the statuses clients
got; the only waits are bounded ones for something to happen."""

import json
import os
import re
import signal
import time

import grpc

from harness import (MaitredTest, TestCA, maitred_only, needs_h2, pb, call_id, free_port, port_accepts, wait_until,
                     CALL_LIMIT)
from test_admin import admin_request

UNAVAILABLE = 14


def svc(ups, **extra):
    return MaitredTest.service("*", ups, **extra)


def set_health(path, content):
    """What an upstream's --health-file answers (upstream.py HealthService),
    replaced at once: a check never reads a half-written file."""
    with open(path + ".new", "w") as f:
        f.write(content)
    os.replace(path + ".new", path)


def ejection_lines(m, up):
    """The ejection times (ms) maitred logged for `up`, in order."""
    return [int(x) for x in re.findall(r"endpoint %s ejected \(outlier detection: \d+ failures in a row\), "
                                       r"for (\d+) ms" % re.escape(up.address), m.proc.output())]


class Ejection(MaitredTest):
    def calls(self, stub, n):
        """n sequential unary calls; the statuses they ended with."""
        codes = []
        for _ in range(n):
            try:
                stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
        return codes

    @maitred_only
    def test_failing_instance_is_ejected(self):
        good = [self.start_upstream(n) for n in ("a", "b")]
        bad = self.start_upstream("c", extra_args=["--fail-status", str(UNAVAILABLE)])
        od = {"consecutive_failures": 3, "base_ejection_time": "600s", "max_ejection_percent": 50}
        m = self.start_maitred(self.config([svc(good + [bad], outlier_detection=od)]))
        stub = self.echo(m)
        codes = self.calls(stub, 60)
        # Round robin over three: the bad instance answers its share until
        # its third failure in a row, then never again.
        self.assertEqual(bad.stats().total, 3)
        self.assertEqual(codes.count(grpc.StatusCode.UNAVAILABLE), 3, codes)
        self.assertEqual(good[0].stats().total + good[1].stats().total, 57)
        self.assertIn("ejected", m.proc.output())

    @maitred_only
    def test_ejected_instance_comes_back(self):
        good = self.start_upstream("a")
        bad = self.start_upstream("c", extra_args=["--fail-status", str(UNAVAILABLE)])
        # 5 s: ten calls take milliseconds, so the counts below are read
        # while the ejection holds, with a margin no load eats.
        od = {"consecutive_failures": 2, "base_ejection_time": "5s", "max_ejection_percent": 50}
        m = self.start_maitred(self.config([svc([good, bad], outlier_detection=od)]))
        stub = self.echo(m)
        self.calls(stub, 10)
        self.assertEqual(bad.stats().total, 2)
        self.assertEqual(ejection_lines(m, bad), [5000])
        # After its ejection time the instance is tried again (bounded wait).
        end = time.monotonic() + CALL_LIMIT
        while bad.stats().total == 2 and time.monotonic() < end:
            self.calls(stub, 2)
            time.sleep(0.2)
        self.assertGreater(bad.stats().total, 2, "the ejected instance never came back")

    @maitred_only
    def test_max_ejection_percent_keeps_the_last_instance(self):
        ups = [self.start_upstream(n, extra_args=["--fail-status", str(UNAVAILABLE)]) for n in ("a", "b")]
        od = {"consecutive_failures": 1, "base_ejection_time": "600s", "max_ejection_percent": 50}
        m = self.start_maitred(self.config([svc(ups, outlier_detection=od)]))
        stub = self.echo(m)
        self.calls(stub, 20)
        # One of two may go; the other keeps taking (and failing) calls.
        totals = sorted(u.stats().total for u in ups)
        self.assertEqual(totals[0], 1, totals)
        self.assertEqual(totals[1], 19, totals)

    @maitred_only
    def test_client_side_errors_do_not_eject(self):
        up = self.start_upstream("a")
        other = self.start_upstream("b")
        od = {"consecutive_failures": 2, "base_ejection_time": "600s", "max_ejection_percent": 50}
        m = self.start_maitred(self.config([svc([up, other], outlier_detection=od)]))
        stub = self.echo(m)
        # NOT_FOUND from the app is an answer, not the instance failing.
        for _ in range(10):
            with self.assertRaises(grpc.RpcError):
                stub.Unary(pb.EchoRequest(status=pb.Status(code=5, message="no such cart")), timeout=CALL_LIMIT)
        before = up.stats().total
        self.calls(stub, 10)
        self.assertEqual(up.stats().total, before + 5)

    def method_scoped_ejection(self, reload=None):
        """An instance failing Unary and serving ServerStream beside a good
        one, under method_scoped ejection: ejected for Unary after two
        calls, still taking its round-robin share of ServerStream. reload:
        the methods the config is reloaded with once it is ejected, the
        ejection kept."""
        import h2raw
        ok = h2raw.grpc_frame(pb.EchoResponse(payload=b"ok").SerializeToString())

        def flaky(path, headers):
            if path.endswith("/Unary"):
                return ("status", UNAVAILABLE, [])
            return ("respond", ok)
        raw = h2raw.H2Upstream(flaky)
        self.addCleanup(raw.close)
        good = self.start_upstream("good")
        od = {"consecutive_failures": 2, "base_ejection_time": "600s", "max_ejection_percent": 50,
              "method_scoped": True}
        cfg = self.config([svc([raw.address, good], outlier_detection=od,
                               methods=[{"name": "Unary"}, {"name": "ServerStream"}])])
        m = self.start_maitred(cfg)
        stub = self.echo(m)

        def on_raw(method):
            return sum(1 for r in raw.requests if dict(r["headers"])[":path"].endswith("/" + method))
        self.calls(stub, 20)
        self.assertEqual(on_raw("Unary"), 2)  # ejected for Unary after two
        if reload is not None:
            applied = len(re.findall(r"reload: .* applied", m.proc.output()))
            cfg["services"] = [svc([raw.address, good], outlier_detection=od, methods=reload)]
            self.write_config(cfg, os.path.basename(m.config_path))
            m.proc.signal(signal.SIGHUP)
            wait_until(lambda: len(re.findall(r"reload: .* applied", m.proc.output())) > applied, CALL_LIMIT,
                       "the reload to apply")
            self.assertEqual(self.calls(stub, 20), [grpc.StatusCode.OK] * 20)
            self.assertEqual(on_raw("Unary"), 2, "Unary's ejection of raw was lost in the reload")
        for _ in range(10):
            list(stub.ServerStream(pb.EchoRequest(response_count=1), timeout=CALL_LIMIT))
        self.assertEqual(on_raw("ServerStream"), 5)  # still its round-robin share

    @maitred_only
    @needs_h2
    def test_method_scoped_ejection(self):
        self.method_scoped_ejection()

    @maitred_only
    @needs_h2
    def test_a_method_scoped_ejection_outlives_a_reload_that_moves_the_method(self):
        """A reload rebuilds the service's snapshot: each method's
        ejections carry over to the method of the same name, wherever the
        new list puts it (runtime_service.c health_init, prev_method): a
        method added before Unary (the list is sorted by name) moves it."""
        self.method_scoped_ejection(reload=[{"name": "ClientStream"}, {"name": "Unary"}, {"name": "ServerStream"}])

    def wait_ejections(self, m, up, n, stub):
        """Calls (one at a time, their outcome ignored) until maitred logged
        `n` ejections of `up`; bounded."""
        def enough():
            if len(ejection_lines(m, up)) >= n:
                return True
            self.calls(stub, 1)
            return False
        wait_until(enough, CALL_LIMIT, "ejection %d of %s" % (n, up.address), step=0.02)

    @maitred_only
    def test_failure_percentage_with_min_requests_and_failure_statuses(self):
        # The percentage rule alone (consecutive_failures 0), counting only
        # FAILED_PRECONDITION. Every instance fails every call; weights
        # 200:100:20 give a fixed cycle of 16 picks (w 10, z 5, y 1):
        #   z (FAILED_PRECONDITION): 100 % failures, ejected once an
        #     interval holds min_requests (10) of its calls;
        #   w (UNAVAILABLE, not in failure_statuses): twice z's calls,
        #     none counted as failures, so never ejected (the default list
        #     would eject it first);
        #   y (FAILED_PRECONDITION): 100 % failures, but a sixteenth of the
        #     calls: at most 7 in an interval (one call every 20 ms at the
        #     most, so at most 101 in 2 s), under min_requests, never
        #     ejected; and at least 2 whenever z has 10, so the interval
        #     that ejects z counted failures of y too.
        w = self.start_upstream("w", extra_args=["--fail-status", str(UNAVAILABLE)])
        z = self.start_upstream("z", extra_args=["--fail-status", "9"])
        y = self.start_upstream("y", extra_args=["--fail-status", "9"])
        od = {"consecutive_failures": 0, "failure_percentage": 50, "min_requests": 10, "interval": "2s",
              "base_ejection_time": "600s", "max_ejection_percent": 100, "panic_threshold": 0,
              "failure_statuses": ["FAILED_PRECONDITION"]}
        s = svc([w, z, y], policy="WEIGHTED_ROUND_ROBIN", outlier_detection=od)
        for ep, weight in zip(s["endpoints"], (200, 100, 20)):
            ep["weight"] = weight
        admin_port = free_port()
        m = self.start_maitred(self.config([s], admin="127.0.0.1:%d" % admin_port))
        wait_until(lambda: port_accepts(admin_port, 0.5), CALL_LIMIT, "the admin port")
        stub = self.echo(m)

        def ejected():
            st, _, body = admin_request(admin_port, "GET", "/clusters")
            self.assertEqual(st, 200, body)
            return {e["address"]: e["ejected"] for e in json.loads(body)["services"][0]["endpoints"]}

        def z_out():
            if ejected()[z.address]:
                return True
            codes = self.calls(stub, 1)
            self.assertNotEqual(codes, [grpc.StatusCode.OK])
            time.sleep(0.02)  # the most calls an interval can hold (see above)
            return False
        wait_until(z_out, CALL_LIMIT * 2, "z to be ejected by the failure-percentage rule", step=0)
        self.assertEqual(ejected(), {w.address: False, z.address: True, y.address: False})
        self.assertIn("service *: ejections changed (1 of 3 endpoints out)", m.proc.output())
        self.assertNotIn("failures in a row", m.proc.output())  # not the consecutive rule
        self.assertGreaterEqual(z.stats().total, 10)
        self.assertGreaterEqual(y.stats().total, 2)
        # Out of rotation: the next calls reach w and y only.
        before = z.stats().total
        self.calls(stub, 8)
        self.assertEqual(z.stats().total, before)

    @maitred_only
    def test_panic_threshold(self):
        # Two of three instances fail and are ejected (max_ejection_percent
        # 100): one endpoint of three left serving is under a 50 %
        # panic_threshold, so every endpoint takes calls again (round
        # robin: three each of nine); with panic_threshold 0 the good one
        # takes them all.
        for panic in (50, 0):
            with self.subTest(panic_threshold=panic):
                bad = [self.start_upstream("bad%d-%d" % (panic, i), extra_args=["--fail-status", str(UNAVAILABLE)])
                       for i in (1, 2)]
                good = self.start_upstream("good%d" % panic)
                od = {"consecutive_failures": 1, "base_ejection_time": "600s", "max_ejection_percent": 100,
                      "panic_threshold": panic}
                m = self.start_maitred(self.config([svc(bad + [good], outlier_detection=od)]))
                stub = self.echo(m)
                for b in bad:
                    self.wait_ejections(m, b, 1, stub)
                before = [u.stats().total for u in bad + [good]]
                codes = self.calls(stub, 9)
                after = [u.stats().total for u in bad + [good]]
                grew = [x - y for x, y in zip(after, before)]
                if panic:
                    self.assertEqual(grew, [3, 3, 3], "in panic every endpoint is picked")
                    self.assertEqual(codes.count(grpc.StatusCode.OK), 3)
                else:
                    self.assertEqual(grew, [0, 0, 9], "panic_threshold 0 never panics")
                    self.assertEqual(codes, [grpc.StatusCode.OK] * 9)
                self.stop_maitred(m)

    @maitred_only
    def test_max_ejection_time_caps_repeated_ejections(self):
        # base_ejection_time x times ejected, capped by max_ejection_time:
        # 1 s, then 1.5 s (not 2 s), then 1.5 s (not 3 s). No interval ends
        # in between (1 h), so times ejected never goes back down. Read from
        # maitred's own lines; the only waits are for the returns.
        good = self.start_upstream("a")
        bad = self.start_upstream("c", extra_args=["--fail-status", str(UNAVAILABLE)])
        od = {"consecutive_failures": 1, "base_ejection_time": "1s", "max_ejection_time": "1.5s",
              "interval": "3600s", "max_ejection_percent": 50}
        m = self.start_maitred(self.config([svc([good, bad], outlier_detection=od)]))
        stub = self.echo(m)
        self.wait_ejections(m, bad, 3, stub)
        self.assertEqual(ejection_lines(m, bad), [1000, 1500, 1500])
        # Each return cost one call: the one that ejected it again.
        self.assertEqual(bad.stats().total, 3)

class CircuitBreaking(MaitredTest):
    def held(self, stub, up, n):
        ids = [call_id() for _ in range(n)]
        futs = [stub.Unary.future(pb.EchoRequest(call_id=c, hold=True), timeout=CALL_LIMIT) for c in ids]
        return ids, futs

    @maitred_only
    def test_max_calls(self):
        up = self.start_upstream("a")
        m = self.start_maitred(self.config([svc([up], circuit_breaker={"max_calls": 2})]))
        stub = self.echo(m)
        ids, futs = self.held(stub, up, 2)
        for c in ids:
            self.assertTrue(up.wait_call(c).started)
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("circuit_breaker.max_calls (2)", cm.exception.details())
        self.assertEqual(up.stats().total, 2)  # the refused call never left
        for c in ids:
            up.release(c)
        for f in futs:
            f.result()
        # Room again once they ended (the count goes back down).
        self.assertEqual(stub.Unary(pb.EchoRequest(payload=b"y"), timeout=CALL_LIMIT).payload, b"y")

    @maitred_only
    def test_max_calls_per_endpoint_spreads_then_refuses(self):
        ups = [self.start_upstream(n) for n in ("a", "b")]
        m = self.start_maitred(self.config([svc(ups, policy="RANDOM",
                                                circuit_breaker={"max_calls_per_endpoint": 1})]))
        stub = self.echo(m)
        ids, futs = self.held(stub, None, 2)
        # Whatever RANDOM picks, a full endpoint is passed over: one each.
        for up in ups:
            deadline = time.monotonic() + CALL_LIMIT
            while up.stats().total < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
        self.assertEqual([u.stats().total for u in ups], [1, 1])
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("max_calls_per_endpoint (1)", cm.exception.details())
        for up in ups:
            for c in ids:
                up.release(c)
        for f in futs:
            f.result()

    @maitred_only
    def test_max_pending(self):
        # One stream per connection, one connection: a second call waits
        # in the pool, a third finds the pending limit reached.
        up = self.start_upstream("a", max_streams=1)
        m = self.start_maitred(self.config([svc([up], upstream={"max_connections": 1},
                                                circuit_breaker={"max_pending": 1})]))
        stub = self.echo(m)
        first = call_id()
        f1 = stub.Unary.future(pb.EchoRequest(call_id=first, hold=True), timeout=CALL_LIMIT)
        self.assertTrue(up.wait_call(first).started)
        second = call_id()
        f2 = stub.Unary.future(pb.EchoRequest(call_id=second, hold=True), timeout=CALL_LIMIT)
        # The second call waits in maitred (the upstream allows one stream);
        # the third, on the same connection after it, finds the limit.
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(payload=b"z"), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, cm.exception.details())
        self.assertIn("circuit_breaker.max_pending (1)", cm.exception.details())
        up.release(first)
        self.assertTrue(up.wait_call(second).started)
        up.release(second)
        f1.result()
        f2.result()


class HealthBase(MaitredTest):
    def health_upstream(self, name, status="SERVING"):
        path = "%s/%s.health" % (self.tmp, name)
        with open(path, "w") as f:
            f.write(status)
        return self.start_upstream(name, extra_args=["--health-file", path]), path

    def wait_log(self, m, text):
        deadline = time.monotonic() + CALL_LIMIT
        while text not in m.proc.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn(text, m.proc.output())


class ActiveChecks(HealthBase):

    @maitred_only
    def test_not_serving_leaves_rotation_and_serving_returns(self):
        a, _ = self.health_upstream("a")
        b, b_file = self.health_upstream("b")
        hc = {"interval": "0.2s", "timeout": "5s", "unhealthy_threshold": 2, "healthy_threshold": 1}
        m = self.start_maitred(self.config([svc([a, b], health_check=hc)]))
        stub = self.echo(m)
        for _ in range(10):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual(b.stats().total, 5)
        set_health(b_file, "NOT_SERVING")
        self.wait_log(m, "endpoint %s is unhealthy" % b.address)
        for _ in range(10):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual(b.stats().total, 5)  # none while unhealthy
        set_health(b_file, "SERVING")
        self.wait_log(m, "endpoint %s is healthy again" % b.address)
        for _ in range(10):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual(b.stats().total, 10)

    def wait_checks(self, up, n):
        deadline = time.monotonic() + CALL_LIMIT
        while up.stats().health_checks < n and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertGreaterEqual(up.stats().health_checks, n)

    @maitred_only
    def test_checks_ride_the_calls_connection(self):
        # The check is a stream of the endpoint's pool: with calls flowing,
        # each upstream sees exactly one client connection, carrying both.
        a, _ = self.health_upstream("a")
        b, b_file = self.health_upstream("b")
        hc = {"interval": "0.2s", "timeout": "5s", "unhealthy_threshold": 2, "healthy_threshold": 1}
        m = self.start_maitred(self.config([svc([a, b], health_check=hc)]))
        stub = self.echo(m)
        for _ in range(10):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        for u in (a, b):
            self.wait_checks(u, 3)
        for _ in range(10):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual([u.stats().total for u in (a, b)], [10, 10])
        self.assertEqual([u.stats().peers for u in (a, b)], [1, 1])
        # NOT_SERVING still takes it out within unhealthy_threshold checks:
        # b answers NOT_SERVING to the next two checks, then none (HOLD,
        # until the check's timeout). Had maitred needed a third failure,
        # that would be a timeout, and the line would say so.
        set_health(b_file, "NOT_SERVING NOT_SERVING HOLD")
        self.wait_log(m, "endpoint %s is unhealthy (2 health checks failed in a row, last: not SERVING)"
                      % b.address)
        for _ in range(10):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual([u.stats().total for u in (a, b)], [20, 10])
        self.assertEqual([u.stats().peers for u in (a, b)], [1, 1])

    @maitred_only
    def test_unanswered_check_fails_and_keeps_the_connection(self):
        # A check that gets no answer within health_check.timeout fails and
        # its stream ends (maitred's RST_STREAM CANCEL or the server's own
        # grpc-timeout, which is the same time: either may come first); the
        # connection stays and carries the later checks and calls.
        a, _ = self.health_upstream("a")
        b, b_file = self.health_upstream("b", "HOLD")
        # timeout 2 s: b never answers, a always does (in milliseconds; a
        # timeout a loaded machine could reach would make a unhealthy too).
        hc = {"interval": "0.5s", "timeout": "2s", "unhealthy_threshold": 2, "healthy_threshold": 1}
        m = self.start_maitred(self.config([svc([a, b], health_check=hc)]))
        self.wait_log(m, "endpoint %s is unhealthy (2 health checks failed in a row" % b.address)
        line = [x for x in m.proc.output().splitlines() if "%s is unhealthy" % b.address in x][0]
        self.assertTrue("no answer within health_check.timeout" in line or "DEADLINE_EXCEEDED" in line, line)
        deadline = time.monotonic() + CALL_LIMIT
        while b.stats().health_cancelled < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertGreaterEqual(b.stats().health_cancelled, 2)
        stub = self.echo(m)
        for _ in range(4):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual([a.stats().total, b.stats().total], [4, 0])
        set_health(b_file, "SERVING")
        self.wait_log(m, "endpoint %s is healthy again" % b.address)
        for _ in range(4):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual([a.stats().total, b.stats().total], [6, 2])
        self.assertEqual([u.stats().peers for u in (a, b)], [1, 1])

    @maitred_only
    def test_checks_over_tls_share_the_calls_connection(self):
        # A TLS service: the check rides the pool's TLS connection too.
        ca = TestCA(os.path.join(self.tmp, "ca"), server_name="echo.test")
        path = "%s/t.health" % self.tmp
        set_health(path, "SERVING")
        up = self.start_upstream("t", tls=ca, extra_args=["--health-file", path])
        hc = {"interval": "0.2s", "timeout": "5s"}
        tls = {"ca_file": ca.ca_file, "server_name": "echo.test"}
        m = self.start_maitred(self.config([svc([up], tls=tls, health_check=hc)]))
        stub = self.echo(m)
        for _ in range(5):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.wait_checks(up, 3)
        for _ in range(5):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual(up.stats().total, 10)
        self.assertEqual(up.stats().peers, 1)
        self.assertNotIn("is unhealthy", m.proc.output())

    @maitred_only
    def test_check_without_calls_opens_the_pool_connection(self):
        # No call yet: the check opens the pool's connection (one), and the
        # calls that come later use it.
        a, _ = self.health_upstream("a")
        hc = {"interval": "0.2s", "timeout": "5s"}
        m = self.start_maitred(self.config([svc([a], health_check=hc)]))
        self.wait_checks(a, 3)
        self.assertEqual(a.stats().peers, 1)
        stub = self.echo(m)
        for _ in range(5):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual(a.stats().total, 5)
        self.assertEqual(a.stats().peers, 1)

    @maitred_only
    def test_no_health_service_is_unhealthy_but_all_down_still_serves(self):
        # Neither instance serves grpc.health.v1 (UNIMPLEMENTED): both go
        # unhealthy, and with none healthy every one is used again.
        ups = [self.start_upstream(n) for n in ("a", "b")]
        hc = {"interval": "0.2s", "unhealthy_threshold": 1}
        m = self.start_maitred(self.config([svc(ups, health_check=hc)]))
        for u in ups:
            self.wait_log(m, "endpoint %s is unhealthy" % u.address)
        stub = self.echo(m)
        for _ in range(4):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual([u.stats().total for u in ups], [2, 2])

    @maitred_only
    def test_service_name_is_the_one_checked(self):
        # health_check.service_name: the check asks for that service, and
        # its status is what counts. b serves as a whole but not shop.Cart:
        # only a check naming shop.Cart takes it out of rotation.
        a, a_file = self.health_upstream("a", "SERVING\nshop.Cart=SERVING")
        b, b_file = self.health_upstream("b", "SERVING\nshop.Cart=NOT_SERVING")
        hc = {"interval": "0.2s", "timeout": "5s", "unhealthy_threshold": 2, "healthy_threshold": 1,
              "service_name": "shop.Cart"}
        m = self.start_maitred(self.config([svc([a, b], health_check=hc)]))
        self.wait_log(m, "endpoint %s is unhealthy (2 health checks failed in a row, last: not SERVING)"
                      % b.address)
        stub = self.echo(m)
        for _ in range(6):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual([a.stats().total, b.stats().total], [6, 0])
        self.assertNotIn("endpoint %s is unhealthy" % a.address, m.proc.output())
        for u in (a, b):
            asked = re.findall(r"health check service='([^']*)'", u.proc.output())
            self.assertTrue(asked, u.proc.output())
            self.assertEqual(set(asked), {"shop.Cart"})
        set_health(b_file, "NOT_SERVING\nshop.Cart=SERVING")
        self.wait_log(m, "endpoint %s is healthy again" % b.address)
        for _ in range(6):
            stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
        self.assertEqual([a.stats().total, b.stats().total], [9, 3])

class BackThroughWarmup(HealthBase):
    """An endpoint that comes back (checks SERVING again, or its ejection
    ended) restarts its warmup ramp when the service has one:
    read once from /clusters right after the return, with a window far
    longer than the test."""

    def start(self, ups, **extra):
        self.admin_port = free_port()
        s = svc(ups, policy="WEIGHTED_ROUND_ROBIN", warmup={"duration": "3600s"}, **extra)
        m = self.start_maitred(self.config([s], admin="127.0.0.1:%d" % self.admin_port))
        # The data listener accepts (backlog) before the admin one is bound.
        wait_until(lambda: port_accepts(self.admin_port, 0.5), CALL_LIMIT, "the admin port")
        return m

    def endpoints(self):
        st, _, body = admin_request(self.admin_port, "GET", "/clusters")
        self.assertEqual(st, 200, body)
        return {e["address"]: e for e in json.loads(body)["services"][0]["endpoints"]}

    @maitred_only
    def test_serving_again_restarts_warmup(self):
        a, _ = self.health_upstream("a")
        b, b_file = self.health_upstream("b")
        hc = {"interval": "0.2s", "timeout": "5s", "unhealthy_threshold": 2, "healthy_threshold": 1}
        m = self.start([a, b], health_check=hc)
        eps = self.endpoints()
        # Both started with maitred: warmup is inert, full weight.
        self.assertEqual(eps[b.address]["effective_weight"], 100)
        set_health(b_file, "NOT_SERVING")
        self.wait_log(m, "endpoint %s is unhealthy" % b.address)
        set_health(b_file, "SERVING")
        self.wait_log(m, "endpoint %s is back: its warmup starts again" % b.address)
        eps = self.endpoints()
        self.assertLess(eps[b.address]["effective_weight"], 100, eps)
        self.assertLess(eps[b.address]["warmup_progress"], eps[a.address]["warmup_progress"], eps)

    @maitred_only
    def test_ejection_end_restarts_warmup(self):
        good = self.start_upstream("a")
        bad = self.start_upstream("c", extra_args=["--fail-status", str(UNAVAILABLE)])
        # 5 s: six calls and a scrape take milliseconds (the count below is
        # read while the ejection holds, with a margin no load eats).
        od = {"consecutive_failures": 2, "base_ejection_time": "5s", "max_ejection_percent": 50}
        m = self.start([good, bad], outlier_detection=od)
        self.assertEqual(self.endpoints()[bad.address]["effective_weight"], 100)
        stub = self.echo(m)
        for _ in range(6):
            try:
                stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
            except grpc.RpcError:
                pass
        self.assertEqual(bad.stats().total, 2)
        self.wait_log(m, "endpoint %s is back: its warmup starts again" % bad.address)
        eps = self.endpoints()
        self.assertLess(eps[bad.address]["effective_weight"], 100, eps)
        self.assertLess(eps[bad.address]["warmup_progress"], eps[good.address]["warmup_progress"], eps)
