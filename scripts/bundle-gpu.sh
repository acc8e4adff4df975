#!/usr/bin/env bash
# Builds what the GPU check needs and packs it into one self-contained bundle for the GPU machine
# (docs/cuda.md): that machine has the CUDA toolkit, the driver and Python with torch/transformers,
# but none of our Debian libraries (gRPC, Abseil, protobuf, UCX, OpenBLAS, ICU, spdlog...) and no
# network, and only ~64 MiB of working tree travels with each call.
#
#   scripts/bundle-gpu.sh [--build-dir build/gpu-bundle] [--out gpu-bundle] [--no-build] [--no-fixtures]
#
# Writes OUT/ (default gpu-bundle/ at the repository root, git-ignored; carry it to the device):
#   bundle.tar.xz   bin/  baton, dump_logits, llama_decode_bench, cuda_gemm_bench, spec_bench, and the
#                         CUDA test executables: every one labelled `cuda` for ctest, plus the engine tests that hold
#                         `*cuda*` instances (run with a gtest filter)
#                   lib/  every shared library those load, found with ldd, except the CUDA runtime
#                         libraries (libcuda, libcudart, libcublas*, libnccl: they must be the
#                         machine's own) and glibc's (libc, libm, libmvec, libpthread, libdl, librt,
#                         ld-linux); executables get RUNPATH $ORIGIN/../lib (then /usr/local/cuda's lib
#                         directories), libraries $ORIGIN, set with patchelf
#                   fixtures/  tools/fixtures/make_fixtures.py's checkpoints and references
#                         (made here with Debian's torch: the same bytes the CPU tests use; about
#                         5 MB of the bundle. --no-fixtures leaves them out, and the check then
#                         makes them on the GPU machine with its torch: about 10-20 s there)
#                   manifest.json  commit, build, executables with their gtest filters, libraries
#   manifest.json   the same manifest, readable without unpacking
# then checks that every bundled executable resolves every non-CUDA library inside the bundle
# with an empty environment (env -i ldd), and prints the bundle's size. The model family in
# models/baton-tiny-code travels with the working tree and is not copied.
#
# It builds in its own directory, build/gpu-bundle: the release preset with device code for Hopper
# only, as machine code without PTX (CMAKE_CUDA_ARCHITECTURES=90-real, the H100/H200 the check is
# for; override with BATON_BUNDLE_CUDA_ARCHS). Each executable embeds the CUDA kernels, so one
# architecture instead of two, and no PTX to compile at load time (it was about half of the
# embedded kernels' compressed bytes), keep the bundle inside its size budget. With ccache the C++ objects are shared with
# build/release.
#
# Must not: change build/release's configuration, bundle CUDA or glibc libraries, or write outside
# the build directory and OUT.
set -euo pipefail

repo=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
build=$repo/build/gpu-bundle
out=$repo/gpu-bundle
do_build=true
fixtures=true
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$(realpath -m "$2"); shift ;;
    --out) out=$(realpath -m "$2"); shift ;;
    --no-build) do_build=false ;;
    --no-fixtures) fixtures=false ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "bundle-gpu: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
for tool in patchelf xz ldd python3; do
  command -v $tool >/dev/null || { echo "bundle-gpu: $tool is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
cd "$repo"

# ------------------------------------------------------------------------------------- configure
# Its own directory is configured every time (quick when nothing changed), so that the
# architectures follow this script; another directory must be configured already.
if [ "$build" = "$repo/build/gpu-bundle" ]; then
  cmake --preset release -B "$build" -DCMAKE_CUDA_ARCHITECTURES="${BATON_BUNDLE_CUDA_ARCHS:-90-real}" >/dev/null
elif [ ! -f "$build/build.ninja" ]; then
  echo "bundle-gpu: $build is not configured" >&2; exit 1
fi
if ! grep -q "^build tests/kernels/kernels_cuda_test:" "$build/build.ninja"; then
  echo "bundle-gpu: $build has no CUDA targets (configured without nvcc? see docs/cuda.md)" >&2
  exit 1
fi

# Test executables labelled `cuda` (gtest_discover_tests writes one include file per executable,
# with its path and labels), and engine tests whose `*cuda*` instances run on the CUDA backend.
cuda_tests=$(grep -l 'TEST_PROPERTIES \[==\[LABELS;cuda;' "$build"/tests -r --include='*_include.cmake' 2>/dev/null |
  xargs -r sed -n 's/.*TEST_EXECUTABLE \[==\[\(.*\)\]==\].*/\1/p' | sort -u)
mixed_tests=""
for t in engine_model_test; do
  grep -q "^build [^:]*/$t:" "$build/build.ninja" && mixed_tests+=" $t"
done
programs="baton dump_logits llama_decode_bench cuda_gemm_bench spec_bench"
targets="$programs $(for t in $cuda_tests; do basename "$t"; done) $mixed_tests"

if $do_build; then
  echo "bundle-gpu: building $targets"
  cmake --build "$build" -j"$(nproc)" --target $targets
fi

# -------------------------------------------------------------------------------------- staging
stage=$(mktemp -d "${TMPDIR:-/tmp}/baton-gpu-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
exe_path() {  # target name -> built file
  local f
  f=$(sed -n "s|^build \([^:]*/$1\): [A-Z]*_EXECUTABLE_LINKER.*|\1|p" "$build/build.ninja" | head -n 1)
  [ -n "$f" ] && [ -x "$build/$f" ] || { echo "bundle-gpu: $1 is not built ($build/$f)" >&2; return 1; }
  echo "$build/$f"
}
for t in $targets; do
  cp "$(exe_path "$t")" "$stage/bin/$t"
  strip --strip-unneeded "$stage/bin/$t"
done

# The libraries they load, by soname, minus the CUDA runtime's and glibc's.
skip_lib='^(libcuda|libcudart|libcublas|libcublasLt|libnccl|libc|libm|libmvec|libpthread|libdl|librt|libresolv|ld-linux[^ ]*|linux-vdso)\.so'
for exe in "$stage"/bin/*; do
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1 " " $3}'
done | sort -u | while read -r soname path; do
  [[ $soname =~ $skip_lib ]] && continue
  cp -L "$path" "$stage/lib/$soname"
done
chmod u+w "$stage"/lib/*
patchelf --set-rpath '$ORIGIN/../lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/targets/x86_64-linux/lib' "$stage"/bin/*
for lib in "$stage"/lib/*; do patchelf --set-rpath '$ORIGIN' "$lib"; done

# ------------------------------------------------------------------------------------- fixtures
if $fixtures; then
  echo "bundle-gpu: making the fixtures"
  /usr/bin/python3 tools/fixtures/make_fixtures.py --out "$stage/fixtures" >/dev/null
fi

# ------------------------------------------------------------------------------------- manifest
commit=$(git rev-parse HEAD)
dirty=false
git diff --quiet HEAD -- . ':!gpu-bundle' 2>/dev/null || dirty=true
python3 - "$stage" "$commit" "$dirty" "$build" "$cuda_tests" "$mixed_tests" <<'EOF'
import datetime, json, os, re, sys
stage, commit, dirty, build, cuda_tests, mixed = sys.argv[1:]
cache = open(os.path.join(build, "CMakeCache.txt")).read()
def cached(key):
    m = re.search(rf"^{key}:[A-Z]+=(.*)$", cache, re.M)
    return m.group(1) if m else None
ninja = open(os.path.join(build, "build.ninja")).read()
archs = sorted(set(re.findall(r"--generate-code=arch=compute_\w+,code=\[([\w,]+)\]", ninja)))
tests = [{"name": os.path.basename(t)} for t in cuda_tests.split()]
tests += [{"name": t, "filter": "*cuda*:*Cuda*:*CUDA*"} for t in mixed.split()]
manifest = {"commit": commit, "dirty": dirty == "true",
            "built": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "build_type": cached("CMAKE_BUILD_TYPE"), "cuda_code": archs,
            "programs": sorted(os.listdir(os.path.join(stage, "bin"))), "tests": tests,
            "libraries": sorted(os.listdir(os.path.join(stage, "lib"))),
            "fixtures": (json.load(open(os.path.join(stage, "fixtures", "manifest.json")))["fixtures"]
                         if os.path.isdir(os.path.join(stage, "fixtures")) else None)}
json.dump(manifest, open(os.path.join(stage, "manifest.json"), "w"), indent=1)
EOF

# ----------------------------------------------------------------------------------------- check
# With an empty environment, every library must resolve, and every non-CUDA one from the bundle.
bad=0
for exe in "$stage"/bin/*; do
  while read -r soname arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      [[ $soname =~ $skip_lib ]] && continue  # a CUDA library the GPU machine provides
      echo "bundle-gpu: $(basename "$exe"): $soname not found" >&2; bad=1
    elif [[ ! $soname =~ $skip_lib ]] && [[ $(realpath -m "$path") != "$stage/lib/"* ]]; then
      echo "bundle-gpu: $(basename "$exe"): $soname resolves outside the bundle ($path)" >&2; bad=1
    fi
  done < <(env -i /usr/bin/ldd "$exe")
done
[ $bad -eq 0 ] || { echo "bundle-gpu: the bundle is not self-contained" >&2; exit 1; }

# ---------------------------------------------------------------------------------------- output
rm -rf "$out" && mkdir -p "$out"
cp "$stage/manifest.json" "$out/manifest.json"
tar -C "$stage" -cf - . | xz -T0 -9 > "$out/bundle.tar.xz"
raw=$(du -sb "$stage" | cut -f1)
packed=$(du -cb "$out"/* | tail -n 1 | cut -f1)
echo "bundle-gpu: $(ls "$stage/bin" | wc -l) executables ($(ls "$stage/bin" | tr '\n' ' '))"
echo "bundle-gpu: $(ls "$stage/lib" | wc -l) libraries, fixtures: $($fixtures && echo "$(du -sh "$stage/fixtures" | cut -f1)" || echo "none (the check makes them)")"
awk -v o="$out" -v p="$packed" -v r="$raw" -v c="${commit:0:12}" -v d="$($dirty && echo ' + uncommitted changes')" \
  'BEGIN { printf "bundle-gpu: %s: %.1f MB (%.1f MB unpacked), commit %s%s\n", o, p / 1e6, r / 1e6, c, d }'
[ "$packed" -lt 30000000 ] || echo "bundle-gpu: WARNING: over 30 MB; the working tree plus the bundle must stay under 64 MiB" >&2
