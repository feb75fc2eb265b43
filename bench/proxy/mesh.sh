#!/usr/bin/env bash
# bench/proxy/mesh.sh: two sidecars with mutual TLS between them, the path
# every service-mesh benchmark measures:
#
#   h2load --h2c--> proxy A ==mTLS (h2)==> proxy B --h2c--> app (grpc_upstream)
#
# A takes the client's calls in h2c and carries them over mTLS, presenting
# A's certificate; B verifies it against the mesh CA, lets only A's identity
# call, and hands the calls to the app in h2c. The same topology for every
# row: maitred (a service with tls on A, an inbound[] listener with an
# authorization rule on B), HAProxy and nghttpx; "direct" is the client on
# the app with no proxy, the floor every latency is compared with; "relay"
# is two hops that only carry bytes (tcp_relay: no TLS, no HTTP/2, no
# authorization, so no pre-flight check), the floor of any two hops'
# latency and CPU on this machine (README "The floor of a hop"). One PKI
# made here with openssl: a CA, A's and B's certificates with SPIFFE-style
# URI SANs (B's also a DNS SAN it is reached by), and for the pre-flight
# check a second CA's certificate claiming A's identity.
#
# Per row, every round: fresh app and proxies, one checked call through both
# hops, the pre-flight check (B refuses a client without a certificate and
# one from another CA, and maitred and HAProxy refuse B's own certificate,
# which is the CA's but not A's identity), then each load: a steady rate
# (h2load --rps) or saturation. Reports, medians of the rounds: p50 ... p99.9
# and what they add over direct, CPU, syscalls and context switches per call
# of each hop, private memory of each hop, failed calls, and ratios to
# nghttpx and HAProxy. See README.md "Mesh: two hops with mTLS".
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

DUR=10           # seconds per measured phase
WARM=1           # saturation: h2load --warm-up-time; rates: 1 s unmeasured first
LOADS="1000 10000 sat"   # calls/s in all, or "sat" (saturation)
CLIENTS=4        # saturation: h2load -c
STREAMS=32       # saturation: h2load -m
RATE_CLIENTS=4   # rates: h2load -c, each --rps RATE/RATE_CLIENTS
PROXIES="direct nghttpx haproxy maitred"
PLACEMENT=split  # split: A and B on cpu1, client and app on cpu0; pod: see usage
REPS=3
PORT_BASE=25300  # A on +1, B on +2 (maitred B's own listen +3), the app on +51
KEEP=0
UPSTREAM_BIN=${UPSTREAM_BIN:-$top/build/bench/proxy/grpc_upstream}
MAITRED_BIN=${MAITRED_BIN:-$top/build/sidecar/maitred}

usage() {
	cat <<EOF
usage: $0 [options]
  -d SECONDS     each measured phase (default $DUR)
  -l LIST        loads, comma separated: calls/s in all, or sat (default "$LOADS")
  -c N, -m N     saturation: h2load connections and streams each (default $CLIENTS, $STREAMS)
  -p LIST        rows among direct, relay, nghttpx, haproxy, maitred (default "$PROXIES")
  -L split|pod   where the processes run. split (default): A and B on cpu1,
                 h2load and the app on cpu0 (run.sh's split: the proxies on
                 a core of their own). pod: each sidecar shares its app's
                 core, as in a pod: h2load and A on cpu0, B and the app on cpu1
  -R N           rounds, rows interleaved in each (A-B-C, A-B-C); medians (default $REPS)
  -P PORT_BASE   A listens on +1, B on +2, the app on +51 (default $PORT_BASE)
  -k             keep the temp dir (configs, PKI, logs, h2load output)
Environment: UPSTREAM_BIN, MAITRED_BIN (as run.sh).
EOF
}

while getopts "d:l:c:m:p:L:R:P:kh" opt; do
	case $opt in
	d) DUR=$OPTARG ;;
	l) LOADS=${OPTARG//,/ } ;;
	c) CLIENTS=$OPTARG ;;
	m) STREAMS=$OPTARG ;;
	p) PROXIES=${OPTARG//,/ } ;;
	L) PLACEMENT=$OPTARG ;;
	R) REPS=$OPTARG ;;
	P) PORT_BASE=$OPTARG ;;
	k) KEEP=1 ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
case $PLACEMENT in
split) CPU_LOAD=0; CPU_APP=0; CPU_A=1; CPU_B=1 ;;
pod) CPU_LOAD=0; CPU_A=0; CPU_B=1; CPU_APP=1 ;;
*) echo "-L must be split or pod" >&2; exit 2 ;;
esac
for l in $LOADS; do
	[[ $l == sat || $l =~ ^[0-9]+$ ]] || { echo "-l: \"$l\" is neither a rate nor sat" >&2; exit 2; }
done

# common.sh: the app is h2c (MODE), its port is UP1; CPU_PROXY is unused here.
MODE=h2c
CPU_PROXY=$CPU_A
. "$here/common.sh"

PORT_A=$PROXY_PORT
PORT_B=$((PORT_BASE + 2))
PORT_B_OWN=$((PORT_BASE + 3))
ID_A=spiffe://bench.local/ns/bench/sa/a
ID_B=spiffe://bench.local/ns/bench/sa/b
NAME_B=b.bench.local

# Syscalls per hop are counted by the kernel (perf stat on the
# raw_syscalls:sys_enter tracepoint: a counter, nothing is slowed); strace
# would slow the proxies and change how calls batch, so without perf the
# column is left out.
PERF_OK=0
if ! command -v perf >/dev/null; then
	log "perf is not installed (apt-get install linux-perf): no syscalls per call"
elif ! perf stat -x, -e raw_syscalls:sys_enter -o /dev/null -- true >/dev/null 2>&1; then
	log "perf cannot count raw_syscalls:sys_enter here (root, or kernel.perf_event_paranoid <= 1, and tracefs): no syscalls per call"
else
	PERF_OK=1
fi

# ---- the PKI ------------------------------------------------------------------

# issue NAME CA SUBJECT SAN: NAME.key, NAME.pem signed by CA, usable as
# server and client; NAME.bundle is both in one file (HAProxy's crt).
issue() {
	local name=$1 ca=$2 subj=$3 san=$4
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$name.key" -out "$name.csr" -subj "$subj" &&
	printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$name.ext" &&
	openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
		-out "$name.pem" -days 2 -extfile "$name.ext" &&
	cat "$name.pem" "$name.key" >"$name.bundle"
}
(
	cd "$T" &&
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout ca.key -out ca.pem -days 2 -subj /CN=bench-mesh-ca &&
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout rogueca.key -out rogueca.pem -days 2 -subj /CN=another-ca &&
	# A's subject CN is its SPIFFE ID too: HAProxy 2.6 has no fetch for a
	# URI SAN, so its rule on B matches the CN (the same text; -subj
	# wants its slashes escaped).
	issue a ca "/CN=${ID_A//\//\\/}" "URI:$ID_A" &&
	issue b ca "/CN=$NAME_B" "URI:$ID_B,DNS:$NAME_B" &&
	issue rogue rogueca "/CN=${ID_A//\//\\/}" "URI:$ID_A"
) >"$T/pki.log" 2>&1 || { cat "$T/pki.log" >&2; exit 1; }
chmod 644 "$T"/*.pem "$T"/*.key "$T"/*.bundle

# ---- the hops' configs ----------------------------------------------------------
# One worker or thread each, access logs off, 1024 streams per client
# connection on both hops (A multiplexes every call over its connection to B).
# Each conf_ROW_SIDE sets HOP_CMD.

conf_maitred_a() {
	cat >"$T/maitred-a.yaml" <<EOF
listen: "127.0.0.1:$PORT_A"
workers: 1
drain_timeout: "1s"
services:
  - name: "*"
    lb: { policy: ROUND_ROBIN }
    tls:
      ca_file: "$T/ca.pem"
      cert_file: "$T/a.pem"
      key_file: "$T/a.key"
      server_identity: "$ID_B"
    endpoints: [ { address: "127.0.0.1:$PORT_B" } ]
EOF
	HOP_CMD=("$MAITRED_BIN" --config "$T/maitred-a.yaml")
}
conf_maitred_b() {
	cat >"$T/maitred-b.yaml" <<EOF
listen: "127.0.0.1:$PORT_B_OWN"
workers: 1
drain_timeout: "1s"
inbound:
  - listen: "127.0.0.1:$PORT_B"
    app: "127.0.0.1:$UP1"
    tls:
      cert_file: "$T/b.pem"
      key_file: "$T/b.key"
      client_ca_file: "$T/ca.pem"
    authorization:
      default: DENY
      rules:
        - principals: ["$ID_A"]
EOF
	HOP_CMD=("$MAITRED_BIN" --config "$T/maitred-b.yaml")
}

haproxy_global() {
	cat <<EOF
global
	nbthread 1
	maxconn 8000
	tune.h2.max-concurrent-streams 1024
defaults
	mode http
	timeout connect 5s
	timeout client 60s
	timeout server 60s
	http-reuse always
EOF
}
conf_haproxy_a() {
	{
		haproxy_global
		cat <<EOF
frontend fe
	bind 127.0.0.1:$PORT_A proto h2
	default_backend be
backend be
	# B is checked by its DNS SAN (verifyhost): HAProxy has no URI SAN check
	server b 127.0.0.1:$PORT_B ssl crt $T/a.bundle ca-file $T/ca.pem verify required sni str($NAME_B) verifyhost $NAME_B alpn h2 proto h2
EOF
	} >"$T/haproxy-a.cfg"
	HOP_CMD=(haproxy -db -f "$T/haproxy-a.cfg")
}
conf_haproxy_b() {
	{
		haproxy_global
		cat <<EOF
frontend fe
	bind 127.0.0.1:$PORT_B ssl crt $T/b.bundle ca-file $T/ca.pem verify required alpn h2
	http-request deny deny_status 403 unless { ssl_c_s_dn(CN) -m str $ID_A }
	default_backend be
backend be
	server app 127.0.0.1:$UP1 proto h2
EOF
	} >"$T/haproxy-b.cfg"
	HOP_CMD=(haproxy -db -f "$T/haproxy-b.cfg")
}

# nghttpx has no rule on the caller's identity (only an mruby script could
# read it): B admits any certificate of the CA. A checks B's DNS SAN (sni).
conf_nghttpx_a() {
	cat >"$T/nghttpx-a.conf" <<EOF
frontend=127.0.0.1,$PORT_A;no-tls
backend=127.0.0.1,$PORT_B;;proto=h2;tls;sni=$NAME_B
cacert=$T/ca.pem
client-private-key-file=$T/a.key
client-cert-file=$T/a.pem
workers=1
frontend-http2-max-concurrent-streams=1024
no-via=yes
errorlog-file=$T/nghttpx-a.err
pid-file=$T/nghttpx-a.pid
EOF
	HOP_CMD=(nghttpx --conf="$T/nghttpx-a.conf")
}
conf_nghttpx_b() {
	cat >"$T/nghttpx-b.conf" <<EOF
frontend=127.0.0.1,$PORT_B
backend=127.0.0.1,$UP1;;proto=h2
private-key-file=$T/b.key
certificate-file=$T/b.pem
verify-client=yes
verify-client-cacert=$T/ca.pem
no-ocsp=yes
workers=1
frontend-http2-max-concurrent-streams=1024
no-via=yes
errorlog-file=$T/nghttpx-b.err
pid-file=$T/nghttpx-b.pid
EOF
	HOP_CMD=(nghttpx --conf="$T/nghttpx-b.conf")
}

# ---- processes -------------------------------------------------------------------

wait_free() {	# PORT: until nothing listens there (5 s at most)
	local i
	for i in $(seq 50); do
		ss -Hltn "sport = :$1" | grep -q . || return 0
		sleep 0.1
	done
	return 1
}

APP_PID=
start_app() {
	local port
	for port in $UP1 $PORT_A $PORT_B $PORT_B_OWN; do
		if ! wait_free $port; then
			log "port $port is taken by another program: pick other ports with -P"
			return 1
		fi
	done
	taskset -c "$CPU_APP" "$UPSTREAM_BIN" -p "$UP1" 2>"$T/up$UP1.log" &
	APP_PID=$!
	PIDS+=($APP_PID)
	UP_PIDS=($APP_PID)	# common.sh's up_stat reads the app's counters
	wait_listen $UP1 200 || { log "the app did not listen within 10 s: $(tail -1 "$T/up$UP1.log")"; return 1; }
}

# The relay row: bytes only, A to B, B to the app (common.sh's tcp_relay).
conf_relay_a() { HOP_CMD=("$RELAY_BIN" -l "$PORT_A" -u "$PORT_B"); }
conf_relay_b() { HOP_CMD=("$RELAY_BIN" -l "$PORT_B" -u "$UP1"); }

# start_hop ROW a|b: the hop's config, the process on its core; sets
# HOP_PID_a or HOP_PID_b.
HOP_PID_a='' HOP_PID_b=''
start_hop() {
	local row=$1 side=$2 cpu port
	[ "$side" = a ] && cpu=$CPU_A port=$PORT_A || cpu=$CPU_B port=$PORT_B
	"conf_${row}_$side"
	taskset -c "$cpu" "${HOP_CMD[@]}" >"$T/$row-$side.out" 2>&1 &
	printf -v "HOP_PID_$side" %s $!
	PIDS+=($!)
	if ! wait_listen "$port" 100; then
		log "$row $side did not listen on $port; its output:"
		tail -5 "$T/$row-$side.out" "$T/nghttpx-$side.err" 2>/dev/null >&2
		return 1
	fi
	sleep 0.2	# let forked workers come up
}

stop_row() {
	local p
	for p in "$HOP_PID_a" "$HOP_PID_b" "$APP_PID"; do
		[ -n "$p" ] && stop_pid "$p"
	done
	HOP_PID_a='' HOP_PID_b='' APP_PID=''
	UP_PIDS=()
	wait_free $PORT_A; wait_free $PORT_B; wait_free $UP1
}

# ---- what is counted --------------------------------------------------------------

# counters PID...: "ns switches" of the processes, every thread: ns on a CPU
# (cpu_ns, schedstat) and voluntary + involuntary context switches (each
# thread's status; the process's own status counts its main thread).
counters() {
	local p sw=0
	for p in "$@"; do
		sw=$((sw + $(cat /proc/$p/task/*/status 2>/dev/null |
			awk '$1 ~ /ctxt_switches:$/ { n += $2 } END { print n + 0 }')))
	done
	echo "$(cpu_ns "$@") $sw"
}

# private_kb PID...: "ANON PRIV", smaps_rollup's Anonymous and
# Private_Clean + Private_Dirty (KiB), summed over the processes.
private_kb() {
	local p f=()
	for p in "$@"; do [ -r /proc/$p/smaps_rollup ] && f+=("/proc/$p/smaps_rollup"); done
	[ ${#f[@]} -gt 0 ] || { echo "0 0"; return; }
	awk '$1 == "Anonymous:" { a += $2 } $1 == "Private_Clean:" || $1 == "Private_Dirty:" { p += $2 }
		END { print a + 0, p + 0 }' "${f[@]}" 2>/dev/null
}

# perf_start SIDE PID...: counts the processes' syscalls into $T/perf.SIDE
# until perf_stop (PERF_PID_a, PERF_PID_b). perf runs on the client's core.
PERF_PID_a='' PERF_PID_b=''
perf_start() {
	local side=$1; shift
	[ "$PERF_OK" = 1 ] || return 0
	rm -f "$T/perf.$side"
	taskset -c "$CPU_LOAD" perf stat -x, -e raw_syscalls:sys_enter -p "$(IFS=,; echo "$*")" \
		-o "$T/perf.$side" >/dev/null 2>&1 &
	printf -v "PERF_PID_$side" %s $!
	PIDS+=($!)
}
# perf_stop SIDE: ends the count; PERF_COUNT is the syscalls counted (or
# empty). Not in a $(...): the subshell could not reap perf.
perf_stop() {
	local side=$1 pid i
	PERF_COUNT=
	pid=$([ "$side" = a ] && echo "$PERF_PID_a" || echo "$PERF_PID_b")
	[ -n "$pid" ] || return 0
	kill -INT "$pid" 2>/dev/null
	for i in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	stop_pid "$pid"
	printf -v "PERF_PID_$side" %s ""
	PERF_COUNT=$(awk -F, '$3 ~ /sys_enter/ && $1 ~ /^[0-9]+$/ { print $1 }' "$T/perf.$side" 2>/dev/null)
}

# quantiles LOG: p50 p90 p99 p99.9 in µs of every call in an h2load log
# (its third column, µs from request start to end of response).
quantiles() {
	awk '{ print $3 }' "$1" | sort -n | awk '
		{ v[NR] = $1 }
		function q(p,  i) { i = int(NR * p + 0.999999); if (i < 1) i = 1; return v[i] }
		END {
			if (NR == 0) { print "- - - -"; exit }
			printf "%d %d %d %d\n", q(0.50), q(0.90), q(0.99), q(0.999)
		}'
}

declare -A ALL		# ALL[load,row,field]: each round's value, space separated
declare -A NOTES	# NOTES[row]
note() { NOTES[$1]="${NOTES[$1]:-}${NOTES[$1]:+; }round $rep: $2"; KEEP=1; log "$1: $2"; }
put() { ALL[$1,$2,$3]+="$4 "; }	# LOAD ROW FIELD VALUE
per_call() {	# COUNT CALLS [SCALE]: COUNT * SCALE / CALLS, or -
	awk -v c="$1" -v n="$2" -v s="${3:-1}" 'BEGIN { if (n > 0 && c != "") printf "%.2f", c * s / n; else print "-" }'
}
US_PER_NS=0.001

# ---- the pre-flight check -----------------------------------------------------------

# try_b NAME NGHTTP_ARGS...: one call straight to B over TLS; true when it
# came back with grpc-status 0 and the app served it.
try_b() {
	local name=$1 n0 n1; shift
	n0=$(up_stat calls)
	timeout 10 nghttp -v -d "$T/body.bin" "${HDRS[@]}" "$@" "https://127.0.0.1:$PORT_B$PATH_URI" \
		>"$T/preflight.$name.out" 2>&1
	n1=$(up_stat calls)
	grep -aq 'grpc-status: 0' "$T/preflight.$name.out" && [ "$n1" -gt "$n0" ]
}

# preflight ROW: B's mTLS is real. A's certificate is let in; no certificate
# and a certificate of another CA (claiming A's identity) are refused; B's
# own certificate (the CA's, another identity) is refused where the row has a
# rule on identities (maitred, HAProxy). Non-zero (and a note) when B lets
# in a caller it must refuse, or refuses A.
PREFLIGHT=()
preflight() {
	local row=$1 wrong
	if ! try_b a --cert "$T/a.pem" --key "$T/a.key"; then
		note "$row" "pre-flight: B refused A's certificate (see preflight.a.out)"; return 1
	fi
	if try_b none; then
		note "$row" "pre-flight: B served a client without a certificate"; return 1
	fi
	if try_b rogue --cert "$T/rogue.pem" --key "$T/rogue.key"; then
		note "$row" "pre-flight: B served a certificate of another CA"; return 1
	fi
	if try_b wrongid --cert "$T/b.pem" --key "$T/b.key"; then
		wrong="let in"
		if [ "$row" != nghttpx ]; then
			note "$row" "pre-flight: B served $ID_B, which its rule does not allow"; return 1
		fi
	else
		wrong="refused"
	fi
	[ "$rep" = 1 ] && PREFLIGHT+=("$row: A's certificate served; no certificate refused; another CA's certificate refused; the CA's certificate for $ID_B $wrong")
	return 0
}

# ---- one row ---------------------------------------------------------------------

# run_load ROW LOAD: one measured phase at LOAD (calls/s, or sat).
run_load() {
	local row=$1 load=$2 out=$T/$1.$2.r$rep a0 a1 b0 b1 u0 u1 n0 n1 n sa sb
	local apids=() bpids=()
	if [ "$row" != direct ]; then
		apids=($(tree_pids "$HOP_PID_a")); bpids=($(tree_pids "$HOP_PID_b"))
	fi
	if [ "$load" != sat ]; then
		# unmeasured: connections up, caches warm, at the rate
		h2load_run "$out.warm" -D "$WARM" -c "$RATE_CLIENTS" -m 64 --rps $((load / RATE_CLIENTS))
	fi
	if [ "$row" != direct ]; then
		a0=($(counters "${apids[@]}")); b0=($(counters "${bpids[@]}"))
		perf_start a "${apids[@]}"; perf_start b "${bpids[@]}"
		[ "$PERF_OK" = 1 ] && sleep 0.3	# perf attached before the first call
	fi
	u0=$(cpu_ns "$APP_PID"); n0=$(up_stat calls)
	if [ "$load" = sat ]; then
		h2load_run "$out" -D "$DUR" --warm-up-time "$WARM" -c "$CLIENTS" -m "$STREAMS" --log-file "$CALL_LOGS/${out##*/}.log"
	else
		h2load_run "$out" -D "$DUR" -c "$RATE_CLIENTS" -m 64 --rps $((load / RATE_CLIENTS)) --log-file "$CALL_LOGS/${out##*/}.log"
	fi
	u1=$(cpu_ns "$APP_PID"); n1=$(up_stat calls)
	n=$((n1 - n0))
	if [ "$row" != direct ]; then
		a1=($(counters "${apids[@]}")); b1=($(counters "${bpids[@]}"))
		perf_stop a; sa=$PERF_COUNT
		perf_stop b; sb=$PERF_COUNT
		put "$load" "$row" cpua "$(per_call $((a1[0] - a0[0])) $n "$US_PER_NS")"
		put "$load" "$row" cpub "$(per_call $((b1[0] - b0[0])) $n "$US_PER_NS")"
		put "$load" "$row" cpu "$(per_call $((a1[0] - a0[0] + b1[0] - b0[0])) $n "$US_PER_NS")"
		put "$load" "$row" swa "$(per_call $((a1[1] - a0[1])) $n)"
		put "$load" "$row" swb "$(per_call $((b1[1] - b0[1])) $n)"
		[ -n "$sa" ] && put "$load" "$row" sysa "$(per_call "$sa" $n)"
		[ -n "$sb" ] && put "$load" "$row" sysb "$(per_call "$sb" $n)"
	fi
	put "$load" "$row" appcpu "$(per_call $((u1 - u0)) $n "$US_PER_NS")"
	put "$load" "$row" rps "$(h2load_rps "$out" | awk '{ printf "%.0f", $1 }')"
	local bad
	bad=$(h2load_bad "$out"); bad=${bad:-all}
	put "$load" "$row" failed "$bad"
	[ "$bad" = 0 ] || note "$row" "$bad failed calls at $load (see $(basename "$out"))"
	set -- $(quantiles "$CALL_LOGS/${out##*/}.log")
	put "$load" "$row" p50 "$1"; put "$load" "$row" p90 "$2"
	put "$load" "$row" p99 "$3"; put "$load" "$row" p999 "$4"
	[ "$KEEP" = 1 ] || rm -f "$CALL_LOGS/${out##*/}.log"	# large at saturation; -k keeps it
}

run_row() {
	local row=$1 load m
	start_app || { note "$row" "the app did not start"; stop_row; return; }
	if [ "$row" = direct ]; then
		TARGET_URI="http://127.0.0.1:$UP1$PATH_URI"
	else
		TARGET_URI="http://127.0.0.1:$PORT_A$PATH_URI"
		if ! start_hop "$row" b || ! start_hop "$row" a; then
			note "$row" "a hop did not start (see $row-a.out, $row-b.out)"; stop_row; return
		fi
	fi
	if ! check_call; then
		note "$row" "a call did not end with grpc-status 0 (see check.out)"; stop_row; return
	fi
	if [ "$row" != direct ]; then
		[ "$row" = relay ] || preflight "$row" || { stop_row; return; }
		sleep 0.2
		m=($(private_kb $(tree_pids "$HOP_PID_a")) $(private_kb $(tree_pids "$HOP_PID_b")))
		put mem "$row" a0 "${m[0]}"; put mem "$row" b0 "${m[2]}"
	fi
	for load in $LOADS; do
		log "round $rep: $row @ $load"
		run_load "$row" "$load"
	done
	if [ "$row" != direct ]; then
		# after the loads: the allocators keep what the peak took
		m=($(private_kb $(tree_pids "$HOP_PID_a")) $(private_kb $(tree_pids "$HOP_PID_b")))
		put mem "$row" a1 "${m[0]}"; put mem "$row" pa1 "${m[1]}"
		put mem "$row" b1 "${m[2]}"; put mem "$row" pb1 "${m[3]}"
		kill -0 "$HOP_PID_a" 2>/dev/null && kill -0 "$HOP_PID_b" 2>/dev/null ||
			note "$row" "a hop exited during the run (see $row-a.out, $row-b.out)"
	fi
	stop_row
}

# ---- main ----------------------------------------------------------------------------

ROWS=()
declare -A SKIP
for row in $PROXIES; do
	case $row in
	direct | relay | nghttpx | haproxy | maitred) why=$(available "$row") ;;
	*) why="unknown row (direct, relay, nghttpx, haproxy, maitred)" ;;
	esac
	if [ -n "$why" ]; then log "skip $row: $why"; SKIP[$row]=$why; continue; fi
	ROWS+=("$row")
done
[ ${#ROWS[@]} -gt 0 ] || { echo "no row can run" >&2; exit 1; }
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
log "mesh bench: placement $PLACEMENT (A cpu$CPU_A, B cpu$CPU_B, app cpu$CPU_APP, h2load cpu$CPU_LOAD)," \
	"loads $LOADS, ${DUR}s, $REPS rounds, rows ${ROWS[*]}; temp $T"
for rep in $(seq "$REPS"); do
	for row in "${ROWS[@]}"; do
		run_row "$row"
	done
done

median() { tr ' ' '\n' <<<"$1" | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "-" }'; }
declare -A M
for key in "${!ALL[@]}"; do M[$key]=$(median "${ALL[$key]}"); done
v() { echo "${M[$1,$2,$3]:--}"; }	# LOAD ROW FIELD
vs() {	# LOAD ROW FIELD: the row's median over nghttpx's and HAProxy's
	local a b
	a=$([ "$2" = nghttpx ] && echo - || ratio "$(v "$1" "$2" "$3")" "$(v "$1" nghttpx "$3")")
	b=$([ "$2" = haproxy ] && echo - || ratio "$(v "$1" "$2" "$3")" "$(v "$1" haproxy "$3")")
	echo "$a / $b"
}

over_relay() {	# LOAD ROW: (row - relay) / (peer - relay) for nghttpx, HAProxy
	local peer out="" r
	r=$(v "$1" relay cpu)
	for peer in nghttpx haproxy; do
		out+="${out:+ / }$([ "$2" = "$peer" ] && echo - || awk -v a="$(v "$1" "$2" cpu)" -v b="$(v "$1" "$peer" cpu)" -v r="$r" 'BEGIN {
			if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && r ~ /^[0-9.]+$/ && b > r) printf "%.2f", (a - r) / (b - r); else print "-" }')"
	done
	echo "$out"
}

echo
echo "### mesh, two hops with mTLS — $(date -u +%Y-%m-%dT%H:%MZ), placement $PLACEMENT, $(nproc) CPUs, load $LOAD0 at start"
echo
echo "client --h2c--> A --mTLS--> B --h2c--> app; A on cpu$CPU_A, B on cpu$CPU_B, app on cpu$CPU_APP, h2load on cpu$CPU_LOAD."
echo "${DUR}s per phase; rates: h2load -c $RATE_CLIENTS --rps RATE/$RATE_CLIENTS after ${WARM}s unmeasured;" \
	"sat: -c $CLIENTS -m $STREAMS after ${WARM}s warm-up; medians of $REPS rounds. Latency in µs;" \
	"\"added\" = the row's percentile minus direct's; per call = over the calls the app served;" \
	"switches = voluntary + involuntary; \"vs\" = the row's figure over nghttpx's / HAProxy's."
for load in $LOADS; do
	label=$([ "$load" = sat ] && echo "saturation" || echo "$load/s")
	echo
	echo "| @ $label | calls/s | failed | p50 | p90 | p99 | p99.9 | added p50 / p90 / p99 / p99.9 | µs CPU/call A | B | A+B | syscalls/call A | B | switches/call A | B | app µs CPU/call | A+B CPU vs | p99 vs | A+B CPU over relay vs |"
	echo "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"
	for row in "${ROWS[@]}"; do
		added=-
		if [ "$row" != direct ] && [[ " ${ROWS[*]} " == *" direct "* ]]; then
			added=$(awk -v a="$(v "$load" "$row" p50) $(v "$load" "$row" p90) $(v "$load" "$row" p99) $(v "$load" "$row" p999)" \
				-v b="$(v "$load" direct p50) $(v "$load" direct p90) $(v "$load" direct p99) $(v "$load" direct p999)" 'BEGIN {
				split(a, x, " "); split(b, y, " ")
				for (i = 1; i <= 4; i++) printf "%s%s", (i > 1 ? " / " : ""),
					(x[i] ~ /^[0-9]+$/ && y[i] ~ /^[0-9]+$/) ? x[i] - y[i] : "-" }')
		fi
		cvs=-; pvs=-; ovs=-
		[ "$row" != direct ] && cvs=$(vs "$load" "$row" cpu) && pvs=$(vs "$load" "$row" p99)
		# the row's A+B CPU less the relays', over nghttpx's and HAProxy's
		# less the relays': the proxies' own part, the hops' price out
		[[ $row != direct && $row != relay ]] && ovs=$(over_relay "$load" "$row")
		echo "| $row | $(v "$load" "$row" rps) | $(v "$load" "$row" failed) | $(v "$load" "$row" p50) | $(v "$load" "$row" p90) | $(v "$load" "$row" p99) | $(v "$load" "$row" p999) | $added | $(v "$load" "$row" cpua) | $(v "$load" "$row" cpub) | $(v "$load" "$row" cpu) | $(v "$load" "$row" sysa) | $(v "$load" "$row" sysb) | $(v "$load" "$row" swa) | $(v "$load" "$row" swb) | $(v "$load" "$row" appcpu) | $cvs | $pvs | $ovs |"
	done
done
mib() { awk -v k="$1" 'BEGIN { if (k ~ /^[0-9.]+$/) printf "%.1f", k / 1024; else print "-" }'; }
echo
echo "Private memory of each hop, MiB (smaps_rollup, summed over the hop's processes): Anonymous after the first call and after the loads; Private_Clean + Private_Dirty after the loads."
echo
echo "| row | A Anonymous at rest | A Anonymous after | A Private_* after | B Anonymous at rest | B Anonymous after | B Private_* after | A+B Private_* vs nghttpx / HAProxy |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
for row in "${ROWS[@]}"; do
	M[mem,$row,p]=$(awk -v a="$(v mem "$row" pa1)" -v b="$(v mem "$row" pb1)" 'BEGIN { if (a ~ /^[0-9]+$/ && b ~ /^[0-9]+$/) print a + b; else print "-" }')
done
for row in "${ROWS[@]}"; do
	[ "$row" = direct ] && continue
	echo "| $row | $(mib "$(v mem "$row" a0)") | $(mib "$(v mem "$row" a1)") | $(mib "$(v mem "$row" pa1)") | $(mib "$(v mem "$row" b0)") | $(mib "$(v mem "$row" b1)") | $(mib "$(v mem "$row" pb1)") | $(vs mem "$row" p) |"
done
for row in "${!SKIP[@]}"; do echo; echo "skipped $row: ${SKIP[$row]}"; done
echo
[ "$PERF_OK" = 1 ] || echo "syscalls: not counted (perf stat on raw_syscalls:sys_enter does not work here)."
for line in "${PREFLIGHT[@]}"; do echo "pre-flight, $line."; done
for row in "${ROWS[@]}"; do
	[ -n "${NOTES[$row]:-}" ] && echo && echo "note, $row: ${NOTES[$row]}"
done
# Round by round (each round ran every row back to back): a median can hide
# one round's outlier.
if [[ " ${ROWS[*]} " == *" maitred "* ]] && [ "$REPS" -gt 1 ]; then
	echo
	for load in $LOADS; do
		for peer in nghttpx haproxy; do
			[[ " ${ROWS[*]} " == *" $peer "* ]] || continue
			echo "round by round @ $load: A+B CPU maitred/$peer $(awk -v a="${ALL[$load,maitred,cpu]:-}" -v b="${ALL[$load,$peer,cpu]:-}" 'BEGIN {
				n = split(a, x, " "); split(b, y, " ")
				for (i = 1; i <= n; i++) printf "%s%s", (i > 1 ? " " : ""),
					(x[i] ~ /^[0-9.]+$/ && y[i] ~ /^[0-9.]+$/ && y[i] > 0) ? sprintf("%.2f", x[i] / y[i]) : "-" }')"
		done
	done
fi
