#!/usr/bin/env bash
# bench/proxy/run.sh: maitred against nginx, HAProxy and nghttpx, and against
# the client talking to the upstream directly. See bench/proxy/README.md.
#
# Every process it starts is recorded by PID and stopped by PID; configs and
# logs live in one temp dir (kept with -k). Needs: h2load and nghttp
# (nghttp2-client), taskset, ss, python3, openssl; the peers are optional.
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

DUR=5            # seconds per measured phase
WARM=1           # h2load warm-up seconds in the saturation phase
CLIENTS=4        # saturation: h2load -c
STREAMS=32       # saturation: h2load -m
RATE=2000        # fixed-rate phase: total calls/s
RATE_CLIENTS=4   # fixed-rate phase: h2load -c (each --rps RATE/RATE_CLIENTS)
INFLIGHT=512     # connection-count phase: one client connection, -m INFLIGHT
IDLE_N=200       # idle client connections for the memory-per-connection figure
                 # (a comma list: one figure, on a fresh proxy, for each)
IDLE_ONLY=0      # -x: only the idle-connection figures, no load phases
MODE=h2c         # upstream transport: h2c | tls
PROXIES="direct nghttpx haproxy nginx maitred"
CPU_PROXY=1      # the proxy's core
CPU_LOAD=0       # h2load's and the upstreams' core
PORT_BASE=25000  # proxy PORT_BASE+1, upstreams PORT_BASE+51, PORT_BASE+52
KEEP=0
REPS=1           # repeats of every row (medians are reported)
UPSTREAM_BIN=${UPSTREAM_BIN:-$top/build/bench/proxy/grpc_upstream}
MAITRED_BIN=${MAITRED_BIN:-$top/build/sidecar/maitred}
MAITRED_BASE_BIN=${MAITRED_BASE_BIN:-}

usage() {
	cat <<EOF
usage: $0 [options]
  -d SECONDS     duration of each measured phase (default $DUR)
  -c N           saturation: client connections (default $CLIENTS)
  -m N           saturation: streams in flight per connection (default $STREAMS)
  -r N           fixed-rate phase: total calls per second (default $RATE)
  -i N           connection-count phase: calls in flight on one client
                 connection (default $INFLIGHT; 0 skips the phase)
  -n N[,N...]    idle client connections for the private memory per idle
                 connection (default $IDLE_N; 0 skips); a list gives one
                 figure for each, each on a fresh proxy
  -x             only the idle-connection figures (no load phases)
  -t h2c|tls     upstream transport (default $MODE)
  -p LIST        rows, comma/space separated, in order
                 (default "$PROXIES"; also maitred_base: MAITRED_BASE_BIN)
  -P PORT_BASE   proxy listens on PORT_BASE+1, upstreams on +51 and +52
                 (default $PORT_BASE)
  -C PROXY,LOAD  cores: proxy, and h2load + upstreams (default $CPU_PROXY,$CPU_LOAD)
  -R N           repeat every row N times, rows interleaved; report medians
                 (default $REPS)
  -k             keep the temp dir (configs, logs, h2load output); kept
                 anyway when a row has a note
Environment: UPSTREAM_BIN (default build/bench/proxy/grpc_upstream, built by
\`make -C build bench/proxy/grpc_upstream\`), MAITRED_BIN (default
build/sidecar/maitred: the plain build in build/, deploy/demo.sh's),
MAITRED_BASE_BIN (the maitred_base row: another build, side by side).
EOF
}

while getopts "d:c:m:r:i:n:xt:p:P:C:R:kh" opt; do
	case $opt in
	d) DUR=$OPTARG ;;
	c) CLIENTS=$OPTARG ;;
	m) STREAMS=$OPTARG ;;
	r) RATE=$OPTARG ;;
	i) INFLIGHT=$OPTARG ;;
	n) IDLE_N=$OPTARG ;;
	x) IDLE_ONLY=1 ;;
	t) MODE=$OPTARG ;;
	p) PROXIES=${OPTARG//,/ } ;;
	P) PORT_BASE=$OPTARG ;;
	C) CPU_PROXY=${OPTARG%,*}; CPU_LOAD=${OPTARG#*,} ;;
	R) REPS=$OPTARG ;;
	k) KEEP=1 ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done

IDLE_NS=${IDLE_N//,/ }
[ "$IDLE_NS" = 0 ] && IDLE_NS=""
IDLE_MAX=0
for n in $IDLE_NS; do
	[[ $n =~ ^[0-9]+$ ]] || { echo "-n takes numbers" >&2; exit 2; }
	[ "$n" -gt "$IDLE_MAX" ] && IDLE_MAX=$n
done
# The proxy and idle_conns.py each hold one descriptor per idle connection
# (10,000 idle connections need more than the usual 1024): raise the soft
# limit towards the hard one; a proxy started from here inherits it.
if [ $((IDLE_MAX + 256)) -gt "$(ulimit -n)" ]; then
	ulimit -n $((IDLE_MAX + 256)) 2>/dev/null ||
		ulimit -n "$(ulimit -Hn)" 2>/dev/null
	[ $((IDLE_MAX + 256)) -gt "$(ulimit -n)" ] &&
		echo "# ulimit -n is $(ulimit -n) (hard $(ulimit -Hn)): $IDLE_MAX idle connections will not all open" >&2
fi

. "$here/common.sh"
# A binary copied just before the run has dirty page-cache pages, which
# smaps counts as its Private_Dirty (500 KiB for maitred): write them out.
sync

# sample_conns PIDS...: every 100 ms, the most established connections from
# the given processes to one upstream port; writes the maximum on exit.
sample_conns() {
	local max=0 n pids=" $* " 
	trap 'echo $max; exit 0' TERM
	while :; do
		n=$(ss -Htnp state established "( dport = :$UP1 or dport = :$UP2 )" 2>/dev/null |
			awk -v pids="$pids" '{
				if (!match($0, /pid=[0-9]+/)) next
				p = substr($0, RSTART + 4, RLENGTH - 4)
				if (index(pids, " " p " ") == 0) next
				n = split($4, a, ":"); c[a[n]]++
			} END { m = 0; for (k in c) if (c[k] > m) m = c[k]; print m }')
		[ "${n:-0}" -gt "$max" ] && max=$n
		sleep 0.1 & wait $!
	done
}

percentiles() {	# LOGFILE -> "p50_ms p99_ms calls"
	awk '{ print $3 }' "$1" | sort -n | awk '
		{ v[NR] = $1 }
		END {
			if (NR == 0) { print "- - 0"; exit }
			i50 = int(NR * 0.50 + 0.999999); i99 = int(NR * 0.99 + 0.999999)
			printf "%.3f %.3f %d\n", v[i50] / 1000, v[i99] / 1000, NR
		}'
}

# ---- one row --------------------------------------------------------------------

# sat_direct OUT: the direct row's saturation phase on both upstreams, as
# every proxy row spreads its calls over both: half the connections to each,
# one h2load per upstream, run together. OUT gets their summed rate, failed
# calls and CPU in h2load's own format, so the row reads it as any other.
# With every connection on one upstream, that process found twice the calls
# per wake-up (per read, per TLS record) and the proxies' upstream CPU per
# call came out 1.3-1.5x the direct path's from the split alone; with one
# endpoint behind it, maitred's was 1.02-1.22x (README.md, "Fairness").
sat_direct() {
	local out=$1 scheme=http c1=$(((CLIENTS + 1) / 2)) a
	[ "$MODE" = tls ] && scheme=https
	TARGET_URI="$scheme://127.0.0.1:$UP1$PATH_URI" h2load_run "$out.1" \
		-D "$DUR" --warm-up-time "$WARM" -c "$c1" -m "$STREAMS" &
	a=$!
	if [ "$CLIENTS" -gt "$c1" ]; then
		TARGET_URI="$scheme://127.0.0.1:$UP2$PATH_URI" h2load_run "$out.2" \
			-D "$DUR" --warm-up-time "$WARM" -c "$((CLIENTS - c1))" -m "$STREAMS"
	fi
	wait "$a"
	local f rps=0 bad=0 cpu=0
	for f in "$out.1" "$out.2"; do
		[ -f "$f" ] || continue
		rps=$(awk -v a="$rps" -v b="$(h2load_rps "$f")" 'BEGIN { print a + b }')
		bad=$((bad + $(h2load_bad "$f")))
		cpu=$(awk -v a="$cpu" -v b="$(h2load_cpu "$f")" 'BEGIN { print a + b }')
	done
	printf 'finished in %ss, %s req/s, 0MB/s\nrequests: 0 total, 0 started, 0 done, 0 succeeded, %d failed, 0 errored, 0 timeout\n' \
		"$DUR" "$rps" "$bad" >"$out"
	printf '0m0s 0m0s\n0m%ss 0m0s\n' "$cpu" >"$out.times"
}

declare -A R	# R[row,field]

# idle_figure ROW N: R[ROW,idleN], the private memory (KiB) one idle client
# connection costs the proxy: smaps_rollup's Anonymous summed over its
# processes, after idle_conns.py opened N connections (one call each, then
# silent) minus before, over the connections that opened. Non-zero when the
# row must stop (its note says why).
idle_figure() {
	local row=$1 n=$2 pids ok line a0 a1
	[ "$row" = maitred ] || [ "$row" = maitred_base ] &&
		[ "$n" -ge 9000 ] && export MAITRED_MAX_CONNECTIONS=$((n + 1000))
	start_proxy "$row" || { R[$row,note]="did not start"; stop_upstreams; return 1; }
	unset MAITRED_MAX_CONNECTIONS
	if ! check_call; then
		R[$row,note]="a call through it did not end with grpc-status 0 (see check.out)"
		stop_proxy; stop_upstreams; return 1
	fi
	sleep 0.2
	pids=$(tree_pids "$PROXY_PID" | paste -sd, -)
	coproc IDLE { exec taskset -c "$CPU_LOAD" python3 "$here/idle_conns.py" 127.0.0.1 $PROXY_PORT "$n" "$T/body.bin" --pids "$pids" 2>"$T/idle.err"; }
	read -r -t $((120 + n / 50)) line <&"${IDLE[0]}"
	eval "exec ${IDLE[1]}>&-"
	wait "$IDLE_PID" 2>/dev/null
	echo "$row n=$n $line" >>"$T/idle.log"
	ok=$(sed -n 's/.*ok=\([0-9]*\).*/\1/p' <<<"$line")
	a0=$(sed -n 's/.*anon_kb=\([0-9]*\):.*/\1/p' <<<"$line")
	a1=$(sed -n 's/.*anon_kb=[0-9]*:\([0-9]*\).*/\1/p' <<<"$line")
	if [ "${ok:-0}" -gt 0 ] && [ -n "$a1" ]; then
		R[$row,idle$n]=$(awk -v a="$a0" -v b="$a1" -v n="$ok" 'BEGIN { printf "%.1f", (b - a) / n }')
		[ "$ok" -lt "$n" ] && R[$row,idle$n]="${R[$row,idle$n]} ($ok conns)"
	else
		R[$row,idle$n]="failed"
	fi
	stop_proxy
}

run_row() {
	local row=$1 pids t0 t1 c0 c1 u0 u1 n0 n1 hwm rss0 rss1 ok sampler p

	R[$row,note]=""
	start_upstreams || { R[$row,note]="upstreams did not start"; return; }
	if [ "$row" = direct ]; then
		if [ "$MODE" = tls ]; then TARGET_URI="https://127.0.0.1:$UP1$PATH_URI"
		else TARGET_URI="http://127.0.0.1:$UP1$PATH_URI"; fi
	else
		TARGET_URI="$(proxy_scheme "$row")://127.0.0.1:$PROXY_PORT$PATH_URI"
	fi

	# Idle client connections, on a fresh proxy for each count (a loaded
	# one reuses freed heap and hides the cost); one warm-up call first
	# sets up the pools.
	if [ "$row" != direct ]; then
		for n in $IDLE_NS; do
			idle_figure "$row" "$n" || return
		done
	fi
	if [ "$IDLE_ONLY" = 1 ]; then
		stop_upstreams
		return
	fi

	if [ "$row" != direct ]; then
		start_proxy "$row" || { R[$row,note]="did not start"; stop_upstreams; return; }
		pids=$(tree_pids "$PROXY_PID")
	else
		pids=""
	fi
	if ! check_call; then
		R[$row,note]="a call did not end with grpc-status 0 (see check.out)"
		stop_proxy; stop_upstreams; return
	fi
	# Private memory: at rest after one call (pools up), the peak over the
	# load phases, and the peak at INFLIGHT calls in flight.
	local mem0 memall mem512 memsampler
	if [ -n "$pids" ]; then
		sleep 0.2
		mem0=$(rollup_kb $pids)
		sample_mem $pids >"$T/$row.mem" &
		memsampler=$!
		taskset -cp "$CPU_LOAD" $memsampler >/dev/null
	fi

	# Saturation: CPU per call over exactly the calls the upstreams served.
	c0=$(cpu_ticks $pids); u0=$(cpu_ticks "${UP_PIDS[@]}"); n0=$(up_stat calls)
	t0=$(date +%s.%N)
	if [ "$row" = direct ]; then
		sat_direct "$T/$row.sat"
	else
		h2load_run "$T/$row.sat" -D "$DUR" --warm-up-time "$WARM" -c "$CLIENTS" -m "$STREAMS"
	fi
	t1=$(date +%s.%N)
	c1=$(cpu_ticks $pids); u1=$(cpu_ticks "${UP_PIDS[@]}"); n1=$(up_stat calls)
	R[$row,sat]=$(h2load_rps "$T/$row.sat" | awk '{ printf "%.0f", $1 }')
	[ "$(h2load_bad "$T/$row.sat")" = 0 ] || R[$row,note]="${R[$row,note]} saturation: $(h2load_bad "$T/$row.sat") failed calls;"
	if [ -n "$pids" ]; then
		R[$row,cpu]=$(awk -v c=$((c1 - c0)) -v n=$((n1 - n0)) -v t=$TCK 'BEGIN { if (n > 0) printf "%.1f", c / t / n * 1e6; else print "-" }')
		R[$row,util]=$(awk -v c=$((c1 - c0)) -v t=$TCK -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", c / t / (b - a) * 100 }')
	else
		R[$row,cpu]="-"; R[$row,util]="-"
	fi
	R[$row,ccpu]=$(awk -v c="$(h2load_cpu "$T/$row.sat")" -v n=$((n1 - n0)) 'BEGIN { if (n > 0 && c != "") printf "%.1f", c / n * 1e6; else print "-" }')
	R[$row,ucpu]=$(awk -v c=$((u1 - u0)) -v n=$((n1 - n0)) -v t=$TCK 'BEGIN { if (n > 0) printf "%.1f", c / t / n * 1e6; else print "-" }')

	# Latency at a fixed moderate rate.
	h2load_run "$T/$row.rate" -D "$DUR" -c "$RATE_CLIENTS" -m 64 \
		--rps $((RATE / RATE_CLIENTS)) --log-file "$CALL_LOGS/$row.rate.log"
	set -- $(percentiles "$CALL_LOGS/$row.rate.log")
	R[$row,p50]=$1; R[$row,p99]=$2
	R[$row,rate]=$(h2load_rps "$T/$row.rate")
	[ "$(h2load_bad "$T/$row.rate")" = 0 ] || R[$row,note]="${R[$row,note]} rate: $(h2load_bad "$T/$row.rate") failed calls;"

	# Upstream connections with INFLIGHT calls in flight on one connection.
	if [ "$INFLIGHT" -gt 0 ] && [ -n "$pids" ]; then
		sample_conns $pids >"$T/$row.conns" &
		sampler=$!
		taskset -cp "$CPU_LOAD" $sampler >/dev/null
		sample_mem $pids >"$T/$row.mem512" &
		local sampler2=$!
		taskset -cp "$CPU_LOAD" $sampler2 >/dev/null
		h2load_run "$T/$row.512" -D "$DUR" -c 1 -m "$INFLIGHT"
		kill -TERM $sampler $sampler2; wait $sampler $sampler2 2>/dev/null
		mem512=$(cat "$T/$row.mem512")
		R[$row,anon512]=$(awk -v k="${mem512%% *}" 'BEGIN { printf "%.1f", k / 1024 }')
		R[$row,percall]=$(awk -v a="${mem0%% *}" -v b="${mem512%% *}" -v n="$INFLIGHT" 'BEGIN { printf "%.2f", (b - a) / n }')
		R[$row,conns]=$(cat "$T/$row.conns")
		R[$row,sat512]=$(h2load_rps "$T/$row.512" | awk '{ printf "%.0f", $1 }')
		[ "$(h2load_bad "$T/$row.512")" = 0 ] || R[$row,note]="${R[$row,note]} $INFLIGHT in flight: $(h2load_bad "$T/$row.512") failed calls;"
	else
		R[$row,conns]="-"; R[$row,sat512]="-"; R[$row,anon512]="-"; R[$row,percall]="-"
	fi
	if [ -n "$pids" ]; then
		kill -TERM $memsampler; wait $memsampler 2>/dev/null
		memall=$(cat "$T/$row.mem")
		R[$row,anon0]=$(awk -v k="${mem0%% *}" 'BEGIN { printf "%.1f", k / 1024 }')
		R[$row,anon]=$(awk -v k="${memall%% *}" 'BEGIN { printf "%.1f", k / 1024 }')
		R[$row,pd]=$(awk -v k="${memall##* }" 'BEGIN { printf "%.1f", k / 1024 }')
	else
		R[$row,anon0]="-"; R[$row,anon]="-"; R[$row,pd]="-"
	fi

	for p in "${UP_PIDS[@]}"; do
		kill -0 "$p" 2>/dev/null ||
			R[$row,note]="${R[$row,note]} an upstream exited during the run;"
	done
	[ "$(up_stat calls)" -gt 0 ] ||
		R[$row,note]="${R[$row,note]} the upstreams report no calls (stats unread?);"
	if [ -n "$pids" ] && ! kill -0 "$PROXY_PID" 2>/dev/null; then
		R[$row,note]="${R[$row,note]} the proxy exited during the run (see $row.out, -k);"
	fi
	if [ -n "$pids" ]; then
		hwm=$(status_kb VmHWM $(tree_pids "$PROXY_PID") | sort -n | tail -1)
		R[$row,rss]=$(awk -v k="${hwm:-0}" 'BEGIN { printf "%.1f", k / 1024 }')
	else
		R[$row,rss]="-"
	fi
	if [ -n "$pids" ]; then R[$row,opened]=$(up_stat accepted per); else R[$row,opened]="-"; fi
	R[$row,split]=$(up_stat calls per)
	stop_proxy
	stop_upstreams
}

# ---- main ---------------------------------------------------------------------------

log "maitred proxy bench: mode=$MODE duration=${DUR}s saturation -c $CLIENTS -m $STREAMS," \
	"rate $RATE/s over $RATE_CLIENTS conns, $INFLIGHT in flight, $IDLE_N idle conns;" \
	"proxy on cpu$CPU_PROXY, h2load + upstreams on cpu$CPU_LOAD; temp $T"
FIELDS="sat util cpu ucpu ccpu p50 p99 rss anon0 anon pd anon512 percall conns sat512 opened split"
for n in $IDLE_NS; do FIELDS="$FIELDS idle$n"; done
declare -A ALL	# ALL[row,field]: the value of each repeat, space separated
declare -A NOTES
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
ROWS=()
for row in $PROXIES; do
	why=$(available "$row")
	if [ -n "$why" ]; then
		log "skip $row: $why"
		R[$row,skip]=$why
	fi
	ROWS+=("$row")
done
# Repeats go round the rows, so a burst of other work on the machine lands on
# one repeat of several rows rather than on every repeat of one row.
for rep in $(seq "$REPS"); do
	for row in "${ROWS[@]}"; do
		[ -n "${R[$row,skip]:-}" ] && continue
		log "run $row$([ "$REPS" -gt 1 ] && echo " (repeat $rep of $REPS)")"
		run_row "$row"
		for f in $FIELDS; do
			v=${R[$row,$f]:--}
			ALL[$row,$f]="${ALL[$row,$f]:-}${ALL[$row,$f]:+ }${v// /_}"
		done
		if [ -n "${R[$row,note]}" ]; then
			NOTES[$row]="${NOTES[$row]:-}${NOTES[$row]:+ }$([ "$REPS" -gt 1 ] && echo "repeat $rep:")${R[$row,note]}"
			KEEP=1	# something went wrong: keep the evidence
		fi
	done
done
# The median of the numbers a field got (the highest for connection counts);
# a field with no number keeps its last value.
for row in "${ROWS[@]}"; do
	for f in $FIELDS; do
		vals=${ALL[$row,$f]:-}
		[ -z "$vals" ] && continue
		nums=$(tr ' ' '\n' <<<"$vals" | grep -E '^[0-9]+(\.[0-9]+)?$' | sort -g)
		if [ -z "$nums" ]; then
			R[$row,$f]=${vals##* }; R[$row,$f]=${R[$row,$f]//_/ }
		elif [ "$f" = conns ]; then
			R[$row,$f]=$(tail -1 <<<"$nums")
		else
			R[$row,$f]=$(awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }' <<<"$nums")
		fi
	done
	R[$row,note]=${NOTES[$row]:-}
done

v() { echo "${R[$1,$2]:--}"; }
echo
echo "### maitred proxy bench — $(date -u +%Y-%m-%dT%H:%MZ), $MODE upstreams, $(nproc) CPUs, load $LOAD0 at start"
echo
echo "${DUR}s per phase; saturation -c $CLIENTS -m $STREAMS; $([ "$REPS" -gt 1 ] && echo "median of $REPS repeats (connections: the highest)" || echo "one run")."
echo
if [ "$IDLE_ONLY" = 0 ]; then
	echo "| row | sat calls/s | proxy CPU % | proxy µs CPU/call | upstream µs CPU/call | client µs CPU/call | p50 ms @${RATE}/s | p99 ms @${RATE}/s | up conns/endpoint @$INFLIGHT | calls/s @$INFLIGHT | up conns opened | calls per upstream |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
	for row in "${ROWS[@]}"; do
		if [ -n "${R[$row,skip]:-}" ]; then
			echo "| $row | skipped: ${R[$row,skip]} |||||||||| |"
			continue
		fi
		echo "| $row | $(v $row sat) | $(v $row util) | $(v $row cpu) | $(v $row ucpu) | $(v $row ccpu) | $(v $row p50) | $(v $row p99) | $(v $row conns) | $(v $row sat512) | $(v $row opened) | $(v $row split) |"
	done
	echo
fi
# Memory: private = smaps_rollup's Anonymous summed over the proxy's
# processes (README.md, "What the columns mean").
hdr="| row |" sep="|---|"
if [ "$IDLE_ONLY" = 0 ]; then
	hdr="$hdr peak RSS MB | private MB at rest | private MB peak | Private_Dirty MB peak | private MB @$INFLIGHT | private KiB per call @$INFLIGHT |"
	sep="$sep---:|---:|---:|---:|---:|---:|"
fi
for n in $IDLE_NS; do hdr="$hdr private KiB per idle conn @$n |"; sep="$sep---:|"; done
echo "$hdr"
echo "$sep"
for row in "${ROWS[@]}"; do
	[ "$row" = direct ] && continue
	if [ -n "${R[$row,skip]:-}" ]; then
		echo "| $row | skipped: ${R[$row,skip]} |"
		continue
	fi
	line="| $row |"
	[ "$IDLE_ONLY" = 0 ] && line="$line $(v $row rss) | $(v $row anon0) | $(v $row anon) | $(v $row pd) | $(v $row anon512) | $(v $row percall) |"
	for n in $IDLE_NS; do line="$line $(v $row idle$n) |"; done
	echo "$line"
done
for row in "${ROWS[@]}"; do
	[ -n "${R[$row,note]:-}" ] && echo && echo "note, $row: ${R[$row,note]}"
done

ratio() {	# FIELD: maitred / nghttpx, when both are numbers
	local a=${R[maitred,$1]:-} b=${R[nghttpx,$1]:-}
	a=${a%% *}; b=${b%% *}
	if [[ $a =~ ^[0-9.]+$ && $b =~ ^[0-9.]+$ ]] && [ "$b" != 0 ] && [ "$b" != 0.0 ]; then
		awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }'
	else
		echo "n/a"
	fi
}
# Round by round (repeat i of every row ran back to back): the issue's
# targets hold "in every round", which a median can hide.
per_round() {	# FIELD ROW_A ROW_B: A/B for each repeat
	local a=${ALL[$2,$1]:-} b=${ALL[$3,$1]:-}
	[ -z "$a" ] || [ -z "$b" ] && { echo "n/a"; return; }
	ratios_by_round "$a" "$b"
}
if [ "$REPS" -gt 1 ]; then
	echo
	echo "round by round: CPU per call maitred/nghttpx $(per_round cpu maitred nghttpx);" \
		"upstream CPU per call maitred/direct $(per_round ucpu maitred direct)," \
		"nghttpx/direct $(per_round ucpu nghttpx direct)"
fi
idle_targets=""
for n in $IDLE_NS; do
	idle_targets="$idle_targets, private KiB per idle conn @$n $(ratio idle$n) (maitred: $(v maitred idle$n), target <= 8)"
done
echo
if [ "$IDLE_ONLY" = 0 ]; then
	echo "maitred / nghttpx: CPU per call $(ratio cpu) (target < 1), p99 $(ratio p99) (target <= 1)," \
		"saturation $(ratio sat), peak RSS $(ratio rss), private memory peak $(ratio anon)$idle_targets;" \
		"targets also: <= 2 up conns/endpoint @$INFLIGHT (maitred: $(v maitred conns))"
else
	echo "maitred / nghttpx:${idle_targets#,}"
fi
