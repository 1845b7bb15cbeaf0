"""Version history: each benchmark's value under every framework version measured.

Rows come from every environment (the installed one and the version matrix's); several
runs of one version give their median. A framework measured in one version only has no
history and is left out.
"""

from __future__ import annotations

import pandas as pd
from packaging.version import InvalidVersion, Version

from analysis.schema import METRICS, MIB

HISTORY_METRICS = [
    "peak_host_rss_bytes",
    "peak_device_allocated_bytes",
    "xla_temp_bytes",
    "throughput_samples_per_second",
]


def release_key(version: str) -> tuple:
    """Oldest release first (0.9 before 0.10); a version that is not PEP 440 sorts last."""
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


def _shown(metric: str, value: float) -> str:
    if pd.isna(value):
        return "-"
    unit = METRICS[metric].unit
    return f"{value / MIB:,.0f}" if unit == "bytes" else f"{value:.3g}"


def version_history(
    frame: pd.DataFrame, metrics: list[str] | None = None
) -> dict[str, pd.DataFrame]:
    """{"<framework> on <machine>, <preset>": table}: one row per benchmark and metric, one
    column per version (oldest first); memory in MiB."""
    metrics = metrics or HISTORY_METRICS
    rows = frame[(frame["source"] == "record") & (frame["status"] == "ok")]
    rows = rows[rows["metric"].isin(metrics) & (rows["framework_version"] != "")].copy()
    rows["version"] = rows["framework_version"].str.split("+").str[0]
    tables = {}
    for (machine, preset, framework), group in rows.groupby(["machine", "preset", "framework"]):
        versions = sorted(group["version"].unique(), key=release_key)
        if len(versions) < 2:
            continue
        wide = group.pivot_table(
            index=["workload", "strategy", "batch_size", "metric"], columns="version",
            values="value", aggfunc="median",
        )  # fmt: skip
        wide = wide[versions].reset_index()
        for version in versions:
            wide[version] = [
                _shown(m, v) for m, v in zip(wide["metric"], wide[version], strict=True)
            ]
        wide["metric"] = [
            f"{METRICS[m].label} ({'MiB' if METRICS[m].unit == 'bytes' else METRICS[m].unit})"
            for m in wide["metric"]
        ]
        tables[f"{framework} on {machine}, {preset}"] = wide.rename(columns={"batch_size": "batch"})
    return tables
