"""Where the memory goes, predicted from the architecture spec, the strategy and a framework's
calibrated constants: never from the cell being predicted.

Computed from the spec (models/<workload>/spec.py) and the strategy: parameters (and
BatchNorm statistics), gradients, optimizer state, the input batch, and the activations kept
for the backward pass (or, for inference, the largest layer's input and output).
Measured, in calibration runs of their own (membench.calibrate, stored per machine and
framework version): two constants per framework, workload and mode, `runtime_bytes` (what
the process holds besides the model: libraries, thread pools, compiled code, allocator
caches) and `activation_factor` (bytes a step holds per byte of the spec's activation count:
workspace, fusion, allocator slack). The spec-only prediction uses 0 and 1.

The advice strategies: infer-grad keeps a training forward's activations, twice (the held
output's graph is alive while the next forward records its own); two-models-resident holds two
sets of parameters, two-models-sequential one; varying lengths are predicted at the schedule's
longest. Not modelled: the host copy of a host-data batch, what a collector frees (hygiene
moves nothing the model counts) and fragmentation (the variable-length figure).

A workload takes part when its spec module defines OPTIMIZER_STATE_SLOTS,
trainable_parameters(inputs), input_elements, saved_activations and largest_live_pair
(elements per sample). Framework-free, pure arithmetic: the analysis recomputes it.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, replace

from membench.registry import Strategy

FLOAT32 = 4
HALF = 2
# The measured layer a prediction is judged against, per device kind.
MEASURED = {"cpu": "peak_host_rss_bytes", "gpu": "peak_device_allocated_bytes"}


@dataclass(frozen=True)
class Constants:
    """A framework's calibrated constants for one workload and mode."""

    runtime_bytes: float = 0.0
    activation_factor: float = 1.0


SPEC_ONLY = Constants()


@dataclass(frozen=True)
class Breakdown:
    runtime: float
    parameters: float
    gradients: float
    optimizer_state: float
    inputs: float
    activations: float

    @property
    def total(self) -> float:
        return sum(asdict(self).values())

    def as_metrics(self, suffix: str = "") -> dict[str, float]:
        """Record metrics: predicted_<part>_bytes and predicted_peak_bytes (+ suffix)."""
        out = {f"predicted_{k}{suffix}_bytes": float(v) for k, v in asdict(self).items()}
        out[f"predicted_peak{suffix}_bytes"] = float(self.total)
        return out


def spec_module(workload: str):
    """The workload's spec module if it carries the memory model's inputs, else None."""
    try:
        module = importlib.import_module(f"models.{workload.replace('-', '_')}.spec")
    except ImportError:
        return None
    needed = (
        "trainable_parameters", "OPTIMIZER_STATE_SLOTS", "input_elements", "saved_activations",
        "largest_live_pair",
    )  # fmt: skip
    return module if all(hasattr(module, n) for n in needed) else None


def activation_elements(spec, inputs: dict[str, int], checkpoint: bool) -> float:
    """Elements per sample kept for backward: all of them, or with checkpointing per block
    the part outside the blocks, every block's output and one block's inside (recomputed
    during backward)."""
    stem, outputs, insides = spec.saved_activations(inputs)
    if checkpoint:
        return stem + sum(outputs) + max(insides, default=0.0)
    return stem + sum(outputs) + sum(insides)


def predict(
    workload: str,
    strategy: Strategy,
    batch_size: int,
    inputs: dict[str, int],
    constants: Constants = SPEC_ONLY,
) -> Breakdown | None:
    """The predicted peak of one training or inference step, or None where the workload
    has no memory model."""
    spec = spec_module(workload)
    if spec is None:
        return None
    part = _spec_breakdown(spec, strategy, batch_size, inputs)
    return replace(
        part,
        runtime=constants.runtime_bytes,
        activations=part.activations * constants.activation_factor,
    )


def _spec_breakdown(spec, strategy: Strategy, batch_size: int, inputs: dict[str, int]) -> Breakdown:
    """What the spec alone gives (no runtime part, activations as counted)."""
    trainable = float(spec.trainable_parameters(inputs))
    params = trainable + getattr(spec, "BN_RUNNING_STATISTICS", 0)
    input_elements = float(spec.input_elements(inputs))
    if strategy.mode == "infer":
        width = HALF if strategy.precision == "half" else FLOAT32
        copies = 2 if strategy.models == "two-resident" else 1
        live = spec.largest_live_pair(inputs)
        if strategy.eval_autograd:  # two graphs: the held output's and the one being recorded
            live = 2 * activation_elements(spec, inputs, checkpoint=False)
        return Breakdown(
            0.0, copies * params * width, 0.0, 0.0,
            input_elements * batch_size * width, live * batch_size * width,
        )  # fmt: skip
    micro_batch = batch_size / strategy.accumulate
    # mixed precision keeps float32 parameters, gradients and state; activations in 16 bits
    width = HALF if strategy.precision != "fp32" else FLOAT32
    activations = activation_elements(spec, inputs, strategy.checkpoint) * micro_batch * width
    return Breakdown(
        0.0, params * FLOAT32, trainable * FLOAT32,
        trainable * FLOAT32 * spec.OPTIMIZER_STATE_SLOTS,
        input_elements * batch_size * FLOAT32, activations,
    )  # fmt: skip
