#!/usr/bin/env bash
# Renders the report of a results folder and screenshots its page with headless Chromium, to
# check by eye what a reader sees (broken images, unreadable plots, overflowing tables).
#
#   scripts/screenshot_report.sh [OUT_DIR] [RESULTS_DIR]
#
# OUT_DIR defaults to .membench/report, RESULTS_DIR to results/. Writes OUT_DIR/index.html
# (and the rest of the report) and OUT_DIR/screenshot.png. Needs Chromium: Debian's
# `apt-get install -y chromium` (or set CHROMIUM to a binary).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=$(realpath -m "${1:-.membench/report}")
RESULTS=$(realpath -m "${2:-results}")
WIDTH=${WIDTH:-1400}
HEIGHT=${HEIGHT:-3000}

CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$CHROMIUM" ]; then
    echo "chromium not found: apt-get install -y chromium (or set CHROMIUM)" >&2
    exit 1
fi

# The checkout on the path: an editable install made before analysis/ was packaged lacks it.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if .venv/bin/membench report --help >/dev/null 2>&1; then
    .venv/bin/membench report --results "$RESULTS" --out "$OUT"
else
    # The CLI predates `report`: call the library directly.
    .venv/bin/python -c 'import sys; from pathlib import Path
from analysis.report import write_report
print("report:", write_report(Path(sys.argv[1]), Path(sys.argv[2])))' "$RESULTS" "$OUT"
fi

# A throwaway profile: no state from (or into) a real browser profile.
PROFILE=$(mktemp -d)
trap 'rm -rf "$PROFILE"' EXIT
"$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$PROFILE" --window-size="$WIDTH,$HEIGHT" \
    --screenshot="$OUT/screenshot.png" "file://$OUT/index.html" 2>"$OUT/chromium.log" ||
    { cat "$OUT/chromium.log" >&2; exit 1; }
echo "screenshot: $OUT/screenshot.png"
