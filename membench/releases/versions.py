"""Framework releases as data: requirements/versions.txt -> one environment per line.

Each line of the versions file is a full pip spec (framework first) and the device kinds it
runs on. `membench versions --setup` installs each spec into .venv-versions/<label>/, on the
interpreter its release needs (membench.releases.pythons), beside the few packages a worker
needs (the worker imports this checkout's membench, as every worker does); the sweep
(membench.releases.sweep) starts each cell's worker under its release's interpreter, the
releases of a framework interleaved cell by cell. asv then records the stored cells, one asv
environment per release (the `checkout` environment with MEMBENCH_STACK in its matrix: asv
builds nothing, its benchmarks read the records).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from packaging.version import InvalidVersion, Version

from membench import paths, registry
from membench.environment import REPO_ROOT
from membench.releases.pythons import Choice, choose_for, minor_of
from membench.stacks import DEVICE_KINDS, Stack, VersionsFileError, parse_stack

VERSIONS_FILE = REPO_ROOT / "requirements" / "versions.txt"
ENVIRONMENTS = REPO_ROOT / ".venv-versions"
# What a worker imports besides its framework (pyproject's dependencies, unpinned: the spec
# pins numpy, and pip picks the rest to match it).
WORKER_PACKAGES = ("psutil", "rich", "nvidia-ml-py")
READY = "membench-ready"  # written into an environment once its install and checks passed


def environment_dir(stack: Stack, root: Path = ENVIRONMENTS) -> Path:
    return root / stack.label


def environment_python(stack: Stack, root: Path = ENVIRONMENTS) -> Path:
    return environment_dir(stack, root) / "bin" / "python"


def is_ready(stack: Stack, root: Path = ENVIRONMENTS) -> bool:
    """Whether the release's environment was installed (and, for Jittor, its core compiled)."""
    ready = environment_dir(stack, root) / READY
    return ready.is_file() and ready.read_text().strip() == stack.spec


def setup_stack(stack: Stack, log: TextIO, root: Path = ENVIRONMENTS) -> Choice:
    """Install one release's environment on the interpreter it needs (resumable: a ready one
    is left as it is) and say which. Raises NoInterpreter where none found here will do, and
    subprocess.CalledProcessError with the failing step's output in the log."""
    where = environment_dir(stack, root)
    python = environment_python(stack, root)
    if is_ready(stack, root):
        return Choice(minor_of(str(python)) or "", str(python), "installed")
    choice = choose_for(stack)
    if python.exists() and minor_of(str(python)) != choice.python:
        shutil.rmtree(where)  # a half-made environment on another interpreter
    if not python.exists():
        subprocess.run([choice.path, "-m", "venv", str(where)], check=True, stdout=log,
                       stderr=subprocess.STDOUT)  # fmt: skip
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, *stack.requirements, *WORKER_PACKAGES], check=True, stdout=log,
                   stderr=subprocess.STDOUT)  # fmt: skip
    if core_build := registry.framework(stack.framework).core_build:  # once per release
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        subprocess.run([str(python), "-m", core_build], check=True,
                       stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)  # fmt: skip
    (where / READY).write_text(stack.spec + "\n")
    return choice


def read_stacks(path: Path = VERSIONS_FILE) -> list[Stack]:
    stacks = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        devices_text, _, spec = line.partition(" ")
        devices = tuple(d.strip() for d in devices_text.split(",") if d.strip())
        where = f"{path}:{number}"
        if not spec.strip() or not devices or any(d not in DEVICE_KINDS for d in devices):
            raise VersionsFileError(
                f"{where}: expected 'DEVICES SPEC' with DEVICES from {', '.join(DEVICE_KINDS)}"
                f", got {raw!r}"
            )
        try:
            stacks.append(parse_stack(spec, devices))
        except (VersionsFileError, registry.UnknownNameError) as exc:
            raise VersionsFileError(f"{where}: {exc}") from None
    labels = [s.label for s in stacks]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise VersionsFileError(f"{path}: versions listed twice: {', '.join(duplicates)}")
    return stacks


def select_stacks(stacks: list[Stack], device: str, only: list[str] | None = None) -> list[Stack]:
    """The stacks for a device kind, optionally only some frameworks or labels."""
    chosen = [s for s in stacks if device in s.devices]
    if only:
        valid = sorted({s.framework for s in chosen} | {s.label for s in chosen})
        for name in only:
            if name not in valid:
                raise registry.UnknownNameError(f"version on {device}", name, valid)
        chosen = [s for s in chosen if s.framework in only or s.label in only]
    return chosen


def asv_config(stacks: list[Stack], repo: Path = REPO_ROOT) -> dict:
    """The asv configuration that records the sweep's stored cells: asv.conf.json's own
    (the `checkout` environment: this interpreter, nothing built) with one environment per
    release in its matrix (MEMBENCH_STACK), whose benchmarks read that release's store."""
    base = json.loads((repo / "asv.conf.json").read_text())
    return {
        **base,
        "repo": str(repo),
        "benchmark_dir": str(repo / "benchmarks"),
        "results_dir": str(paths.asv_results(paths.results_of(repo))),
        "html_dir": str(repo / ".asv" / "html"),
        "matrix": {"env": {"MEMBENCH_STACK": [s.spec for s in stacks]}},
    }


def write_asv_config(stacks: list[Stack], repo: Path = REPO_ROOT) -> Path:
    path = repo / ".asv" / "versions.conf.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asv_config(stacks, repo), indent=2) + "\n")
    return path


def index_versions(
    distribution: str, pip: Sequence[str] = (sys.executable, "-m", "pip")
) -> list[str]:
    """The releases the package index serves for a distribution, newest first (pip's own
    index query, `pip index versions`); [] when the index cannot be asked."""
    done = subprocess.run(
        [*pip, "index", "versions", distribution, "--disable-pip-version-check"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return []


def seen_by(served: dict[str, list[str]]) -> dict[str, list[str]]:
    """What several interpreters see on the index merged: release -> the interpreters
    ("3.12") that are served it, oldest first (pip asks with its interpreter's version and
    leaves out the releases whose Requires-Python excludes it)."""
    seen: dict[str, list[str]] = {}
    for minor in sorted(served, key=Version):
        for version in served[minor]:
            seen.setdefault(version, []).append(minor)
    return seen


def newer_releases(stacks: list[Stack], served: list[str]) -> list[str]:
    """The final releases in served newer than the newest listed (pre-releases and local
    builds aside), oldest first."""
    listed = [Version(s.version.split("+")[0]) for s in stacks]
    newest = max(listed) if listed else None
    found = []
    for text in served:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version.is_prerelease or version.local or (newest and version <= newest):
            continue
        found.append(version)
    return [str(v) for v in sorted(set(found))]


def proposed_spec(newest: Stack, version: str) -> str:
    """The newest listed line's spec moved to a new release: every pin that carried the
    framework's version (jax and jaxlib) takes the new one, the companions stay."""
    pins = [re.match(r"^(.+?)(===?)(.+)$", pin) for pin in newest.spec.split()]
    return " ".join(
        pin.string
        if not pin
        else f"{pin[1]}{pin[2]}{version if pin[3] == newest.version else pin[3]}"
        for pin in pins
    )


def dry_run(spec: str, pip: Sequence[str] = (sys.executable, "-m", "pip")) -> str:
    """'' when pip resolves the spec (a dry run: nothing installed), else pip's reason: the
    lines under "The conflict is caused by" where pip gives them (a constraint file's cap
    among them), else its last error."""
    done = subprocess.run(
        [*pip, "install", "--dry-run", "--disable-pip-version-check", "--ignore-installed",
         *spec.split()],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if done.returncode == 0:
        return ""
    text = done.stdout + done.stderr
    if "The conflict is caused by:" in text:
        cause = text.split("The conflict is caused by:", 1)[1].split("\n\n", 1)[0]
        return "; ".join(line.strip() for line in cause.splitlines() if line.strip())
    errors = [ln for ln in text.splitlines() if ln.startswith("ERROR")]
    return errors[-1] if errors else f"pip exited with {done.returncode}"
