#!/usr/bin/env bash
# Builds the image the Helm chart runs by default, with one command from anywhere in the checkout:
#
#   deploy/docker/build-image.sh [--variant cpu|cuda] [--registry REGISTRY] [--push] [--dry-run]
#
# It tags baton:<appVersion> (CPU) or baton:<appVersion>-cuda (CUDA), exactly the chart's default
# image.repository and tag (deploy/k8s/helm/baton/Chart.yaml's appVersion), so `helm install` with
# no image values runs what it built. --registry prefixes the name (REGISTRY/baton:...; then install
# with --set image.repository=REGISTRY/baton); --push pushes it. Docker or Podman, whichever is on
# PATH ($CONTAINER_ENGINE overrides). --dry-run prints the commands instead of running them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
variant=cpu registry="" push=false dry_run=false
while [ $# -gt 0 ]; do
  case $1 in
    --variant) variant=$2; shift 2 ;;
    --registry) registry=${2%/}; shift 2 ;;
    --push) push=true; shift ;;
    --dry-run) dry_run=true; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "build-image: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $variant in
  cpu) dockerfile=Dockerfile.cpu suffix="" ;;
  cuda) dockerfile=Dockerfile.cuda suffix=-cuda ;;
  *) echo "build-image: --variant must be cpu or cuda, not '$variant'" >&2; exit 2 ;;
esac
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$root/deploy/k8s/helm/baton/Chart.yaml")
[ -n "$version" ] || { echo "build-image: no appVersion in deploy/k8s/helm/baton/Chart.yaml" >&2; exit 1; }
image=${registry:+$registry/}baton:$version$suffix

engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
  for e in docker podman; do command -v $e >/dev/null 2>&1 && { engine=$e; break; }; done
fi
if [ -z "$engine" ]; then
  $dry_run && engine=docker || { echo "build-image: needs docker or podman on PATH (or CONTAINER_ENGINE)" >&2; exit 1; }
fi

run() { if $dry_run; then echo "$*"; else "$@"; fi; }
run "$engine" build -f "$root/deploy/docker/$dockerfile" -t "$image" "$root"
$push && run "$engine" push "$image"
$dry_run || echo "built $image"
