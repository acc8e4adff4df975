#!/usr/bin/env bash
# Checks the images' stages without Docker (not available where Baton is developed), in Debian 12
# minbase roots made with debootstrap, the same base as the Dockerfiles' stages:
#  - build stage (with --build-stage): copies the repository's tracked files into a fresh root and
#    runs Dockerfile.cpu's build steps there: scripts/install-deps.sh --build-only, configure with
#    tests and benchmarks off, build the five binaries, `cmake --install --component server` into
#    /opt/baton. Without it, the install comes from BUILD_DIR on this machine.
#  - runtime stage: installs only the packages scripts/runtime-packages.sh names (what the
#    Dockerfiles' runtime stage installs) into another fresh root, copies /opt/baton there, and in a
#    chroot as an unprivileged user starts a cluster with `baton up` and sends one request. Its
#    greedy token ids must equal a local `baton generate` on this machine.
#
#   sudo deploy/docker/check-image-stages.sh [--build-stage] [--cache DIR] [--omit PACKAGE] [BUILD_DIR]
#
# --cache DIR keeps the debootstrap root (as a tarball) and the runtime stage's downloaded packages
#   in DIR, so a second run needs neither debootstrap nor the archive's package downloads again.
# --omit PACKAGE leaves PACKAGE out of the runtime stage, as if runtime-packages.sh had missed it:
#   the check must then FAIL, naming the library the binaries cannot load (the test suite runs it
#   this way too, so a check that cannot notice a missing package fails a test).
#
# Prints a PASS or FAIL line; exits 0 only on PASS. Exit 77: not root (the tests count it skipped).
# Needs root, debootstrap and the Debian archive. The runtime stage alone takes a few minutes; the
# build stage compiles Baton from scratch (about 25 minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build_stage=false
cache=""
omit=""
while [ $# -gt 0 ]; do
  case $1 in
    --build-stage) build_stage=true; shift ;;
    --cache) cache=$2; shift 2 ;;
    --omit) omit=$2; shift 2 ;;
    -*) echo "check-image-stages: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
build=${1:-$root/build/release}
[ "$(id -u)" = 0 ] || { echo "check-image-stages: needs root (debootstrap, chroot, mounts)" >&2; exit 77; }
command -v debootstrap >/dev/null || { echo "check-image-stages: needs debootstrap (scripts/install-deps.sh installs it)" >&2; exit 1; }

work=$(mktemp -d /tmp/baton-rootfs.XXXXXX)
rootfs=$work/rootfs
buildfs=$work/buildfs
cleanup() {
  local m
  for m in "$rootfs/var/cache/apt/archives" "$rootfs/dev/shm" "$rootfs/dev" "$rootfs/proc" "$buildfs/proc"; do
    if mountpoint -q "$m" 2>/dev/null; then umount "$m" || umount -l "$m" || true; fi
  done
  # Never delete through a mount that is still there (a bound /dev would take the host's with it).
  if grep -q " $work/" /proc/mounts; then
    echo "check-image-stages: mounts under $work remain; left it in place" >&2
  else
    rm -rf --one-file-system "$work"
  fi
}
trap cleanup EXIT

# A fresh Debian 12 minbase root in $1: from the cache's tarball when there is one, else made by
# debootstrap (and stored in the cache for the next run).
make_root() {
  local dir=$1 tarball=${cache:+$cache/bookworm-minbase.tar}
  mkdir -p "$dir"
  if [ -n "$tarball" ] && [ -s "$tarball" ]; then
    echo "== minbase root from $tarball" >&2
    tar -C "$dir" -xpf "$tarball"
  else
    echo "== debootstrap bookworm (minbase) into $dir" >&2
    debootstrap --variant=minbase bookworm "$dir" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
      || { cat "$work/debootstrap.log" >&2; echo "FAIL: debootstrap did not make a root" >&2; exit 1; }
    rm -f "$dir"/var/cache/apt/archives/*.deb
    if [ -n "$tarball" ]; then
      mkdir -p "$cache"
      tar -C "$dir" -cpf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    fi
  fi
  cp /etc/resolv.conf "$dir/etc/resolv.conf"
}

if $build_stage; then
  make_root "$buildfs"
  echo "== build stage: install-deps.sh --build-only, configure, build, install" >&2
  mkdir -p "$buildfs/src"
  (cd "$root" && git ls-files -z | tar --null -T - -cf -) | tar -C "$buildfs/src" -xf -
  mount -t proc proc "$buildfs/proc"
  chroot "$buildfs" bash -c 'set -e; cd /src
    bash scripts/install-deps.sh --build-only
    cmake --preset release -DBATON_CUDA=OFF -DBATON_BUILD_TESTS=OFF -DBATON_BUILD_BENCH=OFF >/dev/null
    cmake --build --preset release --target baton baton-router baton-prefill baton-decode baton-proposer >/dev/null
    cmake --install build/release --component server --prefix /opt/baton >/dev/null' \
    || { echo "FAIL: the build stage failed" >&2; exit 1; }
fi

make_root "$rootfs"
echo "== install the runtime stage" >&2
if $build_stage; then
  cp -a "$buildfs/opt/baton" "$rootfs/opt/baton"
else
  cmake --install "$build" --component server --prefix "$rootfs/opt/baton" >/dev/null
fi
packages=$rootfs/opt/baton/runtime-packages.txt
if $build_stage; then  # as Dockerfile.cpu does: derived in the build stage's root
  chroot "$buildfs" bash -c 'bash /src/scripts/runtime-packages.sh /opt/baton/bin/*' > "$packages"
else
  # A build with the CUDA backend (BATON_CUDA on where the toolkit is installed) also loads the CUDA
  # runtime, which the CUDA image installs from NVIDIA's repository. No NVIDIA repository is reachable
  # here, so those libraries are copied from this machine's toolkit to the same paths; every other
  # library must still come from the derived Debian packages.
  bash "$root/scripts/runtime-packages.sh" --skip-dir /usr/local/cuda "$rootfs"/opt/baton/bin/* > "$packages"
  for lib in $(ldd "$rootfs"/opt/baton/bin/* 2>/dev/null | awk '$3 ~ "^/usr/local/cuda" {print $3}' | sort -u); do
    echo "== CUDA runtime library copied from this machine's toolkit: $lib" >&2
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
    dirname "$lib" >> "$rootfs/etc/ld.so.conf.d/cuda-runtime.conf"  # as NVIDIA's packages register it
  done
  if [ -f "$rootfs/etc/ld.so.conf.d/cuda-runtime.conf" ]; then chroot "$rootfs" ldconfig; fi
fi
if [ -n "$omit" ]; then
  grep -qx -- "$omit" "$packages" || { echo "FAIL: --omit $omit: not a runtime package (they are: $(tr '\n' ' ' < "$packages"))" >&2; exit 1; }
  grep -vx -- "$omit" "$packages" > "$packages.kept"; mv "$packages.kept" "$packages"
  echo "== leaving $omit out of the runtime stage" >&2
fi
echo "packages: $(tr '\n' ' ' < "$packages")" >&2
if [ -n "$cache" ]; then  # the downloaded .debs outlive this root
  mkdir -p "$cache/archives/partial"
  mount --bind "$cache/archives" "$rootfs/var/cache/apt/archives"
fi
chroot "$rootfs" bash -c 'apt-get update -q >/dev/null && xargs --arg-file=/opt/baton/runtime-packages.txt apt-get install -y -q --no-install-recommends >/dev/null' \
  || { echo "FAIL: apt-get could not install the runtime packages" >&2; exit 1; }
if [ -n "$omit" ] && chroot "$rootfs" dpkg-query -W -f='${Status}' "$omit" 2>/dev/null | grep -q "install ok installed"; then
  echo "== $omit came in as another package's dependency; the runtime stage does not need it listed" >&2
fi
mount -t proc proc "$rootfs/proc"
mount --bind /dev "$rootfs/dev"
mount --bind /dev/shm "$rootfs/dev/shm"

echo "== a cluster and one request inside it, as user nobody" >&2
cat > "$rootfs/tmp/smoke.sh" <<'SMOKE'
set -u
export PATH=/opt/baton/bin:$PATH
m=/opt/baton/models/baton-tiny-code
cd /tmp
baton up --port 0 --model $m/target --threads 1 \
  --speculative-config "{\"method\":\"eagle3\",\"num_speculative_tokens\":4,\"model\":\"$m/eagle3\"}" >up.out 2>up.err &
up=$!
for _ in $(seq 600); do grep -q "router ready on" up.out && break; kill -0 $up 2>/dev/null || break; sleep 0.2; done
addr=$(grep -o "router ready on [0-9.:]*" up.out | awk '{print $4}')
if [ -z "$addr" ]; then
  echo "baton up did not become ready:" >&2; cat up.err >&2
  kill -INT $up 2>/dev/null; wait $up 2>/dev/null
  exit 1
fi
timeout 120 baton generate --endpoint "$addr" --prompt "def fibonacci(n):" --max-tokens 32 --json
rc=$?
kill -INT $up; wait $up
exit $rc
SMOKE
chmod 755 "$rootfs/tmp/smoke.sh"
if ! chroot "$rootfs" su -s /bin/bash nobody -c /tmp/smoke.sh > "$work/image.json" 2> "$work/image.err"; then
  cat "$work/image.err" >&2
  missing=$(grep -o "error while loading shared libraries: [^:]*" "$work/image.err" | sort -u | head -3 | paste -sd ';' || true)
  echo "FAIL: the runtime stage does not serve${missing:+ ($missing)}"
  exit 1
fi
"$build/cli/baton" generate --model "$root/models/baton-tiny-code/target" --prompt "def fibonacci(n):" \
  --max-tokens 32 --json 2>/dev/null > "$work/local.json"
ids() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_ids"])' "$1"; }
image=$(ids "$work/image.json")
local=$(ids "$work/local.json")
echo "runtime stage: $image"
echo "local:         $local"
[ "$image" = "$local" ] && echo "PASS: the runtime stage serves the same greedy tokens" || { echo "FAIL: tokens differ"; exit 1; }
