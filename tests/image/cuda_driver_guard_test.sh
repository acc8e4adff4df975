#!/usr/bin/env bash
# The CUDA image guards the driver it needs: NVIDIA_REQUIRE_CUDA names the CUDA release the image's
# packages are (ARG CUDA_VERSION), and docs/deploy-kubernetes.md states the matching driver.
#   cuda_driver_guard_test.sh Dockerfile.cuda docs/deploy-kubernetes.md
set -euo pipefail
dockerfile=$1 doc=$2
packages=$(sed -n 's/^ARG CUDA_VERSION=\([0-9]*\)-\([0-9]*\)$/\1.\2/p' "$dockerfile")
required=$(sed -n 's/.*NVIDIA_REQUIRE_CUDA="cuda>=\([0-9.]*\)".*/\1/p' "$dockerfile")
[ -n "$packages" ] || { echo "no ARG CUDA_VERSION=MAJOR-MINOR in $dockerfile"; exit 1; }
[ -n "$required" ] || { echo "no NVIDIA_REQUIRE_CUDA=\"cuda>=X.Y\" in $dockerfile"; exit 1; }
[ "$packages" = "$required" ] || { echo "the image installs CUDA $packages but NVIDIA_REQUIRE_CUDA asks for cuda>=$required"; exit 1; }
grep -q "CUDA $packages.*driver.*580\|driver 580" "$doc" || { echo "$doc does not state the driver CUDA $packages needs (580 or newer)"; exit 1; }
echo "Dockerfile.cuda installs CUDA $packages and requires cuda>=$required; the docs state driver 580+"
