"""Inbound listeners across reloads (issue 23): a reload is a transaction,
an inbound entry is identified by its listen address (never by its
position), connections carry the TLS policy they were accepted under, and
the mesh's connections are counted apart from the app's.

A real maitred (B) with inbound listeners in front of grpcio apps, grpcio
callers with certificates made by openssl (test_inbound's MeshCA). Nothing
here is decided by timing: every wait is a bounded loop whose limit is a
hang guard."""

import json
import os
import signal
import socket

import grpc

import test_inbound
from harness import (maitred_only, pb, call_id, free_port, port_accepts, wait_until, CALL_LIMIT, START_LIMIT)
from test_inbound import CART, ECHO, metric

PAY = "spiffe://cluster.local/ns/pay/sa/api"


class InboundReload(test_inbound.Mesh):

    def entry(self, app, port, principal, client_ca=None, **extra):
        e = {"listen": "127.0.0.1:%d" % port, "app": app.address,
             "tls": {"cert_file": self.server_cert, "key_file": self.server_key,
                     "client_ca_file": client_ca or self.ca.ca_file},
             "authorization": {"default": "DENY", "rules": [{"principals": [principal], "methods": [ECHO + "*"]}]}}
        e.update(extra)
        return e

    def server(self, entries, admin=False, **top):
        cfg = {"listen": "127.0.0.1:%d" % free_port(), "workers": 2, "drain_timeout": "5s", "services": [],
               "inbound": entries}
        if admin:
            cfg["admin"] = "127.0.0.1:%d" % free_port()
        cfg.update(top)
        m = self.start_maitred(cfg)
        for e in entries:
            port = int(e["listen"].rsplit(":", 1)[1])
            wait_until(lambda: port_accepts(port, 0.5), START_LIMIT, "the inbound listener %s" % e["listen"])
        m.cfg = cfg
        m.admin = cfg.get("admin")
        if m.admin:
            # The inbound sockets are bound before the admin endpoint is.
            admin_port = int(m.admin.rsplit(":", 1)[1])
            wait_until(lambda: port_accepts(admin_port, 0.5), START_LIMIT, "the admin endpoint")
        return m

    def write_cfg(self, m, cfg):
        """Replace the config file at once (write aside, rename): maitred's
        file watch never reads it half written (a refusal these tests
        would count)."""
        with open(m.config_path + ".new", "w") as f:
            f.write(json.dumps(cfg))
        os.rename(m.config_path + ".new", m.config_path)

    def reload(self, m, cfg, expect="applied"):
        """Write cfg, SIGHUP, wait for this reload's verdict and check it:
        "applied", or a refusal ("keeping the running config") whose lines
        say `expect`. Only what maitred logged after the SIGHUP counts."""
        start = len(m.proc.output())
        self.write_cfg(m, cfg)
        m.proc.signal(signal.SIGHUP)
        applied = "reload: %s applied" % m.config_path

        def verdict():
            new = m.proc.output()[start:]
            return applied in new or "keeping the running config" in new
        wait_until(verdict, CALL_LIMIT, "the reload's verdict")
        new = m.proc.output()[start:]
        if expect == "applied":
            self.assertIn(applied, new, "the reload was refused")
        else:
            self.assertIn("keeping the running config", new, "the reload was applied")
            self.assertIn(expect, new)

    def call(self, stub, **kw):
        return stub.Unary(pb.EchoRequest(**kw), timeout=CALL_LIMIT).instance

    def refused(self, stub):
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT)
        return cm.exception

    # --- identity by key -------------------------------------------------------
    @maitred_only
    def test_reordered_entries_keep_their_own_rules_and_app(self):
        internal, partner = self.start_upstream("internal"), self.start_upstream("partner")
        pi, pp = free_port(), free_port()
        e_int, e_par = self.entry(internal, pi, CART), self.entry(partner, pp, PAY)
        b = self.server([e_int, e_par])
        cart_int = self.direct("127.0.0.1:%d" % pi, self.client_cert, self.client_key)
        pay_par = self.direct("127.0.0.1:%d" % pp, self.pay_cert, self.pay_key)
        cart_par = self.direct("127.0.0.1:%d" % pp, self.client_cert, self.client_key)
        self.assertEqual(self.call(cart_int), "internal")
        self.assertEqual(self.call(pay_par), "partner")
        self.assertEqual(self.refused(cart_par).code(), grpc.StatusCode.PERMISSION_DENIED)
        cfg = dict(b.cfg, inbound=[e_par, e_int])
        self.reload(b, cfg)
        # The same connections, each still its own listener's rules and app.
        for _ in range(4):
            self.assertEqual(self.call(cart_int), "internal")
            self.assertEqual(self.call(pay_par), "partner")
            self.assertEqual(self.refused(cart_par).code(), grpc.StatusCode.PERMISSION_DENIED)
        # New connections too.
        self.assertEqual(self.call(self.direct("127.0.0.1:%d" % pi, self.client_cert, self.client_key)), "internal")
        self.assertEqual(self.call(self.direct("127.0.0.1:%d" % pp, self.pay_cert, self.pay_key)), "partner")

    @maitred_only
    def test_a_moved_entry_listens_on_its_new_address_only(self):
        internal, partner = self.start_upstream("internal"), self.start_upstream("partner")
        pi, pp, moved = free_port(), free_port(), free_port()
        e_int, e_par = self.entry(internal, pi, CART), self.entry(partner, pp, PAY)
        b = self.server([e_int, e_par], admin=True)
        pay_par = self.direct("127.0.0.1:%d" % pp, self.pay_cert, self.pay_key)
        self.assertEqual(self.call(pay_par), "partner")
        e_moved = self.entry(partner, moved, PAY)
        self.reload(b, dict(b.cfg, inbound=[e_moved, e_int]))
        wait_until(lambda: not port_accepts(pp, 0.5), CALL_LIMIT, "the old address to stop accepting")
        self.assertEqual(self.call(self.direct("127.0.0.1:%d" % moved, self.pay_cert, self.pay_key)), "partner")
        self.assertEqual(self.call(self.direct("127.0.0.1:%d" % pi, self.client_cert, self.client_key)), "internal")
        # Each address its own figures: the moved one's first handshake,
        # the internal listener's own.
        text = self.scrape(b)
        self.assertEqual(metric(text, "maitred_inbound_handshakes_total", listener="127.0.0.1:%d" % moved,
                                session="new"), 1)
        self.assertEqual(metric(text, "maitred_inbound_handshakes_total", listener="127.0.0.1:%d" % pi,
                                session="new"), 1)
        self.assertEqual(metric(text, "maitred_inbound_calls_total", listener="127.0.0.1:%d" % pi,
                                identity=CART, decision="allow"), 1)

    @maitred_only
    def test_a_removed_entry_stops_accepting_and_the_other_keeps_its_app(self):
        internal, partner = self.start_upstream("internal"), self.start_upstream("partner")
        pi, pp = free_port(), free_port()
        e_par, e_int = self.entry(partner, pp, PAY), self.entry(internal, pi, CART)
        b = self.server([e_par, e_int])
        cart_int = self.direct("127.0.0.1:%d" % pi, self.client_cert, self.client_key)
        pay_par = self.direct("127.0.0.1:%d" % pp, self.pay_cert, self.pay_key)
        self.assertEqual(self.call(cart_int), "internal")
        self.assertEqual(self.call(pay_par), "partner")
        # A call in flight on the partner listener when it goes.
        cid = call_id()
        fut = pay_par.Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2)
        self.assertTrue(partner.wait_call(cid, "STARTED").started)
        self.reload(b, dict(b.cfg, inbound=[e_int]))
        wait_until(lambda: not port_accepts(pp, 0.5), CALL_LIMIT, "the removed listener to stop accepting")
        # Its call in flight finishes; its connection takes no new call.
        partner.release(cid)
        self.assertEqual(fut.result(timeout=CALL_LIMIT).instance, "partner")
        self.assertEqual(self.refused(pay_par).code(), grpc.StatusCode.UNAVAILABLE)
        # The remaining listener: its own rules and its own app.
        for _ in range(4):
            self.assertEqual(self.call(cart_int), "internal")
        self.assertEqual(self.call(self.direct("127.0.0.1:%d" % pi, self.client_cert, self.client_key)), "internal")
        self.assertEqual(partner.stats().total, 2)
        self.assertIn("inbound 127.0.0.1:%d removed" % pp, b.proc.output())

    @maitred_only
    def test_an_added_entry_gets_its_sockets_and_a_busy_address_refuses_the_reload(self):
        internal, partner = self.start_upstream("internal"), self.start_upstream("partner")
        pi, pp = free_port(), free_port()
        e_int = self.entry(internal, pi, CART)
        b = self.server([e_int])
        cart_int = self.direct("127.0.0.1:%d" % pi, self.client_cert, self.client_key)
        self.assertEqual(self.call(cart_int), "internal")
        # Its address taken by someone else: refused, nothing changes.
        busy = socket.socket()
        busy.bind(("127.0.0.1", pp))
        busy.listen(1)
        e_par = self.entry(partner, pp, PAY)
        self.reload(b, dict(b.cfg, inbound=[e_int, e_par]), expect="cannot listen on 127.0.0.1:%d" % pp)
        self.assertEqual(self.call(cart_int), "internal")
        busy.close()
        # Free again: the same reload applies, the new listener serves its app.
        self.reload(b, dict(b.cfg, inbound=[e_int, e_par]))
        wait_until(lambda: port_accepts(pp, 0.5), CALL_LIMIT, "the new listener")
        self.assertEqual(self.call(self.direct("127.0.0.1:%d" % pp, self.pay_cert, self.pay_key)), "partner")
        self.assertEqual(self.call(cart_int), "internal")

    # --- a reload is a transaction ----------------------------------------------
    @maitred_only
    def test_a_refused_reload_leaves_the_old_client_ca_in_force(self):
        app = self.start_upstream("app")
        port = free_port()
        b = self.server([self.entry(app, port, CART)])
        addr = "127.0.0.1:%d" % port
        self.assertEqual(self.call(self.direct(addr, self.client_cert, self.client_key)), "app")
        # Another CA, and an access log that cannot be opened: refused.
        cfg = dict(b.cfg, inbound=[self.entry(app, port, CART, client_ca=self.other.ca_file)],
                   log={"access": {"path": os.path.join(self.tmp, "no-such-dir", "access.log")}})
        self.reload(b, cfg, expect="keeping the running config")
        # The old CA still decides who may connect.
        self.assertEqual(self.call(self.direct(addr, self.client_cert, self.client_key)), "app")
        self.assertEqual(self.refused(self.direct(addr, self.stranger_cert, self.stranger_key)).code(),
                         grpc.StatusCode.UNAVAILABLE)

    # --- connections carry their policy ---------------------------------------
    @maitred_only
    def test_a_client_ca_change_sends_goaway_to_connections_made_before(self):
        app = self.start_upstream("app")
        port = free_port()
        b = self.server([self.entry(app, port, CART)])
        addr = "127.0.0.1:%d" % port
        old = self.direct(addr, self.client_cert, self.client_key)
        self.assertEqual(self.call(old), "app")
        cid = call_id()
        fut = old.Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2)
        self.assertTrue(app.wait_call(cid, "STARTED").started)
        self.reload(b, dict(b.cfg, inbound=[self.entry(app, port, CART, client_ca=self.other.ca_file)]))
        # The call in flight finishes...
        app.release(cid)
        self.assertEqual(fut.result(timeout=CALL_LIMIT).instance, "app")
        # ... and the connection made under the old CA takes no new call:
        # its next one needs a new handshake, which the new CA refuses.
        self.assertEqual(self.refused(old).code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.refused(self.direct(addr, self.client_cert, self.client_key)).code(),
                         grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.call(self.direct(addr, self.stranger_cert, self.stranger_key)), "app")
        self.assertIn("its listener was removed or its TLS policy changed: GOAWAY", b.proc.output())

    @maitred_only
    def test_a_rotated_client_ca_file_sends_goaway_a_rotated_certificate_does_not(self):
        app = self.start_upstream("app")
        port = free_port()
        d = os.path.join(self.tmp, "tls")
        os.makedirs(d)
        ca, cert, key = (os.path.join(d, n) for n in ("ca.pem", "tls.crt", "tls.key"))
        for src, dst in ((self.ca.ca_file, ca), (self.server_cert, cert), (self.server_key, key)):
            with open(src, "rb") as f, open(dst, "wb") as g:
                g.write(f.read())
        e = self.entry(app, port, CART, client_ca=ca)
        e["tls"].update(cert_file=cert, key_file=key)
        b = self.server([e])
        addr = "127.0.0.1:%d" % port
        conn = self.direct(addr, self.client_cert, self.client_key)
        self.assertEqual(self.call(conn), "app")
        # The server's own certificate rotated: the connection stays.
        new_cert, new_key = self.ca.leaf("cart-server", uri=test_inbound.SERVER, serial=5151)
        for src, dst in ((new_cert, cert), (new_key, key)):
            with open(src, "rb") as f, open(dst, "wb") as g:
                g.write(f.read())
        b.proc.signal(signal.SIGHUP)
        label = "TLS files of inbound %s changed" % addr
        wait_until(lambda: label in b.proc.output(), CALL_LIMIT, "the rotation")
        self.assertEqual(self.call(conn), "app")
        self.assertNotIn("TLS policy changed: GOAWAY", b.proc.output())
        # The client CA's content rotated to another CA: who may connect
        # changed, so the connection made before goes.
        with open(self.other.ca_file, "rb") as f, open(ca, "wb") as g:
            g.write(f.read())
        b.proc.signal(signal.SIGHUP)
        wait_until(lambda: b.proc.output().count(label) >= 2, CALL_LIMIT, "the CA rotation")
        self.assertEqual(self.refused(conn).code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.call(self.direct(addr, self.stranger_cert, self.stranger_key)), "app")

    @maitred_only
    def test_max_connection_age_sends_goaway_and_calls_go_on(self):
        app = self.start_upstream("app")
        port = free_port()
        b = self.server([self.entry(app, port, CART, max_connection_age="1s")], admin=True)
        addr = "127.0.0.1:%d" % port
        stub = self.direct(addr, self.client_cert, self.client_key)

        def handshakes():
            text = self.scrape(b)
            return sum(metric(text, "maitred_inbound_handshakes_total", listener=addr, session=s) or 0
                       for s in ("new", "resumed"))

        def reconnected():
            self.assertEqual(self.call(stub), "app")
            return handshakes() >= 3
        wait_until(reconnected, CALL_LIMIT * 2, "the connection to be replaced twice")

    # --- the app's capacity is its own ------------------------------------------
    def fds(self, m):
        return len(os.listdir("/proc/%d/fd" % m.proc.p.pid))

    @maitred_only
    def test_inbound_connections_never_lock_out_the_app(self):
        app, up = self.start_upstream("app"), self.start_upstream("upstream")
        port = free_port()
        # The idle ones stay (no handshake timeout within the test).
        b = self.server([self.entry(app, port, CART)], downstream={"max_connections": 4, "preface_timeout": "300s"},
                        services=[self.service("*", [up])])
        base = self.fds(b)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=CALL_LIMIT) for _ in range(6)]
        try:
            # maitred took at least as many as the app may have.
            wait_until(lambda: self.fds(b) >= base + 4, CALL_LIMIT, "the idle connections accepted")
            # The app's own connections: none of its 4 taken by the mesh.
            for _ in range(4):
                self.assertEqual(self.call(self.echo(b)), "upstream")
        finally:
            for s in idle:
                s.close()

    @maitred_only
    def test_inbound_max_connections_refuses_at_accept(self):
        app = self.start_upstream("app")
        port = free_port()
        b = self.server([self.entry(app, port, CART, max_connections=3)], admin=True)
        addr = "127.0.0.1:%d" % port
        idle = [socket.create_connection(("127.0.0.1", port), timeout=CALL_LIMIT) for _ in range(5)]
        try:
            wait_until(lambda: (metric(self.scrape(b), "maitred_inbound_connections_refused_total",
                                       listener=addr) or 0) >= 2, CALL_LIMIT, "the inbound refusals")
            # (At least: the start's probe of the port may still count.)
            self.assertIn("inbound max_connections (3) are open", b.proc.output())
        finally:
            for s in idle:
                s.close()
        # Once they are gone the listener takes connections again.
        wait_until(lambda: self._try(addr), CALL_LIMIT, "the inbound listener to admit again")

    @maitred_only
    def test_handshakes_under_way_are_bounded_per_address(self):
        app = self.start_upstream("app")
        port = free_port()
        b = self.server([self.entry(app, port, CART)], admin=True)
        addr = "127.0.0.1:%d" % port
        idle = [socket.create_connection(("127.0.0.1", port), timeout=CALL_LIMIT) for _ in range(10)]
        try:
            wait_until(lambda: (metric(self.scrape(b), "maitred_inbound_connections_refused_total",
                                       listener=addr) or 0) >= 2, CALL_LIMIT, "the refusals past 8 handshakes")
            self.assertIn("8 TLS handshakes under way from one address", b.proc.output())
        finally:
            for s in idle:
                s.close()
        wait_until(lambda: self._try(addr), CALL_LIMIT, "the inbound listener to admit again")

    def _try(self, addr):
        try:
            return self.call(self.direct(addr, self.client_cert, self.client_key)) == "app"
        except grpc.RpcError:
            return False
