"""A third gRPC implementation through maitred: grpc-java on Netty (Debian's
libgrpc-java and libnetty-java), as client and as upstream, next to grpcio.

tests/interop/javaecho/JavaEcho.java is compiled here with javac against the
Debian jars (no build tool, nothing downloaded) and started once for the
class: one JVM holds the grpc-java client and the grpc-java servers, driven
over stdin/stdout one command per line (see the Java file). Without javac or
the jars the tests skip, saying why; CI installs them."""

import base64
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from harness import (MaitredTest, maitred_only, pb, call_id, holder, port_accepts, wait_until, CALL_LIMIT, START_LIMIT,
                     STOP_LIMIT, ECHO, _SETPRIV, SLOW)

SRC = os.path.join(os.environ.get("MAITRED_SRCDIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                   "tests", "interop", "javaecho", "JavaEcho.java")
JARDIR = "/usr/share/java"
# What grpc-java's Netty transport loads for h2c, client and server.
JARS = ["grpc-api", "grpc-context", "grpc-core", "grpc-netty", "guava", "perfmark-api", "protobuf",
        "netty-buffer", "netty-codec", "netty-codec-http", "netty-codec-http2", "netty-common",
        "netty-handler", "netty-resolver", "netty-transport"]
PACKAGES = "default-jdk-headless libgrpc-java libnetty-java libguava-java libperfmark-java libprotobuf-java"
UNARY = ECHO + "Unary"
_built = {}


def javaecho():
    """(classes dir, classpath) of the compiled JavaEcho, or raise SkipTest
    with the reason."""
    if "cp" in _built:
        return _built["cp"]
    if "skip" in _built:
        raise unittest.SkipTest(_built["skip"])
    javac, java = shutil.which("javac"), shutil.which("java")
    missing = [j for j in JARS if not os.path.exists(os.path.join(JARDIR, j + ".jar"))]
    if not javac or not java or missing:
        _built["skip"] = "no JDK or grpc-java jars%s (Debian: %s)" % (
            " (" + " ".join(missing) + ")" if missing else "", PACKAGES)
        raise unittest.SkipTest(_built["skip"])
    out = tempfile.mkdtemp(prefix="maitred-javaecho-")
    cp = ":".join(os.path.join(JARDIR, j + ".jar") for j in JARS)
    # C1 only: javac's short run spends much of its time in the JIT (about
    # 40 % less wall time on the shared 2-core machine).
    res = subprocess.run([javac, "-J-XX:TieredStopAtLevel=1", "-nowarn", "-d", out, "-cp", cp, SRC],
                         stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=300)
    if res.returncode != 0:
        raise AssertionError("javac failed:\n" + res.stdout.decode(errors="replace"))
    _built["cp"] = (java, out + ":" + cp)
    return _built["cp"]


def b64(v):
    return base64.b64encode(v).decode()


class Jvm:
    """The JavaEcho process: cmd() sends one command, returns its JSON."""

    def __init__(self, logdir):
        java, cp = javaecho()
        self.logpath = os.path.join(logdir, "javaecho.log")
        self.log = open(self.logpath, "wb")
        argv = ([_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []) + [java, "-cp", cp, "JavaEcho"]
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        first = self._line(START_LIMIT)
        if not first.get("ready"):
            raise AssertionError("javaecho did not start: %r\n%s" % (first, self.output()))

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _line(self, limit):
        try:
            line = self.lines.get(timeout=limit)
        except queue.Empty:
            raise AssertionError("javaecho: no answer within %.0fs\n%s" % (limit, self.output()))
        if line is None:
            raise AssertionError("javaecho exited (%s)\n%s" % (self.p.poll(), self.output()))
        return json.loads(line)

    def cmd(self, *words, limit=CALL_LIMIT, check=True):
        self.p.stdin.write((" ".join(words) + "\n").encode())
        self.p.stdin.flush()
        res = self._line(limit + 10)
        if check and not res.get("ok"):
            raise AssertionError("javaecho %s: %s" % (words[0], res.get("error")))
        return res

    def output(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write(b"quit\n")
                self.p.stdin.close()
            except OSError:
                pass
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


class State:
    def __init__(self, d):
        self.started, self.ended, self.cancelled = d["started"], d["ended"], d["cancelled"]


class JavaUpstream:
    """A grpc-java server in the JVM, with upstream.py's Control calls."""

    def __init__(self, jvm, name):
        self.jvm, self.name = jvm, name
        self.port = jvm.cmd("serve", "name=" + name)["port"]
        self.address = "127.0.0.1:%d" % self.port

    def wait_call(self, cid, until="STARTED", limit=CALL_LIMIT):
        return State(self.jvm.cmd("waitcall", "name=" + self.name, "call=" + cid, "until=" + until.lower(),
                                  "timeout_ms=%d" % (limit * 1000), limit=limit))

    def release(self, cid):
        return State(self.jvm.cmd("release", "name=" + self.name, "call=" + cid))

    def stop(self):
        self.jvm.cmd("stopserver", "name=" + self.name)


class Result:
    """A finished grpc-java client call."""

    def __init__(self, d):
        self.code, self.message = d["code"], d["message"]
        self.headers = [(k, base64.b64decode(v)) for k, v in d["headers"]]
        self.trailers = [(k, base64.b64decode(v)) for k, v in d["trailers"]]
        self.responses = [pb.EchoResponse.FromString(base64.b64decode(r)) for r in d["responses"]]

    def header(self, k):
        return [v for hk, v in self.headers if hk == k]

    def trailer(self, k):
        return [v for tk, v in self.trailers if tk == k]


class JavaInterop(MaitredTest):
    @classmethod
    def setUpClass(cls):
        cls.logdir = tempfile.mkdtemp(prefix="maitred-javaecho-jvm-")
        cls.jvm = Jvm(cls.logdir)

    @classmethod
    def tearDownClass(cls):
        cls.jvm.stop()
        shutil.rmtree(cls.logdir, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self._ids = 0
        self._log_from = len(self.jvm.output())

    def _dump_logs(self):
        super()._dump_logs()
        import sys
        sys.stderr.write("----- javaecho (pid %d), this test's part:\n%s\n" % (
            self.jvm.p.pid, self.jvm.output()[self._log_from:][-20000:]))

    # --- upstreams -------------------------------------------------------------
    def java_upstream(self, name):
        up = JavaUpstream(self.jvm, name)
        self.addCleanup(up.stop)
        return up

    def upstreams(self, kind, names):
        if kind == "java":
            return [self.java_upstream(n) for n in names]
        return [self.start_upstream(n) for n in names]

    def through(self, kind, names, **top):
        """Upstreams of `kind` named `names`, and a maitred with one "*"
        service over them (ROUND_ROBIN)."""
        ups = self.upstreams(kind, names)
        return ups, self.start_maitred(self.config([self.service("*", ups)], **top))

    # --- the grpc-java client -------------------------------------------------
    def start(self, m, reqs=(), kind="unary", path=None, md=(), timeout_ms=None, close=True, compress=None):
        self._ids += 1
        cid = "c%d" % self._ids
        words = ["start", "id=" + cid, "addr=" + m.address, "kind=" + kind,
                 "path=" + (path or ECHO + {"unary": "Unary", "client": "ClientStream",
                                            "server": "ServerStream", "bidi": "BidiStream"}[kind])]
        if timeout_ms is not None:
            words.append("timeout_ms=%d" % timeout_ms)
        if compress:
            words.append("compress=" + compress)
        words += ["md=%s:%s" % (k, b64(v if isinstance(v, bytes) else v.encode())) for k, v in md]
        words += ["req=" + b64(r.SerializeToString()) for r in reqs]
        if close:
            words.append("close=1")
        self.jvm.cmd(*words)
        return cid

    def wait(self, cid):
        return Result(self.jvm.cmd("wait", "id=" + cid, "timeout_ms=%d" % (CALL_LIMIT * 1000)))

    def call(self, m, reqs, **kw):
        return self.wait(self.start(m, reqs, **kw))

    def both(self, body):
        """body(kind) once against grpcio upstreams, once against grpc-java's."""
        for kind in ("grpcio", "java"):
            with self.subTest(upstreams=kind):
                body(kind)

    # --- the tests -------------------------------------------------------------
    @maitred_only
    def test_unary_round_robin_and_metadata_both_ways(self):
        def body(kind):
            ups, m = self.through(kind, [kind + "-a", kind + "-b"])
            counts = {}
            binv = b"\x00\x01\x02\xff"
            for i in range(100):
                payload = bytes([i % 256]) * (1 + i * 97 % 5000)
                r = self.call(m, [pb.EchoRequest(payload=payload)], md=[("x-call", str(i)), ("x-bin-bin", binv)])
                self.assertEqual(r.code, "OK", r.message)
                self.assertEqual(len(r.responses), 1)
                resp = r.responses[0]
                self.assertEqual(resp.payload, payload)
                self.assertEqual(r.header("maitred-instance"), [resp.instance.encode()])
                self.assertEqual(r.header("x-bin-bin"), [binv])
                self.assertEqual(r.trailer("x-call"), [str(i).encode()])
                self.assertEqual(r.trailer("x-bin-bin"), [binv])
                seen = {md.key: md.value for md in resp.metadata}
                self.assertEqual(seen.get("x-bin-bin"), binv)
                self.assertEqual(seen.get("x-call"), str(i).encode())
                counts[resp.instance] = counts.get(resp.instance, 0) + 1
            self.assertEqual(counts, {kind + "-a": 50, kind + "-b": 50})
            self.stop_maitred(m)
        self.both(body)

    @maitred_only
    def test_streaming_three_ways(self):
        def body(kind):
            (up,), m = self.through(kind, [kind])
            # Server streaming: five responses, in order.
            r = self.call(m, [pb.EchoRequest(payload=b"s", response_count=5)], kind="server")
            self.assertEqual(r.code, "OK", r.message)
            self.assertEqual([x.index for x in r.responses], [0, 1, 2, 3, 4])
            self.assertEqual({x.payload for x in r.responses}, {b"s"})
            # Client streaming: ten requests, one answer counting them.
            reqs = [pb.EchoRequest(payload=b"p" * (i + 1)) for i in range(10)]
            r = self.call(m, reqs, kind="client")
            self.assertEqual(r.code, "OK", r.message)
            self.assertEqual(len(r.responses), 1)
            self.assertEqual((r.responses[0].messages_received, r.responses[0].bytes_received), (10, 55))
            # Bidi: each message answered before the next is sent.
            cid = self.start(m, kind="bidi", close=False)
            for i in range(20):
                self.jvm.cmd("send", "id=" + cid, "req=" + b64(pb.EchoRequest(payload=b"ping %d" % i).SerializeToString()))
                got = self.jvm.cmd("next", "id=" + cid, "timeout_ms=%d" % (CALL_LIMIT * 1000))
                resp = pb.EchoResponse.FromString(base64.b64decode(got["response"]))
                self.assertEqual((resp.payload, resp.index, resp.messages_received), (b"ping %d" % i, i, i + 1))
            self.jvm.cmd("close", "id=" + cid)
            r = self.wait(cid)
            self.assertEqual((r.code, r.responses), ("OK", []))
            self.stop_maitred(m)
        self.both(body)

    @maitred_only
    def test_error_status_message_and_trailers_pass_through(self):
        def body(kind):
            (up,), m = self.through(kind, [kind])
            st = pb.Status(code=9, message="not now: the d\u00e9j\u00e0-vu check failed 100%",
                           trailers=[pb.Metadatum(key="x-why", value=b"because"),
                                     pb.Metadatum(key="x-why-bin", value=b"\x00\xfe\xff")])
            r = self.call(m, [pb.EchoRequest(status=st)])
            self.assertEqual((r.code, r.message), ("FAILED_PRECONDITION", st.message))
            self.assertEqual(r.trailer("x-why"), [b"because"])
            self.assertEqual(r.trailer("x-why-bin"), [b"\x00\xfe\xff"])
            self.assertEqual(r.responses, [])
            # Trailers-Only (no initial metadata), in a server stream after two responses.
            r = self.call(m, [pb.EchoRequest(status=pb.Status(code=5, message="gone"), trailers_only=True)])
            self.assertEqual((r.code, r.message), ("NOT_FOUND", "gone"))
            r = self.call(m, [pb.EchoRequest(response_count=4, status_after=2,
                                             status=pb.Status(code=8, message="enough"))], kind="server")
            self.assertEqual((r.code, r.message, len(r.responses)), ("RESOURCE_EXHAUSTED", "enough", 2))
            self.stop_maitred(m)
        self.both(body)

    @maitred_only
    def test_deadline_and_cancel_reach_the_upstream(self):
        def body(kind):
            (up,), m = self.through(kind, [kind])
            # One call first, so that the connections exist and the held
            # call below reaches the upstream well within its deadline (at
            # load 9 the first call's connects outlasted 500 ms).
            self.assertEqual(self.call(m, [pb.EchoRequest()]).code, "OK")
            # A deadline that expires: DEADLINE_EXCEEDED in grpc-java, the
            # upstream's call cancelled.
            cid = call_id()
            r = self.call(m, [pb.EchoRequest(call_id=cid, hold=True)], timeout_ms=int(1500 * SLOW))  # memcheck: SLOW
            self.assertEqual(r.code, "DEADLINE_EXCEEDED", r.message)
            state = up.wait_call(cid, "ENDED")
            self.assertTrue(state.started)
            self.assertTrue(state.ended and state.cancelled, "the upstream's call was not cancelled")
            # A cancel from the client, once the upstream holds the call.
            cid = call_id()
            h = self.start(m, [pb.EchoRequest(call_id=cid, hold=True)], kind="server")
            self.assertTrue(up.wait_call(cid, "STARTED").started)
            self.jvm.cmd("cancel", "id=" + h)
            self.assertEqual(self.wait(h).code, "CANCELLED")
            state = up.wait_call(cid, "ENDED")
            self.assertTrue(state.ended and state.cancelled, "the client's cancel did not reach the upstream")
            # A held call released in time still succeeds (the hold is real),
            # and grpc-java's grpc-timeout reached the upstream as the time left.
            cid = call_id()
            h = self.start(m, [pb.EchoRequest(call_id=cid, hold=True, payload=b"late")], timeout_ms=CALL_LIMIT * 1000)
            self.assertTrue(up.wait_call(cid, "STARTED").started)
            up.release(cid)
            r = self.wait(h)
            self.assertEqual((r.code, r.responses[0].payload), ("OK", b"late"))
            self.assertGreater(r.responses[0].time_remaining_s, 0)
            self.assertLessEqual(r.responses[0].time_remaining_s, CALL_LIMIT + 0.1)
            self.stop_maitred(m)
        self.both(body)

    @maitred_only
    def test_cancels_and_deadlines_racing_responses_keep_the_connection(self):
        # Cancels and expiring deadlines crossing response DATA and HEADERS
        # (grpc-java then sends a second RST_STREAM, and WINDOW_UPDATEs may
        # cross too): the calls end CANCELLED or DEADLINE_EXCEEDED, and a call
        # held on the same connection meanwhile is not lost.
        def body(kind):
            (up,), m = self.through(kind, [kind])
            held = call_id()
            h = self.start(m, [pb.EchoRequest(call_id=held, hold=True, payload=b"kept")], kind="server")
            self.assertTrue(up.wait_call(held, "STARTED").started)
            for i in range(10):
                c = self.start(m, [pb.EchoRequest(payload=b"r" * 16384, response_count=2000, delay_ms=1)],
                               kind="server")
                self.jvm.cmd("next", "id=" + c, "timeout_ms=%d" % (CALL_LIMIT * 1000))
                self.jvm.cmd("cancel", "id=" + c)
                self.assertEqual(self.wait(c).code, "CANCELLED")
                c = self.start(m, [pb.EchoRequest(payload=b"d" * 16384, response_count=200, delay_ms=1)],
                               kind="server", timeout_ms=5 + i * 10)
                self.assertEqual(self.wait(c).code, "DEADLINE_EXCEEDED")
            up.release(held)
            r = self.wait(h)
            self.assertEqual((r.code, [x.payload for x in r.responses]), ("OK", [b"kept"]))
            self.assertNotIn("closing (", m.proc.output())
            self.stop_maitred(m)
        self.both(body)

    @maitred_only
    def test_large_messages_both_directions(self):
        def body(kind):
            (up,), m = self.through(kind, [kind])
            big = bytes(range(256)) * (2 * 4096 + 17)  # 2 MiB + 4352 bytes
            r = self.call(m, [pb.EchoRequest(payload=big)], kind="unary")
            self.assertEqual(r.code, "OK", r.message)
            self.assertEqual(len(r.responses[0].payload), len(big))
            self.assertEqual(r.responses[0].payload, big)
            r = self.call(m, [pb.EchoRequest(payload=big[:1536 * 1024 + 1], response_count=2)], kind="server")
            self.assertEqual(r.code, "OK", r.message)
            self.assertEqual([x.payload == big[:1536 * 1024 + 1] for x in r.responses], [True, True])
            self.stop_maitred(m)
        self.both(body)

    @maitred_only
    def test_gzip_both_ways(self):
        # grpc-java compresses its request (grpc-encoding: gzip), the upstream
        # its response. grpcio hides grpc-encoding from its handler and sends
        # its headers before the handler picks a compression, so what went
        # compressed is seen with grpc-java's server; with grpcio the
        # payloads must still arrive whole.
        def body(kind):
            (up,), m = self.through(kind, [kind])
            payload = b"squeeze me " * 20000
            r = self.call(m, [pb.EchoRequest(payload=payload, compress_response=True)], compress="gzip")
            self.assertEqual(r.code, "OK", r.message)
            self.assertEqual(r.responses[0].payload, payload)
            if kind == "java":
                self.assertEqual(r.header("grpc-encoding"), [b"gzip"])
                seen = [md.value for md in r.responses[0].metadata if md.key == "grpc-encoding"]
                self.assertEqual(seen, [b"gzip"])
            self.stop_maitred(m)
        self.both(body)

    @maitred_only
    def test_concurrent_calls_on_one_connection(self):
        # grpc-java multiplexes them on one HTTP/2 connection; all are in
        # flight at once (held until released), then all complete.
        def body(kind):
            ups, m = self.through(kind, [kind + "-a", kind + "-b"])
            cids = [call_id() for _ in range(30)]
            handles = [self.start(m, [pb.EchoRequest(call_id=c, hold=True, payload=c.encode())],
                                  kind="unary" if i % 2 else "server", timeout_ms=CALL_LIMIT * 2000)
                       for i, c in enumerate(cids)]
            where = {c: holder(ups, c) for c in cids}
            self.assertEqual(sorted(sum(1 for u in where.values() if u is x) for x in ups), [15, 15])
            for c in cids:
                where[c].release(c)
            for c, h in zip(cids, handles):
                r = self.wait(h)
                self.assertEqual((r.code, [x.payload for x in r.responses]), ("OK", [c.encode()]))
            self.stop_maitred(m)
        self.both(body)

    @maitred_only
    def test_drain_lets_grpc_java_calls_finish(self):
        # SIGTERM: GOAWAY to the grpc-java client, its call in flight ends
        # normally, a new call is not served, maitred exits 0.
        def body(kind):
            (up,), m = self.through(kind, [kind], drain_timeout="60s")
            cid = call_id()
            h = self.start(m, [pb.EchoRequest(call_id=cid, hold=True, payload=b"drain me", response_count=3)],
                           kind="server")
            self.assertTrue(up.wait_call(cid, "STARTED").started)
            m.proc.signal(signal.SIGTERM)
            wait_until(lambda: not port_accepts(m.port, 0.5), CALL_LIMIT, "maitred to stop accepting")
            self.assertTrue(m.proc.alive(), "maitred exited with a call in flight")
            r = self.call(m, [pb.EchoRequest()])
            self.assertEqual(r.code, "UNAVAILABLE", r.message)
            up.release(cid)
            r = self.wait(h)
            self.assertEqual((r.code, [x.index for x in r.responses]), ("OK", [0, 1, 2]))
            rc = m.proc.wait(STOP_LIMIT)
            m.proc.checked = True
            self.assertEqual(rc, 0, "maitred exited %s after SIGTERM" % rc)
            self.assertEqual(m.proc.sanitizer_report(), [])
        self.both(body)

    @maitred_only
    def test_authority_kept_or_overridden_to_grpc_java(self):
        up = self.java_upstream("j")
        cfg = self.config([self.service("a.Keep", [up]),
                           self.service("b.Literal", [up], authority="api.internal:8443"),
                           self.service("c.Endpoint", [up], authority="FROM_ENDPOINT")])
        m = self.start_maitred(cfg)
        want = {"a.Keep": m.address, "b.Literal": "api.internal:8443", "c.Endpoint": up.address}
        for svc, authority in want.items():
            with self.subTest(service=svc):
                r = self.call(m, [pb.EchoRequest()], path="/%s/Unary" % svc)
                self.assertEqual(r.code, "OK", r.message)
                seen = [md.value.decode() for md in r.responses[0].metadata if md.key == ":authority"]
                self.assertEqual(seen, [authority])
        self.stop_maitred(m)

    @maitred_only
    def test_keepalive_within_grpc_java_ping_policy(self):
        # grpc-java's default server policy (NettyServerBuilder): PINGs no
        # more often than every 5 min while calls are open, none without
        # (permitKeepAliveWithoutCalls false: 2 h); the third PING too soon
        # is answered GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings").
        # Two grpc-java servers behind two services, watched at once: one
        # idle, one with a call open.
        idle, busy = self.java_upstream("idle"), self.java_upstream("busy")
        ka = {"keepalive_interval": "1s", "keepalive_timeout": "5s"}
        m = self.start_maitred(self.config([self.service("a.Idle", [idle], upstream=ka),
                                            self.service("b.Busy", [busy], upstream=ka)]),
                               args=["--log-level", "debug"])
        r = self.call(m, [pb.EchoRequest(payload=b"first")], path="/a.Idle/Unary")
        self.assertEqual(r.responses[0].payload, b"first")
        # A call open: the 1 s PINGs break the policy, grpc-java says so
        # and maitred doubles its interval for the endpoint (gRPC A8).
        cid = self.start(m, kind="bidi", close=False, path="/b.Busy/BidiStream")
        self.jvm.cmd("send", "id=" + cid, "req=" + b64(pb.EchoRequest(payload=b"open").SerializeToString()))
        self.jvm.cmd("next", "id=" + cid, "timeout_ms=%d" % (CALL_LIMIT * 1000))
        want = "upstream %s: too many PINGs for its policy; keepalive interval now 2000 ms" % busy.address

        def idle_goaways():
            return [l for l in m.proc.output().splitlines()
                    if "upstream %s:" % idle.address in l and "GOAWAY" in l]
        # Idle: no PING at all, so no strike. With PINGs every ~2 s the
        # third strike would come within 6 s: wait (bounded) past that for
        # a GOAWAY that must not come.
        deadline = time.monotonic() + 10
        while not idle_goaways() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(idle_goaways(), [])
        r = self.call(m, [pb.EchoRequest(payload=b"second")], path="/a.Idle/Unary")
        self.assertEqual((r.code, r.responses[0].payload), ("OK", b"second"))
        connects = [l for l in m.proc.output().splitlines() if "upstream %s: connecting" % idle.address in l]
        self.assertEqual(len(connects), 1, "the idle connection was replaced:\n" + "\n".join(connects))
        deadline = time.monotonic() + CALL_LIMIT
        while want not in m.proc.output() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertIn(want, m.proc.output())
        self.jvm.cmd("cancel", "id=" + cid)
        self.wait(cid)
        self.stop_maitred(m)

if __name__ == "__main__":
    unittest.main()
