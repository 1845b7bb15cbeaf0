#!/usr/bin/env bash
# One part of a GPU session without package registries (the gpu-quick plan):
#   bash scripts/gpu_node.sh setup|resnet50|unet3d-gpt2|jittor|capacity [PLAN]
# PLAN: gpu-quick (default), gpu-decision (part `searches`, resumed command after command) or
# gpu-next (its parts one after another in one command: scripts/gpu_run.sh).
# MEMBENCH_COMMAND_SECONDS: the device command's limit, less a margin (default 570): the part
# is stopped (Ctrl-C, results kept) in time to pack what it measured.
# Installs from .wheelhouse/ when .venv is missing (a machine may start bare), compiles
# Jittor's core once per machine, runs the part (resuming from the records in results/), and
# packs this machine's results into $OUT/membench-<part>.tar.gz (OUT: the folder whose files
# come back; default .membench/archives). Here: `membench unpack ARCHIVE`.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
PART=${1:?usage: gpu_node.sh setup|resnet50|unet3d-gpt2|jittor|capacity [PLAN]}
PLAN=${2:-gpu-quick}
COMMAND_SECONDS=${MEMBENCH_COMMAND_SECONDS:-570}
WHEELS=${MEMBENCH_WHEELHOUSE:-$(pwd)/.wheelhouse}
# A copy of a working tree cannot say which commit measured (the device tool's copy held a
# .git of an older commit, with today's files beside it: every cell refused the "uncommitted
# changes"): where a bundle is carried, measure from a clean clone of the commit bundled beside
# the wheels (`git bundle create .wheelhouse/membench.bundle HEAD`), so that every record names
# the commit that measured it. On a machine kept warm between commands the clone moves to the
# bundle's newer commit; its untracked results stay (those the commit tracks become the
# commit's: each command packed what it measured). MEMBENCH_MEASURE_COMMIT names an earlier
# commit of the bundle instead, to finish a search a session measured by it left unsettled
# (scripts/measure_clone.sh copies that commit's stored results into the clone): a device
# session is too short for some searches, and a later commit would start them over.
CLONE=/tmp/membench-clone
if [ "$(pwd)" != "$CLONE" ] && [ -f "$WHEELS/membench.bundle" ] && command -v git >/dev/null; then
    bash scripts/measure_clone.sh "$WHEELS/membench.bundle" "$CLONE" \
        "${MEMBENCH_MEASURE_COMMIT:-}" || exit 1
    export MEMBENCH_WHEELHOUSE="$WHEELS"
    export MEMBENCH_JITTOR_WHEELHOUSE="${MEMBENCH_JITTOR_WHEELHOUSE:-$(pwd)/.wheelhouse-jittor}"
    exec bash "$CLONE/scripts/gpu_node.sh" "$@"
fi
[ -d .git ] || echo "warning: not a git clone and no membench.bundle: records name no commit" >&2
OUT_DIR=${OUT:-.membench/archives}
mkdir -p "$OUT_DIR" .membench
export PYTHONUNBUFFERED=1

JITTOR_WHEELS=${MEMBENCH_JITTOR_WHEELHOUSE:-.wheelhouse-jittor}
if [ ! -x .venv/bin/membench ] ||
    { [ ! -x .venv-jittor/bin/python ] && ls "$JITTOR_WHEELS"/jittor-*.whl >/dev/null 2>&1; }; then
    bash scripts/install_offline.sh || exit 1
fi
if [ ! -e .membench/gpu-checks.log ]; then
    bash scripts/gpu_checks.sh
    cp .membench/gpu-checks.log "$OUT_DIR/gpu-checks.log"
fi
skip=()
if [ -x .venv-jittor/bin/python ] && [ ! -e .membench/jittor-tried ]; then
    # Jittor's core (and its CUDA build) compiles once per machine; a failure is logged, and
    # the plan then leaves Jittor out instead of failing every cell on the same compile.
    touch .membench/jittor-tried
    if timeout "${MEMBENCH_JITTOR_BUILD_SECONDS:-420}" env PYTHONPATH="$(pwd)" \
        .venv-jittor/bin/python -m membench.backends.jittor_backend \
        >.membench/jittor-build.log 2>&1; then
        touch .membench/jittor-ready
    fi
    tail -c 3000 .membench/jittor-build.log
    cp .membench/jittor-build.log "$OUT_DIR/jittor-build.log"
fi
[ -e .membench/jittor-ready ] || skip=(--skip jittor)
if [ "$PART" != setup ]; then
    # time left in this command, less what packing takes
    left=$((COMMAND_SECONDS - (SECONDS - START) - 30))
    timeout -s INT -k 20 "$left" .venv/bin/membench plan "$PLAN" "$PART" --seconds "$left" \
        "${skip[@]}"
fi
.venv/bin/membench pack "$OUT_DIR/membench-$PART.tar.gz" || echo "nothing measured yet to pack"
