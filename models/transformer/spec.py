"""GPT-2-style decoder-only Transformer, framework-neutral.

Pre-LayerNorm blocks (x + attn(ln1(x)); x + mlp(ln2(x))), causal multi-head self-attention
with one fused query/key/value projection (biases on), a GELU MLP of 4x width (GELU's tanh
form, as GPT-2), learned positions, a final LayerNorm, and the output projection tied to the
token embedding (no bias). No dropout: the benchmark's steps are deterministic and equal across
frameworks. Next-token loss: cross-entropy of the logits at position t against token t+1.

Init (GPT-2's): linear weights and embeddings normal(0, 0.02), the two projections that write
into the residual stream normal(0, 0.02 / sqrt(2 * n_layer)), biases zero, LayerNorm 1 and 0.

The configuration is the workload's `inputs` in a preset: the `gpu` preset runs GPT-2 small;
smaller presets shrink it, and the preset's inputs (in every record) name what ran.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

LN_EPS = 1e-5
INIT_STD = 0.02
MLP_RATIO = 4

ADAMW_LR = 6e-4
ADAMW_BETAS = (0.9, 0.95)
ADAMW_WEIGHT_DECAY = 0.1  # on matrices and embeddings only, not on biases or LayerNorm

GPT2_SMALL_PARAMETERS = 124_439_808  # with tied embeddings; checked against parameter_count()


@dataclass(frozen=True)
class Config:
    vocab_size: int = 50257
    n_positions: int = 1024
    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768

    def __post_init__(self) -> None:
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {self.d_model} does not split into {self.n_head} heads")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def residual_std(self) -> float:
        return INIT_STD / math.sqrt(2 * self.n_layer)


GPT2_SMALL = Config()


def config(inputs: dict[str, int]) -> Config:
    """The model a preset's inputs describe (GPT-2 small where they say nothing)."""
    fields = asdict(GPT2_SMALL)
    return Config(**{k: int(inputs.get(k, v)) for k, v in fields.items()})


def seq_len(inputs: dict[str, int]) -> int:
    n = int(inputs.get("seq_len", config(inputs).n_positions))
    if n > config(inputs).n_positions:
        raise ValueError(f"seq_len {n} exceeds the {config(inputs).n_positions} positions")
    return n


def parameter_count(cfg: Config) -> int:
    d, v = cfg.d_model, cfg.vocab_size
    attention = d * 3 * d + 3 * d + d * d + d
    mlp = d * MLP_RATIO * d + MLP_RATIO * d + MLP_RATIO * d * d + d
    block = attention + mlp + 2 * 2 * d  # two LayerNorms
    return v * d + cfg.n_positions * d + cfg.n_layer * block + 2 * d  # + final LayerNorm


def synthetic_batch(
    batch_size: int, inputs: dict[str, int], seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (N, T) and their next tokens (N, T), int64, the same for every framework."""
    cfg, n = config(inputs), seq_len(inputs)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab_size, size=(batch_size, n + 1), dtype=np.int64)
    return tokens[:, :-1].copy(), tokens[:, 1:].copy()


# -- the analytic memory model (membench.memory.memory_model) --------------------------------------
TRAINABLE_PARAMETERS = GPT2_SMALL_PARAMETERS  # the default configuration; see below for others
OPTIMIZER_STATE_SLOTS = 2  # AdamW: first and second moments per parameter


def trainable_parameters(inputs: dict[str, int]) -> int:
    """The configuration's count (presets shrink the model through its inputs)."""
    return parameter_count(config(inputs))


def shard_unit_parameters(inputs: dict[str, int]) -> list[int]:
    """Parameters of each unit FSDP gathers at once: the root (embeddings and the final
    LayerNorm), then each block."""
    cfg = config(inputs)
    root = (cfg.vocab_size + cfg.n_positions) * cfg.d_model + 2 * cfg.d_model
    block = (parameter_count(cfg) - root) // cfg.n_layer
    return [root] + [block] * cfg.n_layer


def input_elements(inputs: dict[str, int]) -> int:
    """Elements of one sample: token ids and next tokens, int64 (two float32 elements each)."""
    return 2 * 2 * seq_len(inputs)


def saved_activations(inputs: dict[str, int]) -> tuple[float, list[float], list[float]]:
    """Elements per sample kept for the backward pass with plain attention, as (outside the
    blocks, block outputs, block insides). Outside: the embedding sum (the first block's
    input), the final LayerNorm's output, the logits and their log-softmax. Inside a block
    (Korthikanti et al. 2022 without dropout, 16 x T x d + heads x T^2): LN1's output, q/k/v,
    the attention probabilities, the merged heads, the residual after attention, LN2's
    output, the MLP's hidden layer before and after GELU. A block's output is what
    checkpointing keeps; its inside is what it recomputes."""
    cfg, t = config(inputs), seq_len(inputs)
    d = cfg.d_model
    outside = 2 * t * d + 2 * t * cfg.vocab_size
    inside = (7 + 2 * MLP_RATIO) * t * d + cfg.n_head * t * t
    return float(outside), [float(t * d)] * cfg.n_layer, [float(inside)] * cfg.n_layer


def largest_live_pair(inputs: dict[str, int]) -> float:
    """Elements per sample of the largest input+output pair of one layer: what inference
    holds at its peak (the output projection to the vocabulary, for every preset's shape)."""
    cfg, t = config(inputs), seq_len(inputs)
    d, hidden = cfg.d_model, MLP_RATIO * cfg.d_model
    return float(
        max(
            t * d + t * cfg.vocab_size,  # final LayerNorm output -> logits
            t * d + 3 * t * d,  # qkv projection
            2 * cfg.n_head * t * t,  # scores -> probabilities
            t * d + t * hidden,  # MLP up-projection
            2 * t * hidden,  # GELU
        )
    )
