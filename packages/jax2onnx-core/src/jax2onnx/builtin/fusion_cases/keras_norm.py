"""Keras 3's layer norm arithmetic (JAX backend), written out -> one LayerNormalization.

``keras.layers.LayerNormalization`` computes ``mean, variance =
ops.moments(x, axes, keepdims=True)`` (``jnp.mean`` and ``jnp.var``), ``inv =
rsqrt(variance + epsilon) [* gamma]``, ``res = -mean * inv [+ beta]`` and
``x * inv + res``; these functions do the same in ``jnp`` (Keras is not a
dependency of the core).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.registration.cases import case

H = 32
FUSED = {"LayerNormalization": 1, "ReduceMean": 0, "Sqrt": 0, "Neg": 0, "Mul": 0, "Add": 0}
UNFUSED = {"LayerNormalization": 0}
_rng = np.random.default_rng(2)
GAMMA = (1.0 + 0.1 * _rng.standard_normal(H)).astype(np.float32)
BETA = (0.1 * _rng.standard_normal(H)).astype(np.float32)


def keras_layer_norm(x, axes=(-1,), gamma=GAMMA, beta=BETA, epsilon=1e-3):
    """``LayerNormalization.call`` / ``ops.layer_normalization`` without ``rms_scaling``."""
    mean = jnp.mean(x, axes, keepdims=True)
    variance = jnp.var(x, axis=axes, keepdims=True)
    inv = lax.rsqrt(variance + epsilon)
    if gamma is not None:
        inv = inv * gamma.astype(x.dtype)
    res = -mean * inv
    if beta is not None:
        res = res + beta.astype(x.dtype)
    return x * inv + res


def keras_plain(x):
    """``center=False, scale=False``."""
    return keras_layer_norm(x, gamma=None, beta=None)


def keras_center_only(x):
    """``scale=False``: no gamma."""
    return keras_layer_norm(x, gamma=None)


def keras_two_axes(x):
    """``axis=[-2, -1]``: gamma and beta reshaped to ``(1, 4, H)``."""
    gamma = np.broadcast_to(GAMMA, (4, H)).reshape(1, 4, H) * np.linspace(0.5, 1.5, 4)[:, None]
    beta = np.broadcast_to(BETA, (4, H)).reshape(1, 4, H)
    return keras_layer_norm(x, (-2, -1), gamma.astype(np.float32), beta)


def leading_axis(x):
    """``axis=1`` of three: LayerNormalization normalises trailing axes only."""
    return keras_layer_norm(x, (1,), gamma=None, beta=None)


def eps_outside(x):
    """``1 / (std + eps)`` is another function: not a LayerNormalization."""
    mean = jnp.mean(x, -1, keepdims=True)
    inv = 1.0 / (jnp.sqrt(jnp.var(x, axis=-1, keepdims=True)) + 1e-3) * GAMMA.astype(x.dtype)
    return x * inv + (-mean * inv + BETA.astype(x.dtype))


def inv_reused(x):
    """``inv`` is an output too: fusing would compute it twice."""
    mean = jnp.mean(x, -1, keepdims=True)
    inv = lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-3)
    return x * inv + -mean * inv, inv


def cases():
    batch = [("B", 5, H)]
    return [
        case("keras_layer_norm", keras_layer_norm, batch, counts=FUSED),
        case("keras_plain", keras_plain, batch, counts=FUSED),
        case("keras_center_only", keras_center_only, batch, counts=FUSED),
        case("keras_two_axes", keras_two_axes, [("B", 4, H)], counts=FUSED),
        case("leading_axis", leading_axis, [("B", 6, 3)], counts=UNFUSED),
        case("eps_outside", eps_outside, batch, counts=UNFUSED),
        case("inv_reused", inv_reused, batch, counts=UNFUSED),
        case("opset_16", keras_layer_norm, batch, opset=16, counts=UNFUSED),
    ]
