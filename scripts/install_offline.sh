#!/usr/bin/env bash
# On a GPU node with no package registries: installs the suite from the wheelhouse that
# scripts/gather_wheelhouse.sh gathered, beside the frameworks the node's image already holds.
#   .venv         the image's packages (its CUDA torch and jax, numpy 2, pandas, ...) seen
#                 through, plus what the image lacks (requirements/gpu-node.txt: asv) and the
#                 suite itself (editable, no build isolation, no dependencies fetched)
#   .venv-jittor  Jittor's own environment (requirements/gpu-jittor.txt, numpy < 2), where its
#                 wheels were carried (.wheelhouse-jittor); the runner starts Jittor's workers
#                 there (membench/interpreters.py). Re-run with them to add it later.
# No apt step runs: /usr/bin/time (the independent memory check) is used only where present.
# PYTHON: the image's interpreter (default python3). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
WHEELS=${MEMBENCH_WHEELHOUSE:-.wheelhouse}
JITTOR_WHEELS=${MEMBENCH_JITTOR_WHEELHOUSE:-.wheelhouse-jittor}
if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "error: no wheels in $WHEELS: run scripts/gather_wheelhouse.sh where PyPI is reachable" >&2
    exit 1
fi
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
offline=(--no-index --find-links "$WHEELS" -q)
purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv --system-site-packages .venv
    # An interpreter that is itself a virtual environment's (the image's /opt/.../.venv) hands
    # a new venv its base installation's packages, not its own: a .pth file adds the image's
    # environment (its torch and jax) after ours.
    if "$PYTHON" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
        "$PYTHON" -c "$purelib" >"$(.venv/bin/python -c "$purelib")/membench-image.pth"
    fi
fi
.venv/bin/python -m pip install "${offline[@]}" -r requirements/gpu-node.txt
.venv/bin/python -m pip install "${offline[@]}" --no-build-isolation --no-deps -e .

if ls "$JITTOR_WHEELS"/jittor-*.whl >/dev/null 2>&1; then
    [ -x .venv-jittor/bin/python ] || "$PYTHON" -m venv .venv-jittor
    .venv-jittor/bin/python -m pip install "${offline[@]}" --find-links "$JITTOR_WHEELS" \
        -r requirements/gpu-jittor.txt
else
    echo "note: no Jittor wheels in $JITTOR_WHEELS: Jittor is left out on this machine"
fi

[ -x /usr/bin/time ] || echo "note: /usr/bin/time is missing: the independent memory check is skipped"
# asv refuses to run non-interactively until the machine is described once.
.venv/bin/python -c "from membench.publish.asv_run import describe_machine; print(describe_machine())"
.venv/bin/python - <<'PY'
from importlib.metadata import PackageNotFoundError, version
found = []
for name in ("torch", "jax", "jaxlib", "jax-cuda13-plugin", "flax", "optax", "numpy", "asv"):
    try:
        found.append(f"{name} {version(name)}")
    except PackageNotFoundError:
        found.append(f"{name} -")
print(".venv:", ", ".join(found))
PY
if [ -x .venv-jittor/bin/python ]; then
    .venv-jittor/bin/python -c "import importlib.metadata as m; print('.venv-jittor: jittor', m.version('jittor'), ', numpy', m.version('numpy'))"
fi
echo "membench installed offline in $(pwd)/.venv (Jittor in .venv-jittor)"
