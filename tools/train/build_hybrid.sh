#!/bin/sh
# Rebuild the bundled hybrid model (models/baton-tiny-hybrid: a Qwen3-Next-layout target with its
# MTP layer) from scratch; see models/README.md.
#   tools/train/build_hybrid.sh                          # corpus, target, mtp, check, card
#   tools/train/build_hybrid.sh --stages check,card      # rerun some stages
# Extra flags go to build_hybrid.py (--preset, --out, --work, --stages, --threads). Runs at the
# lowest CPU priority with Debian's python3 (torch, numpy), the interpreter the scripts are written for.
set -eu
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
# Keep freed memory in the heap instead of returning it to the kernel on every step (fewer page faults).
export MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-1000000000000}"
export MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_:-1000000000000}"
export MALLOC_TOP_PAD_="${MALLOC_TOP_PAD_:-1000000000}"
exec nice -n 19 /usr/bin/python3 tools/train/build_hybrid.py "$@"
