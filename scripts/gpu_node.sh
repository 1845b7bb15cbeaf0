#!/usr/bin/env bash
# One command of a GPU session without package registries (the gpu-quick plan):
#   bash scripts/gpu_node.sh setup|resnet50|unet3d-gpt2|jittor|capacity
# Installs from .wheelhouse/ when .venv is missing (a machine may start bare), compiles
# Jittor's core once per machine, runs the part (resuming from the records in results/), and
# packs this machine's results into $OUT/membench-<part>.tar.gz (OUT: the folder whose files
# come back; default .membench/archives). Here: `membench unpack ARCHIVE`.
set -uo pipefail
cd "$(dirname "$0")/.."
PART=${1:?usage: gpu_node.sh setup|resnet50|unet3d-gpt2|jittor|capacity}
WHEELS=${MEMBENCH_WHEELHOUSE:-$(pwd)/.wheelhouse}
# A copy of a working tree (no .git) cannot say which commit measured: measure from a clean
# clone of the commit bundled beside the wheels (`git bundle create .wheelhouse/membench.bundle
# HEAD`), so that every record names the commit that measured it.
if [ ! -d .git ] && [ -f "$WHEELS/membench.bundle" ] && command -v git >/dev/null; then
    CLONE=/tmp/membench-clone
    [ -d "$CLONE/.git" ] || git clone -q "$WHEELS/membench.bundle" "$CLONE" || exit 1
    export MEMBENCH_WHEELHOUSE="$WHEELS"
    exec bash "$CLONE/scripts/gpu_node.sh" "$@"
fi
[ -d .git ] || echo "warning: not a git clone and no membench.bundle: records name no commit" >&2
OUT_DIR=${OUT:-.membench/archives}
mkdir -p "$OUT_DIR" .membench
export PYTHONUNBUFFERED=1

[ -x .venv/bin/membench ] || bash scripts/install_offline.sh || exit 1
skip=()
if [ -x .venv-jittor/bin/python ] && [ ! -e .membench/jittor-ready ]; then
    # Jittor's core (and its CUDA build) compiles once per machine; a failure is logged, and
    # the plan then leaves Jittor out instead of failing every cell on the same compile.
    if timeout 420 env PYTHONPATH="$(pwd)" .venv-jittor/bin/python \
        -m membench.backends.jittor_backend >.membench/jittor-build.log 2>&1; then
        touch .membench/jittor-ready
    fi
    tail -c 3000 .membench/jittor-build.log
    cp .membench/jittor-build.log "$OUT_DIR/jittor-build.log"
fi
[ -e .membench/jittor-ready ] || skip=(--skip jittor)
if [ "$PART" != setup ]; then
    .venv/bin/membench plan gpu-quick "$PART" "${skip[@]}"
fi
.venv/bin/membench pack "$OUT_DIR/membench-$PART.tar.gz" || echo "nothing measured yet to pack"
