"""Memory over time: the cells' timelines (`membench run --timeline`), read from their files.

A timeline is a Parquet file beside its record (the store's timelines/ folder, named by the
record's environment["timeline"]["file"]): columns t (seconds since the worker's launch),
rss_bytes (the worker's resident memory), others_rss_bytes (the rest of its process group),
processes, device_bytes (GPUs); the metadata key "membench" holds the phase marks on the same
clock, the phase names, and the summary the runner computed (docs/methodology.md).

Per workload one figure: the whole cell against seconds (phases shaded), then the first step
and the measured steps normalised per step, for the baseline and for a memory strategy beside
it, one panel per framework on a shared memory axis, the peak marked. Reads results only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analysis.families import family, family_colour
from membench import paths
from membench.records import CorruptRecordError, read_record

MIB = 2**20
META_KEY = b"membench"
# The memory strategy drawn against each framework's baseline: the first of these it ran.
MEMORY_STRATEGIES = ("checkpoint", "accumulate-4", "accumulate-2")
FRAMEWORK_ORDER = ("torch", "jax", "jittor")
CELL_SHADES = {
    "import": "#f0f0f0", "build": "#e7e1ef", "first step": "#fee0d2", "warm-up": "#fff7bc",
    "measured steps": "#e5f5e0", "after": "#ffffff",
}  # fmt: skip
STEP_SHADES = {"forward": "#c6dbef", "backward": "#fdd0a2", "optimizer": "#bcbddc"}
BASELINE_COLOUR = "#333333"
DPI = 100


@dataclass
class Timeline:
    """One cell's timeline with what its record says about it."""

    machine: str
    store: str  # the store's folder name: <preset>-<commit>
    workload: str
    framework: str
    strategy: str
    batch: int
    preset: str
    started_at: str
    samples: pd.DataFrame  # t, rss_bytes, others_rss_bytes, ...
    marks: list[tuple[float, str]]
    meta: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, Any]:
        return self.meta.get("summary", {})

    def first(self, name: str) -> float | None:
        return next((t for t, n in self.marks if n == name), None)

    def steps(self) -> list[tuple[float, float]]:
        """The measured steps' spans (start, end) from their marks."""
        starts = [t for t, n in self.marks if n == "step"]
        end = self.first("after")
        if not starts or end is None:
            return []
        return list(zip(starts, [*starts[1:], end], strict=True))

    def first_step(self) -> tuple[float, float] | None:
        start, end = self.first("first step"), self.first("warm-up")
        return (start, end) if start is not None and end is not None else None


def read_timeline(path: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return table.to_pandas(), json.loads(table.schema.metadata[META_KEY])


def load_timelines(results_dir: Path) -> tuple[list[Timeline], list[str]]:
    """Every record under results/ (records and timelines) whose timeline file is there, and
    the problems met (a file named by a record but missing or unreadable)."""
    found, problems = [], []
    for root in (paths.records_root(results_dir), paths.timelines_root(results_dir)):
        for path in paths.record_files(root):
            try:
                record = read_record(path)
            except CorruptRecordError:
                continue  # the loader of records reports those
            named = record.environment.get("timeline")
            if not isinstance(named, dict) or "file" not in named:
                continue
            file = path.parent / named["file"]
            try:
                samples, meta = read_timeline(file)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problems.append(f"{file}: {type(exc).__name__}: {exc}")
                continue
            c = record.cell
            found.append(Timeline(
                str(record.environment.get("machine", path.parent.parent.name)),
                path.parent.name, c.workload, c.framework, c.strategy, c.batch_size, c.preset,
                record.started_at, samples, [(float(t), str(n)) for t, n in meta["marks"]],
                meta, dict(record.metrics),
            ))  # fmt: skip
    return found, problems


def chosen(timelines: list[Timeline], machine: str, workload: str) -> list[Timeline]:
    """The workload's timelines to draw: from the one store where the most frameworks have a
    baseline timeline (the newest on a tie), each framework's baseline and first memory
    strategy (MEMORY_STRATEGIES), at its smallest batch."""
    mine = [t for t in timelines if t.machine == machine and t.workload == workload]
    stores: dict[str, list[Timeline]] = {}
    for t in mine:
        stores.setdefault(t.store, []).append(t)
    if not stores:
        return []

    def rank(name: str) -> tuple[int, str]:
        group = stores[name]
        return len({t.framework for t in group if t.strategy == "baseline"}), max(
            t.started_at for t in group
        )

    group = stores[max(stores, key=rank)]
    out = []
    for framework in _frameworks(group):
        own = [t for t in group if t.framework == framework]
        for names in (("baseline",), MEMORY_STRATEGIES):
            pick = [t for t in own if t.strategy in names]
            if pick:
                out.append(min(pick, key=lambda t: (names.index(t.strategy), t.batch)))
    return out


def drawn_per_workload(timelines: list[Timeline], machine: str) -> dict[str, list[Timeline]]:
    """Each workload of the machine with timelines: the ones to draw (chosen)."""
    workloads = sorted({t.workload for t in timelines if t.machine == machine})
    return {w: chosen(timelines, machine, w) for w in workloads}


def _frameworks(group: list[Timeline]) -> list[str]:
    names = {t.framework for t in group}
    return sorted(names, key=lambda f: (FRAMEWORK_ORDER.index(f) if f in FRAMEWORK_ORDER else 9, f))


# -- the per-step view ------------------------------------------------------------------------
# The warm-up steps between the first step and the measured ones are left out: a gap this wide
# (in steps) stands for them, so the first step's end is never read as the measured steps' start.
WARM_UP_GAP = 0.3
FIRST_STEP_X = -1 - WARM_UP_GAP  # where the first step starts in per_step's x


def _unit_steps(t: Timeline) -> list[tuple[float, float, float]]:
    """(x of the step's start, its start, its end) of the first step (at FIRST_STEP_X) and
    the measured steps (from x = 0): per_step's one unit a step."""
    first = t.first_step()
    out = [(FIRST_STEP_X, *first)] if first else []
    return out + [(float(i), start, end) for i, (start, end) in enumerate(t.steps())]


def per_step(t: Timeline) -> pd.DataFrame:
    """The first step at x in [-1.3, -0.3], the warm-up left out (WARM_UP_GAP), and the
    measured steps at [0, n], each step one unit (x = the step's start + the fraction of its
    time): columns x, rss_mib."""
    parts = []
    for x0, start, end in _unit_steps(t):
        inside = t.samples[(t.samples["t"] >= start) & (t.samples["t"] <= end)]
        x = x0 + (inside["t"] - start) / max(end - start, 1e-9)
        parts.append(pd.DataFrame({"x": x, "rss_mib": inside["rss_bytes"] / MIB}))
        parts.append(pd.DataFrame({"x": [float("nan")], "rss_mib": [float("nan")]}))  # a break
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["x", "rss_mib"])


def step_phase_spans(t: Timeline) -> list[tuple[float, float, str]]:
    """(x0, x1, phase) of the in-step marks (forward, backward, optimizer) in per_step's x."""
    out = []
    for x0, start, end in _unit_steps(t):
        inner = [(s, n) for s, n in t.marks if start <= s < end and n in STEP_SHADES]
        if not inner:
            continue
        scale = max(end - start, 1e-9)
        for (s, name), nxt in zip(inner, [*(m[0] for m in inner[1:]), end], strict=True):
            out.append((x0 + (s - start) / scale, x0 + (nxt - start) / scale, name))
    return out


STEP_AXIS_LABEL = "first step, warm-up left out (hatched), measured steps"


def _shade_steps(ax: Any, t: Timeline) -> None:
    for x0, x1, name in step_phase_spans(t):
        ax.axvspan(x0, x1, color=STEP_SHADES[name], lw=0, zorder=0)
    if t.first_step() is not None:
        ax.axvspan(-WARM_UP_GAP, 0, facecolor="none", edgecolor="#bbbbbb", hatch="///", lw=0,
                   zorder=0)  # fmt: skip
    ax.axvline(0, color="#888888", lw=0.8, ls=":", zorder=1)


def _step_ticks(ax: Any, t: Timeline) -> None:
    """Measured steps at 0, 1, ...; the first step named under its middle."""
    count = len(t.steps())
    ticks = [float(i) for i in range(count + 1)]
    labels = [str(i) for i in range(count + 1)]
    if t.first_step() is not None:
        ticks, labels = [FIRST_STEP_X + 0.5, *ticks], ["first", *labels]
    ax.set_xticks(ticks, labels)


def _mark_peak(ax: Any, frame: pd.DataFrame, colour: Any) -> None:
    ax.margins(y=0.12)  # room for the label above the highest point
    if frame["rss_mib"].notna().any():
        top = frame.loc[frame["rss_mib"].idxmax()]
        where = " (first step)" if top["x"] < 0 else ""
        low, high = frame["x"].min(), frame["x"].max()
        left = top["x"] > low + 0.7 * (high - low)  # near the right edge: written leftwards
        ax.plot(top["x"], top["rss_mib"], "o", color=colour, ms=6, zorder=4)
        ax.annotate(f"peak {top['rss_mib']:.0f} MiB{where}", (top["x"], top["rss_mib"]),
                    xytext=(-4 if left else 4, 4), textcoords="offset points", fontsize=8,
                    color=colour, ha="right" if left else "left")  # fmt: skip


def _in(where: str) -> str:
    return where if where.startswith("after") else f"in {where}"


def _peak_where(t: Timeline) -> str:
    phase, inner = t.summary.get("peak_phase", ""), t.summary.get("peak_step_phase", "")
    phase = {"after": "after the measured steps"}.get(phase, phase)
    return f"{phase}{', ' + inner if inner else ''}"


# -- the figure -------------------------------------------------------------------------------
def figure(timelines: list[Timeline], workload: str) -> Figure | None:
    """Three rows, one panel per framework: the whole cell against seconds; the baseline's
    first step and measured steps per step; the memory strategy against its baseline."""
    frameworks = _frameworks(timelines)
    if not frameworks:
        return None
    fig, axes = plt.subplots(
        3, len(frameworks), figsize=(5.2 * len(frameworks), 11), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    for row in axes[1:]:  # the per-step rows share one memory axis; whole cells keep their own
        for ax in row[1:]:
            ax.sharey(row[0])
    for col, framework in enumerate(frameworks):
        own = [t for t in timelines if t.framework == framework]
        base = next((t for t in own if t.strategy == "baseline"), None)
        other = next((t for t in own if t.strategy != "baseline"), None)
        _whole_cell(axes[0][col], base or other, framework)
        _baseline_steps(axes[1][col], base, framework)
        _strategy_steps(axes[2][col], base, other, framework)
    axes[0][0].set_ylabel("MiB: host RSS of the worker (and device, on GPUs)")
    axes[1][0].set_ylabel("host RSS, MiB (worker)")
    axes[2][0].set_ylabel("host RSS, MiB (worker)")
    cells = {(t.preset, t.batch) for t in timelines}
    sizes = "; ".join(f"preset {p}, batch {b}" for p, b in sorted(cells))
    fig.suptitle(f"{workload}: resident memory over a cell ({sizes})", fontsize=13)
    blank = Patch(color="none", label="")
    fig.legend(
        handles=[
            Patch(color="none", label="cell phases (top row):"),
            *(Patch(color=c, label=n) for n, c in CELL_SHADES.items() if n != "after"), blank,
            Patch(color="none", label="step parts (where marked):"),
            *(Patch(color=c, label=n) for n, c in STEP_SHADES.items()),
        ],
        loc="outside lower center", ncol=11, fontsize=8, frameon=False, handlelength=1.2,
    )  # fmt: skip
    return fig


HEADROOM = 1.35  # a whole-cell panel's top over its highest curve where a legend needs a band
MARGIN = 1.05  # and where none does
OTHERS_COLOUR = "#9467bd"


def _whole_cell(ax: Any, t: Timeline | None, framework: str) -> None:
    """The cell against seconds, phases shaded. The worker (and NVML's device memory) on the
    left axis; the rest of its process group, where it had any (Jittor's compiler processes),
    on a right axis of its own, so their short peaks do not flatten the worker's curve into a
    scale unlike its neighbours'. The peak goes in the title and the legend into headroom
    above the curves: neither covers the other nor a curve."""
    if t is None:
        ax.set_axis_off()
        return
    bounds = [(s, n) for s, n in t.marks if n in CELL_SHADES or n == "launch"]
    end = float(t.samples["t"].max())
    for (s, name), nxt in zip(bounds, [*(b[0] for b in bounds[1:]), end], strict=True):
        if name in CELL_SHADES:
            ax.axvspan(s, nxt, color=CELL_SHADES[name], lw=0, zorder=0)
    worker = t.samples["rss_bytes"] / MIB
    handles = ax.plot(t.samples["t"], worker, color=BASELINE_COLOUR, lw=1.1, label="worker")
    top = float(worker.max())
    device = t.samples.get("device_bytes")
    if device is not None and device.notna().any():  # NVML, every 20 ms on a GPU host
        seen = t.samples[device.notna()]
        handles += ax.plot(seen["t"], seen["device_bytes"] / MIB, color="#d62728", lw=1.1,
                           label="device memory (NVML, per process)")  # fmt: skip
        top = max(top, float(seen["device_bytes"].max() / MIB))
    others = t.samples.get("others_rss_bytes")
    if others is not None and others.any():
        twin = ax.twinx()
        handles += twin.plot(t.samples["t"], others / MIB, color=OTHERS_COLOUR, lw=0.9, ls="--",
                             label="its other processes (RSS, right axis)")  # fmt: skip
        twin.set_ylim(0, float(others.max() / MIB) * HEADROOM)  # a twin always has a legend
        twin.set_ylabel("other processes' RSS, MiB", color=OTHERS_COLOUR, fontsize=8)
        twin.tick_params(axis="y", colors=OTHERS_COLOUR, labelsize=8)
    legend = len(handles) > 1
    ax.set_ylim(0, top * (HEADROOM if legend else MARGIN))
    if legend:
        ax.legend(handles=handles, fontsize=8, loc="upper right", ncols=len(handles))
    peak = t.summary.get("peak_bytes")
    heading = f"{framework} {t.strategy}: the whole cell"
    if peak:
        heading += f"\npeak {peak / MIB:.0f} MiB {_in(_peak_where(t))}"
    ax.set_title(heading, fontsize=10)
    ax.set_xlabel("seconds since the worker started")


def _baseline_steps(ax: Any, t: Timeline | None, framework: str) -> None:
    if t is None:
        ax.set_axis_off()
        return
    frame = per_step(t)
    _shade_steps(ax, t)
    ax.plot(frame["x"], frame["rss_mib"], color=BASELINE_COLOUR, lw=1.2)
    _mark_peak(ax, frame, BASELINE_COLOUR)
    _step_ticks(ax, t)
    ax.set_title(f"{framework} baseline, per step", fontsize=10)
    ax.set_xlabel(STEP_AXIS_LABEL)
    marked = t.meta.get("step_phases_marked", "")
    if marked.startswith("the step as one phase"):
        ax.text(0.01, 0.02, "step as one phase", transform=ax.transAxes, fontsize=8,
                color="#666666")  # fmt: skip


def _strategy_steps(ax: Any, base: Timeline | None, other: Timeline | None, framework: str) -> None:
    if other is None:
        ax.text(0.5, 0.5, f"{framework}: no memory strategy's timeline", ha="center",
                transform=ax.transAxes, fontsize=9, color="#666666")  # fmt: skip
        ax.set_xticks([])
        return
    colour = family_colour(family(other.strategy))
    _shade_steps(ax, other)
    if base is not None:
        frame = per_step(base)
        ax.plot(frame["x"], frame["rss_mib"], color=BASELINE_COLOUR, lw=1.0, alpha=0.45,
                label="baseline")  # fmt: skip
    frame = per_step(other)
    ax.plot(frame["x"], frame["rss_mib"], color=colour, lw=1.3, label=other.strategy)
    _mark_peak(ax, frame, colour)
    ax.legend(fontsize=8, loc="lower right")
    _step_ticks(ax, other)
    ax.set_title(f"{framework} {other.strategy} against baseline, per step", fontsize=10)
    ax.set_xlabel(STEP_AXIS_LABEL)


# -- the table --------------------------------------------------------------------------------
def table(timelines: list[Timeline]) -> pd.DataFrame:
    """Per drawn timeline: where the cell peaked, and the measured steps' peak against VmHWM."""
    rows = []
    for t in timelines:
        s, m = t.summary, t.metrics
        vmhwm = m.get("peak_host_rss_bytes")
        rows.append({
            "framework": t.framework, "strategy": t.strategy, "batch": t.batch,
            "preset": t.preset,
            "cell peak MiB": _mib(s.get("peak_bytes")), "where": _peak_where(t),
            "steps peak MiB": _mib(s.get("measured_peak_bytes")),
            "VmHWM MiB": _mib(vmhwm), "VmHWM - peak MiB": _mib(s.get("peak_gap_bytes"), 2),
            "largest change MiB": _mib(s.get("sampling_bound_bytes")),
            "other processes MiB": _mib(s.get("others_peak_bytes")),
            "samples": s.get("samples"),
            "sampler CPU": f"{s['sampler_cpu_share']:.1%}" if "sampler_cpu_share" in s else "",
            "store": t.store,
        })  # fmt: skip
    return pd.DataFrame(rows)


def _mib(value: float | None, digits: int = 0) -> float | None:
    return None if value is None else round(value / MIB, digits)


def where_peaks(timelines: list[Timeline]) -> list[str]:
    """One sentence per framework's baseline: where its cell and its steps peak."""
    lines = []
    for t in timelines:
        if t.strategy != "baseline" or "peak_bytes" not in t.summary:
            continue
        s = t.summary
        steps = (
            f"; over the measured steps {s['measured_peak_bytes'] / MIB:.0f} MiB"
            if "measured_peak_bytes" in s else ""
        )  # fmt: skip
        marked = t.meta.get("step_phases_marked", "").split(":")[0].split(" (")[0]
        lines.append(
            f"- {t.framework}: the cell peaks at {s['peak_bytes'] / MIB:.0f} MiB "
            f"{_in(_peak_where(t))}{steps} ({marked})"
        )
    return lines


def save(fig: Figure, path: Path) -> Path:
    """The figure as PNG, without the software stamp (same figure, same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path
