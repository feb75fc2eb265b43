#!/bin/sh
# Build maitred's libFuzzer targets with clang (ASan + UBSan) and, unless
# FUZZ_TIME=0, run each one for FUZZ_TIME seconds (default 60), failing on
# the first crash, leak or sanitizer report.
#
#   fuzz/build.sh                       build + run every target 60 s
#   FUZZ_TIME=600 fuzz/build.sh config  one target, longer
#   FUZZ_TIME=0 fuzz/build.sh           build only
#   FUZZ_JOBS=1 fuzz/build.sh           one compiler / fuzzer at a time
#
# Needs a configured and built tree (config.h and the generated sources:
# gen/ protobuf-c, sidecar/ops/admin_page.c): MAITRED_BUILDDIR names it; by
# default the source tree when it is configured in place, else build-asan/
# (deploy/run-tests.sh builds it), else build/ (deploy/demo.sh). The other
# sources are read from the source tree; a generated one from the build
# tree. FUZZ_JOBS (default: the CPU count) compilers, then fuzzers, run at
# once: each target still gets its full FUZZ_TIME, in a fraction of the
# wall time, and its output goes to $FUZZ_OUT/log-<target>, printed when
# it ends. Objects and binaries go to $FUZZ_OUT (default
# $MAITRED_BUILDDIR/fuzz/out); new corpus entries go to
# $FUZZ_OUT/corpus-<target>, the committed seeds under fuzz/corpus/<target>
# are only read.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${MAITRED_BUILDDIR:-}
if [ -z "$build" ]; then
	for d in "$top" "$top/build-asan" "$top/build"; do
		if [ -f "$d/config.h" ]; then build=$d; break; fi
	done
fi
build=$(cd "${build:-$top}" && pwd)
out=${FUZZ_OUT:-$build/fuzz/out}
time=${FUZZ_TIME:-60}
cc=${FUZZ_CC:-clang}
targets=${*:-"pbwire grpc_scan grpc_timeout config record xds regex downstream"}
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}

if [ ! -f "$build/config.h" ] || [ ! -d "$build/gen" ]; then
	echo "fuzz/build.sh: configure and build a tree first (config.h, gen/ in $build; MAITRED_BUILDDIR names it)" >&2
	exit 2
fi
echo "fuzz/build.sh: sources $top, build tree $build, output $out"

pkgs="libnghttp2 libevent_core libevent_pthreads libevent_extra libevent_openssl openssl libprotobuf-c yaml-0.1"
# shellcheck disable=SC2086
pkg_cflags=$(pkg-config --cflags $pkgs)
# shellcheck disable=SC2086
pkg_libs=$(pkg-config --libs $pkgs)
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
cflags="-g -O1 -Werror=implicit-function-declaration -std=gnu11 -pthread $san -fsanitize=fuzzer-no-link -I$build -I$top -I$top/lib -I$build/gen $pkg_cflags"

mkdir -p "$out/obj"

# Every source is compiled afresh (no header dependency tracking here, and
# a stale object would make false findings); main.c's main() is renamed so
# libFuzzer's can run.
compile() { # src obj [extra flags]
	src=$1 obj=$2
	shift 2
	mkdir -p "$(dirname "$obj")"
	# shellcheck disable=SC2086
	$cc $cflags "$@" -c "$src" -o "$obj"
}

# Background jobs, at most $jobs at once; `reap` waits for all of them and
# fails if any did (`wait PID` gives each one's status).
pids=""
running=0
failed=0
spawn() { # command...
	if [ "$running" -ge "$jobs" ]; then
		reap
	fi
	"$@" &
	pids="$pids $!"
	running=$((running + 1))
}
reap() {
	for p in $pids; do
		wait "$p" || failed=1
	done
	pids=""
	running=0
	if [ "$failed" != 0 ]; then
		echo "fuzz/build.sh: a job failed (above)" >&2
		exit 1
	fi
}

# where REL: the build tree's copy of a source (generated there), else the
# source tree's.
where() {
	if [ -f "$build/$1" ]; then echo "$build/$1"; else echo "$top/$1"; fi
}
# sources DIR...: the .c files under DIR in the source and the build tree,
# relative, once each (an in-place build has both in one).
sources() {
	for d in "$@"; do
		(cd "$top" && [ -d "$d" ] && find "$d" -name '*.c') || true
		(cd "$build" && [ -d "$d" ] && find "$d" -name '*.c') || true
	done | sort -u
}

lib_objs=""
for src in $(sources lib gen); do
	obj="$out/obj/${src%.c}.o"
	spawn compile "$(where "$src")" "$obj"
	lib_objs="$lib_objs $obj"
done
reap
rm -f "$out/libmaitred-fuzz.a"
# shellcheck disable=SC2086
ar rcs "$out/libmaitred-fuzz.a" $lib_objs

side_objs=""
for src in $(sources sidecar); do
	obj="$out/obj/${src%.c}.o"
	case "$src" in
	sidecar/main.c) spawn compile "$(where "$src")" "$obj" -Dmain=mtd_fuzz_unused_main ;;
	*) spawn compile "$(where "$src")" "$obj" ;;
	esac
	side_objs="$side_objs $obj"
done
reap

link() { # target [extra objects and flags]
	t=$1
	shift
	compile "$top/fuzz/${t}_fuzz.c" "$out/obj/fuzz/${t}_fuzz.o"
	# shellcheck disable=SC2086
	$cc -g $san -fsanitize=fuzzer -pthread "$out/obj/fuzz/${t}_fuzz.o" "$@" \
		"$out/libmaitred-fuzz.a" $pkg_libs -lm -o "$out/${t}_fuzz"
}

for t in $targets; do
	case "$t" in
	downstream)
		# The upstream side is a socketpair the input scripts (see the
		# target's header); connect() is wrapped to hand it over.
		# shellcheck disable=SC2086
		spawn link downstream $side_objs -Wl,--wrap=connect ;;
	config)
		# Host names in fuzzed configs must not reach the network.
		spawn link config -Wl,--wrap=getaddrinfo ;;
	*) spawn link "$t" ;;
	esac
done
reap

[ "$time" = 0 ] && exit 0

fuzz() { # target: run it, output to log-<target>, its exit status to rc-<target>
	t=$1
	seeds="$top/fuzz/corpus/$t"
	[ -d "$seeds" ] || seeds=""
	dict=""
	[ -f "$top/fuzz/$t.dict" ] && dict="-dict=$top/fuzz/$t.dict"
	rc=0
	# shellcheck disable=SC2086
	"$out/${t}_fuzz" -max_total_time="$time" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$out/crash-$t-" $dict \
		"$out/corpus-$t" $seeds >"$out/log-$t" 2>&1 || rc=$?
	echo "$rc" >"$out/rc-$t"
}

for t in $targets; do
	mkdir -p "$out/corpus-$t"
	rm -f "$out/rc-$t"
	echo "==> fuzzing $t for ${time}s"
	spawn fuzz "$t"
done
reap
# One report after another: a target's whole log when it failed, else its
# final stats.
bad=""
for t in $targets; do
	rc=$(cat "$out/rc-$t" 2>/dev/null || echo missing)
	echo "==> $t: exit $rc"
	if [ "$rc" = 0 ]; then
		grep '^stat::' "$out/log-$t" || tail -3 "$out/log-$t"
	else
		cat "$out/log-$t"
		bad="$bad $t"
	fi
done
if [ -n "$bad" ]; then
	echo "fuzz/build.sh: failed:$bad (reproducers: $out/crash-*)" >&2
	exit 1
fi
