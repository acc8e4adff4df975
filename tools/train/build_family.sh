#!/bin/sh
# Rebuild the bundled model family (models/baton-tiny-code) from scratch; see models/README.md.
#   tools/train/build_family.sh                   # the shipped CPU family, about 2 h on 2 cores
#   tools/train/build_family.sh --device cuda     # a larger family on a GPU (build/family/baton-small-code)
# Extra flags go to build_family.py (--preset, --out, --work, --stages, --threads). Runs at the
# lowest CPU priority with Debian's python3 (torch, numpy), the interpreter the scripts are written for.
set -eu
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
exec nice -n 19 /usr/bin/python3 tools/train/build_family.py "$@"
