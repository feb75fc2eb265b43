"""Helpers for maitred's integration tests: real processes on 127.0.0.1.

Every process is started by this module and stopped by its PID (SIGTERM, then
SIGKILL after a bounded wait); every wait is a bounded loop whose limit is a
hang guard only, never what decides a test. A failing test prints the logs of
every process it started.

Environment (exported by `make check`, all optional here):
  MAITRED_BIN       the maitred binary (default: BUILDDIR/sidecar/maitred)
  MAITRED_SRCDIR    source tree (default: two levels above this file)
  MAITRED_BUILDDIR  build tree (default: MAITRED_SRCDIR)
  PYTHON            Python with grpcio (default: /usr/bin/python3)
  MAITRED_TEST_DIRECT=1  harness self-check: no maitred, the client talks
                    straight to the first upstream; maitred-only tests skip
  MAITRED_TEST_LOG_LEVEL  maitred --log-level (default: info)
  MAITRED_TEST_TMP  where per-test directories go (default: system temp)
  MAITRED_WRAP      a command put in front of every maitred the tests start
                    (split like a shell would), e.g. valgrind memcheck:
                      MAITRED_WRAP="valgrind -q --error-exitcode=99
                        --leak-check=full --errors-for-leak-kinds=definite
                        --suppressions=$SRCDIR/tests/valgrind.supp"
                    maitred then runs with MAITRED_SLAB=0 (its slabs keep no
                    freed block, so memcheck sees every use after free and
                    every leak); a memcheck error or definite leak in its log,
                    or an exit with the --error-exitcode, fails the test
  MAITRED_TEST_SLOW factor for the hang guards below (default 1, or 10 with
                    MAITRED_WRAP: memcheck runs maitred 20-50x slower)
  TSAN_OPTIONS      for a --enable-tsan maitred (default: TSAN_DEFAULTS below:
                    the first race ends maitred with exit code 66)
"""

import atexit
import errno
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import grpc  # noqa: E402

import protogen  # noqa: E402

pb, pb_grpc = protogen.load()

SRCDIR = os.environ.get("MAITRED_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
BUILDDIR = os.environ.get("MAITRED_BUILDDIR") or SRCDIR
MAITRED_BIN = os.environ.get("MAITRED_BIN") or os.path.join(BUILDDIR, "sidecar", "maitred")
PYTHON = os.environ.get("PYTHON") or "/usr/bin/python3"
DIRECT = os.environ.get("MAITRED_TEST_DIRECT", "") not in ("", "0")
LOG_LEVEL = os.environ.get("MAITRED_TEST_LOG_LEVEL", "info")
UPSTREAM_PY = os.path.join(HERE, "upstream.py")
WRAP = shlex.split(os.environ.get("MAITRED_WRAP", ""))
SLOW = float(os.environ.get("MAITRED_TEST_SLOW") or (10 if WRAP else 1))

# Hang guards (seconds). Generous: ASan builds on a shared 2-core machine.
START_LIMIT = 30.0 * SLOW
STOP_LIMIT = 60.0 * SLOW
CALL_LIMIT = 30.0 * SLOW

MiB = 1 << 20
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 256 * MiB),
    ("grpc.max_receive_message_length", 256 * MiB),
    # Observe maitred's answers exactly: no transparent retries.
    ("grpc.enable_retries", 0),
    ("grpc.max_metadata_size", 64 * 1024),
]

SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                   "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer",
                   "ThreadSanitizer")

# What valgrind memcheck prints for an error (with or without -q): each
# report's first line, a definite leak's record, the closing summary.
MEMCHECK_ERROR = re.compile(
    r"^==\d+== (Invalid (read|write|free)|Mismatched free|Conditional jump"
    r"|Use of uninitialised|Syscall param|Source and destination overlap"
    r"|Argument '|.* are definitely lost in loss record|ERROR SUMMARY: [1-9])")
_m = re.search(r"--error-exitcode=(\d+)", " ".join(WRAP))
WRAP_ERROR_RC = int(_m.group(1)) if _m else None

# A ThreadSanitizer build (configure --enable-tsan) stops at its first report
# with this exit code, so a race fails the test even when nothing else would
# notice; a test that stops maitred sees the code, the cleanup the report.
TSAN_EXIT = 66
TSAN_DEFAULTS = "halt_on_error=1:exitcode=%d" % TSAN_EXIT
os.environ.setdefault("TSAN_OPTIONS", TSAN_DEFAULTS)


def exit_text(rc):
    """An exit code as a failure message says it."""
    if rc == TSAN_EXIT:
        return "%s (ThreadSanitizer's exit code: it found a race)" % rc
    if rc is not None and rc == WRAP_ERROR_RC:
        return "%s (MAITRED_WRAP's error code: valgrind found errors)" % rc
    return str(rc)


def report_exit(rc):
    """Whether an exit code alone says a sanitizer or valgrind found errors."""
    return rc == TSAN_EXIT or (rc is not None and rc == WRAP_ERROR_RC)


def sanitizer_lines(text):
    """Sanitizer and valgrind memcheck error lines in a process's output."""
    return [line for line in text.splitlines()
            if any(m in line for m in SANITIZER_MARKS) or MEMCHECK_ERROR.match(line)]


# --- the binary's sanitizers against the build's ---------------------------
def check_maitred_flavour():
    """Fail (AssertionError) when MAITRED_BIN lacks a sanitizer its build was
    configured with, or has one it was not: a plain build's objects reused by
    an ASan build passed every test silently. The build's list ("asan,ubsan",
    "tsan", "none"): MAITRED_EXPECT_SAN (make check exports configure's),
    else MAITRED_SANITIZERS in BUILDDIR's config.h, else in the config.h of
    the tree MAITRED_BIN was built in; none of them: no check. The binary's:
    the sanitizer runtimes' entry symbols in its ELF string tables (what it
    imports from libasan / libubsan / libtsan, or links in). Checked once per
    process, by MaitredTest.setUp: every test fails with the reason."""
    if DIRECT:
        return
    if not hasattr(check_maitred_flavour, "problem"):
        want, source = os.environ.get("MAITRED_EXPECT_SAN"), "MAITRED_EXPECT_SAN"
        for h in (os.path.join(BUILDDIR, "config.h"),
                  os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(MAITRED_BIN))), "config.h")):
            if want is None and os.path.isfile(h):
                with open(h) as f:
                    m = re.search(r'^#define MAITRED_SANITIZERS "([^"]*)"', f.read(), re.M)
                if m:
                    want, source = m.group(1), h
        problem = None
        if want is not None:
            symbols = {"asan": b"\0__asan_init", "ubsan": b"\0__ubsan_handle_", "tsan": b"\0__tsan_init"}
            expected = set(want.split(",")) - {"", "none"}
            try:
                with open(MAITRED_BIN, "rb") as f:
                    data = f.read()
            except OSError as e:
                problem = "cannot read maitred at %s: %s" % (MAITRED_BIN, e)
            else:
                found = {name for name, sym in symbols.items() if sym in data}
                if found != expected:
                    problem = ("%s is built with sanitizers: %s, but its build is configured with: %s (%s). "
                               "A binary of another build (objects left by a build with other flags, or "
                               "MAITRED_BIN and MAITRED_BUILDDIR naming different trees): build it again in "
                               "a tree of its own (deploy/run-tests.sh: build-asan/)"
                               % (MAITRED_BIN, ",".join(sorted(found)) or "none",
                                  ",".join(sorted(expected)) or "none", source))
        check_maitred_flavour.problem = problem
    if check_maitred_flavour.problem:
        raise AssertionError(check_maitred_flavour.problem)
# --- end of the sanitizer check ------------------------------------------------

ECHO = "/maitred.testing.v1.Echo/"


def maitred_argv(args, wrap=None):
    """The argv that starts maitred with `args`: a test's own `wrap` (a
    command that execs the rest in place), then MAITRED_WRAP, then maitred."""
    return list(wrap or []) + WRAP + [MAITRED_BIN] + list(args)


UNSHARE = shutil.which("unshare")


def can_bind_mount():
    """True when this process may give a child its own /etc/hosts (root,
    and a kernel that allows mount namespaces)."""
    if UNSHARE is None or os.geteuid() != 0:
        return False
    r = subprocess.run([UNSHARE, "--mount", "sh", "-c", "mount --bind /dev/null /etc/hosts"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


def hosts_wrap(hosts, resolv=None):
    """A wrap (maitred_argv's) that runs the rest in its own mount
    namespace whose /etc/hosts is the file `hosts`, and /etc/resolv.conf
    the file `resolv` when given (util-linux's unshare; the process keeps
    its PID through the execs). The files are bound, not copied:
    rewritten in place, the process sees the new names."""
    script, files = 'mount --bind "$0" /etc/hosts && ', [hosts]
    if resolv is not None:
        script, files = script + 'mount --bind "$1" /etc/resolv.conf && shift && ', files + [resolv]
    return [UNSHARE or "unshare", "--mount", "sh", "-c", script + 'exec "$@"'] + files


def maitred_env(extra=None):
    """maitred's environment: ours, with passthrough slabs under a wrap,
    and a test's `extra` variables."""
    if not WRAP and not extra:
        return None
    env = dict(os.environ)
    if WRAP:
        env["MAITRED_SLAB"] = "0"
    env.update(extra or {})
    return env


def maitred_only(fn):
    """Skip a test in MAITRED_TEST_DIRECT mode (it checks maitred itself)."""
    return unittest.skipIf(DIRECT, "checks maitred itself (MAITRED_TEST_DIRECT=1)")(fn)


_ports_handed = set()
_ports_rng = random.Random(os.getpid() ^ time.time_ns())


def _ephemeral_low():
    """The first port of the kernel's ephemeral range (32768 by default)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A loopback TCP port that was free a moment ago, never one this
    process handed out before, and below the kernel's ephemeral range: a
    port the kernel picked for a `--port 0` server or an outgoing
    connection in the meantime cannot be it (a port taken from bind(0)
    could be handed to the next such socket before maitred bound it:
    "cannot listen on admin ...: Address already in use")."""
    low = _ephemeral_low()
    lo, hi = max(10000, low - 12000), low - 1
    if hi - lo >= 1000:
        for _ in range(500):
            port = _ports_rng.randint(lo, hi)
            if port not in _ports_handed and not port_in_use(port):
                _ports_handed.add(port)
                return port
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def port_accepts(port, timeout=1.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def port_in_use(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return False
    except OSError:
        return True
    finally:
        s.close()


class TcpSocket(tuple):
    """One row of /proc/net/tcp or tcp6: ports, state ("01" is
    ESTABLISHED) and inode ("0" while only queued, not accept()ed)."""
    __slots__ = ()
    local_port = property(lambda self: self[0])
    remote_port = property(lambda self: self[1])
    state = property(lambda self: self[2])
    inode = property(lambda self: self[3])


def tcp_sockets():
    """Every loopback TCP socket of the machine, IPv4 and IPv6, as
    TcpSocket rows: the one reader of /proc/net/tcp the tests share."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            yield TcpSocket((int(parts[1].rsplit(":", 1)[1], 16), int(parts[2].rsplit(":", 1)[1], 16),
                             parts[3], parts[9]))


def accepted(pid, local_port, remote_port):
    """True once process `pid` holds its side of the TCP connection
    127.0.0.1:remote_port -> 127.0.0.1:local_port as an open file: the
    connection was accept()ed, not only queued by the kernel (a queued one
    has no inode in /proc/net/tcp). Unlike counting the process's sockets,
    another connection closing at the same moment cannot hide it."""
    inodes = {"socket:[%s]" % t.inode for t in tcp_sockets()
              if t.local_port == local_port and t.remote_port == remote_port and t.inode != "0"}
    if not inodes:
        return False
    fd_dir = "/proc/%d/fd" % pid
    for f in os.listdir(fd_dir):
        try:
            if os.readlink(os.path.join(fd_dir, f)) in inodes:
                return True
        except OSError:
            continue  # closed while we looked
    return False


def wakeups(pid):
    """How many times the main thread of process `pid` (maitred's control
    thread) has slept and been woken since it started: its
    voluntary_ctxt_switches. A count, not a time."""
    with open("/proc/%d/task/%d/status" % (pid, pid)) as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches for %d" % pid)


def grow_log(path, lines):
    """What a busy neighbour of maitred's files does, a log: one file kept
    open, a line written and flushed at a time, a millisecond apart (so
    that a thread woken by each write would wake for each, and a test
    counting wake-ups can fail)."""
    with open(path, "w") as f:
        for i in range(lines):
            f.write("line %d\n" % i)
            f.flush()
            time.sleep(0.001)


def wait_until(pred, limit, what, step=0.05):
    """Poll pred() until true; raise AssertionError after `limit` seconds."""
    end = time.monotonic() + limit
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= end:
            raise AssertionError("timed out after %.0fs waiting for %s" % (limit, what))
        time.sleep(step)


# --- YAML ------------------------------------------------------------------

def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a YAML double-quoted scalar


def to_yaml(obj, indent=0):
    """Block-style YAML for dicts, lists and scalars (what configs need)."""
    pad = " " * indent
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                out.append("%s%s:" % (pad, k))
                out.append(to_yaml(v, indent + 2))
            elif isinstance(v, dict):
                out.append("%s%s: {}" % (pad, k))
            elif isinstance(v, list):
                out.append("%s%s: []" % (pad, k))
            else:
                out.append("%s%s: %s" % (pad, k, _scalar(v)))
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, (dict, list)) and v:
                sub = to_yaml(v, indent + 2).split("\n")
                out.append("%s- %s" % (pad, sub[0].lstrip()))
                out.extend(sub[1:])
            else:
                out.append("%s- %s" % (pad, _scalar(v)))
    else:
        out.append(pad + _scalar(obj))
    return "\n".join(out)


# --- processes ---------------------------------------------------------------

_live = {}  # pid -> Proc, for the exit handler


def _kill_all():
    for p in list(_live.values()):
        p.kill()


atexit.register(_kill_all)


def _on_term(signum, frame):
    _kill_all()
    sys.exit(128 + signum)


if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _on_term)

_SETPRIV = shutil.which("setpriv")


class Proc:
    """A child process with its stdout+stderr in a log file."""

    def __init__(self, name, argv, logdir, env=None):
        self.name = name
        self.argv = argv
        self.logpath = os.path.join(logdir, name + ".log")
        self.checked = False  # a test already judged how it exited
        # setpriv --pdeathsig: the child dies with us even if we are killed
        # hard; it execs, so the PID is the program's own.
        full = ([_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []) + argv
        # maitred (directly or through a wrapper that execs it): its reports
        # fail the test whatever it was expected to exit.
        self.maitred = MAITRED_BIN in argv
        self.log = open(self.logpath, "wb")
        self.p = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=self.log,
                                  stderr=subprocess.STDOUT, env=env)
        self.pid = self.p.pid
        _live[self.pid] = self

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, limit):
        """Exit code, or None if still running after `limit` seconds."""
        try:
            return self.p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, limit=STOP_LIMIT):
        """SIGTERM, wait up to `limit`, then SIGKILL. Returns (rc, killed)."""
        killed = False
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            if self.wait(limit) is None:
                killed = True
                self.kill()
        rc = self.p.wait()
        _live.pop(self.pid, None)
        self.log.close()
        return rc, killed

    def kill(self):
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self.p.wait()
        _live.pop(self.pid, None)

    def output(self):
        try:
            with open(self.logpath, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def sanitizer_report(self):
        """Sanitizer and valgrind memcheck error lines in the log."""
        return sanitizer_lines(self.output())


class RawServer:
    """A raw TCP server on 127.0.0.1 for hand-made HTTP/2 peers: accepts on
    a thread of its own and serves each connection on another, calling
    self._serve(sock, n) (n: the connection's number, from 1); close()
    stops it (bounded). Subclasses set up their state, then call
    RawServer.__init__ last (the accept thread starts there)."""

    def __init__(self):
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]
        self.address = "127.0.0.1:%d" % self.port
        self.conns = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                c, _ = self.lsock.accept()
            except OSError:
                continue
            with self.cond:
                self.conns += 1
                n = self.conns
            t = threading.Thread(target=self._serve, args=(c, n), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, sock, n):
        raise NotImplementedError

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(5)
        self.lsock.close()


class Upstream:
    """A running upstream.py: Echo on .port, Control on .control_port."""

    def __init__(self, proc, info, tls, host="127.0.0.1"):
        self.proc = proc
        self.name = info["name"]
        self.port = info["port"]
        self.control_port = info["control_port"]
        self.host = host
        self.address = "%s:%d" % (host, self.port)
        self.tls = tls
        self._ch = grpc.insecure_channel("%s:%d" % (host, self.control_port))
        self.control = pb_grpc.ControlStub(self._ch)

    def wait_call(self, call_id, until="STARTED", limit=CALL_LIMIT):
        """The upstream's CallState once the call reached `until` (STARTED or
        ENDED), or its state when the bounded wait ran out."""
        return self.control.WaitCall(pb.WaitCallRequest(
            call_id=call_id, until=pb.WaitCallRequest.Until.Value(until),
            timeout_ms=int(limit * 1000)), timeout=limit + 10)

    def release(self, call_id):
        return self.control.Release(pb.ReleaseRequest(call_id=call_id), timeout=10)

    def stats(self):
        return self.control.Stats(pb.StatsRequest(), timeout=10)

    def close(self):
        self._ch.close()


class Maitred:
    def __init__(self, proc, port, config_path):
        self.proc = proc
        self.port = port
        self.address = "127.0.0.1:%d" % port
        self.config_path = config_path


class Direct:
    """MAITRED_TEST_DIRECT stand-in: the first endpoint itself."""

    def __init__(self, address):
        self.proc = None
        self.address = address
        self.port = int(address.rsplit(":", 1)[1])
        self.config_path = None


class TestCA:
    """A test CA made with the openssl CLI: CA, a server certificate for
    `server_name` with SANs DNS:server_name and IP:127.0.0.1, and a client
    certificate (CN maitred-client) for mTLS. Paths are attributes."""

    def __init__(self, directory, server_name="echo.test", ca_name="maitred test CA"):
        self.dir = directory
        self.server_name = server_name
        os.makedirs(directory, exist_ok=True)
        p = lambda n: os.path.join(directory, n)  # noqa: E731
        self.ca_key, self.ca_file = p("ca.key"), p("ca.pem")
        self.server_key, self.server_cert = p("server.key"), p("server.pem")
        self.client_key, self.client_cert = p("client.key"), p("client.pem")
        key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        self._ssl(["req", "-x509"] + key + ["-keyout", self.ca_key, "-out", self.ca_file,
                   "-days", "3", "-subj", "/CN=" + ca_name,
                   "-addext", "basicConstraints=critical,CA:TRUE",
                   "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        self._leaf("server", "/CN=" + server_name, key,
                   "subjectAltName=DNS:%s,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
                   "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n" % server_name)
        self._leaf("client", "/CN=maitred-client", key,
                   "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n"
                   "keyUsage=digitalSignature\n")

    def _ssl(self, args):
        res = subprocess.run(["openssl"] + args, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=60)
        if res.returncode != 0:
            raise RuntimeError("openssl %s failed:\n%s" % (" ".join(args), res.stdout.decode(errors="replace")))

    def _leaf(self, name, subj, key, ext):
        d = lambda n: os.path.join(self.dir, n)  # noqa: E731
        with open(d(name + ".ext"), "w") as f:
            f.write(ext)
        self._ssl(["req"] + key + ["-keyout", d(name + ".key"), "-out", d(name + ".csr"), "-subj", subj])
        self._ssl(["x509", "-req", "-in", d(name + ".csr"), "-CA", self.ca_file,
                   "-CAkey", self.ca_key, "-CAcreateserial", "-out", d(name + ".pem"),
                   "-days", "3", "-extfile", d(name + ".ext")])


def holder(ups, cid):
    """The upstream among `ups` that has call `cid` (bounded poll)."""
    def find():
        for u in ups:
            if u.wait_call(cid, "STARTED", limit=0).started:
                return u
        return None
    return wait_until(find, CALL_LIMIT, "call %s to reach an upstream" % cid, step=0.05)


def call_id():
    return uuid.uuid4().hex[:12]


def code_of(err):
    return err.code() if isinstance(err, grpc.RpcError) else None


class MaitredTest(unittest.TestCase):
    """Base class: per-test directory, processes stopped by PID at the end,
    maitred checked to exit 0 on SIGTERM without sanitizer reports, logs
    printed when the test fails."""

    maxDiff = None

    def setUp(self):
        check_maitred_flavour()
        root = os.environ.get("MAITRED_TEST_TMP") or None
        if root:
            os.makedirs(root, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix=self.id().rsplit(".", 2)[-2] + "." + self._testMethodName + ".", dir=root)
        self._procs = []          # (Proc, check_exit)
        self._channels = []
        self._upstreams = []
        self._n = 0
        self.addCleanup(self._cleanup)

    # --- processes -----------------------------------------------------------
    def start_upstream(self, name=None, tls=None, client_ca=None, port=0, grace=5.0, max_streams=0,
                       extra_args=(), host="127.0.0.1"):
        """Start upstream.py; `tls` is a TestCA (server cert), `client_ca` a
        TestCA whose clients are required (mTLS); extra_args go to
        upstream.py as they are (e.g. ["--health-file", PATH]); `host`
        another loopback address (127.0.0.2, ...) to listen on."""
        self._n += 1
        name = name or "up%d" % self._n
        ready = os.path.join(self.tmp, name + ".ready")
        argv = [PYTHON, UPSTREAM_PY, "--name", name, "--port", str(port),
                "--ready-file", ready, "--grace", str(grace), "--host", host]
        if tls:
            argv += ["--tls-cert", tls.server_cert, "--tls-key", tls.server_key]
        if client_ca:
            argv += ["--client-ca", client_ca.ca_file]
        if max_streams:
            argv += ["--max-concurrent-streams", str(max_streams)]
        argv += list(extra_args)
        proc = Proc(name, argv, self.tmp)
        self._procs.append((proc, False))

        def ready_or_dead():
            if os.path.exists(ready):
                return True
            if not proc.alive():
                raise AssertionError("upstream %s exited with %s:\n%s" % (name, proc.p.returncode, proc.output()))
            return False
        wait_until(ready_or_dead, START_LIMIT, "upstream %s to be ready" % name)
        with open(ready) as f:
            info = json.load(f)
        up = Upstream(proc, info, tls, host)
        self._upstreams.append(up)
        return up

    def hosts_file(self, text):
        """The test's hosts file (for hosts_wrap), written with text; again
        in place (the same inode, so a bound /etc/hosts follows)."""
        path = os.path.join(self.tmp, "hosts")
        with open(path, "w") as f:
            f.write(text)
        return path

    def write_config(self, cfg, name="maitred.yaml"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(cfg if isinstance(cfg, str) else to_yaml(cfg) + "\n")
        return path

    def config(self, services, port=None, **top):
        """A config dict: listen on a free port, 1 worker, 5s drain."""
        cfg = {"listen": "127.0.0.1:%d" % (port or free_port()), "workers": 1,
               "drain_timeout": "5s"}
        cfg.update(top)
        cfg["services"] = services
        return cfg

    @staticmethod
    def service(name, upstreams, policy="ROUND_ROBIN", tls=None, **extra):
        s = {"name": name, "lb": {"policy": policy}}
        if tls is not None:
            s["tls"] = tls
        s["endpoints"] = [{"address": u if isinstance(u, str) else u.address} for u in upstreams]
        s.update(extra)
        return s

    def start_maitred(self, cfg=None, upstreams=None, args=None, check_exit=True, wait=True, wrap=None, env=None):
        """Start maitred on `cfg` (a dict, or None for one "*" service over
        `upstreams`) and wait until its listener accepts connections. `wrap`:
        a command that execs maitred's argv (appended to it) in place, so the
        PID stays maitred's. `env`: variables to add to its environment."""
        if cfg is None:
            cfg = self.config([self.service("*", upstreams)])
        if DIRECT:
            return Direct(cfg["services"][0]["endpoints"][0]["address"])
        if not os.access(MAITRED_BIN, os.X_OK):
            self.fail("maitred binary not found at %s (set MAITRED_BIN)" % MAITRED_BIN)
        # Each maitred its own file: maitred watches its config file and
        # reloads on a change, so two sharing one would take each other's.
        path = self.write_config(cfg, "maitred.yaml" if self._n == 0 else "maitred%d.yaml" % (self._n + 1))
        port = int(cfg["listen"].rsplit(":", 1)[1])
        argv = maitred_argv(["--config", path, "--log-level", LOG_LEVEL] + (args or []), wrap)
        self._n += 1
        proc = Proc("maitred%d" % self._n, argv, self.tmp, env=maitred_env(env))
        self._procs.append((proc, check_exit))
        m = Maitred(proc, port, path)
        if wait:
            self.wait_listening(m)
        return m

    def wait_listening(self, m):
        def up():
            if not m.proc.alive():
                raise AssertionError("maitred exited with %s before listening:\n%s" % (m.proc.p.returncode, m.proc.output()))
            return port_accepts(m.port, 0.5)
        wait_until(up, START_LIMIT, "maitred to listen on %s" % m.address)

    def run_maitred(self, args, limit=START_LIMIT):
        """Run maitred to completion; returns (rc, stdout, stderr). A
        sanitizer or memcheck report fails the test, whatever rc it expects."""
        res = subprocess.run(maitred_argv(args), stdin=subprocess.DEVNULL, env=maitred_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=limit)
        out, err = res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace")
        self.assert_no_sanitizer_report(res.returncode, out + err, "maitred " + " ".join(args))
        return res.returncode, out, err

    def assert_no_sanitizer_report(self, rc, output, what):
        """For a maitred run to its end outside Proc: no sanitizer or
        memcheck line in its output, no exit code that says one found errors."""
        if sanitizer_lines(output) or report_exit(rc):
            self.fail("%s exited %s with a report:\n%s" % (what, exit_text(rc), output[-6000:]))

    def stop_maitred(self, m, limit=STOP_LIMIT):
        """SIGTERM; assert exit 0 within the hang guard and no sanitizer
        report."""
        m.proc.checked = True
        rc, killed = m.proc.stop(limit)
        self.assertFalse(killed, "maitred did not exit within %.0fs of SIGTERM" % limit)
        self.assertEqual(m.proc.sanitizer_report(), [], "sanitizer report in maitred's log")
        self.assertEqual(rc, 0, "maitred exited %s on SIGTERM" % exit_text(rc))

    # --- clients ---------------------------------------------------------------
    def channel(self, target, options=(), compression=None):
        addr = target if isinstance(target, str) else target.address
        ch = grpc.insecure_channel(addr, options=CHANNEL_OPTIONS + list(options), compression=compression)
        self._channels.append(ch)
        return ch

    def echo(self, target, **kw):
        return pb_grpc.EchoStub(self.channel(target, **kw))

    def raw_unary(self, target, method):
        """A unary callable for any :path, bytes in and out."""
        return self.channel(target).unary_unary(method)

    # --- cleanup ---------------------------------------------------------------
    def _cleanup(self):
        for ch in self._channels:
            ch.close()
        for up in self._upstreams:
            up.close()
        problems = []
        # maitred first (it may be draining calls to the upstreams).
        for proc, check in sorted(self._procs, key=lambda pc: not pc[1]):
            already = not proc.alive()
            rc, killed = proc.stop()
            judged = not check or proc.checked  # by the test itself, or not at all
            if proc.maitred or not judged:
                # Whatever a test expects of a maitred's exit, a sanitizer
                # or memcheck report is a bug the test ran into.
                lines = proc.sanitizer_report()
                problems += ["%s: %s" % (proc.name, line) for line in lines]
                if judged and not lines and report_exit(rc):
                    problems.append("%s exited %s" % (proc.name, exit_text(rc)))
            if judged:
                continue
            if killed:
                problems.append("%s did not exit within %.0fs of SIGTERM" % (proc.name, STOP_LIMIT))
            elif rc != 0 and not already:
                problems.append("%s exited %s on SIGTERM" % (proc.name, exit_text(rc)))
            elif rc != 0 and already:
                problems.append("%s had exited by itself with %s" % (proc.name, exit_text(rc)))
        failed = bool(problems) or self._has_failed()
        if failed:
            self._dump_logs()
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        if problems:
            self.fail("after the test:\n  " + "\n  ".join(problems))

    def _has_failed(self):
        """Whether this test (or one of its subtests) has failed so far.
        (unittest resets _outcome.success around each cleanup, so ask the
        result instead.)"""
        result = getattr(getattr(self, "_outcome", None), "result", None)
        if result is None:
            return False
        for t, _ in list(result.failures) + list(result.errors):
            if t is self or getattr(t, "test_case", None) is self:
                return True
        return False

    def _dump_logs(self):
        w = sys.stderr.write
        w("\n===== logs of %s (kept in %s) =====\n" % (self.id(), self.tmp))
        for proc, _ in self._procs:
            out = proc.output()
            lines = out.splitlines()
            if len(lines) > 300:
                lines = ["... (%d lines cut)" % (len(lines) - 300)] + lines[-300:]
            w("----- %s (pid %d): %s\n" % (proc.name, proc.pid, " ".join(proc.argv)))
            w("\n".join(lines) + "\n")
        w("===== end of logs =====\n")
        sys.stderr.flush()


def errno_refused(exc):
    return isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED


def needs_h2(fn):
    """Skip a raw-HTTP/2 test when python3-h2 is missing."""
    try:
        import h2  # noqa: F401
        have = True
    except ImportError:
        have = False
    return unittest.skipUnless(have, "python3-h2 not installed (raw HTTP/2 peer)")(fn)
