#!/usr/bin/env bash
# Refreshes the chart library the router's /dashboard page uses (router/http/dashboard/vendor/)
# from the npm registry, at the version pinned by router/http/dashboard/package-lock.json. The
# vendored files are committed and compiled into baton-router, so builds and the page itself never
# need the network; run this only after changing the pinned version.
set -euo pipefail
dir=$(cd "$(dirname "$0")/../router/http/dashboard" && pwd)
npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >/dev/null
cp "$dir/node_modules/uplot/dist/uPlot.iife.min.js" "$dir/node_modules/uplot/dist/uPlot.min.css" "$dir/vendor/"
cp "$dir/node_modules/uplot/LICENSE" "$dir/vendor/uPlot.LICENSE"
echo "vendored uPlot $(node -p "require('$dir/node_modules/uplot/package.json').version") into $dir/vendor"
