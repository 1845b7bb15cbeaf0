"""Where the memory goes, predicted from the architecture spec, the strategy and a framework's
calibrated constants: never from the cell being predicted.

Computed from the spec (models/<workload>/spec.py) and the strategy: parameters (and
BatchNorm statistics), gradients, optimizer state, the input batch, and the activations kept
for the backward pass (or, for inference, the largest layer's input and output).
Measured, in calibration runs of their own (membench calibrate: membench.commands.calibrate,
stored per machine and framework version): two constants per framework, workload and mode,
`runtime_bytes` (what the process holds besides the model: libraries, thread pools, compiled
code, allocator caches) and `activation_factor` (bytes a step holds per byte of the spec's
activation count: workspace, fusion, allocator slack). The spec-only prediction uses 0 and 1.

The advice strategies: infer-grad keeps a training forward's activations, twice (the held
output's graph is alive while the next forward records its own); two-models-resident holds two
sets of parameters, two-models-sequential one; varying lengths are predicted at the schedule's
longest. Not modelled: the host copy of a host-data batch, what a collector frees (hygiene
moves nothing the model counts) and fragmentation (the variable-length figure).

Sharded data parallelism (ZeRO's stages, per rank of W, each with batch/W): replicated (DDP)
keeps all of it; ZeRO-1 divides the optimizer state by W; ZeRO-2 and ZeRO-3 as FSDP runs them
divide parameters, gradients and optimizer state (FSDP keeps parameters sharded between steps
in both). The parameters gathered during the step are a term of their own: ZeRO-2 (FSDP
without resharding after forward) holds all of them unsharded from forward through backward,
ZeRO-3 the largest unit FSDP gathers at once (the spec's shard_unit_parameters). BatchNorm
statistics are buffers: replicated.

A workload takes part when its spec module defines OPTIMIZER_STATE_SLOTS,
trainable_parameters(inputs), input_elements, saved_activations and largest_live_pair
(elements per sample). Framework-free, pure arithmetic: the worker writes its terms into each
record (membench.memory.predictions), where `analysis` reads them.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, replace

from membench.metrics import PEAK_DEVICE_ALLOCATED_BYTES, PEAK_HOST_RSS_BYTES
from membench.registry import Strategy, knob_defaults

FLOAT32 = 4
HALF = 2
# How each of the strategy's knobs counts here: those the arithmetic below reads, and those it
# knows to leave its terms as they are (why, each). A knob in neither, a new one, is refused
# by predict where a strategy sets it: its effect on memory is stated here first (a test holds
# every knob of the registry to one of the two).
READ_KNOBS = ("mode", "precision", "checkpoint", "accumulate", "models", "eval_autograd",
              "sharding")  # fmt: skip
UNMODELLED_KNOBS = {
    "accumulate_mode": "how the micro-batches run, not how many a step holds",
    "compile": "a compiler's buffers and fusion: in the calibrated constants",
    "allocator": "an allocator's slack: in the calibrated constants",
    "fusion": "operator fusion's workspace: in the calibrated constants",
    "attention": "counted as plain attention's activations; a fused kernel's saving is the error",
    "matmul": "the arithmetic's precision, not what is stored",
    "memory_format": "a layout of the same tensors, the same bytes (a conversion's copies are "
    "the error)",
    "data": "the host copy of a host-data batch is not modelled",
    "hygiene_every": "what a collector frees is nothing the model counts",
    "lengths": "predicted at the schedule's longest (the inputs given)",
}


def unknown_knobs(strategy: Strategy) -> list[str]:
    """The knobs a strategy sets (away from their default) that this model does not know."""
    defaults = knob_defaults(type(strategy))
    known = {*READ_KNOBS, *UNMODELLED_KNOBS}
    return [k for k, v in strategy.knobs().items() if k not in known and v != defaults[k]]


# The measured layer a prediction is judged against, per device kind.
MEASURED = {"cpu": PEAK_HOST_RSS_BYTES, "gpu": PEAK_DEVICE_ALLOCATED_BYTES}


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
    gathered_parameters: float = 0.0  # sharded parameters gathered during the step

    @property
    def total(self) -> float:
        return sum(asdict(self).values())

    @property
    def model_state(self) -> float:
        """What a rank holds between steps: parameters, gradients, optimizer state."""
        return self.parameters + self.gradients + self.optimizer_state

    def as_metrics(self, suffix: str = "") -> dict[str, float]:
        """Record metrics: predicted_<part>_bytes and predicted_peak_bytes (+ suffix)."""
        parts = asdict(self)
        if not parts["gathered_parameters"]:  # only sharded cells gather
            del parts["gathered_parameters"]
        out = {f"predicted_{k}{suffix}_bytes": float(v) for k, v in parts.items()}
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
    world_size: int = 1,
) -> Breakdown | None:
    """The predicted peak of one training or inference step (of one rank, whose batch is
    batch_size / world_size), or None where the workload has no memory model. ValueError for
    a strategy that sets a knob the model does not know (READ_KNOBS, UNMODELLED_KNOBS)."""
    if unknown := unknown_knobs(strategy):
        raise ValueError(
            f"the memory model does not know {', '.join(unknown)} (strategy {strategy.name}): "
            "say how it counts in membench/memory/memory_model.py (READ_KNOBS or "
            "UNMODELLED_KNOBS)"
        )
    spec = spec_module(workload)
    if spec is None:
        return None
    part = _spec_breakdown(spec, strategy, batch_size // world_size, inputs)
    if strategy.sharding != "none":
        part = sharded(part, spec, strategy, inputs, world_size)
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


# the model-state terms each ZeRO stage divides by the world size
SHARDED_TERMS = {
    "replicated": (),
    "zero1": ("optimizer_state",),
    "zero2": ("parameters", "gradients", "optimizer_state"),
    "zero3": ("parameters", "gradients", "optimizer_state"),
}


def sharded(part: Breakdown, spec, strategy: Strategy, inputs: dict[str, int], w: int) -> Breakdown:
    """One rank's share of a training step's breakdown under the strategy's ZeRO stage."""
    trainable = float(spec.trainable_parameters(inputs)) * FLOAT32
    buffers = part.parameters - trainable  # BatchNorm statistics: never sharded
    terms = {"parameters": trainable, "gradients": part.gradients}
    terms["optimizer_state"] = part.optimizer_state
    for term in SHARDED_TERMS[strategy.sharding]:
        terms[term] /= w
    gathered = 0.0
    if strategy.sharding == "zero2":  # all of them, unsharded from forward to backward
        gathered = trainable
    elif strategy.sharding == "zero3":
        units = getattr(spec, "shard_unit_parameters", None)
        gathered = float(max(units(inputs))) * FLOAT32 if units else trainable
    terms["parameters"] += buffers
    return replace(part, **terms, gathered_parameters=gathered)


def model_state_error(predicted: Breakdown, measured: float) -> float:
    """The predicted model state per rank over the measured one, minus 1."""
    return predicted.model_state / measured - 1
