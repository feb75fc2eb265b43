"""TLS upstreams: ALPN h2, verification against the CA, SNI, mTLS."""

import os
import shutil
import socket
import ssl
import tempfile
import threading
import unittest

import grpc

from harness import MaitredTest, TestCA, maitred_only, pb, pb_grpc, CALL_LIMIT, CHANNEL_OPTIONS, SLOW


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

    def unavailable_naming(self, stub, up):
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        err = cm.exception
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        self.assertIn(up.address, err.details())

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
    def test_mtls_required_without_client_cert_is_unavailable(self):
        up = self.start_upstream("secure", tls=self.ca, client_ca=self.ca)
        m = self.start_maitred(self.config([self.service("*", [up], tls=self.tls())]))
        self.unavailable_naming(self.echo(m), up)

    @maitred_only
    def test_untrusted_ca_is_unavailable(self):
        up = self.start_upstream("secure", tls=self.ca)
        m = self.start_maitred(self.config([self.service("*", [up], tls=self.tls(ca=self.other))]))
        self.unavailable_naming(self.echo(m), up)

    @maitred_only
    def test_wrong_server_name_is_unavailable(self):
        up = self.start_upstream("secure", tls=self.ca)
        m = self.start_maitred(self.config([self.service("*", [up], tls=self.tls(server_name="other.test"))]))
        self.unavailable_naming(self.echo(m), up)

    @maitred_only
    def test_tls_to_h2c_upstream_is_unavailable(self):
        up = self.start_upstream("plain")
        m = self.start_maitred(self.config([self.service("*", [up], tls=self.tls())]))
        self.unavailable_naming(self.echo(m), up)

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
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.ca.server_cert, self.ca.server_key)
        ctx.set_alpn_protocols(["h2"])
        seen = {"sni": [], "alpn": []}
        ctx.sni_callback = lambda sock, name, c: seen["sni"].append(name)
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        lsock.settimeout(0.2)
        port = lsock.getsockname()[1]
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
                except OSError:
                    pass
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        self.addCleanup(lambda: (stop.set(), t.join(5), lsock.close()))
        m = self.start_maitred(self.config([self.service("*", ["127.0.0.1:%d" % port], tls=self.tls())]))
        with self.assertRaises(grpc.RpcError) as cm:
            self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        self.assertIn(cm.exception.code(), (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL))
        self.assertIn("echo.test", seen["sni"], "SNI sent: %r" % seen["sni"])
        self.assertIn("h2", seen["alpn"], "ALPN agreed: %r" % seen["alpn"])


if __name__ == "__main__":
    unittest.main()
