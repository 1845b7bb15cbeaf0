#!/usr/bin/env bash
# Installs everything membench needs into .venv in this checkout. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
REQUIREMENTS=${MEMBENCH_REQUIREMENTS:-requirements/cpu.txt}

# /usr/bin/time -v is the independent check of the host peak (Debian package "time").
if [ ! -x /usr/bin/time ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing /usr/bin/time (Debian package 'time')"
        apt-get install -y -q time >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q time >/dev/null; }
    else
        echo "warning: /usr/bin/time is missing; install Debian's 'time' package for the independent memory check" >&2
    fi
fi

# oneDNN for Jittor's CPU convolutions (Debian's libdnnl-dev): without it Jittor would download
# its own from its authors' server, or run convolutions ~200x slower (use_mkl=0).
if [ ! -e /usr/include/oneapi/dnnl/dnnl.hpp ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing oneDNN (Debian package 'libdnnl-dev') for Jittor"
        apt-get install -y -q libdnnl-dev >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q libdnnl-dev >/dev/null; }
    else
        echo "warning: libdnnl-dev is missing; Jittor's convolutions will not use oneDNN" >&2
    fi
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
# asv refuses to run non-interactively until the machine is described once.
.venv/bin/python -c "from membench.bench import describe_machine; describe_machine()"
echo "membench installed in $(pwd)/.venv"
