"""Jittor's BatchNorm beside torch's: its running statistics are listed among a module's
parameters (torch keeps them as buffers), and its eval() stops every parameter's gradient."""

from __future__ import annotations

from typing import Any

# Jittor lists BatchNorm running statistics among a module's parameters (torch keeps them as
# buffers); they are told apart by name, because Jittor's eval() marks every parameter stop_grad.
_RUNNING = ("running_mean", "running_var")


def trainable(model: Any) -> list[Any]:
    """The weights the optimizer updates (every parameter but BatchNorm's running statistics)."""
    return [p for n, p in model.named_parameters() if not n.endswith(_RUNNING)]


def running_statistics(model: Any) -> list[Any]:
    return [p for n, p in model.named_parameters() if n.endswith(_RUNNING)]


def freeze_batchnorm(model: Any, frozen: bool = True) -> None:
    """BatchNorm on its running averages (frozen) or batch statistics, weights still trained
    (Jittor's eval() would also stop every parameter's gradient)."""
    from jittor import nn

    for m in model.modules():
        if isinstance(m, nn.BatchNorm):
            m.is_train = not frozen
