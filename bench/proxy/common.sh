# shellcheck shell=bash
# bench/proxy/common.sh: what run.sh and profile.sh share. Sourced after the
# caller has set MODE, PORT_BASE, CPU_PROXY, CPU_LOAD, KEEP, UPSTREAM_BIN and
# MAITRED_BIN. Creates the temp dir $T, writes the test material into it,
# and stops every process it started (recorded in PIDS) on exit.

case $MODE in h2c|tls) ;; *) echo "mode must be h2c or tls" >&2; exit 2 ;; esac

PROXY_PORT=$((PORT_BASE + 1))
UP1=$((PORT_BASE + 51))
UP2=$((PORT_BASE + 52))
TCK=$(getconf CLK_TCK)

for tool in h2load nghttp taskset ss python3 openssl; do
	command -v $tool >/dev/null || { echo "missing $tool (apt-get install nghttp2-client iproute2 util-linux python3 openssl)" >&2; exit 2; }
done
if [ ! -x "$UPSTREAM_BIN" ]; then
	echo "missing $UPSTREAM_BIN: run 'make -C build bench/proxy/grpc_upstream' first (the plain build, deploy/demo.sh's)" >&2
	exit 2
fi

T=$(mktemp -d /tmp/maitred-bench.XXXXXX)
chmod 755 "$T"
# h2load's --log-file (a line written per call) goes in a folder of its
# own, not beside the configs and TLS files in $T: maitred watches their
# folders, and a file growing there must cost no row anything (maitred
# used to wake for every write there: one wake-up per call per hop in
# every phase with a log, only in its rows).
CALL_LOGS=$T/calls
mkdir -p "$CALL_LOGS"
# PIDS, cleanup, log, stop_pid (procs.sh).
# shellcheck source=procs.sh
. "$here/procs.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- process helpers --------------------------------------------------------


# tree_pids PID: PID and all its descendants (nginx/nghttpx fork workers).
tree_pids() {
	local p=$1 c
	[ -d /proc/$p ] || return 0
	echo "$p"
	for c in $(cat /proc/$p/task/*/children 2>/dev/null); do tree_pids "$c"; done
}

# cpu_ns PID...: nanoseconds on a CPU (/proc/PID/task/*/schedstat) summed
# over the processes' threads: what the scheduler counted, to the ns, where
# utime+stime move in 10 ms ticks (at 2,000 calls/s for 5 s a proxy's 150 ms
# of CPU is 15 ticks: a 7 % step). The threads must live as long as the
# phase (a thread that exits takes its count with it).
cpu_ns() {
	local p
	for p in "$@"; do cat /proc/$p/task/*/schedstat 2>/dev/null; done | awk '{ s += $1 } END { printf "%.0f\n", s }'
}

# cpu_ticks PID...: utime+stime summed over the given processes (all threads).
cpu_ticks() {
	local p s f sum=0
	for p in "$@"; do
		s=$(cat /proc/$p/stat 2>/dev/null) || continue
		f=(${s##*) })	# skip "pid (comm) ": f[0] is field 3 (state)
		sum=$((sum + f[11] + f[12]))	# fields 14, 15: utime, stime
	done
	echo $sum
}

# status_kb FIELD PID...: FIELD ("VmHWM", "VmRSS") of each process, one a line.
status_kb() {
	local f=$1 p; shift
	for p in "$@"; do
		awk -v f="$f:" '$1 == f { print $2 }' /proc/$p/status 2>/dev/null
	done
}

# rollup_kb PID...: "ANON PD", smaps_rollup's Anonymous and Private_Dirty
# (KiB) summed over the given processes: the private memory a node pays for
# them (README.md, "What the columns mean"). Shared library pages are in
# RSS and in neither of these.
rollup_kb() {
	local f p
	f=()
	for p in "$@"; do [ -r /proc/$p/smaps_rollup ] && f+=("/proc/$p/smaps_rollup"); done
	[ ${#f[@]} -gt 0 ] || { echo "0 0"; return; }
	awk '$1 == "Anonymous:" { a += $2 } $1 == "Private_Dirty:" { d += $2 } END { print a + 0, d + 0 }' "${f[@]}" 2>/dev/null
}

# sample_mem PIDS...: every 100 ms, rollup_kb of the given processes; writes
# the highest of each ("ANON PD") on SIGTERM.
sample_mem() {
	local ma=0 md=0 a d
	trap 'echo $ma $md; exit 0' TERM
	while :; do
		read -r a d <<<"$(rollup_kb "$@")"
		[ "${a:-0}" -gt "$ma" ] && ma=$a
		[ "${d:-0}" -gt "$md" ] && md=$d
		sleep 0.1 & wait $!
	done
}

wait_listen() {	# PORT [TRIES of 50 ms]
	local port=$1 i
	for i in $(seq ${2:-100}); do
		ss -Hltn "sport = :$port" | grep -q . && return 0
		sleep 0.05
	done
	return 1
}

# ---- test material ------------------------------------------------------------

# The request: 5-byte gRPC prefix + protobuf { string field 1 = "hello world" }.
printf '\x00\x00\x00\x00\x0d\x0a\x0bhello world' >"$T/body.bin"
# GRPC_TIMEOUT=10S: every call carries a deadline, as production clients'
# calls do (the reported tables are made without).
HDRS=(-H 'content-type: application/grpc' -H 'te: trailers' ${GRPC_TIMEOUT:+-H "grpc-timeout: $GRPC_TIMEOUT"})
PATH_URI=/bench.Echo/Call

if [ "$MODE" = tls ]; then
	(
		cd "$T" &&
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
			-keyout ca.key -out ca.pem -days 2 -subj /CN=maitred-bench-ca &&
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
			-keyout up.key -out up.csr -subj /CN=upstream.test &&
		printf 'subjectAltName=DNS:upstream.test\nextendedKeyUsage=serverAuth\n' >up.ext &&
		openssl x509 -req -in up.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
			-out up.pem -days 2 -extfile up.ext
	) >"$T/openssl.log" 2>&1 || { cat "$T/openssl.log" >&2; exit 1; }
	chmod 644 "$T"/*.pem "$T"/*.key
	UP_TLS=(--cert "$T/up.pem" --key "$T/up.key")
else
	UP_TLS=()
fi

UP_PIDS=()
start_upstreams() {
	local port
	UP_PIDS=()
	for port in $UP1 $UP2 $PROXY_PORT; do
		if ss -Hltn "sport = :$port" | grep -q .; then
			log "port $port is taken by another program: pick other ports with -P"
			return 1
		fi
	done
	for port in $UP1 $UP2; do
		# UP_EXTRA: more grpc_upstream options (bulk.sh: -z, -W)
		taskset -c "$CPU_LOAD" "$UPSTREAM_BIN" -p "$port" ${UP_TLS[@]+"${UP_TLS[@]}"} ${UP_EXTRA[@]+"${UP_EXTRA[@]}"} \
			2>"$T/up$port.log" &
		UP_PIDS+=($!)
		PIDS+=($!)
	done
	for port in $UP1 $UP2; do
		if ! wait_listen $port 200; then
			log "upstream on $port did not listen within 10 s: $(tail -1 "$T/up$port.log")"
			stop_upstreams
			return 1
		fi
	done
}
stop_upstreams() {
	local p
	for p in "${UP_PIDS[@]}"; do stop_pid "$p"; done
	UP_PIDS=()
}
# up_stat FIELD: FIELD (calls, accepted, peak_open) summed over both upstreams,
# or "a/b" per upstream with a second argument.
up_stat() {
	local f=$1 per=${2:-} p port v n w out="" sum=0 i=0
	for p in "${UP_PIDS[@]}"; do
		port=$([ $i = 0 ] && echo $UP1 || echo $UP2)
		i=$((i + 1))
		n=$(grep -c '^stats' "$T/up$port.log")
		kill -USR1 "$p" 2>/dev/null
		for w in $(seq 100); do
			[ "$(grep -c '^stats' "$T/up$port.log")" -gt "$n" ] && break
			sleep 0.01
		done
		v=$(grep '^stats' "$T/up$port.log" | tail -1 | tr ' ' '\n' |
			awk -F= -v f="$f" '$1 == f { print $2 }')
		v=${v:-0}
		sum=$((sum + v))
		out="$out${out:+/}$v"
	done
	[ -n "$per" ] && echo "$out" || echo "$sum"
}

# ---- proxy configs --------------------------------------------------------------

# The "relay" row: bench/proxy/tcp_relay, a hop that carries bytes and does
# nothing else, each client connection on its own upstream connection (round
# robin over both upstreams). The floor any proxy pays for a hop on this
# machine (README "The floor of a hop"). With TLS upstreams the client
# speaks TLS through it (proxy_scheme), so the relay still only carries
# bytes and stays a floor: a proxy that terminates TLS does more.
RELAY_BIN=${RELAY_BIN:-$top/build/bench/proxy/tcp_relay}
ratios_by_round() {	# "A1 A2 ..." "B1 B2 ...": A/B for each round ("n/a" where one is missing)
	awk -v a="$1" -v b="$2" 'BEGIN {
		n = split(a, x, " "); split(b, y, " "); out = ""
		for (i = 1; i <= n; i++) {
			r = "n/a"
			if (x[i] ~ /^[0-9.]+$/ && y[i] ~ /^[0-9.]+$/ && y[i] + 0 > 0)
				r = sprintf("%.2f", x[i] / y[i])
			out = out (i > 1 ? " " : "") r
		}
		print out
	}'
}

conf_relay() {
	PROXY_CMD=("$RELAY_BIN" -l "$PROXY_PORT" -u "$UP1,$UP2")
}
# proxy_scheme ROW: the scheme h2load speaks to ROW's port.
proxy_scheme() {
	if [ "$1" = relay ] && [ "$MODE" = tls ]; then echo https; else echo http; fi
}
# One worker each; access logs off; frontend stream limit 1024 (maitred's
# default) so that the 512-in-flight phase fits on one client connection.

conf_nghttpx() {
	local b1 b2
	if [ "$MODE" = tls ]; then
		b1="backend=127.0.0.1,$UP1;;proto=h2;tls;sni=upstream.test"
		b2="backend=127.0.0.1,$UP2;;proto=h2;tls;sni=upstream.test"
	else
		b1="backend=127.0.0.1,$UP1;;proto=h2"
		b2="backend=127.0.0.1,$UP2;;proto=h2"
	fi
	cat >"$T/nghttpx.conf" <<EOF
frontend=127.0.0.1,$PROXY_PORT;no-tls
$b1
$b2
workers=1
frontend-http2-max-concurrent-streams=1024
no-via=yes
errorlog-file=$T/nghttpx.err
pid-file=$T/nghttpx.pid
EOF
	[ "$MODE" = tls ] && echo "cacert=$T/ca.pem" >>"$T/nghttpx.conf"
	# NGHTTPX_EXTRA: more config lines (bulk.sh: the window sizes)
	[ -n "${NGHTTPX_EXTRA:-}" ] && echo "$NGHTTPX_EXTRA" >>"$T/nghttpx.conf"
	PROXY_CMD=(nghttpx --conf="$T/nghttpx.conf")
}

conf_haproxy() {
	local tls=""
	[ "$MODE" = tls ] && tls=" ssl verify required ca-file $T/ca.pem sni str(upstream.test) verifyhost upstream.test alpn h2"
	cat >"$T/haproxy.cfg" <<EOF
global
	nbthread 1
	maxconn 8000
	tune.h2.max-concurrent-streams 1024
defaults
	mode http
	timeout connect 5s
	timeout client 60s
	timeout server 60s
	# multiplex calls from any client connection over the h2 backends
	http-reuse always
frontend fe
	bind 127.0.0.1:$PROXY_PORT proto h2
	default_backend be
backend be
	balance roundrobin
	server u1 127.0.0.1:$UP1 proto h2$tls
	server u2 127.0.0.1:$UP2 proto h2$tls
EOF
	PROXY_CMD=(haproxy -db -f "$T/haproxy.cfg")
}

conf_nginx() {
	local scheme=grpc tls=""
	if [ "$MODE" = tls ]; then
		scheme=grpcs
		tls="grpc_ssl_trusted_certificate $T/ca.pem;
			grpc_ssl_verify on;
			grpc_ssl_name upstream.test;
			grpc_ssl_server_name on;
			grpc_ssl_session_reuse on;"
	fi
	mkdir -p "$T/nginx"
	cat >"$T/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $T/nginx.pid;
error_log $T/nginx.err warn;
events { worker_connections 20000; }
http {
	access_log off;
	# default 1000 calls per client connection, then GOAWAY (h2load does
	# not reconnect)
	keepalive_requests 100000000;
	client_body_temp_path $T/nginx/body;
	proxy_temp_path $T/nginx/proxy;
	fastcgi_temp_path $T/nginx/fastcgi;
	uwsgi_temp_path $T/nginx/uwsgi;
	scgi_temp_path $T/nginx/scgi;
	upstream ups {
		server 127.0.0.1:$UP1;
		server 127.0.0.1:$UP2;
		# nginx runs one call per upstream connection: keep enough idle
		# ones that calls in flight never force a connect per call.
		keepalive 1024;
		keepalive_requests 1000000;
	}
	server {
		listen 127.0.0.1:$PROXY_PORT http2;
		http2_max_concurrent_streams 1024;
		location / {
			grpc_pass $scheme://ups;
			$tls
		}
	}
}
EOF
	PROXY_CMD=(nginx -p "$T/nginx" -e "$T/nginx.err" -c "$T/nginx.conf")
}

conf_maitred() {
	local tls=""
	[ "$MODE" = tls ] && tls="    tls: { ca_file: \"$T/ca.pem\", server_name: \"upstream.test\" }"
	cat >"$T/maitred.yaml" <<EOF
listen: "127.0.0.1:$PROXY_PORT"
workers: 1
drain_timeout: "1s"
services:
  - name: "*"
    lb: { policy: ROUND_ROBIN }
$tls
    endpoints: [ { address: "127.0.0.1:$UP1" }, { address: "127.0.0.1:$UP2" } ]
EOF
	# MAITRED_UPSTREAM: an Upstream message to try pool settings, e.g.
	# '{ max_concurrent_streams: 1000 }' (the table is made without it).
	[ -n "${MAITRED_UPSTREAM:-}" ] && echo "    upstream: $MAITRED_UPSTREAM" >>"$T/maitred.yaml"
	# MAITRED_FAULT: a Fault message, e.g. '{ mode: FAILOVER }' to measure
	# what keeping the request for replay costs (the table is made without).
	[ -n "${MAITRED_FAULT:-}" ] && echo "    fault: $MAITRED_FAULT" >>"$T/maitred.yaml"
	# MAITRED_DOWNSTREAM: a top-level downstream block (bulk.sh: the windows);
	# MAITRED_MAX_CONNECTIONS: downstream.max_connections (default 10000),
	# raised by run.sh for the idle-connection figure at N >= 10000. One
	# downstream block holds both.
	if [ -n "${MAITRED_DOWNSTREAM:-}" ] && [ -n "${MAITRED_MAX_CONNECTIONS:-}" ]; then
		echo "downstream: { max_connections: $MAITRED_MAX_CONNECTIONS, ${MAITRED_DOWNSTREAM#\{}" >>"$T/maitred.yaml"
	elif [ -n "${MAITRED_DOWNSTREAM:-}" ]; then
		echo "downstream: $MAITRED_DOWNSTREAM" >>"$T/maitred.yaml"
	elif [ -n "${MAITRED_MAX_CONNECTIONS:-}" ]; then
		echo "downstream: { max_connections: $MAITRED_MAX_CONNECTIONS }" >>"$T/maitred.yaml"
	fi
	# MAITRED_TRACING: a top-level tracing block, e.g.
	# '{ otlp: { endpoint: "http://127.0.0.1:4318/v1/traces" }, sample: 0 }'
	# (what tracing costs a call: docs/tracing.md, bench/proxy/README.md).
	[ -n "${MAITRED_TRACING:-}" ] && echo "tracing: $MAITRED_TRACING" >>"$T/maitred.yaml"
	PROXY_CMD=("$MAITRED_BIN" --config "$T/maitred.yaml")
}
# The row "maitred_base": the same config, another binary (MAITRED_BASE_BIN),
# so a change can be measured side by side with the build before it.
# MAITRED_BASE_TRACING, when set (even empty), is its tracing block instead
# of MAITRED_TRACING: one binary with and without tracing in one run.
conf_maitred_base() {
	local MAITRED_TRACING=${MAITRED_BASE_TRACING-${MAITRED_TRACING:-}}
	conf_maitred
	PROXY_CMD=("$MAITRED_BASE_BIN" --config "$T/maitred.yaml")
}

# available ROW: empty if the row can run, else the reason to skip it.
available() {
	case $1 in
	direct) ;;
	relay) [ -x "$RELAY_BIN" ] || echo "no $RELAY_BIN: run 'make -C build bench/proxy/tcp_relay'" ;;
	nghttpx) command -v nghttpx >/dev/null || echo "nghttpx not installed (apt-get install nghttp2-proxy)" ;;
	haproxy) command -v haproxy >/dev/null || echo "haproxy not installed (apt-get install haproxy)" ;;
	nginx) command -v nginx >/dev/null || echo "nginx not installed (apt-get install nginx)" ;;
	maitred | maitred_base)
		local bin=$MAITRED_BIN
		[ "$1" = maitred_base ] && bin=${MAITRED_BASE_BIN:-}
		if [ -z "$bin" ]; then
			echo "MAITRED_BASE_BIN is not set"
		elif [ ! -x "$bin" ]; then
			echo "no $bin"
		elif [ -z "$(timeout 5 "$bin" --help 2>&1)" ]; then
			# the build skeleton's stub prints nothing and exits 0
			echo "$bin is still the stub (data plane not built)"
		fi ;;
	*) echo "unknown row" ;;
	esac
}

# start_proxy ROW: writes ROW's config and starts it on the proxy core, with
# PROXY_WRAP (e.g. valgrind) in front when set.
PROXY_PID=
PROXY_WRAP=()
start_proxy() {
	local row=$1
	"conf_$row"
	taskset -c "$CPU_PROXY" ${PROXY_WRAP[@]+"${PROXY_WRAP[@]}"} "${PROXY_CMD[@]}" >"$T/$row.out" 2>&1 &
	PROXY_PID=$!
	PIDS+=($PROXY_PID)
	if ! wait_listen $PROXY_PORT ${LISTEN_TRIES:-100}; then
		log "$row did not listen on $PROXY_PORT; its output:"
		tail -5 "$T/$row.out" "$T/$row.err" 2>/dev/null >&2
		return 1
	fi
	sleep 0.2	# let forked workers come up
}
stop_proxy() {
	[ -n "$PROXY_PID" ] && stop_pid "$PROXY_PID"
	PROXY_PID=
	# nginx's master may leave before its worker: wait for the port.
	local i
	for i in $(seq 50); do
		ss -Hltn "sport = :$PROXY_PORT" | grep -q . || return 0
		sleep 0.1
	done
}

# ---- phases -----------------------------------------------------------------------

# h2load_run OUT ARGS...: runs h2load on the load core against the target.
# Also writes h2load's own CPU seconds (user + system, from a wrapper shell's
# `times`) to OUT.cpu.
h2load_run() {
	local out=$1; shift
	# bounded: a proxy that stops answering must not hang the bench
	timeout -k 5 $((DUR + WARM + 60)) taskset -c "$CPU_LOAD" bash -c '
		"$@"; rc=$?
		times >&3	# not in a pipe: a subshell would report 0
		exit $rc' h2load h2load "$@" -d "$T/body.bin" "${HDRS[@]}" "$TARGET_URI" \
		>"$out" 2>&1 3>"$out.times"
}
# h2load_cpu OUT: h2load's CPU seconds in that run.
h2load_cpu() {
	awk 'NR == 2 { gsub(/[ms]/, " "); print $1 * 60 + $2 + $3 * 60 + $4 }' "$1.times" 2>/dev/null
}
h2load_rps() { awk '/^finished in/ { gsub(",", "", $4); print $4 }' "$1"; }
h2load_bad() { awk '/^requests:/ { print $10 + $12 + $14 }' "$1"; }

# check_call: one call through the target must come back with grpc-status 0.
check_call() {
	timeout 10 nghttp -v -d "$T/body.bin" "${HDRS[@]}" "$TARGET_URI" \
		>"$T/check.out" 2>&1
	grep -aq 'grpc-status: 0' "$T/check.out"
}

