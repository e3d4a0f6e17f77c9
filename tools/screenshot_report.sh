#!/usr/bin/env bash
# Render a compiled bundle's report.html to a PNG in headless Chromium (Debian's `chromium`).
# Usage: tools/screenshot_report.sh OUTDIR/report.html OUT.png [HEIGHT]
set -euo pipefail
html=$(realpath "$1"); png=$2; height=${3:-2600}
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --window-size=1200,"$height" \
  --screenshot="$png" "file://$html" 2>/dev/null
echo "wrote $png"
