#!/usr/bin/env bash
# The next GPU run, one device command, its parts in the order of what each is worth:
#   bash scripts/gpu_run.sh [PLAN] [--dry-run]
# PLAN: gpu-next (default; `membench plan gpu-next` lists its parts). Set-up first (the
# offline install, the first checks with the card's own description, Jittor's core within
# MEMBENCH_JITTOR_BUILD_SECONDS, 100 here), then each part in turn while time is left, each by
# scripts/gpu_node.sh, which resumes it from the stored records and packs the machine's results
# into $OUT after it. Jittor's part gets at most JITTOR_PART_SECONDS (its go or no-go); a part
# that outlasts what is left is stopped in time to pack, and resumes when the script runs again
# (the next command or session). MEMBENCH_COMMAND_SECONDS: the command's limit less a margin
# (default 570). What each part took against the plan's estimate: $OUT/gpu-run.log.
# --dry-run: what it would run, and each part's estimate against the command's time (no GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
PLAN=gpu-next
DRY=0
for arg in "$@"; do
    case $arg in
    --dry-run) DRY=1 ;;
    -*) echo "usage: gpu_run.sh [PLAN] [--dry-run]" >&2 && exit 2 ;;
    *) PLAN=$arg ;;
    esac
done
COMMAND_SECONDS=${MEMBENCH_COMMAND_SECONDS:-570}
MIN_PART_SECONDS=90 # less left than this: no part starts (a worker's start and the packing)
JITTOR_PART_SECONDS=150
export MEMBENCH_JITTOR_BUILD_SECONDS=${MEMBENCH_JITTOR_BUILD_SECONDS:-100}
OUT_DIR=${OUT:-.membench/archives}
WHEELS=${MEMBENCH_WHEELHOUSE:-$(pwd)/.wheelhouse}

# measure from a clean clone of the bundled commit, as scripts/gpu_node.sh does (its header)
CLONE=/tmp/membench-clone
if [ "$DRY" = 0 ] && [ "$(pwd)" != "$CLONE" ] && [ -f "$WHEELS/membench.bundle" ] &&
    command -v git >/dev/null; then
    bash scripts/measure_clone.sh "$WHEELS/membench.bundle" "$CLONE" \
        "${MEMBENCH_MEASURE_COMMIT:-}" || exit 1
    if [ ! -f "$CLONE/scripts/gpu_run.sh" ]; then # an earlier commit, from before this script
        echo "the commit to measure has no scripts/gpu_run.sh: run scripts/gpu_node.sh" >&2
        exit 1
    fi
    export MEMBENCH_WHEELHOUSE="$WHEELS"
    export MEMBENCH_JITTOR_WHEELHOUSE="${MEMBENCH_JITTOR_WHEELHOUSE:-$(pwd)/.wheelhouse-jittor}"
    # the clone's script counts from its own start: what the clone took is spent
    export MEMBENCH_COMMAND_SECONDS=$((COMMAND_SECONDS - (SECONDS - START)))
    exec bash "$CLONE/scripts/gpu_run.sh" "$@"
fi
mkdir -p "$OUT_DIR"
say() { echo "$*" | tee -a "$OUT_DIR/gpu-run.log"; }
left() { echo $((COMMAND_SECONDS - (SECONDS - START))); }

# one part in what is left of the command (its estimate beside; a dry run counts estimates)
planned=0
run_part() {
    local part=$1 estimate=$2 give
    give=$(left)
    [ "$DRY" = 1 ] && give=$((COMMAND_SECONDS - planned))
    if [ "$give" -lt "$MIN_PART_SECONDS" ]; then
        say "part $part: not started, $give s left (run the script again to go on)"
        return
    fi
    [ "$part" = jittor ] && [ "$give" -gt "$JITTOR_PART_SECONDS" ] && give=$JITTOR_PART_SECONDS
    if [ "$DRY" = 1 ]; then
        say "would run: bash scripts/gpu_node.sh $part $PLAN (estimated $estimate s, given $give s)"
        planned=$((planned + (estimate < give ? estimate : give)))
        return
    fi
    local t0=$SECONDS
    # its own stdin: the loop below reads the parts from this script's
    MEMBENCH_COMMAND_SECONDS=$give bash scripts/gpu_node.sh "$part" "$PLAN" </dev/null
    say "part $part: estimated $estimate s, given $give s, took $((SECONDS - t0)) s"
}

say "== $(date -u +%FT%TZ) plan $PLAN, $COMMAND_SECONDS s"
# a bare machine has no membench until the set-up has installed it
setup_estimate=144
if [ -x .venv/bin/membench ]; then
    setup_estimate=$(.venv/bin/membench plan "$PLAN" --list | sed -n 1p | cut -d" " -f2)
fi
run_part setup "$setup_estimate"
parts=$(.venv/bin/membench plan "$PLAN" --list | tail -n +2) || exit 1
while read -r part estimate; do
    [ -n "$part" ] && run_part "$part" "$estimate"
done <<<"$parts"
