"""xDS from a management server that writes its own bytes: a small ADS
server here (grpcio, a generic handler, messages hand-encoded) sends
DiscoveryResponses tests/xds/server.js cannot (protobufjs encodes only
well-formed, one-per-name resources): a cluster twice in one response,
resent byte for byte after a NACK, a name field written twice, an Any
without a value, a NUL in a type URL, ten thousand resources, resources
that do not decode (a cluster's last good kept, not taken as removed; a
Listener or RouteConfiguration NACKed, not ACKed as absent), resources
not asked for (skipped unread: never a NACK), a million empty ones. What is
asserted is what maitred answered (ACK or NACK, from the requests it sent)
and where calls went; every wait is a hang guard.
"""

import json
import queue
import threading
import time
import unittest
from concurrent import futures

import grpc

from harness import MaitredTest, maitred_only, free_port, wait_until, CALL_LIMIT, pb
from test_admin import admin_request

SVC = "maitred.testing.v1.Echo"
CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LDS = "type.googleapis.com/envoy.config.listener.v3.Listener"
RDS = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
WAIT = 30.0


# --- protobuf wire, by hand ---------------------------------------------------

def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7f, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(no, v):
    """Field no: a varint for an int, else length-delimited bytes or text."""
    if isinstance(v, int):
        return varint(no << 3) + varint(v)
    v = v.encode() if isinstance(v, str) else v
    return varint(no << 3 | 2) + varint(len(v)) + v


def cluster(name, lb_policy=0):
    """An EDS Cluster over ADS (name 1, type 2 = EDS, eds_cluster_config 3
    {eds_config 1 {ads 3}}, lb_policy 6)."""
    b = field(1, name) + field(2, 3) + field(3, field(1, field(3, b"")))
    return b + (field(6, lb_policy) if lb_policy else b"")


def assignment(name, port):
    """cluster_name 1, endpoints 2 {locality 1 {zone 2}, lb_endpoints 2
    {endpoint 1 {address 1 {socket_address 1 {address 2, port_value 3}}}},
    load_balancing_weight 3 {value 1}}."""
    sa = field(2, "127.0.0.1") + field(3, port)
    loc = field(1, field(2, "z1")) + field(2, field(1, field(1, field(1, sa)))) + field(3, field(1, 1))
    return field(1, name) + field(2, loc)


def listener(name, rds_name):
    """An api_listener (name 1, api_listener 19 {api_listener 1: Any}) whose
    HttpConnectionManager (rds 3 {config_source 1 {ads 3}, route_config_name
    2}, http_filters 5 [{name 1, typed_config 4}]) names rds_name."""
    rds = field(1, field(3, b"")) + field(2, rds_name)
    hcm = field(3, rds) + field(5, field(1, "router") + field(4, any_of(ROUTER, b"")))
    return field(1, name) + field(19, field(1, any_of(HCM, hcm)))


def any_of(url, value=None):
    return field(1, url) + (field(2, value) if value is not None else b"")


def response(version, url, resources, nonce):
    return b"".join([field(1, version)] + [field(2, r) for r in resources] + [field(4, url), field(5, nonce)])


def fields(b):
    """(number, int or bytes) of each top-level field (varint and LEN only)."""
    i, out = 0, []

    def v():
        nonlocal i
        n = s = 0
        while True:
            c = b[i]
            i += 1
            n |= (c & 0x7f) << s
            s += 7
            if c < 0x80:
                return n
    while i < len(b):
        tag = v()
        if tag & 7 == 0:
            out.append((tag >> 3, v()))
        elif tag & 7 == 2:
            n = v()
            out.append((tag >> 3, b[i:i + n]))
            i += n
        else:
            raise ValueError("wire type %d in a DiscoveryRequest" % (tag & 7))
    return out


def request(b):
    """A DiscoveryRequest: version_info 1, type_url 4, response_nonce 5,
    error_detail 6 {message 2}."""
    r = {"version": "", "type": "", "nonce": "", "nack": None}
    for no, v in fields(b):
        if no == 1:
            r["version"] = v.decode()
        elif no == 4:
            r["type"] = v.decode()
        elif no == 5:
            r["nonce"] = v.decode()
        elif no == 6:
            r["nack"] = dict(fields(v)).get(2, b"").decode()
    return r


class RawAds:
    """One ADS stream at a time; send() queues bytes on it; log holds every
    DiscoveryRequest decoded."""

    def __init__(self):
        self.log, self.stream = [], None
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        handler = grpc.method_handlers_generic_handler(
            "envoy.service.discovery.v3.AggregatedDiscoveryService",
            {"StreamAggregatedResources": grpc.stream_stream_rpc_method_handler(self.ads)})
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.nonce = 0

    def ads(self, requests, context):
        q = queue.Queue()
        self.stream = q

        def read():
            try:
                for b in requests:
                    with self.lock:
                        self.log.append(request(b))
            except grpc.RpcError:
                pass  # the stream ended: maitred stopped
            q.put(None)
        threading.Thread(target=read, daemon=True).start()
        while True:
            m = q.get()
            if m is None:
                return
            yield m

    def asked(self, url):
        with self.lock:
            return self.stream is not None and any(r["type"] == url for r in self.log)

    def send(self, version, url, resources):
        """Send a response; the request answering it (ACK or NACK)."""
        self.nonce += 1
        nonce = "n%d" % self.nonce
        self.stream.put(response(version, url, resources, nonce))

        def answer():
            with self.lock:
                return next((r for r in self.log if r["nonce"] == nonce), None)
        return wait_until(answer, WAIT, "maitred's answer to " + version)

    def stop(self):
        if self.stream is not None:
            self.stream.put(None)
        self.server.stop(0)


class XdsWireTest(MaitredTest):
    @maitred_only
    def test_a_hostile_servers_responses_are_acked_nacked_and_applied_as_a_fresh_client_would(self):
        a, b = self.start_upstream("a"), self.start_upstream("b")
        ads = RawAds()
        self.addCleanup(ads.stop)
        admin = free_port()
        cfg = self.config([{"name": SVC, "discovery": {"xds": {}}}], admin="127.0.0.1:%d" % admin,
                          xds={"server": "127.0.0.1:%d" % ads.port, "node_id": "n", "zone": "z1"})
        m = self.start_maitred(cfg)
        stub = self.echo(m)
        wait_until(lambda: ads.asked(CDS), WAIT, "the CDS request")
        good, other = cluster(SVC), cluster(SVC, lb_policy=1)  # ROUND_ROBIN, LEAST_REQUEST
        cds = lambda version, resources: ads.send(version, CDS, [any_of(CDS, r) for r in resources])

        def policy():
            dump = json.loads(admin_request(admin, "GET", "/config_dump")[2])["xds"]["clusters"]
            return [(c["name"], c["lb_policy"], c["last_nack"]) for c in dump["resources"]]

        self.assertIsNone(cds("1", [good])["nack"])
        wait_until(lambda: ads.asked(EDS), WAIT, "the EDS request")
        self.assertIsNone(ads.send("e1", EDS, [any_of(EDS, assignment(SVC, a.port))])["nack"])
        wait_until(lambda: stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance == "a", WAIT, "calls on a")
        rr = policy()[0][1]

        # The cluster in force twice, byte for byte: refused all the same.
        r = cds("2", [good, good])
        self.assertEqual((r["version"], r["nack"]), ("1", SVC + ": sent twice in one response"))
        self.assertIsNone(cds("3", [good])["nack"])
        # Refused, then the last good bytes again: accepted, the refusal gone.
        r = cds("4", [cluster(SVC, lb_policy=6)])
        self.assertIn("lb_policy 6", r["nack"])
        self.assertEqual(policy(), [(SVC, rr, r["nack"][len(SVC + ": "):])])
        r = cds("5", [good])
        self.assertEqual((r["version"], r["nack"]), ("5", None))
        self.assertEqual(policy(), [(SVC, rr, None)])
        # A name written twice: the last one counts (protobuf's rule), as
        # the cluster it names is read, resent or not.
        twice = cluster("not." + SVC) + field(1, SVC)
        self.assertIsNone(cds("6", [twice])["nack"])
        self.assertIsNone(cds("7", [twice])["nack"])
        self.assertEqual(cds("8", [twice, good])["nack"], SVC + ": sent twice in one response")
        # Two of one name, the first changed: the first applies (as in a
        # client that never saw the cluster), the second is refused.
        self.assertEqual(cds("9", [other, good])["nack"], SVC + ": sent twice in one response")
        self.assertNotEqual(policy()[0][1], rr)
        self.assertEqual(cds("10", [good, other])["nack"], SVC + ": sent twice in one response")
        self.assertEqual(policy()[0][1], rr)
        # An Any without a value, one whose type URL has a NUL in it.
        self.assertIn("(unnamed)", cds("11", [good, b""])["nack"])
        r = ads.send("12", CDS, [any_of(CDS, good), any_of(CDS + "\0", good)])
        self.assertEqual(r["nack"], "(resource): not a Cluster")
        # Ten thousand clusters, one of them asked for.
        many = [cluster("other.%05d" % i) for i in range(10000)] + [good]
        self.assertEqual(cds("13", many)["nack"], None)
        self.assertEqual(policy(), [(SVC, rr, None)])
        self.assertEqual({stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(5)}, {"a"})
        self.assertIsNone(ads.send("e2", EDS, [any_of(EDS, assignment(SVC, b.port))])["nack"])
        wait_until(lambda: stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance == "b", WAIT, "calls on b")
        self.stop_maitred(m)

    def start_raw(self, services, admin=False, **xds_extra):
        """maitred on a RawAds (self.ads); with admin, an admin port for
        xds_dump."""
        self.ads = RawAds()
        self.addCleanup(self.ads.stop)
        block = {"server": "127.0.0.1:%d" % self.ads.port, "node_id": "n", "zone": "z1"}
        block.update(xds_extra)
        extra = {}
        if admin:
            self.admin = free_port()
            extra["admin"] = "127.0.0.1:%d" % self.admin
        return self.start_maitred(self.config(services, xds=block, **extra))

    def xds_dump(self, kind):
        """/config_dump's xds.<kind> resources (start_raw(admin=True))."""
        return json.loads(admin_request(self.admin, "GET", "/config_dump")[2])["xds"][kind]["resources"]

    def send_cds(self, version, resources):
        return self.ads.send(version, CDS, resources)

    @maitred_only
    def test_an_undecodable_cluster_does_not_remove_the_clusters_in_force(self):
        """A CDS response with one resource whose name cannot be read (its
        bytes do not decode, or its Any names another type) is NACKed; the
        clusters it lacks may be that very resource: Envoy rejects the
        whole update and keeps every cluster. maitred must not take the
        endpoints of a cluster it cannot know was removed."""
        a = self.start_upstream("a")
        services = [{"name": SVC, "discovery": {"xds": {"cluster": "cl-echo"}}},
                    {"name": "other.v1.Other", "discovery": {"xds": {"cluster": "cl-other"}}}]
        m = self.start_raw(services)
        stub = self.echo(m)
        wait_until(lambda: self.ads.asked(CDS), WAIT, "the CDS request")
        good = [any_of(CDS, cluster("cl-echo")), any_of(CDS, cluster("cl-other"))]
        self.assertIsNone(self.send_cds("1", good)["nack"])
        wait_until(lambda: self.ads.asked(EDS), WAIT, "the EDS request")
        self.assertIsNone(self.ads.send("e1", EDS, [any_of(EDS, assignment("cl-echo", a.port))])["nack"])
        wait_until(lambda: stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance == "a", WAIT, "calls on a")
        # cl-echo's bytes cut short: refused under the name read before
        # they end (lib/xds mtd_xds_resource_name), its last good kept.
        broken = cluster("cl-echo")[:-3]
        r = self.send_cds("2", [any_of(CDS, cluster("cl-other")), any_of(CDS, broken)])
        self.assertTrue(r["nack"].startswith("cl-echo: "), r["nack"])
        self.assertEqual({stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(5)}, {"a"})
        # cl-echo wrapped in an Any of another type.
        r = self.send_cds("3", [any_of(CDS, cluster("cl-other")), any_of(EDS, cluster("cl-echo"))])
        self.assertIsNotNone(r["nack"])
        self.assertEqual({stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(5)}, {"a"})
        # Bytes cut short after another name: quoted in the NACK, but only
        # a guess (the bytes that went wrong may be cl-echo's), so cl-echo,
        # absent from the response, is not taken as removed.
        r = self.send_cds("4", [any_of(CDS, cluster("cl-other")), any_of(CDS, cluster("cl-zz")[:-3])])
        self.assertTrue(r["nack"].startswith("cl-zz: "), r["nack"])
        self.assertEqual({stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(5)}, {"a"})
        # A cluster without a name, its name left out (as proto3 writers
        # do) or written empty: one message to any decoder, no name to
        # read either way, so it may be cl-echo.
        nameless = cluster("cl-echo")[len(field(1, "cl-echo")):]
        for i, body in enumerate((nameless, field(1, "") + nameless)):
            r = self.send_cds("5.%d" % i, [any_of(CDS, cluster("cl-other")), any_of(CDS, body)])
            self.assertEqual(r["nack"], "(unnamed): name: empty, too long or not printable")
            self.assertEqual({stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(5)}, {"a"})
        self.stop_maitred(m)

    @maitred_only
    def test_a_refused_resource_whose_name_cannot_be_read_is_not_the_cluster_named_unnamed(self):
        """A Cluster or an assignment refused without a name read (none,
        a NUL in it) is NACKed under "(unnamed)"; the refusal is not the
        cluster or EDS name "(unnamed)"'s: its services wait for it on,
        they are not failed with another resource's refusal."""
        a = self.start_upstream("a")
        m = self.start_raw([{"name": SVC, "discovery": {"xds": {"cluster": "(unnamed)"}}}], admin=True)
        stub = self.echo(m)

        def nacks(kind):
            return [(c["name"], c.get("last_nack")) for c in self.xds_dump(kind)]
        wait_until(lambda: self.ads.asked(CDS), WAIT, "the CDS request")
        nameless = cluster("(unnamed)")[len(field(1, "(unnamed)")):]
        for i, body in enumerate((nameless, field(1, "(unnamed)\0") + nameless)):
            r = self.send_cds("c%d" % i, [any_of(CDS, body)])
            self.assertTrue(r["nack"].startswith("(unnamed): "), r["nack"])
            self.assertEqual(nacks("clusters"), [("(unnamed)", None)])
        self.assertIsNone(self.send_cds("1", [any_of(CDS, cluster("(unnamed)"))])["nack"])
        wait_until(lambda: self.ads.asked(EDS), WAIT, "the EDS request")
        nameless = assignment("(unnamed)", a.port)[len(field(1, "(unnamed)")):]
        for i, body in enumerate((nameless, field(1, "(unnamed)\0") + nameless)):
            r = self.ads.send("e%d" % i, EDS, [any_of(EDS, body)])
            self.assertTrue(r["nack"].startswith("(unnamed): "), r["nack"])
            self.assertEqual(nacks("endpoints"), [("(unnamed)", None)])
        self.assertIsNone(self.ads.send("e9", EDS, [any_of(EDS, assignment("(unnamed)", a.port))])["nack"])
        wait_until(lambda: stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance == "a", WAIT, "calls on a")
        self.stop_maitred(m)

    @maitred_only
    def test_an_assignment_or_cluster_sent_twice_in_one_response_is_nacked_the_first_standing(self):
        """operating.md: a name asked for twice in one response (any type)
        is NACKed 'NAME: sent twice in one response'; the first of them
        applies as if alone (its refusal, or none, is the resource's)."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        m = self.start_raw([{"name": SVC, "discovery": {"xds": {}}}], admin=True)
        stub = self.echo(m)

        def nacks(kind):
            return [(c["name"], c.get("last_nack")) for c in self.xds_dump(kind)]
        wait_until(lambda: self.ads.asked(CDS), WAIT, "the CDS request")
        self.assertIsNone(self.send_cds("1", [any_of(CDS, cluster(SVC))])["nack"])
        wait_until(lambda: self.ads.asked(EDS), WAIT, "the EDS request")
        twice = SVC + ": sent twice in one response"
        # Two assignments of the cluster: the first (a) stands.
        r = self.ads.send("e1", EDS, [any_of(EDS, assignment(SVC, a.port)), any_of(EDS, assignment(SVC, b.port))])
        self.assertEqual((r["version"], r["nack"]), ("", twice))
        self.assertEqual({stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(4)}, {"a"})
        # The last good resent, then a changed one: the first stands still.
        r = self.ads.send("e2", EDS, [any_of(EDS, assignment(SVC, a.port)), any_of(EDS, assignment(SVC, b.port))])
        self.assertEqual((r["version"], r["nack"]), ("", twice))
        self.assertEqual({stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(4)}, {"a"})
        # A refused one first: it stands (the last good kept, refused).
        broken = field(1, SVC) + field(2, field(2, field(1, field(1, field(1, field(1, field(3, 0)))))))
        r = self.ads.send("e3", EDS, [any_of(EDS, broken), any_of(EDS, assignment(SVC, b.port))])
        self.assertTrue(r["nack"].startswith(SVC + ": ") and r["nack"].endswith("; " + twice), r["nack"])
        self.assertEqual({stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(4)}, {"a"})
        # A good one first and a refused one second: the second is only
        # 'sent twice', the first is in force with no refusal of its own.
        r = self.ads.send("e4", EDS, [any_of(EDS, assignment(SVC, b.port)), any_of(EDS, broken)])
        self.assertEqual((r["version"], r["nack"]), ("", twice))
        wait_until(lambda: stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance == "b", WAIT, "calls on b")
        self.assertEqual(nacks("endpoints"), [(SVC, None)])
        r = self.send_cds("2", [any_of(CDS, cluster(SVC, lb_policy=1)), any_of(CDS, cluster(SVC, lb_policy=6))])
        self.assertEqual((r["version"], r["nack"]), ("1", twice))
        self.assertEqual(nacks("clusters"), [(SVC, None)])
        self.stop_maitred(m)

    @maitred_only
    def test_a_listener_sent_twice_to_calls_waiting_for_the_routes(self):
        """Calls waiting for the listener's first routes (xds.initial_wait)
        hear what the first Listener L of a response says, not the second:
        a good one then a broken one keeps them waiting for its route
        configuration (and the first of two RouteConfigurations sends
        them); a broken one then a good one refuses L, and they go by
        :path (which names no service here: UNIMPLEMENTED)."""
        def rc(name, cl):
            route = field(1, field(1, "")) + field(2, field(1, cl))
            return field(1, name) + field(2, field(1, "vh") + field(2, "*") + field(3, route))
        broken = field(1, "L") + field(19, 5)
        for good_first in (True, False):
            a = self.start_upstream("a")
            m = self.start_raw([{"name": "pool-a", "discovery": {"xds": {"cluster": "C"}}}], listener="L",
                               initial_wait="60s")
            wait_until(lambda: self.ads.asked(CDS), WAIT, "the CDS request")
            self.assertIsNone(self.send_cds("c1", [any_of(CDS, cluster("C"))])["nack"])
            wait_until(lambda: self.ads.asked(EDS), WAIT, "the EDS request")
            self.assertIsNone(self.ads.send("e1", EDS, [any_of(EDS, assignment("C", a.port))])["nack"])
            wait_until(lambda: self.ads.asked(LDS), WAIT, "the LDS request")
            f = self.echo(m).Unary.future(pb.EchoRequest(), timeout=30)
            time.sleep(0.5)
            self.assertFalse(f.done(), "the call did not wait for the routes")
            pair = [listener("L", "R"), broken] if good_first else [broken, listener("L", "R")]
            r = self.ads.send("l1", LDS, [any_of(LDS, b) for b in pair])
            self.assertTrue(r["nack"].endswith("L: sent twice in one response"), r["nack"])
            if good_first:
                self.assertEqual(r["nack"], "L: sent twice in one response")
                time.sleep(0.5)
                self.assertFalse(f.done(), "the call stopped waiting for R")
                wait_until(lambda: self.ads.asked(RDS), WAIT, "the RDS request")
                r = self.ads.send("r1", RDS, [any_of(RDS, rc("R", "C")), any_of(RDS, rc("R", "nope"))])
                self.assertEqual(r["nack"], "R: sent twice in one response")
                self.assertEqual(f.result(timeout=CALL_LIMIT).instance, "a")
            else:
                with self.assertRaises(grpc.RpcError) as e:
                    f.result(timeout=CALL_LIMIT)
                self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
                self.assertIn("listener L: refused: calls are routed by :path", m.proc.output())
            self.stop_maitred(m)

    @maitred_only
    def test_an_undecodable_listener_or_route_configuration_is_nacked(self):
        """A Listener (or RouteConfiguration) whose bytes do not decode is
        NACKed (as Envoy and gRPC do), not ACKed as if absent."""
        self.start_upstream("a")
        m = self.start_raw([{"name": SVC, "discovery": {"xds": {}}}], listener="L")
        wait_until(lambda: self.ads.asked(LDS), WAIT, "the LDS request")
        # A Listener cut short after the name M: it may be L, so L is not
        # absent (calls are not yet routed by :path; they wait for L).
        r = self.ads.send("l0", LDS, [any_of(LDS, listener("M", "R")[:-2])])
        self.assertTrue(r["nack"].startswith("M: a Listener whose name is not sure"), r["nack"])
        self.assertNotIn("absent from the server's listeners", m.proc.output())
        # name L, then api_listener (19) as a varint: protobuf-c refuses it.
        r = self.ads.send("l1", LDS, [any_of(LDS, field(1, "L") + field(19, 5))])
        self.assertIsNotNone(r["nack"], "an undecodable Listener was ACKed")
        self.assertTrue(r["nack"].startswith("L: "), r["nack"])
        # A good listener naming R, then R undecodable.
        self.assertIsNone(self.ads.send("l2", LDS, [any_of(LDS, listener("L", "R"))])["nack"])
        wait_until(lambda: self.ads.asked(RDS), WAIT, "the RDS request")
        r = self.ads.send("r1", RDS, [any_of(RDS, field(1, "R") + field(2, 7))])
        self.assertIsNotNone(r["nack"], "an undecodable RouteConfiguration was ACKed")
        self.assertTrue(r["nack"].startswith("R: "), r["nack"])
        # One name twice in a response: the first stands, the second is
        # refused (as in CDS); a broken one and a good one of that name too.
        self.assertIsNone(self.ads.send("r2", RDS, [any_of(RDS, field(1, "R"))])["nack"])
        r = self.ads.send("r3", RDS, [any_of(RDS, field(1, "R")), any_of(RDS, field(1, "R"))])
        self.assertEqual((r["version"], r["nack"]), ("r2", "R: sent twice in one response"))
        r = self.ads.send("l3", LDS, [any_of(LDS, listener("L", "R")), any_of(LDS, listener("L", "R2"))])
        self.assertEqual((r["version"], r["nack"]), ("l2", "L: sent twice in one response"))
        r = self.ads.send("l4", LDS, [any_of(LDS, listener("L", "R")[:-2]), any_of(LDS, listener("L", "R"))])
        self.assertTrue(r["nack"].endswith("; L: sent twice in one response"), r["nack"])
        self.stop_maitred(m)

    @maitred_only
    def test_a_resource_whose_name_cannot_be_read_is_not_the_one_named_unnamed(self):
        """"(unnamed)" is what maitred calls a resource whose name it cannot
        read (none, a NUL in it), and a name a listener or route
        configuration may have too. A Listener or RouteConfiguration
        without a name, or with a NUL in it, is not the one asked for
        under that name (a gRPC client would not take
        it): NACKed as one whose name is not sure, not refused as that one
        (which sent the calls waiting for its routes on by :path)."""
        self.start_upstream("a")
        m = self.start_raw([{"name": SVC, "discovery": {"xds": {}}}], listener="(unnamed)")
        wait_until(lambda: self.ads.asked(LDS), WAIT, "the LDS request")
        nameless = listener("(unnamed)", "(unnamed)")[len(field(1, "(unnamed)")):]
        r = self.ads.send("l1", LDS, [any_of(LDS, nameless)])
        # It decodes and holds no NUL: the NACK says why its name is not sure.
        self.assertEqual(r["nack"], "(unnamed): a Listener whose name is not sure (it does not decode, or its name "
                                    "is missing or holds a NUL)")
        self.assertNotIn("refused: calls are routed by :path", m.proc.output())
        self.assertIsNone(self.ads.send("l2", LDS, [any_of(LDS, listener("(unnamed)", "(unnamed)"))])["nack"])
        wait_until(lambda: self.ads.asked(RDS), WAIT, "the RDS request")
        # virtual_hosts 2 {name 1, domains 2, routes 3 {match 1 {prefix 1}, route 2 {cluster 1}}}
        routes = field(2, field(1, "vh") + field(2, "*") + field(3, field(1, field(1, "/")) + field(2, field(1, SVC))))
        for i, body in enumerate((routes, field(1, "(unnamed)\0") + routes)):
            r = self.ads.send("r%d" % i, RDS, [any_of(RDS, body)])
            self.assertEqual(r["nack"], "(unnamed): a RouteConfiguration whose name is not sure (it does not "
                                        "decode, or its name is missing or holds a NUL)")
        # A name of 1025 bytes is sure, and not "(unnamed)": skipped.
        self.assertIsNone(self.ads.send("r9", RDS, [any_of(RDS, field(1, "n" * 1025) + routes)])["nack"])
        self.assertNotIn("its route configuration was refused", m.proc.output())
        self.stop_maitred(m)


    @maitred_only
    def test_resources_not_asked_for_are_not_judged(self):
        """A server may send more than was asked for (istiod answers CDS
        with every cluster of the mesh: STATIC, ORIGINAL_DST, STRICT_DNS
        ones too). gRPC's clients skip what they did not subscribe to and
        Envoy takes every type: a response whose subscribed resources are
        good is ACKed, whatever the others hold."""
        a = self.start_upstream("a")
        m = self.start_raw([{"name": SVC, "discovery": {"xds": {}}}])
        stub = self.echo(m)
        wait_until(lambda: self.ads.asked(CDS), WAIT, "the CDS request")
        static = field(1, "BlackHoleCluster") + field(2, 0)  # type STATIC
        # A name of 1025 bytes is sure and longer than any name asked for
        # (1024 at most): not asked for either.
        long = cluster("n" * 1025)
        r = self.send_cds("1", [any_of(CDS, static), any_of(CDS, long), any_of(CDS, cluster(SVC))])
        self.assertEqual((r["version"], r["nack"]), ("1", None))
        wait_until(lambda: self.ads.asked(EDS), WAIT, "the EDS request")
        dns = field(1, "outbound|80||example.com") + field(2, field(2, field(1, field(1, field(1, field(
            1, field(2, "example.com") + field(3, 80)))))))
        r = self.ads.send("e1", EDS, [any_of(EDS, dns), any_of(EDS, assignment("n" * 1025, a.port)),
                                      any_of(EDS, assignment(SVC, a.port))])
        self.assertEqual((r["version"], r["nack"]), ("e1", None))
        wait_until(lambda: stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance == "a", WAIT, "calls on a")
        # Nor does it keep the cluster the response lacks.
        r = self.send_cds("2", [any_of(CDS, static), any_of(CDS, long)])
        self.assertEqual((r["version"], r["nack"]), ("2", None))
        wait_until(lambda: "cluster %s is no longer served" % SVC in m.proc.output(), WAIT, "the cluster's removal")
        self.stop_maitred(m)

    @maitred_only
    def test_a_cluster_whose_tls_is_only_in_transport_socket_matches_says_its_connections_are_h2c(self):
        """transport_socket_matches (field 43) is not read, as gRPC's clients
        do not read it: a cluster whose TLS is only there (Istio's tlsMode
        matches) is ACKed and connects without TLS, and maitred says so
        once, not at each resend; matches holding no TLS say nothing."""
        a = self.start_upstream("a")
        m = self.start_raw([{"name": SVC, "discovery": {"xds": {}}}], admin=True)
        stub = self.echo(m)

        def transport():
            return [c.get("transport") for c in self.xds_dump("clusters")]
        wait_until(lambda: self.ads.asked(CDS), WAIT, "the CDS request")
        def match(name, type_url):
            return field(43, field(1, name) + field(3, field(1, "tls") + field(3, field(1, type_url))))
        tls_url = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
        raw_url = "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"
        # Istio's pair: TLS for endpoints labelled tlsMode istio, plaintext else.
        matched = cluster(SVC) + match("tlsMode-istio", tls_url) + match("tlsMode-disabled", raw_url)
        self.assertIsNone(self.send_cds("1", [any_of(CDS, matched)])["nack"])
        wait_until(lambda: self.ads.asked(EDS), WAIT, "the EDS request")
        self.assertIsNone(self.ads.send("e1", EDS, [any_of(EDS, assignment(SVC, a.port))])["nack"])
        wait_until(lambda: stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance == "a", WAIT, "calls on a")
        warning = "xds: cluster %s: its TLS is in transport_socket_matches" % SVC
        self.assertEqual(m.proc.output().count(warning), 1)
        self.assertEqual(transport(), ["h2c (TLS only in transport_socket_matches, not read)"])
        self.assertIsNone(self.send_cds("2", [any_of(CDS, matched)])["nack"])
        self.assertIsNone(self.send_cds("3", [any_of(CDS, cluster(SVC))])["nack"])
        self.assertEqual(transport(), ["h2c"])
        # Matches with no TLS in them (a raw_buffer one): nothing to say.
        self.assertIsNone(self.send_cds("4", [any_of(CDS, cluster(SVC) + match("plain", raw_url))])["nack"])
        self.assertEqual(transport(), ["h2c"])
        self.assertEqual({stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(3)}, {"a"})
        self.assertEqual(m.proc.output().count(warning), 1)
        self.stop_maitred(m)

    @maitred_only
    def test_a_response_of_too_many_resources_is_nacked_unread(self):
        """A million and one empty resources (2 MB): NACKed naming the
        bound, none read (their slices alone would take 32 MB; 60 MB of
        them took maitred's resident memory to 1 GB), the last good
        cluster kept."""
        a = self.start_upstream("a")
        m = self.start_raw([{"name": SVC, "discovery": {"xds": {}}}])
        stub = self.echo(m)
        wait_until(lambda: self.ads.asked(CDS), WAIT, "the CDS request")
        self.assertIsNone(self.send_cds("1", [any_of(CDS, cluster(SVC))])["nack"])
        wait_until(lambda: self.ads.asked(EDS), WAIT, "the EDS request")
        self.assertIsNone(self.ads.send("e1", EDS, [any_of(EDS, assignment(SVC, a.port))])["nack"])
        wait_until(lambda: stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance == "a", WAIT, "calls on a")
        r = self.send_cds("2", [any_of(CDS, cluster(SVC, lb_policy=1))] + [b""] * 1000001)
        self.assertEqual((r["version"], r["nack"]),
                         ("1", "(response): 1000002 resources, more than 1000000 in one response: none read"))
        self.assertEqual({stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(5)}, {"a"})
        self.stop_maitred(m)

    @maitred_only
    def test_a_nack_held_back_by_the_rate_limit_is_logged_once_the_second_is_over(self):
        """Two NACKs of clusters within a second, then none: the first is
        logged at once, the second (another reason) once the second is
        over, not never."""
        self.start_upstream("a")
        m = self.start_raw([{"name": SVC, "discovery": {"xds": {}}}])
        wait_until(lambda: self.ads.asked(CDS), WAIT, "the CDS request")
        r1 = self.send_cds("1", [any_of(CDS, cluster(SVC, lb_policy=6))])
        r2 = self.send_cds("2", [any_of(CDS, cluster(SVC, lb_policy=7))])
        self.assertIn("lb_policy 6", r1["nack"])
        self.assertIn("lb_policy 7", r2["nack"])

        def logged(what):
            return [line for line in m.proc.output().splitlines() if "NACK of cluster" in line and what in line]
        wait_until(lambda: logged("lb_policy 7"), WAIT, "the second NACK's line")
        self.assertEqual(len(logged("lb_policy 6")), 1)
        self.assertEqual(len(logged("lb_policy 7")), 1)
        self.stop_maitred(m)

if __name__ == "__main__":
    unittest.main()
