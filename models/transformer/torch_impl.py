"""GPT-2-style Transformer in PyTorch, built from models.transformer.spec."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint as checkpoint_fn

from models.transformer import spec

synthetic_batch = spec.synthetic_batch
CHECKPOINT_UNIT = "per Transformer block, use_reentrant=False"
HAS_BATCHNORM = False
ATTENTION = {
    "plain": "softmax(QK^T / sqrt(d)) V written out, causal mask by masked_fill",
    "fused": "torch.nn.functional.scaled_dot_product_attention(is_causal=True)",
}


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D) -> (B, H, T, D): the attention as the formula reads."""
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    return scores.softmax(dim=-1) @ v


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    def __init__(self, cfg: spec.Config, attention: str):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attend = {"plain": plain_attention, "fused": fused_attention}[attention]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (
            a.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)
            for a in self.qkv(x).split(d, dim=2)
        )
        y = self.attend(q, k, v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: spec.Config):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, spec.MLP_RATIO * cfg.d_model)
        self.proj = nn.Linear(spec.MLP_RATIO * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: spec.Config, attention: str):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=spec.LN_EPS)
        self.attn = Attention(cfg, attention)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=spec.LN_EPS)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: spec.Config, checkpoint: bool = False, attention: str = "plain"):
        super().__init__()
        self.cfg, self.checkpoint = cfg, checkpoint
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, attention) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=spec.LN_EPS)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                nn.init.normal_(p, 0.0, self.cfg.residual_std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln" in name or name.startswith("ln_f"):
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0.0, spec.INIT_STD)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        recompute = self.checkpoint and torch.is_grad_enabled()
        for block in self.blocks:
            # Per block: only its input is kept; attention and MLP inside are recomputed.
            x = checkpoint_fn(block, x, use_reentrant=False) if recompute else block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied output projection


def build(inputs: dict[str, int], checkpoint: bool = False, attention: str = "plain") -> GPT:
    return GPT(spec.config(inputs), checkpoint=checkpoint, attention=attention)


def make_optimizer(params) -> torch.optim.Optimizer:
    params = list(params)
    # GPT-2 practice: decay matrices and embeddings, not biases or LayerNorm parameters.
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": spec.ADAMW_WEIGHT_DECAY},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=spec.ADAMW_LR, betas=spec.ADAMW_BETAS)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy, in float32 whatever the compute dtype."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
