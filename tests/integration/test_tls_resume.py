"""TLS session resumption: maitred's second connection to an endpoint resumes
the session of the first (a TLS 1.3 ticket), also when the server closed the
first connection without close_notify, as many servers do.

The endpoint is a bare TLS server (Python's ssl module, ALPN h2) that records
whether each handshake resumed a session and then closes: it speaks no HTTP/2,
so the calls themselves end UNAVAILABLE; only the handshakes matter here."""

import os
import shutil
import socket
import ssl
import tempfile
import threading

import grpc

from harness import MaitredTest, TestCA, maitred_only, pb, CALL_LIMIT


class TlsServer:
    def __init__(self, ca, handshakes):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(ca.server_cert, ca.server_key)
        self.ctx.set_alpn_protocols(["h2"])
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(CALL_LIMIT)
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.reused = []
        self.thread = threading.Thread(target=self._serve, args=(handshakes,), daemon=True)
        self.thread.start()

    def _serve(self, handshakes):
        for _ in range(handshakes):
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                t = self.ctx.wrap_socket(c, server_side=True)
                self.reused.append(t.session_reused)
                t.settimeout(0.5)
                try:
                    t.recv(64)  # let the client read its tickets
                except (OSError, ssl.SSLError):
                    pass
                t.close()  # no close_notify (no unwrap)
            except (OSError, ssl.SSLError) as e:
                self.reused.append("error: %s" % e)
                c.close()

    def close(self):
        self.sock.close()
        self.thread.join(CALL_LIMIT)


class TlsResumption(MaitredTest):
    @maitred_only
    def test_second_connection_resumes(self):
        cadir = tempfile.mkdtemp(prefix="maitred-ca-")
        self.addCleanup(shutil.rmtree, cadir, True)
        ca = TestCA(os.path.join(cadir, "ca"), server_name="resume.test")
        server = TlsServer(ca, handshakes=2)
        self.addCleanup(server.close)
        svc = self.service("*", [server.address], tls={"ca_file": ca.ca_file, "server_name": "resume.test"})
        m = self.start_maitred(self.config([svc]))
        stub = self.echo(m)
        for _ in range(2):
            with self.assertRaises(grpc.RpcError) as cm:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        server.thread.join(CALL_LIMIT)
        self.assertEqual(server.reused, [False, True])
        self.stop_maitred(m)
