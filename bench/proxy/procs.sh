# shellcheck shell=bash
# bench/proxy/procs.sh: stopping the processes a bench script started.
# Sourced (by common.sh, and by splice_relay.sh, which needs none of
# common.sh's set-up); defines functions only.

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
