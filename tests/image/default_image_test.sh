#!/usr/bin/env bash
# The chart's default image is the one deploy/docker/build-image.sh builds: for each variant, every
# container image in the chart rendered with default values must equal the tag the script builds.
#   default_image_test.sh HELM_RENDER CHART BUILD_IMAGE_SCRIPT
set -euo pipefail
render=$1 chart=$2 script=$3
status=0
for variant in cpu cuda; do
  built=$(bash "$script" --dry-run --variant "$variant" | awk '$2 == "build" {for (i = 1; i < NF; i++) if ($i == "-t") print $(i + 1)}')
  rendered=$("$render" "$chart" --set "image.variant=$variant" | sed -n 's/^ *image: *"\{0,1\}\([^" ]*\)"\{0,1\} *$/\1/p' | sort -u)
  [ -n "$built" ] && [ -n "$rendered" ] || { echo "$variant: nothing to compare (built '$built', rendered '$rendered')"; status=1; continue; }
  if [ "$rendered" = "$built" ]; then
    echo "$variant: the chart runs $rendered, which build-image.sh builds"
  else
    echo "$variant: the chart runs $(echo $rendered) but build-image.sh builds $built"; status=1
  fi
done
exit $status
