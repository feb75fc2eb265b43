"""ORCA load reports from real @grpc/grpc-js backends (tests/xds/orca_backend.js:
grpc-js's own per-call recorder and its ServerMetricRecorder, which serves
xds.service.orca.v3.OpenRcaService), through the real maitred:

- lb.orca.out_of_band: one StreamCoreMetrics stream per endpoint, asking
  for oob_reporting_period; backends that report only on that stream get
  A58's shares, and the trailers' reports are ignored while it runs;
- the streams follow the endpoint set and the option across reloads;
- a backend without OpenRcaService (UNIMPLEMENTED) is still served, its
  trailers' reports used, the fact logged once;
- an out-of-band report that does not parse is counted and ignored;
- the trailer grpc-js sends reaches the app byte for byte, checked against
  a decoder written here (by field number, not maitred's nor protobuf's).

One worker, calls one after another: the policy's sequence is
deterministic, and only counts decide; the bounds are loose (a fifth of
the expected count). Waits are bounded and wait only for state the test
then checks (streams opened, weights published).
"""

import base64
import os
import shutil
import signal
import struct
import sys
import unittest

from h2raw import H2Client, grpc_messages  # noqa: E402
from harness import (Proc, TestCA, maitred_only, pb, wait_until, free_port, port_accepts, to_yaml, CALL_LIMIT,
                     HERE)

sys.path.insert(0, HERE)
import nodepeers  # noqa: E402
from test_orca import OrcaTest, SVC, POLICY, ORCA_KEY, WEIGHT_LIMIT  # noqa: E402
import test_admin as admin  # noqa: E402

BACKEND_JS = os.path.join(nodepeers.folder("xds"), "orca_backend.js")
PROTOS = os.path.join(nodepeers.SRC, "protos")
UNIMPLEMENTED_LOG = "does not serve xds.service.orca.v3.OpenRcaService"
OOB = {"blackout_period": "0s", "weight_update_period": "100ms", "out_of_band": True,
       "oob_reporting_period": "200ms"}


def decode_report(data):
    """An OrcaLoadReport's fields by number, read here from the wire format
    (varint keys; doubles are wire type 1, little-endian IEEE 754)."""
    out, i = {}, 0

    def varint():
        nonlocal i
        v = shift = 0
        while True:
            b = data[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v
    while i < len(data):
        key = varint()
        field, wt = key >> 3, key & 7
        if wt == 1:
            out[field] = struct.unpack("<d", data[i:i + 8])[0]
            i += 8
        elif wt == 0:
            out[field] = varint()
        elif wt == 2:
            n = varint()
            out.setdefault(field, []).append(data[i:i + n])
            i += n
        else:
            raise AssertionError("wire type %d in a report" % wt)
    return out


def varint(v):
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def oob_request(ms):
    """An OrcaLoadReportRequest asking for a report every ms (below 1 s),
    encoded here: report_interval (1) = Duration{nanos (2)}."""
    d = b"\x10" + varint(ms * 1000000)
    return b"\x0a" + varint(len(d)) + d


class NodeBackend:
    def __init__(self, name, port, proc, events):
        self.name, self.port, self.proc, self.events = name, port, proc, events
        self.address = "127.0.0.1:%d" % port

    def stream_events(self):
        if not os.path.exists(self.events):
            return []
        with open(self.events) as f:
            return f.read().split("\n")[:-1]


class OobTest(OrcaTest):
    def setUp(self):
        super().setUp()
        why = nodepeers.node_missing()
        if why:
            self.skipTest(why)
        nodepeers.install("xds")

    def start_node(self, name, **report):
        """orca_backend.js NAME with --KEY VALUE for each of report
        (cpu=0.2 -> --cpu 0.2, oob_cpu -> --oob-cpu)."""
        ready = os.path.join(self.tmp, name + ".port")
        events = os.path.join(self.tmp, name + ".streams")
        argv = ["node", BACKEND_JS, "--name", name, "--proto", PROTOS, "--ready-file", ready, "--events", events]
        for k, v in report.items():
            argv += ["--" + k.replace("_", "-"), str(v)]
        proc = Proc("node-" + name, argv, self.tmp)
        self._procs.append((proc, False))

        def ready_or_dead():
            if os.path.exists(ready):
                return True
            if not proc.alive():
                raise AssertionError("orca_backend.js %s exited:\n%s" % (name, proc.output()))
            return False
        wait_until(ready_or_dead, 30.0, "orca_backend.js %s" % name)
        with open(ready) as f:
            return NodeBackend(name, int(f.read()), proc, events)

    def orca_cfg(self, ups, **orca):
        svc = self.service(SVC, ups, policy=POLICY)
        svc["lb"]["orca"] = orca
        return self.config([svc], port=self.port, admin="127.0.0.1:%d" % self.admin_port)

    def start_orca(self, ups, **orca):
        self.admin_port = free_port()
        self.port = free_port()
        m = self.start_maitred(self.orca_cfg(ups, **orca))
        wait_until(lambda: port_accepts(self.admin_port, 0.5), CALL_LIMIT, "the admin port")
        return m

    def reload(self, m, ups, **orca):
        with open(m.config_path, "w") as f:
            f.write(to_yaml(self.orca_cfg(ups, **orca)) + "\n")
        m.proc.signal(signal.SIGHUP)

    def oob_states(self):
        return {a: e["orca"]["out_of_band"] for a, e in self.clusters().items()}

    def streams_gauge(self):
        ss = self.metrics()
        return {st: admin.value(ss, "maitred_orca_oob_streams", state=st) or 0
                for st in ("open", "waiting", "unimplemented")}

    def near(self, got, want, what):
        self.assertLessEqual(abs(got - want), max(10, want // 5), "%s: %d calls, expected about %d" % (what, got, want))


class OutOfBand(OobTest):
    @maitred_only
    def test_reports_only_out_of_band_give_a58_shares(self):
        # qps / cpu = 500 : 250 : 125 (4 : 2 : 1), said on the stream only.
        ups = [self.start_node("a", oob_cpu=0.2, oob_qps=100), self.start_node("b", oob_cpu=0.4, oob_qps=100),
               self.start_node("c", oob_cpu=0.8, oob_qps=100)]
        m = self.start_orca(ups, **OOB)
        stub = self.echo(m)
        wait_until(lambda: all(w > 0 for w in self.weights().values()), WEIGHT_LIMIT, "the out-of-band weights")
        # One stream each, asking for the configured period (200 ms).
        for u in ups:
            self.assertEqual(u.stream_events(), ["open 200"], u.name)
        # What the backends send on it, asked directly and decoded here.
        stream = self.channel("127.0.0.1:%d" % ups[2].port).unary_stream(
            "/xds.service.orca.v3.OpenRcaService/StreamCoreMetrics")
        it = stream(oob_request(100), timeout=CALL_LIMIT)
        self.assertEqual(decode_report(next(it)), {1: 0.8, 6: 100.0})
        it.cancel()
        self.assertEqual(set(self.oob_states().values()), {"open"})
        self.assertEqual(self.streams_gauge(), {"open": 3, "waiting": 0, "unimplemented": 0})
        w = self.weights()
        self.assertAlmostEqual(w[ups[0].address], 500.0, places=6)
        self.assertAlmostEqual(w[ups[2].address], 125.0, places=6)
        got = self.count(stub, 700)
        self.near(got["a"], 400, "a (cpu 0.2)")
        self.near(got["b"], 200, "b (cpu 0.4)")
        self.near(got["c"], 100, "c (cpu 0.8)")
        self.stop_maitred(m)

    @maitred_only
    def test_trailers_are_ignored_while_the_stream_reports(self):
        # The trailers say the opposite of the streams (gRFC A58: with
        # out-of-band reports on, the per-call ones do not count).
        ups = [self.start_node("a", oob_cpu=0.2, oob_qps=100, cpu=0.8, qps=100),
               self.start_node("b", oob_cpu=0.8, oob_qps=100, cpu=0.2, qps=100)]
        m = self.start_orca(ups, **OOB)
        stub = self.echo(m)
        wait_until(lambda: all(w > 0 for w in self.weights().values()), WEIGHT_LIMIT, "the out-of-band weights")
        got = self.count(stub, 500)  # 500 : 125 -> 400 : 100
        self.near(got["a"], 400, "a (stream cpu 0.2, trailer 0.8)")
        self.near(got["b"], 100, "b (stream cpu 0.8, trailer 0.2)")
        cl = self.clusters()
        self.assertAlmostEqual(cl[ups[0].address]["orca"]["cpu_utilization"], 0.2)
        self.assertAlmostEqual(cl[ups[1].address]["orca"]["cpu_utilization"], 0.8)
        self.stop_maitred(m)

    @maitred_only
    def test_streams_follow_the_endpoints_and_the_option_across_reloads(self):
        a = self.start_node("a", oob_cpu=0.2, oob_qps=100)
        b = self.start_node("b", oob_cpu=0.4, oob_qps=100)
        c = self.start_node("c", oob_cpu=0.8, oob_qps=100)
        m = self.start_orca([a, b], **OOB)
        wait_until(lambda: a.stream_events() == ["open 200"] and b.stream_events() == ["open 200"], WEIGHT_LIMIT,
                   "a stream to a and to b")
        # b leaves, c comes: b's stream closes, c's opens, a's stays.
        self.reload(m, [a, c], **OOB)
        wait_until(lambda: b.stream_events() == ["open 200", "close"] and c.stream_events() == ["open 200"],
                   WEIGHT_LIMIT, "b's stream closed and c's opened")
        self.assertEqual(a.stream_events(), ["open 200"])
        # Another period: asked again, as the new config says.
        self.reload(m, [a, c], **dict(OOB, oob_reporting_period="300ms"))
        # (The new stream may reach the backend before the old one's close.)
        wait_until(lambda: sorted(a.stream_events()) == ["close", "open 200", "open 300"], WEIGHT_LIMIT,
                   "a's stream asked again for 300 ms")
        # out_of_band off: every stream closes, the trailers count again.
        self.reload(m, [a, c], **dict(OOB, out_of_band=False))
        wait_until(lambda: a.stream_events()[-1:] == ["close"] and c.stream_events()[-1:] == ["close"],
                   WEIGHT_LIMIT, "the streams closed")
        wait_until(lambda: set(self.oob_states().values()) == {"off"}, WEIGHT_LIMIT, "out_of_band off in /clusters")
        self.assertNotIn("maitred_orca_oob_streams", self.metrics_text())
        self.stop_maitred(m)

    def metrics_text(self):
        st, _, body = admin.admin_request(self.admin_port, "GET", "/metrics")
        self.assertEqual(st, 200, body)
        return body if isinstance(body, str) else body.decode()


class Unimplemented(OobTest):
    @maitred_only
    def test_a_backend_without_openrcaservice_is_served_on_its_trailers(self):
        # a has no OpenRcaService (grpc-js answers UNIMPLEMENTED) and
        # reports cpu 0.2 in its trailers; b reports cpu 0.4 on its stream.
        a = self.start_node("a", cpu=0.2, qps=100)
        b = self.start_node("b", oob_cpu=0.4, oob_qps=100)
        m = self.start_orca([a, b], **OOB)
        stub = self.echo(m)
        wait_until(lambda: self.oob_states() == {a.address: "unimplemented", b.address: "open"}, WEIGHT_LIMIT,
                   "a unimplemented, b open")

        def both_weighed():
            self.count(stub, 2)  # a's reports come with its answers
            return all(w > 0 for w in self.weights().values())
        wait_until(both_weighed, WEIGHT_LIMIT, "both weights", step=0.2)
        w = self.weights()
        self.assertAlmostEqual(w[a.address], 500.0, places=6)
        self.assertAlmostEqual(w[b.address], 250.0, places=6)
        got = self.count(stub, 600)  # 500 : 250 -> 400 : 200
        self.near(got["a"], 400, "a (trailers, cpu 0.2)")
        self.near(got["b"], 200, "b (stream, cpu 0.4)")
        self.assertEqual(self.streams_gauge(), {"open": 1, "waiting": 0, "unimplemented": 1})
        self.stop_maitred(m)
        self.assertEqual(m.proc.output().count(UNIMPLEMENTED_LOG), 1, m.proc.output())

    @maitred_only
    def test_a_backend_answering_http_404_is_unimplemented(self):
        # A server or proxy without the path answers a bare HTTP 404, which
        # gRPC maps to UNIMPLEMENTED: the trailers count for that endpoint
        # (it was taken as UNAVAILABLE: waiting for ever, trailers ignored).
        import h2raw

        def script(path, headers):
            if path.startswith("/xds.service.orca.v3.OpenRcaService/"):
                return ("http", 404)
            return ("respond", pb.EchoResponse(instance="a").SerializeToString())
        a = h2raw.H2Upstream(script)
        self.addCleanup(a.close)
        b = self.start_node("b", oob_cpu=0.4, oob_qps=100)
        m = self.start_orca([a, b], **OOB)
        wait_until(lambda: self.oob_states() == {a.address: "unimplemented", b.address: "open"}, WEIGHT_LIMIT,
                   "a unimplemented, b open")
        self.assertEqual(sum(self.count(self.echo(m), 10).values()), 10)
        self.stop_maitred(m)
        self.assertEqual(m.proc.output().count(UNIMPLEMENTED_LOG), 1, m.proc.output())


class Tls(OobTest):
    @maitred_only
    def test_the_stream_goes_over_the_services_tls_and_checks_its_identity(self):
        ca = TestCA(os.path.join(self.tmp, "ca"))
        tls = dict(cert=ca.server_cert, key=ca.server_key)
        a = self.start_node("a", oob_cpu=0.2, oob_qps=100, tls_cert=tls["cert"], tls_key=tls["key"])
        b = self.start_node("b", oob_cpu=0.4, oob_qps=100, tls_cert=tls["cert"], tls_key=tls["key"])
        self.admin_port, self.port = free_port(), free_port()
        # The identity alone names the server (no server_name), as for
        # calls: the certificate's DNS SAN, not the address dialled.
        svc = self.service(SVC, [a, b], policy=POLICY, tls={"ca_file": ca.ca_file,
                                                              "server_identity": "dns:" + ca.server_name})
        svc["lb"]["orca"] = OOB
        other = self.service("maitred.testing.v1.Other", [a], policy=POLICY,
                             tls={"ca_file": ca.ca_file, "server_identity": "dns:other.test"})
        other["lb"]["orca"] = OOB
        m = self.start_maitred(self.config([svc, other], port=self.port, admin="127.0.0.1:%d" % self.admin_port))
        wait_until(lambda: port_accepts(self.admin_port, 0.5), CALL_LIMIT, "the admin port")
        wait_until(lambda: set(self.oob_states().values()) == {"open"}, WEIGHT_LIMIT, "the streams over TLS")
        got = self.count(self.echo(m), 300)  # 500 : 250 -> 200 : 100
        self.near(got["a"], 200, "a (cpu 0.2)")
        self.near(got["b"], 100, "b (cpu 0.4)")
        # The other service expects another identity: its stream to a
        # fails after the handshake, before any request (a's one stream
        # is the first service's).
        mismatch = "expected dns:other.test, presented dns:" + ca.server_name
        wait_until(lambda: mismatch in m.proc.output(), WEIGHT_LIMIT, "the identity mismatch logged")
        self.assertEqual(a.stream_events(), ["open 200"])
        self.stop_maitred(m)

    @maitred_only
    def test_a_stream_reconnects_with_the_rotated_certificates(self):
        # The service's CA file is rotated in place (certwatch: same files,
        # a new context); the backend comes back with a certificate of the
        # new CA. The stream's next connection must take the new context,
        # as the calls' do.
        old, new = TestCA(os.path.join(self.tmp, "old")), TestCA(os.path.join(self.tmp, "new"))
        tls_dir = os.path.join(self.tmp, "tls")
        os.makedirs(tls_dir)
        ca_file = os.path.join(tls_dir, "ca.pem")
        shutil.copy(old.ca_file, ca_file)
        a = self.start_node("a", oob_cpu=0.2, oob_qps=100, tls_cert=old.server_cert, tls_key=old.server_key)
        self.admin_port, self.port = free_port(), free_port()
        svc = self.service(SVC, [a], policy=POLICY, tls={"ca_file": ca_file, "server_name": old.server_name})
        svc["lb"]["orca"] = OOB
        m = self.start_maitred(self.config([svc], port=self.port, admin="127.0.0.1:%d" % self.admin_port))
        wait_until(lambda: port_accepts(self.admin_port, 0.5), CALL_LIMIT, "the admin port")
        wait_until(lambda: self.oob_states() == {a.address: "open"}, WEIGHT_LIMIT, "the stream over TLS")
        shutil.copy(new.ca_file, ca_file + ".tmp")
        os.rename(ca_file + ".tmp", ca_file)
        wait_until(lambda: "changed: new handshakes use them" in m.proc.output(), WEIGHT_LIMIT,
                   "the new CA loaded")
        a.proc.stop()
        b = self.start_node("b", port=a.port, oob_cpu=0.4, oob_qps=100, tls_cert=new.server_cert,
                            tls_key=new.server_key)
        self.assertEqual(self.count(self.echo(m), 3), {"b": 3})  # the calls' connections: the new CA

        def reports_again():
            o = self.clusters()[a.address]["orca"]
            return o["out_of_band"] == "open" and o["cpu_utilization"] == 0.4
        wait_until(reports_again, WEIGHT_LIMIT, "the stream back, over the new CA", step=0.5)
        self.assertEqual(b.stream_events(), ["open 200"])
        self.stop_maitred(m)


class Silence(OobTest):
    @maitred_only
    def test_a_stream_silent_past_its_period_and_a_minute_is_opened_again(self):
        # a's stream sends one report, then nothing, the connection kept (a
        # hung peer, or one gone without a FIN): no PING runs on it, so
        # only the silence tells. Past 200 ms + 60 s, a new stream.
        cpu_qps = struct.pack("<BdBd", 1 << 3 | 1, 0.2, 6 << 3 | 1, 100.0)
        a = self.start_node("a", oob_raw=cpu_qps.hex(), oob_count=1)
        m = self.start_orca([a], **OOB)
        wait_until(lambda: self.oob_states() == {a.address: "open"}, WEIGHT_LIMIT, "a's stream open")
        wait_until(lambda: a.stream_events()[:3] == ["open 200", "close", "open 200"], 60.2 + 2 * WEIGHT_LIMIT,
                   "a's silent stream closed and opened again", step=1.0)
        self.assertIn("the ORCA out-of-band stream ended: no message for 60 s", m.proc.output())
        self.stop_maitred(m)


class Invalid(OobTest):
    @maitred_only
    def test_a_malformed_out_of_band_report_is_counted_and_ignored(self):
        # a's stream sends a truncated varint as each report; b a good one.
        a = self.start_node("a", oob_raw="ffffff")
        b = self.start_node("b", oob_cpu=0.4, oob_qps=100)
        m = self.start_orca([a, b], **OOB)
        stub = self.echo(m)

        def a_counted():
            return self.clusters()[a.address]["orca"]["reports_invalid"] >= 3
        wait_until(a_counted, WEIGHT_LIMIT, "a's invalid reports counted")
        o = self.clusters()[a.address]["orca"]
        self.assertEqual(o["reports"], 0)
        self.assertEqual(o["cpu_utilization"], 0.0)
        self.assertEqual(o["weight"], 0.0)
        ss = self.metrics()
        self.assertGreaterEqual(admin.value(ss, "maitred_orca_reports_invalid_total", service=SVC,
                                            endpoint=a.address), 3)
        self.assertEqual(admin.value(ss, "maitred_orca_reports_invalid_total", service=SVC, endpoint=b.address), 0)
        # Only b has a weight: fewer than two, so round robin, calls served.
        got = self.count(stub, 20)
        self.assertEqual(sorted(got.values()), [10, 10], got)
        self.stop_maitred(m)

    @maitred_only
    def test_an_out_of_band_report_too_long_is_skipped_unread(self):
        # a's reports say cpu 0.2, qps 100, then 100,000 bytes of an unknown
        # field: longer than a trailer's report may be (4096 bytes), so
        # invalid, skipped as it arrives (never held whole), the stream kept.
        cpu_qps = struct.pack("<BdBd", 1 << 3 | 1, 0.2, 6 << 3 | 1, 100.0)
        a = self.start_node("a", oob_raw=cpu_qps.hex(), oob_pad=100000)
        b = self.start_node("b", oob_cpu=0.4, oob_qps=100)
        m = self.start_orca([a, b], **OOB)
        stub = self.echo(m)

        def a_counted():
            return self.clusters()[a.address]["orca"]["reports_invalid"] >= 3
        wait_until(a_counted, WEIGHT_LIMIT, "a's reports too long counted")
        o = self.clusters()[a.address]["orca"]
        self.assertEqual(o["reports"], 0)
        self.assertEqual(o["weight"], 0.0)
        # One stream all along: each report skipped, the next one read.
        self.assertEqual(a.stream_events(), ["open 200"])
        got = self.count(stub, 20)
        self.assertEqual(sorted(got.values()), [10, 10], got)
        self.stop_maitred(m)


class Trailer(OobTest):
    @maitred_only
    def test_grpc_js_trailer_reaches_the_app_byte_for_byte(self):
        ups = [self.start_node("a", cpu=0.25, app=0.5, qps=120.5, eps=3.25)]
        m = self.start_orca(ups, blackout_period="0s")
        for _ in range(3):
            _, through = self.raw_call(m.port, pb.EchoRequest())
            _, direct = self.raw_call(ups[0].port, pb.EchoRequest())
            self.assertIsNotNone(direct)
            self.assertEqual(through, direct)
        rep = decode_report(base64.b64decode(direct + "=" * (-len(direct) % 4)))
        self.assertEqual(rep, {1: 0.25, 6: 120.5, 7: 3.25, 9: 0.5})
        # And maitred read the same figures.
        o = self.clusters()[ups[0].address]["orca"]
        self.assertAlmostEqual(o["cpu_utilization"], 0.25)
        self.assertAlmostEqual(o["application_utilization"], 0.5)
        self.assertAlmostEqual(o["qps"], 120.5)
        self.assertAlmostEqual(o["eps"], 3.25)
        self.stop_maitred(m)


if __name__ == "__main__":
    unittest.main()
