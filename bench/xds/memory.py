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

A measurement, not a test; MAITRED_BIN picks the binary (a build without
sanitizers), as for measure.py.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402
from measure import (CDS, EDS, Maitred, Server, cla, fake_address, mesh_clusters, mesh_names,  # noqa: E402
                     private_kib, wait_for)


def one(tmp, n, k):
    names = mesh_names(n)
    server = Server(tmp).start()
    m = Maitred(tmp, server.port, names)
    try:
        wait_for(lambda: any(e["type_url"] == CDS for e in server.new_log()), "maitred's CDS request")
        time.sleep(2)
        none = private_kib(m.pid)
        v, _ = server.push("PUT", "cluster", mesh_clusters(names))
        server.wait_ack(CDS, v, "%d clusters" % n)
        v, _ = server.push("PUT", "endpoint",
                           [cla(cl, [fake_address(i, j) for j in range(k)], 9) for i, (_, cl) in enumerate(names)])
        server.wait_ack(EDS, v, "%d assignments" % n)
        time.sleep(3)
        return none, private_kib(m.pid)
    finally:
        m.stop()
        server.stop()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    ks = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "10,1").split(",")]
    tmp = tempfile.mkdtemp(prefix="maitred-bench-xds-mem-")
    print("maitred %s, %d services on xDS; load average %s"
          % (measure.BIN, n, " ".join(open("/proc/loadavg").read().split()[:3])))
    full = {}
    for k in ks:
        none, full[k] = one(tmp, n, k)
        d = (full[k][0] - none[0]) * 1024
        print("%d x %d endpoints: private %d KiB (none: %d KiB; Anonymous %d, Rss %d): %.0f B per cluster of %d"
              % (n, k, full[k][0], none[0], full[k][1], full[k][2], d / n, k))
    for a, b in zip(ks, ks[1:]):
        if a != b:
            print("per endpoint (%d vs %d a cluster): %.0f B"
                  % (a, b, (full[a][0] - full[b][0]) * 1024 / (n * (a - b))))
    print("logs: %s" % tmp)


if __name__ == "__main__":
    main()
