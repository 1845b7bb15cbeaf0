#!/usr/bin/env bash
# Installs everything membench needs into .venv in this checkout. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
REQUIREMENTS=${MEMBENCH_REQUIREMENTS:-requirements/cpu.txt}
JITTOR_REQUIREMENTS=${MEMBENCH_JITTOR_REQUIREMENTS:-}
# --predict: the GPU-prediction environment (.venv-predict: jax with its CUDA plugin, which
# compiles for a GPU without one; several GB) on a Python its jax supports, then exit
if [ "${1:-}" = "--predict" ]; then
    # the first of these that runs and is 3.12 or newer (a pyenv shim may exist and not run)
    for candidate in ${PREDICT_PYTHON:-} python3.12 python3.13 "$HOME"/.pyenv/versions/3.1[23]*/bin/python; do
        if "$candidate" -c "import sys; sys.exit(sys.version_info < (3, 12))" 2>/dev/null; then
            PREDICT_PYTHON=$candidate
            break
        fi
        PREDICT_PYTHON=
    done
    if [ -z "${PREDICT_PYTHON:-}" ]; then
        echo "install.sh --predict: jax 0.11.2 needs Python >= 3.12; set PREDICT_PYTHON to one" >&2
        exit 2
    fi
    [ -x .venv-predict/bin/python ] || "$PREDICT_PYTHON" -m venv .venv-predict
    .venv-predict/bin/python -m pip install -q --disable-pip-version-check -r requirements/predict.txt 2> >(grep -v "^WARNING: Location" >&2)
    echo "GPU-prediction environment installed in $(pwd)/.venv-predict"
    exit 0
fi
# --gpu: CUDA builds of torch and jax in .venv (numpy 2), Jittor in .venv-jittor (numpy < 2)
if [ "${1:-}" = "--gpu" ]; then
    REQUIREMENTS=requirements/gpu.txt
    JITTOR_REQUIREMENTS=${JITTOR_REQUIREMENTS:-requirements/gpu-jittor.txt}
fi
# apt steps are best effort: without package registries they warn, they do not stop the install
apt_install() {
    apt-get install -y -q "$1" >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$1" >/dev/null 2>&1; } ||
        echo "warning: apt-get could not install $1" >&2
}

# /usr/bin/time -v is the independent check of the host peak (Debian package "time").
if [ ! -x /usr/bin/time ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing /usr/bin/time (Debian package 'time')"
        apt_install time
    else
        echo "warning: /usr/bin/time is missing; install Debian's 'time' package for the independent memory check" >&2
    fi
fi

# oneDNN for Jittor's CPU convolutions (Debian's libdnnl-dev): without it Jittor would download
# its own from its authors' server, or run convolutions ~200x slower (use_mkl=0).
if [ ! -e /usr/include/oneapi/dnnl/dnnl.hpp ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing oneDNN (Debian package 'libdnnl-dev') for Jittor"
        apt_install libdnnl-dev
    else
        echo "warning: libdnnl-dev is missing; Jittor's convolutions will not use oneDNN" >&2
    fi
fi

# asv's dashboard scripts (jQuery, flot, bootstrap, ...) from the npm registry, pinned and
# integrity-checked by package-lock.json, served from the published folder (membench/publish/dashboard.py);
# chromium renders the dashboard in its test. Both best effort, like the steps above.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    command -v npm >/dev/null || { echo "installing Debian's npm (for the dashboard's scripts)"; apt_install npm; }
    command -v chromium >/dev/null || { echo "installing Debian's chromium (the dashboard's test)"; apt_install chromium; }
fi
if command -v npm >/dev/null; then
    npm ci --prefix scripts/dashboard --ignore-scripts --no-audit --no-fund --silent ||
        echo "warning: npm ci failed; asv publish needs scripts/dashboard/node_modules" >&2
else
    echo "warning: npm is missing; asv publish needs scripts/dashboard/node_modules (npm ci)" >&2
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r "$REQUIREMENTS" 2> >(grep -v "^WARNING: Location" >&2)
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e . 2> >(grep -v "^WARNING: Location" >&2)
# Jittor: wire Debian's oneDNN where Jittor looks for its own, then compile Jittor's core and
# its oneDNN ops once per machine (minutes), not in every test or cell.
if .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('jittor') is None)"; then
    bash scripts/jittor_onednn.sh
    echo "compiling Jittor's core once (a few minutes the first time, cached in ~/.cache/jittor)"
    .venv/bin/python -m membench.backends.jittor_backend
fi
# Jittor in an environment of its own (GPU machines): the runner finds it at .venv-jittor.
if [ -n "$JITTOR_REQUIREMENTS" ]; then
    [ -x .venv-jittor/bin/python ] || "$PYTHON" -m venv .venv-jittor
    .venv-jittor/bin/python -m pip install -q --disable-pip-version-check -r "$JITTOR_REQUIREMENTS" 2> >(grep -v "^WARNING: Location" >&2)
    echo "compiling Jittor's core once in .venv-jittor (its CUDA build where nvcc is found)"
    PYTHONPATH=$(pwd) .venv-jittor/bin/python -m membench.backends.jittor_backend ||
        echo "warning: Jittor did not build; its cells will end 'error' with the reason" >&2
fi
# asv refuses to run non-interactively until the machine is described once.
.venv/bin/python -c "from membench.publish.asv_run import describe_machine; describe_machine()"
echo "membench installed in $(pwd)/.venv"
