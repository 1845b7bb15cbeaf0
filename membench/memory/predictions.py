"""The memory model's prediction of a cell, as its record carries it.

The worker writes these terms into every record it measures (spec-only, and with this
machine's stored calibration of the framework version where there is one); `analysis`
reads them from the records and never recomputes them. `membench predict` writes them
again into stored records, from the current model and calibrations, when either has
changed since the records were measured (or the records predate calibration). Nothing
measured in a cell enters its prediction; a calibration cell is never predicted with
constants (they may have been fitted on it).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from membench import file_rules, paths, registry
from membench.memory.calibration import Calibration, find, load_all
from membench.memory.memory_model import MEASURED, model_state_error, predict
from membench.metrics import (
    CALIBRATED_ERROR,
    MODEL_STATE_BYTES,
    MODEL_STATE_PREDICTION_ERROR,
    PREDICTED_ACTIVATIONS_BYTES,
    PREDICTED_GATHERED_PARAMETERS_BYTES,
    PREDICTED_GRADIENTS_BYTES,
    PREDICTED_INPUTS_BYTES,
    PREDICTED_MODEL_STATE_BYTES,
    PREDICTED_OPTIMIZER_STATE_BYTES,
    PREDICTED_PARAMETERS_BYTES,
    PREDICTED_PEAK_BYTES,
    PREDICTED_PEAK_CALIBRATED_BYTES,
    PREDICTED_RUNTIME_BYTES,
    PREDICTION_ENV,
    SPEC_ONLY_ERROR,
)
from membench.records import Cell, write_json_atomic
from membench.store_lock import store_lock

# the metrics a prediction writes (a record measured by ranks keeps its device summary's)
PREDICTION_METRICS = (
    PREDICTED_PEAK_BYTES, PREDICTED_PARAMETERS_BYTES, PREDICTED_GRADIENTS_BYTES,
    PREDICTED_OPTIMIZER_STATE_BYTES, PREDICTED_INPUTS_BYTES, PREDICTED_ACTIVATIONS_BYTES,
    PREDICTED_GATHERED_PARAMETERS_BYTES, PREDICTED_PEAK_CALIBRATED_BYTES,
    SPEC_ONLY_ERROR, CALIBRATED_ERROR,
)  # fmt: skip


def prediction(
    cell: Cell,
    inputs: dict[str, int],
    metrics: dict[str, float],
    env: dict[str, Any],
    calibration: Calibration | None,
) -> dict[str, float]:
    """The model's terms for a cell and their errors against its measured peak of the same
    layer (the allocator's on a GPU, the host's on a CPU); env gains what the prediction
    used (the strategy's mode, the calibration's provenance)."""
    strategy = registry.strategy(cell.strategy)
    args = (cell.workload, strategy, cell.batch_size, inputs)
    spec_only = predict(*args, world_size=cell.world_size)
    env.pop("calibration", None)
    if spec_only is None:
        return {}
    env[PREDICTION_ENV] = {"mode": strategy.mode}
    kind = "gpu" if env.get("device") == "cuda" else "cpu"
    measured = metrics.get(MEASURED[kind])
    out = {k: v for k, v in spec_only.as_metrics().items() if k != PREDICTED_RUNTIME_BYTES}
    if cell.world_size > 1 and metrics.get(MODEL_STATE_BYTES):
        out[PREDICTED_MODEL_STATE_BYTES] = spec_only.model_state
        out[MODEL_STATE_PREDICTION_ERROR] = model_state_error(spec_only, metrics[MODEL_STATE_BYTES])
    if measured:
        out[SPEC_ONLY_ERROR] = spec_only.total / measured - 1
    usable = calibration is not None and calibration.device_kind == kind
    if usable and cell.preset != registry.CALIBRATION_PRESET:
        constants = calibration.constants(cell.workload, cell.strategy)
        if constants is not None:
            env["calibration"] = {
                "commit": calibration.commit,
                "created_at": calibration.created_at,
            }
            calibrated = predict(*args, constants, world_size=cell.world_size)
            out[PREDICTED_PEAK_CALIBRATED_BYTES] = calibrated.total
            if measured:
                out[CALIBRATED_ERROR] = calibrated.total / measured - 1
    return out


def stored_calibration(cell: Cell, env: dict[str, Any]) -> Calibration | None:
    """This machine's stored calibration of the record's framework version, if any."""
    return find(str(env.get("machine")), cell.framework, str(env.get("framework_version")))


# -- writing the current model's terms into stored records ---------------------------------
@dataclass
class Refreshed:
    records: int = 0  # ok records of one rank that the model covers
    changed: list[Path] = field(default_factory=list)  # rewritten (or, with check, stale)
    skipped: list[str] = field(default_factory=list)  # files that are not records, and why


def record_stores(results: Path) -> list[tuple[Path, Path]]:
    """(the folder a run holds, its records): the presets' stores and the capacity runs'
    probes."""
    stores = [s for s in sorted(paths.records_root(results).glob("*/*")) if s.is_dir()]
    return [(s, s) for s in stores] + [(p.parent, p) for p in paths.probe_stores(results)]


def refreshed(data: dict[str, Any], machine: str, calibrations: dict) -> dict[str, Any] | None:
    """A record's JSON with the current model's terms, or None where it has none to hold
    (not ok, of several ranks, or a name or workload this checkout does not model)."""
    cell = Cell.from_dict(data["cell"])
    if data.get("status") != "ok" or cell.world_size != 1:
        return None
    if cell.strategy not in registry.STRATEGIES or cell.preset not in registry.PRESETS:
        return None
    env = dict(data.get("environment") or {})
    written_by = (env.get(PREDICTION_ENV) or {}).get("written_by")
    inputs = env.get("workload_inputs") or registry.preset(cell.preset).size(cell.workload).inputs
    metrics = {k: v for k, v in data["metrics"].items() if k not in PREDICTION_METRICS}
    key = (env.get("machine", machine), cell.framework, env.get("framework_version"))
    terms = prediction(cell, dict(inputs), metrics, env, calibrations.get(key))
    if not terms:
        return None
    if written_by:
        env[PREDICTION_ENV]["written_by"] = written_by
    return {**data, "environment": env, "metrics": {**metrics, **terms}}


def refresh(
    results: Path, written_by: dict[str, Any], check: bool = False, calibrations: dict | None = None
) -> Refreshed:
    """Write the current model's terms into every stored record whose terms differ, naming
    the commit that wrote them (check: only list them). Measured values, statuses and all
    else stay as they are. Each store is held against runs (StoreLockedError), and a record
    changed between the read and the write (asv's recording takes no lock) is left as it is
    and named in skipped."""
    calibrations = load_all(results) if calibrations is None else calibrations
    done = Refreshed()
    for held, store in record_stores(results):
        machine = store.relative_to(results).parts[1]  # records/<machine>/, capacity/<machine>/
        with nullcontext() if check else store_lock(held):
            for path in paths.record_files(store):
                try:
                    data = file_rules.load_json(path)
                    new = refreshed(data, machine, calibrations)
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    done.skipped.append(f"{path}: {type(exc).__name__}: {exc}")
                    continue
                if new is None:
                    continue
                done.records += 1
                if new == data:
                    continue
                if check:
                    done.changed.append(path)
                    continue
                new["environment"][PREDICTION_ENV]["written_by"] = written_by
                # a writer that holds no lock (asv's recording) may have changed it meanwhile
                if file_rules.load_json(path) != data:
                    done.skipped.append(f"{path}: changed while read; run membench predict again")
                    continue
                write_json_atomic(path, new)
                done.changed.append(path)
    return done
