"""Reload churn and the call-engine defects it exposes (issue 15).

Endpoints that accept TCP and never answer HTTP/2 (`Blackhole`: a plain
socket listener that accepts and reads, and never writes a byte) keep calls
waiting in their pools for a connection's SETTINGS; reloads then swap the
endpoint sets under them. Each test here proves one defect of issue 15 and
fails on the code the issue was filed against:

  1. reloads while calls wait on such endpoints: heap-use-after-free in
     mtd_call_reroute (the attempt mtd_attempt_cancel freed is read again);
  2. a reload that turns circuit_breaker.max_pending on while calls wait:
     the calls' exits subtract what was never added, the count wraps, and
     every later call is refused RESOURCE_EXHAUSTED;
  3. FORKING: a request that outgrows fault.replay_buffer after the newest
     fork failed commits to no attempt, cancels the one streaming, and the
     call hangs (until its deadline, or forever without one);
  4. FAILBACK: a queued re-send keeps a pointer into the config of its
     service; a reload removing the service frees it and the re-send reads
     it; and (found by this file, beside the issue's list) a re-send that
     found no route keeps the runtime it took with no service, so its next
     re-send picks with call->svc NULL;
  5. the churn the issue asks for: 20 s of SIGHUPs every 150 ms swapping
     endpoint sets of real and never-answering instances under FAILOVER
     and FORKING load with 2 s deadlines.

Deadlines are measured client-side by a raw HTTP/2 client (h2raw.H2Client)
that sends grpc-timeout and never enforces it itself, so the time a call
takes is maitred's doing. The one timing bound a test judges by is the
issue's "no call outlives its deadline by more than 1 s" (CHURN_MARGIN,
scaled by harness.SLOW under MAITRED_WRAP); every other wait is a bounded
hang guard.
"""

import os
import re
import select
import signal
import socket
import threading
import time
import unittest
import urllib.request

import grpc

import harness
from harness import MaitredTest, maitred_only, needs_h2, free_port, pb, call_id, wait_until, CALL_LIMIT, SLOW

SVC = "maitred.testing.v1.Echo"
UNAVAILABLE = 14
# The issue's bound: a call ends at most this long after its deadline.
CHURN_MARGIN = float(os.environ.get("MAITRED_CHURN_MARGIN") or 1.0) * SLOW


class Blackhole:
    """A TCP listener on 127.0.0.1 that accepts every connection and reads
    whatever arrives, and never writes: to maitred an upstream whose
    connection never gets the server's SETTINGS (HTTP/2 never answers).
    Runs in a thread of the test process; close() stops it (bounded)."""

    def __init__(self):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(128)
        self.lsock.setblocking(False)
        self.port = self.lsock.getsockname()[1]
        self.address = "127.0.0.1:%d" % self.port
        self.accepted = 0
        self.bytes_read = 0
        self.socks = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                r, _, _ = select.select([self.lsock] + self.socks, [], [], 0.1)
            except (OSError, ValueError):
                r = []
                self.socks = [s for s in self.socks if s.fileno() >= 0]
            for s in r:
                if s is self.lsock:
                    try:
                        c, _ = self.lsock.accept()
                    except OSError:
                        continue
                    c.setblocking(False)
                    self.socks.append(c)
                    self.accepted += 1
                    continue
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    self.bytes_read += len(data)
                else:
                    s.close()
                    self.socks.remove(s)

    def close(self):
        self.stop.set()
        self.thread.join(5)
        for s in self.socks + [self.lsock]:
            try:
                s.close()
            except OSError:
                pass


def admin_metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=CALL_LIMIT) as r:
        return r.read().decode()


def metric_sum(text, name, **labels):
    """The sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        m = re.match(r"^(\w+)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def summary(fails):
    """'N failed: MESSAGE (xK), ...' for a list of failure strings, '' for none."""
    if not fails:
        return ""
    counts = {}
    for f in fails:
        counts[f] = counts.get(f, 0) + 1
    return "%d failed: %s" % (len(fails), "; ".join("%s (x%d)" % (f, n) for f, n in counts.items()))


class RawCalls:
    """Unary calls over raw HTTP/2 connections (h2raw.H2Client), each with
    grpc-timeout `deadline` s that the client never enforces itself: how
    long each call took is maitred's doing. `threads` threads, one
    connection each, one call at a time on it; each call's outcome goes to
    .results as (path, seconds, outcome), the outcome a grpc-status
    ("0".."16"), "reset:CODE", or "open" when the hang guard ran out or
    the connection went."""

    def __init__(self, port, paths, deadline, threads=2, request=None, limit=None, pause=0.0):
        import h2raw
        self.h2raw = h2raw
        self.port = port
        self.paths = paths
        self.deadline = deadline
        self.timeout_header = "%dm" % int(deadline * 1000)
        self.request = request if request is not None else h2raw.echo_request()
        self.limit = limit or max(CALL_LIMIT, deadline + 20 * SLOW)
        self.pause = pause
        self.lock = threading.Lock()
        self.results = []
        self.errors = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, i):
        try:
            c = self.h2raw.H2Client(self.port)
        except OSError as e:
            with self.lock:
                self.errors.append("connect: %s" % e)
            return
        n = 0
        try:
            while not self.stop.is_set() and not c.closed:
                path = self.paths[(i + n) % len(self.paths)]
                n += 1
                t0 = time.monotonic()
                sid = c.call(path, [self.request], timeout_header=self.timeout_header)
                st = c.wait(sid, self.limit)
                dt = time.monotonic() - t0
                sh = st.status_headers()
                if sh is not None and sh.get("grpc-status") is not None:
                    outcome = sh["grpc-status"]
                elif st.reset_code() is not None:
                    outcome = "reset:%s" % st.reset_code()
                else:
                    outcome = "open"
                with self.lock:
                    self.results.append((path, dt, outcome))
                if outcome == "open":
                    return  # hung, or maitred went: the test reports it
                if self.pause:
                    self.stop.wait(self.pause)
        except Exception as e:  # noqa: BLE001 (the test reports it)
            with self.lock:
                self.errors.append(repr(e))
        finally:
            c.close()

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(self.limit + 10)
        return [t for t in self.threads if t.is_alive()]

    def count(self):
        with self.lock:
            return len(self.results)

    def late(self, margin):
        """The calls that took longer than deadline + margin, or never ended."""
        with self.lock:
            return [r for r in self.results if r[2] == "open" or r[1] > self.deadline + margin]

    def slowest(self):
        with self.lock:
            return max((r[1] for r in self.results), default=0.0)

    def by_outcome(self):
        out = {}
        with self.lock:
            for p, _, o in self.results:
                k = (p.split("/")[1], o)
                out[k] = out.get(k, 0) + 1
        return out


class ChurnBase(MaitredTest):
    def blackhole(self):
        b = Blackhole()
        self.addCleanup(b.close)
        return b

    def rewrite(self, m, cfg):
        """Replace the config file the way config tools do (write aside,
        rename)."""
        tmp = m.config_path + ".new"
        with open(tmp, "w") as f:
            f.write(harness.to_yaml(cfg) + "\n")
        os.rename(tmp, m.config_path)

    def applied(self, m):
        return len(re.findall(r"reload: .* applied", m.proc.output()))

    def reload(self, m, cfg):
        """Rewrite, SIGHUP, and wait (bounded) until the reload applied."""
        n = self.applied(m)
        self.rewrite(m, cfg)
        m.proc.signal(signal.SIGHUP)

        def done():
            if not m.proc.alive():
                raise AssertionError("maitred exited %s during a reload:\n%s"
                                     % (harness.exit_text(m.proc.p.returncode),
                                        "\n".join(self.report_head(m)) or m.proc.output()[-4000:]))
            return self.applied(m) > n
        wait_until(done, CALL_LIMIT, "reload %d to apply" % (n + 1))

    def assert_alive(self, m, what):
        if not m.proc.alive() or m.proc.sanitizer_report():
            report = m.proc.sanitizer_report()
            self.fail("%s: maitred %s%s" % (
                what, "exited %s" % harness.exit_text(m.proc.p.returncode) if not m.proc.alive() else "is up",
                (" with a sanitizer report:\n" + "\n".join(self.report_head(m))) if report else ""))

    @staticmethod
    def report_head(m, n=24):
        """The sanitizer report in maitred's log, shortened: its error
        line, its stack frames (the access, then where the memory was
        freed and allocated) and its summary."""
        out = m.proc.output().splitlines()
        for i, line in enumerate(out):
            if any(mark in line for mark in harness.SANITIZER_MARKS):
                rest = [ln for ln in out[i + 1:] if re.match(r"^\s+#\d+ ", ln) or ln.startswith(
                    ("SUMMARY:", "freed by", "previously allocated", "READ of", "WRITE of"))
                    or "runtime error:" in ln]
                return [line] + rest[:n]
        return []

    def serves(self, m, path_services, n=20):
        """n unary calls to each service (grpcio) succeed."""
        ch = self.channel(m)
        for svc in path_services:
            call = ch.unary_unary("/%s/Unary" % svc, request_serializer=pb.EchoRequest.SerializeToString,
                                  response_deserializer=pb.EchoResponse.FromString)
            fails = []
            for _ in range(n):
                try:
                    call(pb.EchoRequest(payload=b"after"), timeout=CALL_LIMIT)
                except grpc.RpcError as e:
                    fails.append("%s: %s" % (e.code(), e.details()))
            self.assertEqual(summary(fails), "", "calls to %s after the reloads" % svc)


@maitred_only
@needs_h2
class ReloadWhileWaiting(ChurnBase):
    def test_reloads_while_calls_wait_on_a_silent_endpoint(self):
        """Issue 15 defect 1: calls wait in pools of endpoints that never
        answer HTTP/2 (FORKING with two forks, and FAILOVER), and reloads
        swap the endpoint set under them, each reload moving the waiting
        calls to the new set. On the code of the issue: heap-use-after-free
        in mtd_call_reroute (call.c: the attempt mtd_attempt_cancel freed,
        read for the failure message) from mtd_pool_retire <- take_runtime."""
        sets = [[self.blackhole(), self.blackhole()], [self.blackhole(), self.blackhole()]]
        real = self.start_upstream("real")

        def cfg(eps, port=None):
            up = {"connect_timeout": "30s"}  # the calls wait; no connect failure moves them
            return self.config([
                self.service("churn.Forking", eps, fault={"mode": "FORKING", "forks": 2}, upstream=up),
                self.service("churn.Failover", eps, fault={"mode": "FAILOVER"}, upstream=up),
            ], port=port)
        first = cfg(sets[0])
        port = int(first["listen"].rsplit(":", 1)[1])
        m = self.start_maitred(first)
        deadline = 3.0
        load = RawCalls(m.port, ["/churn.Forking/Unary", "/churn.Failover/Unary"], deadline, threads=4).start()
        try:
            wait_until(lambda: all(b.accepted for b in sets[0]), CALL_LIMIT,
                       "maitred to connect to the silent endpoints")
            reloads = 0
            for i in range(12):
                new_set = sets[(i + 1) % 2]
                before = sum(b.accepted for b in new_set)
                self.reload(m, cfg(new_set, port))
                reloads += 1
                # The waiting calls went to the new set: its endpoints
                # get connections (the old set's pools were retired, so a
                # set that comes back is connected to afresh).
                wait_until(lambda: sum(b.accepted for b in new_set) > before, CALL_LIMIT,
                           "the calls waiting to move to the new endpoint set (reload %d)" % reloads)
        finally:
            hung = load.finish()
        self.assert_alive(m, "after %d reloads with calls waiting" % reloads)
        self.assertEqual(hung, [], "client threads still waiting for calls (hang guard)")
        self.assertEqual(load.errors, [])
        outcomes = load.by_outcome()
        self.assertGreater(load.count(), 0)
        # No endpoint ever answers: a FAILOVER call waits, moved from set to
        # set, until its deadline. A FORKING call moved once already whose
        # other fork still waits on the first set ends UNAVAILABLE ("left
        # service") at the second move; nothing else.
        self.assertEqual({o for (svc, o) in outcomes if svc == "churn.Failover"}, {"4"},
                         "FAILOVER calls waiting through reloads: %s" % outcomes)
        self.assertLessEqual({o for (svc, o) in outcomes if svc == "churn.Forking"}, {"4", "14"},
                             "FORKING calls waiting through reloads: %s" % outcomes)
        self.assertEqual(load.late(CHURN_MARGIN), [],
                         "calls that outlived their %.1f s deadline by more than %.1f s" % (deadline, CHURN_MARGIN))
        # And a healthy upstream serves both services afterwards.
        self.reload(m, cfg([real], port))
        self.serves(m, ["churn.Forking", "churn.Failover"])
        self.stop_maitred(m)


@maitred_only
class CircuitBreakerAfterReload(ChurnBase):
    def test_max_pending_turned_on_while_calls_wait(self):
        """Issue 15 defect 2: six calls wait in the pool of an endpoint that
        never answers HTTP/2; a reload turns circuit_breaker.max_pending on
        (same endpoints: the pool stays and takes the new settings); the
        calls end at their deadline. Their exits must not have taken from
        the service's pending count what their entries never added: a
        healthy server behind the same service then serves 20 calls. On the
        code of the issue all 20 get RESOURCE_EXHAUSTED "circuit breaker:
        service ... has circuit_breaker.max_pending (100) calls waiting"."""
        hole = self.blackhole()
        healthy = self.start_upstream("healthy")
        up = {"connect_timeout": "60s"}

        def cfg(eps, port=None, cb=None):
            s = self.service(SVC, eps, upstream=up)
            if cb:
                s["circuit_breaker"] = cb
            return self.config([s], port=port)
        first = cfg([hole])
        port = int(first["listen"].rsplit(":", 1)[1])
        m = self.start_maitred(first)
        stub = self.echo(m)
        futs = [stub.Unary.future(pb.EchoRequest(payload=b"w"), timeout=4.0 * SLOW) for _ in range(6)]
        wait_until(lambda: hole.accepted >= 1, CALL_LIMIT, "maitred to connect to the silent endpoint")
        self.reload(m, cfg([hole], port, {"max_pending": 100}))
        # The calls end (their deadline: no SETTINGS ever came).
        codes = []
        for f in futs:
            try:
                f.result(timeout=CALL_LIMIT)
                codes.append(grpc.StatusCode.OK)
            except grpc.FutureTimeoutError:
                self.fail("a waiting call never ended")
            except grpc.RpcError as e:
                codes.append(e.code())
        self.assertNotIn(grpc.StatusCode.OK, codes, "a call through the silent endpoint succeeded?")
        # The same service, now over the healthy server, the breaker still on.
        self.reload(m, cfg([healthy], port, {"max_pending": 100}))
        fails = []
        for _ in range(20):
            try:
                stub.Unary(pb.EchoRequest(payload=b"x"), timeout=CALL_LIMIT)
            except grpc.RpcError as e:
                fails.append("%s: %s" % (e.code(), e.details()))
        self.assertEqual(summary(fails), "", "calls to the healthy server after the waiting calls ended")
        self.stop_maitred(m)


@maitred_only
class ForkingCommit(ChurnBase):
    def test_request_outgrowing_the_buffer_after_the_newest_fork_failed(self):
        """Issue 15 defect 3 (call.c mtd_call_commit): FORKING, two forks at
        once: the first on `reader` (weight 100), the second, newest, on
        `failer` (weight 0: picked only once `reader` was taken), which
        answers UNAVAILABLE at once. The client stream then grows past
        fault.replay_buffer while `reader` reads it: the call commits.
        Committing to call->cur (nobody: the newest fork failed) instead of
        the attempt that is reading cancels `reader` too, and the call,
        with no attempt left and no deadline, never ends. It must end
        (here: answered by `reader`, which got the whole request)."""
        reader = self.start_upstream("reader")
        failer = self.start_upstream("failer", extra_args=["--fail-status", str(UNAVAILABLE)])
        admin_port = free_port()
        svc = self.service(SVC, [], policy="WEIGHTED_ROUND_ROBIN",
                           fault={"mode": "FORKING", "forks": 2, "replay_buffer": 16384})
        svc["endpoints"] = [{"address": reader.address, "weight": 100}, {"address": failer.address, "weight": 0}]
        m = self.start_maitred(self.config([svc], admin="127.0.0.1:%d" % admin_port))
        wait_until(lambda: harness.port_accepts(admin_port, 0.5), CALL_LIMIT, "the admin port")
        stub = self.echo(m)

        def failer_answers():
            t = admin_metrics(admin_port)
            return sum(metric_sum(t, n, endpoint=failer.address) for n in
                       ("maitred_endpoint_responses_total", "maitred_endpoint_failures_total"))
        # Warm both pools (connections up), so both forks go out at once.
        for _ in range(2):
            self.assertEqual(stub.Unary(pb.EchoRequest(), timeout=CALL_LIMIT).instance, "reader")
        big, n_big = 32 * 1024, 4
        for k in range(3):
            cid = call_id()
            before = failer_answers()
            stage = []  # "ready": failer's fork failed, seen by maitred; "sent"; or what went wrong

            def requests():
                # trailers_only: reader sends no response header before
                # its answer, so nothing commits the call (a response that
                # began does) before the request outgrows the buffer.
                yield pb.EchoRequest(call_id=cid, payload=b"s" * 100, trailers_only=True)
                # The newest fork (failer's) fails first, and maitred has
                # seen it, before the request grows past the buffer.
                try:
                    failer.wait_call(cid, "ENDED", limit=CALL_LIMIT / 3)
                    wait_until(lambda: failer_answers() > before, CALL_LIMIT / 3, "maitred to see failer's answer")
                except Exception as e:  # noqa: BLE001 (reported by the test)
                    stage.append("setup failed: %r" % e)
                    return
                stage.append("ready")
                for _ in range(n_big):
                    yield pb.EchoRequest(payload=b"b" * big)
                stage.append("sent")
            # No deadline: a hung call would wait forever; the wait below is
            # the hang guard.
            fut = stub.ClientStream.future(requests())
            try:
                r = fut.result(timeout=CALL_LIMIT)
            except grpc.FutureTimeoutError:
                fut.cancel()
                self.assertIn("ready", stage, "call %d: the scenario was not set up: %s" % (k, stage))
                self.fail("call %d (%s): still open %.0f s (hang guard; no deadline) after its request (%d "
                          "bytes, fault.replay_buffer 16384) outgrew the buffer with the newest fork failed: "
                          "the call hangs (the client could send all of it: %s; reader cancelled: %s)"
                          % (k, cid, CALL_LIMIT, 100 + n_big * big, "sent" in stage,
                             reader.wait_call(cid, "ENDED", limit=2).cancelled))
            except grpc.RpcError as e:
                self.assertIn("ready", stage, "call %d: the scenario was not set up: %s" % (k, stage))
                self.fail("call %d: %s: %s (expected reader's answer: it read the whole request)"
                          % (k, e.code(), e.details()))
            self.assertEqual(r.instance, "reader")
            self.assertEqual((r.messages_received, r.bytes_received), (1 + n_big, 100 + n_big * big))
        self.stop_maitred(m)


@maitred_only
class FailbackAfterReload(ChurnBase):
    """Issue 15 defect 4 (failback.c): FAILBACK calls fail on an instance
    answering UNAVAILABLE; each is answered OK and a copy waits in the
    worker's queue for its re-send (jittered backoff, several re-sends:
    the copies outlive the reclaim of the old config, which follows the
    retired pool's end at the worker's 1 s housekeeping).
    A reload then removes the service while the copies wait. Whatever
    happens to them, maitred must stay up without a sanitizer report, every
    copy must be dropped in the end (maitred_failback_dropped_total), and
    the service that stayed must serve."""

    def removed_while_queued(self, keep_old_config_alive, n, backoff, retries):
        bad = self.start_upstream("bad", extra_args=["--fail-status", str(UNAVAILABLE)])
        good = self.start_upstream("good")
        admin_port = free_port()
        fb = self.service("churn.Failback", [bad], fault={
            "mode": "FAILBACK", "backoff": {"base": backoff, "max": backoff}, "failback": {"retries": retries}})
        keep = self.service("churn.Keep", [good])
        first = self.config([fb, keep], admin="127.0.0.1:%d" % admin_port)
        port = int(first["listen"].rsplit(":", 1)[1])
        m = self.start_maitred(first)
        wait_until(lambda: harness.port_accepts(admin_port, 0.5), CALL_LIMIT, "the admin port")
        ch = self.channel(m)

        def method(svc):
            return ch.unary_unary("/%s/Unary" % svc, request_serializer=pb.EchoRequest.SerializeToString,
                                  response_deserializer=pb.EchoResponse.FromString)
        held = None
        if keep_old_config_alive:
            # A call routed with the first config, held by its upstream
            # until released: that config is not freed while it runs.
            cid = call_id()
            held = (cid, method("churn.Keep").future(pb.EchoRequest(call_id=cid, hold=True), timeout=CALL_LIMIT * 2))
            self.assertTrue(good.wait_call(cid).started, "the held call never reached its upstream")
        call = method("churn.Failback")
        for _ in range(n):
            # FAILBACK answers OK with an empty message and queues a copy.
            self.assertEqual(call(pb.EchoRequest(payload=b"f"), timeout=CALL_LIMIT), pb.EchoResponse())
        self.reload(m, self.config([keep], port=port, admin="127.0.0.1:%d" % admin_port))
        resent_at_reload = metric_sum(admin_metrics(admin_port), "maitred_failback_resent_total")

        def all_dropped():
            if not m.proc.alive():
                raise AssertionError("maitred exited %s:\n%s" % (harness.exit_text(m.proc.p.returncode),
                                                                 "\n".join(self.report_head(m))))
            return metric_sum(admin_metrics(admin_port), "maitred_failback_dropped_total") >= n
        try:
            wait_until(all_dropped, CALL_LIMIT, "the %d queued copies to be dropped" % n)
        except (OSError, AssertionError) as e:
            self.assert_alive(m, "re-sends of FAILBACK copies whose service a reload removed")
            raise e
        t = admin_metrics(admin_port)
        resent = metric_sum(t, "maitred_failback_resent_total")
        print("\nfailback: %d copies; %d re-sends (%d after the reload), %d dropped"
              % (n, resent, resent - resent_at_reload, metric_sum(t, "maitred_failback_dropped_total")))
        self.assert_alive(m, "after the copies were dropped")
        if held:
            good.release(held[0])
            self.assertEqual(held[1].result(timeout=CALL_LIMIT).instance, "good")
        self.serves(m, ["churn.Keep"])
        self.stop_maitred(m)

    def test_queued_resends_of_a_removed_service(self):
        """The old config is freed once no call holds it; a copy keeps a
        pointer into it (call->fault, failback.c:94) and reads it at its
        re-send. On the code of the issue: heap-use-after-free in
        mtd_failback_failed (failback.c:135) <- mtd_call_fail <-
        route_again <- mtd_call_start_bg <- mtd_failback_on_resend (or,
        now and then, when a copy's second re-send comes before the
        reclaim, the NULL service of the test below). Backoff up to 4 s:
        a copy's re-sends mostly come after the reclaim."""
        self.removed_while_queued(keep_old_config_alive=False, n=4, backoff="4s", retries=4)

    def test_queued_resends_of_a_removed_service_old_config_alive(self):
        """The same with the old config kept alive by a call still running
        on it, so no freed memory is read: a re-send finds no route, fails,
        and is scheduled again; the failed route left the copy holding the
        current runtime with no service (call->hold set, call->svc NULL),
        so its next re-send skips routing and picks with no service. On the
        code of the issue: UBSan "member access within null pointer of type
        'struct mtd_rt_service'" (call.c:57, call_hash_key), then SEGV."""
        self.removed_while_queued(keep_old_config_alive=True, n=4, backoff="2s", retries=3)


@maitred_only
@needs_h2
class Churn(ChurnBase):
    def test_reload_churn_under_failover_and_forking_load(self):
        """Issue 15 section 5: 20 s of SIGHUPs every 150 ms, each swapping
        the endpoint set of two services (FAILOVER, FORKING with two forks)
        among sets of real instances and instances that accept TCP and
        never answer HTTP/2, under unary load with 2 s deadlines (grpc-timeout
        from a raw client that never enforces it). Passes with no sanitizer
        report, no call ending later than its deadline + 1 s (client-side),
        and both services serving normally afterwards."""
        a, b = self.start_upstream("a"), self.start_upstream("b")
        x, y, z, w = (self.blackhole() for _ in range(4))
        # Each reload takes away every silent endpoint of the set before
        # (calls waiting there move to the new set: FORKING's two forks
        # often both wait), and the real instances come and go too.
        sets = [[a, x, y], [b, z, w], [x, y], [a, b, z, w]]
        duration = float(os.environ.get("MAITRED_CHURN_SECONDS") or 20.0)
        period = 0.150
        deadline = 2.0

        def cfg(eps, port=None):
            up = {"connect_timeout": "1s"}
            return self.config([
                self.service("churn.Failover", eps, fault={"mode": "FAILOVER"}, upstream=up),
                self.service("churn.Forking", eps, fault={"mode": "FORKING", "forks": 2}, upstream=up),
            ], port=port, workers=2)
        first = cfg(sets[0])
        port = int(first["listen"].rsplit(":", 1)[1])
        m = self.start_maitred(first)
        import h2raw
        load = RawCalls(m.port, ["/churn.Failover/Unary", "/churn.Forking/Unary"], deadline, threads=6,
                        request=h2raw.echo_request(payload=b"c", delay_ms=20)).start()
        signals = 0
        t0 = time.monotonic()
        try:
            wait_until(lambda: load.count() >= 10, CALL_LIMIT, "the load to start")
            applied0 = self.applied(m)
            t0 = time.monotonic()
            next_at = t0
            while time.monotonic() - t0 < duration and m.proc.alive():
                signals += 1
                self.rewrite(m, cfg(sets[signals % len(sets)], port))
                m.proc.signal(signal.SIGHUP)
                next_at += period
                time.sleep(max(0.0, next_at - time.monotonic()))
            churn_s = time.monotonic() - t0
        finally:
            hung = load.finish()
        self.assert_alive(m, "after %d SIGHUPs in %.1f s" % (signals, time.monotonic() - t0))
        # The reloads the SIGHUPs asked for (signals sent close together may
        # arrive as one).
        wait_until(lambda: self.applied(m) - applied0 >= 1, CALL_LIMIT, "the reloads to apply")
        reloads = self.applied(m) - applied0
        late = load.late(CHURN_MARGIN)
        outcomes = load.by_outcome()
        print("\nchurn: %d SIGHUPs in %.1f s, %d reloads applied; %d calls (%s); slowest %.3f s against a "
              "%.1f s deadline (bound: deadline + %.1f s); %d late"
              % (signals, churn_s, reloads, load.count(),
                 ", ".join("%s %s: %d" % (k[0], k[1], v) for k, v in sorted(outcomes.items())),
                 load.slowest(), deadline, CHURN_MARGIN, len(late)))
        self.assertEqual(hung, [], "client threads still waiting for calls (hang guard)")
        self.assertEqual(load.errors, [])
        self.assertEqual(late, [], "calls that outlived their %.1f s deadline by more than %.1f s"
                         % (deadline, CHURN_MARGIN))
        self.assertGreater(reloads, signals // 2, "most SIGHUPs did not reload")
        # Where the calls went: each service was answered OK (by a real
        # instance: the silent ones never answer), and every other call
        # ended on its deadline or UNAVAILABLE (its endpoints left or
        # never answered), never another status and never a reset.
        for svc in ("churn.Failover", "churn.Forking"):
            self.assertGreater(outcomes.get((svc, "0"), 0), 0, "no call to %s succeeded: %s" % (svc, outcomes))
        self.assertLessEqual({o for (_, o) in outcomes}, {"0", "4", "14"}, "outcomes: %s" % outcomes)
        answered = sum(v for (_, o), v in outcomes.items() if o == "0")
        self.assertLessEqual(answered, a.stats().total + b.stats().total,
                             "more calls answered OK than the real instances served")
        # Serves normally afterwards, on the real instances.
        self.reload(m, cfg([a, b], port))
        self.serves(m, ["churn.Failover", "churn.Forking"])
        self.stop_maitred(m)


if __name__ == "__main__":
    unittest.main()
