"""A second gRPC implementation through maitred: grpc-go (Debian's
golang-google-grpc-dev) as client and as upstream, next to grpcio.

tests/interop/goecho/main.go is built here with the Debian Go toolchain in
GOPATH mode (no module download). Without `go` or grpc-go's source the tests
skip, saying why; CI installs both."""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import grpc

from harness import MaitredTest, free_port, maitred_only, wait_until, port_accepts, Proc, CALL_LIMIT, START_LIMIT

SRC = os.path.join(os.environ.get("MAITRED_SRCDIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                   "tests", "interop", "goecho", "main.go")
GOPATH = "/usr/share/gocode"
_built = {}


def goecho():
    """Path of the built goecho, or raise SkipTest with the reason."""
    if "path" in _built:
        return _built["path"]
    if "skip" in _built:
        raise unittest.SkipTest(_built["skip"])
    go = shutil.which("go")
    if not go or not os.path.isdir(os.path.join(GOPATH, "src", "google.golang.org", "grpc")):
        _built["skip"] = "no Go toolchain or grpc-go source (Debian: golang-go golang-google-grpc-dev)"
        raise unittest.SkipTest(_built["skip"])
    out = tempfile.mkdtemp(prefix="maitred-goecho-")
    env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH, GOCACHE=os.path.join(out, "cache"),
               GOFLAGS="", CGO_ENABLED="0")
    path = os.path.join(out, "goecho")
    res = subprocess.run([go, "build", "-o", path, SRC], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=600)
    if res.returncode != 0:
        raise AssertionError("go build failed:\n" + res.stdout.decode(errors="replace"))
    _built["path"] = path
    return path


class GoInterop(MaitredTest):
    def start_go_server(self, name):
        port = free_port()
        proc = Proc("go-" + name, [goecho(), "server", "-addr", "127.0.0.1:%d" % port, "-name", name], self.tmp)
        self._procs.append((proc, False))
        wait_until(lambda: port_accepts(port, 0.5), START_LIMIT, "goecho server %s" % name)
        return "127.0.0.1:%d" % port

    @maitred_only
    def test_go_client_and_go_servers(self):
        ups = [self.start_go_server("g1"), self.start_go_server("g2")]
        m = self.start_maitred(self.config([self.service("*", ups)]))
        res = subprocess.run([goecho(), "client", "-addr", m.address, "-calls", "200"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=CALL_LIMIT * 4)
        self.assertEqual(res.returncode, 0, res.stderr.decode(errors="replace"))
        summary = json.loads(res.stdout.decode().strip().splitlines()[-1])
        self.assertEqual(summary["calls"], 200)
        self.assertEqual(summary["instances"], {"g1": 100, "g2": 100})
        self.assertEqual(summary["streams"], 1)
        self.assertEqual(summary["statuses"], {"NotFound": 1, "PermissionDenied": 1})
        self.stop_maitred(m)

    @maitred_only
    def test_grpcio_client_to_go_server(self):
        up = self.start_go_server("g")
        m = self.start_maitred(self.config([self.service("*", [up])]))
        ch = self.channel(m)
        unary = ch.unary_unary("/any.Service/Anything")
        payload = bytes(range(256)) * 40
        resp, call = unary.with_call(payload, metadata=[("x-k", "v"), ("x-b-bin", b"\x00\xff")], timeout=CALL_LIMIT)
        self.assertEqual(resp, payload)
        self.assertIn(("maitred-instance", "g"), call.initial_metadata())
        self.assertIn(("x-b-bin", b"\x00\xff"), call.trailing_metadata())
        bidi = ch.stream_stream("/any.Service/Chat")
        msgs = [b"m%d" % i for i in range(20)]
        self.assertEqual(list(bidi(iter(msgs), timeout=CALL_LIMIT)), msgs)
        with self.assertRaises(grpc.RpcError) as cm:
            unary(b"x", metadata=[("x-status", "5")], timeout=CALL_LIMIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(cm.exception.details(), "go says no")
        self.stop_maitred(m)

    @maitred_only
    def test_idle_connection_stays_within_grpc_go_ping_policy(self):
        # grpc-go's default server policy: no PING more often than every
        # 5 min while calls are open, none at all without calls (a few
        # strikes and it answers GOAWAY ENHANCE_YOUR_CALM). With a 1 s
        # keepalive interval, an idle connection must get no PING: past
        # the point where the strikes would have run out, there is no
        # GOAWAY, the connection is the same one, and calls work.
        up = self.start_go_server("g")
        svc = self.service("*", [up], upstream={"keepalive_interval": "1s", "keepalive_timeout": "5s"})
        m = self.start_maitred(self.config([svc]), args=["--log-level", "debug"])
        unary = self.channel(m).unary_unary("/any.Service/Anything")
        self.assertEqual(unary(b"first", timeout=CALL_LIMIT), b"first")
        # Before the fix, PINGs went out about every 2 s (1 s interval,
        # housekeeping each second) and the fourth made the third strike:
        # wait (bounded) well past that for a GOAWAY that must not come.
        deadline = time.monotonic() + 15
        while "GOAWAY" not in m.proc.output() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertNotIn("GOAWAY", m.proc.output())
        self.assertEqual(unary(b"second", timeout=CALL_LIMIT), b"second")
        connects = [l for l in m.proc.output().splitlines() if "upstream %s: connecting" % up in l]
        self.assertEqual(len(connects), 1, "the idle connection was replaced:\n" + "\n".join(connects))
        self.stop_maitred(m)

    @maitred_only
    def test_too_many_pings_doubles_the_keepalive_interval(self):
        # While a call is open, a 1 s interval breaks the same policy: the
        # server's GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings") makes maitred
        # double its interval for that endpoint (gRPC A8), as gRPC clients do.
        import queue
        up = self.start_go_server("g")
        svc = self.service("*", [up], upstream={"keepalive_interval": "1s", "keepalive_timeout": "5s"})
        m = self.start_maitred(self.config([svc]))
        q = queue.Queue()
        bidi = self.channel(m).stream_stream("/any.Service/Chat")
        it = bidi(iter(q.get, None), timeout=CALL_LIMIT)
        q.put(b"hello")
        self.assertEqual(next(it), b"hello")
        want = "upstream %s: too many PINGs for its policy; keepalive interval now 2000 ms" % up
        deadline = time.monotonic() + CALL_LIMIT
        while want not in m.proc.output() and time.monotonic() < deadline:
            time.sleep(0.2)
        q.put(None)
        self.assertIn(want, m.proc.output())
        self.stop_maitred(m)
