"""ResNet-50 v1.5 in Flax (linen), built from models.resnet50.spec to match torch_impl exactly.

Layout is NHWC (XLA's native one); `synthetic_batch` stays NCHW like every framework's and the
backend transposes. Padding is explicit and symmetric as in torch: "SAME" would pad a stride-2
convolution asymmetrically and compute a different function.
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

from models.resnet50 import spec

synthetic_batch = spec.synthetic_batch
CHECKPOINT_UNIT = "flax nn.remat per residual block"
HAS_BATCHNORM = True


def input_layout(images: np.ndarray) -> np.ndarray:
    return images.transpose(0, 2, 3, 1)  # NCHW (the suite's layout) -> NHWC (Flax's)


# torch's kaiming_normal_(mode="fan_out", nonlinearity="relu"): untruncated normal, var 2/fan_out.
_conv_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


def _uniform_init(fan_in: int) -> nn.initializers.Initializer:
    """uniform(-1/sqrt(fan_in), +1/sqrt(fan_in)), torch's nn.Linear scheme, for weight and bias."""
    bound = 1.0 / math.sqrt(fan_in)

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class Bottleneck(nn.Module):
    block: spec.Bottleneck
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    def _conv(self, features: int, kernel: int, stride: int, name: str) -> nn.Conv:
        pad = kernel // 2
        return nn.Conv(
            features,
            (kernel, kernel),
            strides=(stride, stride),
            padding=((pad, pad), (pad, pad)),
            use_bias=False,
            kernel_init=_conv_init,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            name=name,
        )

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        b = self.block
        bn = functools.partial(_batch_norm, train, self.dtype, self.param_dtype)
        identity = x
        if b.has_projection:
            identity = self._conv(b.out_channels, 1, b.stride, "downsample_conv")(x)
            identity = bn("downsample_bn")(identity)
        y = nn.relu(bn("bn1")(self._conv(b.width, 1, 1, "conv1")(x)))
        y = nn.relu(bn("bn2")(self._conv(b.width, 3, b.stride, "conv2")(y)))
        y = bn("bn3")(self._conv(b.out_channels, 1, 1, "conv3")(y))
        return nn.relu(y + identity)


def _batch_norm(train: bool, dtype: Any, param_dtype: Any, name: str) -> nn.BatchNorm:
    # No axis_name: statistics of the local batch, as torch's BatchNorm2d (not SyncBatchNorm).
    # Flax's default one-pass variance (what Flax users run): two-pass measured no closer to torch.
    return nn.BatchNorm(
        use_running_average=not train,
        momentum=1.0 - spec.BN_MOMENTUM,
        epsilon=spec.BN_EPS,
        dtype=dtype,
        param_dtype=param_dtype,
        name=name,
    )


class ResNet50(nn.Module):
    num_classes: int = spec.NUM_CLASSES
    checkpoint: bool = False  # nn.remat per bottleneck: only block inputs are kept
    dtype: Any = jnp.float32  # compute dtype
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        pad = spec.STEM_KERNEL // 2
        x = nn.Conv(
            spec.STEM_WIDTH,
            (spec.STEM_KERNEL, spec.STEM_KERNEL),
            strides=(spec.STEM_STRIDE, spec.STEM_STRIDE),
            padding=((pad, pad), (pad, pad)),
            use_bias=False,
            kernel_init=_conv_init,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            name="conv1",
        )(x)
        x = nn.relu(_batch_norm(train, self.dtype, self.param_dtype, "bn1")(x))
        p = spec.POOL_PADDING
        # max_pool pads with -inf, as torch's MaxPool2d.
        x = nn.max_pool(
            x,
            (spec.POOL_KERNEL, spec.POOL_KERNEL),
            strides=(spec.POOL_STRIDE, spec.POOL_STRIDE),
            padding=((p, p), (p, p)),
        )
        # static_argnums counts `self` as 0: `train` (a Python bool) is argument 2.
        block_cls = nn.remat(Bottleneck, static_argnums=(2,)) if self.checkpoint else Bottleneck
        for i, b in enumerate(spec.bottlenecks()):
            x = block_cls(b, self.dtype, self.param_dtype, name=f"blocks_{i}")(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(
            self.num_classes,
            kernel_init=_uniform_init(spec.FEATURES),
            bias_init=_uniform_init(spec.FEATURES),
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            name="fc",
        )(x)


def build(
    inputs: dict[str, int],
    checkpoint: bool = False,
    dtype: Any = jnp.float32,
    param_dtype: Any = jnp.float32,
) -> ResNet50:
    return ResNet50(
        num_classes=inputs.get("num_classes", spec.NUM_CLASSES),
        checkpoint=checkpoint,
        dtype=dtype,
        param_dtype=param_dtype,
    )


def init_variables(model: ResNet50, batch_size: int, inputs: dict[str, int], seed: int = 0) -> dict:
    """{"params", "batch_stats"} from a jitted init on a zero NHWC batch."""
    size = inputs["image_size"]
    x = jnp.zeros((batch_size, size, size, 3), model.dtype)
    init = jax.jit(functools.partial(model.init, train=False))
    return dict(init(jax.random.PRNGKey(seed), x))


def loss_fn(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy, in float32 whatever the compute dtype (as torch_impl)."""
    logits = logits.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def make_optimizer() -> optax.GradientTransformation:
    # optax's trace (m = g + mu*m; p -= lr*m) is torch.optim.SGD's rule with dampening 0.
    return optax.sgd(spec.SGD_LR, momentum=spec.SGD_MOMENTUM)


def _conv_kernel(w: np.ndarray) -> jax.Array:
    return jnp.asarray(np.transpose(w, (2, 3, 1, 0)))  # OIHW -> HWIO


def from_torch(state: dict[str, np.ndarray]) -> dict:
    """A torch_impl state_dict (numpy arrays) as Flax {"params", "batch_stats"}."""
    params: dict[str, Any] = {}
    stats: dict[str, Any] = {}

    def put(tree: dict, path: list[str], value: jax.Array) -> None:
        for key in path[:-1]:
            tree = tree.setdefault(key, {})
        tree[path[-1]] = value

    for name, value in state.items():
        *module, leaf = name.split(".")
        if leaf == "num_batches_tracked":
            continue
        # blocks.N.downsample.{0,1} -> blocks_N/downsample_{conv,bn}
        path: list[str] = []
        i = 0
        while i < len(module):
            if module[i] == "blocks":
                path.append(f"blocks_{module[i + 1]}")
                i += 2
            elif module[i] == "downsample":
                path.append("downsample_conv" if module[i + 1] == "0" else "downsample_bn")
                i += 2
            else:
                path.append(module[i])
                i += 1
        value = np.asarray(value)
        if leaf == "running_mean":
            put(stats, [*path, "mean"], jnp.asarray(value))
        elif leaf == "running_var":
            put(stats, [*path, "var"], jnp.asarray(value))
        elif leaf == "weight" and value.ndim == 4:
            put(params, [*path, "kernel"], _conv_kernel(value))
        elif leaf == "weight" and value.ndim == 2:
            put(params, [*path, "kernel"], jnp.asarray(value.T))  # (out, in) -> (in, out)
        elif leaf == "weight":
            put(params, [*path, "scale"], jnp.asarray(value))
        elif leaf == "bias":
            put(params, [*path, "bias"], jnp.asarray(value))
        else:
            raise KeyError(f"unexpected torch state entry {name!r}")
    return {"params": params, "batch_stats": stats}
