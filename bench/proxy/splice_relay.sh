#!/usr/bin/env bash
# bench/proxy/splice_relay.sh: what splice(2) would save a relay of HTTP/2
# DATA payloads on loopback TCP, against read/write copies. Drives
# splice_relay (built from local.mk): a source writes frames (9-byte header,
# FRAME payload bytes), a relay moves them to a sink by each MODE, the sink
# checks every frame. Relay on cpu1, source and sink on cpu0 (as bulk.sh).
# For each run: the relay's MB/s, its CPU per MiB (ns from
# CLOCK_PROCESS_CPUTIME_ID, as /proc/PID/schedstat; user and sys from
# getrusage), its syscalls per MiB, and the 1-minute load average when the
# run started; and the CPU per MiB of relay, source and sink together (the
# loopback TCP work moves between their contexts). Rounds interleave every mode and frame size; medians at the
# end. See bench/proxy/README.md "Splice on loopback".
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

MODES="copy copy2 splice:65536 splice:1048576 splicebatch:1048576 splicerun:1048576"
FRAMES_SIZES="16384 65536"
BYTES=$((4 << 30))
REPS=3
CPU_RELAY=1
CPU_LOAD=0
KEEP=0
RELAY_BIN=${RELAY_BIN:-$top/build/bench/proxy/splice_relay}

usage() {
	cat <<EOF
usage: $0 [options]
  -m LIST        modes, comma separated, MODE or MODE:PIPE_BYTES (default
                 "${MODES// /,}"); modes: copy copy2 splice splicepipe splicebatch
                 splicerun
  -f LIST        frame payload sizes (default "${FRAMES_SIZES// /,}")
  -b BYTES       payload bytes per run (default $BYTES)
  -R N           rounds, every mode and size in each (default $REPS); medians
  -C RELAY,LOAD  cores (default $CPU_RELAY,$CPU_LOAD)
  -k             keep the temp dir
Environment: RELAY_BIN; PROBE, a command run on the relay while it relays
(\$PID and \$PROBE_OUT set; it must end when the relay does, as perf stat -p
and perf record -p do; stopped by its PID if it has not 10 s later).
EOF
}

while getopts "m:f:b:R:C:kh" opt; do
	case $opt in
	m) MODES=${OPTARG//,/ } ;;
	f) FRAMES_SIZES=${OPTARG//,/ } ;;
	b) BYTES=$OPTARG ;;
	R) REPS=$OPTARG ;;
	C) CPU_RELAY=${OPTARG%,*}; CPU_LOAD=${OPTARG#*,} ;;
	k) KEEP=1 ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done

[ -x "$RELAY_BIN" ] || { echo "missing $RELAY_BIN: make -C build bench/proxy/splice_relay" >&2; exit 2; }
command -v taskset >/dev/null || { echo "missing taskset (util-linux)" >&2; exit 2; }

T=$(mktemp -d /tmp/maitred-splice.XXXXXX)
# PIDS, cleanup, log, stop_pid (procs.sh).
# shellcheck source=procs.sh
. "$here/procs.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_file FILE PID: up to 10 s for FILE to exist while PID lives.
wait_file() {
	local i
	for i in $(seq 100); do
		[ -s "$1" ] && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# wait_pid PID SECONDS: wait for a child, stopping it after SECONDS; its
# exit status.
wait_pid() {
	local p=$1 i
	for i in $(seq $(($2 * 10))); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$p" 2>/dev/null && { log "pid $p still running after $2 s: stopped"; stop_pid "$p"; return 1; }
	wait "$p"
}

# run_one MODE PIPE FRAME: prints "MBps cpu_ms_per_MiB user_ms sys_ms
# syscalls_per_MiB all3_cpu_ms_per_MiB load1", or "-" fields on failure
# (all3: relay, source and sink together, whole lives).
run_one() {
	local mode=$1 pipe=$2 frame=$3 d n sink relay src probe="" rc=0 load
	d=$(mktemp -d "$T/run.XXXXXX")
	n=$((BYTES / frame))
	load=$(cut -d' ' -f1 /proc/loadavg)
	taskset -c "$CPU_LOAD" "$RELAY_BIN" sink -o "$d/sink.port" -f "$frame" -n "$n" >"$d/sink.out" 2>"$d/sink.err" &
	sink=$!; PIDS+=("$sink")
	wait_file "$d/sink.port" "$sink" || { log "sink did not start: $(cat "$d/sink.err")"; echo "- - - - - - $load"; return 0; }
	taskset -c "$CPU_RELAY" "$RELAY_BIN" relay -m "$mode" -z "$pipe" -o "$d/relay.port" -p "$(cat "$d/sink.port")" \
		>"$d/relay.out" 2>"$d/relay.err" &
	relay=$!; PIDS+=("$relay")
	wait_file "$d/relay.port" "$relay" || { log "relay did not start: $(cat "$d/relay.err")"; stop_pid "$sink"; echo "- - - - - - $load"; return 0; }
	if [ -n "${PROBE:-}" ]; then
		PID=$relay PROBE_OUT=$T/probe.$mode.$pipe.$frame.$RANDOM bash -c "$PROBE" </dev/null >/dev/null 2>&1 &
		probe=$!; PIDS+=("$probe")
		sleep 0.5	# perf attaches before the first byte
	fi
	taskset -c "$CPU_LOAD" "$RELAY_BIN" source -p "$(cat "$d/relay.port")" -f "$frame" -n "$n" >"$d/source.out" 2>"$d/source.err" &
	src=$!; PIDS+=("$src")
	wait_pid "$src" 300 || rc=1
	wait_pid "$relay" 60 || rc=1
	wait_pid "$sink" 60 || rc=1
	[ -n "$probe" ] && { wait_pid "$probe" 10 || true; }
	if [ $rc != 0 ]; then
		log "run $mode pipe=$pipe frame=$frame failed: $(cat "$d"/*.err)"
		echo "- - - - - - $load"
		return 0
	fi
	# relay mode=M pipe=P bytes=B seconds=S cpu_ns=N user_us=U sys_us=Y syscalls=C
	# source frames=F cpu_ns=N; sink frames=F bytes=B cpu_ns=N
	cat "$d/relay.out" "$d/source.out" "$d/sink.out" | awk -v load="$load" '
		{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[$1 "." kv[1]] = kv[2] } }
		END {
			mib = v["relay.bytes"] / 1048576
			printf "%.0f %.4f %.4f %.4f %.2f %.4f %s\n", v["relay.bytes"] / v["relay.seconds"] / 1e6,
				v["relay.cpu_ns"] / 1e6 / mib, v["relay.user_us"] / 1e3 / mib, v["relay.sys_us"] / 1e3 / mib,
				v["relay.syscalls"] / mib,
				(v["relay.cpu_ns"] + v["source.cpu_ns"] + v["sink.cpu_ns"]) / 1e6 / mib, load }' 
	[ "$KEEP" = 1 ] || rm -rf "$d"
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0 || a[1] == "-") print "-"; else print a[int((NR + 1) / 2)] }'; }

declare -A R
log "$(date -u +%FT%TZ) $(nproc) CPUs, kernel $(uname -r); relay on cpu$CPU_RELAY, source and sink on cpu$CPU_LOAD;" \
	"$BYTES payload bytes a run, $REPS rounds"
echo "round mode pipe frame MBps cpu_ms/MiB user_ms/MiB sys_ms/MiB syscalls/MiB all3_ms/MiB load1"
for round in $(seq "$REPS"); do
	for frame in $FRAMES_SIZES; do
		for m in $MODES; do
			mode=${m%%:*} pipe=65536 shown=-
			[ "$m" != "$mode" ] && pipe=${m#*:}
			case $mode in copy|copy2) ;; *) shown=$pipe ;; esac
			# In this shell, not a $(...) one: PIDS must be this
			# shell's for the EXIT trap to stop them.
			run_one "$mode" "$pipe" "$frame" >"$T/line"
			PIDS=()	# every one of them waited for or stopped
			line=$(cat "$T/line")
			echo "$round $mode $shown $frame $line"
			R[$frame.$m]+="$line"$'\n'
		done
	done
done

echo
echo "medians of $REPS rounds"
echo "mode pipe frame MBps cpu_ms/MiB user_ms/MiB sys_ms/MiB syscalls/MiB all3_ms/MiB load1(min-max)"
for frame in $FRAMES_SIZES; do
	for m in $MODES; do
		cols=()
		for i in 1 2 3 4 5 6; do
			cols+=("$(printf '%s' "${R[$frame.$m]}" | awk -v i=$i 'NF { print $i }' | median)")
		done
		loads=$(printf '%s' "${R[$frame.$m]}" | awk 'NF { print $7 }' | sort -g | awk 'NR == 1 { a = $1 } { b = $1 } END { print a "-" b }')
		mode=${m%%:*} shown=-
		case $mode in copy|copy2) ;; *) shown=65536; [ "$m" != "$mode" ] && shown=${m#*:} ;; esac
		echo "$mode $shown $frame ${cols[*]} $loads"
	done
done
