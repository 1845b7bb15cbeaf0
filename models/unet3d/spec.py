"""3D U-Net (Cicek et al. 2016), framework-neutral.

Four resolution levels. Analysis path: per level two 3x3x3 convolutions, each followed by
BatchNorm and ReLU, the first keeping or setting the level's width and the second doubling it
(32->64, 64->128, 128->256, 256->512), then 2x2x2 max-pooling (not after the bottom level).
Synthesis path: a 2x2x2 transposed convolution with stride 2 that keeps the channels,
concatenation with the analysis path's feature map of the same level (skip first, then the
upsampled map), two 3x3x3 convolutions with BatchNorm and ReLU; a 1x1x1 convolution gives the
class scores. Convolutions are padded (the output has the input's size; the paper used unpadded
ones and cropped), and those followed by BatchNorm have no bias (BatchNorm's shift makes it
redundant). Init: every convolution kernel normal(0, sqrt(2 / fan_in)), biases zero,
BatchNorm scale 1 and shift 0.

Loss: soft Dice + cross-entropy. Dice is computed per sample and class and averaged, so the
loss is a mean over samples and gradient accumulation over micro-batches computes the full
batch's gradient (with BatchNorm statistics fixed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IN_CHANNELS = 1
NUM_CLASSES = 3
# (first, second) convolution widths of each analysis level; the last is the bottom
LEVEL_WIDTHS = ((32, 64), (64, 128), (128, 256), (256, 512))
LEVELS = len(LEVEL_WIDTHS)
DOWNSAMPLING = 2 ** (LEVELS - 1)  # the volume's sides must divide by this
KERNEL = 3
BN_EPS = 1e-5
BN_MOMENTUM = 0.1  # torch convention; Flax's momentum is 1 - this
DICE_SMOOTH = 1.0

ADAM_LR = 1e-3

# Checked by the tests against parameter_count() and every framework's model.
TRAINABLE_PARAMETERS = 19_071_459
BN_RUNNING_STATISTICS = 4_672


@dataclass(frozen=True)
class DoubleConv:
    """Two 3x3x3 convolutions with BatchNorm and ReLU: one U-Net level's block."""

    name: str
    in_channels: int
    mid_channels: int
    out_channels: int


@dataclass(frozen=True)
class Up:
    """Transposed 2x2x2 convolution, stride 2, channels kept; then concat with the skip."""

    name: str
    channels: int
    skip_channels: int


def encoder() -> list[DoubleConv]:
    blocks, channels = [], IN_CHANNELS
    for level, (mid, out) in enumerate(LEVEL_WIDTHS):
        blocks.append(DoubleConv(f"down{level}", channels, mid, out))
        channels = out
    return blocks


def decoder() -> list[tuple[Up, DoubleConv]]:
    """From the level above the bottom up to the first level."""
    stages = []
    channels = LEVEL_WIDTHS[-1][1]
    for level in reversed(range(LEVELS - 1)):
        skip = LEVEL_WIDTHS[level][1]
        width = LEVEL_WIDTHS[level + 1][0]  # the synthesis level's width: that of the level below
        up = Up(f"up{level}", channels, skip)
        block = DoubleConv(f"dec{level}", skip + channels, width, width)
        stages.append((up, block))
        channels = width
    return stages


OUT_FEATURES = decoder()[-1][1].out_channels


def parameter_count(num_classes: int = NUM_CLASSES) -> tuple[int, int]:
    """(trainable parameters, BatchNorm running statistics) from the spec alone."""
    k3 = KERNEL**3
    trainable = stats = 0
    blocks = encoder() + [b for _, b in decoder()]
    for b in blocks:
        trainable += k3 * (b.in_channels * b.mid_channels + b.mid_channels * b.out_channels)
        trainable += 2 * (b.mid_channels + b.out_channels)  # BatchNorm scale and shift
        stats += 2 * (b.mid_channels + b.out_channels)  # running mean and variance
    for up, _ in decoder():
        trainable += 8 * up.channels * up.channels + up.channels
    trainable += OUT_FEATURES * num_classes + num_classes
    return trainable, stats


def sides(inputs: dict[str, int]) -> tuple[int, int, int]:
    """A volume's (depth, height, width): a cube's side ("volume"), or each given apart
    ("depth", "height", "width": a scan of slices, as claim C4's 128 slices of 512x512)."""
    if "volume" in inputs:
        return (inputs["volume"],) * 3
    return inputs["depth"], inputs["height"], inputs["width"]


def synthetic_batch(
    batch_size: int, inputs: dict[str, int], seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The same volumes (N, 1, D, H, W float32) and voxel labels (N, D, H, W int64) for every
    framework. Labels are the volume's value band, so the task is learnable."""
    shape = sides(inputs)
    if any(side % DOWNSAMPLING for side in shape):
        raise ValueError(f"volume sides {shape} must each divide by {DOWNSAMPLING}")
    classes = inputs.get("num_classes", NUM_CLASSES)
    rng = np.random.default_rng(seed)
    volumes = rng.standard_normal((batch_size, IN_CHANNELS, *shape), dtype=np.float32)
    edges = np.quantile(volumes, np.linspace(0, 1, classes + 1)[1:-1])
    labels = np.digitize(volumes[:, 0], edges).astype(np.int64)
    return volumes, labels


# -- the analytic memory model (membench.memory.memory_model) --------------------------------------
OPTIMIZER_STATE_SLOTS = 2  # Adam: first and second moments per parameter


def trainable_parameters(inputs: dict[str, int]) -> int:
    return parameter_count(inputs.get("num_classes", NUM_CLASSES))[0]


def input_elements(inputs: dict[str, int]) -> int:
    """Elements of one sample: the volume, and its voxel labels (int64: two float32 each)."""
    return 3 * _voxels(inputs, 0)


def _voxels(inputs: dict[str, int], level: int) -> int:
    depth, height, width = (side >> level for side in sides(inputs))
    return depth * height * width


def _block_inside(block: DoubleConv, voxels: int) -> float:
    """What a level keeps besides its output: each convolution's output (BatchNorm's input)
    and the first ReLU's output (the second convolution's input)."""
    return float((2 * block.mid_channels + block.out_channels) * voxels)


def saved_activations(inputs: dict[str, int]) -> tuple[float, list[float], list[float]]:
    """Elements per sample kept for the backward pass, as (outside the levels, level
    outputs, level insides). Outside the levels: max-pooling's indices (int64: two float32
    elements each) and output, each concatenation (a synthesis level's input; the transposed
    convolution's output is freed once copied into it), and the head: class scores, their
    log-softmax and softmax, and the float one-hot labels of the Dice term. A level's output
    (the second ReLU's) is what checkpointing keeps; its inside is what it recomputes."""
    classes = inputs.get("num_classes", NUM_CLASSES)
    outside, outputs, insides = 0.0, [], []
    for level, block in enumerate(encoder()):
        voxels = _voxels(inputs, level)
        outputs.append(float(block.out_channels * voxels))
        insides.append(_block_inside(block, voxels))
        if level < LEVELS - 1:
            outside += 3 * block.out_channels * _voxels(inputs, level + 1)
    for level, (up, block) in zip(reversed(range(LEVELS - 1)), decoder(), strict=True):
        voxels = _voxels(inputs, level)
        outside += (up.skip_channels + up.channels) * voxels
        outputs.append(float(block.out_channels * voxels))
        insides.append(_block_inside(block, voxels))
    outside += 4 * classes * _voxels(inputs, 0)
    return outside, outputs, insides


def largest_live_pair(inputs: dict[str, int]) -> float:
    """Elements per sample of the largest input+output pair of one layer: what inference
    holds at its peak. A concatenation's pair is its two inputs and its result."""
    largest = 0
    for level, block in enumerate(encoder()):
        c_in, mid, out = block.in_channels, block.mid_channels, block.out_channels
        pair = max(c_in + mid, 2 * mid, mid + out, 2 * out)
        largest = max(largest, pair * _voxels(inputs, level))
    for level, (up, block) in zip(reversed(range(LEVELS - 1)), decoder(), strict=True):
        joined = up.skip_channels + up.channels
        pair = max(2 * joined, joined + block.mid_channels, 2 * block.mid_channels)
        largest = max(largest, pair * _voxels(inputs, level))
    return float(largest)
