"""3D U-Net in Flax (linen), built from models.unet3d.spec to match torch_impl exactly.

Layout is NDHWC (XLA's native one); `synthetic_batch` stays NCDHW like every framework's and
`input_layout` moves the channels last. Padding is explicit, as in torch.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from models.unet3d import spec

synthetic_batch = spec.synthetic_batch
CHECKPOINT_UNIT = "flax nn.remat per U-Net level (each double convolution)"
HAS_BATCHNORM = True


def input_layout(volumes: np.ndarray) -> np.ndarray:
    return np.moveaxis(volumes, 1, -1)  # NCDHW -> NDHWC


def _he_normal(fan_in: int) -> nn.initializers.Initializer:
    return nn.initializers.normal(math.sqrt(2.0 / fan_in))


def _batch_norm(train: bool, dtype: Any, param_dtype: Any, name: str) -> nn.BatchNorm:
    # No axis_name: statistics of the local batch, as torch's BatchNorm3d.
    return nn.BatchNorm(
        use_running_average=not train,
        momentum=1.0 - spec.BN_MOMENTUM,
        epsilon=spec.BN_EPS,
        dtype=dtype,
        param_dtype=param_dtype,
        name=name,
    )


class DoubleConv(nn.Module):
    block: spec.DoubleConv
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    def _conv(self, in_channels: int, features: int, name: str) -> nn.Conv:
        return nn.Conv(
            features,
            (3, 3, 3),
            padding=((1, 1),) * 3,
            use_bias=False,
            kernel_init=_he_normal(in_channels * 27),
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            name=name,
        )

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        b = self.block
        bn = functools.partial(_batch_norm, train, self.dtype, self.param_dtype)
        x = nn.relu(bn("bn1")(self._conv(b.in_channels, b.mid_channels, "conv1")(x)))
        return nn.relu(bn("bn2")(self._conv(b.mid_channels, b.out_channels, "conv2")(x)))


class UNet3D(nn.Module):
    num_classes: int = spec.NUM_CLASSES
    checkpoint: bool = False  # nn.remat per level: only the level's input is kept
    dtype: Any = jnp.float32  # compute dtype
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        # static_argnums counts `self` as 0: `train` (a Python bool) is argument 2.
        level = nn.remat(DoubleConv, static_argnums=(2,)) if self.checkpoint else DoubleConv
        skips = []
        for i, b in enumerate(spec.encoder()):
            if i:
                x = nn.max_pool(x, (2, 2, 2), strides=(2, 2, 2))
            x = level(b, self.dtype, self.param_dtype, name=b.name)(x, train)
            skips.append(x)
        skips.pop()  # the bottom level's output goes up, not across
        for up, b in spec.decoder():
            x = nn.ConvTranspose(
                up.channels,
                (2, 2, 2),
                strides=(2, 2, 2),
                padding="VALID",
                kernel_init=_he_normal(up.channels * 8),
                dtype=self.dtype,
                param_dtype=self.param_dtype,
                name=up.name,
            )(x)
            x = jnp.concatenate([skips.pop(), x], axis=-1)
            x = level(b, self.dtype, self.param_dtype, name=b.name)(x, train)
        return nn.Conv(
            self.num_classes,
            (1, 1, 1),
            kernel_init=_he_normal(spec.OUT_FEATURES),
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            name="out",
        )(x)


def build(
    inputs: dict[str, int],
    checkpoint: bool = False,
    dtype: Any = jnp.float32,
    param_dtype: Any = jnp.float32,
) -> UNet3D:
    return UNet3D(
        num_classes=inputs.get("num_classes", spec.NUM_CLASSES),
        checkpoint=checkpoint,
        dtype=dtype,
        param_dtype=param_dtype,
    )


def init_variables(model: UNet3D, batch_size: int, inputs: dict[str, int], seed: int = 0) -> dict:
    """{"params", "batch_stats"} from a jitted init on a zero NDHWC batch."""
    x = jnp.zeros((batch_size, *spec.sides(inputs), spec.IN_CHANNELS), model.dtype)
    init = jax.jit(functools.partial(model.init, train=False))
    return dict(init(jax.random.PRNGKey(seed), x))


def loss_fn(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Cross-entropy over voxels plus (1 - soft Dice), per sample and class, in float32."""
    logits = logits.astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    probs = jax.nn.softmax(logits, axis=-1)
    onehot = jax.nn.one_hot(labels, logits.shape[-1], dtype=probs.dtype)
    axes = tuple(range(1, logits.ndim - 1))
    intersection = (probs * onehot).sum(axes)
    total = probs.sum(axes) + onehot.sum(axes)
    dice = (2 * intersection + spec.DICE_SMOOTH) / (total + spec.DICE_SMOOTH)
    return ce + (1 - dice.mean())


def make_optimizer() -> optax.GradientTransformation:
    # optax.adam is torch.optim.Adam's rule (eps outside the square root, bias-corrected).
    return optax.adam(spec.ADAM_LR)


def from_torch(state: dict[str, np.ndarray]) -> dict:
    """A torch_impl state_dict (numpy arrays) as Flax {"params", "batch_stats"}."""
    params: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    names = {f"down.{i}": b.name for i, b in enumerate(spec.encoder())}
    for i, (up, b) in enumerate(spec.decoder()):
        names[f"up.{i}"], names[f"dec.{i}"] = up.name, b.name

    for key, value in state.items():
        *module, leaf = key.split(".")
        if leaf == "num_batches_tracked":
            continue
        prefix = ".".join(module[:2])
        path = [names[prefix], *module[2:]] if prefix in names else module
        value = np.asarray(value)
        if leaf == "running_mean":
            _put(stats, [*path, "mean"], value)
        elif leaf == "running_var":
            _put(stats, [*path, "var"], value)
        elif leaf == "weight" and module[0] == "up":
            # ConvTranspose3d (in, out, k, k, k); Flax's un-flipped transposed convolution
            # takes (k, k, k, in, out) with each spatial axis reversed.
            _put(params, [*path, "kernel"], np.transpose(value, (2, 3, 4, 0, 1))[::-1, ::-1, ::-1])
        elif leaf == "weight" and value.ndim == 5:
            _put(params, [*path, "kernel"], np.transpose(value, (2, 3, 4, 1, 0)))  # OIDHW->DHWIO
        elif leaf == "weight":
            _put(params, [*path, "scale"], value)
        elif leaf == "bias":
            _put(params, [*path, "bias"], value)
        else:
            raise KeyError(f"unexpected torch state entry {key!r}")
    return {"params": params, "batch_stats": stats}


def _put(tree: dict, path: list[str], value: np.ndarray) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = jnp.asarray(np.ascontiguousarray(value))
