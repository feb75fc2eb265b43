#!/bin/bash
# maitred demo, on a fresh Debian 12 machine (as root, or with sudo):
#
#   deploy/demo.sh
#
# Installs the Debian packages that are missing, builds maitred in build/ (a
# VPATH build: the binary is build/sidecar/maitred; deploy/run-tests.sh
# builds in build-asan/, so either can run first), starts three
# instances of a real gRPC service (tests/integration/upstream.py, Echo) on
# 127.0.0.1:50051-50053, starts maitred with its embedded default config
# (listen 127.0.0.1:15001, every service round robin over those three), sends
# real calls through it and prints how they were spread. Everything it
# starts is stopped by PID when it ends.
#
# Environment: CALLS (default 300), CONCURRENCY (default 4), JOBS (make -j,
# default the CPU count).
set -eu

cd "$(dirname "$0")/.."
top=$(pwd)
CALLS=${CALLS:-300}
CONCURRENCY=${CONCURRENCY:-4}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
PY=/usr/bin/python3

PACKAGES="build-essential autoconf automake libtool pkg-config libnghttp2-dev
  libevent-dev libssl-dev libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev
  protobuf-compiler libyaml-dev check python3-grpcio python3-grpc-tools
  python3-protobuf python3-h2 openssl"

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

install_missing

say "building maitred in build/ (deploy/build-dir.sh: a VPATH build of its own)"
deploy/build-dir.sh build
make -C build -j"$JOBS" sidecar/maitred >/dev/null

for port in 15001 50051 50052 50053; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port 127.0.0.1:$port is already in use; stop what listens there first" >&2
    exit 1
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/maitred-demo.XXXXXX")
pids=""
cleanup() {
  local pid i
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $pids; do
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "demo failed: $*" >&2
  for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }; done >&2
  exit 1
}

export MAITRED_TEST_GEN="$work/gen"
"$PY" tests/integration/protogen.py "$MAITRED_TEST_GEN"

say "starting three Echo instances on 127.0.0.1:50051-50053"
n=0
for port in 50051 50052 50053; do
  n=$((n + 1))
  "$PY" tests/integration/upstream.py --name "instance-$n" --port "$port" \
    --ready-file "$work/up$n.ready" >"$work/up$n.log" 2>&1 &
  pids="$pids $!"
done
for n in 1 2 3; do
  for i in $(seq 1 300); do [ -f "$work/up$n.ready" ] && break; sleep 0.1; done
  [ -f "$work/up$n.ready" ] || fail "instance-$n did not start"
done

say "starting maitred (embedded default config: 127.0.0.1:15001 -> 50051, 50052, 50053)"
build/sidecar/maitred --log-level info >"$work/maitred.log" 2>&1 &
mpid=$!
pids="$mpid $pids"
for i in $(seq 1 300); do
  kill -0 "$mpid" 2>/dev/null || fail "maitred exited"
  (exec 3<>/dev/tcp/127.0.0.1/15001) 2>/dev/null && break
  sleep 0.1
done
(exec 3<>/dev/tcp/127.0.0.1/15001) 2>/dev/null || fail "maitred is not listening on 127.0.0.1:15001"

say "sending $CALLS calls of maitred.testing.v1.Echo/Unary through 127.0.0.1:15001"
"$PY" tests/integration/democlient.py --target 127.0.0.1:15001 --calls "$CALLS" \
  --concurrency "$CONCURRENCY" || fail "some calls failed"

say "stopping (SIGTERM drains maitred)"
kill -TERM "$mpid"
rc=0
for i in $(seq 1 300); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
# A drain that does not end, or ends in a crash, fails the demo (the
# cleanup kills what is left).
kill -0 "$mpid" 2>/dev/null && fail "maitred did not exit within 30 s of SIGTERM"
wait "$mpid" || rc=$?
[ "$rc" -eq 0 ] || fail "maitred exited with status $rc at SIGTERM (0 expected: a drain ends cleanly)"
echo "maitred exited with status 0"
