#!/bin/bash
# valgrind memcheck stage of deploy/run-tests.sh (also runnable alone):
#
#   deploy/valgrind.sh           # the quick unit suites, most of test_faults
#   deploy/valgrind.sh --all     # every unit suite, every integration file
#
# valgrind and ASan do not mix, so this builds a tree without sanitizers
# (`configure --enable-werror`) from a copy of this checkout's sources
# (deploy/copy-sources.sh) in a temporary directory: the copy in src/, a
# VPATH build in build/ beside it. It runs tests/valgrind.sh there: the unit
# suites under memcheck, then integration files with every maitred under
# memcheck (MAITRED_WRAP; its worker slabs keep no freed block,
# MAITRED_SLAB=0). By default the quick unit suites and most of test_faults
# (CI's budget); --all: every unit suite (the lb property suites take
# minutes each under memcheck) and every integration file, far longer
# than CI's budget. Any memcheck error or definite leak fails the run. The
# tree is removed when everything passed, kept (and named) otherwise.
#
# Environment: VALGRIND_UNIT, VALGRIND_IT override tests/valgrind.sh's
# lists ("all": every one); VALGRIND_KEEP=1 keeps the tree even on success.
set -eu

cd "$(dirname "$0")/.."
src=$PWD

case "${1:-}" in
--all) export VALGRIND_UNIT=all VALGRIND_IT=all ;;
'') ;;
*) echo "usage: deploy/valgrind.sh [--all]" >&2; exit 2 ;;
esac

say() { printf '\n==> %s\n' "$*"; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/maitred-vg.XXXXXX")
start=$(date +%s)
say "valgrind: a copy of the sources in $dir/src, built in $dir/build"
mkdir "$dir/src" "$dir/build"
"$src/deploy/copy-sources.sh" "$dir/src"

cd "$dir/build"
say "valgrind: configure --enable-werror (no sanitizer)"
if ! { (cd ../src && autoreconf -fi) && ../src/configure --enable-werror PYTHON=/usr/bin/python3; } >configure.log 2>&1; then
  tail -n 60 configure.log
  say "valgrind: configure failed (log: $dir/build/configure.log)"
  exit 1
fi

say "valgrind: tests/valgrind.sh (makes maitred and the unit suites it runs, then memcheck)"
fail=0
MAITRED_BUILDDIR=$dir/build ../src/tests/valgrind.sh || fail=1

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
