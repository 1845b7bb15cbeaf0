"""The published claims (docs/claims.md), each with a verdict computed from the results.

A verdict is never typed in: every claim names its claimed figure with an explicit tolerance
band, and an evaluation function turns a latest() frame into findings (ratios per batch size,
aggregated with the median). A CPU figure never stands in for a GPU verdict: a GPU claim with
only CPU data is "not measurable here" and shows the CPU figure for reference.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pandas as pd

from analysis.schema import METRICS
from membench.metrics import over_ranks

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
ACCUMULATE = re.compile(r"accumulate-(\d+)$")
AMP_STRATEGIES = ("amp-bf16", "amp-fp16")
SHARDED = ("zero1", "fsdp-zero2", "fsdp")  # ZeRO-1, -2, -3 (torch), each against ddp
ACTIVATION = "activation"  # derived: peak minus params, grads and optimizer state
HELD = "held"  # derived: the peak above the framework's own runtime (what the models hold)


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
    return f"{value:.0%}" if quantity in ("saving", "drop", "share") else f"{value:.2f}x"


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
    both host figures: what a step adds (where savings show) and the whole process's peak."""
    if source.is_gpu:
        return ["peak_device_allocated_bytes"] + (["peak_device_process_bytes"] if process else [])
    return ["peak_host_rss_delta_bytes", "peak_host_rss_bytes"]


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


SPEED = "throughput_samples_per_second"
STEP = "step_seconds_median"
TO_BASELINE = same_batch(strategy="baseline")


# --- the claimed figures (docs/claims.md) and their tolerances --------------------------------

C1_AMP = Target("about 40% less memory", "saving", 0.40, 0.30, 0.50, margin=0.05)
C2_ACT = Target("over 70% less activation memory (deep networks)", "saving", 0.70, low=0.70)
C3_JIT = Target("about 15% less than PyTorch", "saving", 0.15, 0.10, 0.20, margin=0.05)
C4_CKPT = Target("activations 12 GB -> 4 GB", "saving", 2 / 3, 0.57, 0.77)
C4_AMP = Target("a further 30% from mixed precision", "saving", 0.30, 0.20, 0.40)
C4_SPEED = Target("1.8x faster than the original", "speedup", 1.8, 1.5, 2.1, margin=0.2)
C5_MEM = Target("memory efficiency +45%", "saving", 0.45 / 1.45, 0.21, 0.41)
C5_SPEED = Target("throughput +30%", "speedup", 1.3, 1.2, 1.4)
C6_MICRO = Target("memory of batch b", "ratio", 1.0, 0.85, 1.15)
C7_DROP = Target("not monotonic in batch size", "drop", 0.10, low=0.10)
C8_INFER = Target("far less than training", "ratio", 0.6, high=0.6)
# Qualitative ("keeps the graph alive"): a graph shows as activation memory well above no_grad's.
C8_GRAD = Target("forgetting no_grad keeps the graph alive", "ratio", 1.5, low=1.5, margin=0.25)
C9_HALF = Target("roughly halves", "ratio", 0.5, 0.4, 0.6)
C10_TWO = Target("two side by side double memory", "ratio", 2.0, 1.8, 2.2)
C10_SEQ = Target("one at a time does not double it", "ratio", 1.0, high=1.2, margin=0.2)
C11_GC = Target("training 28.5 s -> 0.8 s", "speedup", 28.5 / 0.8, low=2.0, margin=0.5)
C12_JIT = Target("less device memory pressure", "ratio", 1.0, high=0.95, margin=0.05)


# --- evaluation functions: Source -> findings --------------------------------------------------


def eval_c1(src: Source) -> list[Finding]:
    # Each amp variant on its own: pooled, bf16 and fp16 would blur into one median.
    out = []
    for amp in AMP_STRATEGIES:
        out += compare(
            src,
            memory_metrics(src),
            is_cell(ADVICE_FRAMEWORK, "resnet50", amp),
            TO_BASELINE,
            compared=f"torch resnet50 {amp} vs baseline, same batch",
            quantity="saving",
            target=C1_AMP,
            part="memory",
            prefix=f"{amp}: ",
        )
    return out


def eval_c2(src: Source) -> list[Finding]:
    out = []
    # The figure is for deep networks (Transformer); ResNet-50 is shown beside it, not judged.
    for workload, target in (("transformer", C2_ACT), ("resnet50", None)):
        sel = is_cell(ADVICE_FRAMEWORK, workload, "checkpoint")
        what = f"torch {workload} checkpoint vs baseline, same batch"
        out += compare(
            src,
            [ACTIVATION],
            sel,
            TO_BASELINE,
            compared=what,
            quantity="saving",
            target=target,
            part="activation",
            prefix=f"{workload}: ",
        )
        out += compare(
            src, [STEP], sel, TO_BASELINE, compared=what, quantity="ratio", prefix=f"{workload}: "
        )
    return out


def eval_c3(src: Source) -> list[Finding]:
    return compare(
        src,
        memory_metrics(src, process=True),
        is_cell("jittor", "unet3d", "baseline"),
        same_batch(framework="torch"),
        compared="unet3d baseline, jittor vs torch, same batch",
        quantity="saving",
        target=C3_JIT,
        part="memory",
    )


def eval_c4(src: Source) -> list[Finding]:
    ckpt, amp = "checkpoint", "amp-bf16-checkpoint"
    return [
        *compare(
            src,
            [ACTIVATION],
            is_cell(ADVICE_FRAMEWORK, "unet3d", ckpt),
            TO_BASELINE,
            compared=f"torch unet3d {ckpt} vs baseline, same batch",
            quantity="saving",
            target=C4_CKPT,
            part="checkpoint",
            prefix=f"{ckpt}: ",
        ),
        *compare(
            src,
            [ACTIVATION],
            is_cell(ADVICE_FRAMEWORK, "unet3d", amp),
            same_batch(strategy=ckpt),
            compared=f"torch unet3d {amp} vs {ckpt}, same batch",
            quantity="saving",
            target=C4_AMP,
            part="amp",
            prefix=f"{amp} vs {ckpt}: ",
        ),
        *compare(
            src,
            [SPEED],
            is_cell(ADVICE_FRAMEWORK, "unet3d", amp),
            TO_BASELINE,
            compared=f"torch unet3d {amp} vs baseline, same batch",
            quantity="speedup",
            target=C4_SPEED,
            part="speed",
        ),
    ]


def eval_c5(src: Source) -> list[Finding]:
    # The suite has each part as its own strategy, not their combination in one cell: each
    # part is shown for reference, never judged as the whole claim.
    out = []
    for strategy in ("compile", "fused-attention"):
        sel = is_cell(ADVICE_FRAMEWORK, "transformer", strategy)
        what = f"torch transformer {strategy} vs baseline, same batch"
        out += compare(
            src, memory_metrics(src), sel, TO_BASELINE, compared=what, quantity="saving",
            prefix=f"{strategy}: ",
        )  # fmt: skip
        out += compare(
            src, [SPEED], sel, TO_BASELINE, compared=what, quantity="speedup",
            prefix=f"{strategy}: ",
        )  # fmt: skip
    return out + _sharding_parts(src)


def _sharding_parts(src: Source) -> list[Finding]:
    """ZeRO stages against replicated data parallelism (DDP) at the same global batch and
    ranks: the busiest rank's peak and model state (what decides whether it fits), and speed."""
    per_rank = [over_ranks(m, "max") for m in [*memory_metrics(src), "model_state_bytes"]]
    to_ddp = same_batch(strategy="ddp")
    out = []
    for strategy in SHARDED:
        sel = is_cell(ADVICE_FRAMEWORK, "transformer", strategy)
        what = f"torch transformer {strategy} vs ddp, same global batch and ranks"
        out += compare(
            src, per_rank, sel, to_ddp, compared=what, quantity="saving", prefix=f"{strategy}: "
        )
        out += compare(
            src, [SPEED], sel, to_ddp, compared=what, quantity="speedup", prefix=f"{strategy}: "
        )
    return out


def _micro_batch(k: Key) -> Key | None:
    """baseline at B/k for accumulate-k at global batch B."""
    m = ACCUMULATE.match(k.strategy)
    if not m or k.batch_size % int(m.group(1)):
        return None
    return k._replace(strategy="baseline", batch_size=k.batch_size // int(m.group(1)))


def eval_c6(src: Source) -> list[Finding]:
    def sel(k: Key) -> bool:
        return k.framework == ADVICE_FRAMEWORK and bool(ACCUMULATE.match(k.strategy))

    judged = compare(
        src,
        memory_metrics(src),
        sel,
        _micro_batch,
        compared="torch accumulate-k at global batch B vs baseline at B/k",
        quantity="ratio",
        target=C6_MICRO,
        part="memory",
        prefix="vs baseline at B/k: ",
    )
    # What accumulation buys: the saving against the full batch, shown beside the verdict.
    full = compare(
        src,
        memory_metrics(src),
        sel,
        TO_BASELINE,
        compared="torch accumulate-k at B vs baseline at B",
        quantity="ratio",
        prefix="vs baseline at B: ",
    )
    return judged + full


def _largest_drop(statuses: dict[int, str], peaks: dict[int, float]) -> float:
    """Largest relative fall of peak memory from a batch to a larger one (negative: it only
    rose); a failed batch below one that ran counts as 100% (it needed more than all)."""
    batches = sorted(statuses)
    drop = -math.inf
    for i, small in enumerate(batches):
        for big in batches[i + 1 :]:
            if statuses[small] in FAILED and statuses[big] == "ok":
                return 1.0
            if small in peaks and big in peaks:
                drop = max(drop, (peaks[small] - peaks[big]) / peaks[small])
    return drop


MIN_GRID = 4  # fewer batch sizes cannot show (non-)monotonicity


def _infer_grids(statuses: dict[Key, str]) -> dict[tuple[str, str], dict[int, str]]:
    grids: dict[tuple[str, str], dict[int, str]] = {}
    for k, status in statuses.items():
        if k.strategy == "infer":
            grids.setdefault((k.framework, k.workload), {})[k.batch_size] = status
    return {fw_wl: g for fw_wl, g in sorted(grids.items()) if len(g) >= MIN_GRID}


def infer_grid_size(src: Source) -> int:
    """Most batch sizes one framework's infer cells cover in a source: the eval probe's
    presets (cpu-eval, gpu-eval) cover a fine grid, the standard presets a coarse one."""
    grids: dict[tuple[str, str], set[int]] = {}
    for k in src.statuses():
        if k.strategy == "infer":
            grids.setdefault((k.framework, k.workload), set()).add(k.batch_size)
    return max((len(g) for g in grids.values()), default=0)


def eval_c7(src: Source) -> list[Finding]:
    grids = _infer_grids(src.statuses())
    out = []
    for metric in memory_metrics(src, process=True):
        peaks = src.values(metric)
        for (framework, workload), grid in grids.items():
            cell = (framework, workload, "infer")
            mine = {k.batch_size: v for k, v in peaks.items() if k[:3] == cell}
            drop = _largest_drop(grid, mine)
            if drop == -math.inf:
                continue
            # Jittor is judged; the other frameworks are the control the claim compares with.
            out.append(
                Finding(
                    label=f"{metric_label(metric, src.is_gpu)}, largest drop ({framework})",
                    compared=f"{framework} {workload} infer over the batch grid",
                    quantity="drop",
                    values={Key(framework, workload, "infer", max(grid)): drop},
                    target=C7_DROP if framework == "jittor" else None,
                    part="eval",
                    batches=tuple(sorted(grid)),
                )
            )
    return out


def eval_c8(src: Source) -> list[Finding]:
    out = compare(
        src,
        memory_metrics(src),
        is_cell(ADVICE_FRAMEWORK, "resnet50", "infer"),
        TO_BASELINE,
        compared="torch resnet50 infer vs baseline (train), same batch",
        quantity="ratio",
        target=C8_INFER,
        part="memory",
    )
    # The second half: the memory a step's graph holds, infer-grad over infer. PyTorch's
    # ResNet-50 is judged; its Transformer and Jittor (whose eval() stops parameter gradients)
    # are shown beside it.
    for framework, workload in (("torch", "resnet50"), ("torch", "transformer"),
                                ("jittor", "resnet50")):  # fmt: skip
        judged = (framework, workload) == (ADVICE_FRAMEWORK, "resnet50")
        out += compare(
            src,
            [ACTIVATION],
            is_cell(framework, workload, "infer-grad"),
            same_batch(strategy="infer"),
            compared=f"{framework} {workload} infer-grad vs infer, same batch",
            quantity="ratio",
            target=C8_GRAD if judged else None,
            part="graph",
            prefix=f"no_grad forgotten, {framework} {workload}: ",
        )
    return out


def eval_c9(src: Source) -> list[Finding]:
    return compare(
        src,
        memory_metrics(src),
        is_cell(ADVICE_FRAMEWORK, "resnet50", "infer-half"),
        same_batch(strategy="infer"),
        compared="torch resnet50 infer-half vs infer, same batch",
        quantity="ratio",
        target=C9_HALF,
        part="memory",
    )


TWO_MODELS = (("two-models-resident", C10_TWO, "side by side"),
              ("two-models-sequential", C10_SEQ, "one at a time"))  # fmt: skip


def eval_c10(src: Source) -> list[Finding]:
    """Each two-model variant over one model's inference (infer), same batch, on the memory the
    models and their activations hold; PyTorch's ResNet-50 judged, the others shown."""
    out = []
    for framework in ("torch", "jax", "jittor"):
        for strategy, target, part in TWO_MODELS:
            judged = framework == ADVICE_FRAMEWORK
            out += compare(
                src,
                [HELD],
                is_cell(framework, "resnet50", strategy),
                same_batch(strategy="infer"),
                compared=f"{framework} resnet50 {strategy} vs infer (one model), same batch",
                quantity="ratio",
                target=target if judged else None,
                part=part,
                prefix=f"{strategy}, {framework}: ",
            )
    return out


HYGIENE = re.compile(r"hygiene-(\d+)$")
TO_HOST_DATA = same_batch(strategy="host-data")


def eval_c11(src: Source) -> list[Finding]:
    """hygiene-k vs host-data (the same training step without it), same framework, workload
    and batch, every framework and workload pooled: the claim is about the practice."""

    def sel(k: Key) -> bool:
        return bool(HYGIENE.match(k.strategy))

    what = "hygiene-k vs host-data, same framework, workload and batch (all pooled)"
    # Mean step time: the collector runs every k steps, a median would skip it.
    slower = ratios(src.values("step_seconds_mean"), filter(sel, src.values("step_seconds_mean")),
                    TO_HOST_DATA)  # fmt: skip
    out = []
    if slower:
        speedup = {k: 1 / v for k, v in slower.items() if v > 0}
        label = "training time (mean step), speedup"
        out.append(Finding(label, what, "speedup", speedup, C11_GC, "training time"))
    out += compare(src, ["transfer_seconds_median"], sel, TO_HOST_DATA, compared=what,
                   quantity="ratio", prefix="copy time: ")  # fmt: skip
    share = {k: v for k, v in src.values("collector_share").items() if sel(k)}
    if share:
        label = f"{metric_label('collector_share', src.is_gpu)}, share"
        out.append(Finding(label, "hygiene-k cells", "share", share))
    out += compare(src, memory_metrics(src), sel, TO_HOST_DATA, compared=what, quantity="ratio",
                   prefix="memory: ")  # fmt: skip
    return out


def eval_nothing(src: Source) -> list[Finding]:
    """For claims whose cells the suite cannot produce yet (the blockers say why)."""
    return []


# --- the claims ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Need:
    """Cells a claim needs: any of `names` in `column` somewhere in the results."""

    column: str  # framework, workload or strategy
    names: tuple[str, ...]

    def missing(self, frame: pd.DataFrame) -> str | None:
        if frame[self.column].isin(self.names).any():
            return None
        names = " or ".join(self.names)
        return (
            f"no {names} workload results" if self.column == "workload" else f"no {names} results"
        )


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    measures: str
    targets: tuple[Target, ...]
    gpu: bool  # about GPU memory: a CPU figure is shown, never judged
    evaluate: Callable[[Source], list[Finding]]
    needs: tuple[Need, ...] = ()
    blockers: tuple[str, ...] = ()  # what the suite lacks, whatever the results
    notes: tuple[str, ...] = ()  # the parts of the claim that are not measured
    # Statements (Finding.part) that must each be judged before the claim can be confirmed:
    # a claim with a half unmeasured is at best inconclusive (refuted if a measured half is).
    parts: tuple[str, ...] = ()
    # Ranks sources (higher first, within GPU-before-CPU) where the default order (most rows)
    # is not the most telling one: C7 wants the finest batch grid, i.e. the eval probe.
    prefer: Callable[[Source], float] | None = None

    @property
    def claimed(self) -> str:
        return "; ".join(t.describe() for t in self.targets)


def _fw(*n: str) -> Need:
    return Need("framework", n)


def _wl(*n: str) -> Need:
    return Need("workload", n)


def _st(*n: str) -> Need:
    return Need("strategy", n)


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "C1",
        "Automatic mixed precision cuts ResNet-50 training memory by about 40% with no loss "
        "of accuracy.",
        "ResNet-50 train, amp vs baseline, same batch: peak memory ratio",
        (C1_AMP,),
        gpu=True,
        evaluate=eval_c1,
        needs=(_fw("torch"), _wl("resnet50"), _st("baseline"), _st(*AMP_STRATEGIES)),
        notes=("'no loss of accuracy' is not measured here (the tests check amp gradients)",),
    ),
    Claim(
        "C2",
        "Gradient checkpointing saves about 65% of memory per extra forward pass, and over 70% "
        "of activation memory for deep networks (Transformer, BERT).",
        "checkpoint vs baseline: activation memory (peak minus params, grads, optimizer state)",
        (C2_ACT,),
        gpu=True,
        evaluate=eval_c2,
        needs=(_fw("torch"), _wl("transformer"), _st("baseline"), _st("checkpoint")),
        notes=("'65% per extra forward pass' is not judged; the step-time ratio is shown",),
    ),
    Claim(
        "C3",
        "Jittor needs about 15% less GPU memory than PyTorch on U-Net segmentation, thanks to "
        "operator fusion.",
        "3D U-Net train, jittor vs torch, same batch: peak memory (allocator and process)",
        (C3_JIT,),
        gpu=True,
        evaluate=eval_c3,
        needs=(_fw("jittor"), _fw("torch"), _wl("unet3d"), _st("baseline")),
    ),
    Claim(
        "C4",
        "On a 3D U-Net, checkpointing takes activation memory from 12 GB to 4 GB, mixed "
        "precision saves a further 30%, and the combination trains 1.8x faster.",
        "3D U-Net: baseline vs checkpoint vs checkpoint+amp: activation memory, throughput",
        (C4_CKPT, C4_AMP, C4_SPEED),
        gpu=True,
        evaluate=eval_c4,
        needs=(_wl("unet3d"), _st("checkpoint"), _st("amp-bf16-checkpoint")),
        notes=("ratios are compared, not the 12 GB/4 GB of the 512x512x128 volume",),
    ),
    Claim(
        "C5",
        "For a 1B-parameter Transformer, torch.compile, an optimized attention and ZeRO "
        "sharding raise memory efficiency by 45% and throughput by 30%.",
        "Transformer train: compile, fused attention, sharding vs plain: memory, throughput",
        (C5_MEM, C5_SPEED),
        gpu=True,
        evaluate=eval_c5,
        needs=(_wl("transformer"), _st("compile")),
        blockers=(
            "compile, fused attention and ZeRO sharding are separate strategies: the claimed "
            "combination is not one cell of the suite, so each part is shown for reference "
            "(sharding: each ZeRO stage against ddp at the same ranks, per-rank maxima)",
        ),
    ),
    Claim(
        "C6",
        "Gradient accumulation over k micro-batches trains an effective batch of k*b with the "
        "memory of batch b.",
        "accumulate-k at global batch B vs baseline at B/k and at B: peak memory",
        (C6_MICRO,),
        gpu=False,
        evaluate=eval_c6,
        needs=(_fw("torch"), _st("baseline"), _st("accumulate-2", "accumulate-4")),
        notes=(
            "gradient equality is not measured here (the tests check it with eval-mode "
            "BatchNorm; train-mode BatchNorm normalises per micro-batch)",
        ),
    ),
    Claim(
        "C7",
        "Jittor in eval mode can fail at a test batch of 200 on a 16 GB GPU while 500 works: "
        "eval memory is not monotonic in batch size.",
        "eval over a fine batch grid, per framework: status and peak memory monotonicity",
        (C7_DROP,),
        gpu=True,
        evaluate=eval_c7,
        needs=(_fw("jittor"), _st("infer")),
        prefer=infer_grid_size,
    ),
    Claim(
        "C8",
        "Eval/no-grad inference needs far less memory than training at the same batch; "
        "forgetting no_grad keeps the autograd graph alive.",
        "infer vs train, same batch: peak memory; infer-grad vs infer: activation memory",
        (C8_INFER, C8_GRAD),
        gpu=False,
        evaluate=eval_c8,
        needs=(_fw("torch"), _st("infer"), _st("baseline")),
        parts=("memory", "graph"),
        notes=(
            "JAX has no no_grad to forget (a forward outside a transformation keeps no tape): "
            "its infer-grad cells are unsupported",
        ),
    ),
    Claim(
        "C9",
        "Half-precision inference (model.half()) roughly halves inference memory.",
        "infer-half vs infer, same batch: peak memory ratio",
        (C9_HALF,),
        gpu=False,
        evaluate=eval_c9,
        needs=(_fw("torch"), _st("infer-half"), _st("infer")),
    ),
    Claim(
        "C10",
        "Loading two models side by side doubles memory; loading them one at a time does not.",
        "two-model inference, concurrent vs sequential: peak memory",
        (C10_TWO, C10_SEQ),
        gpu=False,
        evaluate=eval_c10,
        needs=(_fw("torch"), _st("infer"), _st("two-models-resident", "two-models-sequential")),
        parts=("side by side", "one at a time"),
        notes=(
            "two copies of the workload's model (independently initialised), one batch; "
            "sequential: build, run, free and release for each in turn, every step",
        ),
    ),
    Claim(
        "C11",
        "Calling the garbage collector every couple of iterations (and releasing cached device "
        "memory) slashes transfer and training time under memory pressure (Flux.jl).",
        "gc + cache-release hygiene every k steps vs none, host data copied every step: "
        "mean step time, copy time, collector share",
        (C11_GC,),
        gpu=False,
        evaluate=eval_c11,
        needs=(_st("host-data"), _st("hygiene-2")),
        notes=(
            "measured with the Python frameworks' collectors and cache release: Flux.jl is not "
            "available (no Julia toolchain in the package registries)",
            "memory pressure: on a CPU host the batches are far below the host's memory, so "
            "the claim's condition is not reproduced there; a GPU run under a device budget is",
        ),
    ),
    Claim(
        "C12",
        "Jittor's managed (unified) allocator and amp_level=3 reduce device memory pressure.",
        "jittor managed allocator, amp_level 3 vs 0: peak memory, throughput, over-budget batch",
        (C12_JIT,),
        gpu=True,
        evaluate=eval_nothing,
        needs=(_fw("jittor"),),
        blockers=(
            "not evaluated yet: the managed-allocator strategy runs on GPUs only and no "
            "comparison is coded; the suite's Jittor amp runs amp_level 5, not 3",
        ),
    ),
)


# --- verdicts -------------------------------------------------------------------------------------


# The one rule for every claim, whatever its layers (stated in every verdict's reason).
RULE = (
    "rule: a statement is confirmed only when every measured layer is inside its band, "
    "refuted only when every layer is refuted, else inconclusive; a claim is refuted by any "
    "refuted statement and confirmed only when all are confirmed"
)


def combine(findings: list[Finding]) -> tuple[str, str]:
    """Verdict and reason from the judged findings, by RULE: within one statement every
    measured layer must agree; across statements a claim is refuted by any refuted
    statement, confirmed only by all."""
    judged = [f for f in findings if f.target is not None]
    parts: dict[str, list[str]] = {}
    reasons = []
    for f in judged:
        parts.setdefault(f.part, []).append(f.verdict())
        why = " (batches disagree)" if f.disagree else ""
        reasons.append(f"{f.label} {fmt(f.quantity, f.median)}: {f.verdict()}{why}")
    part_verdicts = [_part_verdict(v) for v in parts.values()]
    for part, layers in parts.items():
        if len(set(layers)) > 1:
            reasons.append(f"the layers of '{part}' disagree")
    if REFUTED in part_verdicts:
        verdict = REFUTED
    elif all(v == CONFIRMED for v in part_verdicts):
        verdict = CONFIRMED
    else:
        verdict = INCONCLUSIVE
    bands = dict.fromkeys(f"{f.target.text}: {f.target.band()}" for f in judged if f.target)
    tolerances = [f"tolerance: {b}" for b in bands]
    return verdict, "; ".join([*reasons, *tolerances, RULE])


def _part_verdict(layer_verdicts: list[str]) -> str:
    if len(set(layer_verdicts)) == 1:
        return layer_verdicts[0]
    return INCONCLUSIVE  # the layers disagree


def sources(frame: pd.DataFrame) -> list[Source]:
    """(machine, preset) groups, GPUs first, then full presets before smoke, then most data."""
    if "source" in frame.columns:
        frame = frame[frame["source"] == "record"]
    out = []
    for (machine, preset), rows in frame.groupby(["machine", "preset"], sort=True):
        # A non-ok record may lack the device; the ok rows of the same machine say it.
        ok = rows.loc[rows["status"] == "ok", "device"]
        devices = ok[ok != ""] if len(ok) else rows["device"]
        device = str(devices.mode().iloc[0]) if len(devices) else ""
        out.append(Source(str(machine), str(preset), device, rows))
    return sorted(out, key=lambda s: (not s.is_gpu, s.preset == "smoke", -len(s.rows), s.label))


@dataclass
class _Row:
    claim: Claim
    verdict: str = NOT_MEASURABLE
    measured: str = ""
    reasons: list[str] = field(default_factory=list)
    device: str = ""
    evidence: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, str]:
        c = self.claim
        reason = "; ".join(self.reasons + list(c.notes))
        evidence = "; ".join(self.evidence)
        values = [
            c.id,
            c.text,
            c.claimed,
            self.measured,
            self.verdict,
            reason,
            self.device,
            evidence,
        ]
        return dict(zip(TABLE_COLUMNS, values, strict=True))


def _describe(src: Source, findings: list[Finding]) -> tuple[str, str]:
    suffix = "" if src.is_gpu else " (cpu)"
    measured = "; ".join(f.measured() + suffix for f in findings)
    evidence = f"{src.label}: " + "; ".join(dict.fromkeys(f.evidence() for f in findings))
    return measured, evidence


def evaluate(claim: Claim, frame: pd.DataFrame, srcs: list[Source]) -> dict[str, str]:
    """One row of the claims table."""
    row = _Row(claim)
    row.reasons = [m for n in claim.needs if (m := n.missing(frame))] + list(claim.blockers)
    if claim.prefer is not None:
        srcs = sorted(srcs, key=lambda s: (not s.is_gpu, -claim.prefer(s)))
    results = [(s, f) for s in srcs if s.device and (f := claim.evaluate(s))]
    gpu_results = [(s, f) for s, f in results if s.is_gpu]
    if claim.gpu and not gpu_results:
        lead = "no GPU results for these cells" if any(s.is_gpu for s in srcs) else NEEDS_GPU
        row.reasons.insert(0, f"{lead}; {REFERENCE}" if results else lead)
    elif claim.gpu:
        results = gpu_results
    if not results:
        row.reasons = row.reasons or ["no cells with both sides of the comparison measured ok"]
        return row.as_dict()
    src, findings = results[0]
    row.device = src.device
    row.measured, evidence = _describe(src, findings)
    row.evidence = [evidence]
    if row.reasons:  # shown for reference only: every source's figures (C5: the shard preset's)
        for other, found in results[1:]:
            measured, evidence = _describe(other, found)
            row.measured += f"; {other.label}: {measured}"
            row.evidence.append(evidence)
        return row.as_dict()
    if not any(f.target for f in findings):
        row.reasons = ["no judged comparison measured (only reference figures)"]
        return row.as_dict()
    row.verdict, reason = combine(findings)
    row.reasons = [reason]
    judged = {f.part for f in findings if f.target}
    if unjudged := [p for p in claim.parts if p not in judged]:
        row.reasons.append(f"not measured: {', '.join(unjudged)}")
        if row.verdict == CONFIRMED:
            row.verdict = INCONCLUSIVE
    # Other devices' verdicts of a device-neutral claim, for the reader (never combined).
    for other, f in results[1:]:
        if any(x.target for x in f):
            verdict = combine(f)[0]
            row.evidence.append(f"also {other.label} ({other.device}): {verdict}")
    return row.as_dict()


def claims_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The claims table from a latest() frame: one row per claim, verdicts computed."""
    srcs = sources(frame)
    return pd.DataFrame([evaluate(c, frame, srcs) for c in CLAIMS], columns=TABLE_COLUMNS)


def how_judged() -> pd.DataFrame:
    """Each claim as docs/claims.md states it: what is measured, the bands its verdict uses,
    whether only a GPU may judge it, and what the suite cannot measure of it."""
    rows = []
    for c in CLAIMS:
        bands = "; ".join(f"{t.text}: {t.band()}" for t in c.targets)
        rows.append({
            "id": c.id, "measured as": c.measures, "bands": bands,
            "judged on": "GPU results only" if c.gpu else "any device (named in the verdict)",
            "not measured": "; ".join([*c.blockers, *c.notes]) or "-",
        })  # fmt: skip
    return pd.DataFrame(rows)
