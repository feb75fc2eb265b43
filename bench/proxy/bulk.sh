#!/usr/bin/env bash
# bench/proxy/bulk.sh: large messages through maitred and nghttpx, through
# a relay that only carries bytes (tcp_relay: the floor of a hop, README
# "The floor of a hop"), and directly. Four workloads against two
# grpc_upstreams; the first three on one h2c client connection (grpc_bulk):
#   unary   CALLS unary calls, 1 MiB request and 1 MiB response, 4 in flight
#   server  one server-streaming call of 1 GiB in 64 KiB messages
#   client  the same, client streaming
#   answers ANSWERS unary calls of a small request (the 18 bytes of run.sh's
#           calls) answered with a 1 MiB message, from h2load: 4 client
#           connections x 4 streams, 16 MiB stream and connection windows
#           (the answer direction, several streams sharing a connection)
# For each row: MB/s (message bytes both ways over wall time), the proxy's
# CPU per MiB moved (time on a CPU from /proc/PID/task/*/schedstat over its
# process tree: ns, where run.sh's utime+stime count 10 ms ticks), and the
# peak of its private memory (smaps_rollup Anonymous and Private_Dirty,
# sampled every 20 ms, summed over its processes). See
# bench/proxy/README.md "Bulk throughput".
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

MODE=h2c
PROXIES="direct relay nghttpx maitred"
WORKLOADS="unary server client answers"
CPU_PROXY=1
CPU_LOAD=0
PORT_BASE=25200
KEEP=0
REPS=1
CALLS=256            # unary calls
ANSWERS=400          # answers: calls (h2load -n), 4 connections x 4 streams
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
  -a N           answers: calls answered with 1 MiB (default $ANSWERS)
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

while getopts "w:p:n:a:s:W:t:R:P:C:kh" opt; do
	case $opt in
	w) WORKLOADS=${OPTARG//,/ } ;;
	p) PROXIES=${OPTARG//,/ } ;;
	n) CALLS=$OPTARG ;;
	a) ANSWERS=$OPTARG ;;
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

# ctx_switches PIDS...: "voluntary involuntary" context switches summed
# over PIDS' threads.
ctx_switches() {
	local p
	for p in "$@"; do cat /proc/$p/task/*/status 2>/dev/null; done |
		awk '$1 == "voluntary_ctxt_switches:" { v += $2 } $1 == "nonvoluntary_ctxt_switches:" { n += $2 } END { print v + 0, n + 0 }'
}

# run_workload ROW WORKLOAD: prints "MBps cpu_ms_per_MiB anon_MiB dirty_MiB"
run_workload() {
	local row=$1 wl=$2 port pids=() t0 t1 args out=$T/$1.$2.$RANDOM sp=""
	case $wl in
	unary) UP_EXTRA=(-z 1048576 -W $END_WINDOW); args=(-m unary -n "$CALLS" -c 4 -s 1048576) ;;
	server) UP_EXTRA=(-z 65536 -W $END_WINDOW); args=(-m server -n "$STREAM_MSGS") ;;
	client) UP_EXTRA=(-z 16 -W $END_WINDOW); args=(-m client -n "$STREAM_MSGS" -s 65536) ;;
	answers) UP_EXTRA=(-z 1048576 -W $END_WINDOW) ;;
	*) log "unknown workload $wl"; echo "- - - -"; return 0 ;;
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
	t0=$([ ${#pids[@]} -gt 0 ] && cpu_ns "${pids[@]}" || echo 0)
	local rc probe=
	if [ -n "${PROBE:-}" ] && [ ${#pids[@]} -gt 0 ]; then
		# PROBE: a command run on the proxy's processes while the load
		# runs, stopped with SIGINT after it (perf stat, perf record,
		# strace -c; anything else gets TERM 5 s later): $PIDS (comma separated) and $PROBE_OUT (a file
		# under the temp dir, kept with -k) are set for it.
		PIDS=$(IFS=,; echo "${pids[*]}") PROBE_OUT=$T/probe.$row.$wl.$RANDOM bash -c "$PROBE" </dev/null >/dev/null 2>&1 &
		probe=$!
		ctx0=$(ctx_switches "${pids[@]}")
		sleep 0.3
	fi
	if [ "$wl" = answers ]; then
		h2load_answers "$port" "$out"
	else
		timeout -k 5 600 taskset -c "$CPU_LOAD" "$BULK_BIN" -p "$port" -w $END_WINDOW "${args[@]}" >"$out" 2>&1
	fi
	rc=$?
	t1=$([ ${#pids[@]} -gt 0 ] && cpu_ns "${pids[@]}" || echo 0)
	if [ -n "$probe" ]; then
		log "$row $wl: voluntary / involuntary context switches $(ctx_switches "${pids[@]}" | awk -v a="$ctx0" 'BEGIN { split(a, x, " ") } { print $1 - x[1], "/", $2 - x[2] }')"
		kill -INT "$probe" 2>/dev/null
		pkill -INT -P "$probe" 2>/dev/null
		# A shell's trap on INT never fires here (a background shell
		# ignores SIGINT from the start): past 5 s, TERM.
		local i
		for i in $(seq 50); do kill -0 "$probe" 2>/dev/null || break; sleep 0.1; done
		pkill -TERM -P "$probe" 2>/dev/null
		kill -TERM "$probe" 2>/dev/null
		wait "$probe" 2>/dev/null
	fi
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
	awk -v t0="$t0" -v t1="$t1" -v row="$row" -v memf="$out.mem" '
		/^bulk / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
		END {
			mib = (v["sent"] + v["received"]) / 1048576
			if (row == "direct") { print v["MBps"], "-", "-", "-"; exit }
			getline m < memf; split(m, mm, " ")
			printf "%s %.3f %.1f %.1f\n", v["MBps"], (t1 - t0) / 1e6 / mib, mm[1] / 1024, mm[2] / 1024
		}' "$out"
}

# h2load_answers PORT OUT: the answers workload against PORT; writes to OUT
# h2load's output and then a line in grpc_bulk's format ("bulk ... sent=
# received= seconds= MBps="): sent is the request messages, received the
# DATA bytes h2load counted (the answers' messages with their prefixes),
# seconds h2load's wall time. Non-zero when a call failed or an answer came
# back short.
h2load_answers() {
	local port=$1 out=$2 bits
	# h2load opens windows of 2^bits - 1 bytes: the largest under END_WINDOW
	bits=$(awk -v w="$END_WINDOW" 'BEGIN { b = 16; while (2 ^ (b + 1) - 1 <= w && b < 30) b++; print b }')
	TARGET_URI="http://127.0.0.1:$port$PATH_URI" DUR=540 WARM=0 h2load_run "$out.h2load" \
		-n "$ANSWERS" -c 4 -m 4 -w "$bits" -W "$bits" || return 1
	[ "$(h2load_bad "$out.h2load")" = 0 ] || { cat "$out.h2load" >"$out"; return 1; }
	awk -v req="$(stat -c %s "$T/body.bin")" '
		/^finished in/ { t = $3; sub(/,$/, "", t)
			if (t ~ /ms$/) { sub(/ms$/, "", t); t /= 1000 } else if (t ~ /us$/) { sub(/us$/, "", t); t /= 1e6 } else sub(/s$/, "", t) }
		/^requests:/ { ok = $8 }
		/^traffic:/ { for (i = 1; i < NF; i++) if ($(i + 1) == "data") { d = $i; gsub(/[()]/, "", d) } }
		END {
			if (t <= 0 || ok == 0 || d < ok * 1048576) exit 1
			printf "bulk mode=answers calls=%d sent=%d received=%d seconds=%.3f MBps=%.1f\n",
				ok, ok * req, d, t, (ok * req + d) / t / 1e6
		}' "$out.h2load" >"$out"
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
	elif [ "$1" = relay ] && [ "$MODE" = tls ]; then
		echo "the bulk client speaks h2c only: no relay to TLS upstreams"
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
