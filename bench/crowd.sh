#!/usr/bin/env bash
# The router under a crowd (bench/crowd/crowd.py): --streams concurrent streaming requests (half
# gRPC, half HTTP) for --rounds rounds, then --idle idle keep-alive HTTP connections and --slow
# slow-header clients while new requests are timed; reports the router's peak threads, RSS growth
# and latencies as JSON, and exits 0 only when every target holds (< 64 threads, < 10 % RSS growth,
# < 1 s to answer).
#
#   bash bench/crowd.sh [--streams 1000] [--rounds 2] [--idle 10000] [--slow 64] [--out DIR] ...
#
# Needs a release build (cmake --build --preset release) and Debian's python3 with python3-grpcio
# and python3-protobuf (scripts/install-deps.sh installs them).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec /usr/bin/python3 "$repo/bench/crowd/crowd.py" "$@"
