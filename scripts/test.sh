#!/usr/bin/env bash
# Builds Baton and runs the whole test suite; all set-up included (safe to run again).
#  1. installs the Debian packages it needs (scripts/install-deps.sh) and the npm packages the
#     tokenizer tests compare against, the HTTP tests drive the router with and the Helm chart
#     tests validate rendered manifests with;
#  2. builds the release preset and runs every test with ctest (CUDA tests skip without a GPU);
#  3. builds the AddressSanitizer preset and runs the checkpoint-loader, KV-cache, sampling and KV
#     transport tests under it;
#  4. builds the libFuzzer harnesses (fuzz/, clang, ASan + UBSan) and runs each for 30 s on its seed
#     corpus, two at a time (scripts/fuzz.sh; docs/fuzzing.md).
# Prints ctest's summary for each, a line per fuzzer and a line per phase with its wall time; exits
# non-zero on any failure or finding.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${BATON_JOBS:-$(nproc)}
# One line per phase with its wall time, so a slow run shows where its time went.
phase_start=$SECONDS
phase() {
  echo "== test.sh: $1 done in $((SECONDS - phase_start)) s (total $SECONDS s)"
  phase_start=$SECONDS
}

bash scripts/install-deps.sh
# Hugging Face's own tokenizer and chat-template renderer, the references the tokenizer tests
# compare against (versions pinned by the lock file).
npm ci --prefix tests/tokenizer/reference --no-audit --no-fund --loglevel=error >/dev/null
# The official OpenAI client, which tests/http drives the router's HTTP API with.
npm ci --prefix tests/http/client --no-audit --no-fund --loglevel=error >/dev/null
# The Kubernetes OpenAPI models and a Dockerfile linter, which tests/helm checks the rendered Helm
# chart and deploy/docker's Dockerfiles with.
npm ci --prefix tests/helm/validate --no-audit --no-fund --loglevel=error >/dev/null
phase "dependencies"

cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
phase "release build"
ctest --preset release -j "$jobs"
phase "release tests"

cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs" --target engine_loader_test engine_kv_test engine_sample_test \
  kv_transfer_unit_test kv_transfer_ucx_test kv_transfer_grpc_test kv_transfer_link_test
phase "asan build"
ctest --preset asan -j "$jobs" -L 'loader|kv|sample'
phase "asan tests"

# Every harness (fuzz/*_fuzzer.cc), chat_template included now that the template renderer's
# findings are fixed (docs/fuzzing.md, "Findings").
bash scripts/fuzz.sh --seconds 30 --jobs "$jobs"
phase "fuzzers"
