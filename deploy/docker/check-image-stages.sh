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
#   sudo deploy/docker/check-image-stages.sh [--build-stage] [BUILD_DIR]
# Needs root, debootstrap and the Debian archive. The runtime stage alone takes a few minutes; the
# build stage compiles Baton from scratch (about 25 minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build_stage=false
if [ "${1:-}" = --build-stage ]; then build_stage=true; shift; fi
build=${1:-$root/build/release}
work=$(mktemp -d /tmp/baton-rootfs.XXXXXX)
rootfs=$work/rootfs
buildfs=$work/buildfs
cleanup() {
  for m in dev/shm dev proc; do umount "$rootfs/$m" 2>/dev/null || true; done
  umount "$buildfs/proc" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
command -v debootstrap >/dev/null || { echo "check-image-stages: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }

make_root() {
  echo "== debootstrap bookworm (minbase) into $1" >&2
  debootstrap --variant=minbase bookworm "$1" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
    || { cat "$work/debootstrap.log" >&2; exit 1; }
  cp /etc/resolv.conf "$1/etc/resolv.conf"
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
    || { echo "check-image-stages: the build stage failed" >&2; exit 1; }
fi

make_root "$rootfs"
echo "== install the runtime stage" >&2
if $build_stage; then
  cp -a "$buildfs/opt/baton" "$rootfs/opt/baton"
else
  cmake --install "$build" --component server --prefix "$rootfs/opt/baton" >/dev/null
fi
if $build_stage; then  # as Dockerfile.cpu does: derived in the build stage's root
  chroot "$buildfs" bash -c 'bash /src/scripts/runtime-packages.sh /opt/baton/bin/*' > "$rootfs/opt/baton/runtime-packages.txt"
else
  bash "$root/scripts/runtime-packages.sh" "$rootfs"/opt/baton/bin/* > "$rootfs/opt/baton/runtime-packages.txt"
fi
echo "packages: $(tr '\n' ' ' < "$rootfs/opt/baton/runtime-packages.txt")" >&2
chroot "$rootfs" bash -c 'apt-get update -q >/dev/null && xargs --arg-file=/opt/baton/runtime-packages.txt apt-get install -y -q --no-install-recommends >/dev/null'
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
[ -n "$addr" ] || { echo "baton up did not become ready:" >&2; cat up.err >&2; exit 1; }
timeout 120 baton generate --endpoint "$addr" --prompt "def fibonacci(n):" --max-tokens 32 --json
rc=$?
kill -INT $up; wait $up
exit $rc
SMOKE
chmod 755 "$rootfs/tmp/smoke.sh"
chroot "$rootfs" su -s /bin/bash nobody -c /tmp/smoke.sh > "$work/image.json"
"$build/cli/baton" generate --model "$root/models/baton-tiny-code/target" --prompt "def fibonacci(n):" \
  --max-tokens 32 --json 2>/dev/null > "$work/local.json"
ids() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_ids"])' "$1"; }
image=$(ids "$work/image.json")
local=$(ids "$work/local.json")
echo "runtime stage: $image"
echo "local:         $local"
[ "$image" = "$local" ] && echo "PASS: the runtime stage serves the same greedy tokens" || { echo "FAIL: tokens differ"; exit 1; }
