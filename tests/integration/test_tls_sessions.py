"""A resumed TLS session never authenticates a peer whose certificate has
expired since the full handshake, on either side: the inbound listener
ignores such a ticket (the caller's certificate is verified again, and
refused), and a service's upstream connection does not offer such a
session (the server's certificate is verified again, and refused).
Resumption itself keeps working while the certificate is valid.

The certificates are made with the cryptography library to end a few
seconds after they are made: the test waits past that end (a bounded
sleep: time says WHEN to probe), and the outcome (the handshake resumed
or refused, counted by maitred or seen by the server) decides the pass."""

import datetime
import os
import shutil
import ssl
import tempfile
import time

import grpc

from harness import MaitredTest, TestCA, maitred_only, needs_h2, pb, wait_until, CALL_LIMIT
from test_inbound import Mesh, CART, ECHO, metric, H2ClientOn
from test_tls_resume import TlsServer

LIFETIME = 6  # seconds a short-lived certificate is valid after it is made


def short_lived(ca_file, ca_key, directory, name, uri=None, dns=None):
    """(cert, key, not_after) of a leaf signed by the CA in ca_file /
    ca_key, valid from a minute ago to LIFETIME seconds from now."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    import ipaddress
    with open(ca_file, "rb") as f:
        ca_cert = x509.load_pem_x509_certificate(f.read())
    with open(ca_key, "rb") as f:
        ca_priv = serialization.load_pem_private_key(f.read(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    not_after = now + datetime.timedelta(seconds=LIFETIME)
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    if uri:
        sans.insert(0, x509.UniformResourceIdentifier(uri))
    if dns:
        sans.insert(0, x509.DNSName(dns))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_priv, hashes.SHA256()))
    cert_path, key_path = os.path.join(directory, name + ".pem"), os.path.join(directory, name + ".key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path, not_after.timestamp()


def sleep_past(t):
    """Sleep until the wall clock is past t (a certificate's notAfter),
    at most LIFETIME + 3 seconds."""
    left = t + 1.5 - time.time()
    if left > 0:
        time.sleep(min(left, LIFETIME + 3))


class InboundSessions(Mesh):
    @needs_h2
    @maitred_only
    def test_a_ticket_does_not_outlive_the_client_certificate(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, {"default": "ALLOW_AUTHENTICATED"}, admin=True)
        cert, key, not_after = short_lived(self.ca.ca_file, self.ca.ca_key, self.tmp, "brief", uri=CART)
        ctx = ssl.create_default_context(cafile=self.ca.ca_file)
        ctx.load_cert_chain(cert, key)
        ctx.set_alpn_protocols(["h2"])

        def call(session=None):
            c = H2ClientOn(ctx, b.inbound_port, session=session)
            try:
                st = c.wait(c.call(ECHO + "Unary", messages=[b""]))
                return (st.status_headers() or {}).get("grpc-status"), c.sock.session, c.sock.session_reused
            finally:
                c.close()
        # While the certificate is valid: a full handshake, then a resumed one.
        status, session, reused = call()
        self.assertEqual((status, reused), ("0", False))
        status, session, reused = call(session)
        self.assertEqual((status, reused), ("0", True), "resumption must keep working")
        self.assertLess(time.time(), not_after, "the first two handshakes took longer than the certificate lived")
        sleep_past(not_after)
        # Expired: the ticket is not honoured; the full handshake refuses
        # the certificate.
        try:
            status, _, reused = call(session)
        except (OSError, ssl.SSLError) as e:
            status, reused = "refused: %s" % e, False
        self.assertNotEqual(status, "0", "an expired client certificate was let in by resuming its session")
        self.assertFalse(reused)

        def refused():
            text = self.scrape(b)
            return metric(text, "maitred_inbound_handshake_failures_total", listener=addr,
                          reason="bad_certificate") == 1 and text
        text = wait_until(refused, CALL_LIMIT, "the refusal to be counted")
        self.assertEqual(metric(text, "maitred_inbound_handshakes_total", listener=addr, session="resumed"), 1)
        self.assertEqual(app.stats().total, 2)


class UpstreamSessions(MaitredTest):
    @maitred_only
    def test_a_kept_session_is_not_offered_once_the_server_certificate_expired(self):
        cadir = tempfile.mkdtemp(prefix="maitred-ca-")
        self.addCleanup(shutil.rmtree, cadir, True)
        ca = TestCA(os.path.join(cadir, "ca"), server_name="resume.test")
        srv = type("Srv", (), {})()
        srv.server_cert, srv.server_key, not_after = short_lived(ca.ca_file, ca.ca_key, cadir, "brief",
                                                                 dns="resume.test")
        server = TlsServer(srv, handshakes=3)
        self.addCleanup(server.close)
        svc = self.service("*", [server.address], tls={"ca_file": ca.ca_file, "server_name": "resume.test"})
        m = self.start_maitred(self.config([svc]))
        stub = self.echo(m)

        def one_call():
            # The bare server speaks no HTTP/2: every call ends UNAVAILABLE;
            # only the handshakes it records matter.
            with self.assertRaises(grpc.RpcError) as cm:
                stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
            return cm.exception
        one_call()
        one_call()
        wait_until(lambda: len(server.reused) >= 2, CALL_LIMIT, "two handshakes")
        self.assertEqual(server.reused[:2], [False, True], "resumption must keep working")
        self.assertLess(time.time(), not_after, "the first two handshakes took longer than the certificate lived")
        sleep_past(not_after)
        err = one_call()
        self.assertIn("certificate has expired", err.details())
        wait_until(lambda: len(server.reused) >= 3, CALL_LIMIT, "the third handshake")
        self.assertIsNot(server.reused[2], True, "a session of an expired server certificate was resumed")
        self.stop_maitred(m)
