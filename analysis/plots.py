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
from matplotlib.ticker import (  # noqa: E402
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullLocator,
)

from analysis.families import (  # noqa: E402
    FAMILIES,
    family,
    family_colour,
    family_colours,
    strategy_order,
)
from analysis.modes import trains  # noqa: E402
from analysis.schema import (  # noqa: E402
    FRAMEWORK_STRATEGY_BATCH,
    METRICS,
    PRIMARY_MEMORY,
    WORKLOAD_DEVICE_PRESET,
    device_kind,
    one_machine,
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


def title(what: str, frame: pd.DataFrame) -> str:
    """A figure's title: what it shows, where (workload, device, preset) and on which machine
    (a PNG may be published on its own)."""
    machine = one_machine(frame)
    return f"{what}: {where(_one_group(frame))}" + (f", on {machine}" if machine else "")


def _one_group(frame: pd.DataFrame) -> GroupKey:
    one_machine(frame)
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
    if cells["batch_size"].nunique() < 2:  # one x value: nothing to see (left_out says so)
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
    return _finish(grid, title("Peak memory against batch size", frame))


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
    """Two legend rows: the families' colours, then what a ringed and a faint point are."""
    handles = [
        Line2D([], [], marker="o", ls="", color=family_colour(f), markersize=8, label=f)
        for f in FAMILIES if f in families
    ]  # fmt: skip
    fig.legend(
        handles=handles, title="strategy family", loc="upper center", ncols=len(handles),
        bbox_to_anchor=(0.5, 0.93), frameon=False,
    )  # fmt: skip
    kinds = [
        Line2D([], [], marker="o", ls="-", color="0.4", lw=1, markersize=8, mfc="0.6",
               mec="black", label="on the Pareto front: labelled strategy, batch"),
        Line2D([], [], marker="o", ls="", color="0.6", alpha=0.35, markersize=6, mec="none",
               label="faint: off the front, a front cell is leaner and faster (values in the "
               "tables)"),
    ]  # fmt: skip
    fig.legend(
        handles=kinds, loc="upper center", ncols=2, bbox_to_anchor=(0.5, 0.835),
        frameon=False, fontsize=9,
    )  # fmt: skip


LABEL_FONT = 8.5
LABEL_GAP = 14  # pixels between the fastest front point and the column of labels
LABEL_PAD = 3  # pixels between two labels, and between a label and the panel's edge


def _spread(
    ys: np.ndarray, gap: float, low: float = -math.inf, high: float = math.inf
) -> np.ndarray:
    """Label centres near ys, at least gap apart, in ys's order, kept within [low, high]
    where the stack fits: stacked bottom up, the stack centred on the points, then shifted
    inside the bounds."""
    if ys.size == 0:
        return ys
    order = np.argsort(ys, kind="stable")
    placed = ys[order].astype(float)
    for n in range(1, len(placed)):
        placed[n] = max(placed[n], placed[n - 1] + gap)
    placed -= (placed - ys[order]).mean()  # centred: as much above the points as below
    for n in range(1, len(placed)):  # centring can bring two back together below a fixed one
        placed[n] = max(placed[n], placed[n - 1] + gap)
    placed += max(0.0, low - placed[0])
    placed -= max(0.0, placed[-1] - high)
    out = np.empty_like(placed)
    out[order] = placed
    return out


def _label_front(ax: plt.Axes, front: pd.DataFrame) -> None:
    """Each front point named "strategy, batch N" in a column right of the fastest point,
    where no cell lies (none is faster than the fastest, nor leaner and faster than a front
    point): the x range widened for the column, the labels in the points' vertical order, a
    thin line from each label's left edge to its point, so no line crosses a label. Call once
    the axes' limits and the figure's layout are set."""
    renderer = ax.figure.canvas.get_renderer()
    texts = [f"{row.strategy}, batch {row.batch_size}" for row in front.itertuples()]
    probes = [ax.text(0, 0, t, fontsize=LABEL_FONT) for t in texts]
    sizes = [p.get_window_extent(renderer) for p in probes]
    for probe in probes:
        probe.remove()
    width = max(b.width for b in sizes) + 4  # the label's white box pads it
    height = max(b.height for b in sizes) + 2
    panel = ax.get_window_extent(renderer)
    # the fastest point moves left until the column fits: measured in the axis's own scale
    scale = ax.xaxis.get_transform()
    low, high = scale.transform(np.array(ax.get_xlim()))
    fastest = scale.transform(np.array([front["throughput"].max()]))[0]
    share = max(0.35, (panel.width - width - LABEL_GAP - LABEL_PAD) / panel.width)
    if (fastest - low) / (high - low) > share:
        right = low + (fastest - low) / share
        ax.set_xlim(right=float(scale.inverted().transform(np.array([right]))[0]))
    xy = ax.transData.transform(front[["throughput", "GiB"]].to_numpy())
    column = (xy[:, 0].max() + LABEL_GAP - panel.x0) / panel.width
    ys = _spread(
        xy[:, 1], height + LABEL_PAD,
        panel.y0 + height / 2 + LABEL_PAD, panel.y1 - height / 2 - LABEL_PAD,
    )  # fmt: skip
    for text, point, y in zip(texts, front[["throughput", "GiB"]].to_numpy(), ys, strict=True):
        ax.annotate(
            text, tuple(point), xytext=(column, (y - panel.y0) / panel.height),
            textcoords="axes fraction", ha="left", va="center", fontsize=LABEL_FONT,
            arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.6, "relpos": (0, 0.5)},
            bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
        )  # fmt: skip


def training_pareto(frame: pd.DataFrame) -> Figure | None:
    """Training cells only (inference beats every training cell on both axes), memory against
    throughput, a panel per framework on one kind of throughput axis: the Pareto front (no
    other cell is both leaner and faster) drawn, its points labelled with strategy and batch;
    the other cells faint. Colours are strategy families."""
    key = _one_group(frame)
    metric = memory_metric(key[1])
    cells = _cells(frame[trains(frame)], [metric, THROUGHPUT])
    if cells.empty:
        return None
    cells = cells.assign(GiB=cells[metric] / GIB, throughput=cells[THROUGHPUT])
    cells["family"] = cells["strategy"].map(family)
    frameworks = sorted(cells["framework"].unique())
    fig, axes = plt.subplots(
        1, len(frameworks), figsize=(6.5 * len(frameworks), 5.6), squeeze=False
    )
    log = _speed_is_log(cells["throughput"])  # one scale for every panel, read side by side
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
        if log:
            _log_speed_axis(ax, part["throughput"])
        ax.margins(x=0.1, y=0.15)
        ax.set_title(framework, fontsize=11)
        ax.set_xlabel("throughput, samples/s (higher is better)")
        ax.grid(True, alpha=0.3)
        fronts.append(front)
    axes.flat[0].set_ylabel(_memory_label(metric))
    heading = title("Training: memory against throughput, Pareto front labelled", frame)
    fig.suptitle(heading, fontsize=13, fontweight="bold", y=0.99)
    _family_legend(fig, sorted(cells["family"].unique()))
    fig.tight_layout(rect=(0, 0, 1, 0.8))
    for ax, front in zip(axes.flat, fronts, strict=True):  # labels fit the panels' final size
        ax.autoscale_view()
        _label_front(ax, front)
    return fig


def _speed_is_log(values: pd.Series) -> bool:
    """Reference kernels (fp16 on a CPU) run orders of magnitude slower: a log axis keeps them
    apart instead of piled up against zero."""
    return bool(values.min() > 0 and values.max() / values.min() > 20)


def _log_speed_axis(ax: plt.Axes, values: pd.Series) -> None:
    ax.set_xscale("log")
    if values.max() / values.min() < 4:  # a narrow panel would see one decade tick, or none
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.xaxis.set_minor_locator(NullLocator())
    else:
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


def why_missing(frame: pd.DataFrame, framework: str, strategy: str) -> str:
    """Why a framework's row of a strategy has no bar: the statuses its cells ended with,
    "not measured in this preset" where it has none, "no value" where one ended ok."""
    cells = frame[(frame["framework"] == framework) & (frame["strategy"] == strategy)]
    statuses = sorted(set(cells["status"]) - {"ok"})
    if cells.empty:
        return "not measured in this preset"
    if (cells["status"] == "ok").any():
        return "no value recorded" + (f" ({', '.join(statuses)} elsewhere)" if statuses else "")
    return ", ".join(statuses)


def _strategy_bars(
    data: pd.DataFrame, x: str, col: str, frame: pd.DataFrame, **options: object
) -> sns.FacetGrid:
    """Horizontal bars, a bar per strategy and batch, a panel per framework and `col`; a row
    without bars says why (its cells' status in frame, the group's rows)."""
    data = data.assign(batch=data["batch_size"].map(lambda b: f"batch {b}"))
    batches = [f"batch {b}" for b in sorted(data["batch_size"].unique())]
    height = _bar_height(data)
    order = strategy_order(data["strategy"])
    frameworks = sorted(data["framework"].unique())
    grid = sns.catplot(
        data=data, kind="bar", y="strategy", x=x, order=order,
        hue="batch", hue_order=batches, palette="viridis", col=col,
        row="framework", row_order=frameworks,
        height=height, aspect=PANEL_WIDTH / height, orient="h", **options,
    )  # fmt: skip
    for (framework, panel), ax in zip(
        [(f, c) for f in frameworks for c in grid.col_names], grid.axes.flat, strict=True
    ):
        ax.grid(True, axis="x", alpha=0.3)
        shown = set(data.loc[(data["framework"] == framework) & (data[col] == panel), "strategy"])
        for y, strategy in enumerate(order):  # a bar plot's categories sit at 0, 1, ...
            if strategy not in shown:
                ax.text(
                    0.02, y, why_missing(frame, framework, strategy), va="center", fontsize=8,
                    style="italic", color="0.35", transform=ax.get_yaxis_transform(),
                )  # fmt: skip
    grid.set_titles("{row_name}: {col_name}")
    return grid


def savings(frame: pd.DataFrame) -> Figure | None:
    """Memory vs each framework's baseline in % (negative: less memory, as every table signs
    it): a bar per strategy and batch."""
    key = _one_group(frame)
    kind = device_kind(key[1])
    metrics = [PRIMARY_MEMORY[kind], *EXTRA_SAVINGS[kind]]
    data = pd.concat([_savings(frame, m) for m in metrics], ignore_index=True)
    if data.empty:
        return None
    grid = _strategy_bars(data, "change %", "layer", frame, sharex="col")
    for ax in grid.axes.flat:
        ax.axvline(0, color="black", lw=0.8)
    grid.set_axis_labels("memory vs baseline, % (-23% = less memory, +13% = more)", "")
    return _finish(grid, title("Memory vs baseline per strategy", frame))


def _seconds_scale(ax: plt.Axes, values: pd.Series) -> None:
    """Compile times span orders of magnitude and can be 0: symlog keeps both readable."""
    positive = values[values > 0]
    if positive.empty or positive.max() / positive.min() < 30:
        return
    ax.set_xscale("symlog", linthresh=10 ** math.floor(np.log10(positive.min())))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def compile_time(frame: pd.DataFrame) -> Figure | None:
    """First step and compile time (first step minus the median step) per strategy."""
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
    grid = _strategy_bars(data, "s", "what", frame)
    for ax in grid.axes.flat:
        _seconds_scale(ax, data["s"])
    grid.set_axis_labels("seconds", "")
    return _finish(grid, title("First step and compile time", frame))


# file stem -> (figure function, caption); the report shows them in this order.
PLOTS: dict[str, tuple[Callable[[pd.DataFrame], Figure | None], str]] = {
    "memory-vs-batch": (memory_vs_batch, "Peak memory against batch size"),
    "training-pareto": (training_pareto, "Training: memory against throughput, Pareto front"),
    "savings": (savings, "Memory vs baseline per strategy (-: less memory, +: more)"),
    "compile-time": (compile_time, "First step and compile time"),
}


def left_out(frame: pd.DataFrame) -> dict[str, str]:
    """The plots a group's cells give nothing to see in, each with the reason (the report
    says it where the plot would be): memory against batch size needs two batch sizes."""
    key = _one_group(frame)
    batches = sorted(_cells(frame, [memory_metric(key[1])])["batch_size"].unique())
    if len(batches) == 1:
        return {
            "memory-vs-batch": f"Peak memory against batch size: not drawn, every cell of "
            f"this preset ran at batch {batches[0]} (one point per strategy); the tables give "
            "its memory."
        }
    return {}


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
