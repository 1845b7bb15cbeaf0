"""Give the capacity benchmarks of asv's result files their budget, the third parameter of
membench.publish.asv_suite.CapacityBenchmarks (MiB): nothing measured again.

    .venv/bin/python scripts/migrations/migrate_asv_capacity.py [--results results] [--dry-run]

Before, a capacity class's parameters were framework x strategy, and a commit's value came
from whichever of its budgets was searched last: the history of
`Resnet50Capacity_cpu_capacity.track_largest_batch('torch', 'amp-bf16')` set a 3 GiB answer
beside a 2 GiB one. Each entry is read again from the capacity runs its commit made on its
machine (results/capacity/<machine>/<preset>-<budget>mib-<commit>/capacity.json), at every
budget its preset declares, by the benchmark's own code (asv_suite.stored_search), so a
commit's file also gains the budgets whose values the last search had overwritten. An entry
whose commit has no run of a declared budget on record, or whose class the catalogue no longer
has (a preset that declares no budget), is left as it was: asv no longer draws it (its
parameters are not the class's), and a later `asv run` of that class at that commit replaces
it. A release environment's file (MEMBENCH_STACK) is left alone: the runs name no release.
Idempotent; run again after copying a commit's capacity runs in (a search resumed from another
checkout), it records them as asv would have, keeping every value the runs no longer give.
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
_CHECKOUT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_CHECKOUT))

from membench import paths  # noqa: E402
from membench.publish import asv_suite  # noqa: E402
from membench.records import CapacityResult  # noqa: E402
from scripts.migrations.migrate_asv_grid import asv_row, is_measured, kept_params, regrid  # noqa: E402


def _search(
    cls: type, params: tuple, machine: str, commit: str, results: Path
) -> CapacityResult | None:
    """The commit's search of one parameter set (asv_suite.stored_search), or None: n/a."""
    if params in cls.skip_params:
        return None
    framework, strategy, budget_mib = params
    try:
        return asv_suite.stored_search(
            cls.preset, cls.workload, framework, strategy, budget_mib, machine, commit, results
        )
    except NotImplementedError:
        return None


def _value(cls: type, method: str, params: tuple, result: CapacityResult | None) -> float:
    """What the class's track_ method reports for one parameter set's search (NaN: n/a, as
    asv stores a skipped set)."""
    if result is None:
        return math.nan
    bench = cls()
    bench.result = result
    try:
        return getattr(bench, method)(*params)
    except SkipNotImplemented:
        return math.nan


def _searched(cls: type, machine: str, commit: str, results: Path) -> bool:
    """Whether the commit has a run of one of the class's budgets on this machine."""
    return any(
        paths.capacity_files(results, machine, cls.preset, commit, budget_mib=b)
        for b in cls.params[2]
    )


def convert(data: dict, machine: str, results: Path) -> tuple[dict, list[str]]:
    """One result file's data (asv's format 2) with its capacity entries read from the
    commit's runs at each budget; and the names of those that changed. A value the runs do
    not give (n/a today) leaves what the entry held at that parameter set, and a parameter
    value today's grid lacks stays where it holds a value (scripts/migrations/migrate_asv_grid.py's
    rule): nothing measured is dropped."""
    classes = asv_suite.capacity_classes()
    columns = data["result_columns"]
    commit = data["commit_hash"]
    out, converted = {}, []
    searches: dict[tuple, CapacityResult | None] = {}  # (class, parameter set): read once
    for name, row in data["results"].items():
        _, class_name, method = name.split(".")
        cls = classes.get(class_name)
        entry = dict(zip(columns, row, strict=False))
        if (
            cls is None
            or method not in asv_suite.CAPACITY_TRACKS
            or (data.get("env_vars") or {}).get("MEMBENCH_STACK")  # a release's environment
            or not _searched(cls, machine, commit, results)
        ):
            out[name] = row
            continue
        today = [[repr(v) for v in axis] for axis in cls.params]
        read = {}
        for params in itertools.product(*cls.params):
            if (class_name, params) not in searches:
                searches[class_name, params] = _search(cls, params, machine, commit, results)
            result = searches[class_name, params]
            read[tuple(repr(v) for v in params)] = _value(cls, method, params, result)
        if len(entry.get("params") or []) == len(today):  # with its budget: keep what it holds
            base = regrid(entry, kept_params(entry, today))
        else:  # the old form: its values are the runs' (no budget says where else they go)
            base = {key: entry.get(key) for key in ("version", "started_at", "duration")}
            base["params"] = today
        held = base.get("result") or [math.nan] * len(list(itertools.product(*base["params"])))
        base["result"] = [
            read[values] if is_measured(read.get(values)) else value
            for values, value in zip(itertools.product(*base["params"]), held, strict=True)
        ]
        out[name] = asv_row(base, columns)
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
