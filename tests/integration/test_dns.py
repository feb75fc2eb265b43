"""DNS endpoint sources against a DNS server the test
starts: Debian's dnsmasq on 127.0.0.1 serving a hosts file, with upstreams
on 127.0.0.2, 127.0.0.3, ... (Linux routes all of 127.0.0.0/8 on lo), all
on one port as a DNS service calls every address on the same port.

Every address is used; an address added to the name gets traffic, one
removed stops getting it; while the DNS server is down the last good set
keeps serving. Waits are bounded; nothing is
judged by timing.
"""

import json
import os
import re
import shutil
import signal
import socket
import unittest
import urllib.parse

import grpc

from harness import (MaitredTest, Proc, can_bind_mount, hosts_wrap, maitred_only, pb, free_port, wait_until,
                     CALL_LIMIT, START_LIMIT, STOP_LIMIT)
from test_admin import admin_request, samples, value
from h2raw import H2Client

SVC = "maitred.testing.v1.Echo"
NAME = "echo.maitred.test"
DNSMASQ = shutil.which("dnsmasq") or ("/usr/sbin/dnsmasq" if os.path.exists("/usr/sbin/dnsmasq") else None)


@maitred_only
@unittest.skipIf(DNSMASQ is None, "dnsmasq (Debian dnsmasq-base) is not installed")
class Dns(MaitredTest):
    def start_dns(self, hosts):
        self.hosts_path = os.path.join(self.tmp, "hosts")
        self.write_hosts(hosts)
        self.dns_port = free_port()
        argv = [DNSMASQ, "--no-daemon", "--conf-file=/dev/null", "--port=%d" % self.dns_port,
                "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
                "--addn-hosts=" + self.hosts_path, "--pid-file=", "--user=root", "--group=root",
                "--log-queries", "--log-facility=-", "--local-ttl=1"]
        self.dns = Proc("dnsmasq", argv, self.tmp)
        self._procs.append((self.dns, False))

        def up():
            if not self.dns.alive():
                raise AssertionError("dnsmasq exited:\n" + self.dns.output())
            return "started" in self.dns.output()
        wait_until(up, START_LIMIT, "dnsmasq to start")

    def write_hosts(self, ips, name=NAME):
        with open(self.hosts_path + ".new", "w") as f:
            for ip in ips:
                f.write("%s %s\n" % (ip, name))
        os.rename(self.hosts_path + ".new", self.hosts_path)

    def set_hosts(self, ips):
        """New records; dnsmasq rereads its hosts files on SIGHUP."""
        self.write_hosts(ips)
        n = self.dns.output().count("read " + self.hosts_path)
        self.dns.signal(signal.SIGHUP)
        wait_until(lambda: self.dns.output().count("read " + self.hosts_path) > n, START_LIMIT,
                   "dnsmasq to reread its hosts file")

    def upstreams(self, hosts):
        first = self.start_upstream("u2", host=hosts[0])
        rest = [self.start_upstream("u%s" % h.rsplit(".", 1)[1], host=h, port=first.port) for h in hosts[1:]]
        return [first] + rest

    def dns_service(self, port, refresh="1s"):
        return {"name": SVC, "lb": {"policy": "ROUND_ROBIN"},
                "discovery": {"dns": {"name": NAME, "port": port, "refresh": refresh,
                                      "resolvers": ["127.0.0.1:%d" % self.dns_port]}}}

    def served_by(self, stub, n):
        seen = {}
        for _ in range(n):
            r = stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            seen[r.instance] = seen.get(r.instance, 0) + 1
        return seen

    def test_all_addresses_then_added_then_removed(self):
        ups = self.upstreams(["127.0.0.2", "127.0.0.3", "127.0.0.4"])
        self.start_dns(["127.0.0.2", "127.0.0.3"])
        m = self.start_maitred(self.config([self.dns_service(ups[0].port)]))
        stub = self.echo(m)
        # Until the first answer the service has no endpoint.
        wait_until(lambda: "service %s: 2 endpoints" % SVC in m.proc.output(), CALL_LIMIT,
                   "the first resolution")
        seen = self.served_by(stub, 20)
        self.assertEqual(seen, {"u2": 10, "u3": 10}, "round robin over both addresses")
        # Added: 127.0.0.4 gets traffic.
        self.set_hosts(["127.0.0.2", "127.0.0.3", "127.0.0.4"])
        wait_until(lambda: "service %s: 3 endpoints" % SVC in m.proc.output(), CALL_LIMIT, "the added address")
        seen = self.served_by(stub, 30)
        self.assertEqual(seen, {"u2": 10, "u3": 10, "u4": 10})
        # Removed: 127.0.0.2 stops getting calls.
        self.set_hosts(["127.0.0.3", "127.0.0.4"])
        wait_until(lambda: m.proc.output().count("service %s: 2 endpoints" % SVC) >= 2, CALL_LIMIT,
                   "the removal")
        before = ups[0].stats().total
        seen = self.served_by(stub, 20)
        self.assertEqual(seen, {"u3": 10, "u4": 10})
        self.assertEqual(ups[0].stats().total, before)
        self.stop_maitred(m)

    def test_failure_keeps_the_last_good_set(self):
        ups = self.upstreams(["127.0.0.2", "127.0.0.3"])
        self.start_dns(["127.0.0.2", "127.0.0.3"])
        m = self.start_maitred(self.config([self.dns_service(ups[0].port)]))
        stub = self.echo(m)
        wait_until(lambda: "service %s: 2 endpoints" % SVC in m.proc.output(), CALL_LIMIT,
                   "the first resolution")
        self.dns.stop()
        wait_until(lambda: re.search(r"cannot resolve %s: .*keeping its last 2 addresses" % re.escape(NAME),
                                     m.proc.output()), CALL_LIMIT, "the failure to be logged")
        self.assertEqual(self.served_by(stub, 20), {"u2": 10, "u3": 10})
        self.stop_maitred(m)

    def test_resolutions_and_failures_in_metrics(self):
        ups = self.upstreams(["127.0.0.2", "127.0.0.3"])
        self.start_dns(["127.0.0.2", "127.0.0.3"])
        admin = free_port()
        m = self.start_maitred(self.config([self.dns_service(ups[0].port)], admin="127.0.0.1:%d" % admin))
        wait_until(lambda: "service %s: 2 endpoints" % SVC in m.proc.output(), CALL_LIMIT,
                   "the first resolution")

        def scrape():
            st, _, body = admin_request(admin, "GET", "/metrics")
            self.assertEqual(st, 200, body)
            ss = samples(body)
            return (value(ss, "maitred_dns_resolutions_total", service=SVC),
                    value(ss, "maitred_dns_resolution_failures_total", service=SVC),
                    value(ss, "maitred_discovery_last_sync_timestamp_seconds", service=SVC, source="dns"),
                    value(ss, "maitred_discovery_endpoints", service=SVC, source="dns"))
        n, fails, synced, eps = scrape()
        self.assertGreaterEqual(n, 1)
        self.assertEqual((fails, eps), (0, 2))
        self.assertIsNotNone(synced)
        self.dns.stop()
        wait_until(lambda: scrape()[1] >= 1, CALL_LIMIT, "a failed resolution to be counted")
        n, fails, synced, eps = scrape()
        # While the server is down nothing resolves: the last sync stays.
        wait_until(lambda: scrape()[1] >= fails + 1, CALL_LIMIT, "another failed resolution")
        n2, fails2, synced2, eps2 = scrape()
        self.assertEqual((synced2, eps2), (synced, 2))
        self.assertEqual(n2 - n, fails2 - fails)  # every lookup since failed
        st, _, body = admin_request(admin, "GET", "/clusters")
        d = json.loads(body)["services"][0]["discovery"]
        self.assertEqual((d["source"], d["endpoints"]), ("dns", 2))
        self.assertGreaterEqual(d["resolution_failures"], fails2)
        self.stop_maitred(m)

    def test_no_answer_yet_waits_then_a_failed_resolution_is_unavailable_naming_why(self):
        """Until the resolver answers, a call waits for the first set
        (discovery.initial_wait): its deadline ends it naming the wait.
        Once the lookup fails (the resolver never answers: evdns gives
        up), that is the source's answer: calls fail UNAVAILABLE at once,
        naming it."""
        self.hosts_path = os.path.join(self.tmp, "hosts")
        mute = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # reads nothing, answers nothing
        self.addCleanup(mute.close)
        mute.bind(("127.0.0.1", 0))
        self.dns_port = mute.getsockname()[1]
        m = self.start_maitred(self.config([self.dns_service(1)]))
        c = H2Client(m.port)
        self.addCleanup(c.close)
        sid = c.call("/%s/Unary" % SVC, messages=[pb.EchoRequest().SerializeToString()], timeout_header="200m")
        h = c.wait(sid).status_headers() or {}
        self.assertEqual(h.get("grpc-status"), "4", h)  # DEADLINE_EXCEEDED, maitred's own
        self.assertIn("waiting for the first DNS answer", urllib.parse.unquote(h.get("grpc-message", "")))

        def failed_at_once():
            try:
                self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            except grpc.RpcError as e:
                return e if "dns: %s has no address" % NAME in e.details() else None
            return None
        e = wait_until(failed_at_once, CALL_LIMIT, "the failed lookup to be the service's reason")
        self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE)
        self.stop_maitred(m)


@maitred_only
class ResolverByHand(MaitredTest):
    """A DNS service whose resolver is a UDP socket of the test's: it
    reads the queries, and answers only when the test does."""

    def resolver(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(sock.close)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(CALL_LIMIT)
        svc = {"name": SVC, "lb": {"policy": "ROUND_ROBIN"},
               "discovery": {"dns": {"name": NAME, "port": 1, "refresh": "1s",
                                     "resolvers": ["127.0.0.1:%d" % sock.getsockname()[1]]}}}
        return sock, svc

    @staticmethod
    def queries(dns):
        """maitred's A and AAAA queries: {1: (query, end of its name,
        peer), 28: ...}."""
        import struct
        got = {}
        while len(got) < 2:
            q, peer = dns.recvfrom(512)
            i = 12
            while i < len(q) and q[i]:
                i += 1 + q[i]
            got[struct.unpack("!H", q[i + 1:i + 3])[0]] = (q, i, peer)
        return got

    @staticmethod
    def reply(q, i, rcode=0, a=None):
        """The reply to query q (its name ending at i): with a, one A
        record of that address; else none, with rcode."""
        import struct
        head = q[:2] + struct.pack("!HHHHH", 0x8180 | rcode, 1, 1 if a else 0, 0, 0) + q[12:i + 5]
        return head + (struct.pack("!HHHIH", 0xc00c, 1, 1, 60, 4) + socket.inet_aton(a) if a else b"")

    def hold(self, m):
        """maitred stopped (SIGSTOP) until the test sends SIGCONT: what
        arrives meanwhile is read in one wait of its loop."""
        def stopped():
            with open("/proc/%d/stat" % m.proc.pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        m.proc.signal(signal.SIGSTOP)
        self.addCleanup(m.proc.signal, signal.SIGCONT)
        wait_until(stopped, CALL_LIMIT, "maitred to stop")

    def test_sigterm_while_the_lookup_is_in_flight_exits_clean(self):
        """SIGTERM while the source's lookup waits for an answer that never
        comes: maitred exits 0 at once, and under ASan LeakSanitizer finds
        nothing at its exit. Green before too: the source stops in the
        control loop's turn that takes the signal, and its resolver's end
        drops the queries without a callback; a guard beside the xDS
        client's lookup (test_xds), freed after the loop, which leaked
        (libevent frees a failed lookup's records only in its deferred
        callback: the control loop now runs those it owes before its base
        goes)."""
        mute, svc = self.resolver()
        m = self.start_maitred(self.config([svc]))
        mute.recvfrom(512)  # the lookup is out, and will never be answered
        self.stop_maitred(m)

    def test_sigterm_in_the_turn_of_an_answer_exits_clean(self):
        """The answer to the source's lookup and SIGTERM come in one turn
        of the control loop, the answer first: libevent defers the
        answer's callback to after the signal's, whose stop of the source
        must not free what that callback reads. maitred is stopped
        (SIGSTOP) while both arrive, so that one wait of its loop returns
        both. Red before under ASan: the source and its names were freed
        at the stop, and the callback read them (heap-use-after-free)."""
        dns, svc = self.resolver()
        m = self.start_maitred(self.config([svc]))
        q, i, peer = self.queries(dns)[1]
        answer = self.reply(q, i, a="127.0.0.2")
        self.hold(m)
        dns.sendto(answer, peer)
        m.proc.signal(signal.SIGTERM)
        m.proc.signal(signal.SIGCONT)
        m.proc.wait(STOP_LIMIT)
        self.stop_maitred(m)

    def test_sighup_in_the_turn_of_an_answer_and_a_failure(self):
        """The A answer, a SERVFAIL for the AAAA query and SIGHUP come in
        one turn of the control loop: the reload stops the source with
        both callbacks due (one per request: the failure carries no
        type), and each comes once, the last freeing the source. maitred
        applies the reload, keeps serving its control loop, and exits
        clean (ASan). A guard of the stopped source's count."""
        dns, svc = self.resolver()
        m = self.start_maitred(self.config([svc]))
        queries = self.queries(dns)
        self.assertEqual(sorted(queries), [1, 28])
        q, i, peer = queries[1]
        answer = self.reply(q, i, a="127.0.0.2")
        q6, i6, peer6 = queries[28]
        servfail = self.reply(q6, i6, rcode=2)
        self.hold(m)
        dns.sendto(answer, peer)
        dns.sendto(servfail, peer6)
        m.proc.signal(signal.SIGHUP)
        m.proc.signal(signal.SIGCONT)
        wait_until(lambda: re.search(r"reload: .* applied", m.proc.output()), CALL_LIMIT, "the reload")
        dns.recvfrom(512)  # the new source asks again: its loop runs
        self.stop_maitred(m)


@maitred_only
@unittest.skipUnless(can_bind_mount(), "needs root and mount namespaces (unshare --mount) for a private /etc/hosts")
class StaticHostname(MaitredTest):
    """A host name in static `endpoints` goes through the resolver: every
    address it has becomes an endpoint, not
    getaddrinfo's first. maitred runs in its own mount namespace with a
    hosts file of the test's (util-linux's unshare; the process keeps its
    PID through the execs), so the name's addresses are known and on
    loopback."""

    def test_every_address_of_a_static_name_is_an_endpoint(self):
        hosts = self.hosts_file("127.0.0.1 localhost\n127.0.0.2 %s\n127.0.0.3 %s\n" % (NAME, NAME))
        u2 = self.start_upstream("u2", host="127.0.0.2")
        u3 = self.start_upstream("u3", host="127.0.0.3", port=u2.port)
        svc = {"name": SVC, "lb": {"policy": "ROUND_ROBIN"},
               "endpoints": [{"address": "%s:%d" % (NAME, u2.port)}]}
        m = self.start_maitred(self.config([svc]),
                               wrap=hosts_wrap(hosts))
        wait_until(lambda: "service %s: 2 endpoints" % SVC in m.proc.output(), CALL_LIMIT,
                   "both addresses of %s" % NAME)
        stub = self.echo(m)
        seen = {}
        for _ in range(20):
            r = stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            seen[r.instance] = seen.get(r.instance, 0) + 1
        self.assertEqual(seen, {"u2": 10, "u3": 10}, "round robin over every address of the name")
        self.stop_maitred(m)

    def resolver_for_getaddrinfo_only(self, ip):
        """A resolver on ip:53 that answers getaddrinfo (the name as
        written, lower case: maitred's load) and, until state["mute"] is
        cleared, drops maitred's own resolver's queries (evdns randomizes
        the case of a name); counts them in state["dropped"] and
        state["answered_evdns"]. A thread, stopped and joined at cleanup."""
        import struct
        import threading
        dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(dns.close)
        dns.bind((ip, 53))
        dns.settimeout(0.2)
        state = {"mute": True, "dropped": 0, "answered_evdns": 0, "stop": False}

        def serve():
            while not state["stop"]:
                try:
                    q, peer = dns.recvfrom(512)
                except socket.timeout:
                    continue
                except OSError:
                    return
                i, labels = 12, []
                while i < len(q) and q[i]:
                    labels.append(q[i + 1:i + 1 + q[i]])
                    i += 1 + q[i]
                qtype = struct.unpack("!H", q[i + 1:i + 3])[0]
                name = b".".join(labels)
                evdns = name != name.lower()
                if evdns and state["mute"]:
                    state["dropped"] += 1
                    continue
                question = q[12:i + 5]
                an = qtype == 1 and name.lower() == NAME.encode()
                r = q[:2] + struct.pack("!HHHHH", 0x8180, 1, 1 if an else 0, 0, 0) + question
                if an:
                    r += struct.pack("!HHHIH", 0xc00c, 1, 1, 60, 4) + socket.inet_aton("127.0.0.1")
                dns.sendto(r, peer)
                if evdns:
                    state["answered_evdns"] += 1
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        self.addCleanup(t.join)
        self.addCleanup(state.__setitem__, "stop", True)
        resolv = os.path.join(self.tmp, "resolv.conf")
        with open(resolv, "w") as f:
            f.write("nameserver %s\n" % ip)
        return state, resolv

    def test_a_reload_while_a_static_name_is_looked_up(self):
        """A reload (every source stops and starts again) while the
        resolver has not answered a static name's lookup: the stopped
        source's lookup ends without touching it. The test's resolver
        answers getaddrinfo at load (a name as written, lower case) and
        not maitred's own resolver (evdns randomizes the case of a name)
        until told to. Red before under ASan: the lookup's late callback
        wrote its name's slot, freed with the source."""
        up = self.start_upstream("u")
        hosts = self.hosts_file("127.0.0.1 localhost\n")
        state, resolv = self.resolver_for_getaddrinfo_only("127.0.0.79")
        wrap = hosts_wrap(hosts, resolv)
        svc = {"name": SVC, "lb": {"policy": "ROUND_ROBIN"},
               "endpoints": [{"address": "%s:%d" % (NAME, up.port)}]}
        m = self.start_maitred(self.config([svc]), wrap=wrap)
        wait_until(lambda: state["dropped"] > 0, CALL_LIMIT, "maitred's lookup of %s, unanswered" % NAME)
        m.proc.signal(signal.SIGHUP)
        wait_until(lambda: re.search(r"reload: .* applied", m.proc.output()), CALL_LIMIT, "the reload")
        self.assertEqual(self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "u")
        # The new source's lookup answered (evdns asks again), so none is
        # pending when maitred stops.
        state["mute"] = False
        wait_until(lambda: state["answered_evdns"] >= 2, CALL_LIMIT, "maitred's lookup answered")
        self.assertEqual(self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "u")
        self.stop_maitred(m)

    def test_sigterm_while_a_static_name_is_looked_up_exits_clean(self):
        """SIGTERM while maitred's resolver has not answered a static
        name's lookup: the stop cancels it, and maitred exits 0 without a
        sanitizer report: the cancelled lookup's callback, deferred by
        libevent, frees the source and libevent's records of it, in the
        loop's turn of the signal or, at the latest, in the callbacks the
        control loop runs before its base goes. Green before too (a guard
        of that order)."""
        up = self.start_upstream("u")
        hosts = self.hosts_file("127.0.0.1 localhost\n")
        state, resolv = self.resolver_for_getaddrinfo_only("127.0.0.80")
        svc = {"name": SVC, "lb": {"policy": "ROUND_ROBIN"},
               "endpoints": [{"address": "%s:%d" % (NAME, up.port)}]}
        m = self.start_maitred(self.config([svc]), wrap=hosts_wrap(hosts, resolv))
        wait_until(lambda: state["dropped"] > 0, CALL_LIMIT, "maitred's lookup of %s, unanswered" % NAME)
        self.stop_maitred(m)

    def test_a_static_name_keeps_its_endpoints_zone_and_metadata(self):
        """The resolver's set carries the config's zone and metadata, of
        the name's addresses and of the literal endpoints beside it: with
        this sidecar in z1, the name's endpoint in z2 gets no call while
        the literal one in z1 answers."""
        hosts = self.hosts_file("127.0.0.1 localhost\n127.0.0.2 %s\n" % NAME)
        far = self.start_upstream("far", host="127.0.0.2")
        near = self.start_upstream("near")
        svc = {"name": SVC, "lb": {"policy": "ROUND_ROBIN"},
               "endpoints": [{"address": "%s:%d" % (NAME, far.port), "zone": "z2", "metadata": {"v": "2"}},
                             {"address": near.address, "zone": "z1", "metadata": {"v": "1"}}]}
        admin = free_port()
        m = self.start_maitred(self.config([svc], zone="z1", admin="127.0.0.1:%d" % admin),
                               wrap=hosts_wrap(hosts))

        def resolved():
            try:
                st, _, body = admin_request(admin, "GET", "/metrics")
            except OSError:
                return False  # the admin port not open yet
            return st == 200 and value(samples(body), "maitred_discovery_endpoints", service=SVC, source="dns") == 2
        # The resolver's first set applied (the config's own came before it).
        wait_until(resolved, CALL_LIMIT, "the resolver's set")
        stub = self.echo(m)
        seen = {}
        for _ in range(20):
            r = stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            seen[r.instance] = seen.get(r.instance, 0) + 1
        self.assertEqual(seen, {"near": 20}, "the local zone only")
        self.stop_maitred(m)

    def test_every_address_of_a_static_name_is_checked_against_the_name(self):
        """TLS without server_name: each address of a static host name
        presents a certificate for the name (SNI and check), the addresses
        the resolver found beside getaddrinfo's first too."""
        from harness import TestCA
        ca = TestCA(os.path.join(self.tmp, "ca"), server_name=NAME)
        hosts = self.hosts_file("127.0.0.1 localhost\n127.0.0.2 %s\n127.0.0.3 %s\n" % (NAME, NAME))
        u2 = self.start_upstream("u2", host="127.0.0.2", tls=ca)
        u3 = self.start_upstream("u3", host="127.0.0.3", port=u2.port, tls=ca)
        svc = {"name": SVC, "lb": {"policy": "ROUND_ROBIN"}, "tls": {"ca_file": ca.ca_file},
               "endpoints": [{"address": "%s:%d" % (NAME, u2.port)}]}
        m = self.start_maitred(self.config([svc]),
                               wrap=hosts_wrap(hosts))
        wait_until(lambda: "service %s: 2 endpoints" % SVC in m.proc.output(), CALL_LIMIT,
                   "both addresses of %s" % NAME)
        stub = self.echo(m)
        seen = {}
        for _ in range(20):
            try:
                r = stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
                seen[r.instance] = seen.get(r.instance, 0) + 1
            except grpc.RpcError as e:
                seen[e.details()] = seen.get(e.details(), 0) + 1
        self.assertEqual(seen, {"u2": 10, "u3": 10})
        self.stop_maitred(m)


if __name__ == "__main__":
    unittest.main()
