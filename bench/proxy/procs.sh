# shellcheck shell=bash
# bench/proxy/procs.sh: stopping the processes a bench script started.
# Sourced (by common.sh, and by splice_relay.sh, which needs none of
# common.sh's set-up) once the script's temp dir T is made: PIDS (the
# processes the script started, to which it appends), cleanup (stops them,
# removes T unless KEEP=1: the script traps EXIT with it) and log.

PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do stop_pid "$p"; done
	if [ "$KEEP" = 1 ]; then echo "kept $T" >&2; else rm -rf "$T"; fi
}

log() { echo "# $*" >&2; }

# stop_pid PID: SIGTERM, up to 5 s, then SIGKILL. Only PIDs we started.
stop_pid() {
	local p=$1
	kill -0 "$p" 2>/dev/null || return 0
	kill -TERM "$p" 2>/dev/null
	for _ in $(seq 50); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	return 0
}
