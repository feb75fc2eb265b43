#!/bin/bash
# A newcomer's path (issue 16 §1): the README's two commands, one after the
# other, in one clone, whatever was built there before. A stage of
# deploy/run-tests.sh (NEWCOMER=0 skips it); by hand:
#
#   tests/newcomer.sh
#
# In a clone of this checkout's HEAD (committed work only, as a new user's
# clone) in a temporary directory:
#   1. an in-place build by hand (`autoreconf -fi && ./configure && make
#      sidecar/maitred`, as people do), which VPATH builds must survive;
#   2. deploy/demo.sh: must clean the in-place build and build in build/;
#   3. a short deploy/run-tests.sh (TSAN=0 VALGRIND=0 FUZZ_TIME=0; of make
#      check's tests test_core, test_config and the integration files in
#      NEWCOMER_IT: the outer run tests the rest): builds build-asan/;
#   4. build-asan/sidecar/maitred must be instrumented (ASan and UBSan entry
#      symbols in its dynamic symbols, libasan loaded) and build/'s not;
#   5. the harness must refuse build/'s plain maitred against build-asan/'s
#      configuration;
#   6. build-asan/ configured again by hand without sanitizers, then
#      run-tests.sh again (test_core, the suite that caught the issue's
#      stale objects, and one integration test): it must configure
#      build-asan/ afresh (not reuse its objects under other flags) and the
#      binary be instrumented again;
#   7. run-tests.sh a third time, nothing changed: no configure at all;
#   8. deploy/demo.sh again (run-tests first, then the demo).
# Each run-tests.sh must have run its integration tests, not skipped them
# (run.sh's exit 77 passes make check), and each demo must end with
# maitred's exit 0 at SIGTERM (demo.sh fails otherwise).
# The clone is removed when everything passed, kept (and named) otherwise.
#
# Environment: NEWCOMER_IT (default "test_calls test_config_cli test_deploy"),
# NEWCOMER_KEEP=1 keeps the clone even on success. The demo needs ports
# 15001 and 50051-50053 on 127.0.0.1.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
IT=${NEWCOMER_IT:-"test_calls test_config_cli test_deploy"}
# The inner runs must not see the outer make check's or stages' settings.
unset MAITRED_BIN MAITRED_SRCDIR MAITRED_BUILDDIR MAITRED_EXPECT_SAN MAITRED_IT MAITRED_WRAP
export NEWCOMER=0 TSAN=0 VALGRIND=0 FUZZ_TIME=0

say() { printf '\n==> newcomer: %s\n' "$*"; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/maitred-newcomer.XXXXXX")
start=$(date +%s)
fail() {
	say "FAILED: $*"
	say "the clone is kept in $dir/maitred (logs: $dir/*.log)"
	exit 1
}
# step NAME LOG COMMAND...: run it, its output to $dir/LOG; on failure the
# log's tail is printed.
step() {
	local name=$1 log=$dir/$2 t0
	shift 2
	t0=$(date +%s)
	if "$@" >"$log" 2>&1; then
		echo "ok: $name ($(($(date +%s) - t0)) s)"
	else
		tail -n 80 "$log"
		fail "$name (log: $log)"
	fi
}
# ran_integration STEP: the integration tests of that run ran and passed.
# run.sh exits 77 (skipped) without grpcio, which make check counts as a
# success: the newcomer would then have tested nothing of the daemon.
ran_integration() {
	local trs=build-asan/tests/integration/run.sh.trs
	[ -f "$trs" ] || fail "$1: no $trs: the integration tests did not run"
	if ! grep -q '^:test-result: PASS' "$trs" || grep -q -v '^:test-result: PASS' <(grep '^:test-result:' "$trs"); then
		fail "$1: the integration tests did not pass: $(grep '^:test-result:' "$trs" | tr '\n' ' ')"
	fi
	echo "ok: $1: the integration tests ran ($(grep -c '^:test-result: PASS' "$trs") PASS)"
}
has_san() { # BINARY: the sanitizers whose entry symbols it has, e.g. "asan ubsan"
	local syms out=""
	syms=$(nm -D "$1")
	grep -q ' __asan_init$' <<<"$syms" && out="$out asan"
	grep -q ' __ubsan_handle_' <<<"$syms" && out="$out ubsan"
	grep -q ' __tsan_init$' <<<"$syms" && out="$out tsan"
	echo "${out# }"
}

say "a clone of $src (HEAD $(git -C "$src" rev-parse --short HEAD)) in $dir/maitred"
git clone -q "$src" "$dir/maitred"
cd "$dir/maitred"

say "1. an in-place build by hand"
step "autoreconf -fi && ./configure && make sidecar/maitred" 1-inplace.log \
	bash -c 'autoreconf -fi && ./configure PYTHON=/usr/bin/python3 && make -j2 sidecar/maitred'

say "2. deploy/demo.sh"
step "deploy/demo.sh" 2-demo.log deploy/demo.sh
grep -q 'source tree is configured in place' "$dir/2-demo.log" ||
	fail "the demo did not say it cleaned the in-place build"
[ ! -f config.status ] && [ ! -f sidecar/maitred ] || fail "the in-place build is still there after the demo"
[ -x build/sidecar/maitred ] || fail "no build/sidecar/maitred after the demo"
grep -E 'instance-[123]' "$dir/2-demo.log" | tail -n 3

say "3. deploy/run-tests.sh (short: TSAN=0 VALGRIND=0 FUZZ_TIME=0, integration: $IT)"
step "deploy/run-tests.sh" 3-run-tests.log env MAITRED_IT="$IT" \
	CHECK_TESTS="tests/unit/test_core tests/unit/test_config tests/integration/run.sh" deploy/run-tests.sh
grep -h -E '^# (TOTAL|PASS|FAIL)|^integration:' "$dir/3-run-tests.log" build-asan/tests/integration/run.sh.log || true
ran_integration "deploy/run-tests.sh"

say "4. build-asan/'s maitred is instrumented, build/'s is not"
got=$(has_san build-asan/sidecar/maitred)
[ "$got" = "asan ubsan" ] || fail "build-asan/sidecar/maitred has sanitizers '$got', not 'asan ubsan'"
ldd build-asan/sidecar/maitred | grep -q 'libasan\.so' || fail "build-asan/sidecar/maitred does not load libasan"
got=$(has_san build/sidecar/maitred)
[ -z "$got" ] || fail "build/sidecar/maitred (the demo's plain build) has sanitizers: $got"
echo "ok: build-asan/sidecar/maitred: asan ubsan (loads $(ldd build-asan/sidecar/maitred | awk '$1 ~ /san\.so/ { printf "%s ", $1 }')); build/sidecar/maitred: none"

say "5. the harness refuses a plain maitred in an ASan build's tests"
if MAITRED_BUILDDIR=$PWD/build-asan MAITRED_BIN=$PWD/build/sidecar/maitred \
	tests/integration/run.sh test_config_cli.Cli.test_version >"$dir/5-refuse.log" 2>&1; then
	cat "$dir/5-refuse.log"
	fail "the harness ran tests against build/'s plain maitred with build-asan/'s configuration"
fi
grep -q 'is built with sanitizers: none, but its build is configured with: asan,ubsan' "$dir/5-refuse.log" ||
	{ cat "$dir/5-refuse.log"; fail "the harness failed, but not for the sanitizers"; }
echo "ok: refused ($(grep -o 'is built with sanitizers: none, but its build is configured with: asan,ubsan' "$dir/5-refuse.log" | head -n 1))"

say "6. build-asan/ configured again by hand without sanitizers, then run-tests.sh"
step "cd build-asan && ../configure" 6-reconfigure.log \
	bash -c 'cd build-asan && ../configure PYTHON=/usr/bin/python3'
step "deploy/run-tests.sh (after build-asan/ was configured without sanitizers)" 6-run-tests.log \
	env CHECK_TESTS="tests/unit/test_core tests/integration/run.sh" \
	MAITRED_IT=test_config_cli.Cli.test_version deploy/run-tests.sh
grep -q 'configuring it afresh' "$dir/6-run-tests.log" || fail "run-tests.sh did not configure build-asan/ afresh"
ran_integration "deploy/run-tests.sh (after build-asan/ was configured without sanitizers)"
got=$(has_san build-asan/sidecar/maitred)
[ "$got" = "asan ubsan" ] || fail "after run-tests.sh build-asan/sidecar/maitred has sanitizers '$got'"
echo "ok: configured afresh; build-asan/sidecar/maitred: $got"

say "7. run-tests.sh again, nothing changed"
step "deploy/run-tests.sh (again)" 7-run-tests.log \
	env CHECK_TESTS="tests/unit/test_core tests/integration/run.sh" \
	MAITRED_IT=test_config_cli.Cli.test_version deploy/run-tests.sh
if grep -q -E 'configuring it afresh|^==> configure in|source tree is configured in place' "$dir/7-run-tests.log"; then
	fail "the second run configured again"
fi
ran_integration "deploy/run-tests.sh (again)"
echo "ok: build-asan/ kept as it was"

say "8. deploy/demo.sh after run-tests.sh"
step "deploy/demo.sh (again)" 8-demo.log deploy/demo.sh

say "passed in $(($(date +%s) - start)) s"
if [ "${NEWCOMER_KEEP:-0}" = 1 ]; then
	echo "clone kept in $dir/maitred (NEWCOMER_KEEP=1)"
else
	cd /
	rm -rf "$dir"
fi
