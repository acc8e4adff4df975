#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries the given executables load, one per
# line, sorted: what a runtime image must install to run binaries built on this system
# (deploy/docker's images use it, so their package lists follow the build instead of a hand list).
#   scripts/runtime-packages.sh [--skip-dir DIR]... build/release/router/baton-router ...
# --skip-dir DIR: libraries whose path starts with DIR (/usr/local/cuda also matches
# /usr/local/cuda-13.0) come from elsewhere, such as a CUDA toolkit installed outside Debian's
# packages; they are left out of the list instead of failing it.
set -euo pipefail
skip_dirs=()
while [ "${1:-}" = --skip-dir ]; do skip_dirs+=("$2"); shift 2; done
[ $# -gt 0 ] || { echo "usage: $0 [--skip-dir DIR]... EXECUTABLE..." >&2; exit 2; }

# The package owning a file. Debian 12 merged /usr, so a library ldd finds under /lib may be
# registered under /usr/lib (or the other way round): try both spellings and the resolved path.
owner() {
  local f=$1 alt
  case $f in /usr/*) alt=${f#/usr} ;; *) alt=/usr$f ;; esac
  for p in "$f" "$alt" "$(readlink -f "$f")"; do
    if out=$(dpkg-query -S "$p" 2>/dev/null); then
      echo "${out%%:*}" | tr ',' '\n' | sed 's/^ *//; s/:.*//'
      return 0
    fi
  done
  echo "runtime-packages: no Debian package holds $f" >&2
  return 1
}

libs=$(for exe in "$@"; do
  ldd "$exe" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}'
done | sort -u)
status=0
packages=()
for lib in $libs; do
  for d in "${skip_dirs[@]}"; do case $lib in "$d"*) continue 2 ;; esac; done
  if owned=$(owner "$lib"); then packages+=($owned); else status=1; fi
done
printf '%s\n' "${packages[@]}" | sort -u
exit $status
