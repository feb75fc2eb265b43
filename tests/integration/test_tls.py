"""TLS upstreams: ALPN h2, verification against the CA, SNI, mTLS."""

import os
import shutil
import signal
import socket
import ssl
import tempfile
import threading
import unittest

import grpc

from harness import MaitredTest, TestCA, maitred_only, pb, pb_grpc, wait_until, CALL_LIMIT, CHANNEL_OPTIONS, SLOW

SVC = "maitred.testing.v1.Echo"


class Tls(MaitredTest):
    @classmethod
    def setUpClass(cls):
        cls.cadir = tempfile.mkdtemp(prefix="maitred-ca-")
        cls.ca = TestCA(os.path.join(cls.cadir, "good"), server_name="echo.test")
        cls.other = TestCA(os.path.join(cls.cadir, "other"), server_name="echo.test", ca_name="another CA")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.cadir, ignore_errors=True)

    def tls(self, ca=None, server_name="echo.test", client=None):
        t = {"ca_file": (ca or self.ca).ca_file, "server_name": server_name}
        if client:
            t["cert_file"] = client.client_cert
            t["key_file"] = client.client_key
        return t

    def unavailable_naming(self, stub, address, *reason):
        """A call fails UNAVAILABLE with a message naming the endpoint and
        saying what went wrong with it (docs/troubleshooting.md,
        "Upstreams"): each `reason` part in that order, right after the
        address. The details are returned."""
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        err = cm.exception
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        address = address if isinstance(address, str) else address.address
        self.assertIn("upstream %s: " % address, err.details())
        rest = err.details().split("upstream %s: " % address, 1)[1]
        pos = 0
        for part in reason:
            i = rest.find(part, pos)
            self.assertGreaterEqual(i, 0, "%r not in %r" % (part, err.details()))
            pos = i + len(part)
        return err.details()

    def tls_listener(self, alpn):
        """A bare TLS listener (the test CA's server certificate) that
        offers `alpn` (None: no ALPN at all) and completes handshakes, then
        closes; its port. Records what each client offered."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.ca.server_cert, self.ca.server_key)
        if alpn is not None:
            ctx.set_alpn_protocols(alpn)
        seen = {"sni": [], "alpn": []}
        ctx.sni_callback = lambda sock, name, c: seen["sni"].append(name)
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        lsock.settimeout(0.2)
        stop = threading.Event()

        def serve():
            while not stop.is_set():
                try:
                    raw, _ = lsock.accept()
                except OSError:
                    continue
                raw.settimeout(5 * SLOW)  # memcheck: a handshake takes seconds
                try:
                    with ctx.wrap_socket(raw, server_side=True) as s:
                        seen["alpn"].append(s.selected_alpn_protocol())
                        try:
                            s.recv(1)  # until maitred gives up on the connection
                        except OSError:
                            pass
                except OSError:
                    pass
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        self.addCleanup(lambda: (stop.set(), t.join(10 * SLOW), lsock.close()))
        return lsock.getsockname()[1], seen

    def test_fixture_direct_tls(self):
        # The test CA and the TLS upstream work with grpcio itself, so a
        # failure below is maitred's.
        up = self.start_upstream("secure", tls=self.ca, client_ca=self.ca)
        with open(self.ca.ca_file, "rb") as f:
            root = f.read()
        with open(self.ca.client_key, "rb") as f:
            key = f.read()
        with open(self.ca.client_cert, "rb") as f:
            cert = f.read()
        creds = grpc.ssl_channel_credentials(root, key, cert)
        ch = grpc.secure_channel(up.address, creds, options=CHANNEL_OPTIONS + [
            ("grpc.ssl_target_name_override", "echo.test")])
        self._channels.append(ch)
        resp = pb_grpc.EchoStub(ch).Unary(pb.EchoRequest(payload=b"hi"), timeout=CALL_LIMIT)
        self.assertEqual(resp.client_cn, "maitred-client")

    @maitred_only
    def test_tls_upstream(self):
        up = self.start_upstream("secure", tls=self.ca)
        m = self.start_maitred(self.config([self.service("*", [up], tls=self.tls())]))
        stub = self.echo(m)
        data = os.urandom(300000)
        resp = stub.Unary(pb.EchoRequest(payload=data), metadata=[("x-k-bin", b"\x00\x01")], timeout=CALL_LIMIT)
        self.assertEqual(resp.payload, data)
        self.assertEqual(resp.instance, "secure")
        self.assertEqual(resp.client_cn, "")
        got = list(stub.BidiStream(iter([pb.EchoRequest(response_count=2)] * 3), timeout=CALL_LIMIT))
        self.assertEqual(len(got), 6)
        for _ in range(20):
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)

    @maitred_only
    def test_mtls(self):
        up = self.start_upstream("secure", tls=self.ca, client_ca=self.ca)
        m = self.start_maitred(self.config([self.service("*", [up], tls=self.tls(client=self.ca))]))
        resp = self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(resp.client_cn, "maitred-client")

    @maitred_only
    def test_a_rotation_not_yet_seen_survives_a_reload_that_moves_its_service(self):
        """A service's client certificate rotated on disk where inotify
        does not look (its files are links into another directory: only the
        10 s check would see it), then a reload that keeps the service and
        its files but puts another service before it in the list: the
        context the reload kept is the old certificate's, so the check the
        reload ends with loads the new one. Red before: certwatch matched a
        kept context by the service's index, took the moved one for a new
        context made from the files as they are now, and never loaded
        them (the 10 s check saw nothing new either)."""
        up = self.start_upstream("secure", tls=self.ca, client_ca=self.ca)
        store, ident = os.path.join(self.tmp, "store"), os.path.join(self.tmp, "ident")
        os.makedirs(store)
        os.makedirs(ident)
        for f, src in (("cert.pem", self.other.client_cert), ("key.pem", self.other.client_key)):
            shutil.copyfile(src, os.path.join(store, f))
            os.symlink(os.path.join(store, f), os.path.join(ident, f))
        tls = self.tls()
        tls["cert_file"], tls["key_file"] = os.path.join(ident, "cert.pem"), os.path.join(ident, "key.pem")
        cfg = self.config([self.service(SVC, [up], tls=tls)])
        m = self.start_maitred(cfg)
        stub = self.echo(m)
        with self.assertRaises(grpc.RpcError) as refused:  # a certificate the upstream refuses
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.UNAVAILABLE)
        for f, src in (("key.pem", self.ca.client_key), ("cert.pem", self.ca.client_cert)):
            shutil.copyfile(src, os.path.join(store, f + ".new"))
            os.replace(os.path.join(store, f + ".new"), os.path.join(store, f))
        cfg["services"].insert(0, self.service("a.First", ["127.0.0.1:1"]))
        self.write_config(cfg, os.path.basename(m.config_path))
        m.proc.signal(signal.SIGHUP)
        wait_until(lambda: "applied (2 services)" in m.proc.output(), CALL_LIMIT, "the reload")
        wait_until(lambda: "TLS files of service %s changed" % SVC in m.proc.output(), CALL_LIMIT,
                   "the rotated certificate loaded")
        self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).client_cn, "maitred-client")

    @maitred_only
    def test_mtls_required_without_client_cert_is_unavailable(self):
        up = self.start_upstream("secure", tls=self.ca, client_ca=self.ca)
        m = self.start_maitred(self.config([self.service("*", [up], tls=self.tls())]))
        # TLS 1.3: the server checks the client's certificate after the
        # client's side of the handshake is done, so maitred only sees the
        # connection end (the peer's alert is a debug line).
        details = self.unavailable_naming(self.echo(m), up)
        self.assertTrue("certificate required" in details or "connection closed before HTTP/2 was up" in details,
                        details)
        self.assertNotIn("verification failed", details)

    @maitred_only
    def test_untrusted_ca_is_unavailable(self):
        up = self.start_upstream("secure", tls=self.ca)
        m = self.start_maitred(self.config([self.service("*", [up], tls=self.tls(ca=self.other))]))
        self.unavailable_naming(self.echo(m), up, "TLS certificate verification failed: ", "unable to get local issuer certificate")

    @maitred_only
    def test_wrong_server_name_is_unavailable(self):
        up = self.start_upstream("secure", tls=self.ca)
        m = self.start_maitred(self.config([self.service("*", [up], tls=self.tls(server_name="other.test"))]))
        self.unavailable_naming(self.echo(m), up, "TLS certificate verification failed: ", "hostname mismatch")

    @maitred_only
    def test_tls_to_h2c_upstream_is_unavailable(self):
        up = self.start_upstream("plain")
        m = self.start_maitred(self.config([self.service("*", [up], tls=self.tls())]))
        self.unavailable_naming(self.echo(m), up, "TLS handshake failed: ", "wrong version number")

    @maitred_only
    def test_tls_peer_without_alpn_h2_is_unavailable(self):
        for offered in (None, ["http/1.1"]):
            with self.subTest(alpn=offered):
                port, seen = self.tls_listener(offered)
                addr = "127.0.0.1:%d" % port
                m = self.start_maitred(self.config([self.service("*", [addr], tls=self.tls())]))
                details = self.unavailable_naming(self.echo(m), addr, "TLS peer did not negotiate ALPN h2")
                self.assertNotIn("verification failed", details)
                # The handshake itself completed (the certificate was good),
                # with no protocol agreed: maitred offers h2 only.
                wait_until(lambda: seen["alpn"], CALL_LIMIT, "the listener to record the handshake")
                self.assertEqual(seen["alpn"][0], None)

    @maitred_only
    def test_tls_and_h2c_services_side_by_side(self):
        sec = self.start_upstream("secure", tls=self.ca)
        plain = self.start_upstream("plain")
        m = self.start_maitred(self.config([
            self.service("maitred.testing.v1.Echo", [sec], tls=self.tls()),
            self.service("*", [plain])]))
        ch = self.channel(m)
        self.assertEqual(pb_grpc.EchoStub(ch).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "secure")
        raw = ch.unary_unary("/other.Svc/Unary")(pb.EchoRequest().SerializeToString(), timeout=CALL_LIMIT)
        self.assertEqual(pb.EchoResponse.FromString(raw).instance, "plain")

    @maitred_only
    def test_services_with_the_same_files_keep_their_server_names(self):
        # Services with the same TLS files share one TLS context; the
        # server name checked stays each service's own.
        up = self.start_upstream("secure", tls=self.ca)
        by_name = dict(self.tls(), server_name="echo.test")
        by_ip = {"ca_file": self.ca.ca_file}  # the endpoint's address: IP SAN
        wrong = self.tls(server_name="other.test")
        m = self.start_maitred(self.config([
            self.service("maitred.testing.v1.Echo", [up], tls=by_name),
            self.service("by.Ip", [up], tls=by_ip),
            self.service("*", [up], tls=wrong)]))
        ch = self.channel(m)
        self.assertEqual(pb_grpc.EchoStub(ch).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "secure")
        raw = ch.unary_unary("/by.Ip/Unary")(pb.EchoRequest().SerializeToString(), timeout=CALL_LIMIT)
        self.assertEqual(pb.EchoResponse.FromString(raw).instance, "secure")
        with self.assertRaises(grpc.RpcError) as cm:
            ch.unary_unary("/other.Svc/Unary")(pb.EchoRequest().SerializeToString(), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())

    @maitred_only
    def test_sni_and_alpn(self):
        # A bare TLS listener records the SNI and ALPN maitred offers.
        port, seen = self.tls_listener(["h2"])
        m = self.start_maitred(self.config([self.service("*", ["127.0.0.1:%d" % port], tls=self.tls())]))
        with self.assertRaises(grpc.RpcError) as cm:
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertIn(cm.exception.code(), (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL))
        wait_until(lambda: seen["alpn"], CALL_LIMIT, "the listener to record the handshake")
        self.assertIn("echo.test", seen["sni"], "SNI sent: %r" % seen["sni"])
        self.assertIn("h2", seen["alpn"], "ALPN agreed: %r" % seen["alpn"])


if __name__ == "__main__":
    unittest.main()
