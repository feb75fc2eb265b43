#!/bin/bash
# Make DIR (relative to the top of the checkout, e.g. build or build-asan) a
# VPATH build directory configured with exactly the given configure
# arguments, whatever was built before in this checkout. Used by
# deploy/demo.sh (build/) and deploy/run-tests.sh (build-asan/); it does not
# run make.
#
#   deploy/build-dir.sh DIR [CONFIGURE-ARG...]
#
# - The source tree must not be configured itself (autoconf refuses a VPATH
#   build next to an in-tree config.status, and make would find the in-tree
#   objects through VPATH): when it is (`./configure && make` by hand), it
#   says so and runs `make distclean` there, or removes what an in-tree
#   build leaves if that fails.
# - `configure` is made (autoreconf -fi) when missing or older than
#   configure.ac.
# - DIR is configured afresh (emptied first: compiler flags are no make
#   dependency, so objects built with other flags must not survive) when it
#   has no complete configure from this script, when the arguments (and the
#   CC, CFLAGS, CPPFLAGS, LDFLAGS, LIBS of the environment) differ from the
#   last ones, when `config.status --config` no longer says what it said
#   then (configured again by hand), or when the checkout moved. Otherwise
#   it is left as it is and make brings it up to date.
set -eu

cd "$(dirname "$0")/.."
top=$PWD
[ $# -ge 1 ] || { echo "usage: deploy/build-dir.sh DIR [CONFIGURE-ARG...]" >&2; exit 2; }
dir=$1
shift
case $dir in
'' | . | ./ | /* | *..*) echo "deploy/build-dir.sh: DIR must be a folder under the checkout: $dir" >&2; exit 2 ;;
esac
dir=${dir%/}

say() { printf '==> %s\n' "$*"; }

# --- the source tree must not be configured in place ---------------------
# What an in-tree build leaves (configure's and make's outputs): removed
# when `make distclean` cannot run (no Makefile, or it fails).
clean_in_tree() {
	rm -f config.status config.h config.log stamp-h1 Makefile test-suite.log
	rm -rf gen docs/config-reference.md docs/config.descriptor.pb
	find lib sidecar tests bench \( -name '*.o' -o -name '*.a' -o -name '*.log' -o -name '*.trs' \
		-o -name .dirstamp \) -type f -exec rm -f {} +
	find lib sidecar tests bench -name .deps -type d -prune -exec rm -rf {} +
	find sidecar -name admin_page.c -type f -exec rm -f {} +
	# Programs: every ELF file under the folders make builds into.
	find sidecar tests/unit bench -type f -perm -u+x | while read -r f; do
		if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ]; then rm -f "$f"; fi
	done
}

if [ -f config.status ] || [ -f Makefile ]; then
	say "the source tree is configured in place (./configure was run in $top):"
	say "a VPATH build in $dir/ needs it clean, so: make distclean there"
	if [ -f Makefile ] && make distclean >/dev/null 2>&1 && [ ! -f config.status ]; then
		:
	else
		say "make distclean failed or could not run: removing the in-tree build's files"
		clean_in_tree
	fi
	rm -f Makefile config.status
fi

if [ ! -x configure ] || [ ! -f Makefile.in ] || [ configure.ac -nt configure ]; then
	say "autoreconf -fi"
	autoreconf -fi
fi

# --- DIR: configured with exactly these arguments ------------------------
want=("$@")
for v in CC CFLAGS CPPFLAGS LDFLAGS LIBS; do
	have=0
	for a in "$@"; do case $a in "$v="*) have=1 ;; esac; done
	if [ "$have" = 0 ] && [ -n "${!v:-}" ]; then want+=("$v=${!v}"); fi
done
stamp=$dir/.maitred-configure
# The stamp: the checkout, the arguments (one a line), then what
# config.status --config said right after configure.
want_text=$(printf 'top %s\n' "$top"; printf 'arg %s\n' ${want[@]+"${want[@]}"})

reason=""
if [ ! -f "$stamp" ] || [ ! -f "$dir/config.status" ] || [ ! -f "$dir/Makefile" ]; then
	[ -d "$dir" ] && reason="$dir/ has no complete configure (a first build, or an interrupted one)"
elif [ "$(grep -v '^status ' "$stamp")" != "$want_text" ]; then
	reason="$dir/ was configured with other arguments: $(grep '^arg ' "$stamp" | cut -c5- | tr '\n' ' ')"
elif [ "$(grep '^status ' "$stamp" | cut -c8-)" != "$(cd "$dir" && ./config.status --config)" ]; then
	reason="$dir/ was configured again by hand: $(cd "$dir" && ./config.status --config)"
else
	echo "$dir/: configured with: ${want[*]:-(no arguments)}"
	exit 0
fi

[ -n "$reason" ] && say "$reason; configuring it afresh"
rm -rf "$dir"
mkdir -p "$dir"
say "configure in $dir/: ${want[*]:-(no arguments)}"
if ! (cd "$dir" && "$top/configure" ${want[@]+"${want[@]}"} >configure.log 2>&1); then
	tail -n 40 "$dir/configure.log"
	say "configure failed (log: $dir/configure.log)"
	exit 1
fi
tail -n 2 "$dir/configure.log"
{
	printf '%s\n' "$want_text"
	printf 'status %s\n' "$(cd "$dir" && ./config.status --config)"
} >"$stamp"
