"""Typed identities in mesh mode: a certificate's identity is its URI SAN
when it has exactly one, none when it has several (the X509-SVID rule),
else "dns:" and its first DNS SAN; a principal or server_identity matches
only identities of its type; what `register` advertises is what
FROM_REGISTRY compares, and tls.allowed_identities bounds which identities
a registry record may name.

Real maitreds, grpcio apps and callers, certificates made with openssl;
every wait is a bounded loop whose limit is a hang guard."""

import json
import os
import shutil
import unittest
import urllib.request

import grpc

from harness import maitred_only, pb, free_port, wait_until, CALL_LIMIT
from test_inbound import Mesh, NS, CART, SERVER, ECHO, metric


def leaf_with(ca, name, sans):
    """(cert, key) of a leaf of `ca` whose subjectAltName is exactly `sans`
    (openssl's syntax, e.g. ["URI:spiffe://a", "DNS:b"]; [] for none)."""
    ca.n += 1
    base = ca.p("%s-x%d" % (name, ca.n))
    with open(base + ".ext", "w") as f:
        if sans:
            f.write("subjectAltName=%s\n" % ",".join(sans))
        f.write("extendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n")
    ca._ssl(["req"] + ca.key + ["-keyout", base + ".key", "-out", base + ".csr", "-subj", "/CN=" + name])
    ca._ssl(["x509", "-req", "-in", base + ".csr", "-CA", ca.ca_file, "-CAkey", ca.ca_key,
             "-set_serial", str(5000 + ca.n), "-out", base + ".pem", "-days", "3", "-extfile", base + ".ext"])
    return base + ".pem", base + ".key"


class TypedIdentities(Mesh):
    def denied(self, stub):
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED, cm.exception.details())
        return cm.exception.details()

    @maitred_only
    def test_a_dns_san_spelled_like_a_spiffe_id_is_not_that_uri(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, {"rules": [{"principals": [CART, "spiffe://cluster.local/ns/shop/*"]}]})
        cert, key = leaf_with(self.ca, "fake", ["DNS:" + CART, "IP:127.0.0.1"])
        details = self.denied(self.direct(addr, cert, key))
        self.assertIn("dns:%s is not allowed to call %sUnary" % (CART, ECHO), details)
        self.assert_app_never_saw(app)
        # A principal that says dns: is met by that DNS identity, typed in
        # the access log and the figures too.
        app2 = self.start_upstream("app2")
        log = os.path.join(self.tmp, "access.log")
        b2, addr2 = self.start_server_side(app2, {"rules": [{"principals": ["dns:cart.shop.svc"]}]}, admin=True,
                                           access_log=log)
        resp = self.direct(addr2, self.dns_cert, self.dns_key).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(resp.instance, "app2")
        self.assertTrue(self.xfcc_of(resp)[0].endswith(";DNS=cart.shop.svc"))

        def line():
            if not os.path.exists(log):
                return []
            with open(log) as f:
                return [l for l in f.read().splitlines() if " inbound=" in l]
        got = wait_until(line, CALL_LIMIT, "the access-log line")
        self.assertIn(" identity=dns:cart.shop.svc authz=allow", got[0])
        self.assertEqual(metric(self.scrape(b2), "maitred_inbound_calls_total", listener=addr2,
                                identity="dns:cart.shop.svc", decision="allow"), 1)

    @maitred_only
    def test_a_caller_with_two_uri_sans_matches_no_principal(self):
        app = self.start_upstream("app")
        cert, key = leaf_with(self.ca, "two", ["URI:" + CART, "URI:" + NS + "other", "IP:127.0.0.1"])
        b, addr = self.start_server_side(app, {"rules": [{"principals": [CART]}, {"principals": ["*"]}]})
        details = self.denied(self.direct(addr, cert, key))
        self.assertIn("a caller whose certificate has no identity is not allowed", details)
        self.assert_app_never_saw(app)
        wait_until(lambda: "its certificate has no identity (several URI SANs" in b.proc.output(), CALL_LIMIT,
                   "the log line saying why")
        # Verified all the same: ALLOW_AUTHENTICATED lets it in.
        b2, addr2 = self.start_server_side(app, {"default": "ALLOW_AUTHENTICATED"})
        self.assertEqual(self.direct(addr2, cert, key).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "app")

    @maitred_only
    def test_allow_authenticated_lets_in_a_certificate_without_san(self):
        app = self.start_upstream("app")
        cert, key = leaf_with(self.ca, "nosan", [])
        b, addr = self.start_server_side(app, {"default": "ALLOW_AUTHENTICATED"})
        resp = self.direct(addr, cert, key, ca=None).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(resp.instance, "app")
        xfcc = self.xfcc_of(resp)
        self.assertEqual(len(xfcc), 1, xfcc)
        self.assertNotIn("URI=", xfcc[0])
        self.assertNotIn("DNS=", xfcc[0])

    @maitred_only
    def test_identities_up_to_2048_bytes(self):
        app = self.start_upstream("app")
        long_id = NS + "l" * (2048 - len(NS))
        cert, key = leaf_with(self.ca, "long", ["URI:" + long_id, "IP:127.0.0.1"])
        b, addr = self.start_server_side(app, {"rules": [{"principals": [long_id]}]})
        self.assertEqual(self.direct(addr, cert, key).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "app")

    @maitred_only
    def test_an_upstream_with_two_uri_sans_fails_server_identity(self):
        app = self.start_upstream("app")
        cert, key = leaf_with(self.ca, "srv2", ["URI:" + SERVER, "URI:" + NS + "other", "IP:127.0.0.1"])
        # maitred starts with it on its own listener and serves where no
        # identity is required (no By= element: no identity).
        b, addr = self.start_server_side(app, self.allow_cart(), cert=cert, key=key)
        a = self.start_client_side(addr)
        with self.assertRaises(grpc.RpcError) as cm:
            self.echo(a).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assertIn("TLS server identity mismatch: expected %s, presented no identity: several URI SANs" % SERVER,
                      cm.exception.details())
        self.assert_app_never_saw(app)
        plain = self.start_client_side(addr, identity=None)
        resp = self.echo(plain).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(resp.instance, "app")
        self.assertFalse(self.xfcc_of(resp)[0].startswith("By="), self.xfcc_of(resp))

    @maitred_only
    def test_a_dns_server_identity_is_typed(self):
        app = self.start_upstream("app")
        dns_srv, dns_key = leaf_with(self.ca, "dnssrv", ["DNS:cart-server.shop.svc", "IP:127.0.0.1"])
        b, addr = self.start_server_side(app, self.allow_cart(), cert=dns_srv, key=dns_key)
        a = self.start_client_side(addr, identity="dns:cart-server.shop.svc")
        self.assertEqual(self.echo(a).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "app")
        # A DNS SAN spelled like the URI expected does not meet it.
        fake, fake_key = leaf_with(self.ca, "fakesrv", ["DNS:" + SERVER, "IP:127.0.0.1"])
        b2, addr2 = self.start_server_side(app, self.allow_cart(), cert=fake, key=fake_key)
        a2 = self.start_client_side(addr2)
        with self.assertRaises(grpc.RpcError) as cm:
            self.echo(a2).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertIn("expected %s, presented dns:%s" % (SERVER, SERVER), cm.exception.details())


@unittest.skipUnless(shutil.which("etcd"), "etcd not installed (Debian: etcd-server)")
class RegistryIdentities(Mesh):
    PREFIX = "/maitred/services/maitred.testing.v1.Echo/"

    def client_side(self, etcd, allowed=None, admin=False):
        tls = {"ca_file": self.ca.ca_file, "cert_file": self.client_cert, "key_file": self.client_key,
               "server_identity": "FROM_REGISTRY"}
        if allowed is not None:
            tls["allowed_identities"] = allowed
        svc = {"name": "*", "tls": tls,
               "discovery": {"etcd": {"endpoints": [etcd.address], "prefix": self.PREFIX}}}
        cfg = self.config([svc])
        if admin:
            cfg["admin"] = "127.0.0.1:%d" % free_port()
        m = self.start_maitred(cfg)
        m.admin = cfg.get("admin")
        return m

    def registered(self, etcd, app, cert, key):
        port = free_port()
        register = [{"service": "maitred.testing.v1.Echo", "address": "127.0.0.1:%d" % port, "ttl": "10s",
                     "etcd": {"endpoints": [etcd.address], "prefix": self.PREFIX}}]
        b, addr = self.start_server_side(app, self.allow_cart(), port=port, register=register, cert=cert, key=key)
        rec = wait_until(lambda: etcd.get_prefix(self.PREFIX).get(self.PREFIX + addr), CALL_LIMIT, "B's record")
        return b, addr, json.loads(rec)

    def call(self, stub):
        try:
            return stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        except grpc.RpcError as e:
            if "waiting for the first list" in e.details() or "no endpoint" in e.details():
                return None
            raise

    @maitred_only
    def test_a_dns_only_listener_registers_a_typed_identity_its_clients_accept(self):
        from test_etcd import Etcd
        etcd = Etcd(self)
        app = self.start_upstream("app")
        b, addr, rec = self.registered(etcd, app, self.dns_cert, self.dns_key)
        self.assertEqual(rec["identity"], "dns:cart.shop.svc")
        a = self.client_side(etcd)
        resp = wait_until(lambda: self.call(self.echo(a)), CALL_LIMIT, "a call through the DNS-only listener")
        self.assertEqual(resp.instance, "app")
        wait_until(lambda: "without tls.allowed_identities: any identity a record under the prefix names is "
                   "trusted" in a.proc.output(), CALL_LIMIT, "the warning")

    @maitred_only
    def test_a_record_naming_a_disallowed_identity_is_never_used(self):
        from test_etcd import Etcd
        etcd = Etcd(self)
        good_app, bad_app = self.start_upstream("good"), self.start_upstream("impostor")
        imp_cert, imp_key = self.ca.leaf("impostor", uri=NS + "impostor")
        self.registered(etcd, good_app, self.server_cert, self.server_key)
        b2, addr2, rec2 = self.registered(etcd, bad_app, imp_cert, imp_key)
        self.assertEqual(rec2["identity"], NS + "impostor")
        # Without allowed_identities both serve: the impostor's record is
        # trusted (the case this key exists for).
        open_a = self.client_side(etcd)
        seen = set()
        stub = self.echo(open_a)
        for _ in range(200):
            resp = self.call(stub)
            if resp is not None:
                seen.add(resp.instance)
            if seen == {"good", "impostor"}:
                break
        self.assertEqual(seen, {"good", "impostor"})
        # With it, the impostor's endpoint never enters the set.
        before = bad_app.stats().total
        a = self.client_side(etcd, allowed=[SERVER, "dns:cart.*"], admin=True)
        wait_until(lambda: "record refused: its identity matches none of tls.allowed_identities" in a.proc.output(),
                   CALL_LIMIT, "the refusal's log line")
        stub = self.echo(a)
        got = [wait_until(lambda: self.call(stub), CALL_LIMIT, "a first call")]
        got += [stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT) for _ in range(40)]
        self.assertEqual({r.instance for r in got}, {"good"})
        self.assertEqual(bad_app.stats().total, before)
        with urllib.request.urlopen("http://%s/metrics" % a.admin, timeout=CALL_LIMIT) as r:
            text = r.read().decode()
        self.assertEqual(metric(text, "maitred_discovery_records_refused_total", service="*", source="etcd"), 1.0)
        self.assertEqual(metric(text, "maitred_discovery_endpoints", service="*", source="etcd"), 1.0)


if __name__ == "__main__":
    unittest.main()
