"""GPT-2-style Transformer in Jittor, built from models.transformer.spec to match torch_impl.

Import only after the backend has set Jittor's environment (see models/resnet50/jittor_impl.py).
Module and parameter names follow torch_impl (Linear weights (out, in), as torch's), so a torch
state_dict maps onto this model name for name. Jittor has no fused attention kernel for CPU or
CUDA (`jittor.attention.scaled_dot_product_attention` writes the same product, mask and softmax
out as separate ops), so this model has the plain attention only.
"""

from __future__ import annotations

import math

import jittor as jt
from jittor import init, nn

from models.transformer import spec

synthetic_batch = spec.synthetic_batch
HAS_BATCHNORM = False
ATTENTION = {"plain": "softmax(QK^T / sqrt(d)) V written out, causal mask by jt.where"}


def plain_attention(q: jt.Var, k: jt.Var, v: jt.Var) -> jt.Var:
    """(B, H, T, D) -> (B, H, T, D): the attention as the formula reads."""
    t = q.shape[-2]
    scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(q.shape[-1]))
    causal = jt.ones((t, t), dtype="bool").tril()
    scores = jt.where(causal, scores, float("-inf"))
    return nn.softmax(scores, dim=-1) @ v


def gelu_tanh(x: jt.Var) -> jt.Var:
    """GPT-2's GELU (the tanh form; Jittor's nn.gelu is the erf form)."""
    return 0.5 * x * (1.0 + jt.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class Attention(nn.Module):
    def __init__(self, cfg: spec.Config):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def execute(self, x: jt.Var) -> jt.Var:
        b, t, d = x.shape
        q, k, v = (
            a.reshape(b, t, self.n_head, d // self.n_head).transpose(0, 2, 1, 3)
            for a in self.qkv(x).split(d, dim=2)
        )
        y = plain_attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, t, d)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: spec.Config):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, spec.MLP_RATIO * cfg.d_model)
        self.proj = nn.Linear(spec.MLP_RATIO * cfg.d_model, cfg.d_model)

    def execute(self, x: jt.Var) -> jt.Var:
        return self.proj(gelu_tanh(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: spec.Config):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=spec.LN_EPS)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=spec.LN_EPS)
        self.mlp = MLP(cfg)

    def execute(self, x: jt.Var) -> jt.Var:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: spec.Config, compute_dtype: str | None = None):
        super().__init__()
        self.cfg, self.compute_dtype = cfg, compute_dtype
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=spec.LN_EPS)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                init.gauss_(p, 0.0, self.cfg.residual_std)
            elif name.endswith("bias"):
                init.zero_(p)
            elif ".ln" in name or name.startswith("ln_f"):
                init.one_(p)
            else:
                init.gauss_(p, 0.0, spec.INIT_STD)

    def execute(self, tokens: jt.Var) -> jt.Var:
        positions = jt.arange(tokens.shape[1])
        x = self.wte(tokens) + self.wpe(positions)
        if self.compute_dtype:  # mixed precision: Jittor's amp follows the activations' dtype
            x = x.cast(self.compute_dtype)
        for block in self.blocks:
            x = block(x)
        return nn.matmul_transpose(self.ln_f(x), self.wte.weight)  # tied output projection


def build(
    inputs: dict[str, int],
    checkpoint: bool = False,
    attention: str = "plain",
    compute_dtype: str | None = None,
) -> GPT:
    """compute_dtype: the dtype the embeddings enter the blocks in (amp; None = float32)."""
    if checkpoint:
        raise NotImplementedError("Jittor has no activation checkpointing API")
    if attention != "plain":
        raise NotImplementedError("Jittor has no fused attention kernel for CPU or CUDA")
    return GPT(spec.config(inputs), compute_dtype)


def make_optimizer(params: list[jt.Var]) -> jt.optim.AdamW:
    params = list(params)
    # GPT-2 practice: decay matrices and embeddings, not biases or LayerNorm parameters.
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": spec.ADAMW_WEIGHT_DECAY},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return jt.optim.AdamW(groups, spec.ADAMW_LR, betas=spec.ADAMW_BETAS)


def loss_fn(logits: jt.Var, targets: jt.Var) -> jt.Var:
    """Mean next-token cross-entropy, in float32 whatever the compute dtype."""
    logits = logits.float32()
    return nn.cross_entropy_loss(logits.reshape((-1, logits.shape[-1])), targets.reshape((-1,)))
