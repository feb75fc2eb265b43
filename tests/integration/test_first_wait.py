"""A call to a service whose endpoint source has not answered yet waits
for its first endpoint set (discovery.initial_wait) instead of failing at
once: at startup, and for a cluster an xDS route just started naming. The
wait ends with the set (the call proceeds), at the call's deadline
(DEADLINE_EXCEEDED naming what it waited for), at initial_wait
(UNAVAILABLE naming it), when the client cancels (nothing left behind:
checked under ASan with the slabs off), when a reload removes the service
or a drain starts (UNAVAILABLE at once). Sources here are tests/xds's
management server, which answers only what a test set.

That a call waited is read from /metrics (maitred_first_endpoints_waits_total)
before the set is given, so no timing decides a pass.
"""

import os
import re
import signal
import time
import urllib.parse

import grpc

from harness import maitred_only, pb, free_port, wait_until, CALL_LIMIT, STOP_LIMIT
from h2raw import H2Client, grpc_frame
from test_admin import admin_request, samples
from test_etcd import Load
from test_xds import XdsBase, SVC, WAIT
import xds
from xds import cluster, assignment, locality, nacked

PATH = "/" + SVC + "/Unary"


def total(port, name):
    """The sum of every sample of counter `name` on /metrics (0 if none)."""
    st, _, body = admin_request(port, "GET", "/metrics")
    if st != 200:
        raise AssertionError("/metrics answered %d: %s" % (st, body))
    return sum(v for (n, _), v in samples(body).items() if n == name)


def waits(port):
    return total(port, "maitred_first_endpoints_waits_total")


def status_of(st):
    """(grpc-status, decoded grpc-message) of a raw stream's answer."""
    h = st.status_headers() or {}
    return h.get("grpc-status"), urllib.parse.unquote(h.get("grpc-message", ""))


class FirstWaitTest(XdsBase):

    def start(self, initial_wait=None, extra_services=(), env=None):
        self.admin = free_port()
        disc = {"xds": {}}
        if initial_wait is not None:
            disc["initial_wait"] = initial_wait
        services = [{"name": SVC, "discovery": disc}] + list(extra_services)
        cfg = self.xds_config(services, admin=self.admin)
        m = self.start_maitred(cfg, env=env)
        self.server.wait_for(lambda log: any(r["type_url"] == xds.CDS for r in log), WAIT, "a CDS request")
        return m, cfg

    def futures(self, stub, n, timeout=CALL_LIMIT):
        return [stub.Unary.future(pb.EchoRequest(payload=b"w%d" % i), timeout=timeout) for i in range(n)]

    @maitred_only
    def test_calls_at_startup_wait_for_the_cluster_and_its_endpoints(self):
        up = self.start_upstream("a")
        self.server.start()
        m, _ = self.start()
        stub = self.echo(m)
        calls = self.futures(stub, 6)
        wait_until(lambda: waits(self.admin) >= 6, WAIT, "six calls waiting")
        # The cluster, then (later) its endpoints: the calls wait on.
        self.server.set("cluster", [cluster(SVC)])
        self.server.wait_for(lambda log: any(r["type_url"] == xds.EDS for r in log), WAIT, "the EDS request")
        more = self.futures(stub, 2)
        wait_until(lambda: waits(self.admin) >= 8, WAIT, "two more calls waiting, for the endpoints")
        for f in calls + more:
            self.assertFalse(f.done(), "a call ended before its service had endpoints")
        self.assertEqual(total(self.admin, "maitred_first_endpoints_waiting"), 8)
        self.server.set("endpoint", [assignment(SVC, [locality([("127.0.0.1", up.port)])])])
        for i, f in enumerate(calls + more):
            r = f.result(timeout=CALL_LIMIT)
            self.assertEqual(r.instance, "a")
        self.assertEqual(total(self.admin, "maitred_first_endpoints_waiting"), 0)
        self.assertEqual(total(self.admin, "maitred_first_endpoints_wait_expired_total"), 0)
        self.stop_maitred(m)

    @maitred_only
    def test_the_request_body_sent_while_waiting_reaches_the_upstream(self):
        up = self.start_upstream("a")
        self.server.start()
        m, _ = self.start()
        c = H2Client(m.port)
        self.addCleanup(c.close)
        sid = c.call(PATH, messages=[], end=False)
        wait_until(lambda: waits(self.admin) >= 1, WAIT, "the call waiting")
        body = b"x" * 60000  # within the window the client knows before SETTINGS
        frame = grpc_frame(pb.EchoRequest(payload=body).SerializeToString())
        for i in range(0, len(frame), 16000):
            c.conn.send_data(sid, frame[i:i + 16000], end_stream=i + 16000 >= len(frame))
        c._flush()
        self.serve([up])
        st = c.wait(sid)
        self.assertEqual(status_of(st)[0], "0", st.events)
        resp = pb.EchoResponse()
        resp.ParseFromString(st.body[5:])
        self.assertEqual((resp.instance, resp.payload), ("a", body))
        self.stop_maitred(m)

    @maitred_only
    def test_a_deadline_shorter_than_the_wait_names_what_was_awaited(self):
        self.server.start()
        m, _ = self.start()
        c = H2Client(m.port)
        self.addCleanup(c.close)
        sid = c.call(PATH, messages=[pb.EchoRequest().SerializeToString()], timeout_header="200m")
        st = c.wait(sid)
        code, msg = status_of(st)
        self.assertEqual(code, "4", st.events)  # DEADLINE_EXCEEDED
        self.assertIn("waiting for the first endpoints of service " + SVC, msg)
        self.assertIn("xds: waiting for cluster " + SVC, msg)
        self.assertEqual(waits(self.admin), 1)
        self.assertEqual(total(self.admin, "maitred_first_endpoints_wait_expired_total"), 1)
        self.stop_maitred(m)

    @maitred_only
    def test_initial_wait_bounds_a_call_without_a_shorter_deadline(self):
        self.server.start()
        m, _ = self.start(initial_wait="300ms")
        stub = self.echo(m)
        with self.assertRaises(grpc.RpcError) as e:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("xds: waiting for cluster " + SVC, e.exception.details())
        self.assertIn("discovery.initial_wait", e.exception.details())
        self.assertEqual(total(self.admin, "maitred_first_endpoints_wait_expired_total"), 1)
        self.stop_maitred(m)

    @maitred_only
    def test_initial_wait_0_fails_at_once_and_an_answer_stops_the_waiting(self):
        """initial_wait 0: today's behaviour. An answer with no endpoint,
        and a refused cluster, are answers: the calls waiting then fail
        with that reason, and later calls fail at once."""
        self.server.start()
        m, cfg = self.start(initial_wait="0s")
        stub = self.echo(m)
        with self.assertRaises(grpc.RpcError) as e:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("xds: waiting for cluster", e.exception.details())
        self.assertEqual(waits(self.admin), 0)
        self.stop_maitred(m)
        # Waiting, then an assignment without endpoints: they fail naming it.
        m, _ = self.start()
        stub = self.echo(m)
        calls = self.futures(stub, 3)
        wait_until(lambda: waits(self.admin) >= 3, WAIT, "three calls waiting")
        self.server.set("cluster", [cluster(SVC)])
        self.server.set("endpoint", [assignment(SVC, [])])
        for f in calls:
            with self.assertRaises(grpc.RpcError) as e:
                f.result(timeout=CALL_LIMIT)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertIn("has no endpoint that may be picked", e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertIn("has no endpoint that may be picked", e.exception.details())
        self.assertEqual(waits(self.admin), 3)
        self.stop_maitred(m)

    @maitred_only
    def test_a_refused_cluster_ends_the_wait_with_the_refusal(self):
        self.server.start()
        m, _ = self.start()
        stub = self.echo(m)
        calls = self.futures(stub, 2)
        wait_until(lambda: waits(self.admin) >= 2, WAIT, "two calls waiting")
        self.server.set("cluster", [cluster(SVC, lb_policy="CLUSTER_PROVIDED")])
        self.server.wait_for(lambda log: any(xds.nacked(r, xds.CDS) for r in log), WAIT, "the CDS NACK")
        for f in calls:
            with self.assertRaises(grpc.RpcError) as e:
                f.result(timeout=CALL_LIMIT)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertIn("xds: refused cluster " + SVC, e.exception.details())
            self.assertIn("lb_policy", e.exception.details())
        # A good cluster: calls wait for its endpoints; a refused first
        # assignment ends them too.
        self.server.set("cluster", [cluster(SVC)])
        self.server.wait_for(lambda log: any(r["type_url"] == xds.EDS for r in log), WAIT, "the EDS request")
        calls = self.futures(stub, 2)
        wait_until(lambda: waits(self.admin) >= 4, WAIT, "two calls waiting for the endpoints")
        self.server.set("endpoint", [assignment(SVC, [locality([xds.lb_endpoint("a.example", 1)])])])
        for f in calls:
            with self.assertRaises(grpc.RpcError) as e:
                f.result(timeout=CALL_LIMIT)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertIn("xds: refused the endpoints of cluster " + SVC, e.exception.details())
            self.assertIn("is not a numeric IP", e.exception.details())
        self.stop_maitred(m)

    @maitred_only
    def test_cancelled_waiting_calls_leave_nothing_behind(self):
        """Calls reset by their client, and calls whose connection went,
        while they wait: freed (ASan's leak check at exit, the slabs off so
        that every call is its own allocation); maitred serves on."""
        up = self.start_upstream("a")
        self.server.start()
        m, _ = self.start(env={"MAITRED_SLAB": "0"})
        c1, c2 = H2Client(m.port), H2Client(m.port)
        self.addCleanup(c1.close)
        self.addCleanup(c2.close)
        msg = pb.EchoRequest().SerializeToString()
        s1 = [c1.call(PATH, messages=[msg], end=False) for _ in range(40)]
        for _ in range(40):
            c2.call(PATH, messages=[msg])
        wait_until(lambda: waits(self.admin) >= 80, WAIT, "eighty calls waiting")
        for sid in s1:
            c1.reset(sid)
        c2.close()
        # A reset call's end is in the access figures: the calls ended, and
        # none waits any more.
        wait_until(lambda: total(self.admin, "maitred_calls_total") >= 80, WAIT, "the calls' ends counted")
        wait_until(lambda: total(self.admin, "maitred_first_endpoints_waiting") == 0, WAIT, "no call waiting")
        self.serve([up])
        stub = self.echo(m)
        self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "a")
        self.assertEqual(total(self.admin, "maitred_first_endpoints_wait_expired_total"), 0)
        self.stop_maitred(m)

    @maitred_only
    def test_past_4096_waiting_calls_a_call_fails_at_once_naming_the_cap(self):
        """A client cannot grow maitred without bound by opening calls to a
        service that never answers: past 4,096 waiting calls on a worker
        (one here), a call fails at once; the waiting ones wait on."""
        self.server.start()
        m, _ = self.start()
        clients = [H2Client(m.port) for _ in range(5)]
        for c in clients:
            self.addCleanup(c.close)
            c.pump(lambda: c.conn.remote_settings.max_concurrent_streams > 1000, 5)
        msg = pb.EchoRequest().SerializeToString()
        for i, c in enumerate(clients):
            for _ in range(1000 if i < 4 else 96):
                c.call(PATH, messages=[msg])
        wait_until(lambda: waits(self.admin) >= 4096, WAIT, "4,096 calls waiting")
        last = clients[-1]
        sid = last.call(PATH, messages=[msg])
        code, text = status_of(last.wait(sid))
        self.assertEqual(code, "14", text)  # UNAVAILABLE, at once
        self.assertIn("4096 calls of this worker wait for first endpoints already", text)
        self.assertIn("xds: waiting for cluster " + SVC, text)
        self.assertEqual(waits(self.admin), 4096)
        self.assertEqual(total(self.admin, "maitred_first_endpoints_wait_refused_total"), 1)
        self.assertFalse(any(st.done for c in clients for s_id, st in c.streams.items() if s_id != sid),
                         "a waiting call ended")
        self.stop_maitred(m)

    @maitred_only
    def test_a_reload_that_removes_the_service_ends_its_waiting_calls(self):
        up = self.start_upstream("a")
        self.server.start()
        other = {"name": "shop.Other", "endpoints": [{"address": "127.0.0.1:%d" % up.port}]}
        m, cfg = self.start(extra_services=[other])
        stub = self.echo(m)
        calls = self.futures(stub, 3)
        wait_until(lambda: waits(self.admin) >= 3, WAIT, "three calls waiting")
        cfg["services"] = [other]
        self.write_config(cfg, os.path.basename(m.config_path))
        for f in calls:
            with self.assertRaises(grpc.RpcError) as e:
                f.result(timeout=CALL_LIMIT)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertIn("left maitred's config while the call waited", e.exception.details())
        self.stop_maitred(m)

    @maitred_only
    def test_a_drain_ends_the_waiting_calls_at_once(self):
        """The calls would wait an hour: the drain ends them, and maitred
        exits (its drain_timeout, 5 s, is not what ends them)."""
        self.server.start()
        m, cfg = self.start(initial_wait="3600s")
        stub = self.echo(m)
        calls = self.futures(stub, 3)
        wait_until(lambda: waits(self.admin) >= 3, WAIT, "three calls waiting")
        m.proc.signal(signal.SIGTERM)
        for f in calls:
            with self.assertRaises(grpc.RpcError) as e:
                f.result(timeout=CALL_LIMIT)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertIn("maitred is draining", e.exception.details())
        m.proc.checked = True
        rc = m.proc.wait(STOP_LIMIT)
        self.assertEqual(rc, 0, "maitred exited %s after SIGTERM" % rc)
        self.assertEqual(m.proc.sanitizer_report(), [])


class FirstWaitRoutesTest(XdsBase):
    """A route that starts naming a cluster maitred does not follow yet:
    the service made for it waits for the cluster, and so do the calls the
    route sends there."""

    LIS = SVC

    def start_routes(self, a):
        self.server.start()
        self.server.set("cluster", [cluster("cluster-a")])
        self.server.set("endpoint", [assignment("cluster-a", [locality([("127.0.0.1", a.port)], zone="z1")])])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        self.server.set("route", [xds.route_config("routes-1", [xds.route_to("cluster-a", prefix="")])])
        self.admin = free_port()
        services = [{"name": "pool-a", "discovery": {"xds": {"cluster": "cluster-a"}}}]
        m = self.start_maitred(self.xds_config(services, admin=self.admin, listener=self.LIS))
        stub = self.echo(m)
        self.wait_set(stub, "a", "the route to cluster-a")
        return m, stub

    @maitred_only
    def test_calls_a_route_sends_to_a_new_cluster_wait_for_it(self):
        a, c = self.start_upstream("a"), self.start_upstream("c")
        m, stub = self.start_routes(a)
        load = Load(self.echo(m))
        wait_until(lambda: load.count() > 10, WAIT, "calls under way")
        # The server does not know cluster-c yet: maitred subscribes, the
        # answer lacks it, the calls routed there wait.
        self.server.set("route", [xds.route_config("routes-1", [xds.route_to("cluster-c", prefix="")])])
        wait_until(lambda: waits(self.admin) >= 1, WAIT, "a call waiting for cluster-c")
        # One whose deadline comes first ends naming what it waited for.
        h2 = H2Client(m.port)
        self.addCleanup(h2.close)
        sid = h2.call(PATH, messages=[pb.EchoRequest().SerializeToString()], timeout_header="200m")
        code, text = status_of(h2.wait(sid))
        self.assertEqual(code, "4", text)  # DEADLINE_EXCEEDED
        self.assertIn("waiting for the first endpoints of service cluster-c: xds: waiting for cluster cluster-c",
                      text)
        self.server.set("cluster", [cluster("cluster-a"), cluster("cluster-c")])
        self.server.set("endpoint", [assignment("cluster-a", [locality([("127.0.0.1", a.port)], zone="z1")]),
                                     assignment("cluster-c", [locality([("127.0.0.1", c.port)], zone="z1")])])
        n = load.count()
        wait_until(lambda: load.count() > n + 10 and load.instances[-1] == "c", WAIT, "calls reaching c")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed across the switch to a new cluster")
        self.stop_maitred(m)

    @maitred_only
    def test_a_route_flapping_between_new_clusters_fails_no_call(self):
        """Every 100 ms the route names another cluster maitred did not
        follow a moment before (the service made for the last one goes
        when the route stops naming it): calls sent meanwhile wait for the
        cluster they were routed to, or move with the route; none fails."""
        a, c, d = (self.start_upstream(n) for n in "acd")
        m, stub = self.start_routes(a)
        self.server.set("cluster", [cluster("cluster-a"), cluster("cluster-c"), cluster("cluster-d")])
        self.server.set("endpoint", [
            assignment(name, [locality([("127.0.0.1", u.port)], zone="z1")])
            for name, u in (("cluster-a", a), ("cluster-c", c), ("cluster-d", d))])
        loads = [Load(self.echo(m)) for _ in range(2)]
        wait_until(lambda: all(ld.count() > 5 for ld in loads), WAIT, "calls under way")
        for i in range(20):
            target = "cluster-c" if i % 2 == 0 else "cluster-d"
            self.server.set("route", [xds.route_config("routes-1", [xds.route_to(target, prefix="")])])
            time.sleep(0.1)
        n = [ld.count() for ld in loads]
        wait_until(lambda: all(ld.count() > k + 5 for ld, k in zip(loads, n)), WAIT, "calls after the flapping")
        for ld in loads:
            ld.stop()
        errors = [e for ld in loads for e in ld.errors]
        self.assertEqual(errors, [], "calls failed while the route flapped")
        self.assertTrue({"c", "d"} & set(i for ld in loads for i in ld.instances))
        self.assertGreater(waits(self.admin), 0, "no call had to wait: the test proved nothing")
        self.stop_maitred(m)


class ListenerRoutesWaitTest(XdsBase):
    """With xds.listener, a call the file's routes do not take waits for
    the listener's first routes (xds.initial_wait) rather than go where
    its :path alone would send it: here the :path names no service, so
    without the wait it would fail at once."""

    LIS = SVC

    def start(self, initial_wait=None, listener=True, routes=None):
        """maitred, the server with cluster-a, the listener (naming
        routes-1) unless not `listener`, and `routes` as routes-1 if any."""
        self.admin = free_port()
        a = self.start_upstream("a")
        self.server.start()
        self.server.set("cluster", [cluster("cluster-a")])
        self.server.set("endpoint", [assignment("cluster-a", [locality([("127.0.0.1", a.port)], zone="z1")])])
        if listener:
            self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        if routes is not None:
            self.server.set("route", [xds.route_config("routes-1", routes)])
        block = {"listener": self.LIS}
        if initial_wait is not None:
            block["initial_wait"] = initial_wait
        cfg = self.xds_config([{"name": "pool-a", "discovery": {"xds": {"cluster": "cluster-a"}}}],
                              admin=self.admin, **block)
        m = self.start_maitred(cfg)
        return m, cfg

    def waiting(self):
        return total(self.admin, "maitred_first_endpoints_waiting")

    @maitred_only
    def test_a_call_waits_for_the_listeners_first_routes(self):
        # The listener names a route configuration the server has not got
        # yet: its RDS answer lacks it, which is not "it does not exist".
        m, _ = self.start()
        self.server.wait_for(lambda log: any(r["type_url"] == xds.RDS for r in log), WAIT, "an RDS request")
        stub = self.echo(m)
        f = stub.Unary.future(pb.EchoRequest(payload=b"x" * 100), timeout=CALL_LIMIT)
        wait_until(lambda: self.waiting() == 1, WAIT, "the call waiting for the routes")
        self.server.set("route", [xds.route_config("routes-1", [xds.route_to("cluster-a", prefix="")])])
        self.assertEqual(f.result(timeout=CALL_LIMIT).instance, "a")
        self.assertEqual(self.waiting(), 0)
        # Answered: later calls go at once, and a reload with the same
        # listener does not wait again.
        self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "a")
        self.stop_maitred(m)

    @maitred_only
    def test_a_listener_the_server_does_not_have_ends_the_wait(self):
        # An LDS answer holds every listener asked for: one without it says
        # there is none, and calls are routed by :path from then on.
        m, _ = self.start(listener=False)
        wait_until(lambda: re.search(r"xds: listener %s: absent from the server's listeners: calls are routed "
                                     r"by :path" % re.escape(self.LIS), m.proc.output()), WAIT, "the answer logged")
        with self.assertRaises(grpc.RpcError) as e:
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("unknown service " + SVC, e.exception.details())
        self.stop_maitred(m)

    @maitred_only
    def test_a_refused_route_configuration_ends_the_wait(self):
        m, _ = self.start(routes=[{"match": {"safe_regex": {"regex": "(?i).*"}}, "route": {"cluster": "cluster-a"}}])
        self.server.wait_for(lambda log: any(nacked(r, xds.RDS) for r in log), WAIT, "an RDS NACK")
        wait_until(lambda: "its route configuration was refused: calls are routed by :path" in m.proc.output(),
                   WAIT, "the answer logged")
        with self.assertRaises(grpc.RpcError) as e:
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.stop_maitred(m)

    @maitred_only
    def test_xds_initial_wait_ends_the_wait_then_the_path_decides(self):
        m, _ = self.start(initial_wait="500ms")
        self.server.wait_for(lambda log: any(r["type_url"] == xds.RDS for r in log), WAIT, "an RDS request")
        # The wait runs out: routed by its :path, which names no service.
        with self.assertRaises(grpc.RpcError) as e:
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("unknown service " + SVC, e.exception.details())
        self.assertEqual(self.waiting(), 0)
        self.stop_maitred(m)

    @maitred_only
    def test_a_deadline_shorter_than_the_wait_ends_the_call(self):
        m, _ = self.start(initial_wait="60s")
        self.server.wait_for(lambda log: any(r["type_url"] == xds.RDS for r in log), WAIT, "an RDS request")
        # maitred's own answer (a raw client: no deadline of its own).
        c = H2Client(m.port)
        self.addCleanup(c.close)
        st = c.wait(c.call(PATH, [pb.EchoRequest().SerializeToString()], timeout_header="500m"))
        code, msg = status_of(st)
        self.assertEqual(code, "4", msg)
        self.assertIn("waiting for the routes of xds listener " + self.LIS, msg)
        wait_until(lambda: self.waiting() == 0, WAIT, "the gauge back to 0")
        self.stop_maitred(m)

    @maitred_only
    def test_a_failback_resend_never_waits_for_the_routes(self):
        # The server never sends the route configuration: the client's call
        # waits xds.initial_wait, then goes by its :path to a dead endpoint
        # and FAILBACK answers it and queues a re-send. The re-send, a
        # background call routed anew at each try, took the wait's answer
        # for "no service" (route_again: "service no longer in maitred's
        # config") at every try while the routes were awaited: it never
        # reached the instance once it came back.
        port = free_port()
        self.server.start()
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        svc = {"name": SVC, "endpoints": [{"address": "127.0.0.1:%d" % port}],
               "fault": {"mode": "FAILBACK", "backoff": {"base": "100ms", "max": "300ms"},
                         "failback": {"queue": 10, "retries": 100}}}
        m = self.start_maitred(self.xds_config([svc], listener=self.LIS, initial_wait="300ms"))
        self.server.wait_for(lambda log: any(r["type_url"] == xds.RDS for r in log), WAIT, "an RDS request")
        self.assertEqual(self.echo(m).Unary(pb.EchoRequest(payload=b"fire"), timeout=CALL_LIMIT), pb.EchoResponse())
        up = self.start_upstream("back", port=port)
        wait_until(lambda: up.stats().total >= 1, CALL_LIMIT, "the re-sent call to reach the instance")
        self.stop_maitred(m)

    @maitred_only
    def test_a_message_field_key_is_read_from_the_request_that_waited(self):
        # The request's message arrived while the call waited: the pick
        # after the wait reads its hash key from the bytes queued (with
        # on_missing FAIL, a key not read fails the call).
        self.admin = free_port()
        a = self.start_upstream("a")
        self.server.start()
        self.server.set("cluster", [cluster("cluster-a", lb_policy="RING_HASH")])
        self.server.set("endpoint", [assignment("cluster-a", [locality([("127.0.0.1", a.port)], zone="z1")])])
        self.server.set("listener", [xds.listener(self.LIS, "routes-1")])
        svc = {"name": "pool-a", "discovery": {"xds": {"cluster": "cluster-a"}},
               "lb": {"policy": "CONSISTENT_HASH"}, "hash_key": {"field": "2", "on_missing": "FAIL"}}
        m = self.start_maitred(self.xds_config([svc], admin=self.admin, listener=self.LIS))
        self.server.wait_for(lambda log: any(r["type_url"] == xds.RDS for r in log), WAIT, "an RDS request")
        stub = self.echo(m)
        f = stub.Unary.future(pb.EchoRequest(key="user-7", payload=b"p" * 3000), timeout=CALL_LIMIT)
        wait_until(lambda: self.waiting() == 1, WAIT, "the call waiting for the routes")
        self.server.set("route", [xds.route_config("routes-1", [xds.route_to("cluster-a", prefix="")])])
        self.assertEqual(f.result(timeout=CALL_LIMIT).instance, "a")
        # The same rule refuses a call without the field, so the key above
        # was read.
        with self.assertRaises(grpc.RpcError) as e:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.stop_maitred(m)
