"""Attacks on typed identities, the registry's allowed_identities and the
upstream TLS policy generations: odd SANs never meet a principal they do
not spell; a reload that narrows allowed_identities drops the refused
endpoint at once (etcd up or down) and drains its connections; rapid TLS
policy toggles under load lose no call and leave no connection behind;
max_connection_age lets a long server stream finish; a mirror copy's
:authority is marked -shadow even when the mirror entry overrides it;
a guard's cut ends when the split's metadata_key changes.

Real maitreds, grpcio apps and callers, certificates made with openssl;
every wait is a bounded loop whose limit is a hang guard."""

import copy
import shutil
import subprocess
import threading
import unittest

import grpc

from harness import MaitredTest, maitred_only, needs_h2, pb, wait_until, CALL_LIMIT, call_id
from test_churn import ChurnBase
import test_identity
from test_identity import leaf_with
from test_inbound import Mesh, NS, CART, SERVER
import test_policy
import test_upstream_policy


def established_to(port):
    """How many established TCP connections go to 127.0.0.1:port."""
    out = subprocess.run(["ss", "-Htn", "state", "established", "dst", "127.0.0.1:%d" % port],
                         capture_output=True, text=True, check=True).stdout
    return len([l for l in out.splitlines() if l.strip()])


class OddSans(Mesh):
    def outcome(self, stub):
        try:
            return stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance
        except grpc.RpcError as e:
            return e.code()

    @maitred_only
    def test_odd_sans_never_meet_a_principal_they_do_not_spell(self):
        app = self.start_upstream("app")
        b, addr = self.start_server_side(app, {"rules": [{"principals": [CART, "dns:cart.shop.svc"]}]})
        odd = {
            "upper-scheme": ["URI:SPIFFE://cluster.local/ns/shop/sa/cart"],
            "percent": ["URI:spiffe://cluster.local/ns/shop/sa/c%61rt"],
            "trailing-slash": ["URI:" + CART + "/"],
            "dns-trailing-dot": ["DNS:cart.shop.svc."],
            "dns-wildcard": ["DNS:*.shop.svc"],
            "uri-and-dns": ["URI:" + NS + "other", "DNS:cart.shop.svc"],
            "dns-scheme-uri": ["URI:dns:cart.shop.svc"],
            "dotdot": ["URI:" + NS + "cart/../../../admin"],
        }
        got = {}
        for name, sans in odd.items():
            cert, key = leaf_with(self.ca, name, sans + ["IP:127.0.0.1"])
            got[name] = self.outcome(self.direct(addr, cert, key))
        for name in odd:
            self.assertEqual(got[name], grpc.StatusCode.PERMISSION_DENIED, name)
        self.assert_app_never_saw(app)


@unittest.skipUnless(shutil.which("etcd"), "etcd not installed (Debian: etcd-server)")
class RegistryReload(Mesh, ChurnBase):
    PREFIX = test_identity.RegistryIdentities.PREFIX
    client_side = test_identity.RegistryIdentities.client_side
    registered = test_identity.RegistryIdentities.registered
    call = test_identity.RegistryIdentities.call

    def both_registered(self):
        """etcd with two registered instances behind B-side listeners: good
        (SERVER's identity) and an impostor (NS + "impostor"); A allows
        NS + "*" and is seen to reach both. Returns (etcd, good_app,
        bad_app, the impostor listener's address, A, A's config as a fresh
        maitred would be given it, a stub on A)."""
        from test_etcd import Etcd
        etcd = Etcd(self)
        good_app, bad_app = self.start_upstream("good"), self.start_upstream("impostor")
        imp_cert, imp_key = self.ca.leaf("impostor", uri=NS + "impostor")
        self.registered(etcd, good_app, self.server_cert, self.server_key)
        _, addr2, _ = self.registered(etcd, bad_app, imp_cert, imp_key)
        a = self.client_side(etcd, allowed=[NS + "*"])
        # What a reload into cfg must do: what a fresh maitred on cfg does.
        cfg = self.config([{"name": "*", "tls": {
            "ca_file": self.ca.ca_file, "cert_file": self.client_cert, "key_file": self.client_key,
            "server_identity": "FROM_REGISTRY", "allowed_identities": [NS + "*"]},
            "discovery": {"etcd": {"endpoints": [etcd.address], "prefix": self.PREFIX}}}])
        cfg["listen"] = a.address
        stub = self.echo(a)
        seen = set()
        for _ in range(200):
            resp = self.call(stub)
            if resp is not None:
                seen.add(resp.instance)
            if seen == {"good", "impostor"}:
                break
        self.assertEqual(seen, {"good", "impostor"})
        return etcd, good_app, bad_app, addr2, a, cfg, stub

    @maitred_only
    def test_a_reload_narrowing_allowed_identities_drains_the_refused_endpoint(self):
        etcd, good_app, bad_app, addr2, a, cfg, stub = self.both_registered()
        port2 = int(addr2.rsplit(":", 1)[1])
        # A call held at the impostor, in flight across the reload.
        held = None
        for _ in range(50):
            cid = call_id()
            fut = stub.Unary.future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT)
            st = None
            try:
                st = wait_until(lambda: self._at(bad_app, good_app, cid), CALL_LIMIT, "the held call")
            except AssertionError:
                pass
            if st == "impostor":
                held = (fut, cid)
                break
            good_app.release(cid)
            fut.result()
        self.assertIsNotNone(held)
        self.assertGreater(established_to(port2), 0)
        cfg["services"][0]["tls"]["allowed_identities"] = [SERVER]
        self.reload(a, cfg)
        wait_until(lambda: "record refused: its identity matches none" in a.proc.output(), CALL_LIMIT,
                   "the refusal")
        before = bad_app.stats().total
        got = []
        for _ in range(40):
            resp = self.call(stub)
            got.append(resp.instance if resp else None)
        self.assertEqual(set(got), {"good"})
        self.assertEqual(bad_app.stats().total, before)
        # The call in flight at the impostor finished there.
        bad_app.release(held[1])
        self.assertEqual(held[0].result(timeout=CALL_LIMIT).instance, "impostor")
        wait_until(lambda: established_to(port2) == 0, CALL_LIMIT, "A's connections to the impostor to close")

    @maitred_only
    def test_a_reload_narrowing_allowed_identities_while_etcd_is_down(self):
        # The kept endpoint set (etcd unreachable: the last list stands)
        # must still pass the new allowed_identities: a fresh maitred on
        # the new config would never route to the impostor.
        etcd, good_app, bad_app, addr2, a, cfg, stub = self.both_registered()
        port2 = int(addr2.rsplit(":", 1)[1])
        etcd.stop()
        cfg["services"][0]["tls"]["allowed_identities"] = [SERVER]
        self.reload(a, cfg)
        before = bad_app.stats().total
        got = []
        for _ in range(40):
            try:
                got.append(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance)
            except grpc.RpcError as e:
                got.append(e.code())
        self.assertEqual(bad_app.stats().total, before,
                         "the impostor, refused by the new allowed_identities, still got calls: %s" % got)
        self.assertEqual(set(got), {"good"})
        wait_until(lambda: "endpoint %s dropped: its identity matches none of tls.allowed_identities" % addr2
                   in a.proc.output(), CALL_LIMIT, "the warning naming the dropped endpoint")
        wait_until(lambda: established_to(port2) == 0, CALL_LIMIT, "A's connections to the impostor to close")

    def _at(self, bad, good, cid):
        for name, up in (("impostor", bad), ("good", good)):
            try:
                if up.wait_call(cid, "STARTED", 0.2).started:
                    return name
            except Exception:
                pass
        return None


class PolicyToggle(ChurnBase):
    """Upstream TLS policy generations under churn (the helpers of
    test_upstream_policy, not its tests)."""
    setUpClass = classmethod(test_upstream_policy.UpstreamTlsPolicy.setUpClass.__func__)
    tearDownClass = classmethod(test_upstream_policy.UpstreamTlsPolicy.tearDownClass.__func__)
    call = test_upstream_policy.UpstreamTlsPolicy.call
    hold = test_upstream_policy.UpstreamTlsPolicy.hold
    @maitred_only
    def test_rapid_policy_toggles_lose_no_call_and_leak_no_connection(self):
        up = self.start_upstream("secure", tls=self.ca)
        port_up = int(up.address.rsplit(":", 1)[1])
        t1 = {"ca_file": self.ca.ca_file, "server_name": "echo.test"}
        t2 = {"ca_file": self.ca.ca_file}
        a = self.config([self.service("*", [up], tls=t1)], workers=2)
        port = int(a["listen"].rsplit(":", 1)[1])
        m = self.start_maitred(a)
        self.assertIsNone(self.call(m)[1])
        stop = threading.Event()
        errors, done = [], [0]

        def load():
            stub = self.echo(m)
            while not stop.is_set():
                try:
                    stub.Unary(pb.EchoRequest(delay_ms=20), timeout=CALL_LIMIT)
                    done[0] += 1
                except grpc.RpcError as e:
                    errors.append((e.code(), e.details()))
        threads = [threading.Thread(target=load) for _ in range(6)]
        for t in threads:
            t.start()
        try:
            held = []
            for i in range(16):
                held.append(self.hold(m, up))
                cfg = self.config([self.service("*", [up], tls=t2 if i % 2 == 0 else t1)], port=port, workers=2)
                self.reload(m, cfg)
            for fut, cid in held:
                up.release(cid)
            for fut, cid in held:
                self.assertEqual(fut.result(timeout=CALL_LIMIT).instance, "secure")
        finally:
            stop.set()
            for t in threads:
                t.join(CALL_LIMIT)
        self.assertEqual(errors, [])
        wait_until(lambda: established_to(port_up) <= 2, CALL_LIMIT,
                   "the drained connections to close (%d open)" % established_to(port_up))
        self.stop_maitred(m)

    @maitred_only
    def test_max_connection_age_lets_a_long_server_stream_finish(self):
        up = self.start_upstream("aged")
        m = self.start_maitred(self.config([self.service("*", [up], upstream={"max_connection_age": "1s"})]))
        self.assertIsNone(self.call(m)[1])
        got = [r.instance for r in self.echo(m).ServerStream(
            pb.EchoRequest(response_count=25, delay_ms=200), timeout=CALL_LIMIT)]
        self.assertEqual(len(got), 25)
        port_up = int(up.address.rsplit(":", 1)[1])
        self.assertIsNone(self.call(m)[1])
        wait_until(lambda: established_to(port_up) <= 1, CALL_LIMIT, "the aged connection to close")
        self.stop_maitred(m)


class MirrorAuthority(MaitredTest):
    """A copy's :authority host says it is one (-shadow), whatever the
    mirror entry's own `authority` makes of it."""

    def copy_authority(self, **shadow_extra):
        import h2raw
        primary = self.start_upstream("primary")
        raw = h2raw.H2Upstream(lambda path, headers: (
            "respond", pb.EchoResponse(instance="raw").SerializeToString()))
        self.addCleanup(raw.close)
        svcs = [self.service("*", [primary], mirror={"service": "shadow"}),
                self.service("shadow", [raw.address], **shadow_extra)]
        m = self.start_maitred(self.config(svcs))
        self.assertEqual(self.echo(m).Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "primary")
        rec = raw.wait_request()
        self.assertIsNotNone(rec, "the copy never reached the mirror")
        return dict(rec["headers"]).get(":authority"), m

    @maitred_only
    @needs_h2
    def test_the_apps_authority_is_suffixed(self):
        got, m = self.copy_authority()
        host, port = m.address.rsplit(":", 1)
        self.assertEqual(got, "%s-shadow:%s" % (host, port))

    @maitred_only
    @needs_h2
    def test_an_authority_override_is_suffixed_too(self):
        got, _ = self.copy_authority(authority="shadow.internal:443")
        self.assertEqual(got, "shadow.internal-shadow:443")

    @maitred_only
    @needs_h2
    def test_from_endpoint_is_suffixed_too(self):
        got, _ = self.copy_authority(authority="FROM_ENDPOINT")
        self.assertRegex(got, r"^127\.0\.0\.1-shadow:\d+$")


class GuardCutAcrossReload(MaitredTest):
    """A guard's cut lasts while the split block is the same by value; its
    metadata_key is part of it (under another key a value names other
    endpoints)."""
    start = test_policy.Policy.start
    metrics = test_policy.Policy.metrics
    rewrite = test_policy.Policy.rewrite
    applied = test_policy.Policy.applied
    reload = test_policy.Policy.reload
    many = test_policy.Policy.many

    def v2_weight(self):
        return test_policy.value(self.metrics(), "maitred_split_weight", service=test_policy.SVC, method="*",
                                 group="v2")

    @maitred_only
    def test_a_changed_metadata_key_lifts_the_cut(self):
        a, b = self.start_upstream("v1-a"), self.start_upstream("v1-b")
        c = self.start_upstream("v2", extra_args=["--fail-status", "14", "--fail-every", "1"])
        svc = self.service(test_policy.SVC, [a, b, c], split={
            "metadata_key": "version", "weights": {"v1": 50, "v2": 50},
            "guard": {"min_calls": 20, "window": "2s"}})
        for ep, v in zip(svc["endpoints"], ("v1", "v1", "v2")):
            ep["metadata"] = {"version": v, "track": v}
        m = self.start([svc])
        stub = self.echo(m)
        # Batches until the guard cut v2. The guard looks once a second:
        # bounded by time (a hang guard), not by a count of batches, which
        # a fast run finished in 2 s, before the guard's first look.
        wait_until(lambda: self.many(stub, 40) and self.v2_weight() == 0, CALL_LIMIT, "the guard to cut v2")
        cfg = copy.deepcopy(self.cfg)
        cfg["services"][0]["split"]["metadata_key"] = "track"
        self.reload(m, cfg)
        # A fresh maitred on cfg gives v2 its 50.
        self.assertEqual(self.v2_weight(), 50, "the cut outlived a change of split.metadata_key")
        self.assertIn("split.guard's cut of v2 lifted: the split changed", m.proc.output())


if __name__ == "__main__":
    unittest.main()
