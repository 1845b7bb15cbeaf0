"""The Transformer for the toy framework: a numpy stand-in (an embedding and an output layer)
that meets models/contract.py's ToyModelModule."""

from __future__ import annotations

from typing import Any

import numpy as np

from models.transformer import spec

synthetic_batch = spec.synthetic_batch
HAS_BATCHNORM = False
ATTENTION = {"plain": "none: the stand-in has no attention layer"}
LR = 0.1


def build(inputs: dict[str, int], checkpoint: bool = False, attention: str = "plain") -> Any:
    rng = np.random.default_rng(0)
    cfg = spec.config(inputs)
    vocab, width = cfg.vocab_size, cfg.d_model
    return {
        "embed": rng.normal(0, spec.INIT_STD, (vocab, width)).astype(np.float32),
        "out": rng.normal(0, spec.INIT_STD, (width, vocab)).astype(np.float32),
    }


def make_optimizer() -> dict[str, float]:
    return {"lr": LR}


def forward(model: Any, tokens: np.ndarray) -> np.ndarray:
    return model["embed"][tokens] @ model["out"]


def loss_fn(logits: np.ndarray, labels: np.ndarray) -> float:
    shifted = logits - logits.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return float(-np.take_along_axis(logp, labels[..., None], -1).mean())


def step(model: Any, optimizer: dict[str, float], tokens: np.ndarray, labels: np.ndarray) -> None:
    """One SGD update of the output layer (the embedding held fixed)."""
    hidden = model["embed"][tokens]
    logits = hidden @ model["out"]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.put_along_axis(
        probs, labels[..., None], np.take_along_axis(probs, labels[..., None], -1) - 1, -1
    )
    grad = np.einsum("btw,btv->wv", hidden, probs) / probs[..., 0].size
    model["out"] -= optimizer["lr"] * grad
