"""The pictures beside a summary page's answers (PNG next to the Markdown, `membench report
--docs`): per workload, the capacity searches' probes (peak against batch, a panel per
framework, a line per strategy) with each budget drawn and each answer marked; per machine,
samples/s at each answer per strategy. A machine without capacity searches gets the same two
questions from its preset's cells: peak against batch (analysis.plots.memory_vs_batch) and
samples/s per strategy at one batch.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from analysis.answers import AT_MAXIMUM, NOISE, VERIFIED, layer_word, mark, shown_searches
from analysis.decision_terms import budget_label, published_speed
from analysis.families import family_colours, strategy_order
from analysis.plots import GIB, THROUGHPUT, _batch_axis, memory_vs_batch
from analysis.schema import METRICS

DPI = 100  # the PNGs are committed: small
ANSWERED = (VERIFIED, NOISE, AT_MAXIMUM)


def memory_png(workload: str) -> str:
    return f"{workload}-memory-vs-batch.png"


SPEED_PNG = "speed-at-answers.png"


def probe_points(searches: pd.DataFrame) -> pd.DataFrame:
    """Every probe run of the searches (framework, strategy, batch, GiB on the budget's
    layer), repeats included."""
    rows = [
        (r.framework, r.strategy, int(batch), peak / GIB, r.budget_layer)
        for r in searches.itertuples()
        for batch, peak in (r.probe_peaks if isinstance(r.probe_peaks, tuple) else ())
    ]
    return pd.DataFrame(rows, columns=["framework", "strategy", "batch", "GiB", "layer"])


def has_memory_picture(searches: pd.DataFrame) -> bool:
    return bool(len(probe_points(shown_searches(searches))))


def capacity_memory(searches: pd.DataFrame, workload: str, machine: str) -> Figure | None:
    """Peak against batch from one workload's searches: a panel per framework (its y axis
    names the budget's layer), a line per strategy through its probes' mean peaks, each
    budget a dashed line and each answer a star on it."""
    shown = shown_searches(searches)
    points = probe_points(shown)
    if points.empty:
        return None
    frameworks = sorted(points["framework"].unique())
    order = strategy_order(points["strategy"].unique())
    colours = family_colours(order)
    fig, axes = plt.subplots(
        1, len(frameworks), figsize=(3.6 * len(frameworks) + 1.8, 3.3), squeeze=False
    )
    for ax, framework in zip(axes.flat, frameworks, strict=True):
        mine = points[points["framework"] == framework]
        means = mine.groupby(["strategy", "batch"], as_index=False)["GiB"].mean()
        sns.lineplot(
            data=means, x="batch", y="GiB", hue="strategy", hue_order=order, palette=colours,
            marker="o", markersize=4, ax=ax, legend=False, estimator=None, sort=True,
        )  # fmt: skip
        for gib in sorted(shown["budget_gib"].unique()):
            ax.axhline(gib, color="0.25", ls="--", lw=0.9)
            ax.annotate(
                f"budget {budget_label(gib)}", (0.01, gib), xycoords=("axes fraction", "data"),
                va="bottom", fontsize=7.5, color="0.25",
            )  # fmt: skip
        answered = shown[shown["framework"] == framework]
        for r in answered.itertuples():
            if mark(r) not in ANSWERED:
                continue
            at = mine[(mine["strategy"] == r.strategy) & (mine["batch"] == int(r.largest_batch))]
            if len(at):
                ax.plot(int(r.largest_batch), at["GiB"].max(), marker="*", ms=12,
                        color=colours[r.strategy], mec="black", mew=0.6, zorder=5)  # fmt: skip
        _batch_axis(ax, _ticks(mine["batch"]))
        ax.set_title(framework, fontsize=10)
        ax.set_xlabel("batch size")
        layers = sorted({layer_word(m) for m in mine["layer"]})
        ax.set_ylabel(f"peak, GiB ({', '.join(layers)})")
        ax.grid(True, alpha=0.3)
    handles = [plt.Line2D([], [], color=colours[s], marker="o", label=s) for s in order]
    handles.append(plt.Line2D([], [], color="0.4", marker="*", ls="", ms=10, mec="black",
                              label="answer: largest batch"))  # fmt: skip
    fig.legend(handles=handles, loc="center right", fontsize=8, frameon=False)
    fig.suptitle(f"{workload}: peak against batch in the capacity searches, on {machine}",
                 fontsize=10.5, fontweight="bold")  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1 - 1.7 / fig.get_figwidth(), 1))
    return fig


def _ticks(batches: pd.Series) -> list[int]:
    """A few batch ticks over a log2 axis: powers of two across the range, and its ends."""
    low, high = int(batches.min()), int(batches.max())
    powers = [2**k for k in range(int(np.log2(max(low, 1))), int(np.log2(high)) + 2)]
    inside = [p for p in powers if low < p < high]
    ends = [e for e in (low, high) if all(max(e, p) / min(e, p) > 1.5 for p in inside)]
    return sorted({*ends, *inside})


def speed_points(capacity: pd.DataFrame) -> pd.DataFrame:
    """Samples/s at each answer (published_speed: none from a busy host), per workload and
    budget, framework and strategy."""
    shown = shown_searches(capacity)
    rows = [
        (f"{r.workload}, {budget_label(r.budget_gib)}", r.framework, r.strategy,
         published_speed(r))
        for r in shown.itertuples()
        if mark(r) in ANSWERED
    ]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["where", "framework", "strategy", "samples/s"])
    return frame.dropna(subset=["samples/s"])


def speed_at_answers(
    points: pd.DataFrame, machine: str, what: str, axis: str = "samples/s at the largest batch"
) -> Figure | None:
    """Horizontal bars: samples/s per strategy, a colour per framework, a panel per
    workload and budget (its own axis: workloads differ by orders of magnitude)."""
    if points.empty:
        return None
    panels = list(dict.fromkeys(sorted(points["where"])))
    frameworks = sorted(points["framework"].unique())
    palette = dict(zip(frameworks, sns.color_palette("colorblind", len(frameworks)),
                       strict=True))  # fmt: skip
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    most = points.groupby("where")["strategy"].nunique().max()
    fig, axes = plt.subplots(
        # each bar tall enough for the figure at its end
        rows, columns, figsize=(3.9 * columns, 0.5 + ((0.11 * len(frameworks) + 0.05) * most
                                                      + 0.75) * rows),
        squeeze=False,
    )  # fmt: skip
    for ax, panel in zip(axes.flat, panels, strict=False):
        part = points[points["where"] == panel]
        order = strategy_order(part["strategy"].unique())
        sns.barplot(
            data=part, y="strategy", x="samples/s", hue="framework", order=order,
            hue_order=frameworks, palette=palette, orient="h", ax=ax, legend=False,
        )  # fmt: skip
        for bars in ax.containers:  # the figure at each bar's end: a tiny one still reads
            ax.bar_label(bars, fmt="%.3g", fontsize=6.5, padding=1.5, color="0.3")
        ax.margins(x=0.12)
        ax.set_title(panel, fontsize=9.5)
        ax.set_ylabel("")
        ax.set_xlabel(axis)
        ax.tick_params(labelsize=8)
        ax.grid(True, axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=palette[f], label=f) for f in frameworks]
    fig.legend(handles=handles, loc="center right", fontsize=8.5, frameon=False)
    fig.suptitle(f"{what}, on {machine}", fontsize=10.5, fontweight="bold")
    fig.tight_layout(rect=(0, 0, 1 - 0.9 / fig.get_figwidth(), 1))
    return fig


def cell_speed_points(group: pd.DataFrame) -> pd.DataFrame:
    """A preset's cells without searches: samples/s per framework and strategy at the batch
    the most strategies were measured at (a tie: the larger batch)."""
    ok = group[(group["metric"] == THROUGHPUT) & (group["status"] == "ok")].dropna(subset=["value"])
    if ok.empty:
        return pd.DataFrame(columns=["where", "framework", "strategy", "samples/s"])
    counts = ok.groupby("batch_size")["strategy"].nunique()
    batch = int(max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0])
    at = ok[ok["batch_size"] == batch]
    workload, preset = at["workload"].iloc[0], at["preset"].iloc[0]
    return pd.DataFrame({
        "where": f"{workload}, batch {batch} ({preset})", "framework": at["framework"],
        "strategy": at["strategy"], "samples/s": at["value"],
    })  # fmt: skip


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


def cells_memory(group: pd.DataFrame) -> Figure | None:
    """A preset's cells without searches: peak against batch (analysis.plots')."""
    return memory_vs_batch(group)


def layer_label(metric: str) -> str:
    return METRICS[metric].label if metric in METRICS else metric
