#!/bin/sh
# maitred integration tests: real maitred, real grpcio upstreams and clients,
# all on 127.0.0.1. Run by `make check` (which exports MAITRED_BIN,
# MAITRED_SRCDIR, MAITRED_BUILDDIR, MAITRED_EXPECT_SAN and PYTHON); by hand
# (MAITRED_BUILDDIR: an in-place build, else build-asan/, else build/):
#
#   tests/integration/run.sh                      # every test_*.py
#   tests/integration/run.sh test_calls test_tls.TlsTests.test_mtls
#   MAITRED_TEST_DIRECT=1 tests/integration/run.sh   # harness self-check
#   MAITRED_IT="test_calls test_errors" make check   # a subset, through make
#
# With no argument, MAITRED_IT (names as above, space separated) is the list
# when set and not empty; else every test_*.py.
# Exit 77 (skipped) only when $PYTHON has no grpc module.
set -u

here=$(cd "$(dirname "$0")" && pwd)
: "${MAITRED_SRCDIR:=$(cd "$here/../.." && pwd)}"
# The build tree: an in-place build, else deploy/run-tests.sh's build-asan/,
# else the demo's build/.
if [ -z "${MAITRED_BUILDDIR:-}" ]; then
  MAITRED_BUILDDIR=$MAITRED_SRCDIR
  for d in "$MAITRED_SRCDIR" "$MAITRED_SRCDIR/build-asan" "$MAITRED_SRCDIR/build"; do
    if [ -f "$d/config.status" ]; then MAITRED_BUILDDIR=$d; break; fi
  done
fi
: "${MAITRED_BIN:=$MAITRED_BUILDDIR/sidecar/maitred}"
if [ -z "${PYTHON:-}" ]; then
  PYTHON=/usr/bin/python3
fi
export MAITRED_SRCDIR MAITRED_BUILDDIR MAITRED_BIN PYTHON

if ! "$PYTHON" -c 'import grpc' 2>/dev/null; then
  echo "SKIP: $PYTHON has no grpc module (Debian: python3-grpcio)"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/maitred-it.XXXXXX") || exit 1
export MAITRED_TEST_GEN="$work/gen" MAITRED_TEST_TMP="$work/tests"
if ! "$PYTHON" "$here/protogen.py" "$MAITRED_TEST_GEN"; then
  echo "FAIL: cannot compile protos/maitred/testing/v1/echo.proto (Debian: python3-grpc-tools)"
  exit 1
fi

if [ $# -eq 0 ] && [ -n "${MAITRED_IT:-}" ]; then
  # shellcheck disable=SC2086 # word splitting intended: a list of names
  set -- $MAITRED_IT
  echo "tests: $* (MAITRED_IT)"
fi
echo "maitred: $MAITRED_BIN"
echo "python:  $PYTHON"
"$PYTHON" "$here/runall.py" "$@"
rc=$?
if [ "$rc" -eq 0 ]; then
  rm -rf "$work"
else
  echo "logs of failed tests kept under $MAITRED_TEST_TMP"
fi
exit "$rc"
