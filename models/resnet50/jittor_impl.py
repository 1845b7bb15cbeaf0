"""ResNet-50 v1.5 in Jittor, built from models.resnet50.spec to match torch_impl exactly.

Jittor is imported here at module level: import this module only after the backend has set
Jittor's environment (membench.backends.jittor_backend.prepare_import). Module and attribute
names follow torch_impl, so a torch state_dict maps onto this model name for name; Jittor's
layout is NCHW and its conv weights OIHW, as torch's.
"""

from __future__ import annotations

import math

import jittor as jt
from jittor import init, nn

from models.resnet50 import spec

synthetic_batch = spec.synthetic_batch
HAS_BATCHNORM = True


def _bn(channels: int) -> nn.BatchNorm2d:
    # Jittor's momentum is torch's (weight of the new batch statistic).
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
        self.downsample = None
        if block.has_projection:
            self.downsample = nn.Sequential(
                nn.Conv2d(block.in_channels, out, 1, stride=block.stride, bias=False), _bn(out)
            )

    def execute(self, x: jt.Var) -> jt.Var:
        identity = x if self.downsample is None else self.downsample(x)
        y = nn.relu(self.bn1(self.conv1(x)))
        y = nn.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return nn.relu(y + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes: int = spec.NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(
            3, spec.STEM_WIDTH, spec.STEM_KERNEL, stride=spec.STEM_STRIDE, padding=3, bias=False
        )
        self.bn1 = _bn(spec.STEM_WIDTH)
        self.maxpool = nn.MaxPool2d(spec.POOL_KERNEL, spec.POOL_STRIDE, spec.POOL_PADDING)
        self.blocks = nn.ModuleList([Bottleneck(b) for b in spec.bottlenecks()])
        self.fc = nn.Linear(spec.FEATURES, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The spec's scheme: He-normal (fan_out) convs, BN 1/0, uniform(+-1/sqrt(fan_in)) fc."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                init.one_(m.weight)
                init.zero_(m.bias)
        bound = 1.0 / math.sqrt(spec.FEATURES)
        init.uniform_(self.fc.weight, -bound, bound)
        init.uniform_(self.fc.bias, -bound, bound)

    def execute(self, x: jt.Var) -> jt.Var:
        x = self.maxpool(nn.relu(self.bn1(self.conv1(x))))
        for block in self.blocks:
            x = block(x)
        x = x.mean(dims=(2, 3))
        return self.fc(x)


def build(inputs: dict[str, int], checkpoint: bool = False) -> ResNet50:
    if checkpoint:
        raise NotImplementedError("Jittor has no activation checkpointing API")
    return ResNet50(num_classes=inputs.get("num_classes", spec.NUM_CLASSES))


def make_optimizer(params: list[jt.Var]) -> jt.optim.SGD:
    # Jittor's SGD (v = mu*v + g; p -= lr*v, dampening 0) is torch.optim.SGD's rule.
    return jt.optim.SGD(params, spec.SGD_LR, momentum=spec.SGD_MOMENTUM)


def loss_fn(logits: jt.Var, labels: jt.Var) -> jt.Var:
    """Mean softmax cross-entropy, in float32 whatever the compute dtype (as torch_impl)."""
    return nn.cross_entropy_loss(logits.float32(), labels)
