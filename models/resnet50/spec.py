"""ResNet-50 v1.5 (torchvision layout), framework-neutral.

v1.5 puts the stride of a downsampling bottleneck on its 3x3 convolution (v1 puts it on the
first 1x1). Every framework builds its model from these constants and the same init scheme:
convolutions He-normal (fan_out, ReLU gain), BatchNorm scale 1 and bias 0, the classifier
uniform(+-1/sqrt(fan_in)) for weights and bias, no zero-init of residual BatchNorm scales.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

STAGE_DEPTHS = (3, 4, 6, 3)
STAGE_WIDTHS = (64, 128, 256, 512)
EXPANSION = 4
STEM_WIDTH = 64
STEM_KERNEL, STEM_STRIDE = 7, 2
POOL_KERNEL, POOL_STRIDE, POOL_PADDING = 3, 2, 1
BN_EPS = 1e-5
BN_MOMENTUM = 0.1  # weight of the new batch statistic (torch convention; Flax's is 1 - this)
NUM_CLASSES = 1000
# Published count for torchvision's resnet50; tests check every framework's model against it.
TRAINABLE_PARAMETERS = 25_557_032
BN_RUNNING_STATISTICS = 53_120

SGD_LR = 0.1
SGD_MOMENTUM = 0.9


@dataclass(frozen=True)
class Bottleneck:
    stage: int
    index: int
    in_channels: int
    width: int
    stride: int

    @property
    def out_channels(self) -> int:
        return self.width * EXPANSION

    @property
    def has_projection(self) -> bool:
        return self.stride != 1 or self.in_channels != self.out_channels


def bottlenecks() -> Iterator[Bottleneck]:
    channels = STEM_WIDTH
    for stage, (depth, width) in enumerate(zip(STAGE_DEPTHS, STAGE_WIDTHS, strict=True)):
        for index in range(depth):
            stride = 2 if (index == 0 and stage > 0) else 1
            block = Bottleneck(stage, index, channels, width, stride)
            yield block
            channels = block.out_channels


FEATURES = STAGE_WIDTHS[-1] * EXPANSION


def synthetic_batch(
    batch_size: int, inputs: dict[str, int], seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The same images (NCHW float32, standard normal) and labels for every framework."""
    image_size = inputs["image_size"]
    num_classes = inputs.get("num_classes", NUM_CLASSES)
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch_size, 3, image_size, image_size), dtype=np.float32)
    labels = rng.integers(0, num_classes, size=(batch_size,), dtype=np.int64)
    return images, labels


# -- the analytic memory model (membench.memory.memory_model) --------------------------------------
OPTIMIZER_STATE_SLOTS = 1  # SGD momentum: one buffer per parameter


def trainable_parameters(inputs: dict[str, int]) -> int:
    """The published count with 1000 classes; the classifier follows num_classes."""
    classes = inputs.get("num_classes", NUM_CLASSES)
    return TRAINABLE_PARAMETERS + (classes - NUM_CLASSES) * (FEATURES + 1)


def shard_unit_parameters(inputs: dict[str, int]) -> list[int]:
    """Parameters of each unit FSDP gathers at once: the root (stem and classifier), then each
    bottleneck (three convolutions, their BatchNorms, the projection where there is one)."""
    units = []
    for b in bottlenecks():
        w, out = b.width, b.out_channels
        n = b.in_channels * w + 9 * w * w + w * out + 2 * (w + w + out)
        units.append(n + (b.in_channels * out + 2 * out if b.has_projection else 0))
    return [trainable_parameters(inputs) - sum(units), *units]


def input_elements(inputs: dict[str, int]) -> int:
    """Elements of one sample's image (labels are negligible)."""
    return 3 * inputs["image_size"] ** 2


def _conv_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def saved_activations(inputs: dict[str, int]) -> tuple[float, list[float], list[float]]:
    """Elements per sample kept for the backward pass, as (stem, block outputs, block
    insides). A convolution keeps its input; BatchNorm keeps its input (the convolution's
    output); ReLU keeps its output, which is the next convolution's input (counted once);
    max-pooling keeps its argmax indices (int64: two float32 elements each). A residual
    block's output is what checkpointing keeps; its inside is what it recomputes."""
    size = _conv_size(inputs["image_size"], STEM_KERNEL, STEM_STRIDE, 3)
    pooled = _conv_size(size, POOL_KERNEL, POOL_STRIDE, POOL_PADDING)
    # the image itself, which the first convolution keeps, is the input batch (counted apart)
    stem = 2 * STEM_WIDTH * size * size + 2 * STEM_WIDTH * pooled * pooled
    outputs, insides = [], []
    size = pooled
    for block in bottlenecks():
        out_size = size // block.stride
        inside = 2 * block.width * size * size  # conv1 output, ReLU output
        inside += 2 * block.width * out_size * out_size  # conv2 output, ReLU output
        inside += block.out_channels * out_size * out_size  # conv3 output
        if block.has_projection:
            inside += block.out_channels * out_size * out_size  # projection conv output
        outputs.append(float(block.out_channels * out_size * out_size))  # ReLU after the add
        insides.append(float(inside))
        size = out_size
    return float(stem), outputs, insides


def largest_live_pair(inputs: dict[str, int]) -> float:
    """Elements per sample of the largest input+output pair of one layer: what inference,
    which keeps nothing for a backward pass, holds at its peak."""
    size = _conv_size(inputs["image_size"], STEM_KERNEL, STEM_STRIDE, 3)
    largest = 3 * inputs["image_size"] ** 2 + STEM_WIDTH * size * size
    size = _conv_size(size, POOL_KERNEL, POOL_STRIDE, POOL_PADDING)
    for block in bottlenecks():
        out_size = size // block.stride
        largest = max(
            largest,
            block.in_channels * size * size + block.width * size * size,
            block.width * size * size + block.width * out_size * out_size,
            # the residual add: its two inputs and the result
            3 * block.out_channels * out_size * out_size,
        )
        size = out_size
    return float(largest)
