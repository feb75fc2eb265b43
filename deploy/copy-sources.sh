#!/bin/bash
# Copy this checkout's sources to DIR (an empty directory) for a second build
# beside the in-tree one: git's tracked files and untracked ones not ignored,
# as they are in the working tree; without git (or a checkout git refuses:
# another owner), the whole tree, then `make distclean` in the copy. Used by
# deploy/tsan.sh and deploy/valgrind.sh (a sanitizer build cannot share the
# tree with another).
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
  echo "copying the tree to $dir (no git file list), make distclean there"
  cp -a "./." "$dir"
  if [ -f "$dir/Makefile" ]; then make -C "$dir" distclean >/dev/null; fi
fi
