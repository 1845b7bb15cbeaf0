"""The capacity searches' files under results/capacity/ into DataFrames: one row per search
(load_capacity: its answer, the details of its probes and runs at the boundary, and a stopped
search's reason), every probe (load_capacity_probes) and every probe's wall time
(load_search_walls). A corrupt or foreign file is reported by name and skipped, as the
loader does.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.labels import layer_word
from analysis.loader import LoadResult, empty_result, load_records, recorded_mode
from analysis.schema import (
    MIB,
)
from membench import file_rules, paths
from membench.metrics import (
    ANY_DEVICE_PEAK,
    BUSY_METRIC,
    LIFE_METRIC,
    measured_alone,
    quiet_speeds,
    share_behind_speed,
    steady_beside,
)
from membench.records import (
    UNSETTLED,
    CapacityResult,
    Cell,
    CorruptRecordError,
    NotARecordError,
    ProbeBudget,
    Record,
    RecordStore,
    read_record,
)

SEARCH_WALL_COLUMNS = ["machine", "run", "preset", "workload", "framework", "strategy", "seconds"]


def load_search_walls(results_dir: Path) -> pd.DataFrame:
    """Every capacity probe's wall time, its boundary repeats' and warm-up cells' included
    (each run's probes/, probes-repeat-<k>/ and probes-warm-up/): what its searches cost.
    Unreadable files are load_capacity_probes' to name; here they are skipped."""
    rows = []
    for probes in paths.probe_stores(results_dir):
        run = probes.parent
        stores = [*paths.answer_stores(run), paths.warm_up_probes(probes)]
        for path in (p for store in stores if store.is_dir() for p in paths.record_files(store)):
            try:
                record = read_record(path)
            except CorruptRecordError:
                continue
            rows.append({
                "machine": run.parent.name, "run": run.name, "preset": record.cell.preset,
                "workload": record.cell.workload, "framework": record.cell.framework,
                "strategy": record.cell.strategy, "seconds": record.wall_seconds,
            })  # fmt: skip
    return pd.DataFrame(rows, columns=SEARCH_WALL_COLUMNS)


def load_capacity_probes(results_dir: Path) -> LoadResult:
    """The capacity searches' probes: ordinary cell records at the batches the searches
    tried (kept apart from results/records so that they do not join the presets' tables)."""
    frames, problems = [], []
    for probes in paths.probe_stores(results_dir):
        loaded = load_records(probes)
        frames.append(loaded.frame)
        problems.extend(loaded.problems)
    frames = [f for f in frames if len(f)]
    return LoadResult(pd.concat(frames, ignore_index=True) if frames else empty_result(), problems)


# Fields a capacity search gained with the model-guided search: absent from older files
# (read as NaN or "").
CAPACITY_EXTRAS = {
    "predicted_batch": math.nan,  # the calibrated memory model's predicted largest batch
    "prediction_basis": "",  # "calibrated", "spec-only" or ""
    "search": "",  # "guided" or "bisection"
    "bisection_probes": math.nan,  # probes plain doubling + bisection from 1 would have taken
    # batches measured for the prediction (XLA's first-run extra; the calibration cells of its
    # constants): () before
    "prediction_measured_batches": (),
    # the memory model's guess with the calibrations of the latest `membench predict`
    "model_batch": math.nan,
    "model_basis": "",
}


# What the boundary's repeats and the answer's records say (NaN, "" or () where a file is
# older than them): the margin's figures in MiB, the fit's R^2, the foreign CPU share behind
# the answer's speed and the samples/s of each of its quiet runs, what the backend says of
# the strategy at the answer (its dtype), the strategy's mode they store, and every probe's
# (batch, peak bytes) for the fits across budgets.
CAPACITY_DETAILS = [
    "fit_r2", "repeats", "margin_mib", "over_mib", "spread_mib", "steady_peak_at_fit_mib",
    "peak_at_fit_mib", "foreign_cpu_share_at_fit", "speed_runs_at_fit", "strategy_notes",
    "mode", "probe_peaks", "repeat_probes", "measured_at", "noise_room", "next_runs",
    "next_runs_over", "next_highest_over_mib", "fitted_every_run", "written_at",
]  # fmt: skip

CAPACITY_COLUMNS = [
    "machine", "run", "workload", "framework", "strategy", "preset", "budget_gib",
    "budget_layer", "largest_batch", "smallest_non_fit", "status", "reason", "probes",
    "throughput_at_capacity", "fit_per_sample_mib", "fit_fixed_mib", "note", *CAPACITY_EXTRAS,
    *CAPACITY_DETAILS, "run_at",
]  # fmt: skip


def _capacity_items(path: Path) -> list[tuple[CapacityResult, dict[str, Any]]]:
    """Each search of one file with its raw fields: fields this checkout's CapacityResult
    does not know (a newer file's) are kept aside rather than refused."""
    try:
        data = file_rules.load_json(path)
        known = {f.name for f in dataclasses.fields(CapacityResult)}
        return [(CapacityResult(**{k: v for k, v in item.items() if k in known}), item)
                for item in data]  # fmt: skip
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a capacity results file ({exc})") from None


def _or_nan(value: object) -> float:
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def _mib(value: object) -> float:
    return _or_nan(value) / MIB


def _answer_records(run: Path, r: CapacityResult) -> list[Record]:
    """The records of the answer's probes (the probes' store and the repeats' stores beside
    it); where nothing fits, the first probe's, which says what the strategy ran as."""
    batch = r.largest_fit or (r.probes[0].get("batch_size") if r.probes else None)
    if not batch:
        return []
    cell = Cell(r.workload, r.framework, r.strategy, int(batch), r.preset)
    found = []
    for store in paths.answer_stores(run):
        if store.is_dir():
            try:
                record = RecordStore(store).get(cell)
            except CorruptRecordError:
                continue
            if record is not None:
                found.append(record)
    return found


def _share_at_fit(r: CapacityResult, records: list[Record]) -> float:
    """The foreign CPU share behind the answer's speed: the result's own field; for a file
    older than it, from the answer's records by the same rule; NaN: not known (not busy)."""
    if r.foreign_cpu_share_at_fit is not None:
        return float(r.foreign_cpu_share_at_fit)
    share = share_behind_speed(x.metrics[BUSY_METRIC] for x in records if BUSY_METRIC in x.metrics)
    return _or_nan(share)


def _quiet_speeds(r: CapacityResult, records: list[Record]) -> tuple[float, ...]:
    """The samples/s of each of the answer's runs on a quiet host, sorted: the figures whose
    median the search published (membench.capacity.search.answer_speed's rule)."""
    if not r.largest_fit:
        return ()
    alone = [x for x in records if x.status == "ok" and measured_alone(x.environment)]
    return tuple(quiet_speeds(x.metrics for x in alone))


def _details(run: Path, r: CapacityResult) -> dict[str, Any]:
    records = _answer_records(run, r)
    fit_peaks = r.fit_peaks_bytes or [  # a file older than the repeats: the answer's probes
        p["peak_bytes"]
        for p in r.probes
        if p.get("batch_size") == r.largest_fit and p.get("peak_bytes") is not None
    ]
    nxt = r.non_fit_peaks_bytes or []
    points = tuple(
        (int(p["batch_size"]), float(p["peak_bytes"])) for p in r.probes
        if p.get("peak_bytes") is not None and p.get("layer", r.budget_layer) == r.budget_layer
    )  # fmt: skip
    return {
        "fit_r2": _or_nan(r.fit_r2), "repeats": r.repeats, "margin_mib": _mib(r.margin_bytes),
        "over_mib": _mib(r.over_bytes), "spread_mib": _mib(r.spread_bytes),
        # files written before b976f02 hold the host's RSS here even on a device budget
        "steady_peak_at_fit_mib": _mib(r.steady_peak_at_fit_bytes)
        if steady_beside(r.budget_layer) else math.nan,
        "peak_at_fit_mib": max(fit_peaks) / MIB if r.largest_fit and fit_peaks else math.nan,
        "foreign_cpu_share_at_fit": _share_at_fit(r, records),
        "speed_runs_at_fit": _quiet_speeds(r, records),
        "strategy_notes": dict(records[0].environment.get("strategy_notes") or {})
        if records else {},
        "mode": next((m for x in records if (m := recorded_mode(x.environment))), ""),
        "probe_peaks": points,
        "repeat_probes": sum(1 for p in r.probes if p.get("repeat", 1) > 1),
        # when the answer was measured (its latest record's start, ISO 8601; "" without one)
        "measured_at": max((x.started_at for x in records), default=""),
        "noise_room": r.noise_room,  # False in files written before the rule
        # the next batch's runs, how many went over the budget, its highest peak against it
        # (an answer put down for want of room is a next batch whose every run fitted)
        "next_runs": len(nxt), "next_runs_over": sum(p > r.budget_bytes for p in nxt),
        "next_highest_over_mib": _mib(max(nxt) - r.budget_bytes) if nxt else math.nan,
        "fitted_every_run": fitted_every_run(r),
        "written_at": r.written_at,
    }  # fmt: skip


def fitted_every_run(r: CapacityResult) -> int:
    """The largest batch every measurement of which fitted, measured as often as the search's
    boundaries (its repeats): the answer, or above it where the noise rule put it down for
    want of room (the top of the answer's noise band)."""
    runs: dict[int, list[bool]] = {}
    for p in r.probes:
        runs.setdefault(int(p["batch_size"]), []).append(bool(p.get("fits")))
    return max(
        (b for b, fitted in runs.items()
         if b >= r.largest_fit and len(fitted) >= r.repeats and all(fitted)),
        default=r.largest_fit,
    )  # fmt: skip


# A compiled guess's basis names the two batches at which it ran a step: "... the first
# run's extra (12 MiB at 4, 30 at 16: one step each) ...". Files written before the
# prediction kept those batches as a field of their own are read from it.
_STEPPED = re.compile(r"first run's extra \(-?\d+ MiB at (\d+), -?\d+ at (\d+): one step each\)")


def _measured_batches(raw: dict[str, Any]) -> tuple[int, ...]:
    """The batches measured for a search's prediction (its own steps, its calibration's cells)."""
    if kept := raw.get("prediction_measured_batches"):
        return tuple(int(b) for b in kept)
    found = _STEPPED.search(str(raw.get("prediction_basis") or ""))
    return tuple(int(b) for b in found.groups()) if found else ()


def load_capacity(results_dir: Path) -> LoadResult:
    """Every capacity search (membench.paths.capacity_files), one row
    per framework x workload x strategy, with the run's machine, folder and date (run_at); a
    search whose probes are stored but whose answer is not (stopped before it settled) is a
    row too, status UNSETTLED (_unsettled)."""
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    files = {path.parent: path for path in paths.capacity_files(results_dir)}
    for run in sorted({*files, *(p.parent for p in paths.probe_stores(results_dir))}):
        results = []
        if run in files:
            try:
                results = _capacity_items(files[run])
            except ValueError as exc:
                problems.append(f"skipped {exc}")
                continue
        for r, raw in results:
            extras = {k: raw.get(k, default) for k, default in CAPACITY_EXTRAS.items()}
            for name in ("predicted_batch", "bisection_probes", "model_batch"):
                extras[name] = _or_nan(extras[name])
            for name in ("prediction_basis", "search", "model_basis"):
                extras[name] = str(extras[name] or "")
            extras["prediction_measured_batches"] = _measured_batches(raw)
            rows.append({
                "machine": run.parent.name, "run": run.name,
                "workload": r.workload, "framework": r.framework, "strategy": r.strategy,
                "preset": r.preset, "budget_gib": r.budget_bytes / 2**30,
                "budget_layer": r.budget_layer, "largest_batch": r.largest_fit,
                "smallest_non_fit": r.smallest_non_fit, "status": r.status,
                "reason": r.reason, "probes": len(r.probes),
                "throughput_at_capacity": r.throughput_at_largest_fit,
                "fit_per_sample_mib": (r.fit_per_sample_bytes or math.nan) / MIB,
                "fit_fixed_mib": (r.fit_fixed_bytes or math.nan) / MIB, "note": r.note,
                **extras, **_details(run, r),
            })  # fmt: skip
        settled = {(r.workload, r.framework, r.strategy) for r, _ in results}
        layers = {r.framework: r.budget_layer for r, _ in results if r.budget_layer}
        budget = next((r.budget_bytes for r, _ in results), None)  # a run is one budget's
        rows += _unsettled(run, settled, layers, budget)
    return LoadResult(dated(pd.DataFrame(rows, columns=CAPACITY_COLUMNS)), problems)


def dated(capacity: pd.DataFrame) -> pd.DataFrame:
    """The searches with run_at, their run's date: the latest of its answers' records and of
    its results' writing, per machine and folder (a folder's name, which ends in the measuring
    commit's hash, says nothing of order); "" where a file predates both."""
    stamps = capacity[["measured_at", "written_at"]].fillna("").max(axis=1)
    latest = stamps.groupby([capacity["machine"], capacity["run"]]).transform("max")
    return capacity.assign(run_at=latest.astype(str))


# Where a stopped search's framework has no settled search in its run to name its budget's
# layer: the first of the frameworks' device peaks a GPU probe has (membench.metrics'
# FRAMEWORK_READINGS), else the host's whole-life peak (a CPU budget's).
DEVICE_LAYERS = ANY_DEVICE_PEAK


def _layer(record: Record, layer: str) -> str:
    """The metric a probe's peak is read from: the budget's layer, else a GPU's device layer,
    else the whole-life peak."""
    if not layer and record.environment.get("device") == "cuda":
        layer = next((m for m in DEVICE_LAYERS if m in record.metrics), "")
    return layer or LIFE_METRIC


def _peak(record: Record, layer: str) -> float | None:
    return record.metrics.get(_layer(record, layer))


def _said(record: Record, peak: float | None, layer: str) -> str:
    if record.status == "oom":
        return "out of memory"
    return f"{peak / MIB:,.0f} MiB {layer_word(_layer(record, layer))}" if peak else record.status


def _stopped_search(runs: dict[int, list[Record]], layer: str, limit: float) -> str:
    """What a stopped search's probes found: the largest batch whose every run stayed within
    the budget, the smallest one run of which went over it (a peak, or out of memory), and
    where that one is the smaller, that the answer lies under it (the noise rule's)."""
    within: tuple[int, str] | None = None
    over: tuple[int, str] | None = None
    for batch, records in sorted(runs.items()):
        peaks = [_peak(r, layer) for r in records]
        if any(r.status == "oom" for r in records) or any((p or 0) > limit for p in peaks):
            shown = [_said(r, p, layer) for r, p in zip(records, peaks, strict=True)]
            over = over or (batch, f"the smallest with a run over it: {batch} ({', '.join(shown)})")
        elif all(r.status == "ok" and p is not None for r, p in zip(records, peaks, strict=True)):
            top = max(p for p in peaks if p is not None)
            # the layer named: a GPU's reserve and its allocated peak differ by gigabytes
            named = f"{top / MIB:,.0f} MiB {layer_word(_layer(records[0], layer))}"
            peak = f"highest of {len(records)} runs: {named}" if len(records) > 1 else named
            within = (batch, f"the largest batch within the budget: {batch} ({peak})")
    said = ", ".join(part[1] for part in (within, over) if part)
    if within and over and over[0] < within[0]:
        said += f"; the runs' noise straddles the budget, so the answer lies below {over[0]}"
    return said


def _unsettled(
    run: Path, settled: set[tuple[str, str, str]], layers: dict[str, str], budget: float | None
) -> list[dict[str, Any]]:
    """The searches of one capacity run whose probes are stored but whose answer is not:
    stopped before they settled (interrupted, killed, a GPU command's time spent). A row each,
    status UNSETTLED, that says what its probes found (on the budget layer its framework's
    settled searches name, `layers`) and decides no batch: only a settled search, its boundary
    measured as often as its rule asks, gives a largest batch. The budget is the run's settled
    searches' (budget), else the one its probes' records ran under."""
    found: dict[tuple[str, str, str, str], dict[int, list[Record]]] = {}
    for store in paths.answer_stores(run):
        for path in sorted(store.glob("*.json")) if store.is_dir() else []:
            try:
                record = read_record(path)
            except (CorruptRecordError, NotARecordError, OSError, ValueError):
                continue  # a half-written probe says nothing
            c = record.cell
            if (c.workload, c.framework, c.strategy) not in settled:
                key = (c.workload, c.framework, c.strategy, c.preset)
                found.setdefault(key, {}).setdefault(c.batch_size, []).append(record)
    carried = (ProbeBudget.of_record(r) for by in found.values() for rs in by.values() for r in rs)
    budget = budget or next((b.bytes for b in carried if b), None)
    if budget is None:
        return []  # probes from before records carried their budget, and no answer to say it
    rows = []
    for (workload, framework, strategy, preset), runs in found.items():
        layer = layers.get(framework, "")
        probes = sum(len(r) for r in runs.values())
        repeats = probes - len(runs)
        said = _stopped_search(runs, layer, budget)
        reason = (
            f"stopped before it settled ({probes} probes stored, "
            + (f"{repeats} of them repeats)" if repeats else "no boundary repeated)")
            + (f"; {said}" if said else "")
        )
        records = [r for batch in runs.values() for r in batch]
        row: dict[str, Any] = dict.fromkeys(CAPACITY_COLUMNS, math.nan)
        row.update({
            "machine": run.parent.name, "run": run.name, "workload": workload,
            "framework": framework, "strategy": strategy, "preset": preset,
            "budget_gib": budget / 2**30, "budget_layer": layer, "status": UNSETTLED,
            "reason": reason, "probes": probes, "note": "", "prediction_basis": "",
            "search": "", "model_basis": "", "prediction_measured_batches": (),
            "strategy_notes": {}, "mode": recorded_mode(records[0].environment),
            "probe_peaks": (), "repeats": max(len(r) for r in runs.values()),
            "repeat_probes": repeats, "noise_room": False,
            "measured_at": max(r.started_at for r in records), "written_at": "",
            "next_runs": 0, "next_runs_over": 0,
        })  # fmt: skip
        rows.append(row)
    return rows
