"""A reloaded maitred behaves like a fresh one.

For each pair of configs (A -> B) in PAIRS: start maitred on A, open client
connections and use them, rewrite the file to B and send SIGHUP, wait for the
log line that says the reload was applied or refused, and record what a fixed
set of probes sees. Then start a fresh maitred on B (or on A when B is
refused: a fresh maitred on B does not start) on the same ports, with the
same upstreams, and record what the same probes see. The two records must be
equal.

The probes return facts, never timings:
  - inbound calls: which caller certificate reaches which app through which
    inbound listener (the app names itself; the XFCC it was given, with the
    certificate's hash replaced by its name), or the call's status;
  - inbound handshakes: a raw TLS client offers each certificate and says
    whether the listener took the HTTP/2 preface (accepted) or ended the
    connection (refused), or whether nothing listened (closed);
  - service calls through the main listener: which upstream answered, with
    which client certificate it saw, or the status (upstream TLS on or off,
    CA, server_identity and client certificate all show here);
  - a header route; a rate limit's count (of a burst of calls, how many
    were refused RESOURCE_EXHAUSTED).
Calls and service probes run twice after the reload: over a client
connection OPENED BEFORE the reload and kept open ("old", only those whose
connection was up under A), and over a new one ("new"). Old connections are
where a reload applied piece by piece shows: they keep the policy they were
made under. In the fresh run both are new connections.

A pair that differs on the main branch today is listed in KNOWN_DIFFERENT
with what the probes saw; its test is an expected failure (of the comparison
only: any other failure still fails it), so the file passes, and a listed
pair that starts to pass fails as an unexpected success: drop its entry
then. A new pair is a few lines in PAIRS.

Every wait is bounded (a hang guard); timing decides nothing.
"""

import hashlib
import os
import re
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import time
import unittest
from concurrent import futures

import grpc

from harness import (MaitredTest, maitred_only, pb, free_port, port_accepts, to_yaml, wait_until,
                     CALL_LIMIT, CHANNEL_OPTIONS, START_LIMIT)
from test_inbound import MeshCA, der_of, read

NS = "spiffe://cluster.local/ns/shop/sa/"
CART = NS + "cart"
PAY = "spiffe://cluster.local/ns/pay/sa/api"
SERVER = NS + "cart-server"
NOBODY = NS + "someone-else"
ECHO = "/maitred.testing.v1.Echo/"

# Every probe channel its own connections: grpcio shares subchannels between
# channels to the same target by default, and a "new" channel would then
# ride the old connection.
PROBE_OPTIONS = CHANNEL_OPTIONS + [("grpc.use_local_subchannel_pool", 1)]

INBOUND_PORTS = ("in1", "in2", "in3")
CALLERS = ("cart", "pay", "stranger", "none")   # stranger: CART's identity from another CA
SERVICE_PROBES = (                               # (path's service, request metadata)
    ("svc.Plain", ()),
    ("svc.Plain", (("x-route", "beta"),)),
    ("svc.Tls", ()),
    ("svc.Id", ()),
    ("svc.Mtls", ()),
    ("svc.Added", ()),
)
LIMITED = "svc.Limited"
BURST_CALLS = 6            # a burst: more calls than any bucket below holds
BURST_RATE = 1             # tokens per second: none comes back within a burst


# --- the world both runs share: ports, certificates, upstreams ----------------

class World:
    """Ports by role ("listen", "in1".."in3"), the class's certificates, and
    upstreams started on first use by name; both runs of a pair see the
    same addresses."""

    UPSTREAMS = {
        # name: (server certificate, client CA) as attribute names of the test
        "internal": (None, None),      # an inbound listener's app
        "partner": (None, None),       # another inbound listener's app
        "plain": (None, None),
        "plain2": (None, None),
        "beta": (None, None),
        "secure": ("server", None),    # TLS, URI SAN SERVER, IP:127.0.0.1
        "mtls": ("server", "ca"),      # the same, and clients must chain to ca
    }

    def __init__(self, test):
        self.t = test
        self.ports = {r: free_port() for r in ("listen",) + INBOUND_PORTS}
        self.ups = {}
        self.ca, self.other = test.ca, test.other
        self.certs = test.certs
        self.tmp = test.tmp

    def addr(self, role):
        return "127.0.0.1:%d" % self.ports[role]

    def up(self, name):
        if name not in self.ups:
            cert, client_ca = self.UPSTREAMS[name]
            tls = None
            if cert:
                c, k = self.certs[cert]
                tls = type("ServerCert", (), {"server_cert": c, "server_key": k})
            self.ups[name] = self.t.start_upstream(name, tls=tls, client_ca=getattr(self, client_ca) if client_ca
                                                   else None)
        return self.ups[name].address

    # --- config pieces ---------------------------------------------------------
    def inbound(self, port, app, allow, client_ca=None):
        cert, key = self.certs["server"]
        return {"listen": self.addr(port), "app": self.up(app),
                "tls": {"cert_file": cert, "key_file": key, "client_ca_file": (client_ca or self.ca).ca_file},
                "authorization": {"default": "DENY", "rules": [{"principals": [allow], "methods": [ECHO + "*"]}]}}

    def internal(self, port="in1", **kw):
        """The internal app's listener: only cart may call."""
        return self.inbound(port, "internal", CART, **kw)

    def partner(self, port="in2", **kw):
        """The partner app's listener: only pay may call."""
        return self.inbound(port, "partner", PAY, **kw)

    def svc(self, name, upstream, tls=None, **extra):
        s = {"name": name, "lb": {"policy": "ROUND_ROBIN"}, "endpoints": [{"address": self.up(upstream)}]}
        if tls is not None:
            s["tls"] = tls
        s.update(extra)
        return s

    def tls(self, ca=None, identity=None, client=None):
        t = {"ca_file": (ca or self.ca).ca_file}
        if identity:
            t["server_identity"] = identity
        if client:
            t["cert_file"], t["key_file"] = self.certs[client]
        return t

    def config(self, services=(), inbound=(), routes=(), **top):
        # Two workers: a reload reaches each on its own (and each inbound
        # listener is a socket per worker); the probes' connections land on
        # either, and every one must see B.
        cfg = {"listen": self.addr("listen"), "workers": 2, "drain_timeout": "1s"}
        cfg.update(top)
        cfg["services"] = list(services)
        if inbound:
            cfg["inbound"] = list(inbound)
        if routes:
            cfg["routes"] = list(routes)
        return cfg

    def plain(self, *more, **top):
        """The usual services: svc.Plain over h2c, and `more`."""
        return self.config([self.svc("svc.Plain", "plain")] + list(more), **top)


class Pair:
    """A -> B as functions of the World. fresh: facts the fresh maitred must
    show when it runs on B, or on A for a refused B (so a pair whose probes
    see nothing cannot pass by being blind),
    each a probe key (inb, svc, tls, LIMIT, RELOAD below) and what it sees,
    a tuple compared on its first elements. may_refuse: refusing B (and
    keeping A whole) is an acceptable outcome as well as applying it."""

    def __init__(self, name, a, b, fresh, may_refuse=False):
        self.name, self.a, self.b, self.fresh, self.may_refuse = name, a, b, fresh, may_refuse


def inb(port, caller):
    return ("new", "in", port, caller)


def svc(name, *metadata):
    return ("new", "svc", name, tuple(metadata))


def tls(port, caller):
    return ("tls", port, caller)


LIMIT = ("limit", LIMITED)
RELOAD = ("reload",)
BETA = ("x-route", "beta")


def beta_route():
    return {"match": {"service": "svc.Plain", "header": {"name": BETA[0], "value": BETA[1]}}, "to": "svc.Beta"}


def limit(burst):
    return {"calls_per_second": BURST_RATE, "burst": burst}


PAIRS = [
    # A control: a change nothing probes can see.
    Pair("trivial_change",
         lambda w: w.plain(inbound=[w.internal()]),
         lambda w: w.plain(inbound=[w.internal()], drain_timeout="2s"),
         {inb("in1", "cart"): ("OK", "internal"), inb("in1", "pay"): ("PERMISSION_DENIED",),
          tls("in1", "stranger"): "refused", svc("svc.Plain"): ("OK", "plain")}),
    # --- inbound entries ---------------------------------------------------------
    Pair("inbound_added",
         lambda w: w.plain(inbound=[w.internal()]),
         lambda w: w.plain(inbound=[w.internal(), w.partner()]),
         {inb("in2", "pay"): ("OK", "partner")}),
    Pair("inbound_removed_last",
         lambda w: w.plain(inbound=[w.internal(), w.partner()]),
         lambda w: w.plain(inbound=[w.internal()]),
         {tls("in2", "pay"): "closed", inb("in1", "cart"): ("OK", "internal")}),
    Pair("inbound_removed_first",
         lambda w: w.plain(inbound=[w.partner(), w.internal()]),
         lambda w: w.plain(inbound=[w.internal()]),
         {tls("in2", "pay"): "closed", inb("in1", "cart"): ("OK", "internal")}),
    Pair("inbound_reordered",
         lambda w: w.plain(inbound=[w.internal(), w.partner()]),
         lambda w: w.plain(inbound=[w.partner(), w.internal()]),
         {inb("in1", "cart"): ("OK", "internal"), inb("in2", "pay"): ("OK", "partner")}),
    Pair("inbound_moved",
         lambda w: w.plain(inbound=[w.internal("in1")]),
         lambda w: w.plain(inbound=[w.internal("in3")]),
         {inb("in3", "cart"): ("OK", "internal"), tls("in1", "cart"): "closed"}, may_refuse=True),
    Pair("inbound_app_changed",
         lambda w: w.plain(inbound=[w.internal()]),
         lambda w: w.plain(inbound=[dict(w.internal(), app=w.up("partner"))]),
         {inb("in1", "cart"): ("OK", "partner")}),
    Pair("inbound_rules_changed",
         lambda w: w.plain(inbound=[w.internal()]),
         lambda w: w.plain(inbound=[w.inbound("in1", "internal", PAY)]),
         {inb("in1", "pay"): ("OK", "internal"), inb("in1", "cart"): ("PERMISSION_DENIED",)}),
    Pair("inbound_client_ca_changed",
         lambda w: w.plain(inbound=[w.internal()]),
         lambda w: w.plain(inbound=[w.internal(client_ca=w.other)]),
         {inb("in1", "stranger"): ("OK", "internal"), tls("in1", "cart"): "refused"}),
    # The same listener, its address spelled another way: its key, so its
    # connections, rules and app stay.
    Pair("inbound_respelled",
         lambda w: w.plain(inbound=[w.internal()]),
         lambda w: w.plain(inbound=[dict(w.internal(), listen="localhost:%d" % w.ports["in1"])]),
         {inb("in1", "cart"): ("OK", "internal"), inb("in1", "pay"): ("PERMISSION_DENIED",)}),
    # Two entries trade addresses (same TLS files): each address now serves
    # the other's rules and app, over the connections made before too.
    Pair("inbound_addresses_swapped",
         lambda w: w.plain(inbound=[w.internal("in1"), w.partner("in2")]),
         lambda w: w.plain(inbound=[w.internal("in2"), w.partner("in1")]),
         {inb("in1", "pay"): ("OK", "partner"), inb("in1", "cart"): ("PERMISSION_DENIED",),
          inb("in2", "cart"): ("OK", "internal")}),
    # Client certificates no longer asked for: anyone may connect and call.
    Pair("inbound_client_ca_dropped",
         lambda w: w.plain(inbound=[w.internal()]),
         lambda w: w.plain(inbound=[dict(w.internal(), tls={"cert_file": w.certs["server"][0],
                                                           "key_file": w.certs["server"][1]},
                                         authorization={"default": "ALLOW_ALL"})]),
         {tls("in1", "stranger"): "accepted", inb("in1", "cart"): ("OK", "internal")}),
    # --- upstream TLS --------------------------------------------------------------
    Pair("upstream_tls_on",
         lambda w: w.config([w.svc("svc.Plain", "plain")]),
         lambda w: w.config([w.svc("svc.Plain", "plain", tls=w.tls())]),
         {svc("svc.Plain"): ("UNAVAILABLE",)}),
    Pair("upstream_tls_off",
         lambda w: w.plain(w.svc("svc.Tls", "secure", tls=w.tls())),
         lambda w: w.plain(w.svc("svc.Tls", "secure")),
         {svc("svc.Tls"): ("UNAVAILABLE",)}),
    Pair("upstream_ca_changed",
         lambda w: w.plain(w.svc("svc.Tls", "secure", tls=w.tls())),
         lambda w: w.plain(w.svc("svc.Tls", "secure", tls=w.tls(ca=w.other))),
         {svc("svc.Tls"): ("UNAVAILABLE",)}),
    Pair("server_identity_set",
         lambda w: w.plain(w.svc("svc.Id", "secure", tls=w.tls())),
         lambda w: w.plain(w.svc("svc.Id", "secure", tls=w.tls(identity=NOBODY))),
         {svc("svc.Id"): ("UNAVAILABLE",)}),
    Pair("server_identity_changed",
         lambda w: w.plain(w.svc("svc.Id", "secure", tls=w.tls(identity=SERVER))),
         lambda w: w.plain(w.svc("svc.Id", "secure", tls=w.tls(identity=NOBODY))),
         {svc("svc.Id"): ("UNAVAILABLE",)}),
    Pair("server_identity_relaxed",
         lambda w: w.plain(w.svc("svc.Id", "secure", tls=w.tls(identity=NOBODY))),
         lambda w: w.plain(w.svc("svc.Id", "secure", tls=w.tls(identity=SERVER))),
         {svc("svc.Id"): ("OK", "secure")}),
    Pair("client_cert_changed",
         lambda w: w.plain(w.svc("svc.Mtls", "mtls", tls=w.tls(client="cart"))),
         lambda w: w.plain(w.svc("svc.Mtls", "mtls", tls=w.tls(client="pay"))),
         {svc("svc.Mtls"): ("OK", "mtls", "pay")}),
    Pair("client_cert_untrusted",
         lambda w: w.plain(w.svc("svc.Mtls", "mtls", tls=w.tls(client="cart"))),
         lambda w: w.plain(w.svc("svc.Mtls", "mtls", tls=w.tls(client="stranger"))),
         {svc("svc.Mtls"): ("UNAVAILABLE",)}),
    # --- services, routes, limits -----------------------------------------------
    Pair("service_added",
         lambda w: w.plain(),
         lambda w: w.plain(w.svc("svc.Added", "plain2")),
         {svc("svc.Added"): ("OK", "plain2")}),
    Pair("service_removed",
         lambda w: w.plain(w.svc("svc.Added", "plain2")),
         lambda w: w.plain(),
         {svc("svc.Added"): ("UNIMPLEMENTED",)}),
    Pair("service_endpoint_changed",
         lambda w: w.plain(w.svc("svc.Added", "plain2")),
         lambda w: w.plain(w.svc("svc.Added", "beta")),
         {svc("svc.Added"): ("OK", "beta")}),
    Pair("route_added",
         lambda w: w.plain(w.svc("svc.Beta", "beta")),
         lambda w: w.plain(w.svc("svc.Beta", "beta"), routes=[beta_route()]),
         {svc("svc.Plain", BETA): ("OK", "beta"), svc("svc.Plain"): ("OK", "plain")}),
    Pair("route_removed",
         lambda w: w.plain(w.svc("svc.Beta", "beta"), routes=[beta_route()]),
         lambda w: w.plain(w.svc("svc.Beta", "beta")),
         {svc("svc.Plain", BETA): ("OK", "plain")}),
    Pair("rate_limit_added",
         lambda w: w.plain(w.svc(LIMITED, "plain2")),
         lambda w: w.plain(w.svc(LIMITED, "plain2", rate_limit=limit(3))),
         {LIMIT: (("OK", 3), ("RESOURCE_EXHAUSTED", BURST_CALLS - 3))}),
    Pair("rate_limit_burst_changed",
         lambda w: w.plain(w.svc(LIMITED, "plain2", rate_limit=limit(3))),
         lambda w: w.plain(w.svc(LIMITED, "plain2", rate_limit=limit(1))),
         {LIMIT: (("OK", 1), ("RESOURCE_EXHAUSTED", BURST_CALLS - 1))}),
    Pair("rate_limit_removed",
         lambda w: w.plain(w.svc(LIMITED, "plain2", rate_limit=limit(3))),
         lambda w: w.plain(w.svc(LIMITED, "plain2")),
         {LIMIT: (("OK", BURST_CALLS),)}),
    # --- a reload refused at apply time ------------------------------------------
    # The access log cannot be opened (its directory does not exist): a fresh
    # maitred on B does not start, so the reload must keep A whole, the new
    # client CA included.
    Pair("refused_access_log_with_client_ca",
         lambda w: w.plain(inbound=[w.internal()]),
         lambda w: w.plain(inbound=[w.internal(client_ca=w.other)],
                           log={"access": {"path": os.path.join(w.tmp, "no-such-dir", "access.log")}}),
         {RELOAD: "refused", inb("in1", "cart"): ("OK", "internal"), tls("in1", "stranger"): "refused"}),
    Pair("refused_access_log_with_upstream_ca",
         lambda w: w.plain(w.svc("svc.Tls", "secure", tls=w.tls())),
         lambda w: w.plain(w.svc("svc.Tls", "secure", tls=w.tls(ca=w.other)),
                           log={"access": {"path": os.path.join(w.tmp, "no-such-dir", "access.log")}}),
         {RELOAD: "refused", svc("svc.Tls"): ("OK", "secure")}),
    # Refused when read: an unknown key, beside an added listener and service.
    Pair("refused_invalid",
         lambda w: w.plain(inbound=[w.internal()]),
         lambda w: dict(w.plain(w.svc("svc.Added", "plain2"), inbound=[w.internal(), w.partner()]),
                        no_such_key=1),
         {RELOAD: "refused", inb("in1", "cart"): ("OK", "internal"), svc("svc.Added"): ("UNIMPLEMENTED",),
          tls("in2", "pay"): "closed"}),
]

# Pairs known to differ, each with what the probes saw (none today: the 14
# found at 01e3268 were fixed by the reload transaction, inbound listeners
# by key and connections that carry their TLS policy). A listed pair that
# starts to pass fails as an unexpected success: drop its entry then.
KNOWN_DIFFERENT = {}


# --- probes ----------------------------------------------------------------------

def status(err):
    return err.code().name if isinstance(err, grpc.RpcError) else type(err).__name__


class Probes:
    """What a client sees of one running maitred."""

    def __init__(self, test, world):
        self.t, self.w = test, world
        self.names = {hashlib.sha256(der_of(c)).hexdigest(): n for n, (c, k) in world.certs.items()}

    # --- channels ----------------------------------------------------------------
    def inbound_channel(self, port, caller):
        key = cert = None
        if caller != "none":
            cert, key = self.w.certs[caller]
        creds = grpc.ssl_channel_credentials(read(self.w.ca.ca_file), read(key) if key else None,
                                             read(cert) if cert else None)
        ch = grpc.secure_channel(self.w.addr(port), creds, options=PROBE_OPTIONS)
        self.t._channels.append(ch)
        return ch

    def main_channel(self):
        ch = grpc.insecure_channel(self.w.addr("listen"), options=PROBE_OPTIONS)
        self.t._channels.append(ch)
        return ch

    # --- one call ------------------------------------------------------------------
    def call(self, ch, path, metadata=(), retry=False):
        """("OK", instance, client_cn, xfcc) or (status,). `retry`: an old
        connection that a fixed maitred closes after a reload may fail one
        call UNAVAILABLE while the client learns it; ask again twice."""
        for attempt in range(3 if retry else 1):
            try:
                raw = ch.unary_unary(path)(pb.EchoRequest().SerializeToString(), metadata=metadata,
                                           timeout=CALL_LIMIT)
            except grpc.RpcError as e:
                got = (status(e),)
                if got == ("UNAVAILABLE",) and attempt < 2 and retry:
                    time.sleep(0.2)
                    continue
                return got
            r = pb.EchoResponse.FromString(raw)
            xfcc = [m.value.decode(errors="replace") if isinstance(m.value, bytes) else m.value
                    for m in r.metadata if m.key == "x-forwarded-client-cert"]
            return ("OK", r.instance, r.client_cn, tuple(self.readable(x) for x in xfcc))
        return got

    def readable(self, xfcc):
        """The XFCC without this listener's own identity, the caller's
        certificate hash as the certificate's name."""
        xfcc = xfcc.replace("By=%s;" % SERVER, "")
        return re.sub(r"Hash=([0-9a-f]{64})", lambda m: "Hash=<%s>" % self.names.get(m.group(1), "?"), xfcc)

    # --- the probe set -------------------------------------------------------------
    @staticmethod
    def call_keys():
        keys = [("in", p, c) for p in INBOUND_PORTS for c in CALLERS]
        keys += [("svc", s, md) for s, md in SERVICE_PROBES]
        return keys

    def open_old(self):
        """Before the reload: a connection per call probe, used once under A.
        Returns {key: channel} for those whose connection came up (a call
        that got an HTTP/2 answer, whatever its status)."""
        old = {}
        for key in self.call_keys():
            ch = self.inbound_channel(key[1], key[2]) if key[0] == "in" else self.main_channel()
            got = self.call(ch, ECHO + "Unary" if key[0] == "in" else "/%s/Unary" % key[1],
                            key[2] if key[0] == "svc" else ())
            if got != ("UNAVAILABLE",):
                old[key] = ch
        return old

    def run_calls(self, channels, tag):
        seen = {}
        for key in self.call_keys():
            if tag == "old" and key not in channels:
                continue
            ch = channels.get(key) if channels else None
            if ch is None:
                ch = self.inbound_channel(key[1], key[2]) if key[0] == "in" else self.main_channel()
            path = ECHO + "Unary" if key[0] == "in" else "/%s/Unary" % key[1]
            seen[(tag,) + key] = self.call(ch, path, key[2] if key[0] == "svc" else (), retry=tag == "old")
        return seen

    def handshake(self, port, caller):
        """accepted / refused / closed: a new TLS connection to an inbound
        port offering `caller`'s certificate, then the HTTP/2 preface."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(self.w.ca.ca_file)
        ctx.set_alpn_protocols(["h2"])
        if caller != "none":
            ctx.load_cert_chain(*self.w.certs[caller])
        try:
            raw = socket.create_connection(("127.0.0.1", self.w.ports[port]), timeout=CALL_LIMIT)
        except ConnectionRefusedError:
            return "closed"
        try:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                # TLS 1.3: a refused client certificate shows on the first read.
                s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
                head = s.recv(9)
                return "accepted" if len(head) >= 4 and head[3] == 4 else "refused"
        except (ssl.SSLError, ConnectionError, OSError):
            return "refused"
        finally:
            raw.close()

    def run_handshakes(self):
        return {("tls", p, c): self.handshake(p, c) for p in INBOUND_PORTS for c in CALLERS}

    def burst(self):
        """Of BURST_CALLS calls sent at once to LIMITED on a new connection,
        how many were answered, by status. A count is a fact only if the
        burst fitted within one token's refill time: else the bucket is left
        to fill up and the burst sent again (bounded)."""
        ch = self.main_channel()
        grpc.channel_ready_future(ch).result(timeout=CALL_LIMIT)
        call = ch.unary_unary("/%s/Unary" % LIMITED)
        for attempt in range(4):
            t0 = time.monotonic()
            fs = [call.future(pb.EchoRequest().SerializeToString(), timeout=CALL_LIMIT) for _ in range(BURST_CALLS)]
            counts = {}
            for f in fs:
                try:
                    f.result()
                    code = "OK"
                except grpc.RpcError as e:
                    code = status(e)
                counts[code] = counts.get(code, 0) + 1
            if time.monotonic() - t0 < 0.5 / BURST_RATE:
                break
            time.sleep(4.0 / BURST_RATE)  # the bucket full again (burst <= 3)
        return tuple(sorted(counts.items()))

    def after(self, old):
        """Everything, after the reload (or in a fresh maitred)."""
        seen = {}
        seen.update(self.run_calls(old, "old"))
        seen.update(self.run_calls({}, "new"))
        seen.update(self.run_handshakes())
        seen[("limit", LIMITED)] = self.burst()
        return seen


# --- the driver ------------------------------------------------------------------

class Differs(AssertionError):
    """The reloaded maitred's probes differ from the fresh one's."""


def _raise(exc):
    raise exc


RESULT_LINE = re.compile(r"reload: .* applied \(|keeping the running config")


class ReloadDiff(MaitredTest):
    @classmethod
    def setUpClass(cls):
        cls.cadir = tempfile.mkdtemp(prefix="maitred-reload-diff-")
        cls.ca = MeshCA(os.path.join(cls.cadir, "mesh"))
        cls.other = MeshCA(os.path.join(cls.cadir, "other"), name="another CA")
        cls.certs = {
            "server": cls.ca.leaf("cart-server", uri=SERVER),
            "cart": cls.ca.leaf("cart", uri=CART),
            "pay": cls.ca.leaf("pay", uri=PAY),
            "stranger": cls.other.leaf("stranger", uri=CART),
        }

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.cadir, ignore_errors=True)

    def inbound_ports(self, w, cfg):
        return [int(e["listen"].rsplit(":", 1)[1]) for e in cfg.get("inbound", [])]

    def start_on(self, w, cfg):
        """A maitred on `cfg` with every listener up, or None when it exits
        before (the config is refused at start)."""
        m = self.start_maitred(cfg, check_exit=False, wait=False)

        def up_or_gone():
            if not m.proc.alive():
                return "gone"
            return port_accepts(m.port, 0.5) and all(port_accepts(p, 0.5) for p in self.inbound_ports(w, cfg))
        if wait_until(up_or_gone, START_LIMIT, "maitred to listen or exit") == "gone":
            m.proc.checked = True
            return None
        return m

    def rewrite(self, m, cfg):
        tmp = m.config_path + ".new"
        with open(tmp, "w") as f:
            f.write(to_yaml(cfg) + "\n")
        os.rename(tmp, m.config_path)

    def reload_to(self, m, cfg):
        """Rewrite the file, SIGHUP; "applied" or "refused" as the log says."""
        before = len(RESULT_LINE.findall(m.proc.output()))
        self.rewrite(m, cfg)
        m.proc.signal(signal.SIGHUP)
        wait_until(lambda: len(RESULT_LINE.findall(m.proc.output())) > before, CALL_LIMIT,
                   "the reload's result in the log")
        last = RESULT_LINE.findall(m.proc.output())[before]
        return "refused" if "keeping" in last else "applied"

    def stop(self, m):
        for ch in self._channels:
            ch.close()
        self._channels = []
        self.stop_maitred(m)

    def run_pair(self, pair):
        w = World(self)
        cfg_a, cfg_b = pair.a(w), pair.b(w)
        probes = Probes(self, w)

        # The reloaded maitred: A, connections opened, B.
        m = self.start_on(w, cfg_a)
        self.assertIsNotNone(m, "maitred does not start on A")
        old = probes.open_old()
        outcome = self.reload_to(m, cfg_b)
        got = {("reload",): outcome}
        got.update(probes.after(old))
        self.stop(m)

        # A fresh maitred on B; on A when B does not start (or the pair may
        # refuse and did).
        f = self.start_on(w, cfg_b)
        want_outcome = "applied" if f is not None else "refused"
        if pair.may_refuse and outcome == "refused" and f is not None:
            want_outcome = "refused"
            self.stop(f)
            f = None
        if f is None:
            f = self.start_on(w, cfg_a)
            self.assertIsNotNone(f, "maitred does not start on A")
        want = {("reload",): want_outcome}
        want.update(probes.after({k: None for k in old}))
        self.stop(f)
        for key, fact in pair.fresh.items() if want_outcome == "applied" or not pair.may_refuse else ():
            seen = want.get(key)
            if isinstance(fact, tuple) and isinstance(seen, tuple):
                seen = seen[:len(fact)]
            self.assertEqual(seen, fact, "%s: the fresh maitred's %s (a check of the probes)" % (pair.name, key))
        differ = ["  %s: reloaded %s, fresh %s" % (k, got.get(k, "-"), want.get(k, "-"))
                  for k in sorted(set(got) | set(want), key=repr) if got.get(k) != want.get(k)]
        if differ:
            raise Differs("%s: the reloaded maitred differs from a fresh one on %d of %d probes:\n%s"
                      % (pair.name, len(differ), len(want), "\n".join(differ)))


def _make_test(pair):
    @maitred_only
    def test(self):
        if pair.name not in KNOWN_DIFFERENT:
            self.run_pair(pair)
            return
        # Expected to fail by differing, and only so: anything else (maitred
        # not starting, a probe check, a sanitizer report) is raised again
        # from a cleanup, where expectedFailure does not take it for the
        # expected failure.
        try:
            self.run_pair(pair)
        except Differs as e:
            sys.stderr.write("\n%s (known: %s)\n" % (e, KNOWN_DIFFERENT[pair.name]))
            raise
        except BaseException as e:  # noqa: B036 (re-raised below)
            self.addCleanup(_raise, e)
    test.__name__ = "test_" + pair.name
    test.__doc__ = "%s: reloaded == fresh" % pair.name
    if pair.name in KNOWN_DIFFERENT:
        test = unittest.expectedFailure(test)
    return test


for _p in PAIRS:
    setattr(ReloadDiff, "test_" + _p.name, _make_test(_p))
del _p

unknown = set(KNOWN_DIFFERENT) - {p.name for p in PAIRS}
assert not unknown, "KNOWN_DIFFERENT names no pair: %s" % sorted(unknown)


if __name__ == "__main__":
    unittest.main()
