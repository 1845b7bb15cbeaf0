"""Figures from the tidy frame (the `loader.latest()` view): one set per workload, device, preset.

Only cells that ended `ok` are drawn; the others are in the tables with their status and
reason. Memory is in GiB on the device kind's primary layer (host RSS on CPU, allocator peak
on GPU), and every memory axis names its layer.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator
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
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # noqa: E402

from analysis.families import (  # noqa: E402
    FAMILIES,
    family,
    family_colour,
    family_colours,
    is_training,
    strategy_order,
)
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


def _palette(order: list[str]) -> dict[str, tuple[float, float, float]]:
    """Strategies coloured by family (analysis.families): shades of one hue per family."""
    return family_colours(order)


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


HEADING_INCHES = 0.6  # room above the panels for the figure's title, whatever its height


def _finish(grid: sns.FacetGrid, heading: str) -> Figure:
    fig = grid.figure
    grid.tight_layout()  # the grid's own layout leaves room for its legend outside the panels
    # a fixed height in inches (not a fraction of a tall figure) keeps the figure's title off
    # the top panels' titles
    height = fig.get_figheight()
    fig.subplots_adjust(top=min(fig.subplotpars.top, 1 - HEADING_INCHES / height))
    fig.suptitle(heading, fontsize=13, fontweight="bold", y=1 - 0.15 / height, va="top")
    return fig


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


def _family_legend(fig: Figure, families: list[str]) -> None:
    handles = [
        Line2D([], [], marker="o", ls="", color=family_colour(f), markersize=8, label=f)
        for f in FAMILIES if f in families
    ]  # fmt: skip
    fig.legend(
        handles=handles, title="strategy family", loc="upper center", ncols=len(handles),
        bbox_to_anchor=(0.5, 0.93), frameon=False,
    )  # fmt: skip


LABEL_FONT = 8.5
LABEL_POINTS = 11  # vertical room per label, in points


def _spread(ys: np.ndarray) -> np.ndarray:
    """Label heights (points) near ys, at least LABEL_POINTS apart, in ys's order."""
    if ys.size == 0:
        return ys
    order = np.argsort(ys)
    placed = ys[order].astype(float)
    for _ in range(2):  # stack bottom up, then centre the stack on the points
        for n in range(1, len(placed)):
            placed[n] = max(placed[n], placed[n - 1] + LABEL_POINTS)
        placed -= (placed - ys[order]).mean() / 2
    for n in range(1, len(placed)):
        placed[n] = max(placed[n], placed[n - 1] + LABEL_POINTS)
    out = np.empty_like(placed)
    out[order] = placed
    return out


def _room_for_labels(ax: plt.Axes, labels: list, xs: np.ndarray) -> None:
    """Widen the x range until each label (drawn right of its point at xs) ends inside the
    panel: measured once drawn, then the range stretched in the axis's own scale."""
    renderer = ax.figure.canvas.get_renderer()
    right = ax.get_window_extent(renderer).x1
    width = ax.get_window_extent(renderer).width
    scale = ax.xaxis.get_transform()
    low, high = scale.transform(np.array(ax.get_xlim()))
    t = scale.transform(xs)
    needed = high
    for label, x in zip(labels, t, strict=True):
        box = label.get_window_extent(renderer)
        overflow = box.x1 - right + 6
        if overflow > 0:  # the point's share of the panel must shrink by overflow pixels
            needed = max(needed, low + (x - low) * width / max(width - (box.x1 - box.x0) - 16, 1))
    if needed > high:
        ax.set_xlim(right=float(scale.inverted().transform(np.array([needed]))[0]))


def _label_front(ax: plt.Axes, front: pd.DataFrame) -> None:
    """Each front point named "strategy, batch N" to its right, where no cell lies (none is
    both leaner and faster than a front point); labels that would overlap are spread
    vertically, a thin line leading back to the point. Call once the axes' limits are set."""
    to_points = 72 / ax.figure.dpi
    xy = ax.transData.transform(front[["throughput", "GiB"]].to_numpy()) * to_points
    labels = [
        ax.annotate(
            f"{row.strategy}, batch {row.batch_size}", (row.throughput, row.GiB),
            xytext=(10, y - xy[n, 1]), textcoords="offset points", ha="left", va="center",
            fontsize=LABEL_FONT, arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.6},
            bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
        )
        for n, (row, y) in enumerate(zip(front.itertuples(), _spread(xy[:, 1]), strict=True))
    ]  # fmt: skip
    _room_for_labels(ax, labels, front["throughput"].to_numpy())


def training_pareto(frame: pd.DataFrame) -> Figure | None:
    """Training cells only (inference beats every training cell on both axes), memory against
    throughput, a panel per framework: the Pareto front (no other cell is both leaner and
    faster) drawn, its points labelled with strategy and batch; the other cells faint. Colours
    are strategy families."""
    key = _one_group(frame)
    metric = memory_metric(key[1])
    cells = _cells(frame, [metric, THROUGHPUT])
    cells = cells[cells["strategy"].map(is_training)]
    if cells.empty:
        return None
    cells = cells.assign(GiB=cells[metric] / GIB, throughput=cells[THROUGHPUT])
    cells["family"] = cells["strategy"].map(family)
    frameworks = sorted(cells["framework"].unique())
    fig, axes = plt.subplots(
        1, len(frameworks), figsize=(6.5 * len(frameworks), 5.6), squeeze=False
    )
    fronts = []
    for ax, framework in zip(axes.flat, frameworks, strict=True):
        part = cells[cells["framework"] == framework]
        front = pareto_front(part, "GiB", "throughput")
        rest = part.drop(front.index)
        colours = [family_colour(f) for f in rest["family"]]
        ax.scatter(rest["throughput"], rest["GiB"], s=22, c=colours, alpha=0.3, lw=0)
        ax.plot(front["throughput"], front["GiB"], "-", color="0.4", lw=1, zorder=1)
        ax.scatter(
            front["throughput"], front["GiB"], s=70, zorder=2, edgecolors="black", lw=0.8,
            c=[family_colour(f) for f in front["family"]],
        )  # fmt: skip
        _speed_scale(ax, part["throughput"])
        ax.margins(x=0.1, y=0.15)
        ax.set_title(framework, fontsize=11)
        ax.set_xlabel("throughput, samples/s (higher is better)")
        ax.grid(True, alpha=0.3)
        fronts.append(front)
    axes.flat[0].set_ylabel(_memory_label(metric))
    heading = title("Training: memory against throughput, Pareto front labelled", key)
    fig.suptitle(heading, fontsize=13, fontweight="bold", y=0.99)
    _family_legend(fig, sorted(cells["family"].unique()))
    fig.tight_layout(rect=(0, 0, 1, 0.84))
    for ax, front in zip(axes.flat, fronts, strict=True):  # labels fit the panels' final size
        ax.autoscale_view()
        _label_front(ax, front)
    return fig


def _speed_scale(ax: plt.Axes, values: pd.Series) -> None:
    """Reference kernels (fp16 on a CPU) run orders of magnitude slower: a log axis keeps them
    apart instead of piled up against zero."""
    if values.min() > 0 and values.max() / values.min() > 20:
        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(LogLocator(subs=(2, 5)))
        for axis_format in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
            axis_format(FuncFormatter(lambda v, _: f"{v:g}"))


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
    "training-pareto": (training_pareto, "Training: memory against throughput, Pareto front"),
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
