"""3D U-Net in PyTorch, built from models.unet3d.spec."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint as checkpoint_fn

from models.unet3d import spec

synthetic_batch = spec.synthetic_batch
CHECKPOINT_UNIT = "per U-Net level (each double convolution), use_reentrant=False"
HAS_BATCHNORM = True


def _bn(channels: int) -> nn.BatchNorm3d:
    return nn.BatchNorm3d(channels, eps=spec.BN_EPS, momentum=spec.BN_MOMENTUM)


class DoubleConv(nn.Module):
    def __init__(self, block: spec.DoubleConv):
        super().__init__()
        self.conv1 = nn.Conv3d(block.in_channels, block.mid_channels, 3, padding=1, bias=False)
        self.bn1 = _bn(block.mid_channels)
        self.conv2 = nn.Conv3d(block.mid_channels, block.out_channels, 3, padding=1, bias=False)
        self.bn2 = _bn(block.out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(x)))


class UNet3D(nn.Module):
    def __init__(self, num_classes: int = spec.NUM_CLASSES, checkpoint: bool = False):
        super().__init__()
        self.checkpoint = checkpoint
        self.down = nn.ModuleList(DoubleConv(b) for b in spec.encoder())
        stages = spec.decoder()
        self.up = nn.ModuleList(
            nn.ConvTranspose3d(u.channels, u.channels, 2, stride=2) for u, _ in stages
        )
        self.dec = nn.ModuleList(DoubleConv(b) for _, b in stages)
        self.out = nn.Conv3d(spec.OUT_FEATURES, num_classes, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d)):
                in_channels = m.in_channels
                fan_in = in_channels * math.prod(m.kernel_size)
                nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / fan_in))
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm3d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _level(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        # Per level: only the level's input is kept; its two convolutions are recomputed.
        if self.checkpoint and torch.is_grad_enabled():
            return checkpoint_fn(block, x, use_reentrant=False)
        return block(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            if i:
                x = F.max_pool3d(x, 2)
            x = self._level(block, x)
            skips.append(x)
        skips.pop()  # the bottom level's output goes up, not across
        for up, block in zip(self.up, self.dec, strict=True):
            x = self._level(block, torch.cat([skips.pop(), up(x)], dim=1))
        return self.out(x)


def build(inputs: dict[str, int], checkpoint: bool = False) -> UNet3D:
    return UNet3D(num_classes=inputs.get("num_classes", spec.NUM_CLASSES), checkpoint=checkpoint)


def make_optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=spec.ADAM_LR)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over voxels plus (1 - soft Dice), per sample and class, in float32."""
    logits = logits.float()
    ce = F.cross_entropy(logits, labels)
    probs = logits.softmax(dim=1)
    onehot = F.one_hot(labels, logits.shape[1]).movedim(-1, 1).to(probs.dtype)
    dims = tuple(range(2, logits.dim()))
    intersection = (probs * onehot).sum(dims)
    total = probs.sum(dims) + onehot.sum(dims)
    dice = (2 * intersection + spec.DICE_SMOOTH) / (total + spec.DICE_SMOOTH)
    return ce + (1 - dice.mean())
