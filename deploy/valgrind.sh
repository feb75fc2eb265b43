#!/bin/bash
# valgrind memcheck stage of deploy/run-tests.sh (also runnable alone):
#
#   deploy/valgrind.sh
#
# valgrind and ASan do not mix, so this builds a second tree without
# sanitizers (`configure --enable-werror`) from a copy of this checkout's
# sources (deploy/copy-sources.sh) in a temporary directory, and runs
# tests/valgrind.sh there: the quick unit suites under memcheck, then
# most of test_faults with every maitred under memcheck (MAITRED_WRAP; its worker
# slabs keep no freed block, MAITRED_SLAB=0). Any memcheck error or
# definite leak fails the run. The tree is removed when everything passed,
# kept (and named) otherwise.
#
# Environment: VALGRIND_UNIT, VALGRIND_IT override tests/valgrind.sh's
# lists; VALGRIND_KEEP=1 keeps the tree even on success.
set -eu

cd "$(dirname "$0")/.."
src=$PWD

say() { printf '\n==> %s\n' "$*"; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/maitred-vg.XXXXXX")
start=$(date +%s)
say "valgrind: a copy of the sources in $dir"
"$src/deploy/copy-sources.sh" "$dir"

cd "$dir"
say "valgrind: configure --enable-werror (no sanitizer)"
if ! { autoreconf -fi && ./configure --enable-werror PYTHON=/usr/bin/python3; } >configure.log 2>&1; then
  tail -n 60 configure.log
  say "valgrind: configure failed (log: $dir/configure.log)"
  exit 1
fi

say "valgrind: tests/valgrind.sh (makes maitred and the unit suites it runs, then memcheck)"
fail=0
tests/valgrind.sh || fail=1

say "valgrind stage: $(( $(date +%s) - start )) s"
if [ "$fail" -ne 0 ]; then
  say "valgrind: failures above; the tree is kept in $dir"
  exit 1
fi
if [ "${VALGRIND_KEEP:-0}" = 1 ]; then
  echo "tree kept in $dir (VALGRIND_KEEP=1)"
else
  rm -rf "$dir"
fi
