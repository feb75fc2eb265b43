#!/bin/bash
# Copy this checkout's sources to DIR (an empty directory) for a build of
# another flavour beside the others: git's tracked files and untracked ones
# not ignored, as they are in the working tree (so no build output: the
# build*/ directories and an in-place build's files are ignored); without
# git (or a checkout git refuses: another owner), the whole tree less the
# top-level build*/ directories, then `make distclean` in the copy when the
# tree was configured in place. Used by deploy/tsan.sh and deploy/valgrind.sh,
# which build the copy in a VPATH directory beside it.
#
#   deploy/copy-sources.sh DIR
set -eu

dir=$1
cd "$(dirname "$0")/.."
if git ls-files >/dev/null 2>&1; then
  echo "copying the sources (git ls-files) to $dir"
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 cp -P --parents -t "$dir"
else
  echo "copying the tree to $dir (no git file list; not build*/), make distclean there"
  tar -c --exclude='./build*' --exclude=./fuzz/out -f - . | tar -x -C "$dir" -f -
  if [ -f "$dir/Makefile" ]; then make -C "$dir" distclean >/dev/null; fi
fi
