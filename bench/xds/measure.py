#!/usr/bin/python3
"""xDS figures: maitred driven by tests/xds/server.js (a state-of-the-world
ADS management server on @grpc/grpc-js) over one ADS stream.

  measure.py eds [ROUNDS] [SIZES]   one cluster of SIZES endpoints (default
                                    10,1000,10000): an EDS update's time to
                                    the first call that uses it, and its CPU
  measure.py mesh [ROUNDS] [N]      N clusters (default 10,000) of 10
                                    endpoints: private memory against the same
                                    maitred with none, one CDS change among
                                    them, an EDS change alone and right
                                    behind a CDS push

A measurement, not a test: it prints figures and judges nothing. Use a
build without sanitizers (deploy/build-dir.sh build && make -C build);
MAITRED_BIN picks another binary. Every wait is bounded (LIMIT s).

How "the first call that uses the new set" is seen: every endpoint of the
probed cluster is an address of 127.0.0.0/8 on one port, and two upstreams
(tests/integration/upstream.py, grpcio) listen on 0.0.0.0, A on one port, B
on another: an update moves every endpoint from A's port to B's (all new
identities: the largest change a set can have), and a client thread calls
Echo through maitred back to back; the first answer from the other
upstream is the first call that used the new set. Only the addresses the
probe calls are connected: maitred connects lazily (a pool per endpoint on
its first pick) and runs no active health check unless the service asks for
one (none here), so the endpoints nobody calls cost nothing but their place
in the snapshot. The fake endpoints of the other clusters (127.x.y.z:9)
are never called.

Clocks: the server stamps when it handed a response to grpc-js
(process.hrtime, CLOCK_MONOTONIC) and when each request came (an ACK is
sent by maitred after the response is applied and the snapshot published);
this script reads the same clock (time.monotonic). CPU: the control
thread's run time (/proc/PID/task/PID/schedstat, ns; the main thread is
the control thread: the ADS client, the decode, the snapshot build and
publish, the old snapshot's reclaim), and every thread's (workers adopting
the snapshot and, with the probe on, serving its calls). Run time is what
load does not inflate; wall-clock figures (the times to ACK and first use)
include waiting for a core on a loaded machine.
"""

import json
import shutil
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
os.environ.setdefault("MAITRED_BIN", os.path.join(TOP, "build", "sidecar", "maitred"))

import grpc  # noqa: E402
import protogen  # noqa: E402
import xds  # noqa: E402
from xds import XdsServer, EDS, CDS, cluster  # noqa: E402

pb, pb_grpc = protogen.load()
BIN = os.environ["MAITRED_BIN"]
UPSTREAM_PY = os.path.join(TOP, "tests", "integration", "upstream.py")
PYTHON = os.environ.get("PYTHON") or "/usr/bin/python3"
ECHO = "maitred.testing.v1.Echo"
LIMIT = 60.0
SETTLE = 0.3  # after an ACK: the workers swap, the old snapshot is reclaimed


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(pred, what, limit=LIMIT, step=0.005):
    end = time.monotonic() + limit
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise SystemExit("timed out waiting for %s" % what)
        time.sleep(step)


def cpu_ns(pid):
    """(control thread's run time, every thread's), ns."""
    def run(tid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                return int(f.read().split()[0])
        except OSError:
            return 0
    return run(pid), sum(run(t) for t in os.listdir("/proc/%d/task" % pid))


def private_kib(pid):
    """smaps_rollup: (Private_Clean + Private_Dirty, Anonymous, Rss), KiB."""
    v = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                v[parts[0][:-1]] = int(parts[1])
    return v["Private_Clean"] + v["Private_Dirty"], v["Anonymous"], v["Rss"]


# --- resources -------------------------------------------------------------------

def fake_address(c, j):
    """Endpoint j of cluster c: 127.0.0.0/8, every one its own address."""
    k = c * 16 + j
    return "127.%d.%d.%d" % (1 + k // 62500, (k // 250) % 250 + 1, k % 250 + 1)


def cla(name, hosts, port):
    return {"cluster_name": name, "endpoints": [{
        "locality": {"zone": "z1"}, "load_balancing_weight": 1, "priority": 0,
        "lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": h, "port_value": port}}}}
                         for h in hosts]}]}


def probe_hosts(n):
    """n loopback addresses for the probed cluster (apart from the fakes)."""
    return ["127.200.%d.%d" % (i // 250, i % 250 + 1) for i in range(n)]


# --- processes -------------------------------------------------------------------

class Upstream:
    def __init__(self, tmp, name):
        ready = os.path.join(tmp, name + ".ready")
        self.log = open(os.path.join(tmp, name + ".log"), "wb")
        self.p = subprocess.Popen([PYTHON, UPSTREAM_PY, "--name", name, "--port", "0", "--host", "0.0.0.0",
                                   "--ready-file", ready], stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: os.path.exists(ready) and os.path.getsize(ready) > 0, "upstream %s" % name)
        time.sleep(0.1)
        with open(ready) as f:
            self.port = json.load(f)["port"]
        self.name = name

    def stop(self):
        self.p.terminate()
        self.p.wait(10)
        self.log.close()


class Maitred:
    def __init__(self, tmp, xds_port, services, env=None):
        self.port, self.admin = free_port(), free_port()
        lines = ["listen: \"127.0.0.1:%d\"" % self.port, "admin: \"127.0.0.1:%d\"" % self.admin, "workers: 2",
                 "drain_timeout: \"1s\"", "log:", "  level: WARN",
                 "xds:", "  server: \"127.0.0.1:%d\"" % xds_port, "  node_id: \"bench\"", "  zone: \"z1\"",
                 "services:"]
        for name, cl in services:
            lines.append("  - name: \"%s\"" % name)
            lines.append("    discovery: { xds: { cluster: \"%s\" } }" % cl)
        self.tmp = tmp
        self.path = os.path.join(tmp, "maitred.yaml")
        with open(self.path, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.logpath = os.path.join(tmp, "maitred.log")
        self.log = open(self.logpath, "ab")
        self.p = subprocess.Popen([BIN, "--config", self.path], stdout=self.log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env)
        self.pid = self.p.pid

        def listening():
            if self.p.poll() is not None:
                raise SystemExit("maitred exited %s: see %s" % (self.p.returncode, self.logpath))
            import socket
            s = socket.socket()
            try:
                s.connect(("127.0.0.1", self.port))
                return True
            except OSError:
                return False
            finally:
                s.close()
        wait_for(listening, "maitred to listen", step=0.05)
        self.ch = grpc.insecure_channel("127.0.0.1:%d" % self.port)
        self.stub = pb_grpc.EchoStub(self.ch)

    def stop(self):
        self.ch.close()
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


class Server(XdsServer):
    """XdsServer with the bench's calls: PATCH, batches, the log from an
    index on, the send times."""

    def __init__(self, tmp):
        super().__init__(tmp)
        self.entries = []  # the server's request log, as read so far

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.control, path), method=method, data=data)
        with urllib.request.urlopen(req, timeout=LIMIT) as r:
            return json.loads(r.read())

    def push(self, method, kind, resources):
        """(version, sent_ns)."""
        r = self.call(method, "/resources/" + kind, resources)
        return r["version"], int(r["sent_ns"]) if r["sent_ns"] else None

    def batch(self, steps):
        return [(r["version"], int(r["sent_ns"]) if r["sent_ns"] else None)
                for r in self.call("POST", "/batch", [dict(method=m, kind=k, resources=r) for m, k, r in steps])]

    def new_log(self):
        part = self.call("GET", "/log?since=%d&brief=1" % len(self.entries))
        self.entries += part
        return part

    def wait_ack(self, type_url, version, what):
        """The arrival time (ns) of maitred's ACK of version; NACK: exit."""
        def found():
            self.new_log()
            for e in self.entries:
                if e["type_url"] == type_url and e["error_detail"]:
                    raise SystemExit("maitred NACKed %s: %s" % (what, e["error_detail"]))
                if (e["type_url"] == type_url and e["response_nonce"] and
                        e["version_info"] == str(version)):
                    return int(e["at_ns"])
            return None
        return wait_for(found, what)


class Probe:
    """Echo calls back to back in a thread: (start, end, instance) each."""

    def __init__(self, stub):
        self.stub, self.seen, self.failed = stub, [], 0
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop_ev.is_set():
            t0 = time.monotonic_ns()
            try:
                inst = self.stub.Unary(pb.EchoRequest(), timeout=5).instance
            except grpc.RpcError:
                self.failed += 1
                continue
            except ValueError:
                return  # the channel closed under it (an abort)
            self.seen.append((t0, time.monotonic_ns(), inst))

    def first(self, inst, after_ns):
        """The end time of the first call started after after_ns... that
        inst answered (calls started before the update count too: a call
        routed after the swap may have started just before it)."""
        for t0, t1, i in list(self.seen):
            if i == inst and t1 >= after_ns:
                return t0, t1
        return None

    def stop(self):
        self.stop_ev.set()
        self.t.join(10)


def calls_reach(stub, inst, what):
    def ok():
        try:
            return stub.Unary(pb.EchoRequest(), timeout=5).instance == inst
        except grpc.RpcError:
            return False
    wait_for(ok, what, step=0.05)


def fmt_ms(ns):
    return "%.2f" % (ns / 1e6)


def summary(label, xs, unit_ns=1e6, unit="ms"):
    """Median, mean, min, max. For CPU read the mean: the idle tick (once a
    second) falls in some rounds' windows and not others, and what is
    taken off is its average over the window."""
    xs = sorted(xs)
    return "%s median %.3f %s, mean %.3f (min %.3f, max %.3f, n %d)" % (
        label, statistics.median(xs) / unit_ns, unit, statistics.mean(xs) / unit_ns, xs[0] / unit_ns,
        xs[-1] / unit_ns, len(xs))


def eds_update(server, m, probe_on, name, hosts, ups, k):
    """One EDS update of cluster name: every endpoint moves to ups[k % 2]'s
    port. Returns a dict of figures."""
    to = ups[k % 2]
    w0 = time.monotonic_ns()
    c0, p0 = cpu_ns(m.pid)
    probe = Probe(m.stub) if probe_on else None
    if probe:
        wait_for(lambda: len(probe.seen) >= 3, "the probe's first calls")
    version, sent = server.push("PATCH", "endpoint", [cla(name, hosts, to.port)])
    ack = server.wait_ack(EDS, version, "the EDS update")
    out = {"ack": ack - sent}
    if probe:
        t0, t1 = wait_for(lambda: probe.first(to.name, sent), "a call answered by " + to.name)
        out["first_end"] = t1 - sent
        out["first_start"] = t0 - sent
        probe.stop()
        out["failed"] = probe.failed
        out["call_ns"] = statistics.median([b - a for a, b, _ in probe.seen])
    time.sleep(SETTLE)
    c1, p1 = cpu_ns(m.pid)
    out["ctl"], out["all"] = c1 - c0, p1 - p0
    out["window"] = time.monotonic_ns() - w0
    return out


PERF_HZ = 999
# The xDS client's own (sidecar/control/xds*.c) by their names since the
# split of xds.c: the figures of bench/xds/README.md before it name them
# without the xds_ prefix.
PERF_SYMBOLS = ("xds_on_msg", "envoy__service__discovery__v3__discovery_response__unpack", "xds_on_clusters",
                "xds_on_endpoints", "mtd_xds_cluster_parse", "mtd_xds_cla_parse", "xds_retable", "xds_apply_dirty",
                "runtime_assemble", "endpoint_new", "mtd_disc_match", "mtd_control_publish",
                "mtd_history_tick")


def perf_split(pid, fn, tmp, label):
    """Run fn() while perf samples the control thread (PERF_HZ samples per
    second of its run time, DWARF call chains); the run time under each of
    PERF_SYMBOLS (children included), ms, from the sample counts. None
    without perf (or PERF=0)."""
    if os.environ.get("PERF", "1") == "0" or not shutil.which("perf"):
        fn()
        return None
    data = os.path.join(tmp, "perf-%s.data" % label)
    rec = subprocess.Popen(["perf", "record", "-q", "-F", str(PERF_HZ), "--call-graph", "dwarf,16384", "-t",
                            str(pid), "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    try:
        fn()
    finally:
        rec.send_signal(2)
        rec.wait(60)
    return perf_parse(data)


def perf_parse(data):
    rep = subprocess.run(["perf", "report", "-i", data, "--children", "-n", "--sort", "symbol", "--stdio",
                          "-g", "none"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=120).stdout.decode()
    out, total = {}, 0
    for line in rep.splitlines():
        if line.startswith("# Samples:"):
            t = line.split()[2]
            total = int(float(t[:-1]) * 1000) if t.endswith("K") else int(t)
        parts = line.split()
        if len(parts) >= 5 and parts[0].endswith("%") and "[.]" in parts:
            sym = parts[parts.index("[.]") + 1].split(".")[0]
            if sym in PERF_SYMBOLS:  # children's share of every sample, as ms
                out[sym] = max(out.get(sym, 0), float(parts[0][:-1]) / 100 * total * 1000.0 / PERF_HZ)
    out["all samples"] = total * 1000.0 / PERF_HZ
    return out


def print_split(split, rounds):
    print("  perf of the control thread over %d more such rounds (and the idle seconds between), per round:"
          % rounds)
    for sym in ("all samples",) + PERF_SYMBOLS:
        if sym in split:
            print("    %-60s %8.1f ms" % (sym, split[sym] / rounds))


def idle_rate(m, secs=1.0):
    """The control thread's and all threads' run time per second while idle
    (its ticks), ns/s."""
    c0, p0 = cpu_ns(m.pid)
    time.sleep(secs)
    c1, p1 = cpu_ns(m.pid)
    return (c1 - c0) / secs, (p1 - p0) / secs


# --- the two measurements ---------------------------------------------------------

def run_eds(tmp, rounds, sizes):
    server = Server(tmp).start()
    ups = [Upstream(tmp, "A"), Upstream(tmp, "B")]
    m = Maitred(tmp, server.port, [(ECHO, "echo")])
    try:
        server.push("PUT", "cluster", [cluster("echo")])
        print("maitred %s, pid %d; load average %s" % (BIN, m.pid, open("/proc/loadavg").read().split()[:3]))
        rows = []
        for n in sizes:
            hosts = probe_hosts(n)
            v, _ = server.push("PUT", "endpoint", [cla("echo", hosts, ups[1].port)])
            server.wait_ack(EDS, v, "the first assignment of %d" % n)
            calls_reach(m.stub, "B", "calls to reach B")
            idle_c, idle_p = idle_rate(m, 2.0)
            with_probe = [eds_update(server, m, True, "echo", hosts, ups, k) for k in range(rounds)]
            quiet = [eds_update(server, m, False, "echo", hosts, ups, k + rounds) for k in range(rounds)]
            # The same rounds again under perf: the control thread's run
            # time in xds_on_msg (the response's decode, translation, apply and
            # publish), apart from its idle tick.
            split = perf_split(m.pid, lambda: [eds_update(server, m, False, "echo", hosts, ups, k)
                                               for k in range(rounds)], tmp, "eds%d" % n)
            # The idle run time (the control thread's 1 s tick) over each
            # round's window is taken off.
            ctl = [r["ctl"] - idle_c * r["window"] / 1e9 for r in quiet]
            allc = [r["all"] - idle_p * r["window"] / 1e9 for r in quiet]
            row = dict(n=n, first=[r["first_end"] for r in with_probe], first_start=[r["first_start"] for r in with_probe],
                       ack=[r["ack"] for r in quiet], ack_probe=[r["ack"] for r in with_probe], ctl=ctl, all=allc,
                       failed=sum(r["failed"] for r in with_probe),
                       call=statistics.median(r["call_ns"] for r in with_probe), idle=idle_c)
            rows.append(row)
            print("\nEDS update of one cluster of %d endpoints (all moved to the other upstream's port), %d rounds"
                  % (n, rounds))
            print("  " + summary("response sent -> first call answered by the new set ends:", row["first"]))
            print("  " + summary("  ... that call started (negative: before the response was sent):",
                                 row["first_start"]))
            print("  " + summary("response sent -> maitred's ACK arrives (probe off):", row["ack"]))
            print("  " + summary("control thread CPU per update:", ctl))
            print("  " + summary("  per endpoint:", [c / n for c in ctl], 1e3, "us"))
            print("  " + summary("all threads' CPU per update:", allc))
            print("  " + summary("  per endpoint:", [c / n for c in allc], 1e3, "us"))
            print("  probe calls: median %.2f ms each, %d failed; control thread idle: %.2f ms/s"
                  % (row["call"] / 1e6, row["failed"], idle_c / 1e6))
            if split:
                print_split(split, rounds)
                print("    xds_on_msg per endpoint: %.3f us" % (split.get("xds_on_msg", 0) / rounds / n * 1e3))
        print("\nload average after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
        return rows
    finally:
        m.stop()
        for u in ups:
            u.stop()
        server.stop()


def mesh_names(n):
    """(service, cluster) pairs; the first is Echo's, which the probe calls."""
    out = [(ECHO, "outbound|8080||svc00000.bench.svc.cluster.local")]
    for i in range(1, n):
        out.append(("bench.v1.Svc%05d" % i, "outbound|8080||svc%05d.bench.svc.cluster.local" % i))
    return out


def mesh_clusters(names, lb_of=lambda i: "ROUND_ROBIN", timeout="1s"):
    return [cluster(cl, lb_policy=lb_of(i), connect_timeout=timeout) for i, (_, cl) in enumerate(names)]


def run_mesh(tmp, rounds, n):
    names = mesh_names(n)
    server = Server(tmp).start()
    ups = [Upstream(tmp, "A"), Upstream(tmp, "B")]
    echo_cl = names[0][1]
    echo_hosts = probe_hosts(10)
    clas = [cla(cl, [fake_address(i, j) for j in range(10)], 9) for i, (_, cl) in enumerate(names)]
    clas[0] = cla(echo_cl, echo_hosts, ups[1].port)
    t0 = time.monotonic()
    m = Maitred(tmp, server.port, names)
    try:
        print("maitred %s, pid %d: %d services on xDS, listening after %.2f s; load average %s"
              % (BIN, m.pid, n, time.monotonic() - t0, " ".join(open("/proc/loadavg").read().split()[:3])))
        # The same maitred with none: its CDS request went out, nothing came.
        wait_for(lambda: any(e["type_url"] == CDS for e in server.new_log()), "maitred's CDS request")
        time.sleep(2)
        none = private_kib(m.pid)
        c0, _ = cpu_ns(m.pid)
        v, sent = server.push("PUT", "cluster", mesh_clusters(names))
        ack = server.wait_ack(CDS, v, "%d clusters" % n)
        print("\n%d clusters: sent -> ACK %s ms" % (n, fmt_ms(ack - sent)))
        v, sent = server.push("PUT", "endpoint", clas)
        ack = server.wait_ack(EDS, v, "%d assignments" % n)
        calls_reach(m.stub, "B", "calls to reach B")
        c1, _ = cpu_ns(m.pid)
        print("%d assignments of 10: sent -> ACK %s ms; control thread CPU for both pushes %s ms"
              % (n, fmt_ms(ack - sent), fmt_ms(c1 - c0)))
        time.sleep(3)
        full = private_kib(m.pid)
        print("\nprivate memory (smaps_rollup Private_Clean+Private_Dirty / Anonymous / Rss, KiB):")
        print("  no resources:          %7d / %7d / %7d" % none)
        print("  %d x 10 endpoints: %7d / %7d / %7d" % ((n,) + full))
        d = (full[0] - none[0]) * 1024
        print("  difference: %.1f MiB = %.0f B per cluster (with its 10 endpoints), %.0f B per endpoint if all"
              " of it were the endpoints'" % (d / 2**20, d / n, d / (10 * n)))
        idle_c, _ = idle_rate(m, 3.0)
        print("control thread while idle: %.1f ms/s (its 1 s tick over %d endpoints)" % (idle_c / 1e6, 10 * n))

        # One CDS change among n (one cluster's lb_policy): the whole list
        # is sent again (state of the world); one service changes.
        cds = []

        def cds_rounds():
            for k in range(rounds):
                cds_round(k)

        def cds_round(k):
            lb = "LEAST_REQUEST" if k % 2 == 0 else "ROUND_ROBIN"
            w0 = time.monotonic_ns()
            ca, _ = cpu_ns(m.pid)
            v, sent = server.push("PATCH", "cluster", [cluster(names[5][1], lb_policy=lb, connect_timeout="1s")])
            ack = server.wait_ack(CDS, v, "one CDS change")
            time.sleep(SETTLE)
            cb, _ = cpu_ns(m.pid)
            cds.append((ack - sent, cb - ca - idle_c * (time.monotonic_ns() - w0) / 1e9))
        cds_rounds()
        # The same rounds again under perf (its sampling costs the thread
        # some run time: apart from the figures above).
        plain, cds = cds, []
        split = perf_split(m.pid, cds_rounds, m.tmp, "cds")
        cds = plain
        print("\none CDS change among %d (lb_policy of one cluster; the server sends all %d), %d rounds:"
              % (n, n, rounds))
        print("  " + summary("sent -> ACK:", [a for a, _ in cds]))
        print("  " + summary("control thread CPU (idle rate taken off):", [c for _, c in cds]))
        if split:
            print_split(split, rounds)

        # An EDS change alone: the Echo cluster's 10 endpoints move.
        alone = [eds_update(server, m, True, echo_cl, echo_hosts, ups, k) for k in range(rounds)]
        split = perf_split(m.pid, lambda: [eds_update(server, m, False, echo_cl, echo_hosts, ups, k)
                                           for k in range(rounds)], m.tmp, "eds")
        print("\nan EDS change of one cluster of 10 among %d (the server sends all %d assignments):" % (n, n))
        print("  " + summary("sent -> first call answered by the new set ends:", [r["first_end"] for r in alone]))
        print("  " + summary("sent -> ACK:", [r["ack"] for r in alone]))
        print("  " + summary("control thread CPU (idle rate taken off):",
                             [r["ctl"] - idle_c * r["window"] / 1e9 for r in alone]))
        if split:
            print_split(split, rounds)

        # The same EDS change right behind a CDS push in flight: every
        # cluster changed (connect_timeout), then the EDS change, pushed
        # back to back by the server (one batch): on the stream the EDS
        # response follows the CDS response.
        for label, every in (("every cluster changed", True), ("one cluster changed", False)):
            behind = []
            for k in range(rounds):
                to = ups[(k + rounds) % 2]
                probe = Probe(m.stub)
                wait_for(lambda: len(probe.seen) >= 3, "the probe's first calls")
                timeout = "%ds" % (2 + k % 2)
                if every:
                    cds_step = ("PUT", "cluster", mesh_clusters(names, timeout=timeout))
                else:
                    cds_step = ("PATCH", "cluster", [cluster(names[7][1], connect_timeout=timeout)])
                (cv, csent), (ev, esent) = server.batch([cds_step, ("PATCH", "endpoint",
                                                                    [cla(echo_cl, echo_hosts, to.port)])])
                cack = server.wait_ack(CDS, cv, "the CDS push")
                eack = server.wait_ack(EDS, ev, "the EDS change")
                t0_, t1_ = wait_for(lambda: probe.first(to.name, esent), "a call answered by " + to.name)
                probe.stop()
                behind.append(dict(first=t1_ - esent, cds_ack=cack - csent, eds_ack=eack - esent,
                                   gap=esent - csent, failed=probe.failed))
                time.sleep(SETTLE)
            print("\nthe same EDS change right behind a CDS push (%s), %d rounds:" % (label, rounds))
            print("  " + summary("CDS sent -> EDS sent (the server's own encode of the CDS):",
                                 [r["gap"] for r in behind]))
            print("  " + summary("CDS sent -> CDS ACK:", [r["cds_ack"] for r in behind]))
            print("  " + summary("EDS sent -> first call answered by the new set ends:",
                                 [r["first"] for r in behind]))
            print("  " + summary("EDS sent -> EDS ACK:", [r["eds_ack"] for r in behind]))
            print("  probe calls failed: %d" % sum(r["failed"] for r in behind))
        print("\nprivate memory at the end: %d / %d / %d KiB" % private_kib(m.pid))
        print("load average after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    finally:
        m.stop()
        for u in ups:
            u.stop()
        server.stop()


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "eds"
    if xds.node_missing():
        raise SystemExit(xds.node_missing())
    if not os.access(BIN, os.X_OK):
        raise SystemExit("no maitred at %s (deploy/build-dir.sh build && make -C build; or MAITRED_BIN)" % BIN)
    tmp = tempfile.mkdtemp(prefix="maitred-bench-xds-")
    if what == "eds":
        rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
        sizes = [int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "10,1000,10000").split(",")]
        run_eds(tmp, rounds, sizes)
    elif what == "mesh":
        rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
        rounds += rounds % 2  # even: each phase ends where the next expects
        n = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
        run_mesh(tmp, rounds, n)
    else:
        raise SystemExit(__doc__)
    print("logs: %s" % tmp)


if __name__ == "__main__":
    main()
