"""Framework versions as data: requirements/versions.txt -> one asv environment per line.

Each line of the versions file is a full pip spec (framework first) and the device kinds it
runs on. `membench versions` writes an asv configuration whose matrix holds those specs in
the MEMBENCH_STACK variable; asv creates one virtualenv per spec and runs
scripts/install_stack.py in it, which installs the spec with the suite. The benchmarks then
measure, inside each environment, only the framework the spec installs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from membench import paths, registry
from membench.environment import REPO_ROOT
from membench.stacks import DEVICE_KINDS, Stack, VersionsFileError, parse_stack

VERSIONS_FILE = REPO_ROOT / "requirements" / "versions.txt"


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


def asv_config(stacks: list[Stack], repo: Path = REPO_ROOT, benchmarks: Path | None = None) -> dict:
    """The asv configuration of the version matrix (written by `membench versions`)."""
    base = json.loads((repo / "asv.conf.json").read_text())
    return {
        **base,
        "repo": str(repo),
        "benchmark_dir": str(benchmarks or repo / "benchmarks"),
        "results_dir": str(paths.asv_results(paths.results_of(repo))),
        "html_dir": str(repo / ".asv" / "html"),
        "env_dir": str(repo / ".asv" / "env-versions"),
        "environment_type": "virtualenv",
        "matrix": {"env": {"MEMBENCH_STACK": [s.spec for s in stacks]}},
        # asv builds the suite's wheel; the stack's spec goes in beside it.
        "install_command": [
            "in-dir={env_dir} python {build_dir}/scripts/install_stack.py {wheel_file}"
        ],
        "uninstall_command": ["return-code=any python -m pip uninstall -y {project}"],
        "build_command": ["python -m pip wheel --no-deps -w {build_cache_dir} {build_dir}"],
        "install_timeout": 3600,
    }


def snapshot_benchmarks(commit: str, repo: Path = REPO_ROOT) -> Path:
    """The commit's benchmarks/ under .asv/: asv imports benchmark files from its
    benchmark_dir while the environments hold the commit's wheel, so an edit to the working
    tree during a long run must not reach them."""
    target = repo / ".asv" / f"benchmarks-{commit[:12]}"
    if not target.exists():
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", commit, "benchmarks"], cwd=repo, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        (tmp / "benchmarks").rename(target.with_name(target.name + ".dir"))
        shutil.rmtree(tmp)
        target.with_name(target.name + ".dir").rename(target)
    return target


def write_asv_config(stacks: list[Stack], commit: str, repo: Path = REPO_ROOT) -> Path:
    path = repo / ".asv" / "versions.conf.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    config = asv_config(stacks, repo, snapshot_benchmarks(commit, repo))
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path
