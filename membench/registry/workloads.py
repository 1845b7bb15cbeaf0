"""The workloads: one architecture each, with a model module per framework that has one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from membench.registry.frameworks import FRAMEWORKS
from membench.registry.names import lookup

MODELS = Path(__file__).resolve().parents[2] / "models"


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    # Model modules found elsewhere than models/<workload>/<stem>_impl.py (a plugin's)
    models: dict[str, str] = field(default_factory=dict)
    attention: bool = False  # has self-attention, so the attention knob applies
    sequence: bool = False  # takes token sequences, so the lengths knob applies
    # the spatial dimensions of its convolutions (2: images, 3: volumes; 0: none), so the
    # memory-format knob applies (channels-last is NHWC for images, NDHWC for volumes)
    convolution_dims: int = 0

    @property
    def model_modules(self) -> dict[str, str]:
        """Per registered framework, its model module: models/<workload>/<stem>_impl.py
        where that file exists (the convention), else the workload's own entry."""
        folder = self.name.replace("-", "_")
        found = {
            f.name: f"models.{folder}.{f.stem}_impl"
            for f in FRAMEWORKS.values()
            if (MODELS / folder / f"{f.stem}_impl.py").is_file()
        }
        return {**found, **self.models}


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            "resnet50",
            "ResNet-50 v1.5 image classifier (25,557,032 parameters), cross-entropy, SGD+momentum",
            convolution_dims=2,
        ),
        Workload(
            "unet3d",
            "3D U-Net (Cicek et al. 2016), 4 levels, 1 input channel, 3 classes "
            "(19,071,459 parameters), soft-Dice + cross-entropy, Adam",
            convolution_dims=3,
        ),
        Workload(
            "transformer",
            "GPT-2-style decoder (pre-LN, causal attention, tied embeddings; GPT-2 small "
            "124,439,808 parameters where the preset does not shrink it), next-token loss, AdamW",
            attention=True,
            sequence=True,
        ),
    ]
}


def register_workload(workload: Workload) -> None:
    if not isinstance(workload, Workload):  # a plugin's mistake, named at its import
        raise TypeError(f"register_workload takes a Workload, got {workload!r}")
    WORKLOADS[workload.name] = workload


def workload(name: str) -> Workload:
    return lookup(WORKLOADS, "workload", name)
