"""ResNet-50 v1.5 in PyTorch, built from models.resnet50.spec."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as checkpoint_fn

from models.resnet50 import spec

CHECKPOINT_UNIT = "per residual block, use_reentrant=False"
HAS_BATCHNORM = True


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=spec.BN_EPS, momentum=spec.BN_MOMENTUM)


class Bottleneck(nn.Module):
    def __init__(self, block: spec.Bottleneck):
        super().__init__()
        width, out = block.width, block.out_channels
        self.conv1 = nn.Conv2d(block.in_channels, width, 1, bias=False)
        self.bn1 = _bn(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=block.stride, padding=1, bias=False)
        self.bn2 = _bn(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = _bn(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if block.has_projection:
            self.downsample = nn.Sequential(
                nn.Conv2d(block.in_channels, out, 1, stride=block.stride, bias=False), _bn(out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes: int = spec.NUM_CLASSES, checkpoint: bool = False):
        super().__init__()
        self.checkpoint = checkpoint
        self.conv1 = nn.Conv2d(
            3, spec.STEM_WIDTH, spec.STEM_KERNEL, stride=spec.STEM_STRIDE, padding=3, bias=False
        )
        self.bn1 = _bn(spec.STEM_WIDTH)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(spec.POOL_KERNEL, spec.POOL_STRIDE, spec.POOL_PADDING)
        self.blocks = nn.ModuleList(Bottleneck(b) for b in spec.bottlenecks())
        self.fc = nn.Linear(spec.FEATURES, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        bound = 1.0 / math.sqrt(self.fc.in_features)
        nn.init.uniform_(self.fc.weight, -bound, bound)
        nn.init.uniform_(self.fc.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        recompute = self.checkpoint and torch.is_grad_enabled()
        for block in self.blocks:
            # Per residual block: only block inputs are kept; the inside is recomputed.
            x = checkpoint_fn(block, x, use_reentrant=False) if recompute else block(x)
        x = torch.flatten(torch.mean(x, dim=(2, 3)), 1)
        return self.fc(x)


synthetic_batch = spec.synthetic_batch


def build(inputs: dict[str, int], checkpoint: bool = False) -> ResNet50:
    return ResNet50(num_classes=inputs.get("num_classes", spec.NUM_CLASSES), checkpoint=checkpoint)


def make_optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=spec.SGD_LR, momentum=spec.SGD_MOMENTUM)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.float(), labels)
