#!/usr/bin/env bash
# Run where PyPI is reachable: gathers into .wheelhouse/ (git-ignored) every wheel a GPU node
# without package registries needs beside its image (requirements/gpu-node.txt: asv), and into
# .wheelhouse-jittor/ Jittor's own environment (requirements/gpu-jittor.txt: Jittor and the
# numpy < 2 it needs, 25 MiB: a device command's files are limited, so they travel only with
# the command that builds Jittor), for CPython 3.12 on manylinux x86_64. Carry the folders to
# the node and run scripts/install_offline.sh there. Fails if they outgrow
# MEMBENCH_WHEELHOUSE_MIB together.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
DEST=${MEMBENCH_WHEELHOUSE:-.wheelhouse}
JITTOR_DEST=${MEMBENCH_JITTOR_WHEELHOUSE:-.wheelhouse-jittor}
LIMIT_MIB=${MEMBENCH_WHEELHOUSE_MIB:-60}
# pip matches manylinux tags exactly: name every glibc level the wheels may carry.
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp)
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
    TARGET+=(--platform "${tag}_x86_64")
done
pip_quiet() { "$PYTHON" -m pip "$@" --disable-pip-version-check -q 2> >(grep -v "^WARNING: Location" >&2); }

mkdir -p "$DEST" "$JITTOR_DEST"
rm -f "$DEST"/*.whl "$JITTOR_DEST"/*.whl
pip_quiet download "${TARGET[@]}" -d "$DEST" -r requirements/gpu-node.txt
# Jittor is published as a source archive only; its wheel is pure Python (the C++ core is
# compiled at first import, on the node), so it is built here, for any Python 3.
jittor=$(grep -E '^jittor==' requirements/gpu-jittor.txt)
pip_quiet wheel --no-deps -w "$JITTOR_DEST" "$jittor"
pip_quiet download "${TARGET[@]}" --find-links "$JITTOR_DEST" -d "$JITTOR_DEST" \
    -r requirements/gpu-jittor.txt

size=$(du -smc "$DEST" "$JITTOR_DEST" | tail -n 1 | cut -f1)
for d in "$DEST" "$JITTOR_DEST"; do
    echo "wheelhouse $d: $(ls "$d"/*.whl | wc -l) wheels, $(du -sh "$d" | cut -f1)"
    ls -s --block-size=K "$d" | sed 1d | sort -k2
done
if [ "$size" -gt "$LIMIT_MIB" ]; then
    echo "error: the wheelhouse holds ${size} MiB, over its ${LIMIT_MIB} MiB limit" >&2
    exit 1
fi
