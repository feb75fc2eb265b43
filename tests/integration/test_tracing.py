"""Tracing through a real maitred: W3C trace context read from the app and
passed to the upstream (the upstream echoes what it received), spans
exported over OTLP/HTTP to the tests' receiver (otlp.py, itself checked
against the OpenTelemetry JS SDK by test_otlp_peers). Spans arrive in
batches at most a second old: waits are bounded, and "nothing exported" is
decided by counts (a sampled call sent after the unsampled ones is the
only one that arrives), never by a quiet period.
"""

import os
import re
import shutil
import time
import unittest

import grpc

from harness import MaitredTest, TestCA, maitred_only, needs_h2, pb, wait_until, free_port, CALL_LIMIT
from otlp import OtlpReceiver, RawCollector, read_request
from test_admin import admin_request
import test_inbound

SVC = "maitred.testing.v1.Echo"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TP_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def received(resp, key):
    """What the upstream received as request metadata `key`, or None."""
    vals = [m.value.decode() for m in resp.metadata if m.key == key]
    return vals[0] if vals else None


def tracing(recv, sample=1.0, **extra):
    t = {"otlp": {"endpoint": recv.url}, "sample": sample}
    t.update(extra)
    return t


class Tracing(MaitredTest):
    def setUp(self):
        super().setUp()
        self.recv = OtlpReceiver().start()
        self.addCleanup(self.recv.stop)

    def start(self, ups, sample=1.0, admin=False, **service):
        cfg = self.config([self.service(SVC, ups, **service)], tracing=tracing(self.recv, sample))
        if admin:
            cfg["admin"] = "127.0.0.1:%d" % free_port()
        m = self.start_maitred(cfg)
        m.admin = cfg.get("admin")
        return m

    def call(self, m, md=(), **req):
        return self.echo(m).Unary(pb.EchoRequest(**req), metadata=list(md), timeout=CALL_LIMIT)

    def spans(self, n, what):
        wait_until(lambda: len(self.recv.spans()) >= n, CALL_LIMIT, what)
        return self.recv.spans()

    @maitred_only
    def test_a_call_with_a_sampled_context_is_its_child(self):
        up = self.start_upstream()
        m = self.start(ups=[up], sample=0.0)
        tp = "00-%s-%s-01" % (TRACE, PARENT)
        resp = self.call(m, [("traceparent", tp), ("tracestate", "rojo=1,congo=t61rcWkgMzE")])
        sent = TP_RE.match(received(resp, "traceparent"))
        self.assertIsNotNone(sent, received(resp, "traceparent"))
        self.assertEqual(sent.group(1), TRACE)
        self.assertNotEqual(sent.group(2), PARENT)
        self.assertEqual(sent.group(3), "01")
        self.assertEqual(received(resp, "tracestate"), "rojo=1,congo=t61rcWkgMzE")
        (s,) = self.spans(1, "the call's span")
        self.assertEqual((s["trace_id"], s["span_id"], s["parent_span_id"]), (TRACE, sent.group(2), PARENT))
        self.assertEqual(s["name"], SVC + "/Unary")
        self.assertEqual(s["kind"], 3)  # CLIENT
        self.assertEqual(s["trace_state"], "rojo=1,congo=t61rcWkgMzE")
        self.assertEqual(s["flags"] & 1, 1)
        a = s["attributes"]
        self.assertEqual((a["rpc.system"], a["rpc.service"], a["rpc.method"]), ("grpc", SVC, "Unary"))
        self.assertEqual(a["rpc.grpc.status_code"], 0)
        self.assertEqual((a["server.address"], a["server.port"]), ("127.0.0.1", up.port))
        self.assertEqual(a["maitred.policy"], "ROUND_ROBIN")
        self.assertEqual(a["maitred.fault_mode"], "FAILFAST")
        self.assertEqual(a["maitred.attempts"], 1)
        self.assertEqual(s["status_code"], 0)
        self.assertLessEqual(s["start_ns"], s["end_ns"])
        self.assertTrue(s["resource"]["service.name"])

    @maitred_only
    def test_an_unsampled_context_is_propagated_not_exported(self):
        up = self.start_upstream()
        m = self.start(ups=[up], sample=1.0)
        for i in range(3):
            tp = "00-%s-%s-00" % (TRACE[:-1] + str(i), PARENT)
            sent = TP_RE.match(received(self.call(m, [("traceparent", tp)]), "traceparent"))
            self.assertEqual((sent.group(1), sent.group(3)), (TRACE[:-1] + str(i), "00"))
        # The barrier: a sampled call after them is the only span to come.
        self.call(m, [("traceparent", "00-%s-%s-01" % (TRACE, PARENT))])
        spans = self.spans(1, "the sampled call's span")
        self.assertEqual([s["trace_id"] for s in spans], [TRACE])

    @maitred_only
    def test_a_call_without_context_starts_a_sampled_trace(self):
        up = self.start_upstream()
        m = self.start(ups=[up], sample=1.0)
        seen = set()
        for _ in range(3):
            sent = TP_RE.match(received(self.call(m), "traceparent"))
            self.assertEqual(sent.group(3), "01")
            seen.add((sent.group(1), sent.group(2)))
        self.assertEqual(len({t for t, _ in seen}), 3, "each call its own trace")
        spans = self.spans(3, "three spans")
        self.assertEqual({(s["trace_id"], s["span_id"]) for s in spans}, seen)
        self.assertTrue(all(s["parent_span_id"] == "" for s in spans))

    @maitred_only
    def test_sample_zero_propagates_and_exports_nothing_new(self):
        up = self.start_upstream()
        m = self.start(ups=[up], sample=0.0)
        for _ in range(5):
            sent = TP_RE.match(received(self.call(m), "traceparent"))
            self.assertEqual(sent.group(3), "00")
        self.call(m, [("traceparent", "00-%s-%s-01" % (TRACE, PARENT))])
        self.assertEqual([s["trace_id"] for s in self.spans(1, "the barrier's span")], [TRACE])

    @maitred_only
    def test_a_service_and_method_sample_override_the_global(self):
        up = self.start_upstream()
        m = self.start(ups=[up], sample=0.0, tracing={"sample": 0.0},
                       methods=[{"name": "Unary", "tracing": {"sample": 1.0}}])
        sent = TP_RE.match(received(self.call(m), "traceparent"))
        self.assertEqual(sent.group(3), "01")
        self.assertEqual(len(self.spans(1, "the method's sampled span")), 1)

    @maitred_only
    def test_an_error_status_marks_the_span(self):
        up = self.start_upstream()
        m = self.start(ups=[up])
        with self.assertRaises(grpc.RpcError) as e:
            self.call(m, status=pb.Status(code=5, message="nope"))
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        spans = self.spans(1, "the failed call's span")
        call = [s for s in spans if "maitred.attempts" in s["attributes"]][0]
        self.assertEqual(call["status_code"], 2)  # ERROR
        self.assertEqual(call["status_message"], "NOT_FOUND")
        self.assertEqual(call["attributes"]["rpc.grpc.status_code"], 5)

    @maitred_only
    def test_a_retried_call_has_a_span_per_attempt_naming_both_endpoints(self):
        bad = self.start_upstream("bad", extra_args=["--fail-status", "14"])
        good = self.start_upstream("good")
        m = self.start(ups=[bad, good], fault={"mode": "FAILOVER"}, lb={"policy": "ROUND_ROBIN"})
        # Round robin starts somewhere: call until one call went bad -> good.
        for _ in range(4):
            self.call(m)
        wait_until(lambda: any(s["attributes"].get("maitred.attempts") == 2 for s in self.recv.spans()),
                   CALL_LIMIT, "a call of two attempts")
        spans = self.recv.spans()
        call = next(s for s in spans if s["attributes"].get("maitred.attempts") == 2)
        wait_until(lambda: len([s for s in self.recv.spans() if s["trace_id"] == call["trace_id"]]) >= 3,
                   CALL_LIMIT, "its two attempt spans")
        tries = sorted((s for s in self.recv.spans()
                        if s["trace_id"] == call["trace_id"] and "maitred.attempt" in s["attributes"]),
                       key=lambda s: s["attributes"]["maitred.attempt"])
        self.assertEqual([t["attributes"]["maitred.attempt"] for t in tries], [0, 1])
        self.assertEqual([t["attributes"]["server.port"] for t in tries], [bad.port, good.port])
        self.assertEqual([t["parent_span_id"] for t in tries], [call["span_id"]] * 2)
        self.assertEqual([t["status_code"] for t in tries], [2, 0])
        self.assertEqual([t["attributes"]["maitred.won"] for t in tries], [False, True])
        self.assertEqual(len({t["span_id"] for t in tries} | {call["span_id"]}), 3)

    @maitred_only
    def test_a_split_call_names_its_group(self):
        ups = [self.start_upstream(n) for n in ("v1", "v2")]
        svc = self.service(SVC, ups, split={"metadata_key": "version", "weights": {"v1": 0, "v2": 100}})
        for ep, v in zip(svc["endpoints"], ("v1", "v2")):
            ep["metadata"] = {"version": v}
        m = self.start_maitred(self.config([svc], tracing=tracing(self.recv, 1.0)))
        self.assertEqual(self.call(m).instance, "v2")
        (s,) = self.spans(1, "the call's span")
        self.assertEqual(s["attributes"]["maitred.split_group"], "v2")

    @maitred_only
    def test_a_hedged_call_marks_its_winner(self):
        a = self.start_upstream("a")
        b = self.start_upstream("b")
        m = self.start(ups=[a, b], fault={"mode": "FORKING", "forks": 2})
        resp = self.call(m)
        trace = TP_RE.match(received(resp, "traceparent")).group(1)
        wait_until(lambda: len([s for s in self.recv.spans() if s["trace_id"] == trace]) >= 3, CALL_LIMIT,
                   "the call's span and its two forks'")
        tries = [s for s in self.recv.spans() if s["trace_id"] == trace and "maitred.attempt" in s["attributes"]]
        self.assertEqual(sorted(t["attributes"]["maitred.won"] for t in tries), [False, True])
        winner = next(t for t in tries if t["attributes"]["maitred.won"])
        self.assertEqual(winner["attributes"]["server.port"], {"a": a.port, "b": b.port}[resp.instance])

    @maitred_only
    def test_malformed_traceparents_are_ignored(self):
        up = self.start_upstream()
        m = self.start(ups=[up], sample=0.0)
        bad = ["00-%s-%s-01" % (TRACE.upper(), PARENT), "00-%s-%s-01" % ("0" * 32, PARENT),
               "00-%s-%s-01" % (TRACE, "0" * 16), "ff-%s-%s-01" % (TRACE, PARENT),
               "00-%s-%s-01-extra" % (TRACE, PARENT), "00-%s-%s" % (TRACE, PARENT), "garbage",
               "00-%s-%s-0z" % (TRACE, PARENT), "x" * 4000]
        for v in bad:
            resp = self.call(m, [("traceparent", v), ("tracestate", "rojo=1")])
            sent = TP_RE.match(received(resp, "traceparent"))
            self.assertIsNotNone(sent, v)
            self.assertNotEqual(sent.group(1), TRACE, v)
            self.assertIsNone(received(resp, "tracestate"), "tracestate kept with a bad traceparent %r" % v)
        # A malformed tracestate alone is dropped, its traceparent kept.
        resp = self.call(m, [("traceparent", "00-%s-%s-00" % (TRACE, PARENT)), ("tracestate", "Bad Key=1")])
        self.assertEqual(TP_RE.match(received(resp, "traceparent")).group(1), TRACE)
        self.assertIsNone(received(resp, "tracestate"))

    @maitred_only
    def test_several_tracestate_fields_are_one_list(self):
        # RFC 9110 §5.3: fields of one name are one comma-joined list; the
        # upstream gets it as one field, the span carries it whole.
        up = self.start_upstream()
        m = self.start(ups=[up], sample=0.0)
        tp = "00-%s-%s-01" % (TRACE, PARENT)
        resp = self.call(m, [("traceparent", tp), ("tracestate", "rojo=1"), ("tracestate", "congo=t61rcWkgMzE")])
        vals = [md.value.decode() for md in resp.metadata if md.key == "tracestate"]
        self.assertEqual(vals, ["rojo=1,congo=t61rcWkgMzE"])
        (s,) = self.spans(1, "the call's span")
        self.assertEqual(s["trace_state"], "rojo=1,congo=t61rcWkgMzE")
        # Empty and blank fields add no member, and no space ends the value.
        resp = self.call(m, [("traceparent", tp), ("tracestate", "rojo=1"), ("tracestate", "  "),
                             ("tracestate", ""), ("tracestate", " congo=2")])
        vals = [md.value.decode() for md in resp.metadata if md.key == "tracestate"]
        self.assertEqual(vals, ["rojo=1,congo=2"])
        # One malformed field spoils the list: dropped whole, the context kept.
        resp = self.call(m, [("traceparent", tp), ("tracestate", "rojo=1"), ("tracestate", "Bad Key=1")])
        self.assertEqual(TP_RE.match(received(resp, "traceparent")).group(1), TRACE)
        self.assertIsNone(received(resp, "tracestate"))
        # Joined past 512 bytes: dropped, never cut.
        long = "k%d=" + "v" * 250
        resp = self.call(m, [("traceparent", tp), ("tracestate", long % 1), ("tracestate", long % 2),
                             ("tracestate", long % 3)])
        self.assertEqual(TP_RE.match(received(resp, "traceparent")).group(1), TRACE)
        self.assertIsNone(received(resp, "tracestate"))

    @maitred_only
    def test_two_traceparent_fields_are_ignored_as_one_malformed(self):
        # Two fields are one list value, "a, b", which no traceparent is
        # (the W3C test suite's duplicated-traceparent case).
        up = self.start_upstream()
        m = self.start(ups=[up], sample=0.0)
        other = "00-%s-%s-01" % ("a" * 32, PARENT)
        for second in (other, "00-%s-%s-01" % (TRACE, PARENT)):
            resp = self.call(m, [("traceparent", "00-%s-%s-01" % (TRACE, PARENT)), ("traceparent", second),
                                 ("tracestate", "rojo=1")])
            sent = TP_RE.match(received(resp, "traceparent"))
            self.assertNotIn(sent.group(1), (TRACE, "a" * 32))
            self.assertEqual(sent.group(3), "00")  # a new trace, sample 0
            self.assertIsNone(received(resp, "tracestate"))

    def odd_path_call(self, m, path, trace):
        f = self.channel(m).unary_unary(path)
        with self.assertRaises(grpc.RpcError):  # no such service
            f(b"", timeout=CALL_LIMIT, metadata=[("traceparent", "00-%s-%s-01" % (trace, PARENT))])

    @maitred_only
    def test_a_service_name_as_long_as_the_span_names_share_is_cut(self):
        # The span's name keeps 384 bytes; a service of exactly that many
        # once made the method's length -1 (a crash of the whole sidecar).
        up = self.start_upstream()
        m = self.start(ups=[up], sample=0.0)
        traces = ["%032x" % (n + 1) for n in range(3)]
        for trace, n in zip(traces, (383, 384, 385)):
            self.odd_path_call(m, "/%s/M" % ("a" * n), trace)
        self.call(m, [("traceparent", "00-%s-%s-01" % (TRACE, PARENT))])
        spans = self.spans(4, "every call's span")
        self.assertEqual(sorted(s["trace_id"] for s in spans), sorted(traces + [TRACE]))
        self.assertTrue(all(len(s["name"]) <= 384 for s in spans))

    @maitred_only
    @needs_h2
    def test_a_path_that_is_not_utf8_does_not_lose_the_batch(self):
        # OTLP's strings are protobuf strings: a collector refuses a whole
        # request with one that is not UTF-8 (this receiver too, as
        # protobuf does), which lost every span batched with the odd one.
        from h2raw import H2Client
        up = self.start_upstream()
        m = self.start(ups=[up], sample=0.0)
        odd = "%032x" % 7
        c = H2Client(m.port)
        tp = ("00-%s-%s-01" % (odd, PARENT)).encode()
        c.wait(c.call(b"/" + SVC.encode() + b"/Un\xffary", messages=[b""], headers=[(b"traceparent", tp)]))
        # Valid UTF-8 that the name's 384 bytes cut inside a character.
        cut = "%032x" % 8
        self.odd_path_call(m, "/" + "a" * 383 + "\u00e9/M", cut)
        self.call(m, [("traceparent", "00-%s-%s-01" % (TRACE, PARENT))])
        spans = {s["trace_id"]: s for s in self.spans(3, "the three calls' spans")}
        self.assertEqual(set(spans), {odd, cut, TRACE})
        self.assertEqual(spans[odd]["name"], SVC + "/Un?ary")
        self.assertEqual([st for _, _, st, _ in self.recv.requests if st != 200], [])

    @maitred_only
    def test_a_collector_refusing_slow_or_down_fails_no_call(self):
        up = self.start_upstream()
        m = self.start(ups=[up], admin=True)
        admin_port = int(m.admin.rsplit(":", 1)[1])
        self.recv.answer = 503
        self.recv.retry_after = 1
        for _ in range(20):
            self.call(m)
        wait_until(lambda: any(st == 503 for _, _, st, _ in self.recv.requests), CALL_LIMIT, "a refused export")
        self.recv.delay = 3.0
        self.recv.answer = 200
        for _ in range(20):
            self.call(m)
        self.recv.stop()
        for _ in range(20):
            self.call(m)
        # Back: the queued spans and new ones arrive by themselves.
        self.recv.delay = 0
        self.recv.start(same_port=True)
        self.call(m, [("traceparent", "00-%s-%s-01" % (TRACE, PARENT))])
        wait_until(lambda: any(s["trace_id"] == TRACE for s in self.recv.spans()), 3 * CALL_LIMIT,
                   "export to resume")
        st, _, body = admin_request(admin_port, "GET", "/metrics")
        text = body if isinstance(body, str) else body.decode()
        self.assertIn("maitred_trace_spans_exported_total", text)
        self.assertIn('maitred_trace_exports_total{result="failed"}', text)

    @maitred_only
    def test_a_collector_answering_a_byte_at_a_time_is_given_up_at_the_timeout(self):
        # evhttp's timeout is per read: an answer that trickles in kept the
        # one export in flight for ever (and every later span waiting).
        def trickle(c, h):
            read_request(c)
            c.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while not h.stopped:
                c.sendall(b"a")
                time.sleep(0.2)
        h = RawCollector(trickle)
        self.addCleanup(h.stop)
        up = self.start_upstream()
        t = {"otlp": {"endpoint": h.url, "timeout": "1s"}, "sample": 1.0}
        m = self.start_maitred(self.config([self.service(SVC, [up])], tracing=t))
        self.call(m)
        wait_until(lambda: h.conns and h.conns[0][1] is not None, CALL_LIMIT,
                   "maitred to give the trickling export up")
        # And it tries again (a timeout is worth a retry).
        wait_until(lambda: len(h.conns) >= 2, CALL_LIMIT, "the retry")

    @maitred_only
    def test_a_2xx_whose_body_is_too_big_counts_as_taken(self):
        # The collector said 200: the spans are in. The answer's body over
        # evhttp's limit (1 MiB) used to count as no answer, and the batch
        # went again, five times: five copies at the collector.
        def huge(c, h):
            while True:
                read_request(c)
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (2 << 20) + b"x" * (2 << 20))
        h = RawCollector(huge)
        self.addCleanup(h.stop)
        up = self.start_upstream()
        t = {"otlp": {"endpoint": h.url}, "sample": 1.0}
        cfg = self.config([self.service(SVC, [up])], tracing=t, admin="127.0.0.1:%d" % free_port())
        m = self.start_maitred(cfg)
        admin_port = int(cfg["admin"].rsplit(":", 1)[1])
        self.call(m)

        def exports():
            text = admin_request(admin_port, "GET", "/metrics")[2]
            return {r: int(n) for r, n in re.findall(r'^maitred_trace_exports_total\{result="(\w+)"\} (\d+)$',
                                                       text, re.M)}
        wait_until(lambda: sum(exports().values()) >= 1, CALL_LIMIT, "the export's answer")
        self.assertEqual(exports(), {"ok": 1, "failed": 0})

    @maitred_only
    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("unshare"),
                         "needs root: a mount namespace with a resolv.conf of its own, a resolver on port 53")
    def test_sigterm_while_the_collectors_name_lookup_hangs_stops_at_once(self):
        # The exporter looked the name up with a blocking getaddrinfo: a
        # resolver that does not answer (here, 30 s x 5 tries) held the
        # stop until it gave up. Now the lookup is on the exporter's loop.
        import socket
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.bind(("127.0.0.53", 53))
        except OSError as e:
            self.skipTest("cannot listen on 127.0.0.53:53 (%s)" % e)
        self.addCleanup(u.close)
        conf = self.tmp + "/resolv.conf"
        with open(conf, "w") as f:
            f.write("nameserver 127.0.0.53\noptions timeout:30 attempts:5\n")
        wrap = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"', conf]
        up = self.start_upstream()
        t = {"otlp": {"endpoint": "http://collector.example.test:4318/v1/traces", "timeout": "1s"},
             "sample": 1.0}
        m = self.start_maitred(self.config([self.service(SVC, [up])], tracing=t, drain_timeout="1s"), wrap=wrap)
        self.call(m)
        u.settimeout(CALL_LIMIT)
        u.recvfrom(4096)  # the lookup is out, and will never be answered
        self.stop_maitred(m)  # within the hang guard: 150 s of lookup exceed it

    @maitred_only
    def test_https_with_a_client_certificate_and_headers(self):
        ca = TestCA(self.tmp + "/ca", server_name="collector.test")
        recv = OtlpReceiver(tls=(ca.server_cert, ca.server_key, ca.ca_file)).start()
        self.addCleanup(recv.stop)
        up = self.start_upstream()
        t = {"otlp": {"endpoint": recv.url, "headers": {"x-api-key": "k-123", "Authorization": "Bearer t"},
                      "tls": {"ca_file": ca.ca_file, "server_name": "collector.test",
                              "cert_file": ca.client_cert, "key_file": ca.client_key}},
             "sample": 1.0}
        m = self.start_maitred(self.config([self.service(SVC, [up])], tracing=t))
        self.call(m)
        wait_until(lambda: len(recv.spans()) >= 1, CALL_LIMIT, "a span over https")
        _, ctype, st, hdrs = recv.requests[0]
        self.assertEqual((ctype, st), ("application/x-protobuf", 200))
        low = {k.lower(): v for k, v in hdrs.items()}
        self.assertEqual((low.get("x-api-key"), low.get("authorization")), ("k-123", "Bearer t"))

    @maitred_only
    def test_a_collector_with_a_certificate_of_another_ca_gets_nothing(self):
        ca = TestCA(self.tmp + "/ca", server_name="collector.test")
        other = TestCA(self.tmp + "/other", server_name="collector.test", ca_name="another CA")
        recv = OtlpReceiver(tls=(other.server_cert, other.server_key)).start()
        self.addCleanup(recv.stop)
        up = self.start_upstream()
        t = {"otlp": {"endpoint": recv.url, "tls": {"ca_file": ca.ca_file, "server_name": "collector.test"}},
             "sample": 1.0}
        cfg = self.config([self.service(SVC, [up])], tracing=t, admin="127.0.0.1:%d" % free_port())
        m = self.start_maitred(cfg)
        self.call(m)
        admin_port = int(cfg["admin"].rsplit(":", 1)[1])
        def failed():
            got = re.search(r'^maitred_trace_exports_total\{result="failed"\} (\d+)$',
                            admin_request(admin_port, "GET", "/metrics")[2], re.M)
            return got is not None and int(got.group(1)) >= 1
        wait_until(failed, 3 * CALL_LIMIT, "a failed export")
        self.assertEqual(recv.spans(), [])

    @maitred_only
    def test_spans_from_two_workers_under_load_all_arrive(self):
        # Two workers' rings drained by the exporter thread while they
        # write (the ThreadSanitizer stage runs this file).
        import concurrent.futures
        up = self.start_upstream()
        cfg = self.config([self.service(SVC, [up])], tracing=tracing(self.recv, 1.0), workers=2)
        m = self.start_maitred(cfg)
        # A connection each (no shared subchannel): both workers take some.
        targets = [self.echo(m, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(4)]

        def run(stub):
            for _ in range(25):
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            list(ex.map(run, targets))
        spans = self.spans(100, "a span per call")
        self.assertEqual(len(spans), 100)
        self.assertEqual(len({s["trace_id"] for s in spans}), 100)

    @maitred_only
    def test_the_access_log_line_carries_the_trace_id(self):
        up = self.start_upstream()
        log = self.tmp + "/access.log"
        cfg = self.config([self.service(SVC, [up])], tracing=tracing(self.recv, 0.0),
                          log={"access": {"path": log}})
        m = self.start_maitred(cfg)
        self.call(m, [("traceparent", "00-%s-%s-00" % (TRACE, PARENT))])
        wait_until(lambda: "trace_id=" + TRACE in open(log).read(), CALL_LIMIT, "the access-log line")


class TracingMesh(test_inbound.Mesh):
    """Two maitreds, A (client side) and B (its inbound listener), make one
    trace: app -> A's CLIENT span -> B's SERVER span -> app."""

    @maitred_only
    def test_two_maitreds_make_one_trace(self):
        recv = OtlpReceiver().start()
        self.addCleanup(recv.stop)
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, self.allow_cart(), top={"tracing": tracing(recv, 0.0)})
        tls = {"ca_file": self.ca.ca_file, "cert_file": self.client_cert, "key_file": self.client_key,
               "server_identity": test_inbound.SERVER}
        a = self.start_maitred(self.config([self.service("*", [addr], tls=tls)], tracing=tracing(recv, 0.0)))
        stub = self.echo(a)
        resp = stub.Unary(pb.EchoRequest(), metadata=[("traceparent", "00-%s-%s-01" % (TRACE, PARENT))],
                          timeout=CALL_LIMIT)
        wait_until(lambda: len(recv.spans()) >= 2, CALL_LIMIT, "both sidecars' spans")
        spans = {s["kind"]: s for s in recv.spans()}
        client, server = spans[3], spans[2]
        self.assertEqual({client["trace_id"], server["trace_id"]}, {TRACE})
        self.assertEqual(client["parent_span_id"], PARENT)
        self.assertEqual(server["parent_span_id"], client["span_id"])
        at_app = TP_RE.match(received(resp, "traceparent"))
        self.assertEqual((at_app.group(1), at_app.group(2)), (TRACE, server["span_id"]))
        self.assertEqual(server["attributes"].get("maitred.caller"), test_inbound.CART)


if __name__ == "__main__":
    unittest.main()
