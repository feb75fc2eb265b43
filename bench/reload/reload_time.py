#!/usr/bin/env python3
"""The time one reload takes at 1,000 services (issue 23, closing note: a
reload made a transaction must not be more than 20 % slower).

Generates a config of SERVICES services x ENDPOINTS static endpoints each
(loopback addresses nothing listens on: no call is made, so none is
connected), starts maitred on it (a release build: build/, made by
`deploy/build-dir.sh build && make -C build`), then RELOADS times: rewrites
the file with a trivial change (drain_timeout flips between 5s and 6s),
sends SIGHUP, waits for the "applied" log line, and lets the workers adopt
the new snapshot and free the old one (SETTLE seconds). Per reload:

  wall   the log's timestamps: "SIGHUP: reloading" to "reload: ... applied"
         (the control thread's work; ms resolution)
  cpu    every thread's CPU time across the reload and the settle: the sum
         of /proc/PID/task/*/schedstat's run time (ns), and /proc/PID/stat's
         utime+stime (clock ticks, coarse) as a cross-check
  faults the minor page faults of the reload and the settle (pages the
         new generation touched for the first time)
  priv   private memory after the settle (smaps_rollup Private_Clean +
         Private_Dirty, KiB); and once more QUIET seconds after the last
         reload: a reloaded maitred should then hold about what a fresh one
         does

Prints each reload and the median, min and max. Not a test: nothing is
asserted. Idle maitred threads use no CPU, so the settle adds nothing but
the reload's own tail (workers switching snapshots, the old one reclaimed).

  python3 bench/reload/reload_time.py [RELOADS] [SERVICES] [ENDPOINTS]
  MAITRED_BIN=path/to/maitred (default: build/sidecar/maitred)
"""
import datetime
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("MAITRED_BIN") or os.path.join(TOP, "build", "sidecar", "maitred")
RELOADS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
SERVICES = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
ENDPOINTS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
SETTLE = 0.5
QUIET = 11.0  # after the last reload: past the 10 s after which maitred gives freed memory back
LIMIT = 120.0  # hang guard for any one wait
TICK = os.sysconf("SC_CLK_TCK")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z")


def free_port():
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def config(port, drain):
    out = ["listen: \"127.0.0.1:%d\"" % port, "workers: 2", "drain_timeout: \"%s\"" % drain,
           "log:", "  level: INFO", "services:"]
    for i in range(SERVICES):
        out.append("  - name: \"bench.v1.Service%04d\"" % i)
        out.append("    lb:")
        out.append("      policy: ROUND_ROBIN")
        out.append("    endpoints:")
        for j in range(ENDPOINTS):
            # 127.0.0.0/8, ports nothing listens on; each endpoint its own.
            out.append("      - address: \"127.%d.%d.%d:9\"" % (1 + i // 250, i % 250 + 1, j + 1))
    return "\n".join(out) + "\n"


def cpu(pid):
    """(schedstat ns over every thread, utime+stime ticks, minor faults)."""
    ns = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                ns += int(f.read().split()[0])
        except OSError:
            pass  # a thread that ended meanwhile
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return ns, int(fields[11]) + int(fields[12]), int(fields[7])  # utime, stime (14, 15); minflt (10)


def private_kib(pid):
    kib = 0
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                kib += int(line.split()[1])
    return kib


def stamp(line):
    m = STAMP.match(line)
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f") if m else None


def wait_for(pred, what):
    end = time.monotonic() + LIMIT
    while not pred():
        if time.monotonic() > end:
            raise SystemExit("timed out waiting for %s" % what)
        time.sleep(0.02)


def main():
    if not os.access(BIN, os.X_OK):
        raise SystemExit("no maitred at %s (deploy/build-dir.sh build && make -C build; or MAITRED_BIN)" % BIN)
    tmp = tempfile.mkdtemp(prefix="maitred-reload-time-")
    path = os.path.join(tmp, "maitred.yaml")
    port = free_port()
    with open(path, "w") as f:
        f.write(config(port, "5s"))
    logpath = os.path.join(tmp, "maitred.log")
    log = open(logpath, "wb")
    p = subprocess.Popen([BIN, "--config", path], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def output():
        with open(logpath, errors="replace") as f:
            return f.read()

    def applied():
        return output().count("reload: %s applied" % path)

    try:
        t0 = time.monotonic()

        def listening():
            if p.poll() is not None:
                raise SystemExit("maitred exited %s:\n%s" % (p.returncode, output()[-3000:]))
            s = socket.socket()
            try:
                s.connect(("127.0.0.1", port))
                return True
            except OSError:
                return False
            finally:
                s.close()
        wait_for(listening, "maitred to listen")
        print("maitred %s: %d services x %d endpoints, %d bytes of YAML, listening after %.2f s"
              % (BIN, SERVICES, ENDPOINTS, os.path.getsize(path), time.monotonic() - t0))
        time.sleep(SETTLE)
        print("before any reload: priv %d KiB" % private_kib(p.pid))
        rows = []
        for n in range(1, RELOADS + 1):
            tmpfile = path + ".new"
            with open(tmpfile, "w") as f:
                f.write(config(port, "6s" if n % 2 else "5s"))
            os.rename(tmpfile, path)
            ns0, tk0, pf0 = cpu(p.pid)
            p.send_signal(signal.SIGHUP)
            wait_for(lambda: applied() >= n, "reload %d to apply" % n)
            time.sleep(SETTLE)
            ns1, tk1, pf1 = cpu(p.pid)
            lines = output().splitlines()
            start = [stamp(x) for x in lines if "SIGHUP: reloading" in x][n - 1]
            done = [stamp(x) for x in lines if "reload: %s applied" % path in x][n - 1]
            wall = (done - start).total_seconds() * 1000
            rows.append((wall, (ns1 - ns0) / 1e6, (tk1 - tk0) * 1000.0 / TICK, private_kib(p.pid), pf1 - pf0))
            print("reload %2d: wall %7.1f ms  cpu %7.1f ms (schedstat)  %5.0f ms (utime+stime)  priv %d KiB  "
                  "faults %d" % ((n,) + rows[-1]))
        time.sleep(QUIET)
        print("%.0f s after the last reload: priv %d KiB" % (QUIET, private_kib(p.pid)))
        if output().count("config file changed: reloading"):
            print("note: the file watch reloaded too (%d times)" % output().count("config file changed: reloading"))
        for i, name in enumerate(("wall", "cpu (schedstat)", "cpu (utime+stime)")):
            xs = [r[i] for r in rows]
            print("%-18s median %7.1f ms  min %7.1f  max %7.1f" % (name, statistics.median(xs), min(xs), max(xs)))
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(LIMIT)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()
    print("log: %s" % logpath)


if __name__ == "__main__":
    main()
