"""Inbound listeners and reloads attacked (issue 23's review of the reload
transaction): a hostile peer, an unlucky operator, a maintainer. Each test
is a probe that proved a defect, or a property a probe checked held.

Nothing here is decided by timing: every wait is a bounded loop whose
limit is a hang guard."""

import signal
import socket
import ssl
import time

import grpc

import test_inbound_reload
from harness import (maitred_only, pb, call_id, free_port, port_accepts, wait_until, CALL_LIMIT)
from test_inbound import CART, metric


class Attack(test_inbound_reload.InboundReload):
    """InboundReload's helpers, none of its tests (they run there)."""
    pass


for _name in dir(test_inbound_reload.InboundReload):
    if _name.startswith("test_"):
        setattr(Attack, _name, None)


class ReloadAttack(Attack):

    def _try(self, addr):
        try:
            return self.call(self.direct(addr, self.client_cert, self.client_key)) == "app"
        except grpc.RpcError:
            return False

    # --- listeners: removed and added again -----------------------------------
    @maitred_only
    def test_an_entry_removed_then_added_back_at_once_listens_again(self):
        app, other = self.start_upstream("app"), self.start_upstream("other")
        pa, po = free_port(), free_port()
        e_app, e_other = self.entry(app, pa, CART), self.entry(other, po, CART)
        b = self.server([e_app, e_other])
        without = dict(b.cfg, inbound=[e_other])
        both = dict(b.cfg, inbound=[e_app, e_other])
        # The operator removes it, sees the mistake, puts it back: each
        # reload applies (none refused for an address maitred itself held).
        for _ in range(5):
            self.reload(b, without)
            self.reload(b, both)
        self.assertNotIn("keeping the running config", b.proc.output())
        wait_until(lambda: self._try("127.0.0.1:%d" % pa), CALL_LIMIT, "the entry added back to serve")

    # --- pending handshakes per source address -----------------------------------
    def stalled(self, port, source, n):
        """n connections from `source` that never send a byte."""
        out = []
        for _ in range(n):
            s = socket.socket()
            s.bind((source, 0))
            s.connect(("127.0.0.1", port))
            out.append(s)
        return out

    def handshakes(self, port):
        """A TLS handshake from 127.0.0.1 with cart's certificate completes."""
        ctx = ssl.create_default_context(cafile=self.ca.ca_file)
        ctx.check_hostname = False
        ctx.load_cert_chain(self.client_cert, self.client_key)
        ctx.set_alpn_protocols(["h2"])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=CALL_LIMIT) as raw:
                with ctx.wrap_socket(raw) as tls:
                    return tls.selected_alpn_protocol() == "h2"
        except (OSError, ssl.SSLError):
            return False

    @maitred_only
    def test_another_address_cannot_use_up_a_peers_handshakes(self):
        # With the bucket hash's seed a constant (0), 127.0.17.44 shares
        # 127.0.0.1's bucket, and its eight stalled handshakes refused
        # every new connection from 127.0.0.1. Seeded at random, the two
        # share a bucket once in 4096 runs.
        app = self.start_upstream("app")
        port = free_port()
        b = self.server([self.entry(app, port, CART)], admin=True, downstream={"preface_timeout": "300s"})
        addr = "127.0.0.1:%d" % port
        # 127.0.17.44's bucket is 127.0.0.1's under the hash with seed 0
        # (a peer that knows the hash picks such an address in its range).
        idle = self.stalled(port, "127.0.17.44", 8)
        try:
            # One more from there until one is refused: the bound is
            # reached (eight of its handshakes under way).
            def one_more_refused():
                s = self.stalled(port, "127.0.17.44", 1)[0]
                s.settimeout(1.0)
                try:
                    if s.recv(1) == b"":
                        s.close()
                        return True
                except socket.timeout:
                    pass
                idle.append(s)
                return False
            wait_until(one_more_refused, CALL_LIMIT, "127.0.17.44's handshakes to reach the bound")
            # Another address still handshakes.
            # Another address still completes its handshake.
            self.assertTrue(self.handshakes(port), "127.0.0.1 refused: another address used up its handshakes")
        finally:
            for s in idle:
                s.close()
