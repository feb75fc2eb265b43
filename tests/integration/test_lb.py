"""Load balancing through the real maitred over three upstream instances:
each policy's spread as the upstreams see it, header and message-field hash keys sticking to one instance and moving
only when their instance goes away, on_missing, per-method overrides, bounded
load, and the config errors for options a policy cannot use.

Tolerances are statistical bounds that a correct balancer breaks with
probability at most about 1e-6 per assertion (chi-square at p = 1e-6, or a
binomial tail), or exact where the policy is deterministic (one worker, calls
one after another). Tests with a slow upstream compare counts only, with a
margin of several times what the policy is expected to send; no assertion
depends on how long something took.
"""

import collections
import itertools
import json
import math
import os
import random
import re
import threading
import time
import unittest

import grpc

from harness import (MaitredTest, Proc, Upstream, maitred_only, pb, call_id, free_port,
                     wait_until, CALL_LIMIT, START_LIMIT, PYTHON, HERE)

SVC = "maitred.testing.v1.Echo"
USER = "x-user-id"

# Chi-square critical value at p = 1e-6 for 2 degrees of freedom (three
# instances): the survival function of chi2(2) is exp(-x/2).
CHI2_2DF_1E6 = -2.0 * math.log(1e-6)  # 27.63

# Upstream with a fixed extra latency per call (the harness's upstream.py,
# its delay hook wrapped): the "slow instance" of the load-aware policies.
# The request's delay_ms cannot do this: the client does not know which
# instance a call will reach.
SLOW_LAUNCHER = r"""
import sys
sys.path.insert(0, sys.argv.pop(1))
slow_s = int(sys.argv.pop(1)) / 1000.0
import upstream
_orig = upstream.EchoServicer._delay
def _slow_delay(self, call, req):
    if call.end_event.wait(slow_s):
        return False
    return _orig(self, call, req)
upstream.EchoServicer._delay = _slow_delay
sys.exit(upstream.main())
"""


def chi2(counts, expected):
    return sum((counts.get(k, 0) - e) ** 2 / e for k, e in expected.items())


def binom_cdf(n, p, k):
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


def binom_floor(n, p, tail=1e-6):
    """The largest L with P(Binomial(n, p) < L) <= tail."""
    L = 0
    while binom_cdf(n, p, L) <= tail:
        L += 1
    return L


def max_run(seq):
    return max(len(list(g)) for _, g in itertools.groupby(seq))


class LbTest(MaitredTest):
    """Helpers shared by the load-balancing tests."""

    def start_three(self, names=("a", "b", "c")):
        return [self.start_upstream(n) for n in names]

    def start_slow_upstream(self, name, slow_ms):
        """An upstream.py whose every Echo call first sleeps slow_ms (cut
        short when the call ends). Same bookkeeping as start_upstream."""
        self._n += 1
        ready = os.path.join(self.tmp, name + ".ready")
        argv = [PYTHON, "-c", SLOW_LAUNCHER, HERE, str(slow_ms), "--name", name, "--port", "0",
                "--ready-file", ready, "--grace", "5"]
        proc = Proc(name, argv, self.tmp)
        self._procs.append((proc, False))

        def ready_or_dead():
            if os.path.exists(ready):
                return True
            if not proc.alive():
                raise AssertionError("upstream %s exited with %s:\n%s" % (name, proc.p.returncode, proc.output()))
            return False
        wait_until(ready_or_dead, START_LIMIT, "upstream %s to be ready" % name)
        with open(ready) as f:
            info = json.load(f)
        up = Upstream(proc, info, None)
        self._upstreams.append(up)
        return up

    @staticmethod
    def svc(upstreams, policy, weights=None, name=SVC, lb=None, **extra):
        s = {"name": name, "lb": dict({"policy": policy}, **(lb or {}))}
        eps = []
        for i, u in enumerate(upstreams):
            e = {"address": u.address}
            if weights is not None:
                e["weight"] = weights[i]
            eps.append(e)
        s["endpoints"] = eps
        s.update(extra)
        return s

    def maitred_for(self, *services, **top):
        return self.start_maitred(self.config(list(services), **top))

    def totals(self, ups):
        return {u.name: u.stats().total for u in ups}

    def assert_upstreams_saw(self, ups, before, counts):
        """The upstreams' own Stats agree with what the responses said."""
        after = self.totals(ups)
        seen = {n: after[n] - before[n] for n in after}
        want = {u.name: counts.get(u.name, 0) for u in ups}
        self.assertEqual(seen, want, "upstream Stats disagree with the responses' instance")

    def unary_spread(self, stub, n, req=None, metadata=None):
        """n Unary calls one after another; the instance of each, in order."""
        req = req or pb.EchoRequest()
        return [stub.Unary(req, metadata=metadata, timeout=CALL_LIMIT).instance for _ in range(n)]

    def concurrent_spread(self, stub, n, threads, req=None):
        """n Unary calls from `threads` client threads sharing one channel,
        each thread one call after another. Returns (counts, errors)."""
        req = req or pb.EchoRequest()
        lock = threading.Lock()
        left = [n]
        counts = collections.Counter()
        errors = []

        def worker():
            while True:
                with lock:
                    if left[0] == 0 or errors:
                        return
                    left[0] -= 1
                try:
                    inst = stub.Unary(req, timeout=CALL_LIMIT).instance
                except grpc.RpcError as e:
                    with lock:
                        errors.append("%s: %s" % (e.code(), e.details()))
                    return
                with lock:
                    counts[inst] += 1
        ts = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
        for t in ts:
            t.start()
        limit = time.monotonic() + CALL_LIMIT * 4 + n * 0.5  # hang guard only
        for t in ts:
            t.join(max(0.1, limit - time.monotonic()))
        self.assertFalse(any(t.is_alive() for t in ts), "client threads still running (hang guard)")
        return counts, errors

    def started_on(self, ups, cid):
        """The upstream where call `cid` started (bounded wait)."""
        def where():
            for u in ups:
                if u.wait_call(cid, "STARTED", limit=0).started:
                    return u.name
            return None
        return wait_until(where, CALL_LIMIT, "call %s to reach an upstream" % cid)

    def hold_calls(self, stub, ups, n, metadata=None):
        """n held Unary calls issued one at a time, each after the previous
        one reached its upstream (so maitred counted it in flight). Returns
        (instances, futures, call ids); release with release_all."""
        insts, futs, cids = [], [], []
        for _ in range(n):
            cid = call_id()
            futs.append(stub.Unary.future(pb.EchoRequest(call_id=cid, hold=True),
                                          metadata=metadata, timeout=CALL_LIMIT * 4))
            cids.append(cid)
            insts.append(self.started_on(ups, cid))
        return insts, futs, cids

    def release_all(self, ups, futs, cids):
        for cid in cids:
            for u in ups:
                u.release(cid)
        for f in futs:
            self.assertTrue(f.result(timeout=CALL_LIMIT).instance)


# --- each policy's spread ------------------------------------------------------

class Spread(LbTest):
    """Three equal (or 1:2:3 / 5:1:1 weighted) instances, calls one after
    another over one channel, one maitred worker."""

    def setUp(self):
        super().setUp()
        self.ups = self.start_three()
        self.names = [u.name for u in self.ups]

    def run_policy(self, policy, n, weights=None, **lb):
        m = self.maitred_for(self.svc(self.ups, policy, weights, lb=lb))
        stub = self.echo(m)
        before = self.totals(self.ups)
        seq = self.unary_spread(stub, n)
        counts = collections.Counter(seq)
        self.assert_upstreams_saw(self.ups, before, counts)
        self.stop_maitred(m)
        return seq, counts

    @maitred_only
    def test_random_uniform(self):
        n = 600
        _, counts = self.run_policy("RANDOM", n)
        x = chi2(counts, {k: n / 3 for k in self.names})
        self.assertLess(x, CHI2_2DF_1E6, "RANDOM spread %r not uniform (chi2 %.1f)" % (dict(counts), x))

    @maitred_only
    def test_weighted_random_equal_weights_is_uniform(self):
        n = 600
        _, counts = self.run_policy("WEIGHTED_RANDOM", n)
        x = chi2(counts, {k: n / 3 for k in self.names})
        self.assertLess(x, CHI2_2DF_1E6, "WEIGHTED_RANDOM spread %r not uniform (chi2 %.1f)" % (dict(counts), x))

    @maitred_only
    def test_weighted_random_1_2_3(self):
        # A uniform picker would score chi2 = 133 here, far above the bound.
        n = 600
        _, counts = self.run_policy("WEIGHTED_RANDOM", n, weights=[100, 200, 300])
        want = {"a": n / 6, "b": n / 3, "c": n / 2}
        x = chi2(counts, want)
        self.assertLess(x, CHI2_2DF_1E6, "WEIGHTED_RANDOM 1:2:3 spread %r (chi2 %.1f)" % (dict(counts), x))

    @maitred_only
    def test_round_robin_exact_thirds(self):
        seq, counts = self.run_policy("ROUND_ROBIN", 300)
        self.assertEqual(dict(counts), {"a": 100, "b": 100, "c": 100})
        # A strict rotation: every three consecutive calls hit all three.
        for i in range(len(seq) - 2):
            self.assertEqual(len(set(seq[i:i + 3])), 3, "not a rotation at call %d: %r" % (i, seq[i:i + 6]))

    @maitred_only
    def test_round_robin_exact_across_workers(self):
        # One shared rotation for every worker thread: two workers, calls
        # taking turns over six client connections (SO_REUSEPORT spreads
        # them; all six on one worker has probability 1/32), still exact
        # thirds.
        m = self.start_maitred(self.config([self.svc(self.ups, "ROUND_ROBIN")], workers=2))
        stubs = [self.echo(m, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(6)]
        before = self.totals(self.ups)
        counts = collections.Counter(stubs[i % 6].Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance
                                     for i in range(300))
        self.assertEqual(dict(counts), {"a": 100, "b": 100, "c": 100})
        self.assert_upstreams_saw(self.ups, before, counts)
        self.stop_maitred(m)

    @maitred_only
    def test_weighted_round_robin_1_2_3_exact_and_interleaved(self):
        seq, counts = self.run_policy("WEIGHTED_ROUND_ROBIN", 600, weights=[100, 200, 300])
        self.assertEqual(dict(counts), {"a": 100, "b": 200, "c": 300})
        # One cycle is 6 turns: any 6 consecutive calls hold exactly 1:2:3.
        for i in range(len(seq) - 5):
            w = collections.Counter(seq[i:i + 6])
            self.assertEqual(dict(w), {"a": 1, "b": 2, "c": 3}, "window at call %d: %r" % (i, seq[i:i + 6]))
        # Interleaved, not bursty: nginx's smooth cycle c b a c b c repeated
        # has runs of at most 2 (a bursty c c c b b a has 3).
        self.assertLessEqual(max_run(seq), 2, "bursty: %r" % seq[:24])

    @maitred_only
    def test_smooth_weighted_round_robin_5_1_1_sequence(self):
        seq, counts = self.run_policy("SMOOTH_WEIGHTED_ROUND_ROBIN", 700, weights=[500, 100, 100])
        self.assertEqual(dict(counts), {"a": 500, "b": 100, "c": 100})
        # nginx: {5,1,1} gives a a b a c a a, over and over (fresh picker,
        # one worker, every call a success so no effective-weight cut).
        self.assertEqual(seq, list("aabacaa") * 100, "first 14: %r" % seq[:14])

    @maitred_only
    def test_warmup_inert_when_every_endpoint_is_new(self):
        # Static endpoints all start together: a warmup window changes
        # nothing, the 1:2:3 schedule stays exact (warmup is inert when
        # every endpoint is new, and never makes an endpoint unreachable).
        m = self.maitred_for(self.svc(self.ups, "WEIGHTED_ROUND_ROBIN", [100, 200, 300],
                                      warmup={"duration": "3600s", "curve": "SLOW_START"}))
        counts = collections.Counter(self.unary_spread(self.echo(m), 600))
        self.assertEqual(dict(counts), {"a": 100, "b": 200, "c": 300})
        self.stop_maitred(m)

    def check_hash_spread(self, policy, hash_key, key_req, **lb):
        """150 keys, two calls each: every key on exactly one instance, and
        the keys spread over all three."""
        m = self.maitred_for(self.svc(self.ups, policy, lb=lb, hash_key=hash_key))
        stub = self.echo(m)
        keys = ["user-%d" % i for i in range(150)]
        order = keys * 2
        random.Random(3).shuffle(order)
        where = collections.defaultdict(set)
        before = self.totals(self.ups)
        calls = collections.Counter()
        for k in order:
            req, md = key_req(k)
            inst = stub.Unary(req, metadata=md, timeout=CALL_LIMIT).instance
            where[k].add(inst)
            calls[inst] += 1
        self.assert_upstreams_saw(self.ups, before, calls)
        moved = {k: sorted(v) for k, v in where.items() if len(v) != 1}
        self.assertEqual(moved, {}, "%s: keys on more than one instance" % policy)
        per = collections.Counter(next(iter(v)) for v in where.values())
        # Each instance owns about a third of the ring/table; with a share
        # of at least 1/4, fewer than `floor` keys has probability < 1e-6.
        floor = binom_floor(len(keys), 0.25)
        for name in self.names:
            self.assertGreaterEqual(per[name], floor, "%s: keys per instance %r" % (policy, dict(per)))
        self.stop_maitred(m)

    @maitred_only
    def test_consistent_hash_keys_stick(self):
        self.check_hash_spread("CONSISTENT_HASH", {"header": USER},
                               lambda k: (pb.EchoRequest(), ((USER, k),)))

    @maitred_only
    def test_maglev_keys_stick(self):
        self.check_hash_spread("MAGLEV", {"field": "2"}, lambda k: (pb.EchoRequest(key=k), None))

    @maitred_only
    def test_consistent_hash_small_ring_field_key(self):
        # Options the policy does use are accepted and work: 40 points.
        self.check_hash_spread("CONSISTENT_HASH", {"field": "2"},
                               lambda k: (pb.EchoRequest(key=k), None), ring_points=40)

    @maitred_only
    def test_maglev_small_table_header_key(self):
        self.check_hash_spread("MAGLEV", {"header": USER},
                               lambda k: (pb.EchoRequest(), ((USER, k),)), table_size=251)

    @maitred_only
    def test_a_header_sent_twice_hashes_all_its_values(self):
        # Two fields of one name are one value joined by "," (RFC 9110):
        # the call hashes "k,x", never only its first value "k".
        m = self.maitred_for(self.svc(self.ups, "CONSISTENT_HASH", hash_key={"header": USER}))
        stub = self.echo(m)

        def where(*values):
            return stub.Unary(pb.EchoRequest(), metadata=tuple((USER, v) for v in values),
                              timeout=CALL_LIMIT).instance
        differs = 0
        for i in range(40):
            k = "user-%d" % i
            joined = where(k + ",extra")
            self.assertEqual(where(k, "extra"), joined, k)
            differs += where(k) != joined
        self.assertGreater(differs, 0, "no key moved: the test cannot tell the first value from the joined ones")
        self.stop_maitred(m)


# --- load-aware policies: one slow instance -----------------------------------

SLOW_MS = 150
N_LOADED = 300
THREADS = 6


class LoadAware(LbTest):
    """Two fast instances and one that adds SLOW_MS to every call. A
    load-blind policy sends the slow one a third (100 of 300); these
    policies must send it clearly less. The bound (slow < 1/6 of the calls,
    half its blind share) is several times what they send in practice (a
    few calls: bench/lb's simulation gives 0-1.6 %)."""

    def setUp(self):
        super().setUp()
        self.fast = [self.start_upstream("a"), self.start_upstream("b")]
        self.slow = self.start_slow_upstream("slow", SLOW_MS)
        self.ups = self.fast + [self.slow]

    def check_slow_gets_less(self, policy, counts, errors):
        self.assertEqual(errors, [], "%s: calls failed" % policy)
        self.assertEqual(sum(counts.values()), N_LOADED)
        self.assertLess(counts["slow"], N_LOADED / 6,
                        "%s sent the slow instance %r" % (policy, dict(counts)))
        for f in ("a", "b"):
            self.assertGreater(counts[f], 2 * counts["slow"], "%s spread %r" % (policy, dict(counts)))

    def run_loaded(self, policy, **lb):
        m = self.maitred_for(self.svc(self.ups, policy, lb=lb))
        stub = self.echo(m)
        before = self.totals(self.ups)
        counts, errors = self.concurrent_spread(stub, N_LOADED, THREADS)
        self.assert_upstreams_saw(self.ups, before, counts)
        self.check_slow_gets_less(policy, counts, errors)
        self.stop_maitred(m)
        return counts

    @maitred_only
    def test_least_active(self):
        self.run_loaded("LEAST_ACTIVE")

    @maitred_only
    def test_least_request(self):
        self.run_loaded("LEAST_REQUEST")

    @maitred_only
    def test_least_request_three_choices(self):
        self.run_loaded("LEAST_REQUEST", choice_count=3)

    @maitred_only
    def test_peak_ewma(self):
        self.run_loaded("PEAK_EWMA")

    @maitred_only
    def test_shortest_response(self):
        self.run_loaded("SHORTEST_RESPONSE")

    @maitred_only
    def test_weighted_response_time(self):
        # Ribbon semantics: round robin until the background recompute
        # (maitred ticks once a second) has latency data for every
        # instance; then weight ~ 1/latency. Warm-up: calls one after
        # another until every instance has answered a few and two ticks
        # have certainly passed; the judgement is on the counts after.
        m = self.maitred_for(self.svc(self.ups, "WEIGHTED_RESPONSE_TIME"))
        stub = self.echo(m)
        warm = collections.Counter()
        t0 = time.monotonic()
        for _ in range(2000):  # hang guard only
            warm[stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance] += 1
            if min(warm[u.name] for u in self.ups) >= 3 and time.monotonic() - t0 >= 2.5:
                break
        before = self.totals(self.ups)
        counts = collections.Counter(self.unary_spread(stub, N_LOADED))
        self.assert_upstreams_saw(self.ups, before, counts)
        self.check_slow_gets_less("WEIGHTED_RESPONSE_TIME", counts, [])
        self.stop_maitred(m)

    @maitred_only
    def test_round_robin_is_load_blind(self):
        # The control experiment: the same load under ROUND_ROBIN gives the
        # slow instance its full third, so the bound above means something.
        m = self.maitred_for(self.svc(self.ups, "ROUND_ROBIN"))
        counts, errors = self.concurrent_spread(self.echo(m), N_LOADED, THREADS)
        self.assertEqual(errors, [])
        self.assertEqual(dict(counts), {"a": 100, "b": 100, "slow": 100})
        self.stop_maitred(m)


class InFlight(LbTest):
    """Deterministic in-flight checks with held calls (Control.Release)."""

    def setUp(self):
        super().setUp()
        self.ups = self.start_three()

    @maitred_only
    def test_least_active_always_picks_a_minimum(self):
        m = self.maitred_for(self.svc(self.ups, "LEAST_ACTIVE"))
        stub = self.echo(m)
        insts, futs, cids = self.hold_calls(stub, self.ups, 6)
        # Each new call goes to an instance with the fewest in flight: the
        # first three to three different instances, the next three too.
        self.assertEqual(sorted(insts[:3]), ["a", "b", "c"], insts)
        self.assertEqual(sorted(insts[3:]), ["a", "b", "c"], insts)
        self.release_all(self.ups, futs, cids)
        self.stop_maitred(m)

    def check_bounded(self, policy):
        # Six held calls with one key. Unbounded they all land on the key's
        # instance; with bounded_load_factor 1.25 no instance may go past
        # ceil(1.25 x 6 / 3) = 3 in flight, and the key's own instance
        # still takes the first call and the most.
        for factor in (None, 1.25):
            lb = {"bounded_load_factor": factor} if factor else {}
            m = self.maitred_for(self.svc(self.ups, policy, lb=lb, hash_key={"header": USER}))
            stub = self.echo(m)
            insts, futs, cids = self.hold_calls(stub, self.ups, 6, metadata=((USER, "hot-user"),))
            per = collections.Counter(insts)
            if factor is None:
                self.assertEqual(len(per), 1, "%s unbounded: %r" % (policy, insts))
            else:
                self.assertLessEqual(max(per.values()), 3, "%s bounded 1.25: %r" % (policy, insts))
                self.assertGreaterEqual(len(per), 2, insts)
                self.assertEqual(per[insts[0]], max(per.values()), insts)
            self.release_all(self.ups, futs, cids)
            self.stop_maitred(m)

    @maitred_only
    def test_consistent_hash_bounded_load(self):
        self.check_bounded("CONSISTENT_HASH")

    @maitred_only
    def test_maglev_bounded_load(self):
        self.check_bounded("MAGLEV")


# --- stickiness across 1,000 calls, and when an instance goes away ----------

USERS = ["user-%02d" % i for i in range(20)]


class Stickiness(LbTest):
    def setUp(self):
        super().setUp()
        self.ups = self.start_three()

    def sticky_run(self, policy, hash_key, call, n_calls):
        """n_calls calls over the 20 users in shuffled order, through
        call(user) -> instance. Returns {user: instance}; fails if a user
        landed on two instances."""
        order = (USERS * (n_calls // len(USERS) + 1))[:n_calls]
        random.Random(policy + str(n_calls)).shuffle(order)
        where = collections.defaultdict(collections.Counter)
        for u in order:
            where[u][call(u)] += 1
        split = {u: dict(c) for u, c in where.items() if len(c) != 1}
        self.assertEqual(split, {}, "%s %r: users on more than one instance" % (policy, hash_key))
        return {u: next(iter(c)) for u, c in where.items()}

    def check_sticky_and_remap(self, policy, hash_key, make_call, extra=None):
        """make_call(stub) -> call(user) -> instance; extra(stub, home)
        runs more checks while all three instances are up."""
        m = self.maitred_for(self.svc(self.ups, policy, hash_key=hash_key))
        stub = self.echo(m)
        call = make_call(stub)
        before = self.totals(self.ups)
        home = self.sticky_run(policy, hash_key, call, 1000)
        self.assertEqual(sorted(home), USERS)
        per = collections.Counter(home.values())
        now = self.totals(self.ups)
        self.assertEqual(sum(now[n] - before[n] for n in now), 1000)
        if extra:
            extra(stub, home)

        # Stop the instance with the most users (at least 7 of 20) by PID.
        gone = max(self.ups, key=lambda u: (per[u.name], u.name))
        rc, killed = gone.proc.stop()
        self.assertFalse(killed)
        self.assertFalse(gone.proc.alive())
        left = [u.name for u in self.ups if u is not gone]

        # Every call still succeeds (a refused connect is retried on another
        # endpoint); users of the live instances stay; the others move to a
        # live instance and stick there.
        after = self.sticky_run(policy, hash_key, call, 400)
        stayed = {u: after[u] for u in USERS if home[u] != gone.name}
        self.assertEqual(stayed, {u: home[u] for u in stayed},
                         "%s: users of live instances moved when %s stopped" % (policy, gone.name))
        moved = {u: after[u] for u in USERS if home[u] == gone.name}
        self.assertGreaterEqual(len(moved), 7)
        for u, inst in moved.items():
            self.assertIn(inst, left, "%s: user %s still sent to the stopped instance" % (policy, u))

        # The instance comes back on the same address (a new process, named
        # differently so its log is its own): the endpoint's identity is its
        # address, so every user is back home, the others never moved.
        back = self.start_upstream(gone.name + "-back", port=gone.port)
        # maitred avoids an endpoint for a while after its connects failed
        # (a backoff of up to 10 s), so users come home once it retried:
        # wait (bounded) until one displaced user is served by it again.
        u0 = sorted(moved)[0]
        deadline = time.monotonic() + 3 * CALL_LIMIT
        while call(u0) != back.name and time.monotonic() < deadline:
            time.sleep(0.1)
        again = self.sticky_run(policy, hash_key, call, 200)
        want = {u: (back.name if h == gone.name else h) for u, h in home.items()}
        self.assertEqual(again, want, "%s: users not back home after %s restarted" % (policy, gone.name))
        self.stop_maitred(m)

    @staticmethod
    def header_call(stub):
        return lambda u: stub.Unary(pb.EchoRequest(), metadata=((USER, u),), timeout=CALL_LIMIT).instance

    @staticmethod
    def field_call(stub):
        return lambda u: stub.Unary(pb.EchoRequest(key=u), timeout=CALL_LIMIT).instance

    def streams_follow_key(self, stub, home):
        """ClientStream with the key in the first message, BidiStream too:
        each lands where the user's Unary calls do."""
        for u in USERS:
            msgs = [pb.EchoRequest(key=u, payload=b"x" * 10)] + [pb.EchoRequest(payload=b"y" * 100)] * 3
            r = stub.ClientStream(iter(msgs), timeout=CALL_LIMIT)
            self.assertEqual((u, r.instance), (u, home[u]), "ClientStream keyed by its first message")
            self.assertEqual(r.messages_received, 4)
            got = list(stub.BidiStream(iter([pb.EchoRequest(key=u), pb.EchoRequest()]), timeout=CALL_LIMIT))
            self.assertEqual(len(got), 2)
            self.assertEqual({(u, g.instance) for g in got}, {(u, home[u])}, "BidiStream keyed")

    @maitred_only
    def test_header_key_consistent_hash(self):
        self.check_sticky_and_remap("CONSISTENT_HASH", {"header": USER}, self.header_call)

    @maitred_only
    def test_header_key_maglev(self):
        self.check_sticky_and_remap("MAGLEV", {"header": USER}, self.header_call)

    @maitred_only
    def test_field_key_consistent_hash(self):
        self.check_sticky_and_remap("CONSISTENT_HASH", {"field": "2"}, self.field_call,
                                    extra=self.streams_follow_key)

    @maitred_only
    def test_field_key_maglev(self):
        self.check_sticky_and_remap("MAGLEV", {"field": "2"}, self.field_call,
                                    extra=self.streams_follow_key)


# --- a missing key ---------------------------------------------------------------

class MissingKey(LbTest):
    def setUp(self):
        super().setUp()
        self.ups = self.start_three()

    def raw(self, m, path, streaming=False):
        ch = self.channel(m)
        kw = dict(request_serializer=pb.EchoRequest.SerializeToString,
                  response_deserializer=pb.EchoResponse.FromString)
        return ch.stream_unary(path, **kw) if streaming else ch.unary_unary(path, **kw)

    @maitred_only
    def test_on_missing_fail_and_random(self):
        # Four services (the upstream answers Echo under any service name):
        # field and header keys, each with on_missing FAIL and RANDOM.
        svcs = [
            self.svc(self.ups, "CONSISTENT_HASH", name="lb.FieldFail",
                     hash_key={"field": "2", "on_missing": "FAIL"}),
            self.svc(self.ups, "MAGLEV", name="lb.FieldRandom",
                     hash_key={"field": "2", "on_missing": "RANDOM"}),
            self.svc(self.ups, "MAGLEV", name="lb.HeaderFail",
                     hash_key={"header": USER, "on_missing": "FAIL"}),
            self.svc(self.ups, "CONSISTENT_HASH", name="lb.HeaderRandom",
                     hash_key={"header": USER}),  # on_missing unset = RANDOM
        ]
        m = self.maitred_for(*svcs)
        before = self.totals(self.ups)

        # FAIL: INVALID_ARGUMENT, and no upstream ever sees the call.
        for path, streaming, req in [
                ("/lb.FieldFail/Unary", False, pb.EchoRequest(payload=b"no key")),
                ("/lb.FieldFail/Unary", False, pb.EchoRequest()),  # empty message
                # The key only in the second message: the first decides.
                ("/lb.FieldFail/ClientStream", True,
                 [pb.EchoRequest(payload=b"first"), pb.EchoRequest(key="late")]),
                ("/lb.HeaderFail/Unary", False, pb.EchoRequest(key="not-a-header")),
        ]:
            with self.subTest(path=path, req=str(req)):
                fn = self.raw(m, path, streaming)
                with self.assertRaises(grpc.RpcError) as cm:
                    fn(iter(req) if streaming else req, timeout=CALL_LIMIT)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, cm.exception.details())
        self.assertEqual(self.totals(self.ups), before, "a call without its key reached an upstream")

        # With the key present the FAIL services serve normally.
        r = self.raw(m, "/lb.FieldFail/Unary")(pb.EchoRequest(key="k"), timeout=CALL_LIMIT)
        self.assertEqual(r.key, "k")
        r = self.raw(m, "/lb.HeaderFail/Unary")(pb.EchoRequest(), metadata=((USER, "u"),), timeout=CALL_LIMIT)
        self.assertTrue(r.instance)

        # The field is read from at most the first 64 KiB of the first
        # message (README). Payload (field 1) precedes key (field 2) on the
        # wire: after 16 KiB the key is found, after 200 KiB it is beyond the
        # look-ahead and counts as absent. Either way the call never hangs.
        fail = self.raw(m, "/lb.FieldFail/Unary")
        home = fail(pb.EchoRequest(key="deep"), timeout=CALL_LIMIT).instance
        r = fail(pb.EchoRequest(payload=b"p" * 16384, key="deep"), timeout=CALL_LIMIT)
        self.assertEqual((r.instance, r.request_payload_size), (home, 16384))
        with self.assertRaises(grpc.RpcError) as cm:
            fail(pb.EchoRequest(payload=b"p" * 200000, key="deep"), timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, cm.exception.details())
        rnd = self.raw(m, "/lb.FieldRandom/Unary")
        r = rnd(pb.EchoRequest(payload=b"p" * 200000, key="deep"), timeout=CALL_LIMIT)
        self.assertEqual((r.key, r.request_payload_size), ("deep", 200000))

        # RANDOM: every keyless call succeeds, spread over the instances
        # (60 calls all on one instance: probability 3^-59).
        for path, req in (("/lb.FieldRandom/Unary", pb.EchoRequest(payload=b"no key")),
                          ("/lb.HeaderRandom/Unary", pb.EchoRequest(key="not-a-header"))):
            with self.subTest(path=path):
                fn = self.raw(m, path)
                seen = collections.Counter(fn(req, timeout=CALL_LIMIT).instance for _ in range(60))
                self.assertEqual(sum(seen.values()), 60)
                self.assertGreater(len(seen), 1, "keyless RANDOM calls all on one instance: %r" % dict(seen))
        self.stop_maitred(m)


# --- per-method override --------------------------------------------------------

class PerMethod(LbTest):
    @maitred_only
    def test_method_policies_differ_from_the_service(self):
        # Service: ROUND_ROBIN (weights ignored). Unary: CONSISTENT_HASH on
        # x-user-id. ClientStream: SMOOTH_WEIGHTED_ROUND_ROBIN, which uses
        # the endpoints' weights 5:1:1. ServerStream: the service's own.
        ups = self.start_three()
        svc = self.svc(ups, "ROUND_ROBIN", weights=[500, 100, 100], methods=[
            {"name": "Unary", "lb": {"policy": "CONSISTENT_HASH"}, "hash_key": {"header": USER}},
            {"name": "ClientStream", "lb": {"policy": "SMOOTH_WEIGHTED_ROUND_ROBIN"}},
        ])
        m = self.maitred_for(svc)
        stub = self.echo(m)
        md = ((USER, "one-user"),)
        before = self.totals(ups)

        unary = collections.Counter(stub.Unary(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT).instance
                                    for _ in range(90))
        self.assertEqual(len(unary), 1, "Unary (CONSISTENT_HASH) not sticky: %r" % dict(unary))

        server = collections.Counter(
            list(stub.ServerStream(pb.EchoRequest(), metadata=md, timeout=CALL_LIMIT))[0].instance
            for _ in range(90))
        self.assertEqual(dict(server), {"a": 30, "b": 30, "c": 30}, "ServerStream (service ROUND_ROBIN)")

        client = [stub.ClientStream(iter([pb.EchoRequest()]), metadata=md, timeout=CALL_LIMIT).instance
                  for _ in range(70)]
        self.assertEqual(client, list("aabacaa") * 10, "ClientStream (SMOOTH_WRR 5:1:1)")

        total = unary + server + collections.Counter(client)
        self.assert_upstreams_saw(ups, before, total)
        self.stop_maitred(m)


# --- config errors -----------------------------------------------------------------

ERR = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<path>[^:\s]+): (?P<msg>.+)$")

EP = '      - address: "127.0.0.1:1"\n      - address: "127.0.0.1:2"\n'


def cfg_text(service_body, endpoints=EP):
    return ('listen: "127.0.0.1:{port}"\nworkers: 1\nservices:\n  - name: "lb.Svc"\n'
            + service_body + "    endpoints:\n" + endpoints)


# (name, config text, field path the error must name, words the message must
# contain, the lines (first, last) the error may point at: the key, or the
# mapping it opens)
BAD = [
    ("hash_key on ROUND_ROBIN",
     cfg_text('    lb:\n      policy: ROUND_ROBIN\n    hash_key:\n      header: "x-user-id"\n'),
     "services[0].hash_key", ["ROUND_ROBIN"], (7, 8)),
    ("hash_key on a RANDOM method",
     cfg_text('    lb:\n      policy: RANDOM\n    methods:\n      - name: "Unary"\n'
              '        hash_key:\n          field: "2"\n'),
     "services[0].methods[0].hash_key", ["RANDOM"], (9, 10)),
    ("CONSISTENT_HASH without a hash_key",
     cfg_text('    lb:\n      policy: CONSISTENT_HASH\n'), "services[0].lb.policy", ["hash_key"], (5, 6)),
    ("MAGLEV method without a hash_key",
     cfg_text('    lb:\n      policy: ROUND_ROBIN\n    methods:\n      - name: "Get"\n'
              '        lb:\n          policy: MAGLEV\n'), "services[0].methods[0].lb.policy", ["hash_key"], (9, 10)),
    ("weights on RANDOM",
     cfg_text('    lb:\n      policy: RANDOM\n',
              '      - address: "127.0.0.1:1"\n      - address: "127.0.0.1:2"\n        weight: 300\n'),
     "services[0].endpoints[1].weight", ["RANDOM"], (10, 10)),
    ("weights on ROUND_ROBIN",
     cfg_text('    lb:\n      policy: ROUND_ROBIN\n',
              '      - address: "127.0.0.1:1"\n        weight: 5\n      - address: "127.0.0.1:2"\n'),
     "services[0].endpoints[0].weight", ["ROUND_ROBIN"], (9, 9)),
    ("warmup on ROUND_ROBIN",
     cfg_text('    lb:\n      policy: ROUND_ROBIN\n    warmup:\n      duration: "30s"\n'),
     "services[0].warmup", ["ROUND_ROBIN"], (7, 8)),
    ("ring_points on MAGLEV",
     cfg_text('    lb:\n      policy: MAGLEV\n      ring_points: 100\n    hash_key:\n      header: "x-k"\n'),
     "services[0].lb.ring_points", ["MAGLEV"], (7, 7)),
    ("table_size on CONSISTENT_HASH",
     cfg_text('    lb:\n      policy: CONSISTENT_HASH\n      table_size: 251\n    hash_key:\n      header: "x-k"\n'),
     "services[0].lb.table_size", ["CONSISTENT_HASH"], (7, 7)),
    ("bounded_load_factor on LEAST_ACTIVE",
     cfg_text('    lb:\n      policy: LEAST_ACTIVE\n      bounded_load_factor: 1.5\n'),
     "services[0].lb.bounded_load_factor", ["LEAST_ACTIVE"], (7, 7)),
    ("choice_count on PEAK_EWMA",
     cfg_text('    lb:\n      policy: PEAK_EWMA\n      choice_count: 3\n'),
     "services[0].lb.choice_count", ["PEAK_EWMA"], (7, 7)),
    ("decay on LEAST_REQUEST",
     cfg_text('    lb:\n      policy: LEAST_REQUEST\n      decay: "5s"\n'),
     "services[0].lb.decay", ["LEAST_REQUEST"], (7, 7)),
    ("choice_count on a method's ROUND_ROBIN",
     cfg_text('    lb:\n      policy: LEAST_REQUEST\n    methods:\n      - name: "Get"\n'
              '        lb:\n          policy: ROUND_ROBIN\n          choice_count: 3\n'),
     "services[0].methods[0].lb.choice_count", ["ROUND_ROBIN"], (11, 11)),
    ("bounded_load_factor not above 1",
     cfg_text('    lb:\n      policy: MAGLEV\n      bounded_load_factor: 1.0\n    hash_key:\n      header: "x-k"\n'),
     "services[0].lb.bounded_load_factor", [], (7, 7)),
    ("table_size not prime",
     cfg_text('    lb:\n      policy: MAGLEV\n      table_size: 1000\n    hash_key:\n      header: "x-k"\n'),
     "services[0].lb.table_size", ["prime"], (7, 7)),
    ("choice_count 1",
     cfg_text('    lb:\n      policy: LEAST_REQUEST\n      choice_count: 1\n'),
     "services[0].lb.choice_count", [], (7, 7)),
    ("hash_key with header and field",
     cfg_text('    lb:\n      policy: MAGLEV\n    hash_key:\n      header: "x-k"\n      field: "2"\n'),
     "services[0].hash_key", ["one"], (7, 9)),
    ("hash_key field path not numbers",
     cfg_text('    lb:\n      policy: MAGLEV\n    hash_key:\n      field: "key"\n'),
     "services[0].hash_key.field", ["key"], (8, 8)),
    ("hash_key field number 0",
     cfg_text('    lb:\n      policy: CONSISTENT_HASH\n    hash_key:\n      field: "2.0"\n'),
     "services[0].hash_key.field", ["2.0"], (8, 8)),
    ("hash_key pseudo-header",
     cfg_text('    lb:\n      policy: CONSISTENT_HASH\n    hash_key:\n      header: ":authority"\n'),
     "services[0].hash_key.header", [":authority"], (8, 8)),
]

GOOD = [
    ("every option on the policy that uses it",
     'listen: "127.0.0.1:{port}"\nworkers: 1\nservices:\n'
     '  - name: "lb.Hash"\n    lb:\n      policy: CONSISTENT_HASH\n      ring_points: 40\n'
     '      bounded_load_factor: 1.25\n    hash_key:\n      field: "2.1"\n      on_missing: FAIL\n'
     '    methods:\n      - name: "Get"\n        lb:\n          policy: MAGLEV\n          table_size: 251\n'
     '        hash_key:\n          header: "x-user-id"\n'
     '      - name: "List"\n        lb:\n          policy: LEAST_REQUEST\n          choice_count: 3\n'
     '          active_request_bias: 0.5\n'
     '    endpoints:\n      - address: "127.0.0.1:1"\n        weight: 300\n      - address: "127.0.0.1:2"\n'
     '  - name: "lb.Lat"\n    lb:\n      policy: PEAK_EWMA\n      decay: "3s"\n'
     '    warmup:\n      duration: "30s"\n      curve: SLOW_START\n'
     '    methods:\n      - name: "Get"\n        lb:\n          policy: WEIGHTED_RESPONSE_TIME\n'
     '          decay: "1s"\n'
     '    endpoints:\n      - address: "127.0.0.1:1"\n        weight: 50\n'),
    # A service hash_key used only by the one method that hashes.
    ("service hash_key used by a method",
     cfg_text('    lb:\n      policy: ROUND_ROBIN\n    hash_key:\n      header: "x-k"\n'
              '    methods:\n      - name: "Get"\n        lb:\n          policy: MAGLEV\n')),
]


class ConfigErrors(LbTest):
    def check(self, text):
        path = self.write_config(text.format(port=free_port()), name="lb.yaml")
        rc, out, err = self.run_maitred(["--check-config", path])
        return path, rc, err

    @maitred_only
    def test_options_a_policy_cannot_use_are_errors(self):
        for name, text, field, words, want_lines in BAD:
            with self.subTest(name):
                path, rc, err = self.check(text)
                self.assertEqual(rc, 1, "exit %s; stderr:\n%s" % (rc, err))
                hits = [mm for mm in (ERR.match(ln) for ln in err.splitlines()) if mm and mm.group("file") == path]
                self.assertTrue(hits, "no FILE:LINE:COL: field: message line in:\n%s" % err)
                paths = [h.group("path") for h in hits]
                self.assertIn(field, paths, err)
                h = hits[paths.index(field)]
                for w in words:
                    self.assertIn(w, h.group("msg"), err)
                lo, hi = want_lines
                self.assertTrue(lo <= int(h.group("line")) <= hi,
                                "error points at line %s, want %s..%s:\n%s" % (h.group("line"), lo, hi, err))
                self.assertGreaterEqual(int(h.group("col")), 1)

    @maitred_only
    def test_options_on_the_right_policy_check_fine(self):
        for name, text in GOOD:
            with self.subTest(name):
                path, rc, err = self.check(text)
                self.assertEqual(rc, 0, err)


if __name__ == "__main__":
    unittest.main()
