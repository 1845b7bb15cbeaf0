"""What the parity tests share: named arrays out of models, their relative error, and the
PyTorch reference models with every parameter kind moved off its init value."""

from __future__ import annotations

from typing import Any

import numpy as np


def relative_error(got: dict, expected: dict) -> float:
    """Norm of the difference over the norm of the reference, across all named arrays."""
    num = sum(float(np.sum((np.float64(got[k]) - np.float64(v)) ** 2)) for k, v in expected.items())
    den = sum(float(np.sum(np.float64(v) ** 2)) for v in expected.values())
    return (num / den) ** 0.5


def tree_relative_error(got: Any, expected: Any) -> float:
    """relative_error over two pytrees of the same structure (JAX parameters, gradients)."""
    import jax

    g = [np.asarray(a, np.float64) for a in jax.tree_util.tree_leaves(got)]
    e = [np.asarray(b, np.float64) for b in jax.tree_util.tree_leaves(expected)]
    num = sum(float(((a - b) ** 2).sum()) for a, b in zip(g, e, strict=True))
    return (num / sum(float((b**2).sum()) for b in e)) ** 0.5


def torch_state(model: Any) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def jittor_state(model: Any) -> dict[str, np.ndarray]:
    return {k: np.asarray(v.numpy()).copy() for k, v in model.state_dict().items()}


def jittor_twin(jittor_impl: Any, inputs: dict[str, int], torch_model: Any) -> Any:
    """The Jittor model of jittor_impl holding torch_model's weights."""
    from membench.backends.jittor_backend import load_torch_state

    model = jittor_impl.build(inputs)
    load_torch_state(model, torch_state(torch_model))
    return model


def unet3d_torch_model(inputs: dict[str, int]) -> Any:
    """The PyTorch U-Net with running statistics, BatchNorm's affine parameters and the
    transposed convolutions' biases away from 0/1, so that parity checks them too."""
    import torch

    from models.unet3d import torch_impl

    torch.manual_seed(0)
    model = torch_impl.build(inputs)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm3d):
                m.running_mean.uniform_(-0.1, 0.1, generator=gen)
                m.running_var.uniform_(0.5, 1.5, generator=gen)
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.uniform_(-0.1, 0.1, generator=gen)
            elif isinstance(m, torch.nn.ConvTranspose3d):
                m.bias.uniform_(-0.1, 0.1, generator=gen)
    return model


def transformer_torch_model(inputs: dict[str, int]) -> Any:
    """The PyTorch Transformer with biases and LayerNorms away from 0/1."""
    import torch

    from models.transformer import torch_impl

    torch.manual_seed(0)
    model = torch_impl.build(inputs)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model
