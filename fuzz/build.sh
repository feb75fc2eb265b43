#!/bin/sh
# Build the libFuzzer targets with clang (ASan + UBSan) and run each one
# briefly. Not part of `make check`.
#   fuzz/build.sh            build and fuzz for 60 s
#   FUZZ_TIME=600 fuzz/build.sh
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_OUT:-$top/fuzz/out}
time=${FUZZ_TIME:-60}
mkdir -p "$out" "$out/corpus-pbwire"

# Library sources include "config.h": use the configured one, else an
# empty stand-in (pbwire needs nothing from it).
inc="$top"
if [ ! -f "$top/config.h" ]; then
	: >"$out/config.h"
	inc="$out"
fi

clang -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined \
	-I"$inc" -I"$top/lib" \
	"$top/fuzz/pbwire_fuzz.c" "$top/lib/pbwire/pbwire.c" \
	-o "$out/pbwire_fuzz"

# New inputs go to $out/corpus-pbwire; the committed seeds are read only.
"$out/pbwire_fuzz" -max_total_time="$time" -max_len=4096 \
	"$out/corpus-pbwire" "$top/fuzz/corpus/pbwire"
