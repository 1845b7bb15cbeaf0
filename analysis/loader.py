"""Every result under results/ into one tidy DataFrame (analysis.schema.COLUMNS).

Two sources: the runner's Records (results/records/**.json: statuses, reasons, raw step
times, environment) and asv's result files (results/asv/<machine>/<commit>-<env>.json: what
asv recorded, the history). A corrupt or foreign file is reported by name and skipped, never
half-read: a file's rows are added only once the whole file has parsed. The self-checks are
read here too; the capacity searches' files by analysis.capacity_loader.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.labels import inputs_label
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
    ASV_METRICS,
    CELL_WALL,
    PREDICTION_ENV,
    kept_out_as_busy,
)
from membench.records import (
    CorruptRecordError,
    NotARecordError,
    Record,
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


def empty_result() -> pd.DataFrame:
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
        "python": ".".join(str(env.get("python") or "").split(".")[:2]),
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
    frame = pd.DataFrame(rows, columns=COLUMNS) if rows else empty_result()
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
                "framework_version": "", "environment": environment, "python": "",
                "strategy": strategy,
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
    return LoadResult(pd.DataFrame(rows, columns=COLUMNS) if rows else empty_result(), problems)


def load(results_dir: Path) -> LoadResult:
    """Records and asv results under results_dir (results/records and results/asv)."""
    records = load_records(paths.records_root(results_dir))
    asv = load_asv(paths.asv_results(results_dir), set(records.frame["workload"]))
    frames = [f for f in (records.frame, asv.frame) if len(f)]
    frame = pd.concat(frames, ignore_index=True) if frames else empty_result()
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
