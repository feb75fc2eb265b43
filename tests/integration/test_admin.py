"""The admin endpoint: /metrics after a known set of calls,
/clusters, /config_dump redaction, /ready during a drain, POST /drain,
404/405, the loopback rule, and the logs (JSON lines, the access log)."""

import base64
import datetime
import http.client
import http.server
import json
import glob
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

import grpc
from prometheus_client.parser import text_string_to_metric_families

from harness import (MaitredTest, Maitred, Proc, TestCA, maitred_only, pb, call_id, free_port, wait_until,
                     BUILDDIR, SRCDIR, CALL_LIMIT, port_accepts, maitred_argv, maitred_env)

SVC = "maitred.testing.v1.Echo"


def admin_request(port, method, path, limit=CALL_LIMIT):
    """(status, headers dict, body str) of one request to the admin port."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=limit)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read().decode()
    finally:
        c.close()


def samples(text):
    """{(name, frozenset(labels)): value} of a whole exposition; raises if
    prometheus_client's parser refuses any of it."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(ss, name, **labels):
    return ss.get((name, frozenset(labels.items())))


class AdminBase(MaitredTest):
    def start_admin(self, services=None, upstreams=None, **top):
        self.admin_port = free_port()
        top.setdefault("admin", "127.0.0.1:%d" % self.admin_port)
        cfg = self.config(services or [self.service("*", upstreams)], **top)
        m = self.start_maitred(cfg)
        self.wait_admin()
        return m

    def wait_admin(self):
        """The data listener is up before the admin one is bound: wait for
        the admin port too (a ConnectionRefused otherwise, now and then)."""
        if self.admin_port:
            wait_until(lambda: port_accepts(self.admin_port, 0.5), CALL_LIMIT, "the admin port")

    def get(self, path, method="GET"):
        return admin_request(self.admin_port, method, path)

    def metrics(self):
        st, hdrs, body = self.get("/metrics")
        self.assertEqual(st, 200, body)
        self.assertTrue(hdrs["content-type"].startswith("text/plain; version=0.0.4"), hdrs)
        return samples(body)

    def clusters(self):
        st, _, body = self.get("/clusters")
        self.assertEqual(st, 200, body)
        return json.loads(body)


class Metrics(AdminBase):
    @maitred_only
    def test_counters_match_a_known_set_of_calls(self):
        a, b = self.start_upstream("alpha"), self.start_upstream("beta")
        launched = time.time()
        m = self.start_admin(upstreams=[a, b], workers=2)
        stub = self.echo(m)
        req_bytes = resp_bytes = 0
        n_ok, n_err = 7, 3
        for i in range(n_ok):
            r = pb.EchoRequest(payload=b"x" * (10 * i))
            resp = stub.Unary(r, timeout=CALL_LIMIT)
            # DATA bytes: the 5-byte gRPC prefix and the message.
            req_bytes += 5 + r.ByteSize()
            resp_bytes += 5 + resp.ByteSize()
        for i in range(n_err):
            r = pb.EchoRequest(status=pb.Status(code=grpc.StatusCode.NOT_FOUND.value[0], message="no"))
            with self.assertRaises(grpc.RpcError) as cm:
                stub.Unary(r, timeout=CALL_LIMIT)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)
            req_bytes += 5 + r.ByteSize()
        ss = self.metrics()
        lab = dict(service=SVC, method="Unary")
        self.assertEqual(value(ss, "maitred_calls_total", grpc_code="OK", **lab), n_ok)
        self.assertEqual(value(ss, "maitred_calls_total", grpc_code="NOT_FOUND", **lab), n_err)
        self.assertEqual(value(ss, "maitred_calls_in_flight", **lab), 0)
        self.assertEqual(value(ss, "maitred_call_duration_seconds_count", **lab), n_ok + n_err)
        self.assertEqual(value(ss, "maitred_call_duration_seconds_bucket", le="+Inf", **lab), n_ok + n_err)
        self.assertEqual(value(ss, "maitred_call_request_bytes_total", **lab), req_bytes)
        # Error answers carry no message: only the OK ones add response bytes.
        self.assertEqual(value(ss, "maitred_call_response_bytes_total", **lab), resp_bytes)
        picks = [value(ss, "maitred_endpoint_picks_total", service="*", endpoint=u.address) for u in (a, b)]
        self.assertEqual(sum(picks), n_ok + n_err)
        # Round robin over two endpoints: neither is left out.
        self.assertTrue(all(p >= 1 for p in picks), picks)
        resp = [value(ss, "maitred_endpoint_responses_total", service="*", endpoint=u.address) for u in (a, b)]
        self.assertEqual(sum(resp), n_ok + n_err)
        for u in (a, b):
            self.assertEqual(value(ss, "maitred_endpoint_calls_in_flight", service="*", endpoint=u.address), 0)
            self.assertGreaterEqual(value(ss, "maitred_endpoint_connections", service="*", endpoint=u.address), 1)
            self.assertGreater(value(ss, "maitred_endpoint_latency_ewma_seconds", service="*",
                                     endpoint=u.address), 0)
        self.assertEqual(value(ss, "maitred_workers"), 2)
        self.assertEqual(value(ss, "maitred_config_generation"), 1)
        self.assertEqual(value(ss, "maitred_draining"), 0)
        self.assertGreater(value(ss, "process_resident_memory_bytes"), 0)
        # Uptime: since this maitred started (it is younger than the time
        # since we launched it), and it grows between two scrapes by at
        # least the time between them (maitred's wall clock in ms; bounds
        # from both sides of each request, so load can only widen them).
        t1 = time.time()
        self.assertGreaterEqual(value(ss, "process_start_time_seconds"), launched - 0.002)
        self.assertLessEqual(value(ss, "process_start_time_seconds"), t1)
        up1 = value(ss, "maitred_uptime_seconds")
        self.assertGreater(up1, 0)
        self.assertLessEqual(up1, t1 - launched + 0.002)
        time.sleep(0.5)
        t2 = time.time()
        up2 = value(self.metrics(), "maitred_uptime_seconds")
        t3 = time.time()
        self.assertGreaterEqual(up2 - up1, t2 - t1 - 0.002, (up1, up2))
        self.assertLessEqual(up2, t3 - launched + 0.002)
        # Unknown service: maitred answers itself, counted apart. (A second
        # maitred writes the same config file, which the first one would
        # reload: it comes after the first one's figures were read.)
        cfg_only = self.config([self.service(SVC, [a])])
        m2 = self.start_admin(services=cfg_only["services"])
        with self.assertRaises(grpc.RpcError) as cm:
            self.raw_unary(m2, "/other.Svc/Call")(b"", timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        ss2 = self.metrics()
        self.assertEqual(value(ss2, "maitred_calls_unrouted_total", grpc_code="UNIMPLEMENTED"), 1)
        self.assertIsNone(value(ss2, "maitred_calls_total", service="other.Svc", method="Call",
                                grpc_code="UNIMPLEMENTED"))


    @maitred_only
    def test_a_calls_duration_spans_the_loops_waits(self):
        """A call's duration is read on its worker's turn clock (turn.h
        mtd_turn_now_ns: one read a turn of the loop, forgotten before the
        loop waits again). Three calls the upstream answers 300 ms later
        are in no bucket up to 0.25 s and add at least 0.9 s to the sum:
        a reading kept across the wait would have made each one 0 s. Only
        lower bounds: a slow machine cannot make them fail."""
        m = self.start_admin(upstreams=[self.start_upstream("alpha")])
        stub = self.echo(m)
        for _ in range(3):
            stub.Unary(pb.EchoRequest(delay_ms=300), timeout=CALL_LIMIT)
        ss = self.metrics()
        lab = dict(service=SVC, method="Unary")
        self.assertEqual(value(ss, "maitred_call_duration_seconds_count", **lab), 3)
        self.assertEqual(value(ss, "maitred_call_duration_seconds_bucket", le="0.25", **lab), 0)
        self.assertGreaterEqual(value(ss, "maitred_call_duration_seconds_sum", **lab), 0.9)

    @maitred_only
    def test_scrapes_during_traffic_stay_consistent(self):
        """Traffic on two workers while /metrics and /clusters are read in a
        loop: counters never go back, and the last scrape is exact. Run with
        a --enable-tsan build (MAITRED_BIN) this is the data-race proof:
        the harness fails the test on any ThreadSanitizer report."""
        import threading
        a, b = self.start_upstream("alpha"), self.start_upstream("beta")
        # With the features whose state the admin reads from the workers'
        # atomics: outlier entries, circuit counts, the retry budget.
        svc = self.service("*", [a, b], outlier_detection={"consecutive_failures": 5},
                           circuit_breaker={"max_calls": 1000, "max_pending": 1000},
                           fault={"mode": "FAILOVER"}, retry_budget={"ratio": 0.2})
        m = self.start_admin(services=[svc], workers=2)
        n_threads, per_thread = 4, 40
        errors = []

        def traffic():
            try:
                stub = self.echo(m)  # one channel per thread: connections spread over workers
                for i in range(per_thread):
                    stub.Unary(pb.EchoRequest(payload=b"t" * i), timeout=CALL_LIMIT)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=traffic) for _ in range(n_threads)]
        for t in threads:
            t.start()
        last, scrapes = 0, 0
        while any(t.is_alive() for t in threads) or scrapes < 3:
            ss = self.metrics()
            ok = value(ss, "maitred_calls_total", service=SVC, method="Unary", grpc_code="OK") or 0
            self.assertGreaterEqual(ok, last)
            last = ok
            self.clusters()
            scrapes += 1
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        total = n_threads * per_thread
        ss = self.metrics()
        self.assertEqual(value(ss, "maitred_calls_total", service=SVC, method="Unary", grpc_code="OK"), total)
        self.assertEqual(value(ss, "maitred_call_duration_seconds_count", service=SVC, method="Unary"), total)
        picks = sum(value(ss, "maitred_endpoint_picks_total", service="*", endpoint=u.address) for u in (a, b))
        self.assertEqual(picks, total)
        self.stop_maitred(m)

    @maitred_only
    def test_in_flight_counts_a_held_call(self):
        a = self.start_upstream("alpha")
        m = self.start_admin(upstreams=[a])
        cid = call_id()
        fut = self.echo(m).Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2)
        self.assertTrue(a.wait_call(cid).started)
        ss = self.metrics()
        self.assertEqual(value(ss, "maitred_calls_in_flight", service=SVC, method="Unary"), 1)
        self.assertEqual(value(ss, "maitred_endpoint_calls_in_flight", service="*", endpoint=a.address), 1)
        a.release(cid)
        fut.result()
        ss = self.metrics()
        self.assertEqual(value(ss, "maitred_calls_in_flight", service=SVC, method="Unary"), 0)
        self.assertEqual(value(ss, "maitred_calls_total", service=SVC, method="Unary", grpc_code="OK"), 1)


class Reference(AdminBase):
    """docs/metrics.md lists every family /metrics serves, and nothing that
    maitred cannot serve."""

    @maitred_only
    def test_every_scraped_family_is_documented(self):
        hfile = os.path.join(self.tmp, "a.health")
        with open(hfile, "w") as f:
            f.write("SERVING")
        a = self.start_upstream("a", extra_args=["--health-file", hfile])
        b = self.start_upstream("b")
        # A service using every feature that has families of its own
        # (the traffic policy too: a split, a rate limit that lets
        # everything through, a mirror, faults at 0 %).
        svc = self.service(SVC, [a, b], fault={"mode": "FAILOVER", "retries": 1},
                           retry_budget={"ratio": 0.5, "min_per_second": 1},
                           outlier_detection={"consecutive_failures": 5},
                           health_check={"interval": "0.2s", "timeout": "1s"},
                           circuit_breaker={"max_calls": 100},
                           split={"metadata_key": "version", "weights": {"v1": 1},
                                  "guard": {"min_calls": 100}},
                           rate_limit={"calls_per_second": 1000},
                           mirror={"service": "shadow"},
                           fault_injection={"abort": {"percent": 0, "status": "UNAVAILABLE"},
                                            "delay": {"percent": 0, "duration": "1ms"}})
        for ep in svc["endpoints"]:
            ep["metadata"] = {"version": "v1"}
        shadow = self.service("shadow", [b])
        m = self.start_admin(services=[svc, shadow],
                             log={"access": {"path": os.path.join(self.tmp, "access.log")}})
        self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        wait_until(lambda: value(self.metrics(), "maitred_endpoint_healthy", service=SVC, endpoint=a.address)
                   is not None, CALL_LIMIT, "the health-check family")
        with open(os.path.join(SRCDIR, "docs", "metrics.md")) as f:
            doc = f.read()
        st, _, body = self.get("/metrics")
        self.assertEqual(st, 200)
        families = {fam.name for fam in text_string_to_metric_families(body)}
        self.assertGreater(len(families), 30)
        for name in sorted(families):
            # prometheus_client strips _total from counter family names.
            self.assertTrue(re.search(r"`%s(_total)?[`{]" % re.escape(name), doc),
                            "%s is served but not in docs/metrics.md" % name)
        # The other way: every documented family is one maitred writes.
        src = ""
        for fn in sorted(glob.glob(os.path.join(SRCDIR, "sidecar", "**", "*.c"), recursive=True)):
            with open(fn) as f:
                src += f.read()
        for name in set(re.findall(r"^\| `((?:maitred|process)_[a-z_]+)", doc, re.M)):
            self.assertIn('"%s"' % name, src, "%s is documented but maitred never writes it" % name)


class FaultMetrics(AdminBase):
    """The fault policy's families: retries, substitute answers."""

    @maitred_only
    def test_retries_counted_exactly(self):
        ups = [self.start_upstream(n) for n in ("a", "b", "c")]
        svc = self.service(SVC, ups, fault={"mode": "FAILOVER", "retries": 2})
        m = self.start_admin(services=[svc])
        n = 4
        for _ in range(n):
            # Trailers-Only UNAVAILABLE from every instance: nothing relayed,
            # so each call is retried on the two others, then fails.
            req = pb.EchoRequest(status=pb.Status(code=14, message="down"), trailers_only=True)
            with self.assertRaises(grpc.RpcError) as cm:
                self.echo(m).Unary(req, timeout=CALL_LIMIT)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        ss = self.metrics()
        lab = dict(service=SVC, method="Unary")
        self.assertEqual(value(ss, "maitred_retries_total", **lab), 2 * n)
        self.assertEqual(value(ss, "maitred_calls_total", grpc_code="UNAVAILABLE", **lab), n)
        self.assertEqual(value(ss, "maitred_calls_total", grpc_code="OK", **lab), 1)
        self.assertEqual(value(ss, "maitred_retry_budget_exhausted_total", **lab), 0)
        self.assertEqual(value(ss, "maitred_failsafe_answers_total", **lab), 0)
        self.assertEqual(value(ss, "maitred_fallback_answers_total", **lab), 0)
        picks = sum(value(ss, "maitred_endpoint_picks_total", service=SVC, endpoint=u.address) for u in ups)
        self.assertEqual(picks, 3 * n + 1)

    @maitred_only
    def test_failsafe_and_fallback_answers_counted(self):
        dead = ["127.0.0.1:%d" % free_port() for _ in range(2)]
        fb = {"status": "RESOURCE_EXHAUSTED", "message": "resting"}
        m = self.start_admin(services=[self.service("a.Safe", dead, fault={"mode": "FAILSAFE"}),
                                       self.service("a.Fallback", dead, fault={"fallback": fb})])
        for _ in range(3):
            self.assertEqual(self.raw_unary(m, "/a.Safe/Get")(b"", timeout=CALL_LIMIT), b"")
        for _ in range(2):
            with self.assertRaises(grpc.RpcError) as cm:
                self.raw_unary(m, "/a.Fallback/Get")(b"", timeout=CALL_LIMIT)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        ss = self.metrics()
        self.assertEqual(value(ss, "maitred_failsafe_answers_total", service="a.Safe", method="Get"), 3)
        self.assertEqual(value(ss, "maitred_calls_total", service="a.Safe", method="Get", grpc_code="OK"), 3)
        self.assertEqual(value(ss, "maitred_fallback_answers_total", service="a.Fallback", method="Get"), 2)
        self.assertEqual(value(ss, "maitred_calls_total", service="a.Fallback", method="Get",
                               grpc_code="RESOURCE_EXHAUSTED"), 2)


class Endpoints(AdminBase):
    @maitred_only
    def test_paths_and_methods(self):
        a = self.start_upstream("alpha")
        self.start_admin(upstreams=[a])
        st, _, body = self.get("/healthz")
        self.assertEqual((st, body), (200, "ok\n"))
        st, _, body = self.get("/ready")
        self.assertEqual((st, body), (200, "ready\n"))
        st, _, _ = self.get("/nope")
        self.assertEqual(st, 404)
        st, hdrs, _ = self.get("/metrics", method="POST")
        self.assertEqual(st, 405)
        self.assertEqual(hdrs.get("allow"), "GET, HEAD")
        st, hdrs, _ = self.get("/drain", method="GET")
        self.assertEqual(st, 405)
        self.assertEqual(hdrs.get("allow"), "POST")
        st, hdrs, body = self.get("/")
        self.assertEqual(st, 200)
        self.assertTrue(hdrs["content-type"].startswith("text/html"))
        self.assertIn("/clusters", body)
        # Self-contained: nothing fetched from anywhere else.
        for bad in ("http://", "https://", "src=\"//", "href=\"//"):
            self.assertNotIn(bad, body)

    @maitred_only
    def test_clusters_shows_policy_endpoints_and_warmup(self):
        a, b = self.start_upstream("alpha"), self.start_upstream("beta")
        # Two services over the same endpoints: SVC's warmup (an hour) is
        # still running whenever this test scrapes it, however slow the
        # machine; the other's (1 s) is only waited for, to its end.
        long_s, short_s = 3600, 1
        svc = self.service(SVC, [a, b], policy="WEIGHTED_ROUND_ROBIN", warmup={"duration": "%ds" % long_s})
        svc["endpoints"][1]["weight"] = 50
        short = self.service("other.Svc", [a, b], policy="WEIGHTED_ROUND_ROBIN",
                             warmup={"duration": "%ds" % short_s})
        short["endpoints"][1]["weight"] = 50
        launched = time.monotonic()
        m = self.start_admin(services=[svc, short])
        for _ in range(6):
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        first = self.clusters()["services"][0]
        scraped = time.monotonic()
        self.assertEqual(first["name"], SVC)
        self.assertEqual(first["policy"], "WEIGHTED_ROUND_ROBIN")
        self.assertEqual(first["warmup"]["duration_s"], long_s)
        eps = {e["address"]: e for e in first["endpoints"]}
        self.assertEqual(set(eps), {a.address, b.address})
        self.assertEqual(eps[b.address]["weight"], 50)
        self.assertEqual(sum(e["picks"] for e in eps.values()), 6)
        for e in eps.values():
            self.assertEqual(e["state"], "healthy")
            self.assertGreaterEqual(e["connections"], 1)
            self.assertEqual(e["in_flight"], 0)
        # Every endpoint started with maitred, so warmup is inert:
        # the effective weight is the configured one while progress runs,
        # and progress is the time since maitred started over the window
        # (at most the time since we launched it).
        p0 = eps[a.address]["warmup_progress"]
        self.assertLessEqual(p0, (scraped - launched) / long_s + 1e-3)
        self.assertLess(p0, 1.0)
        self.assertEqual(eps[a.address]["effective_weight"], 100)
        self.assertEqual(eps[b.address]["effective_weight"], 50)

        def warm():
            svcs = {x["name"]: x for x in self.clusters()["services"]}
            e = {x["address"]: x for x in svcs["other.Svc"]["endpoints"]}
            return e[a.address]["warmup_progress"] == 1.0 and e
        eps = wait_until(warm, CALL_LIMIT, "the 1 s warmup to complete in /clusters", step=0.2)
        self.assertEqual(eps[b.address]["warmup_progress"], 1.0)
        self.assertEqual(eps[b.address]["effective_weight"], 50)
        self.assertEqual(eps[a.address]["effective_weight"], 100)

    @maitred_only
    def test_unreachable_endpoint_marked(self):
        a = self.start_upstream("alpha")
        dead = "127.0.0.1:%d" % free_port()
        m = self.start_admin(upstreams=[a, dead])
        for _ in range(4):
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)

        def marked():
            e = {x["address"]: x for x in self.clusters()["services"][0]["endpoints"]}
            return e[dead]["state"] == "unreachable" and e
        eps = wait_until(marked, CALL_LIMIT, "the dead endpoint to be marked unreachable")
        self.assertGreaterEqual(eps[dead]["connect_failures"], 1)
        self.assertEqual(eps[a.address]["state"], "healthy")
        ss = self.metrics()
        self.assertEqual(value(ss, "maitred_endpoint_reachable", service="*", endpoint=dead), 0)
        self.assertEqual(value(ss, "maitred_endpoint_reachable", service="*", endpoint=a.address), 1)


class HealthState(AdminBase):
    """Ejection, health checks and circuit breaking as /clusters and
    /metrics show them (/clusters reflects an ejection)."""

    def unary_codes(self, stub, n):
        codes = []
        for _ in range(n):
            try:
                stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
        return codes

    @maitred_only
    def test_clusters_and_metrics_reflect_an_ejection(self):
        good = self.start_upstream("good")
        bad = self.start_upstream("bad", extra_args=["--fail-status", "14"])  # UNAVAILABLE
        n_fail = 3
        od = {"consecutive_failures": n_fail, "base_ejection_time": "600s", "max_ejection_percent": 50}
        m = self.start_admin(services=[self.service(SVC, [good, bad], outlier_detection=od)])
        stub = self.echo(m)
        # Before any call: both serving, nothing ejected, no health checks.
        svc = self.clusters()["services"][0]
        self.assertEqual(svc["ejected"], 0)
        for e in svc["endpoints"]:
            self.assertEqual((e["ejected"], e["ejected_until"], e["ejection_remaining_s"], e["ejections"],
                              e["health"], e["state"]), (False, None, None, 0, "unchecked", "healthy"))
        # Round robin over two: the bad one answers every other call until
        # its third UNAVAILABLE in a row ejects it; then the good one takes all.
        n = 20
        before = time.time()
        codes = self.unary_codes(stub, n)
        self.assertEqual(codes.count(grpc.StatusCode.UNAVAILABLE), n_fail, codes)
        self.assertEqual(bad.stats().total, n_fail)
        svc = self.clusters()["services"][0]
        self.assertEqual(svc["ejected"], 1)
        eps = {e["address"]: e for e in svc["endpoints"]}
        self.assertEqual((eps[bad.address]["ejected"], eps[bad.address]["ejections"],
                          eps[bad.address]["state"]), (True, 1, "ejected"))
        # Ejected for base_ejection_time from the third failure.
        until = datetime.datetime.strptime(eps[bad.address]["ejected_until"], "%Y-%m-%dT%H:%M:%S.%fZ")
        until = until.replace(tzinfo=datetime.timezone.utc).timestamp()
        self.assertGreaterEqual(until, before + 600 - 0.01)  # wall ms, truncated
        self.assertLessEqual(until, time.time() + 600)
        self.assertGreater(eps[bad.address]["ejection_remaining_s"], 500)
        self.assertLessEqual(eps[bad.address]["ejection_remaining_s"], 600)
        self.assertEqual((eps[good.address]["ejected"], eps[good.address]["ejections"],
                          eps[good.address]["state"]), (False, 0, "healthy"))
        self.assertEqual(eps[bad.address]["picks"], n_fail)
        self.assertEqual(eps[good.address]["picks"], n - n_fail)
        ss = self.metrics()
        ep = lambda name, u: value(ss, name, service=SVC, endpoint=u.address)  # noqa: E731
        self.assertEqual(ep("maitred_endpoint_ejected", bad), 1)
        self.assertEqual(ep("maitred_endpoint_ejected", good), 0)
        self.assertEqual(ep("maitred_endpoint_ejections_total", bad), 1)
        self.assertEqual(ep("maitred_endpoint_ejections_total", good), 0)
        self.assertEqual(ep("maitred_endpoint_picks_total", bad), n_fail)
        self.assertEqual(value(ss, "maitred_calls_total", service=SVC, method="Unary", grpc_code="UNAVAILABLE"),
                         n_fail)
        # Families of features the service does not use are left out.
        self.assertIsNone(ep("maitred_endpoint_healthy", good))

    @maitred_only
    def test_health_check_state_in_clusters_and_metrics(self):
        paths = {}
        ups = []
        for name, status in (("a", "SERVING"), ("b", "NOT_SERVING")):
            paths[name] = os.path.join(self.tmp, name + ".health")
            with open(paths[name], "w") as f:
                f.write(status)
            ups.append(self.start_upstream(name, extra_args=["--health-file", paths[name]]))
        a, b = ups
        hc = {"interval": "0.2s", "timeout": "1s", "unhealthy_threshold": 2, "healthy_threshold": 1}
        self.start_admin(services=[self.service(SVC, ups, health_check=hc)])

        def marked():
            e = {x["address"]: x for x in self.clusters()["services"][0]["endpoints"]}
            return e[b.address]["health"] == "NOT_SERVING" and e[a.address]["health"] == "SERVING" and e
        eps = wait_until(marked, CALL_LIMIT, "b NOT_SERVING and a SERVING in /clusters", step=0.1)
        self.assertEqual(eps[b.address]["state"], "unhealthy")
        self.assertEqual(eps[a.address]["state"], "healthy")
        self.assertGreaterEqual(eps[b.address]["health_check_failures"], 2)
        self.assertEqual(eps[a.address]["health_check_failures"], 0)
        self.assertGreaterEqual(eps[a.address]["health_checks"], 1)
        self.assertNotIn("ejected", eps[a.address])  # no outlier_detection
        ss = self.metrics()
        self.assertEqual(value(ss, "maitred_endpoint_healthy", service=SVC, endpoint=b.address), 0)
        self.assertEqual(value(ss, "maitred_endpoint_healthy", service=SVC, endpoint=a.address), 1)
        self.assertGreaterEqual(value(ss, "maitred_endpoint_health_check_failures_total", service=SVC,
                                      endpoint=b.address), 2)
        self.assertEqual(value(ss, "maitred_endpoint_health_check_failures_total", service=SVC,
                               endpoint=a.address), 0)
        self.assertIsNone(value(ss, "maitred_endpoint_ejected", service=SVC, endpoint=a.address))

    @maitred_only
    def test_circuit_rejections_counted(self):
        up = self.start_upstream("a")
        m = self.start_admin(services=[self.service(SVC, [up], circuit_breaker={"max_calls": 2})])
        stub = self.echo(m)
        ids = [call_id() for _ in range(2)]
        futs = [stub.Unary.future(pb.EchoRequest(call_id=c, hold=True), timeout=CALL_LIMIT) for c in ids]
        for c in ids:
            self.assertTrue(up.wait_call(c).started)
        n_refused = 3
        for _ in range(n_refused):
            with self.assertRaises(grpc.RpcError) as cm:
                stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        cb = self.clusters()["services"][0]["circuit_breaker"]
        self.assertEqual((cb["max_calls"], cb["calls"]), (2, 2))
        self.assertEqual(cb["rejected"], {"max_calls": n_refused, "max_pending": 0, "max_calls_per_endpoint": 0})
        for c in ids:
            up.release(c)
        for f in futs:
            f.result()
        ss = self.metrics()
        lab = dict(service=SVC, method="Unary")
        self.assertEqual(value(ss, "maitred_circuit_rejections_total", limit="max_calls", **lab), n_refused)
        self.assertIsNone(value(ss, "maitred_circuit_rejections_total", limit="max_pending", **lab))
        # Refused calls are the service's, not "unrouted".
        self.assertEqual(value(ss, "maitred_calls_total", grpc_code="RESOURCE_EXHAUSTED", **lab), n_refused)
        self.assertEqual(value(ss, "maitred_calls_total", grpc_code="OK", **lab), 2)
        self.assertIsNone(value(ss, "maitred_calls_unrouted_total", grpc_code="RESOURCE_EXHAUSTED"))
        self.assertEqual(self.clusters()["services"][0]["circuit_breaker"]["calls"], 0)


class Drain(AdminBase):
    def assert_exits_0(self, m):
        """The drain ends by itself once the held call finished."""
        rc = m.proc.wait(CALL_LIMIT * 2)
        m.proc.checked = True
        self.assertEqual(rc, 0, "maitred exited %s after the drain" % rc)
        self.assertEqual(m.proc.sanitizer_report(), [])

    @maitred_only
    def test_ready_503_while_draining_on_sigterm(self):
        a = self.start_upstream("alpha")
        m = self.start_admin(upstreams=[a], drain_timeout="60s")
        cid = call_id()
        fut = self.echo(m).Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2)
        self.assertTrue(a.wait_call(cid).started)
        self.assertEqual(self.get("/ready")[0], 200)
        m.proc.signal(signal.SIGTERM)
        st, _, body = wait_until(lambda: (lambda r: r[0] == 503 and r)(self.get("/ready")), CALL_LIMIT,
                                 "/ready to answer 503 after SIGTERM")
        self.assertIn("draining", body)
        self.assertEqual(value(self.metrics(), "maitred_draining"), 1)
        self.assertTrue(self.clusters()["draining"])
        a.release(cid)
        fut.result()
        self.assert_exits_0(m)

    @maitred_only
    def test_post_drain_acts_as_sigterm(self):
        a = self.start_upstream("alpha")
        m = self.start_admin(upstreams=[a], drain_timeout="60s")
        cid = call_id()
        fut = self.echo(m).Unary.future(pb.EchoRequest(call_id=cid, hold=True, payload=b"p"),
                                        timeout=CALL_LIMIT * 2)
        self.assertTrue(a.wait_call(cid).started)
        st, _, body = self.get("/drain", method="POST")
        self.assertEqual((st, body), (202, "draining\n"))
        st, _, body = self.get("/ready")
        self.assertEqual(st, 503)
        self.assertIn("draining", body)
        st, _, body = self.get("/drain", method="POST")
        self.assertEqual((st, body), (200, "already draining\n"))
        # New calls are refused, the one in flight finishes, then exit 0.
        with self.assertRaises(grpc.RpcError) as cm:
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        a.release(cid)
        self.assertEqual(fut.result().payload, b"p")
        self.assert_exits_0(m)
        self.assertIn("POST /drain: draining", m.proc.output())


class Config(AdminBase):
    @maitred_only
    def test_non_loopback_admin_refused_by_default(self):
        port = free_port()
        for host in ("0.0.0.0", "[::]"):
            path = self.write_config(self.config([self.service("*", ["127.0.0.1:1"])],
                                                 admin="%s:%d" % (host, port)))
            rc, out, err = self.run_maitred(["--check-config", path])
            self.assertEqual(rc, 1, out + err)
            self.assertIn("is not a loopback address", err)
            self.assertIn("admin_allow_remote: true", err)
            rc, out, err = self.run_maitred(["--config", path])
            self.assertEqual(rc, 1, out + err)
            self.assertIn("is not a loopback address", err)
        path = self.write_config(self.config([self.service("*", ["127.0.0.1:1"])],
                                             admin="0.0.0.0:%d" % port, admin_allow_remote=True))
        rc, out, err = self.run_maitred(["--check-config", path])
        self.assertEqual(rc, 0, out + err)
        for host in ("127.0.0.2", "[::1]", "localhost"):
            path = self.write_config(self.config([self.service("*", ["127.0.0.1:1"])],
                                                 admin="%s:%d" % (host, port)))
            rc, out, err = self.run_maitred(["--check-config", path])
            self.assertEqual(rc, 0, host + out + err)

    @maitred_only
    def test_admin_port_taken_refuses_to_start(self):
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        try:
            port = s.getsockname()[1]
            path = self.write_config(self.config([self.service("*", ["127.0.0.1:1"])],
                                                 admin="127.0.0.1:%d" % port))
            rc, out, err = self.run_maitred(["--config", path])
            self.assertEqual(rc, 1, out + err)
            self.assertIn("cannot listen on admin 127.0.0.1:%d" % port, err)
        finally:
            s.close()

    @maitred_only
    def test_config_dump_redacts_and_never_holds_key_contents(self):
        ca = TestCA(os.path.join(self.tmp, "ca"))
        up = self.start_upstream("alpha", tls=ca, client_ca=ca)
        tls = {"ca_file": ca.ca_file, "server_name": ca.server_name,
               "cert_file": ca.client_cert, "key_file": ca.client_key}
        self.start_admin(services=[self.service(SVC, [up], tls=tls)])
        st, hdrs, body = self.get("/config_dump")
        self.assertEqual(st, 200, body)
        self.assertEqual(hdrs["content-type"], "application/json")
        dump = json.loads(body)
        svc = dump["config"]["services"][0]
        self.assertEqual(svc["name"], SVC)
        self.assertEqual(svc["tls"]["key_file"], ca.client_key)
        with open(ca.client_key) as f:
            key = f.read()
        body_lines = [ln for ln in key.splitlines() if ln and not ln.startswith("-----")]
        for ln in body_lines:
            self.assertNotIn(ln, body)
        self.assertNotIn("PRIVATE KEY", body)
        self.assertEqual(dump["generation"], 1)

    @maitred_only
    def test_config_dump_redacts_secret_fields(self):
        # docs/operating.md "Secrets in /config_dump": every bytes field
        # (fault.fallback.response_base64) is "[redacted]"; file names
        # (password_file) and plain strings (username) are shown; the
        # password file's contents never are.
        canned = pb.EchoResponse(instance="fallback", payload=b"CANNED-SECRET-RESPONSE").SerializeToString()
        canned_b64 = base64.b64encode(canned).decode()
        pw_file = os.path.join(self.tmp, "etcd.password")
        with open(pw_file, "w") as f:
            f.write("ETCD-PASSWORD-SECRET\n")
        dead = "127.0.0.1:%d" % free_port()
        safe = self.service(SVC, [dead], fault={"fallback": {"status": "OK", "response_base64": canned_b64}})
        etcd_svc = {"name": "shop.Etcd", "lb": {"policy": "ROUND_ROBIN"},
                    "discovery": {"etcd": {"endpoints": ["127.0.0.1:%d" % free_port()], "prefix": "/x/",
                                           "username": "maitred-user", "password_file": pw_file}}}
        m = self.start_admin(services=[safe, etcd_svc])
        st, _, body = self.get("/config_dump")
        self.assertEqual(st, 200, body)
        dump = json.loads(body)
        svcs = {x["name"]: x for x in dump["config"]["services"]}
        self.assertEqual(svcs[SVC]["fault"]["fallback"]["response_base64"], "[redacted]")
        etcd = svcs["shop.Etcd"]["discovery"]["etcd"]
        self.assertEqual(etcd["password_file"], pw_file)
        self.assertEqual(etcd["username"], "maitred-user")
        for secret in (canned_b64, canned_b64.rstrip("="), "CANNED-SECRET-RESPONSE", "ETCD-PASSWORD-SECRET"):
            self.assertNotIn(secret, body)
        # Redacted in the dump only: the running config answers with it.
        r = self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual((r.instance, r.payload), ("fallback", b"CANNED-SECRET-RESPONSE"))

class Logs(AdminBase):
    @maitred_only
    def test_access_log_fields_and_no_payload_or_bin(self):
        a = self.start_upstream("alpha")
        access = os.path.join(self.tmp, "access.log")
        m = self.start_admin(upstreams=[a], log={"access": {"path": access}})
        secret = b"PAYLOAD-SECRET-0123456789"
        binval = b"\x00BIN-SECRET-9876\xff"
        md = [("x-trace-bin", binval), ("x-plain", "visible-header")]
        self.echo(m).Unary(pb.EchoRequest(payload=secret), metadata=md, timeout=CALL_LIMIT)
        with self.assertRaises(grpc.RpcError):
            self.echo(m).Unary(pb.EchoRequest(payload=secret, status=pb.Status(code=5, message="x")),
                               metadata=md, timeout=CALL_LIMIT)
        wait_until(lambda: os.path.exists(access) and open(access).read().count("\n") >= 2, CALL_LIMIT,
                   "two access-log lines")
        with open(access, "rb") as f:
            raw = f.read()
        lines = raw.decode().splitlines()
        self.assertEqual(len(lines), 2, lines)
        ok = dict(kv.split("=", 1) for kv in lines[0].split()[2:])
        self.assertEqual(lines[0].split()[1], "access")
        self.assertEqual(ok["service"], SVC)
        self.assertEqual(ok["method"], "Unary")
        self.assertEqual(ok["endpoint"], a.address)
        self.assertEqual(ok["attempts"], "1")
        self.assertEqual(ok["grpc_status"], "OK")
        self.assertGreater(float(ok["duration_s"]), 0)
        self.assertGreater(int(ok["bytes_in"]), len(secret))
        self.assertGreater(int(ok["bytes_out"]), len(secret))
        self.assertIn("grpc_status=NOT_FOUND", lines[1])
        out = m.proc.output().encode() + raw
        for bad in (secret, b"BIN-SECRET", base64.b64encode(binval), base64.b64encode(binval).rstrip(b"=")):
            self.assertNotIn(bad, out)
        self.assertEqual(value(self.metrics(), "maitred_access_log_lines_total"), 2)

    @maitred_only
    def test_json_process_log_and_access_log(self):
        a = self.start_upstream("alpha")
        m = self.start_admin(upstreams=[a], log={"format": "JSON", "access": {"path": "-", "sample": 1.0}})
        self.echo(m).Unary(pb.EchoRequest(payload=b"hello"), timeout=CALL_LIMIT)
        wait_until(lambda: '"type":"access"' in m.proc.output(), CALL_LIMIT, "the access line")
        lines = [ln for ln in m.proc.output().splitlines() if ln.strip()]
        self.assertTrue(lines)
        recs = [json.loads(ln) for ln in lines]  # every line is one JSON object
        self.assertTrue(any(r.get("level") == "info" and "listening on" in r.get("msg", "") for r in recs))
        acc = [r for r in recs if r.get("type") == "access"]
        self.assertEqual(len(acc), 1)
        self.assertEqual(acc[0]["service"], SVC)
        self.assertEqual(acc[0]["method"], "Unary")
        self.assertEqual(acc[0]["grpc_status"], "OK")
        self.assertEqual(acc[0]["attempts"], 1)

    @maitred_only
    def test_log_settings_follow_a_reload(self):
        """log.level, log.format and log.access change with a reload (the
        file rewritten, then SIGHUP), while the workers write access lines."""
        a = self.start_upstream("alpha")
        self.admin_port = free_port()
        acc1, acc2 = os.path.join(self.tmp, "access1.log"), os.path.join(self.tmp, "access2.log")

        def cfg(log):
            return self.config([self.service(SVC, [a])], port=port, admin="127.0.0.1:%d" % self.admin_port,
                               log=log)
        port = free_port()
        # The file maitred is given is a symlink to one in another folder:
        # rewriting that one raises no inotify event in the folder maitred
        # watches, so SIGHUP alone reloads, once.
        os.makedirs(os.path.join(self.tmp, "conf"))
        self.write_config(cfg({"level": "WARN", "access": {"path": acc1}}), name="conf/logs.yaml")
        path = os.path.join(self.tmp, "logs.yaml")
        os.symlink(os.path.join(self.tmp, "conf", "logs.yaml"), path)
        # Without --log-level (the harness passes one, and it wins over the file).
        proc = Proc("maitred-logs", maitred_argv(["--config", path]), self.tmp, env=maitred_env())
        self._procs.append((proc, True))
        m = Maitred(proc, port, path)
        self.wait_listening(m)
        self.wait_admin()
        stub = self.echo(m)

        def reload_to(log):
            gen = value(self.metrics(), "maitred_config_generation")
            self.write_config(cfg(log), name="conf/logs.yaml")
            m.proc.signal(signal.SIGHUP)
            wait_until(lambda: value(self.metrics(), "maitred_config_generation") > gen, CALL_LIMIT,
                       "the reload to be applied")

        def lines(p):
            if not os.path.exists(p):
                return []
            with open(p) as f:
                return f.read().splitlines()
        for _ in range(2):
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        # A call's line is written when the call is freed, at the end of
        # the turn that sent its answer: the client may read the answer
        # first (seen on a loaded machine).
        wait_until(lambda: len(lines(acc1)) >= 2, CALL_LIMIT, "two lines in the access log")
        self.assertEqual(len(lines(acc1)), 2)
        self.assertNotIn("listening on", m.proc.output())  # info, under WARN
        reload_to({"level": "INFO", "format": "JSON", "access": {"path": acc2}})
        for _ in range(3):
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        wait_until(lambda: len(lines(acc2)) >= 3, CALL_LIMIT, "three lines in the new access log")
        new = [json.loads(ln) for ln in lines(acc2)]
        self.assertEqual([r["type"] for r in new], ["access"] * 3)
        self.assertEqual(len(lines(acc1)), 2)  # the old file gets no more
        # The process log is JSON at info now: the reload says so itself.
        applied = [ln for ln in m.proc.output().splitlines() if "applied" in ln]
        self.assertEqual(len(applied), 1, applied)
        self.assertEqual(json.loads(applied[0])["level"], "info")
        # No access log, errors only: nothing more in either file, and the
        # info line of this reload is not written.
        reload_to({"level": "ERROR"})
        for _ in range(2):
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual((len(lines(acc1)), len(lines(acc2))), (2, 3))
        self.assertEqual(len([ln for ln in m.proc.output().splitlines() if "applied" in ln]), 1)
        self.assertEqual(value(self.metrics(), "maitred_access_log_lines_total"), 5)
        # And back: sampled at 1.0 on stderr in TEXT.
        reload_to({"access": {"path": "-"}})
        stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        wait_until(lambda: re.search(r" access service=%s method=Unary" % re.escape(SVC), m.proc.output()),
                   CALL_LIMIT, "a TEXT access line on stderr")
        self.stop_maitred(m)

    @maitred_only
    def test_access_log_reopened_after_rotation_and_bad_path_refused(self):
        """docs/operating.md, Logs: after a rotation moved the access log
        away, SIGHUP makes maitred write to a new file at the same path; a
        reload whose access-log path cannot be opened is refused whole."""
        a, b = self.start_upstream("alpha"), self.start_upstream("beta")
        acc = os.path.join(self.tmp, "access.log")
        m = self.start_admin(upstreams=[a], log={"access": {"path": acc}})
        stub = self.echo(m)

        def lines(p):
            if not os.path.exists(p):
                return []
            with open(p) as f:
                return f.read().splitlines()

        def calls(n):
            for _ in range(n):
                self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "alpha")
        calls(2)
        wait_until(lambda: len(lines(acc)) == 2, CALL_LIMIT, "two lines in the access log")
        # logrotate's default: rename, then tell the daemon.
        os.rename(acc, acc + ".1")
        calls(1)
        wait_until(lambda: len(lines(acc + ".1")) == 3, CALL_LIMIT, "the third line in the moved file")
        self.assertFalse(os.path.exists(acc))
        gen = value(self.metrics(), "maitred_config_generation")
        m.proc.signal(signal.SIGHUP)
        wait_until(lambda: value(self.metrics(), "maitred_config_generation") > gen, CALL_LIMIT,
                   "the SIGHUP reload to be applied")
        calls(2)
        wait_until(lambda: len(lines(acc)) == 2, CALL_LIMIT, "two lines in the new file at the same path")
        self.assertEqual(len(lines(acc + ".1")), 3, "the moved file still gets lines")
        # A path that cannot be opened: the whole reload is refused (the
        # new endpoint too), and the running config keeps logging.
        bad = os.path.join(self.tmp, "no-such-dir", "access.log")
        gen = value(self.metrics(), "maitred_config_generation")
        self.write_config(self.config([self.service("*", [b])], port=m.port, admin="127.0.0.1:%d" % self.admin_port,
                                      log={"access": {"path": bad}}), os.path.basename(m.config_path))
        m.proc.signal(signal.SIGHUP)
        refusal = "reload: log.access.path: cannot open %s: No such file or directory; keeping the running config" % bad
        wait_until(lambda: refusal in m.proc.output(), CALL_LIMIT, "the refusal")
        self.assertEqual(value(self.metrics(), "maitred_config_generation"), gen)
        calls(3)  # still alpha: the new service config was not applied
        wait_until(lambda: len(lines(acc)) == 5, CALL_LIMIT, "the running config's access lines")
        self.assertEqual(b.stats().total, 0)
        self.assertFalse(os.path.exists(os.path.dirname(bad)))
        self.stop_maitred(m)

    @maitred_only
    def test_sample_zero_logs_nothing(self):
        a = self.start_upstream("alpha")
        m = self.start_admin(upstreams=[a], log={"access": {"path": "-", "sample": 0}})
        for _ in range(5):
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(value(self.metrics(), "maitred_access_log_lines_total"), 0)
        self.assertNotIn(" access ", m.proc.output())


def chromium():
    for name in ("chromium", "chromium-browser"):
        for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin"]:
            p = os.path.join(d, name)
            if os.access(p, os.X_OK):
                return p
    return None


class LivePage(AdminBase):
    """GET / in headless Chromium against a running maitred with traffic:
    every endpoint appears with a non-zero bar; the screenshot is kept."""

    def run_chromium(self, url, *mode):
        user_dir = os.path.join(self.tmp, "chromium-profile")
        os.makedirs(user_dir, exist_ok=True)
        argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--user-data-dir=" + user_dir, "--window-size=1200,700",
                # Let the page's timers run 6 refreshes (virtual time).
                "--virtual-time-budget=6000"] + list(mode) + [url]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # its own session: the helpers go too
            p.communicate()
            raise AssertionError("chromium did not finish within 120 s")
        self.assertEqual(p.returncode, 0, err.decode(errors="replace")[-2000:])
        return out.decode(errors="replace")

    @maitred_only
    def test_live_page_shows_every_endpoint_with_a_bar(self):
        if not chromium():
            self.skipTest("no chromium (Debian: chromium)")
        ups = [self.start_upstream(n) for n in ("alpha", "beta", "gamma")]
        svc = self.service(SVC, ups, policy="WEIGHTED_ROUND_ROBIN")
        svc["endpoints"][2]["weight"] = 50
        m = self.start_admin(services=[svc], workers=2)
        stub = self.echo(m)
        errors = []
        # Traffic tied to the page, not to the clock: the page is served
        # through a small proxy that makes CALLS_PER_REFRESH real calls
        # before each /clusters it forwards. Weights 2:2:1 in a smooth cycle
        # give every endpoint a pick in any 5 consecutive calls, so between
        # two refreshes each endpoint's picks grow, whatever the timing.
        calls_per_refresh = 10
        admin_port = self.admin_port
        refreshes = []

        class Proxy(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                try:
                    if self.path == "/clusters":
                        for _ in range(calls_per_refresh):
                            stub.Unary(pb.EchoRequest(payload=b"page"), timeout=CALL_LIMIT)
                        refreshes.append(1)
                    st, hdrs, body = admin_request(admin_port, "GET", self.path)
                except Exception as e:  # noqa: BLE001 - reported by the test
                    errors.append(e)
                    st, hdrs, body = 502, {"content-type": "text/plain"}, str(e)
                data = body.encode()
                self.send_response(st)
                self.send_header("Content-Type", hdrs.get("content-type", "text/plain"))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass
        proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
        pt = threading.Thread(target=proxy.serve_forever)
        pt.start()
        try:
            url = "http://127.0.0.1:%d/" % proxy.server_address[1]
            dom = self.run_chromium(url, "--dump-dom")
            shot_dir = os.path.join(BUILDDIR, "tests", "artifacts")
            os.makedirs(shot_dir, exist_ok=True)
            shot = os.path.join(shot_dir, "admin-live-page.png")
            if os.path.exists(shot):
                os.unlink(shot)
            self.run_chromium(url, "--screenshot=" + shot)
        finally:
            proxy.shutdown()
            pt.join()
            proxy.server_close()
        self.assertEqual(errors, [])
        n = re.search(r'data-refreshes="(\d+)"', dom)
        self.assertTrue(n and int(n.group(1)) >= 2, "the page refreshed less than twice")
        rows = dict((addr, (float(rate), float(width))) for addr, rate, width in re.findall(
            r'data-endpoint="([^"]+)" data-rate="([0-9.]+)">.*?class="bar" style="width: ([0-9.]+)%', dom))
        self.assertEqual(set(rows), {u.address for u in ups}, dom[-3000:])
        for addr, (rate, width) in rows.items():
            self.assertGreater(rate, 0, addr)
            self.assertGreater(width, 0, addr)
        # The heavier endpoints' bars are the longest (weights 100:100:50).
        self.assertEqual(rows[ups[0].address][1], 100.0)
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        sys.stderr.write("live page screenshot: %s\n" % shot)
        self.stop_maitred(m)

    @maitred_only
    def test_live_page_marks_an_ejected_endpoint(self):
        if not chromium():
            self.skipTest("no chromium (Debian: chromium)")
        good = self.start_upstream("good")
        bad = self.start_upstream("bad", extra_args=["--fail-status", "14"])  # UNAVAILABLE
        od = {"consecutive_failures": 2, "base_ejection_time": "600s", "max_ejection_percent": 50}
        m = self.start_admin(services=[self.service(SVC, [good, bad], outlier_detection=od)])
        stub = self.echo(m)
        for _ in range(6):
            try:
                stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
            except grpc.RpcError:
                pass
        self.assertEqual(bad.stats().total, 2)  # ejected after its second failure
        dom = self.run_chromium("http://127.0.0.1:%d/" % self.admin_port, "--dump-dom")
        rows = {addr: state for state, addr in re.findall(r'<tr class="endpoint ([a-z]+)" data-endpoint="([^"]+)"', dom)}
        self.assertEqual(rows, {bad.address: "ejected", good.address: "healthy"}, dom[-3000:])
        row = re.search(r'data-endpoint="%s".*?</tr>' % re.escape(bad.address), dom).group(0)
        self.assertIn('class="tag"', row)
        self.assertIn("ejected until", row)
        self.assertIn("1 ejected", dom)  # the service's heading

    @maitred_only
    def test_figures_of_endpoints_never_called(self):
        """An endpoint nobody called has no latency histogram (lib/lb makes
        it at the first answered call) and no history series (history.c
        makes it at the first call): /history, /clusters and /metrics
        still answer for it, /history with no points, and the called
        endpoint's points and p99 are there."""
        a = self.start_upstream("called")
        idle = ["127.0.0.1:9", "127.0.0.2:9"]  # never picked, so never connected
        m = self.start_admin(services=[self.service(SVC, [a]), self.service("idle.v1.Idle", idle)], workers=2)
        stub = self.echo(m)
        eps = {}

        def enough():
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            st, _, body = self.get("/history")
            self.assertEqual(st, 200, body)
            eps.clear()
            eps.update({e["endpoint"]: e["points"] for e in json.loads(body)["endpoints"]})
            return len(eps.get(a.address, [])) >= 2 and any(p[3] > 0 for p in eps[a.address])
        wait_until(enough, CALL_LIMIT * 2, "two points of the called endpoint, a p99", step=0.2)
        # Sampled as often as the called one (two points and more), but
        # never called: listed, without a series.
        for x in idle:
            self.assertEqual(eps[x], [], x)
        body = json.dumps(self.clusters())
        for x in idle:
            self.assertIn(x, body)
        self.metrics()
        st, _, _ = self.get("/")
        self.assertEqual(st, 200)

    def test_live_page_plots_endpoints_and_split_groups(self):
        """Plots of the last five minutes (calls/s, error ratio,
        p99) per endpoint and per split group, drawn from /history; a group
        split.guard cut is marked, with when."""
        if not chromium():
            self.skipTest("no chromium (Debian: chromium)")
        a, b = self.start_upstream("v1-a"), self.start_upstream("v1-b")
        c = self.start_upstream("v2", extra_args=["--fail-status", "14", "--fail-every", "3"])
        svc = self.service(SVC, [a, b, c], split={"metadata_key": "version", "weights": {"v1": 50, "v2": 50},
                                                  "guard": {"min_calls": 50, "window": "5s"}})
        for ep, v in zip(svc["endpoints"], ("v1", "v1", "v2")):
            ep["metadata"] = {"version": v}
        m = self.start_admin(services=[svc], workers=2)
        stub = self.echo(m)
        # Traffic until the guard cut v2 and maitred has sampled a few
        # seconds of history (one point a second): bounded.
        t0 = time.monotonic()

        def enough():
            for _ in range(40):
                try:
                    stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
                except grpc.RpcError:
                    pass  # v2's failures, until it is cut
            cut = value(self.metrics(), "maitred_split_weight", service=SVC, method="*", group="v2") == 0
            return cut and time.monotonic() - t0 >= 4
        wait_until(enough, CALL_LIMIT * 2, "v2 cut and four seconds of history", step=0)
        st, _, body = self.get("/history")
        self.assertEqual(st, 200)
        h = json.loads(body)
        self.assertEqual({e["endpoint"] for e in h["endpoints"]}, {a.address, b.address, c.address})
        self.assertTrue(all(len(e["points"]) >= 2 for e in h["endpoints"]), h["endpoints"])
        g = {x["group"]: x for x in h["groups"]}
        self.assertIsNotNone(g["v2"]["cut_at"])
        self.assertIsNone(g["v1"]["cut_at"])
        # since: only what comes after.
        last = max(p[0] for e in h["endpoints"] for p in e["points"])
        st, _, body = self.get("/history?since=%d" % last)
        self.assertTrue(all(p[0] > last for e in json.loads(body)["endpoints"] for p in e["points"]))
        dom = self.run_chromium("http://127.0.0.1:%d/" % self.admin_port, "--dump-dom")
        # Every endpoint row: three plots with points.
        for addr in (a.address, b.address, c.address):
            row = re.search(r'<tr class="endpoint [^"]*" data-endpoint="%s".*?</tr>' % re.escape(addr), dom, re.S)
            self.assertIsNotNone(row, addr)
            plots = re.findall(r'<svg class="plot (calls|err|p99)"[^>]*data-points="(\d+)"', row.group(0))
            self.assertEqual([k for k, _ in plots], ["calls", "err", "p99"], row.group(0)[-800:])
            self.assertTrue(all(int(n) >= 2 for _, n in plots), plots)
        # Each split group: its row, plots, v2 marked cut (and when, and
        # a mark on its plots), v1 not.
        groups = {grp: cls for cls, grp in re.findall(r'<tr class="(group[^"]*)" data-group="(v\d)"', dom)}
        self.assertEqual(set(groups), {"v1", "v2"}, dom[-3000:])
        self.assertIn("cut", groups["v2"])
        self.assertNotIn("cut", groups["v1"])
        v2 = re.search(r'<tr class="group cut" data-group="v2" data-cut-at="(\d+)">.*?</tr>', dom, re.S)
        self.assertIsNotNone(v2)
        self.assertEqual(int(v2.group(1)), g["v2"]["cut_at"])
        self.assertIn("cut by the guard at", v2.group(0))
        self.assertEqual(len(re.findall(r'class="cut-mark"', v2.group(0))), 3)
        self.assertTrue(all(int(n) >= 2 for n in re.findall(r'data-points="(\d+)"', v2.group(0))))
        shot_dir = os.path.join(BUILDDIR, "tests", "artifacts")
        os.makedirs(shot_dir, exist_ok=True)
        shot = os.path.join(shot_dir, "admin-live-page-split.png")
        if os.path.exists(shot):
            os.unlink(shot)
        self.run_chromium("http://127.0.0.1:%d/" % self.admin_port, "--screenshot=" + shot)
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        sys.stderr.write("live page screenshot: %s\n" % shot)
        self.stop_maitred(m)


if __name__ == "__main__":
    unittest.main()
