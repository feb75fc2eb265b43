#!/usr/bin/env bash
# bench/proxy/smaps.sh [h2c|tls] [PORT_BASE]: where maitred's resident memory
# is, by mapping (from /proc/PID/smaps), at four points of one bench row:
# started, after one call (upstream connections and, for TLS, handshakes
# done), after the saturation phase (4 x 32 in flight) and at 512 calls in
# flight on one client connection. Columns are Rss in KiB: anon = anonymous
# mappings (the worker's malloc arena, thread stacks), heap = the main
# arena (config, OpenSSL contexts), libcrypto / libssl / otherfile = file
# pages mapped (shared, clean; counted in VmHWM all the same); ".anon" the
# anonymous (relocated, written) part of those. Then the largest anonymous
# mappings. Same set-up as run.sh (its common.sh); DUR seconds per phase.
# Use a build without sanitizers (README.md).
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
MODE=${1:-tls}
PORT_BASE=${2:-25000}
CPU_PROXY=1
CPU_LOAD=0
KEEP=${KEEP:-0}
DUR=${DUR:-4}
WARM=1
UPSTREAM_BIN=${UPSTREAM_BIN:-$top/build/bench/proxy/grpc_upstream}
MAITRED_BIN=${MAITRED_BIN:-$top/build/sidecar/maitred}
# shellcheck source=common.sh
source "$here/common.sh"
TARGET_URI="http://127.0.0.1:$PROXY_PORT$PATH_URI"

breakdown() { # LABEL
	python3 - "$PROXY_PID" "$1" <<'PY'
import collections, re, sys
pid, label = sys.argv[1], sys.argv[2]
rss = collections.Counter()
anon = collections.Counter()
cur = None
for line in open("/proc/%s/smaps" % pid):
    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
        parts = line.split()
        name = parts[5] if len(parts) > 5 else ""
        if "libcrypto" in name:
            cur = "libcrypto"
        elif "libssl" in name:
            cur = "libssl"
        elif name in ("[heap]", "[stack]"):
            cur = name.strip("[]")
        elif name.startswith("/"):
            cur = "otherfile"
        elif name == "":
            cur = "anon"
        else:
            cur = None  # [vdso], [vvar]...
    elif cur and line.startswith("Rss:"):
        rss[cur] += int(line.split()[1])
    elif cur and line.startswith("Anonymous:"):
        anon[cur] += int(line.split()[1])
st = {l.split(":")[0]: l.split()[1] for l in open("/proc/%s/status" % pid) if l.startswith("Vm")}
cols = ["anon", "heap", "stack", "libcrypto", "libssl", "otherfile"]
print("%-6s VmHWM %6s VmRSS %6s | %s | file .anon: %s" % (
    label, st["VmHWM"], st["VmRSS"], " ".join("%s=%d" % (c, rss[c]) for c in cols),
    " ".join("%s=%d" % (c, anon[c]) for c in ("libcrypto", "libssl", "otherfile"))))
PY
}

start_upstreams || exit 1
start_proxy maitred || exit 1
breakdown start
check_call || { log "the check call failed"; exit 1; }
breakdown 1call
h2load_run "$T/sat.out" -D "$DUR" --warm-up-time "$WARM" -c 4 -m 32
breakdown sat
h2load_run "$T/f512.out" -D "$DUR" -c 1 -m 512
breakdown 512
echo "largest anonymous mappings (KiB):"
awk '/^[0-9a-f]+-[0-9a-f]+ /{m = $0} /^Rss:/{ if ($2 > 100) print $2, m }' "/proc/$PROXY_PID/smaps" |
	grep -v '/' | sort -rn | head -5
stop_proxy
stop_upstreams
