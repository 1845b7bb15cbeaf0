"""Convert asv result files written before presets were part of asv's benchmark names, and
before the checkout's environment had a name of its own, to today's names: the history kept,
nothing measured again. Idempotent (a converted file is left as it is).

    .venv/bin/python scripts/migrations/migrate_asv_results.py [--results results] [--python 3.11]

- `suite.Resnet50.track_x` becomes `suite.Resnet50_<preset>.track_x` (and
  `suite.Resnet50Capacity` `suite.Resnet50Capacity_<preset>`), the preset being the one whose
  records (or capacity search) the same commit stored under results/ on the same machine;
  a commit whose records name several presets is reported and left alone (its asv results
  mixed them under one name, which no renaming can split).
- The environment `existing-py_<path of the interpreter>` becomes `checkout-py<X.Y>`
  (membench/publish/asv_plugin.py), X.Y given by --python (default: this interpreter's version,
  which must be the one that measured them); asv's file name follows it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from asv.environment import get_env_name
from asv.results import get_filename
from asv.util import write_json

from membench import paths, registry
from membench.publish.asv_plugin import ENVIRONMENT_TYPE

_OLD_CLASS = re.compile(r"^suite\.([A-Za-z0-9]+?)(Capacity)?\.(\w+)$")


def _presets_of(results: Path, machine: str, commit: str, capacity: bool) -> set[str]:
    """Presets whose records (or capacity searches) this commit stored on this machine."""
    short = commit[:12]
    if capacity:  # the suite had capacity classes at every commit: n/a where none searched
        folders = (results / "capacity" / machine).glob(f"*-*mib-{short}")
        searched = {f.name.rsplit("-", 2)[0] for f in folders}
        return searched or _presets_of(results, machine, commit, False)
    found = set()
    for folder in (results / "records" / machine).glob(f"*-{short}"):
        name = folder.name[: -len(short) - 1]
        found.add(name.removeprefix("versions-"))
    return found & set(registry.PRESETS)


def _workload_of(camel: str) -> str | None:
    return next((w for w in registry.WORKLOADS if paths.asv_class_name(w, "x")[:-2] == camel), None)


def migrate(path: Path, results: Path, python: str) -> tuple[Path, str]:
    """Convert one result file; (its path now, what happened)."""
    data = json.loads(path.read_text())
    machine = path.parent.name
    commit = data["commit_hash"]
    renamed = {}
    for name, value in data["results"].items():
        match = _OLD_CLASS.match(name)
        workload = _workload_of(match.group(1)) if match else None
        if workload is None:  # already named with its preset, or not the suite's
            renamed[name] = value
            continue
        capacity = bool(match.group(2))
        presets = _presets_of(results, machine, commit, capacity)
        if len(presets) != 1:
            return path, f"left alone: commit {commit[:12]} stored presets {sorted(presets)}"
        (preset,) = presets
        new = f"suite.{paths.asv_class_name(workload, preset, capacity)}.{match.group(3)}"
        renamed[new] = value
    data["results"] = renamed
    if data["env_name"].startswith("existing-py"):
        data["env_name"] = get_env_name(ENVIRONMENT_TYPE, python, {}, {})
        data["python"] = data["params"]["python"] = python
    target = results / "asv" / get_filename(machine, commit, data["env_name"])
    data.pop("version", None)
    write_json(target, data, api_version=2, compact=True)
    if target != path:
        path.unlink()
    return target, "converted"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=paths.RESULTS)
    parser.add_argument(
        "--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}",
        help="the Python version of the interpreter that measured the files",
    )  # fmt: skip
    args = parser.parse_args(argv)
    problems = 0
    for path in paths.asv_result_files(paths.asv_results(args.results)):
        target, what = migrate(path, args.results, args.python)
        problems += what != "converted"
        print(f"{path.name} -> {target.name}: {what}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
