#!/usr/bin/env bash
# bench/proxy/steady.sh: latency and CPU per call at a steady rate, the way
# production runs a sidecar: each call arrives alone, far below
# saturation. For every rate and row it runs h2load at that rate and reports
# p50 / p90 / p99 / p99.9 of every call (h2load --log-file), the latency the
# proxy adds over the direct path at the same percentile, and the proxy's CPU
# per call over the phase. Rows: direct, relay (a hop that only carries
# bytes: the floor of any proxy, README "The floor of a hop"), nghttpx,
# maitred and, with
# BASE_BIN=/path/to/maitred, "base" (another maitred build, for a before /
# after in one run). See README.md "Steady rate".
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

DUR=10
RATES="2000 10000"
CLIENTS=4        # h2load -c, each --rps RATE/CLIENTS
MODE=h2c
PROXIES="direct relay nghttpx maitred"
CPU_PROXY=1
CPU_LOAD=0
PORT_BASE=25200
KEEP=0
REPS=3
UPSTREAM_BIN=${UPSTREAM_BIN:-$top/build/bench/proxy/grpc_upstream}
MAITRED_BIN=${MAITRED_BIN:-$top/build/sidecar/maitred}
BASE_BIN=${BASE_BIN:-}

usage() {
	cat <<EOF
usage: $0 [options]
  -d SECONDS     each measured phase (default $DUR)
  -r LIST        rates, calls/s in all (default "$RATES")
  -c N           client connections sharing the rate (default $CLIENTS)
  -t h2c|tls     upstream transport (default $MODE)
  -p LIST        rows among direct, relay, nghttpx, maitred, base (default
                 "$PROXIES", plus base when BASE_BIN is set)
  -R N           rounds; rows interleaved inside each round; medians (default $REPS)
  -P PORT_BASE   as in run.sh (default $PORT_BASE)
  -C PROXY,LOAD  cores (default $CPU_PROXY,$CPU_LOAD)
  -k             keep the temp dir
Environment: UPSTREAM_BIN, MAITRED_BIN (as run.sh), BASE_BIN (the "base" row).
EOF
}

while getopts "d:r:c:t:p:R:P:C:kh" opt; do
	case $opt in
	d) DUR=$OPTARG ;;
	r) RATES=${OPTARG//,/ } ;;
	c) CLIENTS=$OPTARG ;;
	t) MODE=$OPTARG ;;
	p) PROXIES=${OPTARG//,/ } ;;
	R) REPS=$OPTARG ;;
	P) PORT_BASE=$OPTARG ;;
	C) CPU_PROXY=${OPTARG%,*}; CPU_LOAD=${OPTARG#*,} ;;
	k) KEEP=1 ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
[ -n "$BASE_BIN" ] && [[ " $PROXIES " != *" base "* ]] && PROXIES="$PROXIES base"
WARM=0

. "$here/common.sh"

# The "base" row is maitred's row with another binary.
conf_base() { local MAITRED_BIN=$BASE_BIN; conf_maitred; }
row_available() {
	if [ "$1" = base ]; then
		[ -n "$BASE_BIN" ] || { echo "BASE_BIN not set"; return; }
		MAITRED_BIN=$BASE_BIN available maitred
	else
		available "$1"
	fi
}

# quantiles LOG: p50 p90 p99 p99.9 in µs of every call in an h2load log
# (its third column, µs from request start to end of response).
quantiles() {
	awk '{ print $3 }' "$1" | sort -n | awk '
		{ v[NR] = $1 }
		function q(p,  i) { i = int(NR * p + 0.999999); if (i < 1) i = 1; return v[i] }
		END {
			if (NR == 0) { print "- - - - 0"; exit }
			printf "%d %d %d %d %d\n", q(0.50), q(0.90), q(0.99), q(0.999), NR
		}'
}

declare -A ALL	# ALL[rate,row,field]: values of every round, space separated

# counters PID...: "utime stime sleeps ns" summed over every thread of the
# given processes, without perturbing them: CPU ticks from /proc/PID/stat
# (only their split between user and kernel is used), the times a thread
# went to sleep (voluntary context switches: one per event-loop wait that
# found nothing ready) from each task's status, and the ns on a CPU
# (cpu_ns, schedstat: the CPU a call is reported from).
counters() {
	local p t s f ut=0 st=0 sl=0
	for p in "$@"; do
		s=$(cat /proc/$p/stat 2>/dev/null) || continue
		f=(${s##*) })
		ut=$((ut + f[11])); st=$((st + f[12]))
		for t in /proc/$p/task/*; do
			sl=$((sl + $(awk '$1 == "voluntary_ctxt_switches:" { print $2 }' $t/status 2>/dev/null || echo 0)))
		done
	done
	echo "$ut $st $sl $(cpu_ns "$@")"
}

# run_phase ROW RATE: one fresh upstream pair and proxy, one checked call,
# then DUR seconds at RATE; appends p50 p90 p99 p999 cpu to ALL.
run_phase() {
	local row=$1 rate=$2 pids="" c0 c1 n0 n1 scheme=http f
	start_upstreams || { log "$row: upstreams did not start"; return; }
	if [ "$row" = direct ]; then
		[ "$MODE" = tls ] && scheme=https
		TARGET_URI="$scheme://127.0.0.1:$UP1$PATH_URI"
	else
		TARGET_URI="$(proxy_scheme "$row")://127.0.0.1:$PROXY_PORT$PATH_URI"
		start_proxy "$row" || { stop_upstreams; return; }
		pids=$(tree_pids "$PROXY_PID")
	fi
	if ! check_call; then
		log "$row: a call did not end with grpc-status 0"
		KEEP=1; stop_proxy; stop_upstreams; return
	fi
	# A short warm-up at the rate, unmeasured: connections, caches, the
	# pool's first streams.
	DUR=2 h2load_run "$T/$row.$rate.warm" -D 1 -c "$CLIENTS" -m 64 --rps $((rate / CLIENTS))
	local a b n sc=""
	a=($(counters $pids)); n0=$(up_stat calls)
	# Every syscall of the proxy's threads, counted by the kernel's
	# tracepoint (perf stat: a counter, not a trace; strace would slow
	# the proxy by an order of magnitude).
	if [ -n "$pids" ] && command -v perf >/dev/null; then
		perf stat -x, -e raw_syscalls:sys_enter -p "$(echo $pids | tr ' ' ,)" \
			-o "$T/$row.$rate.perf" >/dev/null 2>&1 &
		sc=$!
		PIDS+=($sc)
	fi
	h2load_run "$T/$row.$rate" -D "$DUR" -c "$CLIENTS" -m 64 \
		--rps $((rate / CLIENTS)) --log-file "$CALL_LOGS/$row.$rate.log"
	b=($(counters $pids)); n1=$(up_stat calls)
	if [ -n "$sc" ]; then kill -INT "$sc" 2>/dev/null; wait "$sc" 2>/dev/null; fi
	c0=$((a[0] + a[1])); c1=$((b[0] + b[1])); n=$((n1 - n0))
	[ "$(h2load_bad "$T/$row.$rate")" = 0 ] || { log "$row @$rate: $(h2load_bad "$T/$row.$rate") failed calls"; KEEP=1; }
	set -- $(quantiles "$CALL_LOGS/$row.$rate.log")
	ALL[$rate,$row,p50]+="$1 "; ALL[$rate,$row,p90]+="$2 "
	ALL[$rate,$row,p99]+="$3 "; ALL[$rate,$row,p999]+="$4 "
	if [ -n "$pids" ] && [ $((n1 - n0)) -gt 0 ]; then
		# µs a call from the ns; its kernel part by the ticks' split
		ALL[$rate,$row,cpu]+="$(awk -v c=$((b[3] - a[3])) -v n=$n 'BEGIN { printf "%.2f", c / n / 1e3 }') "
		ALL[$rate,$row,sys]+="$(awk -v c=$((b[3] - a[3])) -v k=$((b[1] - a[1])) -v t=$((c1 - c0)) -v n=$n \
			'BEGIN { printf "%.1f", (t > 0 ? c * k / t / n / 1e3 : 0) }') "
		ALL[$rate,$row,sleeps]+="$(awk -v c=$((b[2] - a[2])) -v n=$n 'BEGIN { printf "%.2f", c / n }') "
		[ -n "$sc" ] && ALL[$rate,$row,sysc]+="$(awk -F, -v n=$n '$3 ~ /sys_enter/ && $1 ~ /^[0-9]+$/ { printf "%.2f", $1 / n }' "$T/$row.$rate.perf") "
	fi
	ALL[$rate,$row,achieved]+="$(h2load_rps "$T/$row.$rate" | awk '{ printf "%.0f", $1 }') "
	stop_proxy
	stop_upstreams
}

median() { tr ' ' '\n' <<<"$1" | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }

ROWS=()
for row in $PROXIES; do
	why=$(row_available "$row")
	if [ -n "$why" ]; then log "skip $row: $why"; continue; fi
	ROWS+=("$row")
done
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
log "steady-rate bench: $MODE upstreams, rates $RATES, ${DUR}s, $REPS rounds, rows ${ROWS[*]}; temp $T"
for rep in $(seq "$REPS"); do
	for rate in $RATES; do
		for row in "${ROWS[@]}"; do
			log "round $rep: $row @ $rate/s"
			run_phase "$row" "$rate"
		done
	done
done

echo
echo "### steady rate — $(date -u +%Y-%m-%dT%H:%MZ), $MODE upstreams, $(nproc) CPUs, load $LOAD0 at start"
echo
echo "h2load -c $CLIENTS --rps RATE/$CLIENTS, ${DUR}s per phase after 1 s unmeasured, medians of $REPS rounds; µs."
echo "\"added\" is the row's p50 minus direct's p50; ratios are against nghttpx in the same rounds."
for rate in $RATES; do
	echo
	echo "| @ $rate/s | achieved/s | p50 | p90 | p99 | p99.9 | added p50 | proxy µs CPU/call (of it kernel) | sleeps/call | syscalls/call | p50/p90/p99 vs nghttpx | CPU vs nghttpx | CPU over relay vs nghttpx's |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"
	declare -A M=()
	for row in "${ROWS[@]}"; do
		for f in achieved p50 p90 p99 p999 cpu sys sleeps sysc; do M[$row,$f]=$(median "${ALL[$rate,$row,$f]:-}"); done
	done
	for row in "${ROWS[@]}"; do
		added=-; vs=-; cvs=-
		[[ ${M[direct,p50]:-} =~ ^[0-9]+$ && ${M[$row,p50]} =~ ^[0-9]+$ && $row != direct ]] &&
			added=$((M[$row,p50] - M[direct,p50]))
		if [[ $row != nghttpx && ${M[nghttpx,p50]:--} != - && $row != direct ]]; then
			vs=$(awk -v a="${M[$row,p50]} ${M[$row,p90]} ${M[$row,p99]}" -v b="${M[nghttpx,p50]} ${M[nghttpx,p90]} ${M[nghttpx,p99]}" 'BEGIN {
				split(a, x, " "); split(b, y, " ")
				for (i = 1; i <= 3; i++) printf "%s%.2f", (i > 1 ? " / " : ""), (y[i] > 0 ? x[i] / y[i] : 0) }')
			cvs=$(awk -v a="${M[$row,cpu]}" -v b="${M[nghttpx,cpu]:-0}" 'BEGIN { if (b > 0 && a != "-") printf "%.2f", a / b; else print "-" }')
		fi
		# What the row adds to the relay's CPU a call over what nghttpx
		# adds: the proxy's own part of a call, the hop's price taken out.
		ovs=-
		[[ $row != direct && $row != relay && $row != nghttpx ]] &&
			ovs=$(awk -v a="${M[$row,cpu]}" -v b="${M[nghttpx,cpu]:--}" -v r="${M[relay,cpu]:--}" 'BEGIN {
				if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && r ~ /^[0-9.]+$/ && b > r) printf "%.2f", (a - r) / (b - r); else print "-" }')
		echo "| $row | ${M[$row,achieved]} | ${M[$row,p50]} | ${M[$row,p90]} | ${M[$row,p99]} | ${M[$row,p999]} | $added | ${M[$row,cpu]:--} (${M[$row,sys]:--}) | ${M[$row,sleeps]:--} | ${M[$row,sysc]:--} | $vs | $cvs | $ovs |"
	done
	unset M
	# The spread a median hides: at a steady rate one round of the VM
	# moves a ratio by more than a goal's margin.
	if [ "$REPS" -gt 1 ] && [ -n "${ALL[$rate,nghttpx,cpu]:-}" ]; then
		for row in "${ROWS[@]}"; do
			[[ $row == direct || $row == nghttpx || -z ${ALL[$rate,$row,cpu]:-} ]] && continue
			echo
			echo "round by round @ $rate/s, $row/nghttpx: CPU a call" \
				"$(ratios_by_round "${ALL[$rate,$row,cpu]}" "${ALL[$rate,nghttpx,cpu]}"), p99" \
				"$(ratios_by_round "${ALL[$rate,$row,p99]:-}" "${ALL[$rate,nghttpx,p99]:-}")"
		done
	fi
done
