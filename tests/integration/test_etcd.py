"""etcd discovery and self-registration through the real maitred against a
real etcd (Debian's etcd-server) on 127.0.0.1:
list then watch; instances added, re-weighted and removed while calls run;
etcd stopped and restarted; a compacted revision; every kind of malformed
record; UNAVAILABLE naming etcd until the first list; self-registration
put under a lease, kept alive, registered again after a lost lease or an
etcd restart, revoked on SIGTERM before the drain, over TLS and with
authentication; with when_serving, the app's grpc.health.v1 status
followed; two maitreds discovering each other's apps; the record's zone
and metadata routing calls (zone preference, canary header).

The tests write to etcd through its JSON gateway (/v3/kv/...), so they need
nothing but etcd itself. Every wait is bounded and only a hang guard: what
is asserted is which instances calls reached, how many calls failed (none),
what etcd holds and what maitred logged, never how long something took.
"""

import base64
import json
import os
import re
import shutil
import signal
import socket
import ssl
import threading
import time
import unittest
import urllib.request

import grpc

from harness import (MaitredTest, Proc, TestCA, maitred_only, pb, free_port, wait_until, CALL_LIMIT,
                     START_LIMIT)
from test_admin import admin_request, samples, value

SVC = "maitred.testing.v1.Echo"
PREFIX = "/maitred/services/%s/" % SVC
ETCD = shutil.which("etcd")
WAIT = 30.0  # hang guard for a change to show up


def b64(v):
    return base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode()


class Etcd:
    """One etcd member on 127.0.0.1 with its data in the test's directory,
    stopped (and restartable) by PID."""

    def __init__(self, test, name="etcd", port=None, tls=None):
        """tls: a TestCA; etcd then serves TLS only and requires client
        certificates signed by it (--client-cert-auth)."""
        self.test = test
        self.tls = tls
        self.name = name
        self.port = port or free_port()
        self.peer_port = free_port()
        self.address = "127.0.0.1:%d" % self.port
        self.data = os.path.join(test.tmp, name + ".data")
        self.proc = None
        self.runs = 0
        self.token = None  # set by enable_auth(): every request then carries it
        self.start()

    def start(self):
        client = "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)
        peer = "http://127.0.0.1:%d" % self.peer_port
        self.runs += 1
        argv = [ETCD, "--name", "default", "--data-dir", self.data,
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", "default=" + peer, "--logger", "zap", "--log-level", "warn"]
        if self.tls:
            # etcd's own JSON gateway dials etcd with the server certificate,
            # so under --client-cert-auth that one must allow clientAuth too.
            cert, key = os.path.join(self.tls.dir, "etcd.pem"), os.path.join(self.tls.dir, "etcd.key")
            if not os.path.exists(cert):
                self.tls._leaf("etcd", "/CN=etcd", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                                    "-nodes"],
                               "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
                               "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n")
            argv += ["--cert-file", cert, "--key-file", key, "--client-cert-auth", "--trusted-ca-file", self.tls.ca_file]
        self.proc = Proc("%s.%d" % (self.name, self.runs), argv, self.test.tmp)
        self.test._procs.append((self.proc, False))

        def healthy():
            if not self.proc.alive():
                raise AssertionError("etcd exited:\n" + self.proc.output())
            try:
                return json.loads(self._http("GET", "/health")).get("health") == "true"
            except OSError:
                return False
        wait_until(healthy, START_LIMIT, "etcd on %s" % self.address, step=0.1)

    def stop(self):
        self.proc.stop()

    def _http(self, method, path, body=None):
        ctx = None
        if self.tls:
            ctx = ssl.create_default_context(cafile=self.tls.ca_file)
            ctx.load_cert_chain(self.tls.client_cert, self.tls.client_key)
        req = urllib.request.Request("%s://%s%s" % ("https" if self.tls else "http", self.address, path),
                                     method=method,
                                     data=None if body is None else json.dumps(body).encode())
        if self.token:
            req.add_header("Authorization", self.token)
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.read().decode()

    def api(self, path, body):
        return json.loads(self._http("POST", "/v3/" + path, body))

    def put(self, key, value):
        return int(self.api("kv/put", {"key": b64(key), "value": b64(value)})["header"]["revision"])

    def delete(self, key):
        return int(self.api("kv/deleterange", {"key": b64(key)})["header"]["revision"])

    def get_prefix(self, prefix):
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = self.api("kv/range", {"key": b64(prefix), "range_end": b64(end)})
        return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", ""))
                for kv in r.get("kvs", [])}

    def revision(self):
        return int(self.api("kv/range", {"key": b64("\0")})["header"]["revision"])

    def enable_auth(self, user, password):
        """etcd authentication on: user (with the root role) is the only one."""
        self.api("auth/user/add", {"name": user, "password": password})
        self.api("auth/role/add", {"name": "root"})
        self.api("auth/user/grant", {"user": user, "role": "root"})
        self.api("auth/enable", {})
        self.token = self.api("auth/authenticate", {"name": user, "password": password})["token"]

    def compact(self, rev):
        self.api("kv/compaction", {"revision": rev, "physical": True})


class CutProxy:
    """A TCP relay 127.0.0.1:port -> target that a test can cut (every
    connection closed, new ones refused) and restore on the same port: an
    etcd outage as maitred sees it while etcd itself keeps running."""

    def __init__(self, target_port):
        self.target = target_port
        self.port = free_port()
        self.address = "127.0.0.1:%d" % self.port
        self.lock = threading.Lock()
        self.socks = []
        self.lsock = None
        self.restore()

    def restore(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(16)
        self.lsock = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def cut(self):
        with self.lock:
            ls, self.lsock = self.lsock, None
            socks, self.socks = self.socks, []
        # shutdown() wakes the thread blocked in accept(); close() alone
        # would leave the listener alive until accept() returned.
        try:
            ls.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        ls.close()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self, ls):
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                c.close()
                continue
            with self.lock:
                if self.lsock is not ls:
                    c.close()
                    u.close()
                    return
                self.socks += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        if self.lsock is not None:
            self.cut()


class Load:
    """Unary calls one after another from a thread until stopped: the
    instances they reached, in order, and every failure."""

    def __init__(self, stub):
        self.stub = stub
        self.instances = []
        self.errors = []
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop_ev.is_set():
            try:
                self.instances.append(self.stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance)
            except grpc.RpcError as e:
                self.errors.append("%s: %s" % (e.code(), e.details()))

    def count(self):
        return len(self.instances)

    def stop(self):
        self.stop_ev.set()
        self.t.join(CALL_LIMIT + 5)


@unittest.skipUnless(ETCD, "etcd not installed (Debian: etcd-server)")
class EtcdTest(MaitredTest):

    def record(self, up, **kw):
        r = {"address": up if isinstance(up, str) else up.address}
        r.update(kw)
        return json.dumps(r)

    def etcd_service(self, endpoints, prefix=PREFIX, policy="ROUND_ROBIN", name=SVC):
        eps = [e if isinstance(e, str) else e.address for e in endpoints]
        return {"name": name, "lb": {"policy": policy},
                "discovery": {"etcd": {"endpoints": eps, "prefix": prefix}}}

    def spread(self, stub, n):
        return [stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance for _ in range(n)]

    def wait_set(self, stub, names, what):
        """Until a window of calls reaches exactly the instances `names`
        (calls failing meanwhile, e.g. before the first list, only mean
        "not yet")."""
        want = set(names)
        n = 4 * max(len(want), 1)

        def reached():
            try:
                return set(self.spread(stub, n)) == want
            except grpc.RpcError:
                return False
        wait_until(reached, WAIT, what, step=0.1)

    def log_lines(self, m, pattern):
        return [line for line in m.proc.output().splitlines() if re.search(pattern, line)]

    # --- discovery -------------------------------------------------------------

    @maitred_only
    def test_list_then_watch(self):
        etcd = Etcd(self)
        a, b, c = (self.start_upstream(n) for n in "abc")
        etcd.put(PREFIX + "a", self.record(a))
        etcd.put(PREFIX + "b", self.record(b))
        etcd.put("/maitred/services/other/x", self.record(c))  # another prefix
        m = self.start_maitred(self.config([self.etcd_service([etcd])]))
        stub = self.echo(m)
        self.wait_set(stub, "ab", "the listed instances a and b")
        # Round robin over exactly the listed two.
        self.assertEqual(sorted(set(self.spread(stub, 10))), ["a", "b"])
        etcd.put(PREFIX + "c", self.record(c))
        self.wait_set(stub, "abc", "c, put after the list, through the watch")
        etcd.delete(PREFIX + "a")
        self.wait_set(stub, "bc", "a gone after its delete")
        self.stop_maitred(m)

    @maitred_only
    def test_add_reweight_remove_under_load(self):
        etcd = Etcd(self)
        a, b, c = (self.start_upstream(n) for n in "abc")
        etcd.put(PREFIX + "a", self.record(a, weight=100))
        etcd.put(PREFIX + "b", self.record(b, weight=100))
        m = self.start_maitred(self.config([self.etcd_service([etcd], policy="SMOOTH_WEIGHTED_ROUND_ROBIN")]))
        stub = self.echo(m)
        self.wait_set(stub, "ab", "a and b")
        load = Load(self.echo(m))
        etcd.put(PREFIX + "c", self.record(c, weight=100))
        self.wait_set(stub, "abc", "c added while calls run")

        # Re-weight c to 400 (4 of every 6 calls): traffic follows.
        def c_share():
            got = self.spread(stub, 60)
            return abs(got.count("c") - 40) <= 6 and got.count("a") > 0 and got.count("b") > 0
        etcd.put(PREFIX + "c", self.record(c, weight=400))
        wait_until(c_share, WAIT, "c's share to follow its new weight", step=0.1)

        etcd.delete(PREFIX + "a")
        self.wait_set(stub, "bc", "a removed while calls run")
        before = load.count()
        wait_until(lambda: load.count() >= before + 20, WAIT, "more calls after the changes")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed while endpoints changed")
        self.assertIn("c", load.instances)
        self.stop_maitred(m)

    @maitred_only
    def test_discovery_figures_in_metrics_and_clusters(self):
        """maitred_discovery_updates_total counts the record changes made
        (the list's, then the watch's); a put that changes nothing is not
        one. The link state and the last sync follow etcd."""
        etcd = Etcd(self)
        a, b, c = (self.start_upstream(n) for n in "abc")
        etcd.put(PREFIX + "a", self.record(a))
        etcd.put(PREFIX + "b", self.record(b))
        admin = free_port()
        m = self.start_maitred(self.config([self.etcd_service([etcd])], admin="127.0.0.1:%d" % admin))
        stub = self.echo(m)
        self.wait_set(stub, "ab", "the listed instances a and b")
        lab = dict(service=SVC, source="etcd")

        def scrape():
            st, _, body = admin_request(admin, "GET", "/metrics")
            self.assertEqual(st, 200, body)
            return samples(body)
        ss = scrape()
        self.assertEqual(value(ss, "maitred_discovery_updates_total", **lab), 2)
        self.assertEqual(value(ss, "maitred_discovery_connected", **lab), 1)
        self.assertEqual(value(ss, "maitred_discovery_endpoints", **lab), 2)
        self.assertGreater(value(ss, "maitred_discovery_last_sync_timestamp_seconds", **lab), time.time() - 600)
        etcd.put(PREFIX + "c", self.record(c))                # 3
        etcd.put(PREFIX + "c", self.record(c))                # the same record: no change
        etcd.put(PREFIX + "c", self.record(c, weight=400))    # 4
        etcd.put(PREFIX + "bad", "{not json")                 # skipped: no change
        etcd.delete(PREFIX + "a")                             # 5
        wait_until(lambda: value(scrape(), "maitred_discovery_updates_total", **lab) >= 5, WAIT,
                   "the watched changes to be counted")
        self.wait_set(stub, "bc", "b and c")
        ss = scrape()
        self.assertEqual(value(ss, "maitred_discovery_updates_total", **lab), 5)
        self.assertEqual(value(ss, "maitred_discovery_endpoints", **lab), 2)
        st, _, body = admin_request(admin, "GET", "/clusters")
        d = json.loads(body)["services"][0]["discovery"]
        self.assertEqual((d["source"], d["connected"], d["updates"], d["endpoints"]), ("etcd", True, 5, 2))
        self.assertIsNotNone(d["last_sync"])
        etcd.stop()
        wait_until(lambda: value(scrape(), "maitred_discovery_connected", **lab) == 0, WAIT,
                   "the link to be down in /metrics")
        self.assertEqual(value(scrape(), "maitred_discovery_updates_total", **lab), 5)
        etcd.start()
        wait_until(lambda: value(scrape(), "maitred_discovery_connected", **lab) == 1, WAIT,
                   "the link to be up again")
        self.stop_maitred(m)

    @maitred_only
    def test_etcd_stopped_and_restarted(self):
        etcd = Etcd(self)
        dead = free_port()  # a cluster member that is down: maitred fails over
        a, b, c, d = (self.start_upstream(n) for n in "abcd")
        etcd.put(PREFIX + "a", self.record(a))
        etcd.put(PREFIX + "b", self.record(b))
        m = self.start_maitred(self.config([self.etcd_service(["127.0.0.1:%d" % dead, etcd])]))
        stub = self.echo(m)
        self.wait_set(stub, "ab", "a and b (listed through the second cluster endpoint)")
        load = Load(self.echo(m))
        etcd.stop()
        before = load.count()
        wait_until(lambda: load.count() >= before + 50, WAIT, "calls while etcd is down")
        # The last known set serves. Read from the load's own calls: it calls
        # one after another, so ROUND_ROBIN alternates between a and b. (The
        # stub's calls interleaved with the load's share the same rotation, so
        # eight of them may all land on one instance.)
        self.assertEqual(set(load.instances[before:]), {"a", "b"}, "the last known set serves")
        # Retries go on (several, with backoff); the outage is logged once.
        wait_until(lambda: len(self.log_lines(m, r"etcd 127\.0\.0\.1:%d .*unreachable|etcd 127\.0\.0\.1:%d \(service"
                                              % (etcd.port, etcd.port))) >= 1,
                   WAIT, "the outage in the log")
        etcd.start()
        etcd.put(PREFIX + "c", self.record(c))  # while maitred reconnects
        self.wait_set(stub, "abc", "c, put while maitred was cut off, after the watch resumed")
        etcd.put(PREFIX + "d", self.record(d))
        self.wait_set(stub, "abcd", "d through the resumed watch")
        load.stop()
        self.assertEqual(load.errors, [], "calls failed while etcd was down")
        warns = self.log_lines(m, r"warn .*etcd .*\(service %s" % re.escape(SVC))
        outages = [w for w in warns if "127.0.0.1:%d" % etcd.port in w]
        self.assertEqual(len(outages), 1, "one warning per outage, got:\n" + "\n".join(warns))
        self.assertTrue(self.log_lines(m, "reachable again"), "the end of the outage is logged")
        self.stop_maitred(m)

    @maitred_only
    def test_compacted_revision_lists_again(self):
        etcd = Etcd(self)
        proxy = CutProxy(etcd.port)
        self.addCleanup(proxy.close)
        a, b, c = (self.start_upstream(n) for n in "abc")
        etcd.put(PREFIX + "a", self.record(a))
        m = self.start_maitred(self.config([self.etcd_service([proxy.address])]))
        stub = self.echo(m)
        self.wait_set(stub, "a", "a")
        proxy.cut()
        # While maitred is cut off: changes, then the history is compacted
        # away, so its watch cannot resume from where it was.
        etcd.put(PREFIX + "b", self.record(b))
        etcd.delete(PREFIX + "a")
        rev = etcd.put(PREFIX + "c", self.record(c))
        etcd.compact(rev)
        proxy.restore()
        self.wait_set(stub, "bc", "the new list after the compaction")
        self.assertTrue(self.log_lines(m, "compacted"), "the compaction is logged")
        etcd.delete(PREFIX + "b")
        self.wait_set(stub, "c", "the watch after the new list")
        self.stop_maitred(m)

    @maitred_only
    def test_malformed_records_are_skipped(self):
        etcd = Etcd(self)
        a, b = self.start_upstream("a"), self.start_upstream("b")
        bad = {
            "json": b"{\"address\": ",
            "address": self.record("shop.local:8080").encode(),
            "port": self.record("127.0.0.1:0").encode(),
            "weight": self.record(a, weight=1000001).encode(),
            "unknown": self.record(a, colour="red").encode(),
            "oversized": self.record(a, zone="z" * 20000).encode(),
            "binary": b"\xff\xfe\x00\x01garbage",
            "empty": b"",
        }
        etcd.put(PREFIX + "a", self.record(a))
        for k, v in bad.items():
            etcd.put(PREFIX + "listed-" + k, v)
        m = self.start_maitred(self.config([self.etcd_service([etcd])]))
        stub = self.echo(m)
        self.wait_set(stub, "a", "a, the one good record of the list")
        # The same kinds through the watch, then a good one: the watch goes on.
        for k, v in bad.items():
            etcd.put(PREFIX + "watched-" + k, v)
        # A good key overwritten with garbage keeps its last good value.
        etcd.put(PREFIX + "a", b"{garbage")
        etcd.put(PREFIX + "b", self.record(b))
        self.wait_set(stub, "ab", "b after the bad records (and a still there)")
        for phase in ("listed", "watched"):
            for k in bad:
                key = PREFIX + phase + "-" + k
                lines = self.log_lines(m, "key %s .*bad record skipped" % re.escape(key))
                self.assertEqual(len(lines), 1, "%s logged once with a reason, got %r" % (key, lines))
        self.assertEqual(len(self.log_lines(m, "key %sa .*bad record skipped.*last good value stays"
                                            % re.escape(PREFIX))), 1)
        self.assertTrue(self.log_lines(m, "listed-weight .*weight: 1000001 is out of range"))
        self.assertTrue(self.log_lines(m, "listed-oversized .*value of \\d+ bytes, at most 16384"))
        self.assertTrue(self.log_lines(m, "listed-address .*not an IPv4 literal"))
        self.stop_maitred(m)

    @maitred_only
    def test_unavailable_naming_etcd_until_first_list(self):
        port = free_port()
        up = self.start_upstream("a")
        control = {"name": "maitred.testing.v1.Control", "endpoints": [{"address": "127.0.0.1:%d" % up.control_port}]}
        m = self.start_maitred(self.config([self.etcd_service(["127.0.0.1:%d" % port]), control]))
        stub = self.echo(m)
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("etcd", cm.exception.details())
        self.assertIn("127.0.0.1:%d" % port, cm.exception.details())
        # The other service serves meanwhile.
        from harness import pb_grpc
        ctl = pb_grpc.ControlStub(self.channel(m))
        self.assertEqual(ctl.Stats(pb.StatsRequest(), timeout=CALL_LIMIT).instance, "a")
        etcd = Etcd(self, port=port)
        etcd.put(PREFIX + "a", self.record(up))
        self.wait_set(stub, "a", "the first list once etcd is up")
        self.stop_maitred(m)

    @maitred_only
    def test_two_maitreds_discover_each_other(self):
        etcd = Etcd(self)
        app1, app2 = self.start_upstream("app1"), self.start_upstream("app2")
        m1 = self.start_maitred(self.config([self.etcd_service([etcd])], register=[self.register(app1, etcd)]))
        m2 = self.start_maitred(self.config([self.etcd_service([etcd])], register=[self.register(app2, etcd)]))
        for m in (m1, m2):
            self.wait_set(self.echo(m), ["app1", "app2"], "both apps through %s" % m.address)
        self.stop_maitred(m2)
        self.wait_set(self.echo(m1), ["app1"], "only app1 once the second sidecar left")
        self.stop_maitred(m1)
    # --- self-registration -----------------------------------------------------

    def register(self, up, etcd, prefix=PREFIX, **kw):
        r = {"service": SVC, "address": up.address, "weight": 100, "ttl": "10s",
             "etcd": {"endpoints": [etcd.address], "prefix": prefix}}
        r.update(kw)
        return r

    def other(self):
        """A static service: a config needs one; nothing calls it."""
        return {"name": "other.Service", "endpoints": [{"address": "127.0.0.1:%d" % free_port()}]}

    def lease_of(self, etcd, key):
        r = etcd.api("kv/range", {"key": b64(key)})
        kvs = r.get("kvs", [])
        return int(kvs[0].get("lease", 0)) if kvs else None

    @maitred_only
    def test_registration_put_under_a_lease_and_revoked_on_sigterm(self):
        etcd = Etcd(self)
        up = self.start_upstream("app")
        a = self.start_maitred(self.config([self.other()], register=[self.register(up, etcd, ttl="10s")]))
        key = PREFIX + up.address
        wait_until(lambda: key in etcd.get_prefix(PREFIX), WAIT, "the registration in etcd")
        rec = json.loads(etcd.get_prefix(PREFIX)[key])
        self.assertEqual(rec["address"], up.address)
        self.assertEqual(rec["weight"], 100)
        self.assertIn("start_time", rec)
        lease = self.lease_of(etcd, key)
        self.assertTrue(lease)
        # Kept alive: etcd's own count of the lease's time left goes back up
        # (a KeepAlive, every TTL/3) three times, the record under the same
        # lease all along. Counted, not timed: a 10 s TTL kept alive every
        # 3.3 s survives a keepalive 6 s late.
        refreshes, last = 0, None

        def refreshed():
            nonlocal refreshes, last
            self.assertEqual(self.lease_of(etcd, key), lease, "the record expired or moved")
            r = etcd.api("lease/timetolive", {"ID": lease})
            self.assertEqual(int(r["grantedTTL"]), 10, r)
            left = int(r["TTL"])
            self.assertGreater(left, 0, "the lease expired: %r" % r)
            if last is not None and left > last:
                refreshes += 1
            last = left
            return refreshes >= 3
        wait_until(refreshed, WAIT * 2, "three keepalives of the registration's lease", step=0.2)
        self.stop_maitred(a)
        # SIGTERM revoked the lease before maitred drained and exited: the
        # record is gone now, not when its TTL runs out.
        self.assertNotIn(key, etcd.get_prefix(PREFIX))
        out = a.proc.output()
        self.assertLess(out.index("revoked"), out.index("SIGTERM: draining"), "revoke comes before the drain")

    @maitred_only
    def test_register_changed_by_a_reload(self):
        """A reload that changes `register` applies live: a re-weighted
        entry's record changes without ever being deleted, a dropped entry's
        record goes, an added one appears."""
        etcd = Etcd(self)
        app1, app2, app3 = (self.start_upstream(n) for n in ("app1", "app2", "app3"))
        cfg = self.config([self.other()], register=[self.register(app1, etcd), self.register(app2, etcd)])
        m = self.start_maitred(cfg)
        k1, k2, k3 = (PREFIX + u.address for u in (app1, app2, app3))
        wait_until(lambda: {k1, k2} <= set(etcd.get_prefix(PREFIX)), WAIT, "both registrations")
        lease1 = self.lease_of(etcd, k1)
        rev0 = etcd.revision()
        cfg["register"] = [self.register(app1, etcd, weight=50), self.register(app3, etcd)]
        self.write_config(cfg, os.path.basename(m.config_path))
        m.proc.signal(signal.SIGHUP)

        def handed_over():
            recs = etcd.get_prefix(PREFIX)
            return (set(recs) == {k1, k3} and json.loads(recs[k1])["weight"] == 50) and recs
        wait_until(handed_over, WAIT, "app1 at weight 50, app3 added, app2 gone")
        self.assertNotEqual(self.lease_of(etcd, k1), lease1, "app1's record is under the new lease")
        # Never deleted on the way: app1's key exists at every revision since
        # the reload (etcd keeps the history; nothing is compacted here).
        for rev in range(rev0, etcd.revision() + 1):
            r = etcd.api("kv/range", {"key": b64(k1), "revision": rev})
            self.assertEqual(len(r.get("kvs", [])), 1, "app1's record missing at revision %d" % rev)
        self.assertTrue(self.log_lines(m, "previous config's leases are revoked"))
        # `register` removed: its records go at the reload, not at the TTL.
        del cfg["register"]
        self.write_config(cfg, os.path.basename(m.config_path))
        m.proc.signal(signal.SIGHUP)
        wait_until(lambda: etcd.get_prefix(PREFIX) == {}, WAIT, "every record revoked")
        self.stop_maitred(m)

    @maitred_only
    def test_etcd_restart_registers_again(self):
        etcd = Etcd(self)
        up = self.start_upstream("app")
        a = self.start_maitred(self.config([self.other()], register=[self.register(up, etcd)]))
        key = PREFIX + up.address
        wait_until(lambda: key in etcd.get_prefix(PREFIX), WAIT, "the registration")
        lease = self.lease_of(etcd, key)
        etcd.stop()
        etcd.start()
        wait_until(lambda: self.lease_of(etcd, key) not in (None, lease), WAIT,
                   "the registration again under a new lease after the restart")
        self.assertEqual(len(self.log_lines(a, r"warn .*register %s" % re.escape(SVC))), 1,
                         "one warning for the outage")
        self.stop_maitred(a)
        self.assertNotIn(key, etcd.get_prefix(PREFIX))

    @maitred_only
    def test_registration_with_etcd_authentication(self):
        etcd = Etcd(self)
        etcd.enable_auth("root", "s3cret")
        good, bad = os.path.join(self.tmp, "good.pw"), os.path.join(self.tmp, "bad.pw")
        with open(good, "w") as f:
            f.write("s3cret\n")
        with open(bad, "w") as f:
            f.write("wrong\n")
        app1, app2 = self.start_upstream("app1"), self.start_upstream("app2")
        auth = lambda pw: {"endpoints": [etcd.address], "prefix": PREFIX,  # noqa: E731
                           "username": "root", "password_file": pw}
        a = self.start_maitred(self.config([self.other()], register=[
            dict(self.register(app1, etcd), etcd=auth(good)), dict(self.register(app2, etcd), etcd=auth(bad))]))
        wait_until(lambda: PREFIX + app1.address in etcd.get_prefix(PREFIX), WAIT, "the authenticated registration")
        wait_until(lambda: self.log_lines(a, "register %s as %s.*authentication as \"root\" failed"
                                          % (re.escape(SVC), re.escape(app2.address))),
                   WAIT, "the failed authentication in the log")
        self.assertNotIn(PREFIX + app2.address, etcd.get_prefix(PREFIX))
        self.stop_maitred(a)
        self.assertEqual(etcd.get_prefix(PREFIX), {})

    @maitred_only
    def test_registration_over_tls_with_a_client_certificate(self):
        ca = TestCA(os.path.join(self.tmp, "ca"))
        other_ca = TestCA(os.path.join(self.tmp, "other-ca"), ca_name="another CA")
        etcd = Etcd(self, tls=ca)
        app1, app2 = self.start_upstream("app1"), self.start_upstream("app2")
        tls = lambda c: {"endpoints": [etcd.address], "prefix": PREFIX, "tls": {  # noqa: E731
            "ca_file": c.ca_file, "cert_file": c.client_cert, "key_file": c.client_key}}
        a = self.start_maitred(self.config([self.other()], register=[
            dict(self.register(app1, etcd), etcd=tls(ca)), dict(self.register(app2, etcd), etcd=tls(other_ca))]))
        wait_until(lambda: PREFIX + app1.address in etcd.get_prefix(PREFIX), WAIT, "the registration over TLS")
        # A CA that did not sign etcd's certificate: refused, and said so.
        wait_until(lambda: self.log_lines(a, "register %s as %s.*TLS" % (re.escape(SVC), re.escape(app2.address))),
                   WAIT, "the TLS failure in the log")
        self.assertNotIn(PREFIX + app2.address, etcd.get_prefix(PREFIX))
        self.stop_maitred(a)
        self.assertEqual(etcd.get_prefix(PREFIX), {})

    @maitred_only
    def test_lost_lease_registers_again(self):
        etcd = Etcd(self)
        up = self.start_upstream("app")
        a = self.start_maitred(self.config([self.other()], register=[self.register(up, etcd)]))
        key = PREFIX + up.address
        wait_until(lambda: key in etcd.get_prefix(PREFIX), WAIT, "the registration")
        # Someone revokes maitred's lease (its keepalive then reports TTL 0):
        # maitred registers again under a new lease.
        leases = etcd.api("lease/leases", {})["leases"]
        self.assertEqual(len(leases), 1)
        etcd.api("lease/revoke", {"ID": leases[0]["ID"]})
        self.assertNotIn(key, etcd.get_prefix(PREFIX))
        wait_until(lambda: key in etcd.get_prefix(PREFIX), WAIT, "the registration again")
        self.assertTrue(self.log_lines(a, "lease .* lost"))
        self.stop_maitred(a)

    @maitred_only
    def test_when_serving_follows_health(self):
        etcd = Etcd(self)
        health = os.path.join(self.tmp, "health")
        with open(health, "w") as f:
            f.write("NOT_SERVING")
        up = self.start_upstream("app", extra_args=["--health-file", health])
        a = self.start_maitred(self.config([self.other()], register=[self.register(up, etcd, when_serving=True)]))
        key = PREFIX + up.address
        wait_until(lambda: self.log_lines(a, "health check|not SERVING"), WAIT, "the first health check")
        self.assertNotIn(key, etcd.get_prefix(PREFIX), "registered while the app is NOT_SERVING")
        with open(health, "w") as f:
            f.write("SERVING")
        wait_until(lambda: key in etcd.get_prefix(PREFIX), WAIT, "the registration once SERVING")
        with open(health, "w") as f:
            f.write("NOT_SERVING")
        wait_until(lambda: key not in etcd.get_prefix(PREFIX), WAIT, "the deregistration once NOT_SERVING")
        self.stop_maitred(a)

    # --- the record's zone and metadata route calls ----------------------------

    def routed(self, stub, n, canary=None):
        md = (("x-canary", canary),) if canary is not None else None
        return [stub.Unary(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT).instance for _ in range(n)]

    def wait_routed(self, stub, names, canary, what):
        """Until a window of calls with x-canary `canary` (None: without)
        reaches exactly the instances `names`."""
        want = set(names)

        def reached():
            try:
                return set(self.routed(stub, 4 * len(want), canary)) == want
            except grpc.RpcError:
                return False
        wait_until(reached, WAIT, what, step=0.1)

    @maitred_only
    def test_record_zone_and_metadata_route_calls(self):
        etcd = Etcd(self)
        a, b, c = (self.start_upstream(n) for n in "abc")
        etcd.put(PREFIX + "a", self.record(a, zone="eu-1a"))
        etcd.put(PREFIX + "b", self.record(b, zone="eu-1b"))
        etcd.put(PREFIX + "c", self.record(c, zone="eu-1a", metadata={"version": "v2"}))
        svc = self.etcd_service([etcd])
        svc["routing"] = {"header": "x-canary", "metadata_key": "version"}
        m = self.start_maitred(self.config([svc], zone="eu-1a"))
        stub = self.echo(m)
        # Without the header: the untagged records only (a, b), and of
        # those the one in this sidecar's zone (a, PREFER_LOCAL).
        self.wait_routed(stub, "a", None, "untagged calls on the local untagged record a")
        self.assertEqual(set(self.routed(stub, 12)), {"a"})
        # x-canary: v2 goes to the record whose metadata says version v2.
        self.assertEqual(set(self.routed(stub, 8, "v2")), {"c"})
        # A version no record has: the untagged ones (fallback), local first.
        self.assertEqual(set(self.routed(stub, 8, "v9")), {"a"})

        # a's record moves to eu-1b: no untagged record is local any more,
        # untagged calls spill over to both (the zone comes from the watch).
        etcd.put(PREFIX + "a", self.record(a, zone="eu-1b"))
        self.wait_routed(stub, "ab", None, "untagged calls on a and b once a left eu-1a")
        # c's record is re-tagged v3: the header follows the new metadata.
        etcd.put(PREFIX + "c", self.record(c, zone="eu-1a", metadata={"version": "v3"}))
        self.wait_routed(stub, "c", "v3", "x-canary v3 on c after its record changed")
        self.assertEqual(set(self.routed(stub, 8, "v2")), {"a", "b"})
        self.stop_maitred(m)


if __name__ == "__main__":
    unittest.main()
