#!/usr/bin/env bash
# bench/proxy/profile.sh: where a proxy's time per call goes. Runs a fixed
# number of gRPC unary calls through one row (maitred by default; any row of
# run.sh works, which is how to compare with nghttpx) and prints:
#   perf       the top symbols (perf record attached to the proxy's processes)
#   strace     syscalls per call, by syscall (strace -c -f attached)
#   callgrind  instructions per call and the top functions (valgrind,
#              started under it; slow: use fewer calls; maitred and
#              nghttpx, whose single-process mode keeps its worker in the
#              process valgrind starts)
# Each tool gets its own fresh proxy and upstreams. See README.md.
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

ROW=maitred
CALLS=200000
CLIENTS=4
STREAMS=32
MODE=h2c
TOOLS="perf strace"
TOPN=30
DUR=300         # only bounds each h2load run here (h2load_run adds 60 s)
WARM=0
PORT_BASE=25100
CPU_PROXY=1
CPU_LOAD=0
KEEP=0
RATE=0          # 0: saturation (-c x -m in flight); N: N calls/s in all (h2load --rps)
UPSTREAM_BIN=${UPSTREAM_BIN:-$top/build/bench/proxy/grpc_upstream}
MAITRED_BIN=${MAITRED_BIN:-$top/build/sidecar/maitred}

usage() {
	cat <<EOF
usage: $0 [options]
  -p ROW         maitred | nghttpx | haproxy | nginx (default $ROW)
  -n CALLS       calls per tool (default $CALLS; callgrind uses CALLS/10)
  -c N, -m N     h2load connections and streams each (default $CLIENTS, $STREAMS)
  -r RATE        a steady rate instead of saturation: RATE calls/s in all,
                 spread over the -c connections (h2load --rps RATE/c, one
                 stream each), so each call arrives alone, as in production
  -t h2c|tls     upstream transport (default $MODE)
  -T LIST        tools among perf, strace, callgrind, ssl (default "$TOOLS";
                 ssl: libssl calls and record sizes per call, -t tls, root)
  -N N           how many symbols / functions to print (default $TOPN)
  -P PORT_BASE   as in run.sh (default $PORT_BASE)
  -C PROXY,LOAD  cores (default $CPU_PROXY,$CPU_LOAD)
  -k             keep the temp dir (perf.data, callgrind.out, logs)
EOF
}

while getopts "p:n:c:m:r:t:T:N:P:C:kh" opt; do
	case $opt in
	p) ROW=$OPTARG ;;
	n) CALLS=$OPTARG ;;
	c) CLIENTS=$OPTARG ;;
	m) STREAMS=$OPTARG ;;
	r) RATE=$OPTARG ;;
	t) MODE=$OPTARG ;;
	T) TOOLS=${OPTARG//,/ } ;;
	N) TOPN=$OPTARG ;;
	P) PORT_BASE=$OPTARG ;;
	C) CPU_PROXY=${OPTARG%,*}; CPU_LOAD=${OPTARG#*,} ;;
	k) KEEP=1 ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done

. "$here/common.sh"

why=$(available "$ROW")
[ -n "$why" ] && { echo "cannot profile $ROW: $why" >&2; exit 1; }
[ "$ROW" = direct ] && { echo "profile a proxy, not the direct path" >&2; exit 2; }
TARGET_URI="http://127.0.0.1:$PROXY_PORT/bench.Echo/Call"

# drive N: N calls through the proxy; prints the calls the upstreams served.
drive() {
	local n0 n1
	n0=$(up_stat calls)
	if [ "$RATE" -gt 0 ]; then
		h2load_run "$T/h2load.out" -n "$1" -c "$CLIENTS" -m 1 --rps $((RATE / CLIENTS))
	else
		h2load_run "$T/h2load.out" -n "$1" -c "$CLIENTS" -m "$STREAMS"
	fi
	n1=$(up_stat calls)
	echo $((n1 - n0))
}

# begin: fresh upstreams and proxy, one checked call (pools set up).
begin() {
	start_upstreams || { echo "upstreams did not start" >&2; exit 1; }
	start_proxy "$ROW" || exit 1
	check_call || { echo "a call through $ROW failed (see $T/check.out)" >&2; exit 1; }
}
end() {
	stop_proxy
	stop_upstreams
}

pid_list() { tree_pids "$PROXY_PID" | paste -sd, -; }

run_perf() {
	local perf_pid calls
	command -v perf >/dev/null || { echo "perf: not installed (apt-get install linux-perf)"; return; }
	begin
	perf record -q -F 4999 -p "$(pid_list)" -o "$T/perf.data" >"$T/perf.log" 2>&1 &
	perf_pid=$!
	PIDS+=($perf_pid)
	sleep 0.5
	calls=$(drive "$CALLS")
	kill -INT $perf_pid; wait $perf_pid 2>/dev/null
	end
	echo "## perf: $ROW, $calls calls, $MODE upstreams, top $TOPN symbols (self time)"
	perf report -i "$T/perf.data" --stdio --no-children --sort dso,symbol \
		2>/dev/null | grep -v '^#' | grep -v '^$' | sed 's/[ -]*$//' |
		head -n "$TOPN"
	echo
}

run_strace() {
	local st_pid calls
	command -v strace >/dev/null || { echo "strace: not installed (apt-get install strace)"; return; }
	begin
	# -c counts; attach to every thread of every process of the proxy.
	strace -c -f -o "$T/strace.out" -p "$(pid_list)" >/dev/null 2>&1 &
	st_pid=$!
	PIDS+=($st_pid)
	sleep 0.5
	calls=$(drive "$CALLS")
	kill -INT $st_pid; wait $st_pid 2>/dev/null
	end
	echo "## strace: $ROW, $calls calls, $MODE upstreams: syscalls per call"
	awk -v n="$calls" '
		$1 ~ /^[0-9.]+$/ && NF >= 5 {
			name = $NF; count = $4
			if (n > 0) printf "%-20s %10d  %8.3f per call\n", name, count, count / n
		}
	' "$T/strace.out" | sort -k2,2nr
	echo "(strace slows the proxy a lot: read the counts, not the time)"
	echo
}

run_callgrind() {
	local calls n=$((CALLS / 10))
	command -v valgrind >/dev/null || { echo "callgrind: not installed (apt-get install valgrind)"; return; }
	local extra=${NGHTTPX_EXTRA:-}
	case $ROW in
	maitred) ;;
	# nghttpx forks its worker; single-process mode runs the same worker
	# code in the process valgrind starts.
	nghttpx) NGHTTPX_EXTRA="${extra:+$extra
}single-process=yes" ;;
	*) echo "callgrind: only for maitred and nghttpx (the other peers fork workers)"; return ;;
	esac
	PROXY_WRAP=(valgrind --tool=callgrind --callgrind-out-file="$T/callgrind.out")
	LISTEN_TRIES=600 begin
	PROXY_WRAP=()
	NGHTTPX_EXTRA=$extra
	calls=$(drive "$n")
	end
	echo "## callgrind: $ROW, $calls calls (including start-up and one check call)"
	callgrind_annotate "$T/callgrind.out" 2>/dev/null | awk -v n="$calls" -v top="$TOPN" '
		/PROGRAM TOTALS/ { gsub(",", "", $1); if (n > 0) printf "instructions per call: %.0f\n\n", $1 / n }
		/file:function/ { on = 1; next }
		on && NF && shown < top { print; shown++ }'
	echo
}

# ssl: uprobes on libssl's SSL_write and SSL_read (their returns) in the
# proxy and in the upstreams: how many calls and TLS records each call costs,
# and how big the records are. SSL_write returns what it wrote (one record up
# to 16 KiB per call with partial writes, as maitred and nghttpx use them);
# SSL_read returns at most one record's plaintext. Needs root (perf probe);
# the probes are removed afterwards.
run_ssl() {
	local lib calls rec_pid
	[ "$MODE" = tls ] || { echo "ssl: needs -t tls"; return; }
	command -v perf >/dev/null || { echo "perf: not installed (apt-get install linux-perf)"; return; }
	lib=$(ldconfig -p | awk '/libssl\.so\.3 / { print $NF; exit }')
	perf probe -d 'mtdbench:*' >/dev/null 2>&1
	if ! perf probe -q -x "$lib" -a 'mtdbench:w=SSL_write%return ret=$retval:s32' \
		-a 'mtdbench:r=SSL_read%return ret=$retval:s32' >"$T/probe.log" 2>&1; then
		echo "ssl: perf probe failed (root needed?): $(tail -1 "$T/probe.log")"; return
	fi
	begin
	perf record -q -e 'mtdbench:*' -p "$(pid_list),$(IFS=,; echo "${UP_PIDS[*]}")" \
		-o "$T/ssl.data" >"$T/ssl.log" 2>&1 &
	rec_pid=$!
	PIDS+=($rec_pid)
	sleep 0.5
	calls=$(drive "$CALLS")
	kill -INT $rec_pid; wait $rec_pid 2>/dev/null
	local proxy_pids
	proxy_pids=$(pid_list)
	end
	perf probe -d 'mtdbench:*' >/dev/null 2>&1
	echo "## ssl: $ROW, $calls calls, TLS upstreams: libssl calls per call (proxy, and both upstreams together)"
	perf script -i "$T/ssl.data" -F pid,event,trace 2>/dev/null | awk -v n="$calls" -v proxy="$proxy_pids" '
		BEGIN { k = split(proxy, p, ","); for (i = 1; i <= k; i++) isp[p[i]] = 1 }
		{
			who = ($1 in isp) ? "proxy" : "upstream"
			ev = ($2 ~ /:w/) ? "SSL_write" : "SSL_read"
			v = $NF; sub(/.*=/, "", v); v += 0
			calls_[who, ev]++
			if (v > 0) { moved[who, ev]++; bytes[who, ev] += v }
		}
		END {
			if (n <= 0) exit
			printf "%-9s %-9s %9s %12s %13s\n", "side", "call", "per call", "records/call", "bytes/record"
			for (w = 0; w < 2; w++) for (e = 0; e < 2; e++) {
				who = w ? "upstream" : "proxy"; ev = e ? "SSL_read" : "SSL_write"
				if (!calls_[who, ev]) continue
				printf "%-9s %-9s %9.3f %12.3f %13.0f\n", who, ev, calls_[who, ev] / n,
					moved[who, ev] / n, moved[who, ev] ? bytes[who, ev] / moved[who, ev] : 0
			}
		}'
	echo "(records/call: calls that moved data; an SSL_read that returned <= 0 found nothing)"
	echo
}

for tool in $TOOLS; do
	case $tool in
	ssl) run_ssl ;;
	perf) run_perf ;;
	strace) run_strace ;;
	callgrind) run_callgrind ;;
	*) echo "unknown tool $tool" >&2 ;;
	esac
done
