"""The memory model's guess for every stored capacity search, written again with the
calibrations at hand now (`membench predict`), so that a new calibration is scored against the
committed answers without searching again. The guess comes from the spec and the calibration
cells alone (membench.capacity.first_guess.model_guess): nothing a search measured enters it. The
search's own first guess (`predicted_batch`, what guided it) stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from membench import file_rules, paths, registry
from membench.capacity.first_guess import Ran, model_fields
from membench.capacity.search_steps import Budget
from membench.memory.calibration import Calibration
from membench.records import Cell, RecordStore, save_capacity_items
from membench.store_lock import store_lock


@dataclass
class Rescored:
    searches: int = 0  # searches whose workload, strategy and preset this checkout knows
    changed: list[Path] = field(default_factory=list)  # rewritten (or, with check, stale)
    skipped: list[str] = field(default_factory=list)  # files that are not capacity results


def ran(run: Path, item: dict[str, Any]) -> Ran | None:
    """What a stored search ran (its inputs and framework version), from its first probe's
    record; None where that record is not there or does not say."""
    if not item.get("probes"):
        return None
    batch = int(item["probes"][0]["batch_size"])
    cell = Cell(item["workload"], item["framework"], item["strategy"], batch, item["preset"])
    record = RecordStore(run / paths.PROBES).get(cell)
    if record is None:
        return None
    inputs, version = (record.environment.get(k) for k in ("workload_inputs", "framework_version"))
    return Ran(dict(inputs), str(version)) if inputs and version else None


def rescored(
    item: dict[str, Any], run: Path, calibrations: Mapping[tuple[str, str, str], Calibration]
) -> dict[str, Any] | None:
    """A stored search with the model's guess now, for the inputs and framework version it
    ran (else the preset's and the installed one), or None where this checkout cannot guess
    it (a name it does not know)."""
    names = (item["workload"], item["strategy"], item["preset"])
    known = (registry.WORKLOADS, registry.STRATEGIES, registry.PRESETS)
    if any(name not in among for name, among in zip(names, known, strict=True)):
        return None
    if item["workload"] not in registry.preset(item["preset"]).sizes:
        return None
    budget = Budget(float(item["budget_bytes"]), item["budget_layer"], item["budget_enforced"])
    machine = run.parent.name  # a run folder lies in its machine's (paths.capacity_run)
    found = model_fields(
        item["workload"], item["framework"], item["strategy"], item["preset"], budget, machine,
        calibrations, ran(run, item),
    )  # fmt: skip
    return {**item, **found}


def rescore(
    results: Path, calibrations: Mapping[tuple[str, str, str], Calibration], check: bool = False
) -> Rescored:
    """Write the model's guess now into every stored capacity search whose guess differs
    (check: only list the files). Each run's folder is held against a run writing it."""
    done = Rescored()
    for path in paths.capacity_files(results):
        with nullcontext() if check else store_lock(path.parent):
            try:
                data = file_rules.load_json(path)
                new = [rescored(item, path.parent, calibrations) for item in data]
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                # a file that is not capacity results, or a probe record that cannot be read
                done.skipped.append(f"{path}: {type(exc).__name__}: {exc}")
                continue
            done.searches += sum(n is not None for n in new)
            new = [n if n is not None else old for n, old in zip(new, data, strict=True)]
            if new == data:
                continue
            done.changed.append(path)
            if not check:
                save_capacity_items(new, path)
    return done
