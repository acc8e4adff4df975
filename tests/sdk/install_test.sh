#!/usr/bin/env bash
# Installs the C++ SDK from the build tree into a temporary prefix (cmake --install, component
# baton_client) and builds and runs tests/sdk/consumer against it with find_package(BatonClient):
# the installed package is complete and usable on its own.
# usage: install_test.sh CMAKE BUILD_DIR CONSUMER_SOURCE_DIR
set -euo pipefail
cmake=$1 build=$2 consumer=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cmake" --install "$build" --component baton_client --prefix "$tmp/prefix" >/dev/null
echo "installed: $(cd "$tmp/prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"
# Nothing but the SDK's own headers is installed: users need no gRPC, protobuf or abseil headers.
if grep -rlE '#include "(grpc|google|absl)' "$tmp/prefix/include"; then
  echo "install_test: an installed header includes gRPC, protobuf or abseil" >&2
  exit 1
fi
"$cmake" -S "$consumer" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
"$cmake" --build "$tmp/build" >/dev/null
"$tmp/build/consumer"
