"""Figures from the tidy frame (the `loader.latest()` view): one set per workload, device, preset.

Only cells that ended `ok` are drawn; the others are in the tables with their status and
reason. Memory is in GiB on the device kind's primary layer (host RSS on CPU, allocator peak
on GPU), and every memory axis names its layer.
"""

from __future__ import annotations

import math
import os
import re
import textwrap
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import matplotlib

# Headless (reports, tests, CI) unless a backend was chosen: ipykernel sets MPLBACKEND to its
# inline backend, and forcing Agg there would stop notebooks from showing the figures.
if "MPLBACKEND" not in os.environ:
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # noqa: E402

from analysis.schema import (  # noqa: E402
    FRAMEWORK_STRATEGY_BATCH,
    METRICS,
    PRIMARY_MEMORY,
    WORKLOAD_DEVICE_PRESET,
    device_kind,
)
from analysis.tables import change_vs_baseline  # noqa: E402

GIB = 2**30
THROUGHPUT = "throughput_samples_per_second"
SPEED_METRICS = ["first_step_seconds", "compile_seconds"]
# Savings are drawn for the primary layer and, on a CPU host, for what one step adds: the
# whole-process peak carries the framework's ~fixed footprint, which hides activation savings.
EXTRA_SAVINGS = {"cpu": ["peak_host_rss_delta_bytes"], "gpu": []}
DPI = 110
PANEL_WIDTH = 5.5  # inches, bar-plot panels

GroupKey = tuple[str, str, str]


def groups(frame: pd.DataFrame) -> Iterator[tuple[GroupKey, pd.DataFrame]]:
    """(workload, device, preset) and its rows, in sorted order."""
    for key, group in frame.groupby(WORKLOAD_DEVICE_PRESET, sort=True):
        yield (str(key[0]), str(key[1]), str(key[2])), group


def where(key: GroupKey) -> str:
    workload, device, preset = key
    return f"{workload} on {device} (preset {preset})"


def title(what: str, key: GroupKey) -> str:
    return f"{what}: {where(key)}"


def _one_group(frame: pd.DataFrame) -> GroupKey:
    keys = list(frame.groupby(WORKLOAD_DEVICE_PRESET).groups)
    if len(keys) != 1:
        raise ValueError(f"expected rows of one workload/device/preset, got {len(keys)}")
    return tuple(str(k) for k in keys[0])  # type: ignore[return-value]


def memory_metric(device: str) -> str:
    return PRIMARY_MEMORY[device_kind(device)]


def _memory_label(metric: str) -> str:
    spec = METRICS[metric]
    return f"{spec.label}, GiB\n[{spec.layer} layer]"


def _cells(frame: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """One row per ok cell, one column per metric (only cells that have all of them)."""
    rows = frame[(frame["status"] == "ok") & frame["metric"].isin(metrics)]
    rows = rows.dropna(subset=["value"])
    if rows.empty:
        return pd.DataFrame(columns=FRAMEWORK_STRATEGY_BATCH + metrics)
    wide = rows.pivot_table(
        index=FRAMEWORK_STRATEGY_BATCH, columns="metric", values="value", aggfunc="last"
    )
    wide = wide.reindex(columns=metrics).dropna()
    return wide.reset_index()


def strategy_order(names: Iterable[str]) -> list[str]:
    """The registry's order (baseline first), then strategies it does not know by name."""
    from membench.registry import STRATEGIES

    present = set(names)
    known = [s for s in STRATEGIES if s in present]
    return known + sorted(present - set(known))


def _palette(order: list[str]) -> dict[str, tuple[float, float, float]]:
    colors = sns.color_palette("tab20" if len(order) > 10 else "tab10", len(order))
    return dict(zip(order, colors, strict=True))


def _batch_axis(ax: plt.Axes, batches: list[int]) -> None:
    """Batch sizes double across a preset's grid: a log2 axis with a tick at each one."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())


def _bar_height(data: pd.DataFrame) -> float:
    """Panel height in inches that keeps horizontal bars a readable thickness at any count."""
    bars = data["strategy"].nunique() * data["batch_size"].nunique()
    return max(2.5, 1 + 0.12 * bars)


def _finish(grid: sns.FacetGrid, heading: str) -> Figure:
    grid.figure.suptitle(heading, fontsize=13, fontweight="bold")
    grid.tight_layout()  # the grid's own layout leaves room for its legend outside the panels
    return grid.figure


def memory_vs_batch(frame: pd.DataFrame) -> Figure | None:
    """Peak memory against batch size: a line per strategy, a panel per framework."""
    key = _one_group(frame)
    metric = memory_metric(key[1])
    cells = _cells(frame, [metric])
    if cells.empty:
        return None
    cells["GiB"] = cells[metric] / GIB
    order = strategy_order(cells["strategy"])
    grid = sns.relplot(
        data=cells, x="batch_size", y="GiB", kind="line",
        col="framework", col_order=sorted(cells["framework"].unique()),
        hue="strategy", hue_order=order, style="strategy", style_order=order,
        palette=_palette(order), markers=True, dashes=False, height=4.5, aspect=1.3,
    )  # fmt: skip
    for ax in grid.axes.flat:
        _batch_axis(ax, sorted(cells["batch_size"].unique()))
        ax.grid(True, alpha=0.3)
    grid.set_axis_labels("batch size", _memory_label(metric))
    return _finish(grid, title("Peak memory against batch size", key))


def pareto_front(points: pd.DataFrame, memory: str, speed: str) -> pd.DataFrame:
    """The cells no other cell beats on both lower memory and higher throughput."""
    ranked = points.sort_values([speed, memory], ascending=[False, True])
    best, keep = math.inf, []
    for index, row in ranked.iterrows():
        if row[memory] < best:
            best = row[memory]
            keep.append(index)
    return points.loc[keep].sort_values(speed)


def is_training(strategy: str) -> bool:
    """Strategies the registry knows as training steps (inference ones dominate any front)."""
    from membench.registry import STRATEGIES

    known = STRATEGIES.get(strategy)
    return known is not None and known.mode == "train"


def _draw_front(ax: plt.Axes, cells: pd.DataFrame, memory: str) -> None:
    """Fronts as lines through ringed points, listed under the panel: labels beside the points
    would overlap where front cells cluster. Inference cells beat every training cell, so the
    training cells get a front of their own."""
    lines = []
    subsets = {"all cells": cells, "training only": cells[cells["strategy"].map(is_training)]}
    for (name, subset), style in zip(subsets.items(), ["--", ":"], strict=True):
        if subset.empty:
            continue
        front = pareto_front(subset, memory, THROUGHPUT)
        ax.plot(front[THROUGHPUT], front["GiB"], style, color="black", lw=1.2, zorder=0)
        ax.scatter(front[THROUGHPUT], front["GiB"], s=260, facecolors="none", edgecolors="black")
        names = ", ".join(f"{r.strategy} (batch {r.batch_size})" for r in front.itertuples())
        dash = "dashed" if style == "--" else "dotted"
        lines.append(
            textwrap.fill(
                f"Pareto front, {name} ({dash}): {names}", width=95, break_on_hyphens=False
            )
        )
    ax.text(0, -0.16, "\n".join(lines), transform=ax.transAxes, va="top", fontsize=9)


def _rename_legend(grid: sns.FacetGrid, names: dict[str, str]) -> None:
    for text in grid.legend.texts if grid.legend else []:
        text.set_text(names.get(text.get_text(), text.get_text()))


def _speed_scale(ax: plt.Axes, values: pd.Series) -> None:
    """Reference kernels (fp16 on a CPU) run orders of magnitude slower: a log axis keeps them
    apart instead of piled up against zero."""
    if values.min() > 0 and values.max() / values.min() > 20:
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(LogLocator(subs=(2, 5)))
        for axis_format in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
            axis_format(FuncFormatter(lambda v, _: f"{v:g}"))


def memory_vs_throughput(frame: pd.DataFrame) -> Figure | None:
    """Memory against throughput per framework, each framework's Pareto front dashed."""
    key = _one_group(frame)
    metric = memory_metric(key[1])
    cells = _cells(frame, [metric, THROUGHPUT])
    if cells.empty:
        return None
    cells["GiB"] = cells[metric] / GIB
    order = strategy_order(cells["strategy"])
    grid = sns.relplot(
        data=cells, x=THROUGHPUT, y="GiB", kind="scatter",
        col="framework", col_order=sorted(cells["framework"].unique()),
        hue="strategy", hue_order=order, palette=_palette(order),
        size="batch_size", sizes=(30, 220), height=5, aspect=1.3, alpha=0.85,
        facet_kws={"sharex": False},
    )  # fmt: skip
    for ax, (_, part) in zip(grid.axes.flat, cells.groupby("framework", sort=True), strict=True):
        _draw_front(ax, part, metric)
        _speed_scale(ax, part[THROUGHPUT])
        ax.grid(True, alpha=0.3)
    grid.set_axis_labels("throughput, samples/s (higher is better)", _memory_label(metric))
    _rename_legend(grid, {"batch_size": "batch size"})
    heading = title("Memory against throughput (lower right is better)", key)
    return _finish(grid, heading)


def _savings(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """% change of a metric against the same framework's baseline at the same batch."""
    change = change_vs_baseline(frame, metric)
    change = change[change["strategy"] != "baseline"].rename(columns={"change_pct": "change %"})
    spec = METRICS[metric]
    change["layer"] = f"{spec.label} [{spec.layer} layer]"
    return change


def _strategy_bars(data: pd.DataFrame, x: str, col: str, **options: object) -> sns.FacetGrid:
    """Horizontal bars, a bar per strategy and batch, a panel per framework and `col`."""
    data = data.assign(batch=data["batch_size"].map(lambda b: f"batch {b}"))
    batches = [f"batch {b}" for b in sorted(data["batch_size"].unique())]
    height = _bar_height(data)
    grid = sns.catplot(
        data=data, kind="bar", y="strategy", x=x, order=strategy_order(data["strategy"]),
        hue="batch", hue_order=batches, palette="viridis", col=col,
        row="framework", row_order=sorted(data["framework"].unique()),
        height=height, aspect=PANEL_WIDTH / height, orient="h", **options,
    )  # fmt: skip
    for ax in grid.axes.flat:
        ax.grid(True, axis="x", alpha=0.3)
    grid.set_titles("{row_name}: {col_name}")
    return grid


def savings(frame: pd.DataFrame) -> Figure | None:
    """Memory change in % against each framework's baseline: a bar per strategy and batch."""
    key = _one_group(frame)
    kind = device_kind(key[1])
    metrics = [PRIMARY_MEMORY[kind], *EXTRA_SAVINGS[kind]]
    data = pd.concat([_savings(frame, m) for m in metrics], ignore_index=True)
    if data.empty:
        return None
    grid = _strategy_bars(data, "change %", "layer", sharex="col")
    for ax in grid.axes.flat:
        ax.axvline(0, color="black", lw=0.8)
    grid.set_axis_labels("memory change against baseline, % (negative saves)", "")
    return _finish(grid, title("Memory saved per strategy", key))


def _seconds_scale(ax: plt.Axes, values: pd.Series) -> None:
    """Compile times span orders of magnitude and can be 0: symlog keeps both readable."""
    positive = values[values > 0]
    if positive.empty or positive.max() / positive.min() < 30:
        return
    ax.set_xscale("symlog", linthresh=10 ** math.floor(np.log10(positive.min())))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def compile_time(frame: pd.DataFrame) -> Figure | None:
    """First step and compile time (first step minus the median step) per strategy."""
    key = _one_group(frame)
    cells = _cells(frame, SPEED_METRICS)
    if cells.empty:
        return None
    data = cells.melt(
        id_vars=FRAMEWORK_STRATEGY_BATCH,
        value_vars=SPEED_METRICS,
        var_name="metric",
        value_name="s",
    )
    data["what"] = data["metric"].map(lambda m: METRICS[m].label)
    grid = _strategy_bars(data, "s", "what")
    for ax in grid.axes.flat:
        _seconds_scale(ax, data["s"])
    grid.set_axis_labels("seconds", "")
    return _finish(grid, title("First step and compile time", key))


# file stem -> (figure function, caption); the report shows them in this order.
PLOTS: dict[str, tuple[Callable[[pd.DataFrame], Figure | None], str]] = {
    "memory-vs-batch": (memory_vs_batch, "Peak memory against batch size"),
    "memory-vs-throughput": (memory_vs_throughput, "Memory against throughput, Pareto front"),
    "savings": (savings, "Memory saved per strategy against baseline"),
    "compile-time": (compile_time, "First step and compile time"),
}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def plot_path(out_dir: Path, key: GroupKey, kind: str) -> Path:
    return out_dir / f"{'--'.join(slug(k) for k in key)}--{kind}.png"


def save_group(group: pd.DataFrame, out_dir: Path) -> dict[str, Path]:
    """The figures of one workload/device/preset as PNGs: plot kind -> path."""
    key = _one_group(group)
    saved = {}
    for kind, (draw, _) in PLOTS.items():
        fig = draw(group)
        if fig is None:
            continue
        path = plot_path(out_dir, key, kind)
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
        plt.close(fig)  # many figures per report: free each once written
        saved[kind] = path
    return saved
