#!/usr/bin/python3
"""bench/fault/tail.py: the latency tail with and without hedging.

Three upstreams of which each makes a fraction of its calls slow
(--slow-fraction of them wait --slow-ms before any of their answer, drawn
per call by the upstream, so a hedge is slow only if its own draw says so,
as in a real tail): bench/proxy/grpc_upstream (C, the default) or
tests/integration/upstream.py (grpcio, --upstream python). A fresh maitred
per row (ROUND_ROBIN over the three; FAILFAST for "none", FORKING with
`forks: 2` and the row's hedge_delay otherwise); THREADS closed-loop
clients making sequential Echo/Unary calls for DURATION seconds after a
warm-up: h2load -c THREADS -m 1 (the default) or THREADS grpcio threads.
Printed per row: the calls, p50 / p99 / p99.9 of the client-measured
latency, the cuts against "none", and what hedging cost, from maitred's
/metrics: extra attempts (endpoint picks minus calls, in per cent of the
calls), hedges, hedge wins, the retry budget's refusals and AUTO's delay.
--before BIN runs every maitred row with BIN too, for a table of both
builds from one run. See README.md.

--floor adds two rows that say what the machine itself adds: "direct" (the
clients straight to one upstream, no slow calls) and "floor" (through
maitred, FAILFAST, no slow calls).

Every process is started and stopped by PID; loopback only; free ports."""

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
sys.path.insert(0, HERE)

import grpc  # noqa: E402

import harness  # noqa: E402
from harness import Proc, free_port, to_yaml, pb, pb_grpc, PYTHON, UPSTREAM_PY  # noqa: E402
from kill import metrics  # noqa: E402

PATH = "/maitred.testing.v1.Echo/Unary"

# name -> (maitred's fault block or None for "direct", slow calls on?)
ROWS = collections.OrderedDict([
    ("direct", (None, False)),
    ("floor", ({"mode": "FAILFAST"}, False)),
    ("none", ({"mode": "FAILFAST"}, True)),
    ("AUTO", ({"mode": "FORKING", "forks": 2, "hedge_delay": "AUTO"}, True)),
    ("10ms", ({"mode": "FORKING", "forks": 2, "hedge_delay": "10ms"}, True)),
])


class Run:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.procs = []

    def upstream(self, name, slow, seed):
        if self.args.upstream == "c":
            return self.c_upstream(name, slow, seed)
        ready = os.path.join(self.tmp, name + ".ready")
        argv = [PYTHON, UPSTREAM_PY, "--name", name, "--port", "0", "--ready-file", ready, "--host", "127.0.0.1",
                "--seed", str(seed)]
        if slow:
            argv += ["--slow-fraction", str(self.args.slow_fraction), "--slow-ms", str(self.args.slow_ms)]
        p = Proc(name, argv, self.tmp)
        self.procs.append(p)
        end = time.monotonic() + 30
        while not os.path.exists(ready):
            if not p.alive() or time.monotonic() > end:
                raise SystemExit("upstream %s did not start:\n%s" % (name, p.output()))
            time.sleep(0.05)
        with open(ready) as f:
            return json.load(f)["port"]

    def c_upstream(self, name, slow, seed):
        port = free_port()
        argv = [self.args.grpc_upstream, "-p", str(port), "--seed", str(seed)]
        if slow:
            argv += ["--slow-fraction", str(self.args.slow_fraction), "--slow-ms", str(self.args.slow_ms)]
        p = Proc(name, argv, self.tmp)
        self.procs.append(p)
        end = time.monotonic() + 30
        while not harness.port_accepts(port, 0.5):
            if not p.alive() or time.monotonic() > end:
                raise SystemExit("upstream %s did not start:\n%s" % (name, p.output()))
        return port

    def maitred(self, ports, fault, admin_port):
        svc = {"name": "*", "lb": {"policy": self.args.lb},
               "endpoints": [{"address": "127.0.0.1:%d" % p} for p in ports], "fault": fault}
        if self.args.budget:
            svc["retry_budget"] = {}
        port = free_port()
        cfg = {"listen": "127.0.0.1:%d" % port, "workers": self.args.workers, "drain_timeout": "5s",
               "admin": "127.0.0.1:%d" % admin_port, "services": [svc]}
        path = os.path.join(self.tmp, "maitred.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(cfg) + "\n")
        p = Proc("maitred", [self.maitred_bin, "--config", path, "--log-level", "warn"], self.tmp)
        self.procs.append(p)
        end = time.monotonic() + 30
        while not harness.port_accepts(port, 0.5):
            if not p.alive() or time.monotonic() > end:
                raise SystemExit("maitred did not start:\n%s" % p.output())
        return port

    def stop_all(self):
        for p in reversed(self.procs):
            p.stop(10)
        self.procs = []


def load_grpcio(args, port):
    """THREADS threads, a channel each; every measured call's seconds."""
    stop = threading.Event()
    measure = threading.Event()
    lock = threading.Lock()
    out, errors = [], collections.Counter()

    def loop():
        ch = grpc.insecure_channel("127.0.0.1:%d" % port, options=harness.CHANNEL_OPTIONS)
        stub = pb_grpc.EchoStub(ch)
        req = pb.EchoRequest(payload=b"x" * 16)
        mine, bad = [], collections.Counter()
        while not stop.is_set():
            on = measure.is_set()
            t0 = time.perf_counter()
            try:
                stub.Unary(req, timeout=args.timeout)
                dt = time.perf_counter() - t0
                if on:
                    mine.append(dt)
            except grpc.RpcError as e:
                if on:
                    bad[e.code().name] += 1
        ch.close()
        with lock:
            out.extend(mine)
            errors.update(bad)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(args.threads)]
    for t in threads:
        t.start()
    time.sleep(args.warmup)
    measure.set()
    m0 = args.metrics_now()
    time.sleep(args.duration)
    m1 = args.metrics_now()
    measure.clear()
    stop.set()
    for t in threads:
        t.join(args.timeout + 10)
    return out, errors, m0, m1


def load_h2load(args, port, tmp):
    """h2load -c THREADS -m 1: THREADS closed-loop connections in C; the
    per-request durations from its --log-file (warm-up requests are not
    logged)."""
    body = pb.EchoRequest(payload=b"x" * 16).SerializeToString()
    bpath = os.path.join(tmp, "body.bin")
    with open(bpath, "wb") as f:
        f.write(b"\0" + len(body).to_bytes(4, "big") + body)
    log = os.path.join(tmp, "h2load.log")
    argv = ["h2load", "-c", str(args.threads), "-m", "1", "-D", "%dms" % (args.duration * 1000),
            "--warm-up-time", "%dms" % (args.warmup * 1000), "-d", bpath, "--log-file", log,
            "-H", "content-type: application/grpc", "-H", "te: trailers",
            "http://127.0.0.1:%d%s" % (port, PATH)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # /metrics around the measured part (approximately: h2load says nothing
    # when its warm-up ends).
    time.sleep(args.warmup)
    m0 = args.metrics_now()
    time.sleep(args.duration)
    m1 = args.metrics_now()
    try:
        text = p.communicate(timeout=args.duration + args.warmup + 60)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        p.kill()
        raise SystemExit("h2load did not finish")
    out, errors = [], collections.Counter()
    if not os.path.exists(log):
        raise SystemExit("h2load wrote no log:\n%s" % text)
    with open(log) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3:
                continue
            if parts[1] != "200":
                errors["HTTP %s" % parts[1]] += 1
                continue
            out.append(int(parts[2]) / 1e6)
    if not out:
        raise SystemExit("h2load measured nothing:\n%s" % text)
    return out, errors, m0, m1


def pct(xs, q):
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def one_row(args, name, build, binary):
    fault, slow = ROWS[name]
    tmp = tempfile.mkdtemp(prefix="tail-%s-" % re.sub(r"[^A-Za-z0-9]", "", name))
    run = Run(args, tmp)
    run.maitred_bin = binary
    try:
        ports = [run.upstream("u%d" % i, slow, args.seed + i) for i in range(3)]
        if fault is None:
            port, admin = ports[0], None
            args.metrics_now = collections.Counter
        else:
            admin = free_port()
            port = run.maitred(ports, fault, admin)
            args.metrics_now = lambda: metrics(admin)
        if args.client == "h2load":
            lat, errors, m0, m1 = load_h2load(args, port, tmp)
        else:
            lat, errors, m0, m1 = load_grpcio(args, port)
    finally:
        run.stop_all()
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    lat.sort()
    d = {k: m1[k] - m0[k] for k in set(m0) | set(m1)}
    calls = d.get("maitred_calls_total", 0)
    extra = d.get("maitred_endpoint_picks_total", 0) - calls
    return {
        "row": name, "build": build, "calls": len(lat), "errors": dict(errors),
        "p50": pct(lat, 0.50) * 1e3, "p99": pct(lat, 0.99) * 1e3, "p999": pct(lat, 0.999) * 1e3,
        "extra_pct": 100.0 * extra / calls if calls else float("nan"),
        "hedges": d.get("maitred_hedges_total", 0), "wins": d.get("maitred_hedge_wins_total", 0),
        "budget": d.get("maitred_retry_budget_exhausted_total", 0),
        "delay_ms": m1.get("maitred_hedge_delay_seconds", 0) * 1e3 if fault else 0,
        "auto": fault is not None and fault.get("hedge_delay") == "AUTO",
        "maitred": fault is not None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maitred", default=os.environ.get("MAITRED_BIN") or
                    os.path.join(TOP, "build-rel", "sidecar", "maitred"),
                    help="maitred binary (default build-rel/sidecar/maitred, a release build)")
    ap.add_argument("--upstream", choices=("c", "python"), default="c",
                    help="c: bench/proxy/grpc_upstream (default); python: tests/integration/upstream.py")
    ap.add_argument("--grpc-upstream", default=os.path.join(TOP, "build-rel", "bench", "proxy", "grpc_upstream"),
                    help="the C upstream's binary (default build-rel/bench/proxy/grpc_upstream)")
    ap.add_argument("--before", help="another maitred binary (the build before a change): every maitred row "
                                       "runs with it, then with --maitred, and the table has both")
    ap.add_argument("--rows", default="none,AUTO,10ms", help="comma separated, of: " + ", ".join(ROWS))
    ap.add_argument("--floor", action="store_true", help="add the rows direct and floor first")
    ap.add_argument("--client", choices=("grpcio", "h2load"), default="h2load",
                    help="h2load: h2load -c THREADS -m 1 (C, one event loop; default); grpcio: "
                         "THREADS Python threads, a channel each")
    ap.add_argument("--threads", type=int, default=8, help="closed-loop clients (default 8)")
    ap.add_argument("--duration", type=float, default=10.0, help="measured seconds per row (default 10)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of load before measuring (default 2)")
    ap.add_argument("--timeout", type=float, default=5.0, help="per-call deadline in seconds (default 5)")
    ap.add_argument("--slow-fraction", type=float, default=0.02, help="slow calls per upstream (default 0.02)")
    ap.add_argument("--slow-ms", type=int, default=50, help="a slow call's extra wait (default 50)")
    ap.add_argument("--seed", type=int, default=1, help="seed of upstream i's draws is SEED+i (default 1)")
    ap.add_argument("--lb", default="ROUND_ROBIN", help="maitred's lb.policy (default ROUND_ROBIN)")
    ap.add_argument("--budget", action="store_true", help="give the service the default retry_budget: {}")
    ap.add_argument("--workers", type=int, default=1, help="maitred workers (default 1)")
    ap.add_argument("--keep", action="store_true", help="keep each row's temp dir (configs, logs)")
    args = ap.parse_args()
    if not os.access(args.maitred, os.X_OK):
        raise SystemExit("no maitred binary at %s (--maitred)" % args.maitred)
    if args.upstream == "c" and not os.access(args.grpc_upstream, os.X_OK):
        raise SystemExit("no grpc_upstream binary at %s (--grpc-upstream; make bench/proxy/grpc_upstream)"
                         % args.grpc_upstream)
    names = [n.strip() for n in args.rows.split(",") if n.strip()]
    if args.floor:
        names = ["direct", "floor"] + [n for n in names if n not in ("direct", "floor")]
    for n in names:
        if n not in ROWS:
            raise SystemExit("unknown row %s (of: %s)" % (n, ", ".join(ROWS)))
    if args.before and not os.access(args.before, os.X_OK):
        raise SystemExit("no maitred binary at %s (--before)" % args.before)
    builds = [("before", args.before), ("after", args.maitred)] if args.before else [("", args.maitred)]
    rows = []
    for n in names:
        for build, binary in (builds if ROWS[n][0] is not None else builds[-1:]):
            r = one_row(args, n, build if ROWS[n][0] is not None else "", binary)
            rows.append(r)
            print("%s %s: %d calls, p99.9 %.2f ms %s" % (n, build, r["calls"], r["p999"], r["errors"] or ""),
                  file=sys.stderr, flush=True)
    print("| hedging | build | calls | p50 ms | p99 ms | p99.9 ms | p99 cut | p99.9 cut | extra attempts | hedges "
          "| hedge wins | budget refused | AUTO delay ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        base = next((b for b in rows if b["row"] == "none" and b["build"] == r["build"]), None)
        cut99 = cut999 = "-"
        if base and r is not base and r["row"] not in ("direct", "floor"):
            cut99 = "%.0f %%" % (100.0 * (1 - r["p99"] / base["p99"]))
            cut999 = "%.0f %%" % (100.0 * (1 - r["p999"] / base["p999"]))
        print("| %s | %s | %d | %.2f | %.2f | %.2f | %s | %s | %s | %s | %s | %s | %s |" % (
            r["row"], r["build"] or "-", r["calls"], r["p50"], r["p99"], r["p999"], cut99, cut999,
            "%.2f %%" % r["extra_pct"] if r["maitred"] else "-",
            "%d" % r["hedges"] if r["maitred"] else "-", "%d" % r["wins"] if r["maitred"] else "-",
            "%d" % r["budget"] if r["maitred"] else "-", "%.0f" % r["delay_ms"] if r["auto"] else "-"))
    bad = ["%s %s %s" % (r["row"], r["build"], r["errors"]) for r in rows if r["errors"]]
    if bad:
        print("\nnote: failed calls: %s" % "; ".join(bad))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main()
