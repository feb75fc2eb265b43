#!/usr/bin/python3
"""Record seed inputs for fuzz/downstream_fuzz.c from real traffic.

For each scenario a fresh maitred (tests' upstream.py behind it, grpcio in
front) runs with a recording TCP relay on each side; the bytes the client
sent to maitred and the bytes the upstream sent to maitred become one seed:
2-byte big-endian length of the client part, the client part, the upstream
part (fuzz/downstream_fuzz.c's input layout). Needs a built maitred:
MAITRED_BIN, default build/sidecar/maitred (deploy/demo.sh's build).

  /usr/bin/python3 fuzz/record_seeds.py OUTDIR   (Debian's python3-grpcio)
"""

import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(top, "tests", "integration"))
os.environ.setdefault("MAITRED_TEST_GEN", tempfile.mkdtemp(prefix="seedgen."))
import grpc  # noqa: E402
import protogen  # noqa: E402

subprocess.check_call([sys.executable, os.path.join(top, "tests", "integration", "protogen.py"),
                       os.environ["MAITRED_TEST_GEN"]])
pb, pb_grpc = protogen.load()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, limit=10.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("port %d never opened" % port)


class Relay:
    """Accepts on .port, forwards to target; records what flows toward
    the accepting side's peer (`record` = "in": bytes received from the
    accepted client; "out": bytes received from the target)."""

    def __init__(self, target, record):
        self.target, self.record, self.data = target, record, bytearray()
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                a, _ = self.ls.accept()
            except OSError:
                return
            b = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(a, b, self.record == "in"), daemon=True).start()
            threading.Thread(target=self._pump, args=(b, a, self.record == "out"), daemon=True).start()

    def _pump(self, src, dst, keep):
        while True:
            try:
                d = src.recv(65536)
            except OSError:
                d = b""
            if not d:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            if keep:
                with self.lock:
                    self.data += d
            try:
                dst.sendall(d)
            except OSError:
                return


def scenarios(stub, ch):
    yield "unary", lambda: stub.Unary(pb.EchoRequest(payload=b"hello", key="k1"), timeout=5)
    yield "unary_metadata", lambda: stub.Unary(pb.EchoRequest(payload=b"x" * 300), timeout=5,
                                               metadata=[("x-user-id", "42"), ("x-trace-bin", b"\x00\x01")])
    yield "server_stream", lambda: list(stub.ServerStream(pb.EchoRequest(response_count=3, response_size=100),
                                                          timeout=5))
    yield "client_stream", lambda: stub.ClientStream(iter([pb.EchoRequest(payload=b"a" * 50)] * 4), timeout=5)
    yield "bidi", lambda: list(stub.BidiStream(iter([pb.EchoRequest(payload=b"b" * 20)] * 3), timeout=5))
    yield "status", lambda: _expect_error(lambda: stub.Unary(pb.EchoRequest(status=pb.Status(code=5, message="nf")),
                                                             timeout=5))
    yield "trailers_only", lambda: _expect_error(lambda: stub.Unary(
        pb.EchoRequest(trailers_only=True, status=pb.Status(code=14, message="u")), timeout=5))
    yield "compressed", lambda: stub.Unary(pb.EchoRequest(payload=b"z" * 2000, compress_response=True), timeout=5,
                                           compression=grpc.Compression.Gzip)
    yield "large", lambda: stub.Unary(pb.EchoRequest(payload=os.urandom(40000)), timeout=5)
    yield "hash_field", lambda: _expect_error(lambda: ch.unary_unary("/fuzz.Hash/Get")(
        pb.EchoRequest(key="user-7").SerializeToString(), timeout=5))
    yield "header_key", lambda: _expect_error(lambda: ch.unary_unary("/fuzz.Header/Get")(b"", timeout=5))


def _expect_error(f):
    try:
        f()
    except grpc.RpcError:
        pass


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="seeds.")
    ready = os.path.join(tmp, "up.ready")
    up = subprocess.Popen([sys.executable, os.path.join(top, "tests", "integration", "upstream.py"), "--name", "u",
                           "--ready-file", ready])
    try:
        end = time.monotonic() + 20
        while not os.path.exists(ready) and time.monotonic() < end:
            time.sleep(0.05)
        import json
        with open(ready) as f:
            uport = json.load(f)["port"]
        names = [n for n, _ in scenarios(None, None)]
        for i, name in enumerate(names):
            urelay = Relay(("127.0.0.1", uport), "out")
            mport = free_port()
            cfg = os.path.join(tmp, "m.yaml")
            with open(cfg, "w") as f:
                f.write("listen: \"127.0.0.1:%d\"\nworkers: 1\nservices:\n" % mport)
                for svc in ("*", "fuzz.Hash", "fuzz.Header"):
                    f.write("  - name: \"%s\"\n    endpoints: [{address: \"127.0.0.1:%d\"}]\n" % (svc, urelay.port))
            m = subprocess.Popen([os.environ.get("MAITRED_BIN") or os.path.join(top, "build", "sidecar", "maitred"), "--config", cfg, "--log-level", "error"])
            try:
                wait_port(mport)
                drelay = Relay(("127.0.0.1", mport), "in")
                with grpc.insecure_channel("127.0.0.1:%d" % drelay.port) as ch:
                    stub = pb_grpc.EchoStub(ch)
                    dict(scenarios(stub, ch))[name]()
                time.sleep(0.3)
                with drelay.lock, urelay.lock:
                    down, upb = bytes(drelay.data[:65535]), bytes(urelay.data)
                drelay.ls.close()
            finally:
                m.terminate()
                m.wait(10)
                urelay.ls.close()
            with open(os.path.join(out, "%02d-%s" % (i, name)), "wb") as f:
                f.write(struct.pack(">H", len(down)) + down + upb[:65536])
            print("seed %s: %d client bytes, %d upstream bytes" % (name, len(down), len(upb)))
    finally:
        up.terminate()
        up.wait(10)


if __name__ == "__main__":
    main()
