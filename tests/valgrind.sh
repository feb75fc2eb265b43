#!/bin/sh
# maitred under valgrind memcheck: Check unit suites and integration test
# files, in a build tree configured WITHOUT sanitizers (valgrind and ASan do
# not mix: `configure --enable-werror`); it makes sidecar/maitred and the
# unit programs it runs first. What deploy/run-tests.sh's valgrind stage runs.
# The build tree: MAITRED_BUILDDIR, else the source tree (configured in
# place), else build/ (a VPATH build, deploy/demo.sh's).
#
#   tests/valgrind.sh                          # the default sets below
#   VALGRIND_UNIT="test_core" VALGRIND_IT="test_calls test_faults" tests/valgrind.sh
#   VALGRIND_UNIT= tests/valgrind.sh           # integration files only
#   VALGRIND_UNIT=all VALGRIND_IT=all tests/valgrind.sh   # every unit suite
#                                              # and every integration file
#
# Any memcheck error, or a definite leak, fails: a unit suite through
# valgrind's --error-exitcode, an integration test through the harness
# (MAITRED_WRAP, tests/integration/harness.py). Suppressions: only third
# party, in tests/valgrind.supp. Logs of what failed are printed at the end.
set -u

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
build=${MAITRED_BUILDDIR:-}
if [ -z "$build" ]; then
  build=$src
  [ -f "$src/config.status" ] || [ ! -f "$src/build/config.status" ] || build=$src/build
fi
build=$(cd "$build" && pwd)
supp="$src/tests/valgrind.supp"
# Unit suites that finish within seconds under memcheck (test_fault and
# test_discovery take 15-30 s on a loaded machine, test_config, test_pbwire
# and the lb property suites minutes: `make check-valgrind` runs them all).
: "${VALGRIND_UNIT=test_core test_grpc test_route test_record test_admin test_health test_lb_failmalloc test_transport}"
# test_faults' broken upstreams and clients, and one kill mid-stream: the
# error paths, within CI's budget (its other Killed tests add ~50 s).
: "${VALGRIND_IT=test_faults.BrokenUpstreams test_faults.BadClients test_faults.Killed.test_upstream_killed_mid_stream}"
VG="valgrind -q --error-exitcode=99 --leak-check=full --suppressions=$supp"

if ! command -v valgrind >/dev/null; then
  echo "valgrind: not installed (Debian: valgrind)"
  exit 1
fi
if [ ! -f "$build/Makefile" ]; then
  echo "valgrind: $build is not a configured build tree (MAITRED_BUILDDIR names one)"
  exit 1
fi
if grep -q -- '-fsanitize' "$build/Makefile" 2>/dev/null; then
  echo "valgrind: $build is built with sanitizers; configure a tree without them"
  exit 1
fi
if [ "$VALGRIND_UNIT" = all ]; then
  VALGRIND_UNIT=$(make -s -C "$build" print-unit-tests | tr ' ' '\n' | sed 's|^tests/unit/||' | tr '\n' ' ')
fi
it_args=$VALGRIND_IT
[ "$VALGRIND_IT" = all ] && it_args=""   # run.sh with no name: every file

progs=""
for t in $VALGRIND_UNIT; do progs="$progs tests/unit/$t"; done
# docs/config-reference.md: test_deploy checks the generated reference
if ! make -C "$build" -j2 sidecar/maitred docs/config-reference.md $progs >"$build/valgrind-build.log" 2>&1; then
  cat "$build/valgrind-build.log"
  exit 1
fi

fail=0
failed_logs=""
for t in $VALGRIND_UNIT; do
  log="$build/tests/unit/$t.vg.log"
  start=$(date +%s)
  if MAITRED_SRCDIR="$src" CK_FORK=no $VG --errors-for-leak-kinds=definite,indirect \
      "$build/tests/unit/$t" >"$log" 2>&1; then
    echo "PASS (valgrind): tests/unit/$t ($(( $(date +%s) - start )) s)"
  else
    echo "FAIL (valgrind): tests/unit/$t (see $log)"
    fail=1
    failed_logs="$failed_logs $log"
  fi
done

if [ -n "$VALGRIND_IT" ]; then
  start=$(date +%s)
  mkdir -p "$build/tests/integration"
  # shellcheck disable=SC2086 # word splitting intended: a list of names
  if MAITRED_WRAP="$VG --errors-for-leak-kinds=definite" MAITRED_SRCDIR="$src" MAITRED_BUILDDIR="$build" \
      MAITRED_BIN="$build/sidecar/maitred" MAITRED_IT= "$src/tests/integration/run.sh" $it_args \
      >"$build/tests/integration/valgrind.log" 2>&1; then
    echo "PASS (valgrind): integration $VALGRIND_IT ($(( $(date +%s) - start )) s)"
  else
    echo "FAIL (valgrind): integration $VALGRIND_IT"
    fail=1
    failed_logs="$failed_logs $build/tests/integration/valgrind.log"
  fi
fi

for log in $failed_logs; do
  printf '\n----- %s\n' "$log"
  cat "$log"
done
exit $fail
