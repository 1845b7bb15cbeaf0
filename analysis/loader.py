"""Every result under results/ into one tidy DataFrame (analysis.schema.COLUMNS).

Two sources: the runner's Records (results/records/**.json: statuses, reasons, raw step
times, environment) and asv's result files (results/asv/<machine>/<commit>-<env>.json: what
asv recorded, the history). A corrupt or foreign file is reported by name and skipped, never
half-read: a file's rows are added only once the whole file has parsed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.labels import inputs_label, layer_word
from analysis.schema import (
    CELL_METRIC,
    COLUMNS,
    CORE_METRICS,
    DEFAULT_ENVIRONMENT,
    METRICS,
    MIB,
)
from membench import file_rules, paths
from membench.metrics import (
    ANY_DEVICE_PEAK,
    ASV_METRICS,
    BUSY_METRIC,
    CELL_WALL,
    LIFE_METRIC,
    PREDICTION_ENV,
    kept_out_as_busy,
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
    parse_strategy_param,
    read_record,
)
from membench.stacks import stack_label


@dataclass
class LoadResult:
    frame: pd.DataFrame
    problems: list[str] = field(default_factory=list)
    # record files that could not be read (corrupt, non-finite or out-of-kind metrics): a
    # result built without them is incomplete (JSON that is no record is a problem only)
    unreadable: list[str] = field(default_factory=list)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})


def environment_label(stack_spec: str) -> str:
    """The label of a version environment's spec (jax-0.10.2), "default" without one."""
    return stack_label(stack_spec) if stack_spec.strip() else DEFAULT_ENVIRONMENT


def _device(env: dict[str, Any]) -> str:
    """ "cpu" or the GPU's name. Records written before failures carried a device fall back
    on the host's GPU, if it had one."""
    device = env.get("device") or ("cuda" if env.get("gpu_name") else "cpu")
    if device == "cuda":
        return str(env.get("device_name") or env.get("gpu_name") or "cuda")
    return "cpu"


def recorded_mode(env: dict[str, Any]) -> str:
    """The strategy's mode a record stores ("train" or "infer"): its strategy notes', else its
    prediction's (both the worker's, from the registry's Strategy.mode); "" where it has
    neither (analysis.modes says how such a row is read)."""
    for kept in (env.get("strategy_notes"), env.get(PREDICTION_ENV)):
        if isinstance(kept, dict) and kept.get("mode"):
            return str(kept["mode"])
    return ""


def record_rows(record: Record, path: Path) -> list[dict[str, Any]]:
    """One row per metric of an ok record; one row per core metric (NaN) otherwise."""
    env = record.environment
    git = env.get("git") or {}
    base = {
        "source": "record",
        "machine": env.get("machine", path.parent.parent.name),
        "device": _device(env),
        "host_cpu": str(env.get("cpu") or ""),
        "framework": record.cell.framework,
        "framework_version": env.get("framework_version", ""),
        "environment": environment_label((env.get("env") or {}).get("MEMBENCH_STACK", "")),
        "workload": record.cell.workload,
        "strategy": record.cell.strategy,
        "mode": recorded_mode(env),
        "batch_size": record.cell.batch_size,
        "world_size": record.cell.world_size,
        "preset": record.cell.preset,
        "inputs": inputs_label(env.get("workload_inputs")),
        "commit": git.get("commit", ""),
        "started_at": record.started_at,
        "status": record.status,
        "reason": record.reason,
        "path": str(path),
    }
    names = list(record.metrics) if record.status == "ok" else CORE_METRICS
    values = {**record.metrics, CELL_WALL: record.wall_seconds}
    # speed measured on a busy host is the other processes' as much as the cell's: left out
    # unless recorded anyway (--allow-busy, which marks the record); the share stays
    busy = kept_out_as_busy(record.metrics, env)
    steps = np.asarray(record.step_times, dtype=float)
    rows = []
    for name in [*names, CELL_WALL]:
        known = METRICS.get(name)  # an unknown metric keeps its row; the loader reports it
        row = {
            **base,
            "metric": name,
            "layer": known.layer if known else "",
            "unit": known.unit if known else "",
        }
        kept_out = busy and known is not None and known.layer == "speed"
        row["value"] = math.nan if kept_out else float(values.get(name, math.nan))
        row["spread_low"] = row["spread_high"] = math.nan
        row["n_samples"] = 1
        if name == "step_seconds_median" and steps.size and not kept_out:
            row["spread_low"], row["spread_high"] = np.percentile(steps, [25, 75])
            row["n_samples"] = int(steps.size)
        rows.append(row)
    return rows


def load_records(root: Path) -> LoadResult:
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    unreadable: list[str] = []
    for path in paths.record_files(root):
        try:
            record = read_record(path)
        except CorruptRecordError as exc:
            problems.append(str(exc))
            if not isinstance(exc, NotARecordError):
                unreadable.append(str(path))
            continue
        rows.extend(record_rows(record, path))
        if unknown := [m for m in record.metrics if m not in METRICS]:
            problems.append(f"{path}: metrics not in membench.metrics: {', '.join(unknown)}")
    frame = pd.DataFrame(rows, columns=COLUMNS) if rows else _empty()
    return LoadResult(frame, problems, unreadable)


def _params(raw: list[list[str]]) -> list[tuple[str, str, int]]:
    frameworks, strategies, batches = ([json.loads(v.replace("'", '"')) for v in p] for p in raw)
    return [(f, s, int(b)) for f in frameworks for s in strategies for b in batches]


def asv_file_rows(path: Path, machine: str, workloads: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Rows of one asv result file; raises ValueError if it is not one (whole or nothing).
    Its classes name workloads as asv_class_name does (those given are matched exactly)."""
    data = file_rules.load_json(path)
    if not isinstance(data, dict) or data.get("version") != 2 or "result_columns" not in data:
        raise ValueError("not an asv results file (format 2)")
    environment = environment_label((data.get("env_vars") or {}).get("MEMBENCH_STACK", ""))
    columns = data["result_columns"]
    rows = []
    for name, values in data["results"].items():
        parts = name.split(".")
        method = parts[-1]
        if method not in ASV_METRICS or len(parts) < 2:
            continue
        entry = dict(zip(columns, values, strict=False))
        cells = _params(entry["params"])
        results = entry["result"]
        if len(results) != len(cells):
            raise ValueError(f"{name}: {len(results)} results for {len(cells)} parameter sets")
        q25 = entry.get("stats_q_25") or [None] * len(cells)
        q75 = entry.get("stats_q_75") or [None] * len(cells)
        metric = ASV_METRICS[method]
        workload, preset = paths.asv_class_cell(parts[-2], workloads)
        for (fw, param, batch), value, low, high in zip(cells, results, q25, q75, strict=True):
            strategy, ranks = parse_strategy_param(param)
            measured = value is not None and not (isinstance(value, float) and math.isnan(value))
            rows.append({
                "source": "asv", "machine": machine, "device": "", "host_cpu": "", "framework": fw,
                "framework_version": "", "environment": environment, "strategy": strategy,
                "mode": "", "workload": workload,
                "batch_size": batch, "world_size": ranks, "preset": preset, "inputs": "",
                "commit": data.get("commit_hash", ""),
                "started_at": "", "status": "ok" if measured else "n/a", "reason": "",
                "metric": metric, "layer": METRICS[metric].layer, "unit": METRICS[metric].unit,
                "value": float(value) if measured else math.nan,
                "spread_low": math.nan if low is None else float(low),
                "spread_high": math.nan if high is None else float(high),
                "n_samples": 1, "path": str(path),
            })  # fmt: skip
    return rows


def load_asv(root: Path, workloads: Iterable[str] = ()) -> LoadResult:
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for path in paths.asv_result_files(root):
        try:
            rows.extend(asv_file_rows(path, path.parent.name, workloads))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"skipped {path}: {type(exc).__name__}: {exc}")
    return LoadResult(pd.DataFrame(rows, columns=COLUMNS) if rows else _empty(), problems)


def load(results_dir: Path) -> LoadResult:
    """Records and asv results under results_dir (results/records and results/asv)."""
    records = load_records(paths.records_root(results_dir))
    asv = load_asv(paths.asv_results(results_dir), set(records.frame["workload"]))
    frames = [f for f in (records.frame, asv.frame) if len(f)]
    frame = pd.concat(frames, ignore_index=True) if frames else _empty()
    if len(frame):
        frame["batch_size"] = frame["batch_size"].astype(int)
        frame["world_size"] = frame["world_size"].astype(int)
        frame["value"] = frame["value"].astype(float)
    return LoadResult(frame, records.problems + asv.problems, records.unreadable)


def latest(frame: pd.DataFrame, environment: str = DEFAULT_ENVIRONMENT) -> pd.DataFrame:
    """Record rows of one environment (the installed one by default), the newest
    measurement of each cell and metric."""
    rows = frame[(frame["source"] == "record") & (frame["environment"] == environment)]
    rows = rows.sort_values("started_at", kind="stable")
    return rows.drop_duplicates(CELL_METRIC, keep="last").reset_index(drop=True)


def export(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """The tidy frame as CSV and Parquet."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv, parquet = out_dir / "results.csv", out_dir / "results.parquet"
    frame.to_csv(csv, index=False)
    frame.astype({"n_samples": int, "batch_size": int, "world_size": int}).to_parquet(
        parquet, index=False
    )
    return [csv, parquet]


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
    return LoadResult(pd.concat(frames, ignore_index=True) if frames else _empty(), problems)


SELFCHECK_COLUMNS = [
    "machine", "host_cpu", "commit", "workload", "image_size", "batch", "framework", "strategy",
    "suite_samples_per_second", "reference_samples_per_second", "throughput_ratio",
    "suite_peak_mib", "reference_max_rss_mib", "peak_ratio", "suite_foreign_cpu",
    "reference_foreign_cpu", "note",
]  # fmt: skip
PROBE_COLUMNS = [
    "machine", "host_cpu", "commit", "workload", "image_size", "batch", "framework", "reader",
    "interval_seconds", "rounds", "step_seconds_without", "step_seconds_with", "overhead",
    "overhead_rounds_min", "overhead_rounds_max", "samples", "sampler_coverage",
    "timeline_interval_seconds", "timeline_step_seconds_with", "timeline_overhead",
    "timeline_overhead_rounds_min", "timeline_overhead_rounds_max", "timeline_sampler_cpu_share",
]  # fmt: skip


def _selfcheck_rows(path: Path) -> tuple[list[dict], list[dict]]:
    """One file of `membench selfcheck --save`: its comparison rows and its probe rows
    (ValueError/KeyError/TypeError: not such a file)."""
    data = file_rules.load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError("not a selfcheck file (no rows)")
    run = {
        "machine": data.get("machine") or path.parent.name,
        "host_cpu": data.get("cpu", ""),
        "commit": str((data.get("git") or {}).get("commit", ""))[:12],
        "workload": data["workload"], "image_size": int(data["image_size"]),
        "batch": int(data["batch"]),
    }  # fmt: skip
    rows = []
    for r in data["rows"]:
        row = {**run, **{c: r.get(c) for c in SELFCHECK_COLUMNS if c in r}}
        for name, mib in (("suite_peak_bytes", "suite_peak_mib"),
                          ("reference_max_rss_bytes", "reference_max_rss_mib")):  # fmt: skip
            row[mib] = r[name] / MIB if r.get(name) else math.nan
        rows.append(row)
    probes = [
        {**run, "framework": fw, **{c: v.get(c) for c in PROBE_COLUMNS if c in v}}
        for fw, v in (data.get("probe_overhead") or {}).items()
        if "error" not in v
    ]
    return rows, probes


def load_selfchecks(results_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Every stored fairness check: suite against reference per framework and strategy, the
    sampler thread's cost per framework, and the files skipped (named, never half-read)."""
    rows, probes, problems = [], [], []
    for path in paths.selfcheck_files(results_dir):
        try:
            found, cost = _selfcheck_rows(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"skipped {path}: {type(exc).__name__}: {exc}")
            continue
        rows += found
        probes += cost
    return (
        pd.DataFrame(rows, columns=SELFCHECK_COLUMNS),
        pd.DataFrame(probes, columns=PROBE_COLUMNS),
        problems,
    )


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
    return tuple(quiet_speeds(x.metrics for x in records if x.status == "ok"))


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
