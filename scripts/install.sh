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

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r "$REQUIREMENTS" 2> >(grep -v "^WARNING: Location" >&2)
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e . 2> >(grep -v "^WARNING: Location" >&2)
# asv refuses to run non-interactively until the machine is described once.
.venv/bin/python -c "from membench.bench import describe_machine; describe_machine()"
echo "membench installed in $(pwd)/.venv"
