"""A bigram language model, the toy workload of docs/extending.md's worked example: the
Transformer's tokens and configuration, with no layer between the embedding and the output
(framework-neutral; no memory model's inputs, so capacity searches it by bisection)."""

from __future__ import annotations

from models.transformer.spec import INIT_STD, config, synthetic_batch

__all__ = ["INIT_STD", "config", "synthetic_batch"]
