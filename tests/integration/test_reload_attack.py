"""Inbound listeners and reloads attacked (issue 23's review of the reload
transaction): a hostile peer, an unlucky operator, a maintainer. Each test
is a probe that proved a defect, or a property a probe checked held.

Nothing here is decided by timing: every wait is a bounded loop whose
limit is a hang guard."""

import os
import signal
import socket
import ssl
import struct
import threading
import time

import grpc

import test_inbound_reload
from harness import (maitred_only, pb, call_id, free_port, port_accepts, wait_until, CALL_LIMIT)
from test_inbound import CART, ECHO, metric
from test_inbound_reload import PAY


class Attack(test_inbound_reload.InboundReload):
    """InboundReload's helpers, none of its tests (they run there)."""


for _name in dir(test_inbound_reload.InboundReload):
    if _name.startswith("test_"):
        setattr(Attack, _name, None)


class ReloadAttack(Attack):

    # --- listeners: removed and added again -----------------------------------
    @maitred_only
    def test_an_entry_removed_then_added_back_at_once_listens_again(self):
        # Removed, then put back by the next reload before every worker
        # closed its socket there: the address was maitred's own, busy
        # only with sockets on their way out; refusing the reload left
        # the entry out until the next one.
        app, other = self.start_upstream("app"), self.start_upstream("other")
        pa, po = free_port(), free_port()
        e_app, e_other = self.entry(app, pa, CART), self.entry(other, po, CART)
        b = self.server([e_app, e_other])
        without = dict(b.cfg, inbound=[e_other])
        both = dict(b.cfg, inbound=[e_app, e_other])
        # The workers busy with handshakes on the other listener: each
        # takes a new snapshot a little later.
        stop = threading.Event()

        def busy():
            while not stop.is_set():
                self.handshakes(po)
        load = [threading.Thread(target=busy) for _ in range(4)]
        for t in load:
            t.start()
        try:
            for i in range(60):
                n = b.proc.output().count("reloading")
                self.write_cfg(b, without if i % 2 == 0 else both)
                b.proc.signal(signal.SIGHUP)
                # The next one as soon as this one is read, whatever its verdict.
                wait_until(lambda: b.proc.output().count("reloading") > n, CALL_LIMIT, "the reload to start")
        finally:
            stop.set()
            for t in load:
                t.join(CALL_LIMIT)
        self.reload(b, both)
        self.assertNotIn("keeping the running config", b.proc.output())
        wait_until(lambda: self._try("127.0.0.1:%d" % pa), CALL_LIMIT, "the entry added back to serve")

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
            # Another address still completes its handshake.
            self.assertTrue(self.handshakes(port), "127.0.0.1 refused: another address used up its handshakes")
        finally:
            for s in idle:
                s.close()

    # --- counts given back whatever ends a connection ------------------------------
    def open_for(self, port, source="127.0.0.1"):
        """True when a new connection is held open (accepted, handshake
        pending) for a second, False when maitred closes it at once."""
        s = self.stalled(port, source, 1)[0]
        s.settimeout(1.0)
        try:
            if s.recv(1) == b"":
                s.close()
                return None
        except socket.timeout:
            pass
        except ConnectionResetError:
            s.close()
            return None
        return s

    def flood(self, port, n):
        """n connections ended every way a hostile or broken peer ends one."""
        hello_ctx = ssl.create_default_context(cafile=self.ca.ca_file)
        hello_ctx.check_hostname = False
        full = ssl.create_default_context(cafile=self.ca.ca_file)
        full.check_hostname = False
        full.load_cert_chain(self.client_cert, self.client_key)
        full.set_alpn_protocols(["h2"])
        for i in range(n):
            kind = i % 6
            s = socket.create_connection(("127.0.0.1", port), timeout=CALL_LIMIT)
            try:
                if kind == 0:
                    pass  # a port probe
                elif kind == 1:
                    s.sendall(b"GET / HTTP/1.1\r\n\r\n")  # not TLS
                elif kind == 2:
                    s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # half a ClientHello
                elif kind == 3:
                    try:  # no client certificate: refused by the handshake
                        hello_ctx.wrap_socket(s).recv(1)
                    except (OSError, ssl.SSLError):
                        pass
                elif kind == 4:
                    t = full.wrap_socket(s)  # a whole handshake, then gone
                    t.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                    s = t
                else:
                    s.sendall(b"\x16\x03\x01\x00")
            except (OSError, ssl.SSLError):
                pass
            # Every other one with a RST rather than a FIN.
            if i % 2:
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            s.close()

    @maitred_only
    def test_a_flood_of_connections_ended_every_way_gives_back_every_count(self):
        app = self.start_upstream("app")
        port = free_port()
        b = self.server([self.entry(app, port, CART, max_connections=12)], admin=True,
                        downstream={"preface_timeout": "300s"})
        addr = "127.0.0.1:%d" % port
        self.flood(port, 300)
        # Every count back to 0 once maitred has seen each of them end: 8
        # handshakes may be under way from 127.0.0.1 again, and no more.
        held = []
        try:
            def eight_held():
                s = self.open_for(port)
                if s is not None:
                    held.append(s)
                return len(held) == 8
            wait_until(eight_held, CALL_LIMIT, "8 handshakes from 127.0.0.1 under way")
            self.assertIsNone(self.open_for(port), "a ninth handshake was let in")
            # And max_connections: 12 - 8 = 4 more from other addresses, not 5.
            for k in range(4):
                s = self.open_for(port, "127.0.0.%d" % (2 + k))
                self.assertIsNotNone(s, "connection %d of 12 refused" % (9 + k))
                held.append(s)
            self.assertIsNone(self.open_for(port, "127.0.0.9"), "a thirteenth connection was let in")
        finally:
            for s in held:
                s.close()
        wait_until(lambda: self._try(addr), CALL_LIMIT, "the listener to admit again")

    # --- SIGHUP storms ---------------------------------------------------------------
    @maitred_only
    def test_a_sighup_storm_loses_no_call_on_a_listener_that_stays(self):
        app, other = self.start_upstream("app"), self.start_upstream("other")
        pa, po = free_port(), free_port()
        e_app = self.entry(app, pa, CART)
        b = self.server([e_app], admin=True)
        addr = "127.0.0.1:%d" % pa
        configs = [dict(b.cfg, inbound=[e_app]),
                   dict(b.cfg, inbound=[self.entry(other, po, CART), e_app]),
                   dict(b.cfg, inbound=[e_app, self.entry(other, po, CART, max_connections=7)]),
                   dict(b.cfg, inbound=[dict(e_app, max_connection_age="1s")])]
        stop = threading.Event()
        failures, done = [], [0]

        def calls():
            stub = self.direct(addr, self.client_cert, self.client_key)
            while not stop.is_set():
                try:
                    self.assertEqual(self.call(stub), "app")
                    done[0] += 1
                except Exception as e:  # noqa: BLE001 - reported below
                    failures.append(repr(e))
                if done[0] % 10 == 0:  # a new connection (a handshake) now and then
                    stub = self.direct(addr, self.client_cert, self.client_key)
        workers = [threading.Thread(target=calls) for _ in range(3)]
        for t in workers:
            t.start()
        try:
            for i in range(60):
                self.write_cfg(b, configs[i % len(configs)])
                b.proc.signal(signal.SIGHUP)
                time.sleep(0.02)
            self.reload(b, configs[1])
        finally:
            stop.set()
            for t in workers:
                t.join(CALL_LIMIT)
        self.assertEqual(failures, [])
        self.assertGreater(done[0], 0)
        self.assertTrue(self._try(addr))
        self.assertNotIn("keeping the running config", b.proc.output())
        self.assertEqual(self.call(self.direct("127.0.0.1:%d" % po, self.client_cert, self.client_key)), "other")

    # --- one listener, its address spelled another way ------------------------------
    @maitred_only
    def test_a_listen_address_spelled_another_way_keeps_its_calls_in_flight_counted(self):
        # "localhost:P" is "127.0.0.1:P": the same listener (its key), so
        # the same app and max_concurrent_calls' count, not a new one
        # next to the calls still in flight.
        app = self.start_upstream("app")
        port = free_port()
        b = self.server([self.entry(app, port, CART, max_concurrent_calls=1)])
        addr = "127.0.0.1:%d" % port
        stub = self.direct(addr, self.client_cert, self.client_key)
        cid = call_id()
        fut = stub.Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2)
        self.assertTrue(app.wait_call(cid, "STARTED").started)
        e = self.entry(app, port, CART, max_concurrent_calls=1)
        e["listen"] = "localhost:%d" % port
        self.reload(b, dict(b.cfg, inbound=[e]))
        self.assertNotIn("inbound 127.0.0.1:%d removed" % port, b.proc.output())
        try:
            self.assertEqual(self.refused(stub).code(), grpc.StatusCode.RESOURCE_EXHAUSTED,
                             "a second call in flight past max_concurrent_calls 1")
        finally:
            app.release(cid)
        self.assertEqual(fut.result(timeout=CALL_LIMIT).instance, "app")

    # --- max_connection_age ------------------------------------------------------
    @maitred_only
    def test_max_connection_age_lets_a_long_stream_finish_and_loses_no_call(self):
        app = self.start_upstream("app")
        port = free_port()
        b = self.server([self.entry(app, port, CART, max_connection_age="1s")], admin=True)
        addr = "127.0.0.1:%d" % port
        stub = self.direct(addr, self.client_cert, self.client_key)
        # A stream four times the age: its connection gets GOAWAY while it
        # runs, and it ends with every response.
        stream = stub.ServerStream(pb.EchoRequest(response_count=10, delay_ms=400), timeout=CALL_LIMIT)
        unary = 0
        got = []
        for resp in stream:
            got.append(resp)
            # Unary calls on the same channel meanwhile: each succeeds,
            # whichever connection it goes on.
            self.assertEqual(self.call(stub), "app")
            unary += 1
        self.assertEqual(len(got), 10)
        self.assertEqual(stream.code(), grpc.StatusCode.OK)
        text = self.scrape(b)
        handshakes = sum(metric(text, "maitred_inbound_handshakes_total", listener=addr, session=s) or 0
                         for s in ("new", "resumed"))
        self.assertGreaterEqual(handshakes, 2, "the connection was never replaced")

    # --- certwatch and reloads -------------------------------------------------------
    def copy(self, src, dst):
        with open(src, "rb") as f, open(dst + ".new", "wb") as g:
            g.write(f.read())
        os.rename(dst + ".new", dst)

    @maitred_only
    def test_certwatch_after_a_refused_reload_and_racing_an_applied_one(self):
        app = self.start_upstream("app")
        port = free_port()
        d = os.path.join(self.tmp, "tls")
        os.makedirs(d)
        ca = os.path.join(d, "ca.pem")
        self.copy(self.ca.ca_file, ca)
        b = self.server([self.entry(app, port, CART, client_ca=ca)])
        addr = "127.0.0.1:%d" % port
        old = self.direct(addr, self.client_cert, self.client_key)
        self.assertEqual(self.call(old), "app")
        # Refused: another CA file, and an access log that cannot be opened.
        self.reload(b, dict(b.cfg, inbound=[self.entry(app, port, CART, client_ca=self.other.ca_file)],
                            log={"access": {"path": os.path.join(self.tmp, "no-such-dir", "a.log")}}),
                    expect="keeping the running config")
        self.assertEqual(self.call(old), "app")
        # The running file's content rotates to the other CA, and a reload
        # that changes only the rules comes at the same moment.
        self.copy(self.other.ca_file, ca)
        e = self.entry(app, port, CART, client_ca=ca)
        e["authorization"]["rules"].append({"principals": [PAY], "methods": [ECHO + "*"]})
        self.reload(b, dict(b.cfg, inbound=[e]))
        label = "TLS files of inbound %s changed" % addr
        wait_until(lambda: label in b.proc.output(), CALL_LIMIT, "the rotation")
        # Who may connect is the rotated CA's: the old connection goes, the
        # mesh CA's certificate is refused, the other CA's accepted.
        self.assertEqual(self.refused(old).code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.refused(self.direct(addr, self.client_cert, self.client_key)).code(),
                         grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(self.call(self.direct(addr, self.stranger_cert, self.stranger_key)), "app")

    # --- the app's count and the mesh's, apart -----------------------------------------
    @maitred_only
    def test_the_apps_connections_never_lock_out_the_mesh(self):
        app, up = self.start_upstream("app"), self.start_upstream("upstream")
        port = free_port()
        b = self.server([self.entry(app, port, CART, max_connections=2)], admin=True,
                        downstream={"max_connections": 2, "preface_timeout": "300s"},
                        services=[self.service("*", [up])])
        addr = "127.0.0.1:%d" % port
        app_port = int(b.cfg["listen"].rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", app_port), timeout=CALL_LIMIT) for _ in range(4)]
        try:
            # The app's listener is full: its 2 taken (by the first of
            # these the workers accepted; the rest refused at accept)...
            wait_until(lambda: "downstream.max_connections (2) are open" in b.proc.output(), CALL_LIMIT,
                       "the app's listener to refuse")
            # ... and the mesh's two are its own.
            a, c = (self.direct(addr, self.client_cert, self.client_key) for _ in range(2))
            self.assertEqual(self.call(a), "app")
            self.assertEqual(self.call(c), "app")
        finally:
            for s in idle:
                s.close()

    # --- a bind that fails after others were bound -----------------------------------
    @maitred_only
    def test_a_refused_reload_leaves_nothing_listening_on_the_addresses_it_bound(self):
        app, other = self.start_upstream("app"), self.start_upstream("other")
        pa, p_new, p_busy = free_port(), free_port(), free_port()
        e_app = self.entry(app, pa, CART)
        b = self.server([e_app])
        busy = socket.socket()
        busy.bind(("127.0.0.1", p_busy))
        busy.listen(1)
        try:
            # The first new address binds, the second cannot: refused.
            self.reload(b, dict(b.cfg, inbound=[e_app, self.entry(other, p_new, CART),
                                                self.entry(other, p_busy, CART)]),
                        expect="cannot listen on 127.0.0.1:%d" % p_busy)
            # Nothing of it listens: the first one's sockets were closed.
            self.assertFalse(port_accepts(p_new, 0.5), "the refused reload left 127.0.0.1:%d listening" % p_new)
            s = socket.socket()
            s.bind(("127.0.0.1", p_new))  # free for anyone
            s.close()
            self.assertTrue(self._try("127.0.0.1:%d" % pa))
        finally:
            busy.close()

    # --- drain during reloads --------------------------------------------------------
    @maitred_only
    def test_sigterm_in_a_sighup_storm_drains_a_call_in_flight_and_exits_clean(self):
        app, other = self.start_upstream("app"), self.start_upstream("other")
        pa, po = free_port(), free_port()
        e_app, e_other = self.entry(app, pa, CART), self.entry(other, po, CART)
        b = self.server([e_app])
        stub = self.direct("127.0.0.1:%d" % pa, self.client_cert, self.client_key)
        cid = call_id()
        fut = stub.Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2)
        self.assertTrue(app.wait_call(cid, "STARTED").started)
        for i in range(20):
            self.write_cfg(b, dict(b.cfg, inbound=[e_app, e_other] if i % 2 == 0 else [e_app]))
            b.proc.signal(signal.SIGHUP)
        b.proc.signal(signal.SIGTERM)
        for i in range(5):  # reloads asked for while draining: ignored
            b.proc.signal(signal.SIGHUP)
        app.release(cid)
        self.assertEqual(fut.result(timeout=CALL_LIMIT).instance, "app")
        self.assertEqual(b.proc.wait(CALL_LIMIT), 0)
        self.assertIn("stopped", b.proc.output())
        self.assertFalse(port_accepts(pa, 0.5))
        self.assertFalse(port_accepts(po, 0.5))

    # --- two entries, one address ----------------------------------------------------
    @maitred_only
    def test_two_entries_on_one_address_however_spelled_are_refused(self):
        app, other = self.start_upstream("app"), self.start_upstream("other")
        pa = free_port()
        e_app = self.entry(app, pa, CART)
        b = self.server([e_app])
        for n, spelling in enumerate(("127.0.0.1:%d", "localhost:%d", "0.0.0.0:%d")):
            e = self.entry(other, pa, CART)
            e["listen"] = spelling % pa
            self.reload(b, dict(b.cfg, inbound=[e_app, e]), expect="keeping the running config")
            self.assertEqual(b.proc.output().count("is also inbound[0].listen"), n + 1, spelling)
            self.assertTrue(self._try("127.0.0.1:%d" % pa))
