"""Convert asv result files written before the suite's classes held only the cells their preset
runs (membench.publish.asv_suite.Grid) to today's catalogue, results/asv/benchmarks.json: nothing
measured again, nothing measured dropped. Idempotent (a converted file is left as it is).

    .venv/bin/python scripts/migrations/migrate_asv_grid.py [--results results]

Regenerate the catalogue first (docs/versions.md, "asv on its own"). In every result file:

- `track_memory_prediction_error_calibrated` (the signed error, pred/meas - 1, which asv read
  as better the more negative it got) becomes `track_memory_prediction_abs_error_calibrated`,
  its size |pred/meas - 1|: asv reads every benchmark as lower is better.
- Each benchmark's parameters become the catalogue's (asv's product of the frameworks,
  strategies and batch sizes the preset runs), each value moved to its parameter set; a
  parameter value the catalogue no longer lists stays where one of its sets holds a value.
- A benchmark the catalogue no longer has (track_memory_prediction_error, device memory on a
  CPU preset, sums and maxima over ranks where no strategy shards) is dropped where it holds
  no value, kept as it is where it holds one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

from asv.util import write_json

# this checkout's membench and results/, even where another checkout's is the one installed
_CHECKOUT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_CHECKOUT))

from membench import paths  # noqa: E402

SIGNED = ".track_memory_prediction_error_calibrated"
MAGNITUDE = ".track_memory_prediction_abs_error_calibrated"


def is_measured(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _per_set(key: str) -> bool:
    """Whether a result column holds one entry per parameter set (asv's results format 2)."""
    return key in ("result", "samples") or key.startswith("stats_")


def regrid(entry: dict, params: list[list[str]]) -> dict:
    """One benchmark's entry over new parameters: each set's values moved to its place there
    (asv.results._compatible_results's rule), a set the file did not have skipped (NaN: n/a
    to asv, where None would read as a failure)."""
    old_sets = list(itertools.product(*entry["params"]))
    place = {values: j for j, values in enumerate(old_sets)}
    out = dict(entry, params=params)
    for key in ("result", *(k for k in entry if _per_set(k) and k != "result")):
        column = entry.get(key) or [None] * len(old_sets)
        absent = math.nan if key == "result" else None
        moved = [
            column[place[values]] if values in place else absent
            for values in itertools.product(*params)
        ]
        out[key] = moved if any(v is not None for v in moved) else None  # as asv saves
    return out


def kept_params(entry: dict, catalogue_params: list[list[str]]) -> list[list[str]]:
    """The catalogue's parameter values, then any old value one of whose sets holds a value."""
    measured = [
        values
        for values, value in zip(
            itertools.product(*entry["params"]), entry["result"] or [], strict=False
        )
        if is_measured(value)
    ]
    return [
        list(axis) + [v for v in old if v not in axis and any(m[i] == v for m in measured)]
        for i, (axis, old) in enumerate(zip(catalogue_params, entry["params"], strict=True))
    ]


def asv_row(entry: dict, columns: list[str]) -> list:
    """asv's row of a benchmark: its columns in order, trailing empty ones left out."""
    row = [entry.get(key) for key in columns]
    while row and row[-1] is None:
        row.pop()
    return row


def convert(data: dict, catalogue: dict) -> dict:
    """One result file's data (asv's format 2) converted to the catalogue."""
    columns = data["result_columns"]
    results = {}
    for name, row in data["results"].items():
        entry = dict(zip(columns, row, strict=False))
        if name.endswith(SIGNED):
            name = name[: -len(SIGNED)] + MAGNITUDE
            entry["result"] = [
                abs(v) if is_measured(v) else v for v in entry.get("result") or []
            ] or None
        bench = catalogue.get(name)
        if bench is None or not entry.get("params"):
            if bench is not None or any(is_measured(v) for v in entry.get("result") or []):
                results[name] = asv_row(entry, columns)
            continue
        if len(bench["params"]) != len(entry["params"]):
            results[name] = asv_row(entry, columns)  # another parametrization: left as it was
            continue
        results[name] = asv_row(regrid(entry, kept_params(entry, bench["params"])), columns)
    return {**data, "results": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=paths.RESULTS)
    args = parser.parse_args(argv)
    root = paths.asv_results(args.results)
    catalogue = json.loads((root / paths.ASV_BENCHMARKS).read_text())
    for path in paths.asv_result_files(root):
        data = json.loads(path.read_text())
        converted = convert(data, catalogue)
        if json.dumps(converted) == json.dumps(data):  # NaN is not equal to itself
            print(f"{path.name}: as it was")
            continue
        converted.pop("version", None)
        write_json(path, converted, api_version=2, compact=True)
        print(f"{path.name}: converted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
