#!/usr/bin/python3
"""bench/fault/kill.py: steady load through maitred to three grpcio upstreams,
one of them SIGKILLed and restarted, per fault mode.

For each mode: fresh upstreams (tests/integration/upstream.py) and a fresh
maitred; THREADS client threads, each on its own channel, make sequential
idempotent unary calls (Echo/Unary) for a baseline phase, then for a kill
phase in which one upstream is SIGKILLed at a quarter of the phase and
started again on the same port at half of it. Printed per mode: calls,
calls failed (and their statuses), p50/p99 of the baseline and of the kill
phase, the added p99, and what the policy spent, read from maitred's
/metrics (maitred_retries_total, maitred_transparent_retries_total, and the
attempts beyond one per call: endpoint picks minus calls). See README.md.

Every process is started and stopped by PID; loopback only; free ports."""

import argparse
import collections
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))

import grpc  # noqa: E402

import harness  # noqa: E402
from harness import Proc, free_port, to_yaml, pb, pb_grpc, PYTHON, UPSTREAM_PY  # noqa: E402

OD = {"consecutive_failures": 5, "base_ejection_time": "30s", "max_ejection_percent": 50}
HC = {"interval": "1s", "timeout": "500ms", "unhealthy_threshold": 2, "healthy_threshold": 2}

# name -> the service's extra config
MODES = collections.OrderedDict([
    ("FAILFAST", {"fault": {"mode": "FAILFAST"}}),
    ("FAILOVER", {"fault": {"mode": "FAILOVER", "retries": 2}}),
    ("FAILSAFE", {"fault": {"mode": "FAILSAFE"}}),
    ("FORKING", {"fault": {"mode": "FORKING", "forks": 2, "hedge_delay": "20ms"}}),
    ("FAILFAST+od+hc", {"fault": {"mode": "FAILFAST"}, "outlier_detection": OD, "health_check": HC}),
    ("FAILOVER+od+hc", {"fault": {"mode": "FAILOVER", "retries": 2}, "outlier_detection": OD,
                        "health_check": HC}),
])


class Run:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.procs = []

    def upstream(self, name, port=0, health=None):
        ready = os.path.join(self.tmp, name + ".ready")
        if os.path.exists(ready):
            os.unlink(ready)
        argv = [PYTHON, UPSTREAM_PY, "--name", name, "--port", str(port), "--ready-file", ready,
                "--host", "127.0.0.1"]
        if health:
            argv += ["--health-file", health]
        p = Proc(name, argv, self.tmp)
        self.procs.append(p)
        end = time.monotonic() + 30
        while not os.path.exists(ready):
            if not p.alive() or time.monotonic() > end:
                raise SystemExit("upstream %s did not start:\n%s" % (name, p.output()))
            time.sleep(0.05)
        with open(ready) as f:
            import json
            info = json.load(f)
        return p, info["port"]

    def maitred(self, ports, extra, admin_port):
        svc = {"name": "*", "lb": {"policy": "ROUND_ROBIN"},
               "endpoints": [{"address": "127.0.0.1:%d" % p} for p in ports]}
        svc.update(extra)
        port = free_port()
        cfg = {"listen": "127.0.0.1:%d" % port, "workers": self.args.workers, "drain_timeout": "5s",
               "admin": "127.0.0.1:%d" % admin_port, "services": [svc]}
        path = os.path.join(self.tmp, "maitred.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(cfg) + "\n")
        p = Proc("maitred", [self.args.maitred, "--config", path, "--log-level", "warn"], self.tmp)
        self.procs.append(p)
        end = time.monotonic() + 30
        while not harness.port_accepts(port, 0.5):
            if not p.alive() or time.monotonic() > end:
                raise SystemExit("maitred did not start:\n%s" % p.output())
        return p, port

    def stop_all(self):
        for p in reversed(self.procs):
            p.stop(10)
        self.procs = []


def metrics(admin_port):
    """{metric name: sum over its label sets} from /metrics."""
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin_port, timeout=10).read().decode()
    out = collections.Counter()
    for line in body.splitlines():
        if not line or line[0] == "#":
            continue
        m = re.match(r"([a-z_]+)(\{[^}]*\})? (\S+)$", line)
        if m:
            out[m.group(1)] += float(m.group(3))
    return out


class Load:
    """THREADS closed-loop clients; every call's (start, seconds, code)."""

    def __init__(self, target, threads, timeout):
        self.target = target
        self.timeout = timeout
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results = []
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(threads)]

    def loop(self):
        ch = grpc.insecure_channel(self.target, options=harness.CHANNEL_OPTIONS)
        stub = pb_grpc.EchoStub(ch)
        req = pb.EchoRequest(payload=b"x" * 16)
        mine = []
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                stub.Unary(req, timeout=self.timeout)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
            mine.append((t0, time.monotonic() - t0, code))
        ch.close()
        with self.lock:
            self.results.extend(mine)

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(self.timeout + 10)
        return self.results


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def one_mode(args, name, extra):
    tmp = tempfile.mkdtemp(prefix="kill-%s-" % re.sub(r"[^A-Za-z]", "", name))
    run = Run(args, tmp)
    try:
        health = []
        for i in range(3):
            h = os.path.join(tmp, "u%d.health" % i)
            with open(h, "w") as f:
                f.write("SERVING")
            health.append(h)
        ups = [run.upstream("u%d" % i, health=health[i]) for i in range(3)]
        ports = [p for _, p in ups]
        admin = free_port()
        _, port = run.maitred(ports, extra, admin)
        load = Load("127.0.0.1:%d" % port, args.threads, args.timeout)
        load.start()
        time.sleep(args.warmup)
        m0 = metrics(admin)
        t_base = time.monotonic()
        time.sleep(args.duration)
        t_kill = time.monotonic()
        time.sleep(args.duration / 4)
        victim = ups[0][0]
        victim.kill()  # SIGKILL, by PID
        t_killed = time.monotonic()
        time.sleep(args.duration / 4)
        restarted, _ = run.upstream("u0-again", port=ports[0], health=health[0])
        t_back = time.monotonic()
        time.sleep(args.duration / 2)
        t_end = time.monotonic()
        m1 = metrics(admin)
        res = load.finish()
    finally:
        run.stop_all()
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    base = [r for r in res if t_base <= r[0] < t_kill]
    kill = [r for r in res if t_kill <= r[0] < t_end]
    fails = collections.Counter(r[2] for r in kill if r[2] != "OK")
    base_fails = sum(1 for r in base if r[2] != "OK")
    d = {k: m1[k] - m0[k] for k in set(m0) | set(m1)}
    calls = d.get("maitred_calls_total", 0)
    extra_attempts = d.get("maitred_endpoint_picks_total", 0) - calls
    return {
        "mode": name,
        "base_calls": len(base), "base_failed": base_fails,
        "calls": len(kill), "failed": sum(fails.values()), "statuses": dict(fails),
        "p50_base": pct([r[1] for r in base], 0.50) * 1e3, "p99_base": pct([r[1] for r in base], 0.99) * 1e3,
        "p50_kill": pct([r[1] for r in kill], 0.50) * 1e3, "p99_kill": pct([r[1] for r in kill], 0.99) * 1e3,
        "retries": d.get("maitred_retries_total", 0),
        "transparent": d.get("maitred_transparent_retries_total", 0),
        "budget_refused": d.get("maitred_retry_budget_exhausted_total", 0),
        "extra_attempts": extra_attempts,
        "failsafe": d.get("maitred_failsafe_answers_total", 0),
        "down_s": t_back - t_killed,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maitred", default=os.environ.get("MAITRED_BIN") or
                    os.path.join(TOP, "build-rel", "sidecar", "maitred"),
                    help="maitred binary (default build-rel/sidecar/maitred, a release build)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma separated, of: " + ", ".join(MODES))
    ap.add_argument("--threads", type=int, default=8, help="client threads (default 8)")
    ap.add_argument("--duration", type=float, default=8.0,
                    help="seconds of each phase, baseline and kill (default 8)")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of load before measuring (default 1)")
    ap.add_argument("--timeout", type=float, default=5.0, help="per-call deadline in seconds (default 5)")
    ap.add_argument("--workers", type=int, default=1, help="maitred workers (default 1)")
    ap.add_argument("--keep", action="store_true", help="keep each mode's temp dir (configs, logs)")
    args = ap.parse_args()
    if not os.access(args.maitred, os.X_OK):
        raise SystemExit("no maitred binary at %s (--maitred)" % args.maitred)
    rows = []
    for name in args.modes.split(","):
        name = name.strip()
        if name not in MODES:
            raise SystemExit("unknown mode %s" % name)
        r = one_mode(args, name, MODES[name])
        rows.append(r)
        print("%s: %d calls, %d failed %s" % (name, r["calls"], r["failed"], r["statuses"] or ""),
              file=sys.stderr, flush=True)
    print("| mode | calls (kill phase) | failed | statuses | p50 base / kill ms | p99 base / kill ms "
          "| added p99 ms | retries | transparent | extra attempts | FAILSAFE answers |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        st = ", ".join("%s %d" % kv for kv in sorted(r["statuses"].items())) or "-"
        print("| %s | %d | %d | %s | %.2f / %.2f | %.2f / %.2f | %+.2f | %d | %d | %d | %d |" % (
            r["mode"], r["calls"], r["failed"], st, r["p50_base"], r["p50_kill"], r["p99_base"],
            r["p99_kill"], r["p99_kill"] - r["p99_base"], r["retries"], r["transparent"],
            r["extra_attempts"], r["failsafe"]))
    bad = [r["mode"] for r in rows if r["base_failed"]]
    if bad:
        print("\nnote: calls failed in the baseline phase of %s" % ", ".join(bad))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main()
