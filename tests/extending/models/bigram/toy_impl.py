"""The bigram model for the toy framework: the Transformer's numpy stand-in (an embedding and an
output layer) is one already (models/contract.py's ToyModelModule)."""

from __future__ import annotations

from models.transformer.toy_impl import (
    ATTENTION,
    HAS_BATCHNORM,
    build,
    forward,
    loss_fn,
    make_optimizer,
    step,
    synthetic_batch,
)

__all__ = [
    "ATTENTION", "HAS_BATCHNORM", "build", "forward", "loss_fn", "make_optimizer", "step",
    "synthetic_batch",
]  # fmt: skip
