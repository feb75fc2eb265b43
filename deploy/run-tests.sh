#!/bin/bash
# maitred's full test suite, on a fresh Debian 12 machine (as root, or with
# sudo): what the README's second command and CI run.
#
#   deploy/run-tests.sh
#
# Installs the Debian packages that are missing, builds in build-asan/ (a
# VPATH build of its own, deploy/build-dir.sh: configured afresh whenever its
# flags differ, the source tree cleaned when it was configured in place, so
# whatever was built before in the checkout, the demo's build/ included,
# cannot leak in) with warnings as errors and AddressSanitizer +
# UndefinedBehaviorSanitizer, and runs `make -j2 check` there (Check unit
# tests and the integration tests; MAITRED_IT="test_calls ..." runs only
# those integration files, CHECK_TESTS="tests/unit/test_core
# tests/integration/run.sh" only those of make check's tests), then the
# newcomer stage (tests/newcomer.sh: a
# clone of this checkout's HEAD, the README's two commands one after the
# other in it, short; NEWCOMER=0 skips it), then the ThreadSanitizer stage
# (deploy/tsan.sh: a --enable-tsan build of a copy of the sources in a
# temporary directory, the unit suites that start threads and the
# integration files that stress them; TSAN=0 skips it), then the valgrind
# stage (deploy/valgrind.sh: a copy built without sanitizers, the quick unit
# suites and most of test_faults under memcheck; VALGRIND=0 skips it), then
# every libFuzzer target for FUZZ_TIME seconds (default 60; FUZZ_TIME=0
# skips fuzzing). On failure it prints the log of every test that failed,
# the race or memcheck report, or the fuzzer's crash report, and exits
# non-zero.
set -eu

cd "$(dirname "$0")/.."

PACKAGES="build-essential autoconf automake libtool pkg-config libnghttp2-dev
  libevent-dev libssl-dev libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev git
  protobuf-compiler libyaml-dev check python3-grpcio python3-grpc-tools
  python3-protobuf python3-h2 openssl golang-go golang-google-grpc-dev
  default-jdk-headless libgrpc-java libnetty-java libguava-java libperfmark-java
  libprotobuf-java
  clang libclang-rt-14-dev etcd-server dnsmasq-base
  python3-prometheus-client python3-yaml chromium systemd valgrind"

say() { printf '\n==> %s\n' "$*"; }

install_missing() {
  local missing="" p sudo=""
  for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  say "installing:$missing"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y $missing
}

# Node.js runs the xDS test peers (tests/xds: a management server and a
# proxyless gRPC client) and the tracing one (tests/otel: the OpenTelemetry
# SDK's OTLP exporter), each pinned by its package-lock.json. Any Node.js with
# its npm will do: a machine may have one that is not Debian's (whose
# package then provides npm itself), so this asks for commands, not packages.
install_node() {
  local sudo=""
  command -v node >/dev/null && command -v npm >/dev/null && return 0
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  say "installing: nodejs npm"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y nodejs npm
}

install_missing
install_node
say "npm ci in tests/xds and tests/otel (the xDS and tracing test peers)"
(cd tests/xds && npm ci --no-audit --no-fund)
(cd tests/otel && npm ci --no-audit --no-fund)

say "configuring build-asan/ (--enable-werror --enable-asan --enable-ubsan)"
deploy/build-dir.sh build-asan --enable-werror --enable-asan --enable-ubsan PYTHON=/usr/bin/python3

say "building (build-asan/)"
make -C build-asan -j2

say "make -j2 check (build-asan/)${MAITRED_IT:+; integration: $MAITRED_IT}"
if make -C build-asan -j2 check ${CHECK_TESTS:+"TESTS=$CHECK_TESTS"}; then
  if [ "${NEWCOMER:-1}" != 0 ]; then
    say "newcomer: tests/newcomer.sh (NEWCOMER=0 skips it)"
    if ! tests/newcomer.sh; then
      say "tests/newcomer.sh failed: the README's two commands in one clone (its log is above)"
      exit 1
    fi
  fi
  if [ "${TSAN:-1}" != 0 ]; then
    say "ThreadSanitizer: deploy/tsan.sh (TSAN=0 skips it)"
    if ! deploy/tsan.sh; then
      say "deploy/tsan.sh failed: a data race (the report is above), a failed test, or the TSan build"
      exit 1
    fi
  fi
  if [ "${VALGRIND:-1}" != 0 ]; then
    say "valgrind memcheck: deploy/valgrind.sh (VALGRIND=0 skips it)"
    if ! deploy/valgrind.sh; then
      say "deploy/valgrind.sh failed: a memcheck error or definite leak (the report is above), a failed test, or the build"
      exit 1
    fi
  fi
  if [ "${FUZZ_TIME:-60}" != 0 ]; then
    say "fuzzing: fuzz/build.sh (${FUZZ_TIME:-60} s per target)"
    if ! MAITRED_BUILDDIR=$PWD/build-asan fuzz/build.sh; then
      say "fuzz/build.sh failed: a target did not build, or a fuzzer found a crash (reproducer under build-asan/fuzz/out/crash-*)"
      exit 1
    fi
  fi
  say "all tests passed"
  exit 0
fi

say "failed tests and their logs"
cd build-asan
find . -name '*.trs' -print | sort | while read -r trs; do
  if grep -Eq '^:test-result: (FAIL|ERROR|XPASS)' "$trs"; then
    log="${trs%.trs}.log"
    printf '\n----- build-asan/%s\n' "${log#./}"
    cat "$log" 2>/dev/null || echo "(no log)"
  fi
done
if [ -f test-suite.log ]; then
  printf '\n----- test-suite.log (summary)\n'
  sed -n '1,20p' test-suite.log
fi
exit 1
