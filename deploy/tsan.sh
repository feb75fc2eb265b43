#!/bin/bash
# ThreadSanitizer stage of deploy/run-tests.sh (also runnable alone):
#
#   deploy/tsan.sh           # the threaded unit suites and integration files below
#   deploy/tsan.sh --all     # every unit suite and every integration file
#
# Builds a tree with `configure --enable-tsan --enable-werror` from a copy of
# this checkout's sources (deploy/copy-sources.sh) in a temporary directory
# (the copy in src/, a VPATH build in build/ beside it), so the ASan build
# (build-asan/) is left alone (TSan and ASan do not combine). Then runs
# the unit suites whose tests start threads and the integration files that
# stress the threads most (HACKING.md "Invariants": what is shared):
#   test_admin   two workers under traffic while /metrics and /clusters are
#                scraped (outlier detection, circuit breaker, retry budget),
#                the access log switching files on reload
#   test_reload  snapshots published to two workers under load, reclaimed
#   test_health  checks handed to workers and answered back (hc_inbox, done)
#   test_etcd    a real etcd's watch feeding snapshots to the workers
#   test_dns     DNS answers (evdns on the control thread) feeding them
#   test_tracing two workers' span rings drained by the exporter thread
#   test_xds     an xDS stream's responses published as snapshots to the workers
# or, with --all, every unit suite (`make print-unit-tests`) and every
# integration file (tests/integration/run.sh with no name).
# A race stops maitred (or the unit test) with exit code 66 and fails the run
# (TSAN_OPTIONS below; the harness also fails a test on any "ThreadSanitizer"
# line in maitred's output). The tree is removed when everything passed,
# kept (and named) otherwise.
#
# Environment: TSAN_UNIT, TSAN_INTEGRATION override the lists below
# (TSAN_INTEGRATION empty: every file); TSAN_KEEP=1 keeps the tree even on
# success.
set -eu

cd "$(dirname "$0")/.."
src=$PWD

all=0
case "${1:-}" in
--all) all=1 ;;
'') ;;
*) echo "usage: deploy/tsan.sh [--all]" >&2; exit 2 ;;
esac

TSAN_UNIT=${TSAN_UNIT:-"tests/unit/test_lb_threads tests/unit/test_lb_round_robin tests/unit/test_lb_orca tests/unit/test_discovery tests/unit/test_health"}
TSAN_INTEGRATION=${TSAN_INTEGRATION-"test_admin test_reload test_reload_diff test_inbound_reload test_health test_etcd test_dns test_tracing test_xds"}
if [ "$all" = 1 ]; then TSAN_INTEGRATION=""; fi
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66}

say() { printf '\n==> %s\n' "$*"; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/maitred-tsan.XXXXXX")
start=$(date +%s)
say "ThreadSanitizer: a copy of the sources in $dir/src, built in $dir/build"
mkdir "$dir/src" "$dir/build"
"$src/deploy/copy-sources.sh" "$dir/src"

cd "$dir/build"
say "ThreadSanitizer: configure --enable-tsan --enable-werror"
if ! { (cd ../src && autoreconf -fi) &&
       ../src/configure --enable-tsan --enable-werror PYTHON=/usr/bin/python3; } >build.log 2>&1; then
  tail -n 60 build.log
  say "ThreadSanitizer: configure failed (log: $dir/build/build.log)"
  exit 1
fi
if [ "$all" = 1 ]; then TSAN_UNIT=$(make -s print-unit-tests); fi
# docs/config-reference.md: test_deploy checks the generated reference
say "ThreadSanitizer: make sidecar/maitred docs/config-reference.md $TSAN_UNIT"
# shellcheck disable=SC2086 # word splitting intended: a list of programs
if ! make -j2 sidecar/maitred docs/config-reference.md $TSAN_UNIT >>build.log 2>&1; then
  tail -n 60 build.log
  say "ThreadSanitizer: the build failed (log: $dir/build/build.log)"
  exit 1
fi

built=$(date +%s)
echo "built in $((built - start)) s"
fail=0
export MAITRED_SRCDIR=$dir/src MAITRED_BUILDDIR=$dir/build MAITRED_BIN=$dir/build/sidecar/maitred PYTHON=/usr/bin/python3
export MAITRED_EXPECT_SAN=tsan MAITRED_IT=
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120}
for t in $TSAN_UNIT; do
  if "./$t" >"$t.tsan.log" 2>&1; then
    echo "PASS (tsan): $t"
  else
    echo "FAIL (tsan): $t, exit $? (66: ThreadSanitizer found a race); its log:"
    cat "$t.tsan.log"
    fail=1
  fi
done

unit=$(date +%s)
echo "unit suites in $((unit - built)) s"
say "ThreadSanitizer: tests/integration/run.sh ${TSAN_INTEGRATION:-(every file)}"
# shellcheck disable=SC2086 # word splitting intended: a list of files
../src/tests/integration/run.sh $TSAN_INTEGRATION || fail=1

end=$(date +%s)
say "ThreadSanitizer stage: $((end - start)) s (build $((built - start)), unit $((unit - built)), integration $((end - unit)))"
if [ "$fail" -ne 0 ]; then
  say "ThreadSanitizer: failures above; the tree is kept in $dir"
  exit 1
fi
if [ "${TSAN_KEEP:-0}" = 1 ]; then
  echo "tree kept in $dir (TSAN_KEEP=1)"
else
  rm -rf "$dir"
fi
