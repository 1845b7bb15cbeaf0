"""3D U-Net in Jittor, built from models.unet3d.spec to match torch_impl.

Import only after the backend has set Jittor's environment (see models/resnet50/jittor_impl.py).
Module and attribute names follow torch_impl, so a torch state_dict maps onto this model name
for name; Jittor's layout is NCDHW and its kernels (out, in, k, k, k) as torch's, transposed
convolutions (in, out, k, k, k) as torch's too.
"""

from __future__ import annotations

import math

import jittor as jt
from jittor import init, nn

from models.unet3d import spec

synthetic_batch = spec.synthetic_batch
HAS_BATCHNORM = True


def _bn(channels: int) -> nn.BatchNorm3d:
    # Jittor's momentum is torch's (weight of the new batch statistic).
    return nn.BatchNorm3d(channels, eps=spec.BN_EPS, momentum=spec.BN_MOMENTUM)


class DoubleConv(nn.Module):
    def __init__(self, block: spec.DoubleConv):
        super().__init__()
        self.conv1 = nn.Conv3d(block.in_channels, block.mid_channels, 3, padding=1, bias=False)
        self.bn1 = _bn(block.mid_channels)
        self.conv2 = nn.Conv3d(block.mid_channels, block.out_channels, 3, padding=1, bias=False)
        self.bn2 = _bn(block.out_channels)

    def execute(self, x: jt.Var) -> jt.Var:
        x = nn.relu(self.bn1(self.conv1(x)))
        return nn.relu(self.bn2(self.conv2(x)))


class UNet3D(nn.Module):
    def __init__(self, num_classes: int = spec.NUM_CLASSES):
        super().__init__()
        self.down = nn.ModuleList([DoubleConv(b) for b in spec.encoder()])
        stages = spec.decoder()
        self.up = nn.ModuleList(
            [nn.ConvTranspose3d(u.channels, u.channels, 2, stride=2) for u, _ in stages]
        )
        self.dec = nn.ModuleList([DoubleConv(b) for _, b in stages])
        self.out = nn.Conv3d(spec.OUT_FEATURES, num_classes, 1)
        self.pool = nn.MaxPool3d(2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The spec's scheme: every kernel normal(0, sqrt(2 / fan_in)), biases 0, BN 1/0."""
        for m in self.modules():
            if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d)):
                fan_in = m.in_channels * math.prod(m.kernel_size)
                init.gauss_(m.weight, 0.0, math.sqrt(2.0 / fan_in))
                if m.bias is not None:
                    init.zero_(m.bias)
            elif isinstance(m, nn.BatchNorm):
                init.one_(m.weight)
                init.zero_(m.bias)

    def execute(self, x: jt.Var) -> jt.Var:
        skips = []
        for i, block in enumerate(self.down):
            if i:
                x = self.pool(x)
            x = block(x)
            skips.append(x)
        skips.pop()  # the bottom level's output goes up, not across
        for up, block in zip(self.up, self.dec, strict=True):
            x = block(jt.concat([skips.pop(), up(x)], dim=1))
        return self.out(x)


def build(inputs: dict[str, int], checkpoint: bool = False) -> UNet3D:
    if checkpoint:
        raise NotImplementedError("Jittor has no activation checkpointing API")
    return UNet3D(num_classes=inputs.get("num_classes", spec.NUM_CLASSES))


def make_optimizer(params: list[jt.Var]) -> jt.optim.Adam:
    # Jittor's Adam adds eps to sqrt(v) before the bias correction (torch: after it); the same
    # update wherever |g| >> eps.
    return jt.optim.Adam(params, spec.ADAM_LR)


def loss_fn(logits: jt.Var, labels: jt.Var) -> jt.Var:
    """Cross-entropy over voxels plus (1 - soft Dice), per sample and class, in float32."""
    logits = logits.float32()
    classes = logits.shape[1]
    channels_last = logits.permute(0, 2, 3, 4, 1)
    ce = nn.cross_entropy_loss(channels_last.reshape((-1, classes)), labels.reshape((-1,)))
    probs = nn.softmax(logits, dim=1)
    onehot = nn.one_hot(labels, classes).permute(0, 4, 1, 2, 3).float32()
    dims = (2, 3, 4)
    intersection = (probs * onehot).sum(dims)
    total = probs.sum(dims) + onehot.sum(dims)
    dice = (2 * intersection + spec.DICE_SMOOTH) / (total + spec.DICE_SMOOTH)
    return ce + (1 - dice.mean())
