"""Group norms written in ``jnp`` the ways libraries write them -> one GroupNormalization."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.registration.cases import case

C, G = 8, 2
FUSED = {"GroupNormalization": 1, "ReduceMean": 0, "Sqrt": 0, "Reshape": 0, "Mul": 0, "Add": 0}
UNFUSED = {"GroupNormalization": 0}
_rng = np.random.default_rng(0)
SCALE = (1.0 + 0.1 * _rng.standard_normal(C)).astype(np.float32)
OFFSET = (0.1 * _rng.standard_normal(C)).astype(np.float32)


def _affine(y, shape):
    return y * SCALE.reshape(shape).astype(y.dtype) + OFFSET.reshape(shape).astype(y.dtype)


def haiku_channels_last(x, eps=1e-5):
    """``hk.GroupNorm`` (channels-last, its default): reshape, ``jnp.var``, reshape back."""
    axes = (*range(1, x.ndim - 1), x.ndim)
    y = x.reshape((-1, *x.shape[1:-1], G, C // G))
    mean = jnp.mean(y, axes, keepdims=True)
    var = jnp.var(y, axes, keepdims=True)
    y = ((y - mean) * lax.rsqrt(var + eps)).reshape((-1, *x.shape[1:]))
    return _affine(y, (C,))


def haiku_channels_first(x, eps=1e-5):
    """``hk.GroupNorm(data_format="channels_first")``: the groups right after the batch."""
    y = x.reshape((-1, G, C // G, *x.shape[2:]))
    axes = tuple(range(2, y.ndim))
    mean = jnp.mean(y, axes, keepdims=True)
    var = jnp.var(y, axes, keepdims=True)
    y = ((y - mean) * lax.rsqrt(var + eps)).reshape((-1, *x.shape[1:]))
    return _affine(y, (C, 1, 1))


def fast_variance(x, eps=1e-6):
    """Flax Linen's statistics (``E[x^2] - E[x]^2`` clipped at 0) on a sequence ``(N, L, C)``
    in the reshape-back form, ``/ sqrt``."""
    y = x.reshape((-1, x.shape[1], G, C // G))
    mean = jnp.mean(y, (1, 3), keepdims=True)
    var = jnp.maximum(0.0, jnp.mean(lax.square(y), (1, 3), keepdims=True) - lax.square(mean))
    y = ((y - mean) / jnp.sqrt(var + eps)).reshape((-1, *x.shape[1:]))
    return _affine(y, (C,))


def torch_style(x, eps=1e-5):
    """A PyTorch-style ``(N, C)`` port: ``view(N, G, -1)``, normalise, ``view`` back."""
    y = x.reshape((x.shape[0], G, -1))
    mean = y.mean(-1, keepdims=True)
    var = ((y - mean) ** 2).mean(-1, keepdims=True)
    return _affine(((y - mean) / jnp.sqrt(var + eps)).reshape(x.shape), (C,))


def no_affine(x, eps=1e-5):
    y = x.reshape((-1, G, C // G, *x.shape[2:]))
    mean = jnp.mean(y, (2, 3), keepdims=True)
    var = jnp.var(y, (2, 3), keepdims=True)
    return ((y - mean) / jnp.sqrt(var + eps)).reshape(x.shape)


def per_channel_statistics(x, eps=1e-5):
    """Statistics over the spatial axes of each channel (an instance norm): not this op."""
    y = x.reshape((-1, G, C // G, *x.shape[2:]))
    mean = jnp.mean(y, (3, 4), keepdims=True)
    var = jnp.var(y, (3, 4), keepdims=True)
    return ((y - mean) / jnp.sqrt(var + eps)).reshape(x.shape)


def mean_reused(x, eps=1e-5):
    """The group means are an output too: fusing would compute them twice."""
    y = x.reshape((-1, G, C // G, *x.shape[2:]))
    mean = jnp.mean(y, (2, 3, 4), keepdims=True)
    var = jnp.var(y, (2, 3, 4), keepdims=True)
    return ((y - mean) / jnp.sqrt(var + eps)).reshape(x.shape), mean


def cases():
    channels_last = [("B", 4, 4, C)]
    channels_first = [("B", C, 4, 4)]
    return [
        case(
            "haiku_channels_last",
            haiku_channels_last,
            channels_last,
            counts={**FUSED, "Transpose": 2},
        ),
        case(
            "haiku_channels_last_1d",
            haiku_channels_last,
            [("B", 6, C)],
            counts={**FUSED, "Transpose": 2},
        ),
        case(
            "haiku_channels_first",
            haiku_channels_first,
            channels_first,
            counts={**FUSED, "Transpose": 0, "LayerNormalization": 0},
        ),
        case("fast_variance", fast_variance, [("B", 6, C)], counts={**FUSED, "Max": 0}),
        case("torch_style", torch_style, [("B", C)], counts={**FUSED, "Transpose": 0}),
        case("no_affine", no_affine, [("B", C, 5)], counts=FUSED),
        case("per_channel_statistics", per_channel_statistics, channels_first, counts=UNFUSED),
        case("mean_reused", mean_reused, channels_first, counts=UNFUSED),
        case(
            "opset_20",
            haiku_channels_first,
            channels_first,
            opset=20,
            counts={**UNFUSED, "LayerNormalization": 1},
        ),
    ]
