#!/usr/bin/env bash
# A clean clone of the commit to measure, from the bundle carried beside the wheels:
#   bash scripts/measure_clone.sh BUNDLE CLONE [COMMIT]
# CLONE is created, or moved to the commit where a machine kept it warm (its untracked results
# stay). COMMIT (default: the bundle's HEAD) may be an earlier commit in the bundle, to finish
# what a session measured by it left unsettled: this checkout's stored results of that commit
# (capacity runs and record stores, whose folders end in its 12-character hash) are copied into
# the clone, files it already has kept, so a search resumes from its probes and every record
# still names the commit that measured it. Run from the checkout's root (scripts/gpu_node.sh).
set -euo pipefail
BUNDLE=${1:?usage: measure_clone.sh BUNDLE CLONE [COMMIT]}
CLONE=${2:?usage: measure_clone.sh BUNDLE CLONE [COMMIT]}
COMMIT=${3:-}
[ -d "$CLONE/.git" ] || git clone -q --no-checkout "$BUNDLE" "$CLONE"
git -C "$CLONE" fetch -q "$BUNDLE" HEAD
# asv records a commit only where the branch asv.conf.json names exists ("Unknown branch main
# in configuration" otherwise: a bundle of HEAD holds no branch, and no GPU session's cells
# reached asv until this): main is set to the bundle's HEAD (bundled from main).
git -C "$CLONE" update-ref refs/heads/main FETCH_HEAD
# -f: results the clone holds untracked that the commit tracks (copied in for an earlier
# commit, committed since) become the commit's; each command packed what it measured.
git -C "$CLONE" -c advice.detachedHead=false checkout -q -f --detach "${COMMIT:-FETCH_HEAD}"
short=$(git -C "$CLONE" rev-parse HEAD | cut -c1-12)
for run in results/capacity/*/*-"$short" results/records/*/*-"$short"; do
    [ -d "$run" ] || continue
    mkdir -p "$CLONE/$run"
    # files the clone already has are kept (tar's, not cp -n's: some cp -n exit 1 on a skip)
    tar -C "$run" -cf - . | tar -C "$CLONE/$run" --skip-old-files -xf -
done
echo "measuring from $(git -C "$CLONE" log --oneline -1 | cut -c1-80)"
