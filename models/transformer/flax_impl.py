"""GPT-2-style Transformer in Flax (linen), built from models.transformer.spec to match
torch_impl exactly. Tokens need no layout change; activations are (batch, time, features)."""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from models.transformer import spec

synthetic_batch = spec.synthetic_batch
CHECKPOINT_UNIT = "flax nn.remat per Transformer block"
HAS_BATCHNORM = False
ATTENTION = {
    "plain": "softmax(QK^T / sqrt(d)) V written out (softmax in float32), causal mask by where",
    "fused": "jax.nn.dot_product_attention(is_causal=True) with implementation=attention_kernel: "
    "'cudnn' is cuDNN's fused kernel, 'xla' XLA's ordinary attention (not fused)",
}
# cuDNN's fused attention takes float16/bfloat16 only (jax/_src/cudnn/fused_attention_stablehlo.py);
# implementation=None runs XLA's lowering everywhere (jax/_src/nn/functions.py), so it is chosen.
FUSED_DTYPES = ("float16", "bfloat16")


def attention_implementation(dtype: Any, platform: str) -> str:
    """The kernel the fused strategy runs: cuDNN's where it applies, else XLA's attention."""
    return "cudnn" if platform == "gpu" and jnp.dtype(dtype).name in FUSED_DTYPES else "xla"


def input_layout(tokens: np.ndarray) -> np.ndarray:
    return tokens


def plain_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """(B, T, H, D) -> (B, T, H, D): the attention as the formula reads."""
    t = q.shape[1]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(q.shape[-1]))
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    scores = jnp.where(causal, scores.astype(jnp.float32), -jnp.inf)
    # softmax in float32 under mixed precision, as torch.autocast runs it
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


def fused_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    kernel = attention_implementation(q.dtype, jax.default_backend())
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=kernel)


class Block(nn.Module):
    cfg: spec.Config
    attention: str = "plain"
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    def _dense(self, features: int, name: str, std: float = spec.INIT_STD) -> nn.Dense:
        return nn.Dense(
            features,
            kernel_init=nn.initializers.normal(std),
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            name=name,
        )

    def _ln(self, name: str) -> nn.LayerNorm:
        return nn.LayerNorm(
            epsilon=spec.LN_EPS, dtype=self.dtype, param_dtype=self.param_dtype, name=name
        )

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.cfg
        b, t, d = x.shape
        qkv = self._dense(3 * d, "qkv")(self._ln("ln1")(x))
        q, k, v = (a.reshape(b, t, cfg.n_head, cfg.head_dim) for a in jnp.split(qkv, 3, -1))
        attend = {"plain": plain_attention, "fused": fused_attention}[self.attention]
        y = attend(q, k, v).reshape(b, t, d)
        x = x + self._dense(d, "attn_proj", cfg.residual_std)(y)
        h = nn.gelu(self._dense(spec.MLP_RATIO * d, "fc")(self._ln("ln2")(x)), approximate=True)
        return x + self._dense(d, "mlp_proj", cfg.residual_std)(h)


class GPT(nn.Module):
    cfg: spec.Config
    checkpoint: bool = False  # nn.remat per block: only block inputs are kept
    attention: str = "plain"
    dtype: Any = jnp.float32  # compute dtype
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens: jax.Array, train: bool = False) -> jax.Array:
        cfg = self.cfg
        embed = functools.partial(
            nn.Embed,
            features=cfg.d_model,
            embedding_init=nn.initializers.normal(spec.INIT_STD),
            dtype=self.dtype,
            param_dtype=self.param_dtype,
        )
        wte = embed(cfg.vocab_size, name="wte")
        x = wte(tokens) + embed(cfg.n_positions, name="wpe")(jnp.arange(tokens.shape[1]))
        block = nn.remat(Block) if self.checkpoint else Block
        for i in range(cfg.n_layer):
            x = block(cfg, self.attention, self.dtype, self.param_dtype, name=f"blocks_{i}")(x)
        x = nn.LayerNorm(
            epsilon=spec.LN_EPS, dtype=self.dtype, param_dtype=self.param_dtype, name="ln_f"
        )(x)
        return wte.attend(x)  # tied output projection


def build(
    inputs: dict[str, int],
    checkpoint: bool = False,
    attention: str = "plain",
    dtype: Any = jnp.float32,
    param_dtype: Any = jnp.float32,
) -> GPT:
    return GPT(spec.config(inputs), checkpoint, attention, dtype, param_dtype)


def init_variables(model: GPT, batch_size: int, inputs: dict[str, int], seed: int = 0) -> dict:
    """{"params"} from a jitted init on a zero token batch."""
    tokens = jnp.zeros((batch_size, spec.seq_len(inputs)), jnp.int32)
    return dict(jax.jit(model.init)(jax.random.PRNGKey(seed), tokens))


def loss_fn(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy, in float32 whatever the compute dtype (as torch_impl)."""
    logits = logits.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def make_optimizer() -> optax.GradientTransformation:
    # optax.adamw is torch.optim.AdamW's rule; the mask decays matrices and embeddings only,
    # as the torch model's parameter groups do.
    return optax.adamw(
        spec.ADAMW_LR,
        *spec.ADAMW_BETAS,
        weight_decay=spec.ADAMW_WEIGHT_DECAY,
        mask=lambda params: jax.tree_util.tree_map(lambda p: p.ndim >= 2, params),
    )


# torch module path -> Flax path inside a block
_BLOCK_NAMES = {
    "ln1": "ln1", "ln2": "ln2", "attn.qkv": "qkv", "attn.proj": "attn_proj",
    "mlp.fc": "fc", "mlp.proj": "mlp_proj",
}  # fmt: skip


def from_torch(state: dict[str, np.ndarray]) -> dict:
    """A torch_impl state_dict (numpy arrays) as Flax {"params"}."""
    params: dict[str, Any] = {}
    for key, value in state.items():
        value = np.asarray(value)
        *module, leaf = key.split(".")
        if module[0] == "blocks":
            path = [f"blocks_{module[1]}", _BLOCK_NAMES[".".join(module[2:])]]
        else:
            path = module
        if module[0] in ("wte", "wpe"):
            name = "embedding"
        elif leaf == "bias":
            name = "bias"
        elif value.ndim == 2:
            name, value = "kernel", value.T  # (out, in) -> (in, out)
        else:
            name = "scale"
        tree = params
        for part in path:
            tree = tree.setdefault(part, {})
        tree[name] = jnp.asarray(np.ascontiguousarray(value))
    return {"params": params}
