"""Run the integration test modules, each in its own Python process under a
hang guard, and print which tests failed and a closing line
"integration: N passed, N failed, N skipped". Exit 1 on any failure.

  runall.py [test_calls | test_calls.CallTests | test_calls.CallTests.test_unary ...]

Internal: runall.py --child NAME RESULTS_JSON runs one name in this process.
"""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# Scaled like harness.py's hang guards when maitred runs under MAITRED_WRAP.
SLOW = float(os.environ.get("MAITRED_TEST_SLOW") or (10 if os.environ.get("MAITRED_WRAP", "").strip() else 1))
MODULE_LIMIT = int(os.environ.get("MAITRED_TEST_MODULE_LIMIT") or 900 * SLOW)


class RecordingResult(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.records = []

    def _rec(self, test, outcome, detail=""):
        self.records.append({"test": test.id(), "outcome": outcome, "detail": detail})

    def addSuccess(self, test):
        super().addSuccess(test)
        self._rec(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._rec(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._rec(test, "failed", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._rec(test, "skipped", reason)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            # The test itself is then recorded neither as passed nor failed.
            self._rec(subtest, "failed", self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._rec(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._rec(test, "failed", "unexpected success")


def headline(detail):
    """The line of a traceback that says what went wrong."""
    lines = [ln for ln in detail.strip().splitlines() if ln.strip()]
    head = ""
    for ln in lines:
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Exit)\b", ln):
            head = ln
    if not head:
        return lines[-1] if lines else ""
    for ln in lines:
        if ln.strip().startswith("details = "):
            head += " " + ln.strip()
            break
    return head[:400]


def child(name, out):
    sys.path.insert(0, HERE)
    os.chdir(HERE)
    suite = unittest.defaultTestLoader.loadTestsFromName(name)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=RecordingResult)
    result = runner.run(suite)
    with open(out, "w") as f:
        json.dump(result.records, f)
    return 0


def main(argv):
    if len(argv) >= 3 and argv[0] == "--child":
        return child(argv[1], argv[2])
    names = argv or sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(HERE, "test_*.py")))
    records = []
    for name in names:
        fd, out = tempfile.mkstemp(prefix="maitred-results-", suffix=".json")
        os.close(fd)
        print("=== %s" % name, flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", name, out], cwd=HERE)
        try:
            rc = proc.wait(timeout=MODULE_LIMIT)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the harness stops its processes on SIGTERM
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            rc = None
        try:
            with open(out) as f:
                got = json.load(f)
        except (OSError, ValueError):
            got = []
        os.unlink(out)
        if rc is None:
            got.append({"test": name, "outcome": "failed",
                        "detail": "hang guard: still running after %ds" % MODULE_LIMIT})
        elif not got or rc != 0:
            got.append({"test": name, "outcome": "failed",
                        "detail": "test process exited %s without results" % rc})
        print("=== %s done in %.0fs" % (name, time.monotonic() - t0), flush=True)
        records += got

    count = lambda o: sum(1 for r in records if r["outcome"] == o)  # noqa: E731
    failed = [r for r in records if r["outcome"] == "failed"]
    skipped = [r for r in records if r["outcome"] == "skipped"]
    print()
    if skipped:
        print("Skipped:")
        for r in skipped:
            print("  %s: %s" % (r["test"], r["detail"]))
    if failed:
        print("FAILED:")
        for r in failed:
            print("  %s: %s" % (r["test"], headline(r["detail"])))
    print("integration: %d passed, %d failed, %d skipped" % (count("passed"), count("failed"), count("skipped")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
