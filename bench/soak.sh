#!/usr/bin/env bash
# The chaos soak (bench/soak/soak.py): a local 2 P + 2 D cluster under steady load while nodes are
# killed, frozen and restarted; reports hung requests, leaked KV blocks, greedy mismatches and RSS
# growth, and exits 0 only when the first three are 0 and RSS grew by at most 10%.
#
#   bash bench/soak.sh [--minutes 30] [--bin-dir build/release] [--concurrency 6] [--out DIR] ...
#
# Needs a release build (cmake --build --preset release) and Debian's python3 with python3-grpcio
# and python3-protobuf (scripts/install-deps.sh installs them).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec /usr/bin/python3 "$repo/bench/soak/soak.py" "$@"
