#!/usr/bin/env bash
# Checks the images' runtime stage without Docker (not available where Baton is developed): builds
# a Debian 12 minbase root with debootstrap, installs only the packages scripts/runtime-packages.sh
# names (what the Dockerfiles' runtime stage installs), copies `cmake --install --component server`
# into /opt/baton like the Dockerfiles do, and, inside a chroot as an unprivileged user, starts a
# cluster with `baton up` and sends one request. Prints the generated token ids next to those of a
# local `baton generate` on the build machine; they must be equal.
#
#   sudo deploy/docker/check-runtime-stage.sh [BUILD_DIR]      (needs root, debootstrap, network to the Debian archive)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
work=$(mktemp -d /tmp/baton-rootfs.XXXXXX)
rootfs=$work/rootfs
cleanup() {
  for m in dev/shm dev proc; do umount "$rootfs/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
command -v debootstrap >/dev/null || { echo "check-runtime-stage: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }

echo "== debootstrap bookworm (minbase)" >&2
debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
  || { cat "$work/debootstrap.log" >&2; exit 1; }
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"

echo "== install the runtime stage" >&2
cmake --install "$build" --component server --prefix "$rootfs/opt/baton" >/dev/null
bash "$root/scripts/runtime-packages.sh" "$rootfs"/opt/baton/bin/* > "$rootfs/opt/baton/runtime-packages.txt"
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
