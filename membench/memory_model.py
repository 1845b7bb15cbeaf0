"""Where the memory goes, predicted from the architecture spec and the strategy alone.

A prediction is a breakdown: parameters, gradients, optimizer state, the input batch, and the
activations kept for the backward pass (or, for inference, the largest layer's input and
output), plus a runtime part that is not the model's: on a CPU host the process's resident
memory after the framework's import (measured, the one input that is), on a GPU nothing (the
allocator sees only tensors). Workspace (convolution scratch, allocator slack, compiler
buffers) is not modelled: the prediction error is largely that.

The advice strategies: infer-grad keeps a training forward's activations, twice (the held
output's graph is alive while the next forward records its own); two-models-resident holds two
sets of parameters, two-models-sequential one; varying lengths are predicted at the schedule's
longest. Not modelled: the host copy of a host-data batch, what a collector frees (hygiene
moves nothing the model counts) and fragmentation (the variable-length figure).

A workload takes part when its spec module (models/<workload>/spec.py) defines
TRAINABLE_PARAMETERS, OPTIMIZER_STATE_SLOTS, input_elements, saved_activations and
largest_live_pair (elements per sample).
Framework-free.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass

from membench.registry import Strategy

FLOAT32 = 4
HALF = 2


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

    def as_metrics(self) -> dict[str, float]:
        """Record metrics: predicted_<part>_bytes and predicted_peak_bytes."""
        out = {f"predicted_{k}_bytes": float(v) for k, v in asdict(self).items()}
        out["predicted_peak_bytes"] = float(self.total)
        return out


def spec_module(workload: str):
    """The workload's spec module if it carries the memory model's inputs, else None."""
    try:
        module = importlib.import_module(f"models.{workload.replace('-', '_')}.spec")
    except ImportError:
        return None
    needed = (
        "TRAINABLE_PARAMETERS", "OPTIMIZER_STATE_SLOTS", "input_elements", "saved_activations",
        "largest_live_pair",
    )  # fmt: skip
    return module if all(hasattr(module, n) for n in needed) else None


def activation_elements(spec, inputs: dict[str, int], checkpoint: bool) -> float:
    """Elements per sample kept for backward: all of them, or with checkpointing per block
    the stem, every block's output and one block's inside (recomputed during backward)."""
    stem, outputs, insides = spec.saved_activations(inputs)
    if checkpoint:
        return stem + sum(outputs) + max(insides, default=0.0)
    return stem + sum(outputs) + sum(insides)


def predict(
    workload: str,
    strategy: Strategy,
    batch_size: int,
    inputs: dict[str, int],
    runtime_bytes: float = 0.0,
) -> Breakdown | None:
    """The predicted peak of one training or inference step, or None where the workload
    has no memory model."""
    spec = spec_module(workload)
    if spec is None:
        return None
    params = float(spec.TRAINABLE_PARAMETERS + getattr(spec, "BN_RUNNING_STATISTICS", 0))
    half = strategy.precision != "fp32"
    input_elements = float(spec.input_elements(inputs))
    if strategy.mode == "infer":
        width = HALF if strategy.precision == "half" else FLOAT32
        copies = 2 if strategy.models == "two-resident" else 1
        live = spec.largest_live_pair(inputs)
        if strategy.eval_autograd:  # two graphs: the held output's and the one being recorded
            live = 2 * activation_elements(spec, inputs, checkpoint=False)
        return Breakdown(
            runtime_bytes, copies * params * width, 0.0, 0.0,
            input_elements * batch_size * width, live * batch_size * width,
        )  # fmt: skip
    micro_batch = batch_size / strategy.accumulate
    # mixed precision keeps float32 parameters, gradients and state; activations in 16 bits
    width = HALF if half else FLOAT32
    activations = activation_elements(spec, inputs, strategy.checkpoint) * micro_batch * width
    return Breakdown(
        runtime_bytes, params * FLOAT32, spec.TRAINABLE_PARAMETERS * FLOAT32,
        spec.TRAINABLE_PARAMETERS * FLOAT32 * spec.OPTIMIZER_STATE_SLOTS,
        input_elements * batch_size * FLOAT32, activations,
    )  # fmt: skip
