"""Give the capacity benchmarks of asv's result files their budget, the third parameter of
membench.publish.asv_suite.CapacityBenchmarks (MiB): nothing measured again.

    .venv/bin/python scripts/migrate_asv_capacity.py [--results results] [--dry-run]

Before, a capacity class's parameters were framework x strategy, and a commit's value came
from whichever of its budgets was searched last: the history of
`Resnet50Capacity_cpu_capacity.track_largest_batch('torch', 'amp-bf16')` set a 3 GiB answer
beside a 2 GiB one. Each entry is read again from the capacity runs its commit made on its
machine (results/capacity/<machine>/<preset>-<budget>mib-<commit>/capacity.json), at every
budget its preset declares, by the benchmark's own code (asv_suite.stored_search), so a
commit's file also gains the budgets whose values the last search had overwritten. An entry
whose commit has no run of a declared budget on record, or whose class the catalogue no longer
has (a preset that declares no budget), is left as it was: asv no longer draws it, and nothing
measured is dropped. Idempotent; run again after copying a commit's capacity runs in (a
search resumed from another checkout), it records them as asv would have.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

from asv.util import write_json
from asv_runner.benchmarks.mark import SkipNotImplemented

# this checkout's membench and results/, even where another checkout's is the one installed
_CHECKOUT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_CHECKOUT))

from membench import paths  # noqa: E402
from membench.publish import asv_suite  # noqa: E402


def _value(
    cls: type, method: str, params: tuple, machine: str, commit: str, results: Path
) -> float:
    """What the class's track_ method reports for one parameter set from the commit's runs
    (NaN: n/a, as asv stores a skipped set)."""
    if params in cls.skip_params:
        return math.nan
    framework, strategy, budget_mib = params
    bench = cls()
    try:
        bench.result = asv_suite.stored_search(
            cls.preset, cls.workload, framework, strategy, budget_mib, machine, commit, results
        )
        return getattr(bench, method)(*params)
    except (NotImplementedError, SkipNotImplemented):
        return math.nan


def _searched(cls: type, machine: str, commit: str, results: Path) -> bool:
    """Whether the commit has a run of one of the class's budgets on this machine."""
    return any(
        paths.capacity_files(results, machine, cls.preset, commit, budget_mib=b)
        for b in cls.params[2]
    )


def convert(data: dict, machine: str, results: Path) -> tuple[dict, list[str]]:
    """One result file's data (asv's format 2) with its capacity entries read from the
    commit's runs at each budget; and the names of those that changed."""
    classes = asv_suite.capacity_classes()
    columns = data["result_columns"]
    commit = data["commit_hash"]
    out, converted = {}, []
    for name, row in data["results"].items():
        _, class_name, method = name.split(".")
        cls = classes.get(class_name)
        entry = dict(zip(columns, row, strict=False))
        if (
            cls is None
            or method not in asv_suite.CAPACITY_TRACKS
            or not _searched(cls, machine, commit, results)
        ):
            out[name] = row
            continue
        sets = list(itertools.product(*cls.params))
        values = [_value(cls, method, params, machine, commit, results) for params in sets]
        new = {
            "result": values,
            "params": [[repr(v) for v in axis] for axis in cls.params],
            "version": entry.get("version"),
            "started_at": entry.get("started_at"),
            "duration": entry.get("duration"),
        }
        out[name] = [new.get(key) for key in columns]
        while out[name] and out[name][-1] is None:  # as asv saves a row
            out[name].pop()
        if json.dumps(out[name]) != json.dumps(row):  # NaN is not equal to itself
            converted.append(name)
    return {**data, "results": out}, converted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=paths.RESULTS)
    parser.add_argument("--dry-run", action="store_true", help="say what would change only")
    args = parser.parse_args(argv)
    for path in paths.asv_result_files(paths.asv_results(args.results)):
        data = json.loads(path.read_text())
        new, converted = convert(data, path.parent.name, args.results)
        if not converted:
            continue
        print(f"{path.parent.name}/{path.name}: {', '.join(converted)}")
        if not args.dry_run:
            new.pop("version", None)
            write_json(path, new, api_version=2, compact=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
