"""Mesh mode (issue 17): an inbound listener that terminates mTLS from other
sidecars, takes the caller's identity from its certificate (SPIFFE URI
SAN), authorizes by identity and method, and hands the call to the local
app over h2c with x-forwarded-client-cert; the client side checks the
server's identity (services[].tls.server_identity).

Two real maitreds: the client side (A: the app's calls leave over mTLS)
and the server side (B: the inbound listener in front of its app), grpcio
apps and clients, certificates made with openssl. Nothing here is decided
by timing: every wait is a bounded loop whose limit is a hang guard."""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc

import test_calls
import test_conformance
import test_deadline_cancel
import test_metadata
from harness import (MaitredTest, accepted, grow_log, maitred_only, needs_h2, pb, pb_grpc, call_id, free_port, port_accepts,
                     wait_until, wakeups, CALL_LIMIT, START_LIMIT, CHANNEL_OPTIONS, SLOW)

NS = "spiffe://cluster.local/ns/shop/sa/"
CART = NS + "cart"                # the client side's identity (A)
SERVER = NS + "cart-server"       # the server side's (B)
ECHO = "/maitred.testing.v1.Echo/"


class MeshCA:
    """A CA made with the openssl CLI, and leaf certificates with a SPIFFE
    URI SAN (plus IP:127.0.0.1, for clients that check the address)."""

    def __init__(self, directory, name="mesh test CA"):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.ca_key, self.ca_file = self.p("ca.key"), self.p("ca.pem")
        self.key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        self._ssl(["req", "-x509"] + self.key + ["-keyout", self.ca_key, "-out", self.ca_file,
                   "-days", "3", "-subj", "/CN=" + name,
                   "-addext", "basicConstraints=critical,CA:TRUE",
                   "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        self.n = 0

    def p(self, name):
        return os.path.join(self.dir, name)

    def _ssl(self, args):
        res = subprocess.run(["openssl"] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        if res.returncode != 0:
            raise RuntimeError("openssl %s failed:\n%s" % (" ".join(args), res.stdout.decode(errors="replace")))

    def leaf(self, name, uri=None, dns=None, serial=None):
        """(cert, key) paths of a new leaf for `uri` (and/or `dns`)."""
        self.n += 1
        sans = ["IP:127.0.0.1"]
        if uri:
            sans.insert(0, "URI:" + uri)
        if dns:
            sans.insert(1 if uri else 0, "DNS:" + dns)
        base = "%s-%d" % (name, self.n)
        with open(self.p(base + ".ext"), "w") as f:
            f.write("subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n"
                    "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n" % ",".join(sans))
        key, csr, cert = self.p(base + ".key"), self.p(base + ".csr"), self.p(base + ".pem")
        self._ssl(["req"] + self.key + ["-keyout", key, "-out", csr, "-subj", "/CN=" + name])
        self._ssl(["x509", "-req", "-in", csr, "-CA", self.ca_file, "-CAkey", self.ca_key,
                   "-set_serial", str(serial or (1000 + self.n)), "-out", cert, "-days", "3",
                   "-extfile", self.p(base + ".ext")])
        return cert, key


def der_of(pem_path):
    with open(pem_path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def metric(text, name, **labels):
    """The value of one sample of the /metrics text, or None."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


class Mesh(MaitredTest):
    """Certificates for the whole class; a mesh (A -> B -> app) per test."""

    @classmethod
    def setUpClass(cls):
        cls.cadir = tempfile.mkdtemp(prefix="maitred-mesh-")
        cls.ca = MeshCA(os.path.join(cls.cadir, "mesh"))
        cls.other = MeshCA(os.path.join(cls.cadir, "other"), name="another CA")
        cls.server_cert, cls.server_key = cls.ca.leaf("cart-server", uri=SERVER)
        cls.client_cert, cls.client_key = cls.ca.leaf("cart", uri=CART)
        cls.pay_cert, cls.pay_key = cls.ca.leaf("pay", uri="spiffe://cluster.local/ns/pay/sa/api")
        cls.dns_cert, cls.dns_key = cls.ca.leaf("dnsonly", dns="cart.shop.svc")
        cls.stranger_cert, cls.stranger_key = cls.other.leaf("cart", uri=CART)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.cadir, ignore_errors=True)

    # --- the server side (B) ------------------------------------------------
    def start_server_side(self, app, authorization=None, client_ca=True, admin=False, cert=None, key=None,
                          access_log=None, port=None, register=None, top=None, **inbound):
        """B: an inbound listener in front of `app`, no service of its own.
        Returns (maitred, inbound address)."""
        port = port or free_port()
        tls = {"cert_file": cert or self.server_cert, "key_file": key or self.server_key}
        if client_ca:
            tls["client_ca_file"] = self.ca.ca_file
        entry = {"listen": "127.0.0.1:%d" % port, "app": app.address, "tls": tls}
        if authorization is not None:
            entry["authorization"] = authorization
        entry.update(inbound)
        # Another port than the inbound one: a port given back by a
        # stopped maitred (a restart on the same inbound port) is free and
        # free_port() may well hand it out again.
        listen = free_port()
        while listen == port:
            listen = free_port()
        cfg = {"listen": "127.0.0.1:%d" % listen, "workers": 1, "drain_timeout": "5s",
               "services": [], "inbound": [entry]}
        if admin:
            cfg["admin"] = "127.0.0.1:%d" % free_port()
        if access_log:
            cfg["log"] = {"access": {"path": access_log}}
        if register:
            cfg["register"] = register
        cfg.update(top or {})
        m = self.start_maitred(cfg)
        wait_until(lambda: port_accepts(port, 0.5), START_LIMIT, "the inbound listener")
        m.inbound = "127.0.0.1:%d" % port
        m.inbound_port = port
        m.admin = cfg.get("admin")
        if m.admin:
            # The inbound sockets are bound before the admin endpoint is.
            admin_port = int(m.admin.rsplit(":", 1)[1])
            wait_until(lambda: port_accepts(admin_port, 0.5), START_LIMIT, "the admin endpoint")
        return m, m.inbound

    def allow_cart(self, methods=(ECHO + "*",)):
        return {"default": "DENY", "rules": [{"principals": [CART], "methods": list(methods)}]}

    # --- the client side (A) ------------------------------------------------
    def start_client_side(self, inbound, identity=SERVER, cert=None, key=None, **tls_extra):
        tls = {"ca_file": self.ca.ca_file, "cert_file": cert or self.client_cert,
               "key_file": key or self.client_key}
        if identity is not None:
            tls["server_identity"] = identity
        tls.update(tls_extra)
        return self.start_maitred(self.config([self.service("*", [inbound], tls=tls)]))

    def mesh(self, authorization=None, app_name="app", **server):
        """app <- B <- A; returns (app, B, A)."""
        app = self.start_upstream(app_name)
        b, addr = self.start_server_side(app, self.allow_cart() if authorization is None else authorization,
                                         **server)
        a = self.start_client_side(addr)
        return app, b, a

    # --- a caller straight to B (no maitred A) -------------------------------
    def direct(self, inbound, cert=None, key=None, ca=None):
        """A grpcio channel with TLS straight to B's inbound listener."""
        creds = grpc.ssl_channel_credentials(read((ca or self.ca).ca_file),
                                             read(key) if key else None, read(cert) if cert else None)
        ch = grpc.secure_channel(inbound, creds, options=CHANNEL_OPTIONS)
        self._channels.append(ch)
        return pb_grpc.EchoStub(ch)

    def scrape(self, b):
        with urllib.request.urlopen("http://%s/metrics" % b.admin, timeout=CALL_LIMIT) as r:
            return r.read().decode()

    def xfcc_of(self, resp):
        return [v.decode() for k, v in ((m.key, m.value) for m in resp.metadata) if k == "x-forwarded-client-cert"]

    def assert_app_never_saw(self, app):
        self.assertEqual(app.stats().total, 0, "the app saw a call it should not have")


class Authorization(Mesh):
    @maitred_only
    def test_allowed_through_both_hops_with_xfcc(self):
        app, b, a = self.mesh()
        stub = self.echo(a)
        data = os.urandom(200000)
        resp, call = stub.Unary.with_call(pb.EchoRequest(payload=data), metadata=[("x-k-bin", b"\x00\xff")],
                                          timeout=CALL_LIMIT)
        self.assertEqual(resp.payload, data)
        self.assertEqual(resp.instance, "app")
        self.assertIn(("x-k-bin", b"\x00\xff"), list(call.trailing_metadata()))
        # Envoy's format: By= this listener's identity, Hash= the sha256 of
        # the caller's DER certificate, URI= the caller's identity.
        want = "By=%s;Hash=%s;URI=%s" % (SERVER, hashlib.sha256(der_of(self.client_cert)).hexdigest(), CART)
        self.assertEqual(self.xfcc_of(resp), [want])
        got = list(stub.BidiStream(iter([pb.EchoRequest(response_count=2)] * 3), timeout=CALL_LIMIT))
        self.assertEqual(len(got), 6)
        self.assertEqual(app.stats().total, 2)

    @maitred_only
    def test_denied_by_method_names_identity_and_method(self):
        app, b, a = self.mesh(self.allow_cart([ECHO + "Unary"]))
        stub = self.echo(a)
        self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "app")
        with self.assertRaises(grpc.RpcError) as cm:
            list(stub.ServerStream(pb.EchoRequest(response_count=2), timeout=CALL_LIMIT))
        err = cm.exception
        self.assertEqual(err.code(), grpc.StatusCode.PERMISSION_DENIED, err.details())
        self.assertIn(CART, err.details())
        self.assertIn(ECHO + "ServerStream", err.details())
        # The app saw only the allowed call.
        self.assertEqual(app.stats().total, 1)
        self.assertEqual(dict(app.stats().calls), {ECHO + "Unary": 1})

    @maitred_only
    def test_another_identity_is_denied_and_a_prefix_allows(self):
        app = self.start_upstream("app")
        rules = {"rules": [{"principals": ["spiffe://cluster.local/ns/pay/*"], "methods": [ECHO + "Unary"]}]}
        b, addr = self.start_server_side(app, rules)
        # cart: no rule for it, default DENY.
        with self.assertRaises(grpc.RpcError) as cm:
            self.direct(addr, self.client_cert, self.client_key).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn(CART + " is not allowed to call " + ECHO + "Unary", cm.exception.details())
        self.assert_app_never_saw(app)
        # pay matches the prefix.
        resp = self.direct(addr, self.pay_cert, self.pay_key).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(resp.instance, "app")

    @maitred_only
    def test_allow_authenticated_and_a_dns_identity(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, {"default": "ALLOW_AUTHENTICATED"})
        resp = self.direct(addr, self.dns_cert, self.dns_key).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        xfcc = self.xfcc_of(resp)
        self.assertEqual(len(xfcc), 1, xfcc)
        # No URI SAN: the identity is the first DNS SAN.
        self.assertTrue(xfcc[0].endswith(";DNS=cart.shop.svc"), xfcc)
        self.assertIn("Hash=" + hashlib.sha256(der_of(self.dns_cert)).hexdigest(), xfcc[0])

    @maitred_only
    def test_allow_all_without_client_certificates(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, {"default": "ALLOW_ALL"}, client_ca=False)
        resp = self.direct(addr).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(resp.instance, "app")
        # No certificate was asked for: nothing to tell the app.
        self.assertEqual(self.xfcc_of(resp), [])

    @maitred_only
    def test_default_deny_without_rules_refuses_everyone(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, {})
        with self.assertRaises(grpc.RpcError) as cm:
            self.direct(addr, self.client_cert, self.client_key).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assert_app_never_saw(app)

    @maitred_only
    def test_client_xfcc_is_replaced_never_forwarded(self):
        app, b, a = self.mesh()
        spoof = "By=spiffe://evil;Hash=00;URI=spiffe://cluster.local/ns/shop/sa/admin"
        resp = self.echo(a).Unary(pb.EchoRequest(), metadata=[("x-forwarded-client-cert", spoof)],
                                  timeout=CALL_LIMIT)
        xfcc = self.xfcc_of(resp)
        self.assertEqual(len(xfcc), 1, xfcc)
        self.assertNotIn("evil", xfcc[0])
        self.assertTrue(xfcc[0].endswith(";URI=" + CART), xfcc)
        # Straight to B too (no maitred A to pass it along).
        resp = self.direct(b.inbound, self.client_cert, self.client_key).Unary(
            pb.EchoRequest(), metadata=[("x-forwarded-client-cert", spoof), ("x-forwarded-client-cert", "x")],
            timeout=CALL_LIMIT)
        self.assertEqual(len(self.xfcc_of(resp)), 1)
        self.assertNotIn("evil", self.xfcc_of(resp)[0])

    @maitred_only
    def test_max_concurrent_calls_sheds(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, self.allow_cart(), max_concurrent_calls=2)
        a = self.start_client_side(addr)
        stub = self.echo(a)
        ids = [call_id(), call_id()]
        futs = [stub.Unary.future(pb.EchoRequest(call_id=c, hold=True), timeout=CALL_LIMIT * 2) for c in ids]
        for c in ids:
            self.assertTrue(app.wait_call(c, "STARTED").started)
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, cm.exception.details())
        self.assertIn("max_concurrent_calls (2)", cm.exception.details())
        for c in ids:
            app.release(c)
        for f in futs:
            self.assertEqual(f.result(timeout=CALL_LIMIT).instance, "app")
        # Both slots came back: two calls are held again, and a third is
        # shed again (one slot leaked would shed the second).
        ids = [call_id(), call_id()]
        futs = [stub.Unary.future(pb.EchoRequest(call_id=c, hold=True), timeout=CALL_LIMIT * 2) for c in ids]
        for c in ids:
            self.assertTrue(app.wait_call(c, "STARTED").started, "a slot did not come back")
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, cm.exception.details())
        for c in ids:
            app.release(c)
        for f in futs:
            self.assertEqual(f.result(timeout=CALL_LIMIT).instance, "app")

    @maitred_only
    def test_a_reload_applies_new_rules(self):
        app, b, a = self.mesh(self.allow_cart([ECHO + "Unary"]))
        stub = self.echo(a)
        with self.assertRaises(grpc.RpcError) as cm:
            stub.ClientStream(iter([pb.EchoRequest()]), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        with open(b.config_path) as f:
            text = f.read()
        with open(b.config_path, "w") as f:
            f.write(text.replace(json.dumps(ECHO + "Unary"), json.dumps(ECHO + "ClientStream")))
        b.proc.signal(signal.SIGHUP)
        wait_until(lambda: "reload: %s applied" % b.config_path in b.proc.output(), CALL_LIMIT, "the reload")
        # The same connection, the new rules.
        self.assertEqual(stub.ClientStream(iter([pb.EchoRequest()]), timeout=CALL_LIMIT).instance, "app")
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)

    @maitred_only
    def test_decisions_in_access_log_and_metrics(self):
        app = self.start_upstream("app")
        log = os.path.join(self.tmp, "access.log")
        b, addr = self.start_server_side(app, self.allow_cart([ECHO + "Unary"]), admin=True, access_log=log)
        a = self.start_client_side(addr)
        stub = self.echo(a)
        for _ in range(3):
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        with self.assertRaises(grpc.RpcError):
            stub.ClientStream(iter([pb.EchoRequest()]), timeout=CALL_LIMIT)
        with self.assertRaises(grpc.RpcError):
            self.direct(addr, self.pay_cert, self.pay_key).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)

        def lines():
            return [l for l in read(log, "r").splitlines() if " inbound=" in l] if os.path.exists(log) else []
        wait_until(lambda: len(lines()) >= 5, CALL_LIMIT, "five inbound access-log lines")
        got = lines()
        allowed = [l for l in got if "authz=allow" in l]
        denied = [l for l in got if "authz=deny" in l]
        self.assertEqual(len(allowed), 3, got)
        self.assertEqual(len(denied), 2, got)
        self.assertTrue(all("identity=%s " % CART in l + " " for l in allowed), allowed)
        self.assertTrue(any("identity=spiffe://cluster.local/ns/pay/sa/api" in l and "method=Unary" in l
                            and "grpc_status=PERMISSION_DENIED" in l for l in denied), denied)
        self.assertTrue(all("inbound=%s" % addr in l for l in got), got)
        text = self.scrape(b)
        lab = dict(listener=addr)
        self.assertEqual(metric(text, "maitred_inbound_calls_total", identity=CART, decision="allow", **lab), 3)
        self.assertEqual(metric(text, "maitred_inbound_calls_total", identity=CART, decision="deny", **lab), 1)
        self.assertEqual(metric(text, "maitred_inbound_calls_total", identity="spiffe://cluster.local/ns/pay/sa/api",
                                decision="deny", **lab), 1)


class Handshakes(Mesh):
    """What never reaches the app: refused at the handshake, counted by
    reason, logged once per peer address per second."""

    def refused(self, b, reason):
        return metric(self.scrape(b), "maitred_inbound_handshake_failures_total", listener=b.inbound, reason=reason)

    def assert_refused(self, b, reason, n=1):
        wait_until(lambda: (self.refused(b, reason) or 0) >= n, CALL_LIMIT, "%s refusals counted" % reason)
        self.assertEqual(self.refused(b, reason), n)

    @maitred_only
    def test_no_client_certificate(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, self.allow_cart(), admin=True)
        with self.assertRaises(grpc.RpcError) as cm:
            self.direct(addr).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assert_refused(b, "no_certificate")
        self.assert_app_never_saw(app)
        wait_until(lambda: "refused before HTTP/2 (no_certificate)" in b.proc.output(), CALL_LIMIT,
                   "the refusal's log line")

    @maitred_only
    def test_certificate_from_another_ca(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, self.allow_cart(), admin=True)
        with self.assertRaises(grpc.RpcError) as cm:
            self.direct(addr, self.stranger_cert, self.stranger_key).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assert_refused(b, "bad_certificate")
        self.assert_app_never_saw(app)
        # Through maitred A as well: its certificate from another CA.
        a = self.start_client_side(addr, cert=self.stranger_cert, key=self.stranger_key)
        with self.assertRaises(grpc.RpcError) as cm:
            self.echo(a).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assert_app_never_saw(app)

    @maitred_only
    def test_plain_h2c_on_the_tls_port(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, self.allow_cart(), admin=True)
        ch = grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
        self._channels.append(ch)
        with self.assertRaises(grpc.RpcError) as cm:
            pb_grpc.EchoStub(ch).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        wait_until(lambda: (self.refused(b, "not_tls") or 0) >= 1, CALL_LIMIT, "the h2c refusal counted")
        # A raw preface: the connection is closed, nothing answered.
        s = socket.create_connection(("127.0.0.1", b.inbound_port), timeout=CALL_LIMIT)
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        got = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            pass
        s.close()
        self.assertEqual(got, b"")
        self.assert_app_never_saw(app)

    @maitred_only
    def test_refusals_logged_at_most_once_a_second_per_address(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, self.allow_cart(), admin=True)

        def refuse_one():
            s = socket.create_connection(("127.0.0.1", b.inbound_port), timeout=CALL_LIMIT)
            s.sendall(b"GET / HTTP/1.1\r\n\r\n")
            try:
                s.recv(10)
            except OSError:
                pass
            s.close()

        def lines():
            return re.findall(r"refused before HTTP/2 \(not_tls\): .* \((\d+) more since the last line",
                              b.proc.output())
        n = 20
        start = time.monotonic()
        for _ in range(n):
            refuse_one()
        elapsed = time.monotonic() - start
        self.assert_refused(b, "not_tls", n)
        # At most one line per started second of the burst (and at least one).
        self.assertGreaterEqual(len(lines()), 1)
        self.assertLessEqual(len(lines()), int(elapsed) + 2, lines())
        # Once the second is over, the next refusal's line counts those that
        # got none: every refusal is in a line, or in a line's count.
        before = len(lines())
        for _ in range(int(20 * SLOW)):
            refuse_one()
            n += 1
            try:
                wait_until(lambda: len(lines()) > before, 0.5, "a line")
                break
            except AssertionError:
                continue
        self.assert_refused(b, "not_tls", n)
        got = lines()
        self.assertEqual(sum(1 + int(h) for h in got), n, got)

    @maitred_only
    def test_a_stalled_handshake_ends_at_the_preface_timeout(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, self.allow_cart(), admin=True,
                                         top={"downstream": {"preface_timeout": "1s"}})
        port = b.inbound_port
        s = socket.create_connection(("127.0.0.1", port), timeout=CALL_LIMIT)
        s.sendall(b"\x16")  # a TLS record begun, never finished
        self.assert_refused(b, "timeout")
        self.assertEqual(s.recv(10), b"")  # closed by maitred
        s.close()
        self.assert_app_never_saw(app)

    @maitred_only
    def test_alpn_other_than_h2_is_refused(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, self.allow_cart(), admin=True)
        ctx = ssl.create_default_context(cafile=self.ca.ca_file)
        ctx.load_cert_chain(self.client_cert, self.client_key)
        ctx.set_alpn_protocols(["http/1.1"])
        with self.assertRaises((ssl.SSLError, OSError)):
            with socket.create_connection(("127.0.0.1", b.inbound_port), timeout=CALL_LIMIT) as raw:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.sendall(b"GET / HTTP/1.1\r\n\r\n")
                    if not s.recv(10):
                        raise OSError("closed")
        self.assert_refused(b, "alpn")

    @needs_h2
    @maitred_only
    def test_sessions_resume_with_tickets(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, {"default": "ALLOW_AUTHENTICATED"}, admin=True)
        ctx = ssl.create_default_context(cafile=self.ca.ca_file)
        ctx.load_cert_chain(self.client_cert, self.client_key)
        ctx.set_alpn_protocols(["h2"])
        # First connection: a full handshake; a call, so the TLS 1.3
        # tickets (sent after the handshake) are read.
        c1 = H2ClientOn(ctx, b.inbound_port)
        sid = c1.call(ECHO + "Unary", messages=[b""])
        st = c1.wait(sid)
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)
        session = c1.sock.session
        self.assertFalse(c1.sock.session_reused)
        c1.close()
        c2 = H2ClientOn(ctx, b.inbound_port, session=session)
        sid = c2.call(ECHO + "Unary", messages=[b""])
        st = c2.wait(sid)
        self.assertEqual((st.status_headers() or {}).get("grpc-status"), "0", st.events)
        self.assertTrue(c2.sock.session_reused, "the second connection did not resume")
        c2.close()
        text = self.scrape(b)
        self.assertEqual(metric(text, "maitred_inbound_handshakes_total", listener=addr, session="resumed"), 1)
        self.assertEqual(metric(text, "maitred_inbound_handshakes_total", listener=addr, session="new"), 1)


    @needs_h2
    @maitred_only
    def test_a_handshake_across_a_settings_reload_gets_goaway(self):
        # A peer's connection takes its SETTINGS at accept, before its TLS
        # handshake. A reload changing them while the handshake was under
        # way left that connection out of the GOAWAY every open one got:
        # it ran on the old SETTINGS and the old stream-reset limit for its
        # whole life (an attacker's handshake held across the reload that
        # lowered the limit kept the higher one).
        from h2raw import H2Client
        import h2.config
        import h2.connection
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, {"default": "ALLOW_AUTHENTICATED"})

        raw = socket.create_connection(("127.0.0.1", b.inbound_port), timeout=5)
        self.addCleanup(raw.close)
        wait_until(lambda: accepted(b.proc.pid, b.inbound_port, raw.getsockname()[1]), CALL_LIMIT,
                   "maitred to accept the connection")
        applied = b.proc.output().count("applied")
        with open(b.config_path, "a") as f:
            f.write("downstream:\n  initial_window_size: 300000\n")
        b.proc.signal(signal.SIGHUP)
        wait_until(lambda: b.proc.output().count("applied") > applied, CALL_LIMIT, "the reload")
        # Now the handshake, and HTTP/2.
        ctx = ssl.create_default_context(cafile=self.ca.ca_file)
        ctx.load_cert_chain(self.client_cert, self.client_key)
        ctx.set_alpn_protocols(["h2"])
        c = H2Client.__new__(H2Client)
        c.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        c.sock.settimeout(0.2)
        c.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_inbound_headers=False))
        c.conn.initiate_connection()
        c.streams, c.goaway, c.rsts, c.closed, c._raw = {}, None, [], False, b""
        c._flush()
        self.assertTrue(c.pump(lambda: c.conn.remote_settings.initial_window_size == 300000 or c.goaway is not None),
                        "the connection runs on the old SETTINGS (initial_window_size %d), without GOAWAY"
                        % c.conn.remote_settings.initial_window_size)
        c.close()


def H2ClientOn(ctx, port, session=None):
    """h2raw's client over a TLS connection that may resume `session`."""
    from h2raw import H2Client
    import h2.config
    import h2.connection
    c = H2Client.__new__(H2Client)
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    c.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session)
    c.sock.settimeout(0.2)
    cfg = h2.config.H2Configuration(client_side=True, header_encoding=None, validate_inbound_headers=False)
    c.conn = h2.connection.H2Connection(cfg)
    c.conn.initiate_connection()
    c.streams, c.goaway, c.rsts, c.closed, c._raw = {}, None, [], False, b""
    c._flush()
    return c


class SecureNaming(Mesh):
    @maitred_only
    def test_wrong_server_identity_is_unavailable_naming_both(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, self.allow_cart())
        wrong = NS + "someone-else"
        a = self.start_client_side(addr, identity=wrong)
        with self.assertRaises(grpc.RpcError) as cm:
            self.echo(a).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        err = cm.exception
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        self.assertIn("upstream %s: TLS server identity mismatch: expected %s, presented %s" % (addr, wrong, SERVER),
                      err.details())
        self.assert_app_never_saw(app)

    @maitred_only
    def test_identity_replaces_the_name_check(self):
        # A server certificate without the address it is reached at: with
        # server_identity and no server_name, the identity is what is
        # checked (a mesh peer's certificate names its workload).
        app = self.start_upstream("app")
        cert2, key2 = self._leaf_without_ip("noip", SERVER)
        b, addr = self.start_server_side(app, self.allow_cart(), cert=cert2, key=key2)
        a = self.start_client_side(addr)
        self.assertEqual(self.echo(a).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "app")
        # Without server_identity the address check applies, and fails.
        plain = self.start_client_side(addr, identity=None)
        with self.assertRaises(grpc.RpcError) as cm:
            self.echo(plain).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("IP address mismatch", cm.exception.details())

    def _leaf_without_ip(self, name, uri):
        ca = self.ca
        base = ca.p(name)
        with open(base + ".ext", "w") as f:
            f.write("subjectAltName=URI:%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n" % uri)
        ca._ssl(["req"] + ca.key + ["-keyout", base + ".key", "-out", base + ".csr", "-subj", "/CN=" + name])
        ca._ssl(["x509", "-req", "-in", base + ".csr", "-CA", ca.ca_file, "-CAkey", ca.ca_key, "-set_serial", "77",
                 "-out", base + ".pem", "-days", "3", "-extfile", base + ".ext"])
        return base + ".pem", base + ".key"


class Rotation(Mesh):
    """Certificate files replaced in place: new handshakes use them,
    connections and calls in flight go on."""

    def copy_pair(self, cert, key, name):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        c, k = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
        shutil.copy(cert, c)
        shutil.copy(key, k)
        return c, k

    def replace(self, path, src):
        # In place: the same inode truncated and written, as a tool that
        # does not rename would.
        with open(path, "wb") as f:
            f.write(read(src))

    def presented(self, port):
        """The DER certificate a new TLS connection to port is shown."""
        ctx = ssl.create_default_context(cafile=self.ca.ca_file)
        ctx.load_cert_chain(self.client_cert, self.client_key)
        ctx.set_alpn_protocols(["h2"])
        ctx.check_hostname = False
        with socket.create_connection(("127.0.0.1", port), timeout=CALL_LIMIT) as raw:
            with ctx.wrap_socket(raw) as s:
                return s.getpeercert(binary_form=True)

    def reloaded(self, m, label, n=1):
        return m.proc.output().count("TLS files of %s changed: new handshakes use them" % label) >= n

    @maitred_only
    def test_rotation_under_load(self):
        app = self.start_upstream("app")
        cert, key = self.copy_pair(self.server_cert, self.server_key, "b")
        b, addr = self.start_server_side(app, self.allow_cart(), cert=cert, key=key, admin=True)
        a = self.start_client_side(addr)
        self.assertEqual(self.presented(b.inbound_port), der_of(self.server_cert))
        new_cert, new_key = self.ca.leaf("cart-server", uri=SERVER, serial=4242)
        stop = threading.Event()
        failures, done = [], [0] * 6

        def load(i):
            stub = self.echo(a)
            while not stop.is_set():
                try:
                    stub.Unary(pb.EchoRequest(payload=b"x" * 100), timeout=CALL_LIMIT)
                    done[i] += 1
                except grpc.RpcError as e:
                    failures.append("%s: %s" % (e.code(), e.details()))
        threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(6)]
        for t in threads:
            t.start()
        wait_until(lambda: all(d > 0 for d in done), CALL_LIMIT, "calls from every thread")
        self.replace(cert, new_cert)
        self.replace(key, new_key)
        label = "inbound " + addr
        wait_until(lambda: self.reloaded(b, label), CALL_LIMIT, "the inbound listener to load the new files")
        before = sum(done)
        # New connections see the new certificate (its serial, 4242)...
        self.assertEqual(self.presented(b.inbound_port), der_of(new_cert))
        # ... while the calls go on, on the connection made before.
        wait_until(lambda: sum(done) >= before + 60, CALL_LIMIT, "calls after the rotation")
        stop.set()
        for t in threads:
            t.join(CALL_LIMIT)
        self.assertEqual(failures, [])
        self.assertEqual(metric(self.scrape(b), "maitred_tls_reloads_total", files=label, result="ok"), 1)

    @maitred_only
    def test_a_log_growing_beside_the_certificates_wakes_nothing(self):
        # A file kept open in the certificates' directory and written line
        # by line (a log) is no rotation: the control thread sleeps through
        # its writes (watched for IN_MODIFY, it woke once per line), and a
        # rotation after it is still seen.
        lines = 300
        app = self.start_upstream("app")
        cert, key = self.copy_pair(self.server_cert, self.server_key, "b")
        b, addr = self.start_server_side(app, self.allow_cart(), cert=cert, key=key)
        before = wakeups(b.proc.pid)
        grow_log(os.path.join(os.path.dirname(cert), "app.log"), lines)
        woke = wakeups(b.proc.pid) - before
        self.assertLess(woke, lines // 3, "the control thread woke %d times for %d lines written beside its "
                        "certificates" % (woke, lines))
        new_cert, new_key = self.ca.leaf("cart-server", uri=SERVER, serial=4545)
        self.replace(cert, new_cert)
        self.replace(key, new_key)
        wait_until(lambda: self.reloaded(b, "inbound " + addr), CALL_LIMIT, "the rotation after the log")
        self.assertEqual(self.presented(b.inbound_port), der_of(new_cert))

    @maitred_only
    def test_half_written_pair_is_ignored_with_one_warning(self):
        app = self.start_upstream("app")
        cert, key = self.copy_pair(self.server_cert, self.server_key, "b")
        b, addr = self.start_server_side(app, self.allow_cart(), cert=cert, key=key, admin=True)
        new_cert, new_key = self.ca.leaf("cart-server", uri=SERVER, serial=4343)
        label = "inbound " + addr
        self.replace(cert, new_cert)  # its key not yet
        warning = "TLS files of %s changed but do not load yet" % label
        wait_until(lambda: warning in b.proc.output(), CALL_LIMIT, "the warning")
        # The pair in place still serves; a SIGHUP reads the files again,
        # still half written: no second warning.
        self.assertEqual(self.presented(b.inbound_port), der_of(self.server_cert))
        b.proc.signal(signal.SIGHUP)
        wait_until(lambda: "SIGHUP" in b.proc.output(), CALL_LIMIT, "the SIGHUP")
        resp = self.direct(addr, self.client_cert, self.client_key).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(resp.instance, "app")
        self.assertEqual(b.proc.output().count(warning), 1)
        self.assertEqual(metric(self.scrape(b), "maitred_tls_reloads_total", files=label, result="mismatch"), 1)
        self.replace(key, new_key)
        wait_until(lambda: self.reloaded(b, label), CALL_LIMIT, "the pair to load once it matches")
        self.assertEqual(self.presented(b.inbound_port), der_of(new_cert))

    @maitred_only
    def test_client_side_rotation_reaches_new_connections(self):
        app = self.start_upstream("app")
        port = free_port()
        b, addr = self.start_server_side(app, self.allow_cart(), port=port)
        cert, key = self.copy_pair(self.client_cert, self.client_key, "a")
        a = self.start_client_side(addr, cert=cert, key=key)
        stub = self.echo(a)
        old_hash = hashlib.sha256(der_of(self.client_cert)).hexdigest()
        self.assertIn("Hash=" + old_hash, self.xfcc_of(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT))[0])
        new_cert, new_key = self.ca.leaf("cart", uri=CART, serial=4444)
        self.replace(cert, new_cert)
        self.replace(key, new_key)
        wait_until(lambda: self.reloaded(a, "service *"), CALL_LIMIT, "the client side to load the new files")
        # The connection in flight was not cut: the same one answers.
        self.assertIn("Hash=" + old_hash, self.xfcc_of(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT))[0])
        # A new connection (B restarted on its port) presents the new one.
        self.stop_maitred(b)
        b2, _ = self.start_server_side(app, self.allow_cart(), port=port)
        new_hash = hashlib.sha256(der_of(new_cert)).hexdigest()

        def through():
            try:
                return self.xfcc_of(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT))[0]
            except grpc.RpcError:
                return None
        got = wait_until(through, CALL_LIMIT, "a call through the new connection")
        self.assertIn("Hash=" + new_hash, got)


@unittest.skipUnless(shutil.which("etcd"), "etcd not installed (Debian: etcd-server)")
class MeshThroughEtcd(Mesh):
    """Two maitreds, no control plane but etcd: B registers its inbound
    listener with its certificate's identity; A discovers it and checks the
    identity each record names (FROM_REGISTRY)."""

    PREFIX = "/maitred/services/maitred.testing.v1.Echo/"

    def client_side(self, etcd, prefix):
        tls = {"ca_file": self.ca.ca_file, "cert_file": self.client_cert, "key_file": self.client_key,
               "server_identity": "FROM_REGISTRY"}
        svc = {"name": "*", "tls": tls,
               "discovery": {"etcd": {"endpoints": [etcd.address], "prefix": prefix}}}
        return self.start_maitred(self.config([svc]))

    @maitred_only
    def test_register_advertises_the_inbound_identity_and_from_registry_checks_it(self):
        from test_etcd import Etcd
        etcd = Etcd(self)
        app = self.start_upstream("app")
        port = free_port()
        register = [{"service": "maitred.testing.v1.Echo", "address": "127.0.0.1:%d" % port, "ttl": "10s",
                     "etcd": {"endpoints": [etcd.address], "prefix": self.PREFIX}}]
        b, addr = self.start_server_side(app, self.allow_cart(), port=port, register=register)
        key = self.PREFIX + addr

        def record():
            return etcd.get_prefix(self.PREFIX).get(key)
        rec = json.loads(wait_until(record, CALL_LIMIT, "B's record in etcd"))
        self.assertEqual(rec["address"], addr)
        self.assertEqual(rec["identity"], SERVER)
        a = self.client_side(etcd, self.PREFIX)
        stub = self.echo(a)

        def call():
            try:
                return stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            except grpc.RpcError as e:
                if "waiting for the first list" in e.details() or "no endpoint" in e.details():
                    return None
                raise
        resp = wait_until(call, CALL_LIMIT, "a call through the discovered inbound listener")
        self.assertEqual(resp.instance, "app")
        self.assertTrue(self.xfcc_of(resp)[0].endswith(";URI=" + CART))
        # A record without an identity is refused for that service.
        etcd.put(self.PREFIX + "bare", json.dumps({"address": "127.0.0.1:%d" % free_port()}))
        wait_until(lambda: "record refused: it names no identity" in a.proc.output(), CALL_LIMIT,
                   "the refusal's log line")
        for _ in range(10):
            self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "app")
        # A record naming another identity for B's address: the connection
        # is refused by the client side, naming both.
        other = "/maitred/services/other/"
        etcd.put(other + "x", json.dumps({"address": addr, "identity": NS + "impostor"}))
        a2 = self.client_side(etcd, other)
        stub2 = self.echo(a2)

        def fails():
            try:
                stub2.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
                return None
            except grpc.RpcError as e:
                if "waiting for the first list" in e.details():
                    return None
                return e
        err = wait_until(fails, CALL_LIMIT, "the call to fail")
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        self.assertIn("expected %s, presented %s" % (NS + "impostor", SERVER), err.details())


# --- the interop suites through both hops -------------------------------------

class TwoHops:
    """setUp for suites written against one maitred (self.up "alpha",
    self.m, self.stub): the client talks to A, which calls B's inbound
    listener over mTLS with secure naming, which calls the app."""
    mtls = True

    def setUp(self):
        MaitredTest.setUp(self)
        self.up = self.start_upstream("alpha")
        if self.mtls:
            authz = {"rules": [{"principals": [CART]}]}
        else:
            authz = {"default": "ALLOW_ALL"}
        self.b, addr = Mesh.start_server_side(self, self.up, authz, client_ca=self.mtls)
        self.m = Mesh.start_client_side(self, addr)
        self.stub = self.echo(self.m)


class MeshSetup(Mesh):
    """Mesh's certificates for a TwoHops suite."""


class CallTypesThroughTheMesh(TwoHops, MeshSetup, test_calls.CallTypes):
    pass


class DeadlinesThroughTheMesh(TwoHops, MeshSetup, test_deadline_cancel.Deadlines):
    pass


class CancellationThroughTheMesh(TwoHops, MeshSetup, test_deadline_cancel.Cancellation):
    pass


class MetadataThroughTheMesh(TwoHops, MeshSetup, test_metadata.Metadata):
    # The app would see maitred's x-forwarded-client-cert among the x-
    # metadata these tests compare exactly: TLS without client
    # certificates here (mTLS and the header have their own tests above).
    mtls = False


class ConformanceOverTls(MeshSetup, test_conformance.Conformance):
    """The raw-frame conformance checks on the TLS inbound listener."""

    @needs_h2
    def setUp(self):
        MaitredTest.setUp(self)
        from h2raw import H2Client
        self.up = self.start_upstream("a")
        self.b, addr = self.start_server_side(self.up, {"default": "ALLOW_AUTHENTICATED"})
        self.m = self.b
        ctx = ssl.create_default_context(cafile=self.ca.ca_file)
        ctx.load_cert_chain(self.client_cert, self.client_key)
        ctx.set_alpn_protocols(["h2"])
        self.c = H2Client(self.b.inbound_port, tls=ctx)
        self.addCleanup(self.c.close)


if __name__ == "__main__":
    unittest.main()
