"""The verdict engine's pieces: a claimed figure and its band (Target), one comparison on
one layer (Finding), the rows of one machine and preset (Source), and the comparisons
every claim is written with (compare, ratios, is_cell, same_batch)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import pandas as pd

from analysis.schema import METRICS

CONFIRMED = "confirmed"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"
NOT_MEASURABLE = "not measurable here"
VERDICTS = (CONFIRMED, REFUTED, INCONCLUSIVE, NOT_MEASURABLE)

TABLE_COLUMNS = ["id", "claim", "claimed", "measured", "verdict", "reason", "device", "evidence"]
NEEDS_GPU = "needs a GPU"
REFERENCE = "CPU figure shown for reference"
GPU_REASON = f"{NEEDS_GPU}; {REFERENCE}"  # a GPU claim with only CPU data
# The advice in C1, C2, C6, C8 and C9 is PyTorch's (autocast, checkpoint, no_grad, half()).
ADVICE_FRAMEWORK = "torch"
FAILED = frozenset({"oom", "error"})
ACTIVATION = "activation"  # derived: peak minus params, grads and optimizer state
HELD = "held"  # derived: the peak above the framework's own runtime (what the models hold)
SPEED = "throughput_samples_per_second"
STEP = "step_seconds_median"


class Key(NamedTuple):
    framework: str
    workload: str
    strategy: str
    batch_size: int
    world_size: int = 1  # a sharded cell is compared with cells of as many ranks


@dataclass(frozen=True)
class Target:
    """A claimed figure and the band of measured values that agrees with it.

    quantity: "saving" (1 - ratio), "ratio", "speedup" (throughput ratio) or "drop".
    Confirmed inside [low, high]; refuted beyond the band by more than margin; inconclusive
    in between, where run-to-run noise (5-10% on the committed runs) could decide it.
    """

    text: str  # the claim's own words
    quantity: str
    claimed: float
    low: float = -math.inf
    high: float = math.inf
    margin: float = 0.10

    def judge(self, value: float) -> str:
        if self.low <= value <= self.high:
            return CONFIRMED
        if value < self.low - self.margin or value > self.high + self.margin:
            return REFUTED
        return INCONCLUSIVE

    def band(self) -> str:
        def f(v: float) -> str:
            return fmt(self.quantity, v)

        lo, hi, m = self.low, self.high, self.margin
        if lo == -math.inf:
            return f"confirmed at {f(hi)} or less, refuted above {f(hi + m)}"
        if hi == math.inf:
            return f"confirmed at {f(lo)} or more, refuted below {f(lo - m)}"
        return f"confirmed within {f(lo)}..{f(hi)}, refuted outside {f(lo - m)}..{f(hi + m)}"

    def describe(self) -> str:
        return f"{self.text} ({self.quantity} {fmt(self.quantity, self.claimed)})"


def fmt(quantity: str, value: float) -> str:
    text = f"{value:.0%}" if quantity in ("saving", "drop", "share") else f"{value:.2f}x"
    return "0%" if text == "-0%" else text  # a saving of -0.2% is none, not a negative one


@dataclass(frozen=True)
class Finding:
    """One comparison on one layer: a value per numerator cell, judged if it has a target."""

    label: str  # layer and quantity, e.g. "host RSS added by a step, ratio"
    compared: str  # which cells, e.g. "torch resnet50 infer-half / infer, same batch"
    quantity: str
    values: dict[Key, float]
    target: Target | None = None
    part: str = ""  # the statement of the claim it judges (a claim can make several)
    batches: tuple[int, ...] = ()  # the batch sizes behind it, where not the values' keys

    @property
    def median(self) -> float:
        return statistics.median(self.values.values())

    @property
    def disagree(self) -> bool:
        """Batches on both sides of the claim: the median alone would hide that."""
        assert self.target is not None
        judged = {self.target.judge(v) for v in self.values.values()}
        return {CONFIRMED, REFUTED} <= judged

    def verdict(self) -> str:
        assert self.target is not None
        return INCONCLUSIVE if self.disagree else self.target.judge(self.median)

    def measured(self) -> str:
        vals = list(self.values.values())
        text = f"{self.label}: {fmt(self.quantity, self.median)}"
        if len(vals) > 1:
            lo, hi = fmt(self.quantity, min(vals)), fmt(self.quantity, max(vals))
            text += f" (median of {len(vals)}, {lo}..{hi})"
        elif not self.batches:  # thin evidence is said, not left to "median of" missing
            text += " (one batch)"
        return text

    def evidence(self) -> str:
        sizes = self.batches or sorted({k.batch_size for k in self.values})
        batches = ",".join(str(b) for b in sizes)
        return f"{self.compared} at bs {batches}"


@dataclass(frozen=True)
class Source:
    """The latest rows of one (machine, preset): one device, one input size."""

    machine: str
    preset: str
    device: str
    rows: pd.DataFrame

    @property
    def is_gpu(self) -> bool:
        return self.device not in ("", "cpu")

    @property
    def label(self) -> str:
        return f"{self.machine}/{self.preset}"

    def values(self, metric: str) -> dict[Key, float]:
        """Measured values of one metric (ACTIVATION: derived) per cell, ok cells only."""
        if metric == ACTIVATION:
            return self._activation()
        if metric == HELD:
            return self._held()
        rows = self.rows[(self.rows["metric"] == metric) & (self.rows["status"] == "ok")]
        rows = rows[rows["value"].notna()]
        return {_key(r): float(r.value) for r in rows.itertuples()}

    def statuses(self) -> dict[Key, str]:
        return {_key(r): str(r.status) for r in self.rows.itertuples()}

    def _activation(self) -> dict[Key, float]:
        # Host RSS added by a step is the CPU's activation proxy: params, grads and optimizer
        # state persist before the measured steps, so the delta holds activations and workspace.
        if not self.is_gpu:
            return self.values("peak_host_rss_delta_bytes")
        peak = self.values("peak_device_allocated_bytes")
        floor = self.values("analytic_floor_bytes")
        return {k: v - floor[k] for k, v in peak.items() if k in floor}

    def _held(self) -> dict[Key, float]:
        # The allocator sees only tensors on a GPU; on a CPU the process peak less its RSS
        # after the framework's import (libraries, thread pools) is what the cell added.
        if self.is_gpu:
            return self.values("peak_device_allocated_bytes")
        peak = self.values("peak_host_rss_bytes")
        runtime = self.values("host_rss_after_import_bytes")
        return {k: v - runtime[k] for k, v in peak.items() if k in runtime}


def _key(row: Any) -> Key:
    return Key(row.framework, row.workload, row.strategy, int(row.batch_size), int(row.world_size))


def metric_label(metric: str, device_is_gpu: bool) -> str:
    if metric == ACTIVATION:
        if device_is_gpu:
            return "activation memory (allocated peak - params, grads, optimizer state)"
        return "activation proxy (host RSS added by a step)"
    if metric == HELD:
        if device_is_gpu:
            return "device allocated peak"
        return "host peak above the framework's runtime (peak RSS - RSS after import)"
    return METRICS[metric].label


def memory_metrics(source: Source, process: bool = False) -> list[str]:
    """The allocator on GPUs (and the driver's figure where the claim is about it); on CPU
    what a step adds (where savings show) and what the cell holds above the framework's
    runtime (HELD: the allocator's counterpart, since neither counts the libraries and thread
    pools that no strategy changes, ~230 MiB of torch's), and the whole process's peak where
    the claim is about it."""
    if source.is_gpu:
        return ["peak_device_allocated_bytes"] + (["peak_device_process_bytes"] if process else [])
    # records older than the runtime's figure: the process peak stands in, named as such
    held = HELD if source.values("host_rss_after_import_bytes") else "peak_host_rss_bytes"
    process = process and held == HELD
    return ["peak_host_rss_delta_bytes", held] + (["peak_host_rss_bytes"] if process else [])


def ratios(
    values: dict[Key, float], numerators: Iterable[Key], to_den: Callable[[Key], Key | None]
) -> dict[Key, float]:
    """value(numerator) / value(its denominator cell), where both were measured."""
    out = {}
    for num in numerators:
        den = to_den(num)
        if den is not None and den in values and values[den] > 0:
            out[num] = values[num] / values[den]
    return out


def compare(
    source: Source,
    metrics: list[str],
    select: Callable[[Key], bool],
    to_den: Callable[[Key], Key | None],
    *,
    compared: str,
    quantity: str,
    target: Target | None = None,
    part: str = "",
    prefix: str = "",
) -> list[Finding]:
    """One finding per metric that has at least one pair measured on both sides."""
    out = []
    for metric in metrics:
        vals = source.values(metric)
        r = ratios(vals, [k for k in vals if select(k)], to_den)
        if not r:
            continue
        if quantity == "saving":
            r = {k: 1 - v for k, v in r.items()}
        label = f"{prefix}{metric_label(metric, source.is_gpu)}, {quantity}"
        out.append(Finding(label, compared, quantity, r, target, part))
    return out


def is_cell(framework: str, workload: str, *strategies: str) -> Callable[[Key], bool]:
    return lambda k: (
        k.framework == framework and k.workload == workload and k.strategy in strategies
    )


def same_batch(**changes: str) -> Callable[[Key], Key]:
    return lambda k: k._replace(**changes)


TO_BASELINE = same_batch(strategy="baseline")
