#!/bin/sh
# The tree's layering, checked on every `make check`: which folder may
# include which. A rule broken by a new #include fails here with the line
# that broke it, before a reviewer has to find it.
#
#   lib/        includes nothing of sidecar/ (it is what is testable
#               without a socket, a thread or the daemon)
#   sidecar/io/ includes nothing of sidecar/call/ (io/ reaches a call only
#               through its two ports: the upstream stream ops it is
#               handed, io/stream-t.h, and the worker's downstream port,
#               io/downstream-t.h)
#
# EXCEPTIONS lists the includes that break a rule today, one "file:header"
# a line: none any more. It may only shrink: an exception that no longer
# exists fails too, so that the list always says exactly what is left to
# untangle.
set -u
src=${MAITRED_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 1

EXCEPTIONS=''

# Every "file:header" that breaks a rule, sorted.
found=$( {
	grep -rHo '^#include "sidecar/[^"]*"' lib --include='*.c' --include='*.h'
	grep -rHo '^#include "sidecar/call/[^"]*"' sidecar/io --include='*.c' --include='*.h'
} | sed 's/:#include "\(.*\)"$/:\1/' | LC_ALL=C sort)

tmp=$(mktemp) || exit 1
printf '%s\n' "$EXCEPTIONS" | LC_ALL=C sort >"$tmp"
new=$(printf '%s\n' "$found" | LC_ALL=C comm -23 - "$tmp")
gone=$(printf '%s\n' "$found" | LC_ALL=C comm -13 - "$tmp")
n=$(grep -c . "$tmp")
rm -f "$tmp"
fail=0
if [ -n "$new" ]; then
	echo "layers: includes that break the layering (lib/ -> sidecar/, io/ -> call/):"
	printf '  %s\n' $new
	fail=1
fi
if [ -n "$gone" ]; then
	echo "layers: exceptions listed in tests/layers.sh that no longer exist; remove them:"
	printf '  %s\n' $gone
	fail=1
fi
[ $fail = 0 ] && echo "layers: ok ($n known exceptions left)"
exit $fail
