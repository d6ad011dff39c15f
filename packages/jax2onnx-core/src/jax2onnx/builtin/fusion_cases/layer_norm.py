"""Layer norms written in ``jnp`` the ways libraries write them -> one LayerNormalization."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.registration.cases import case

H = 32
FUSED = {"LayerNormalization": 1, "ReduceMean": 0, "ReduceSum": 0, "Sqrt": 0, "Div": 0}
UNFUSED = {"LayerNormalization": 0}


def _params(shape=(H,), seed=0):
    rng = np.random.default_rng(seed)
    scale = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(shape)).astype(np.float32)
    return scale, bias


SCALE, BIAS = _params()


def transformers_style(x, eps=1e-12):
    """Flax models of ``transformers``: mean, variance of the centred values, / sqrt."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * SCALE + BIAS


def linen_style(x, eps=1e-6):
    """``flax.linen.LayerNorm``'s arithmetic: E[x^2] - E[x]^2 clipped at 0, rsqrt."""
    mean = jnp.mean(x, -1, keepdims=True)
    mean2 = jnp.mean(lax.square(x), -1, keepdims=True)
    var = jnp.maximum(0.0, mean2 - lax.square(mean))
    return (x - mean) * lax.rsqrt(var + eps) * SCALE + BIAS


def haiku_style(x, eps=1e-5):
    """``hk.LayerNorm``: the scale multiplied into rsqrt first, ``jnp.var``."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.var(x, axis=-1, keepdims=True)
    inv = SCALE * lax.rsqrt(variance + eps)
    return inv * (x - mean) + BIAS


def no_affine(x):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-5)


def two_axes(x):
    """Normalised over the last two axes, scale of shape [4, H]."""
    scale, bias = _params((4, H), seed=1)
    mean = jnp.mean(x, axis=(-2, -1), keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=(-2, -1), keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * scale + bias


def eps_outside(x):
    """(x - mean) / (std + eps) is another function: not a LayerNormalization."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    std = jnp.sqrt(jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True))
    return (x - mean) / (std + 1e-5) * SCALE + BIAS


def leading_axis(x):
    """Normalised over axis 1 of three: LayerNormalization normalises trailing axes only."""
    mean = jnp.mean(x, axis=1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5)


def mean_reused(x):
    """The mean is an output too: fusing would compute it twice."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5), mean


def cases():
    batch = [("B", 5, H)]
    return [
        case("transformers_style", transformers_style, batch, counts=FUSED),
        case("linen_style", linen_style, batch, counts=FUSED),
        case("haiku_style", haiku_style, batch, counts=FUSED),
        case("no_affine", no_affine, [("B", H)], counts=FUSED),
        case("two_axes", two_axes, [("B", 4, H)], counts=FUSED),
        case("eps_outside", eps_outside, batch, counts=UNFUSED),
        case("leading_axis", leading_axis, [("B", 6, 3)], counts=UNFUSED),
        case("mean_reused", mean_reused, batch, counts=UNFUSED),
        case("opset_16", transformers_style, batch, opset=16, counts=UNFUSED),
    ]
