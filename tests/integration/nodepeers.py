"""The test peers that run on Node.js (tests/xds, tests/otel): each folder
pinned by its package-lock.json, installed by `npm ci` the first time a
test needs it, under a lock, so that test files running side by side
install once (deploy/run-tests.sh installs them before the tests)."""

import fcntl
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("MAITRED_SRCDIR") or os.path.dirname(os.path.dirname(HERE))


def folder(name):
    """tests/NAME of the source tree."""
    return os.path.join(SRC, "tests", name)


def node_missing():
    """Why the Node peers cannot run here, or None."""
    if not shutil.which("node") or not shutil.which("npm"):
        return "node and npm are not installed (deploy/run-tests.sh installs them)"
    return None


def install(name):
    """npm ci in tests/NAME once; its folder."""
    where = folder(name)
    marker = os.path.join(where, "node_modules", ".package-lock.json")
    if os.path.exists(marker):
        return where
    why = node_missing()
    if why:
        raise AssertionError(why)
    with open(os.path.join(where, ".install.lock"), "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if not os.path.exists(marker):
            r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=where,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
            if r.returncode != 0:
                raise AssertionError("npm ci in tests/%s failed:\n%s" % (name, r.stdout.decode(errors="replace")))
    return where
