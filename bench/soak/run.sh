#!/usr/bin/env bash
# bench/soak/run.sh: maitred for DURATION seconds (default 600) at half of
# saturation, reloaded every 10 s, an upstream restarted every 60 s, FAILOVER;
# maitred's memory, descriptors, threads and connections sampled every 5 s.
# See bench/soak/README.md. Not run by CI.
#
#   bench/soak/run.sh                     # 10 minutes, the rate measured first
#   DURATION=180 bench/soak/run.sh        # 3 minutes
#   RATE=4000 bench/soak/run.sh           # a given rate (calls/s), no burst
#
# Passes when no call failed and, for every sampled figure, the last
# minute's maximum is at most the second minute's maximum + 5 %. Exit 0 on
# pass, 1 on fail, 2 when something is missing.
#
# Reuses bench/proxy/common.sh: h2load driving gRPC-shaped unary calls
# (h2c), bench/proxy/grpc_upstream as the upstreams, maitred and the load on
# cores of their own; every process is stopped by PID.
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

DURATION=${DURATION:-600}   # seconds of soak
RATE=${RATE:-}              # calls/s; empty: half of a SAT_S burst's rate
SAT_S=${SAT_S:-5}           # seconds of the saturation burst
CLIENTS=${CLIENTS:-4}       # h2load -c (saturation and soak)
STREAMS=${STREAMS:-32}      # h2load -m (saturation and soak)
SAMPLE_S=5
HUP_S=10
RESTART_S=60
MODE=h2c
PORT_BASE=${PORT_BASE:-26000}   # maitred +1, admin +2, upstreams +51, +52
CPU_PROXY=${CPU_PROXY:-1}
CPU_LOAD=${CPU_LOAD:-0}
KEEP=${KEEP:-0}
UPSTREAM_BIN=${UPSTREAM_BIN:-$top/build/bench/proxy/grpc_upstream}
MAITRED_BIN=${MAITRED_BIN:-$top/build/sidecar/maitred}
WARM=1
DUR=$SAT_S

if [ ! -x "$MAITRED_BIN" ]; then
	echo "no maitred at $MAITRED_BIN: build it (deploy/build-dir.sh build && make -C build sidecar/maitred bench/proxy/grpc_upstream), or set MAITRED_BIN" >&2
	exit 2
fi
# shellcheck source=../proxy/common.sh
. "$here/../proxy/common.sh"
ADMIN_PORT=$((PORT_BASE + 2))
# The check's window: a minute, a third of DURATION when that is shorter.
WIN=$(( DURATION >= 180 ? 60 : DURATION / 3 ))
[ "$WIN" -ge 10 ] || { echo "DURATION=$DURATION: 30 s at least" >&2; exit 2; }
[ "$DURATION" -ge 180 ] || log "DURATION=$DURATION: the check compares windows of $WIN s, not minutes"

# ---- maitred: FAILOVER, its policy flipped at every SIGHUP --------------------
POLICIES=(ROUND_ROBIN LEAST_REQUEST)
write_config() { # POLICY
	cat >"$T/maitred.yaml.new" <<EOF
listen: "127.0.0.1:$PROXY_PORT"
admin: "127.0.0.1:$ADMIN_PORT"
workers: 1
drain_timeout: "1s"
services:
  - name: "*"
    lb: { policy: $1 }
    fault: { mode: FAILOVER, retries: 2 }
    endpoints: [ { address: "127.0.0.1:$UP1" }, { address: "127.0.0.1:$UP2" } ]
EOF
	mv "$T/maitred.yaml.new" "$T/maitred.yaml"
}

# start_proxy (common.sh) writes the row's config through conf_ROW: this one.
conf_maitred() {
	write_config "${POLICIES[0]}"
	PROXY_CMD=("$MAITRED_BIN" --config "$T/maitred.yaml")
}

# metrics: maitred's /metrics (HTTP/1.0 over bash's /dev/tcp).
metrics() {
	timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
		cat <&3' metrics "$ADMIN_PORT" | tr -d '\r'
}
# metric_sum NAME [LABEL-REGEX] < metrics: the sum over NAME's series.
metric_sum() {
	awk -v n="$1" -v re="${2:-}" '
		$1 == n || index($1, n "{") == 1 { if (re == "" || $1 ~ re) s += $2 }
		END { printf "%.0f\n", s }'
}

restart_upstream() { # INDEX (0 or 1): stop it by PID, start it again on its port
	local i=$1 port
	port=$([ "$i" = 0 ] && echo "$UP1" || echo "$UP2")
	stop_pid "${UP_PIDS[$i]}"
	taskset -c "$CPU_LOAD" "$UPSTREAM_BIN" -p "$port" 2>>"$T/up$port.log" &
	UP_PIDS[$i]=$!
	PIDS+=($!)
	wait_listen "$port" 200 || log "upstream on $port did not listen again within 10 s"
}

# sample T EVENT: one line of the series.
sample() {
	local t=$1 ev=$2 rss priv fds thr down up
	rss=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$MPID/status")
	thr=$(awk '$1 == "Threads:" { print $2 }' "/proc/$MPID/status")
	priv=$(awk '$1 == "Private_Clean:" || $1 == "Private_Dirty:" { s += $2 } END { print s }' "/proc/$MPID/smaps_rollup")
	fds=$(find "/proc/$MPID/fd" -mindepth 1 -maxdepth 1 | wc -l)
	down=$(ss -Htn state established "( sport = :$PROXY_PORT )" | wc -l)
	up=$(ss -Htn state established "( dport = :$UP1 or dport = :$UP2 )" | wc -l)
	printf '%5d %9s %9s %5s %5s %5s %5s  %s\n' "$t" "$rss" "$priv" "$fds" "$thr" "$down" "$up" "$ev" | tee -a "$T/series" >&2
}

start_upstreams || exit 1
start_proxy maitred || exit 1
MPID=$PROXY_PID
TARGET_URI="http://127.0.0.1:$PROXY_PORT$PATH_URI"
check_call || { log "a call through maitred did not come back OK:"; cat "$T/check.out" >&2; exit 1; }

if [ -z "$RATE" ]; then
	log "saturation: h2load -c $CLIENTS -m $STREAMS for $SAT_S s"
	h2load_run "$T/sat" -D "$SAT_S" --warm-up-time "$WARM" -c "$CLIENTS" -m "$STREAMS"
	sat=$(h2load_rps "$T/sat")
	[ -n "$sat" ] || { log "the saturation burst gave no rate:"; cat "$T/sat" >&2; exit 1; }
	RATE=$(awk -v s="$sat" 'BEGIN { printf "%d", s / 2 }')
	log "saturation $sat calls/s: the soak runs at $RATE calls/s"
fi
per_client=$(( (RATE + CLIENTS - 1) / CLIENTS ))

m0=$(metrics)
ok0=$(metric_sum maitred_calls_total 'grpc_code="OK"' <<<"$m0")
all0=$(metric_sum maitred_calls_total <<<"$m0")
gen0=$(metric_sum maitred_config_generation <<<"$m0")

log "soak: $DURATION s at $RATE calls/s (h2load -c $CLIENTS -m $STREAMS --rps $per_client), SIGHUP every $HUP_S s, an upstream restarted every $RESTART_S s"
DUR=$((DURATION + 5))   # h2load outlives the measured window: its last calls are not cut
h2load_run "$T/soak" -D "$DUR" -c "$CLIENTS" -m "$STREAMS" --rps "$per_client" &
H2PID=$!
PIDS+=($H2PID)
sleep 1

printf '%5s %9s %9s %5s %5s %5s %5s  %s\n' t_s rss_kB priv_kB fds thr c_down c_up event | tee "$T/series.head" >&2
: >"$T/series"
start=$(date +%s.%N)
hups=0 restarts=0 t=0
while [ "$t" -le "$DURATION" ]; do
	ev=""
	if [ "$t" -gt 0 ] && [ $((t % RESTART_S)) = 0 ]; then
		i=$((restarts % 2))
		restart_upstream "$i"
		restarts=$((restarts + 1))
		ev="$ev restart:$([ "$i" = 0 ] && echo "$UP1" || echo "$UP2")"
	fi
	if [ "$t" -gt 0 ] && [ $((t % HUP_S)) = 0 ]; then
		hups=$((hups + 1))
		write_config "${POLICIES[$((hups % 2))]}"
		kill -HUP "$MPID"
		ev="$ev HUP:${POLICIES[$((hups % 2))]}"
	fi
	kill -0 "$MPID" 2>/dev/null || { log "maitred exited at t=$t s:"; tail -20 "$T/maitred.out" >&2; exit 1; }
	if [ $((t % SAMPLE_S)) = 0 ]; then
		# after the events: a HUP's new snapshot and a restart's reconnect
		# are what a leak would keep
		sleep 0.5
		sample "$t" "${ev# }"
	fi
	t=$((t + 1))
	# the next whole second since start
	sleep "$(awk -v s="$start" -v t="$t" -v n="$(date +%s.%N)" 'BEGIN { d = s + t - n; print (d > 0 ? d : 0) }')"
done

m1=$(metrics)
ok1=$(metric_sum maitred_calls_total 'grpc_code="OK"' <<<"$m1")
all1=$(metric_sum maitred_calls_total <<<"$m1")
gen1=$(metric_sum maitred_config_generation <<<"$m1")
retries=$(( $(metric_sum maitred_retries_total <<<"$m1") - $(metric_sum maitred_retries_total <<<"$m0") ))
transparent=$(( $(metric_sum maitred_transparent_retries_total <<<"$m1") - $(metric_sum maitred_transparent_retries_total <<<"$m0") ))
calls=$((all1 - all0))
failed=$((calls - (ok1 - ok0)))
wait "$H2PID"
h2bad=$(h2load_bad "$T/soak")
h2rps=$(h2load_rps "$T/soak")

echo
echo "series (every $SAMPLE_S s; rss_kB: VmRSS, priv_kB: Private_Clean + Private_Dirty of smaps_rollup,"
echo "fds: open descriptors, thr: threads, c_down/c_up: established connections from clients / to upstreams):"
cat "$T/series.head" "$T/series"

# The check: per column, the last minute's maximum <= the second minute's + 5 %.
echo
echo "the check: the maximum of t = $((DURATION - WIN))..$DURATION s against that of t = $WIN..$((2 * WIN - 1)) s + 5 %"
verdict=$(awk -v d="$DURATION" -v w="$WIN" '
	{ t = $1; for (c = 2; c <= 7; c++) {
		if (t >= w && t < 2 * w && $c > m2[c]) m2[c] = $c
		if (t >= d - w && $c > ml[c]) ml[c] = $c } }
	END {
		split("rss_kB priv_kB fds threads c_down c_up", name, " ")
		bad = 0
		for (c = 2; c <= 7; c++) {
			lim = m2[c] * 1.05
			ok = ml[c] <= lim
			if (!ok) bad = 1
			printf "%-8s second window max %9d, last window max %9d, limit %11.1f  %s\n", name[c - 1], m2[c], ml[c], lim, ok ? "ok" : "GREW"
		}
		exit bad }' "$T/series")
grew=$?
echo "$verdict"
echo
echo "calls (maitred_calls_total during the soak): $calls, not OK: $failed; FAILOVER retries $retries, transparent $transparent"
echo "h2load (the whole run, $DUR s): ${h2rps:-?} calls/s, failed/errored/timed out: ${h2bad:-?}"
echo "reloads: config generation $gen0 -> $gen1 for $hups SIGHUPs; upstream restarts: $restarts"

pass=1
[ "$grew" = 0 ] || { echo "FAIL: a figure grew more than 5 % from the second window to the last"; pass=0; }
[ "$failed" = 0 ] || { echo "FAIL: $failed calls did not end OK:"; grep '^maitred_calls_total' <<<"$m1" | grep -v 'grpc_code="OK"'; pass=0; }
[ "${h2bad:-1}" = 0 ] || { echo "FAIL: h2load counted ${h2bad:-?} failed calls"; pass=0; }
[ $((gen1 - gen0)) = "$hups" ] || { echo "FAIL: $hups SIGHUPs but the config generation moved by $((gen1 - gen0))"; pass=0; }
if [ "$pass" = 1 ]; then
	echo "PASS"
	exit 0
fi
KEEP=1
exit 1
