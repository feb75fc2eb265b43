#!/usr/bin/env bash
# bench/proxy/bulk.sh: large messages through maitred and nghttpx, and
# directly. Three workloads, each on one h2c client connection
# (grpc_bulk) to two grpc_upstreams:
#   unary   CALLS unary calls, 1 MiB request and 1 MiB response, 4 in flight
#   server  one server-streaming call of 1 GiB in 64 KiB messages
#   client  the same, client streaming
# For each row: MB/s (message bytes both ways over wall time), the proxy's
# CPU per MiB moved (utime+stime from /proc/PID/stat over its process tree,
# as run.sh), and the peak of its private memory (smaps_rollup Anonymous and
# Private_Dirty, sampled every 20 ms, summed over its processes). See
# bench/proxy/README.md "Bulk throughput".
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

MODE=h2c
PROXIES="direct nghttpx maitred"
WORKLOADS="unary server client"
CPU_PROXY=1
CPU_LOAD=0
PORT_BASE=25200
KEEP=0
REPS=1
CALLS=256            # unary calls
STREAM_MSGS=16384    # 64 KiB messages per streaming call (1 GiB)
PROXY_WINDOW=1048576 # stream window both proxies open on each side
END_WINDOW=16777216  # stream window the client and the upstreams open
UPSTREAM_BIN=${UPSTREAM_BIN:-$top/build/bench/proxy/grpc_upstream}
BULK_BIN=${BULK_BIN:-$(dirname "$UPSTREAM_BIN")/grpc_bulk}
MAITRED_BIN=${MAITRED_BIN:-$top/build/sidecar/maitred}

usage() {
	cat <<EOF
usage: $0 [options]
  -w LIST        workloads, comma separated (default "$WORKLOADS")
  -p LIST        rows (default "$PROXIES")
  -n N           unary calls (default $CALLS)
  -s N           64 KiB messages per streaming call (default $STREAM_MSGS = 1 GiB)
  -W BYTES       stream window of both proxies (default $PROXY_WINDOW: maitred's
                 default; nghttpx is given the same)
  -t h2c|tls     upstream transport (default $MODE)
  -R N           repeat every row N times, rows interleaved; medians
  -P PORT_BASE   default $PORT_BASE
  -C PROXY,LOAD  cores (default $CPU_PROXY,$CPU_LOAD)
  -k             keep the temp dir
Environment: UPSTREAM_BIN, BULK_BIN (default beside UPSTREAM_BIN), MAITRED_BIN, BASE_BIN (a "base" row).
EOF
}

while getopts "w:p:n:s:W:t:R:P:C:kh" opt; do
	case $opt in
	w) WORKLOADS=${OPTARG//,/ } ;;
	p) PROXIES=${OPTARG//,/ } ;;
	n) CALLS=$OPTARG ;;
	s) STREAM_MSGS=$OPTARG ;;
	W) PROXY_WINDOW=$OPTARG ;;
	t) MODE=$OPTARG ;;
	R) REPS=$OPTARG ;;
	P) PORT_BASE=$OPTARG ;;
	C) CPU_PROXY=${OPTARG%,*}; CPU_LOAD=${OPTARG#*,} ;;
	k) KEEP=1 ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done

. "$here/common.sh"

[ -x "$BULK_BIN" ] || { echo "missing $BULK_BIN: make -C build bench/proxy/grpc_bulk" >&2; exit 2; }

NGHTTPX_EXTRA="frontend-http2-window-size=$PROXY_WINDOW
frontend-http2-connection-window-size=$((PROXY_WINDOW * 16))
backend-http2-window-size=$PROXY_WINDOW"
MAITRED_DOWNSTREAM="{ initial_window_size: $PROXY_WINDOW }"

# mem_sampler OUT PIDS...: every 20 ms, Anonymous and Private_Dirty of
# smaps_rollup summed over PIDS; writes "anon_kb dirty_kb" peaks to OUT
# when killed.
mem_sampler() {
	local out=$1; shift
	local a=0 d=0 pa=0 pd=0 p
	trap 'echo "$pa $pd" >"$out"; exit 0' TERM
	while :; do
		a=0 d=0
		for p in "$@"; do
			read -r x y < <(awk '$1 == "Anonymous:" { a = $2 } $1 == "Private_Dirty:" { d = $2 }
				END { print a + 0, d + 0 }' "/proc/$p/smaps_rollup" 2>/dev/null) || continue
			a=$((a + x)) d=$((d + y))
		done
		[ $a -gt $pa ] && pa=$a
		[ $d -gt $pd ] && pd=$d
		sleep 0.02
	done
}

# run_workload ROW WORKLOAD: prints "MBps cpu_ms_per_MiB anon_MiB dirty_MiB"
run_workload() {
	local row=$1 wl=$2 port pids=() t0 t1 args out=$T/$row.$wl.$RANDOM sp=""
	case $wl in
	unary) UP_EXTRA=(-z 1048576 -W $END_WINDOW); args=(-m unary -n "$CALLS" -c 4 -s 1048576) ;;
	server) UP_EXTRA=(-z 65536 -W $END_WINDOW); args=(-m server -n "$STREAM_MSGS") ;;
	client) UP_EXTRA=(-z 16 -W $END_WINDOW); args=(-m client -n "$STREAM_MSGS" -s 65536) ;;
	esac
	start_upstreams || return 1
	if [ "$row" = direct ]; then
		port=$UP1
	else
		start_proxy "$row" || { stop_upstreams; return 1; }
		port=$PROXY_PORT
		pids=($(tree_pids "$PROXY_PID"))
		mem_sampler "$out.mem" "${pids[@]}" &
		sp=$!
	fi
	t0=$([ ${#pids[@]} -gt 0 ] && cpu_ticks "${pids[@]}" || echo 0)
	timeout -k 5 600 taskset -c "$CPU_LOAD" "$BULK_BIN" -p "$port" -w $END_WINDOW "${args[@]}" >"$out" 2>&1
	local rc=$?
	t1=$([ ${#pids[@]} -gt 0 ] && cpu_ticks "${pids[@]}" || echo 0)
	if [ -n "$sp" ]; then
		kill -TERM "$sp"
		wait "$sp" 2>/dev/null
	fi
	[ "$row" != direct ] && stop_proxy
	stop_upstreams
	if [ $rc != 0 ]; then
		log "$row $wl failed: $(tail -2 "$out" | tr '\n' ' ')"
		KEEP=1
		echo "- - - -"
		return 0
	fi
	awk -v t0="$t0" -v t1="$t1" -v tck="$TCK" -v row="$row" -v memf="$out.mem" '
		/^bulk / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
		END {
			mib = (v["sent"] + v["received"]) / 1048576
			if (row == "direct") { print v["MBps"], "-", "-", "-"; exit }
			getline m < memf; split(m, mm, " ")
			printf "%s %.3f %.1f %.1f\n", v["MBps"], (t1 - t0) * 1000 / tck / mib, mm[1] / 1024, mm[2] / 1024
		}' "$out"
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0 || a[1] == "-") print "-"; else print a[int((NR + 1) / 2)] }'; }

# BASE_BIN: a "base" row, maitred's with another binary (a before / after
# in one run, rounds interleaved).
BASE_BIN=${BASE_BIN:-}
[ -n "$BASE_BIN" ] && [[ " $PROXIES " != *" base "* ]] && PROXIES="$PROXIES base"
conf_base() { local MAITRED_BIN=$BASE_BIN; conf_maitred; }
row_available() {
	if [ "$1" = base ]; then
		[ -n "$BASE_BIN" ] || { echo "BASE_BIN not set"; return; }
		MAITRED_BIN=$BASE_BIN available maitred
	else
		available "$1"
	fi
}

log "mode $MODE, proxy on cpu$CPU_PROXY, client and upstreams on cpu$CPU_LOAD, proxy windows $PROXY_WINDOW"
declare -A R
for wl in $WORKLOADS; do
	for rep in $(seq "$REPS"); do
		for row in $PROXIES; do
			why=$(row_available "$row")
			if [ -n "$why" ]; then
				log "skipping $row: $why"
				continue
			fi
			res=$(run_workload "$row" "$wl")
			log "$wl $row round $rep: $res"
			R[$wl.$row]+="$res"$'\n'
		done
	done
done

echo
echo "| workload | row | MB/s | proxy CPU ms/MiB | peak Anonymous MiB | peak Private_Dirty MiB |"
echo "|---|---|---:|---:|---:|---:|"
for wl in $WORKLOADS; do
	for row in $PROXIES; do
		[ -n "${R[$wl.$row]:-}" ] || continue
		cols=()
		for i in 1 2 3 4; do
			cols+=("$(printf '%s' "${R[$wl.$row]}" | awk -v i=$i 'NF { print $i }' | median)")
		done
		echo "| $wl | $row | ${cols[0]} | ${cols[1]} | ${cols[2]} | ${cols[3]} |"
	done
done
