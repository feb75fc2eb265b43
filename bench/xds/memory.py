#!/usr/bin/python3
"""Private memory of N xDS clusters of K endpoints (measure.py mesh's
memory phase alone, about 30 s a size): for each K, a fresh maitred with N
services on xDS (2 workers), its private memory (smaps_rollup
Private_Clean + Private_Dirty) once its CDS request went out and nothing
came, and 3 s after the N clusters and the N assignments of K endpoints
each were applied. Nothing is called: every endpoint is idle (the common
case of a mesh). The difference between two K, over N x (K1 - K0), is
what an endpoint costs alone; over N, with the first K, a cluster.

  memory.py [N] [K,K...]      default 10000 and 10,1

The endpoints are 127.x.y.z:9 (11-15 bytes of text); POD=1 makes them
pod addresses as a mesh's control plane sends them, 10.244-246.x.y:8080
(16-19 bytes: what an endpoint's allocation holds depends on it).
Each size is measured twice: 3 s after the assignments were applied, and
settled, SETTLE_S later, once the control thread has handed malloc's free
pages back (what the node pays from then on).
A measurement, not a test; MAITRED_BIN picks the binary (a build without
sanitizers), as for measure.py. HEAPPROF=1 also runs maitred under
heapprof.c (built here with cc) and prints, per cluster, the live malloc
chunks by the code that allocated them that the clusters and assignments
added (the two dumps' difference; chunks, not touched pages: the
private figures above then include the profiler's own table).
"""

import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402
from measure import (CDS, EDS, Maitred, Server, cla, fake_address, mesh_clusters, mesh_names,  # noqa: E402
                     private_kib, wait_for)


SETTLE_S = 13  # past publish.c's HEAP_QUIET_MS (10 s) and its next tick


def heapprof_env(tmp, k):
    """The environment maitred runs in under heapprof.so, or None."""
    if not os.environ.get("HEAPPROF"):
        return None
    so = os.path.join(tmp, "heapprof.so")
    if not os.path.exists(so):
        subprocess.check_call(["cc", "-O2", "-shared", "-fPIC", "-o", so,
                               os.path.join(os.path.dirname(os.path.abspath(__file__)), "heapprof.c"),
                               "-ldl", "-lpthread"])
    return dict(os.environ, LD_PRELOAD=so, HEAPPROF_OUT=os.path.join(tmp, "heap-%d" % k))


def heap_dump(env):
    """Asks heapprof for a dump; its live chunks by caller: {(obj, addr): (n, bytes)}."""
    out = env["HEAPPROF_OUT"]
    seq = heap_dump.seq = getattr(heap_dump, "seq", {})
    i = seq.get(out, 0)
    seq[out] = i + 1
    open(out + ".req", "w").close()
    wait_for(lambda: os.path.exists("%s.%d" % (out, i)), "the heap profile")
    d = {}
    for line in open("%s.%d" % (out, i)):
        n, b, addr, obj = line.split(None, 3)
        d[(obj.strip(), addr)] = (int(n), int(b))
    return d


def heap_report(before, after, n, top=30):
    diff = []
    for key, (cn, cb) in after.items():
        bn, bb = before.get(key, (0, 0))
        if cb != bb:
            diff.append((cb - bb, cn - bn, key))
    diff.sort(reverse=True)
    total = sum(d[0] for d in diff)
    print("  heap profile: %.0f B of chunks per cluster; largest, by caller:" % (total / n))
    for db, dn, (obj, addr) in diff[:top]:
        where = "%s+%s" % (os.path.basename(obj), addr)
        try:
            r = subprocess.run(["addr2line", "-f", "-i", "-C", "-e", obj, "%x" % (int(addr, 16) - 1)],
                               capture_output=True, text=True, timeout=30).stdout.split("\n")
            where = "%s (%s)" % (r[0], os.path.basename(r[1])) if r and r[0] != "??" else where
        except (OSError, subprocess.SubprocessError):
            pass
        print("  %8.1f B %7.2f chunks  %s" % (db / n, dn / n, where))


def pod_address(c, j):
    """Endpoint j of cluster c as a pod address (10.244.0.0/15 and up), every one its own."""
    k = c * 16 + j
    return "10.%d.%d.%d" % (244 + k // 62500, (k // 250) % 250 + 1, k % 250 + 1)


def one(tmp, n, k):
    names = mesh_names(n)
    server = Server(tmp).start()
    env = heapprof_env(tmp, k)
    m = Maitred(tmp, server.port, names, env=env)
    try:
        wait_for(lambda: any(e["type_url"] == CDS for e in server.new_log()), "maitred's CDS request")
        time.sleep(SETTLE_S)  # the baseline settled too: a fair difference
        none = private_kib(m.pid)
        heap0 = heap_dump(env) if env else None
        v, _ = server.push("PUT", "cluster", mesh_clusters(names))
        server.wait_ack(CDS, v, "%d clusters" % n)
        address, port = (pod_address, 8080) if os.environ.get("POD") else (fake_address, 9)
        v, _ = server.push("PUT", "endpoint",
                           [cla(cl, [address(i, j) for j in range(k)], port) for i, (_, cl) in enumerate(names)])
        server.wait_ack(EDS, v, "%d assignments" % n)
        time.sleep(3)
        full = private_kib(m.pid)
        if env:
            heap_report(heap0, heap_dump(env), n)
        # Settled: once no generation has changed for 10 s, the control
        # thread hands malloc's free pages back (publish.c give_back_heap):
        # the freed response buffers and the old generations' blocks.
        time.sleep(SETTLE_S)
        settled = private_kib(m.pid)
        return none, full, settled
    finally:
        m.stop()
        server.stop()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    ks = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "10,1").split(",")]
    tmp = tempfile.mkdtemp(prefix="maitred-bench-xds-mem-")
    print("maitred %s, %d services on xDS, %s endpoints; load average %s"
          % (measure.BIN, n, "pod (10.244.x.y:8080)" if os.environ.get("POD") else "127.x.y.z:9",
             " ".join(open("/proc/loadavg").read().split()[:3])))
    full, settled = {}, {}
    for k in ks:
        none, full[k], settled[k] = one(tmp, n, k)
        d = (full[k][0] - none[0]) * 1024
        print("%d x %d endpoints: private %d KiB (none: %d KiB; Anonymous %d, Rss %d): %.0f B per cluster of %d"
              % (n, k, full[k][0], none[0], full[k][1], full[k][2], d / n, k))
        print("  settled (%d s later, malloc's free pages given back): private %d KiB: %.0f B per cluster of %d"
              % (SETTLE_S, settled[k][0], (settled[k][0] - none[0]) * 1024 / n, k))
    for a, b in zip(ks, ks[1:]):
        if a != b:
            print("per endpoint (%d vs %d a cluster): %.0f B; settled %.0f B"
                  % (a, b, (full[a][0] - full[b][0]) * 1024 / (n * (a - b)),
                     (settled[a][0] - settled[b][0]) * 1024 / (n * (a - b))))
    print("logs: %s" % tmp)


if __name__ == "__main__":
    main()
