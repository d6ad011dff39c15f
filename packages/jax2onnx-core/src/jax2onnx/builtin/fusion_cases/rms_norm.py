"""RMS norms written in ``jnp`` the ways libraries write them -> one RMSNormalization."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.registration.cases import case

H = 32
FUSED = {"RMSNormalization": 1, "ReduceMean": 0, "Sqrt": 0, "Reciprocal": 0, "Div": 0}
UNFUSED = {"RMSNormalization": 0}
WEIGHT = (1.0 + 0.1 * np.random.default_rng(0).standard_normal(H)).astype(np.float32)
GEMMA_WEIGHT = (0.1 * np.random.default_rng(1).standard_normal(H)).astype(np.float32)
# float32 inside the norm, whatever the input: JAX (XLA) and ONNX Runtime round differently
WIDE = {"float64": (1e-6, 1e-6)}


def llama_style(x, eps=1e-6):
    """transformers' (Flax) LlamaRMSNorm: float32 statistics, the weight after the Cast back."""
    dtype = x.dtype
    h = x.astype(jnp.float32)
    variance = jnp.power(h, 2).mean(-1, keepdims=True)
    h = h * lax.rsqrt(variance + eps)
    return WEIGHT.astype(dtype) * h.astype(dtype)


def gemma_style(x, eps=1e-6):
    """transformers' (Flax) GemmaRMSNorm: / sqrt, then ``(1 + weight)``."""
    variance = jnp.power(x, 2).mean(-1, keepdims=True)
    x = x / jnp.sqrt(variance + eps)
    return (1 + GEMMA_WEIGHT).astype(x.dtype) * x


def gemma_float32(x, eps=1e-6):
    """Gemma ported from PyTorch: the whole norm, ``(1 + weight)`` too, in float32."""
    h = x.astype(jnp.float32)
    h = h * lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + eps)
    return (h * (1.0 + GEMMA_WEIGHT)).astype(x.dtype)


def haiku_style(x, eps=1e-5):
    """``hk.RMSNorm``: the scale multiplied first, the mean square broadcast."""
    scale = jnp.broadcast_to(WEIGHT.astype(x.dtype), x.shape)
    mean_squared = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    mean_squared = jnp.broadcast_to(mean_squared, x.shape)
    return x * scale * lax.rsqrt(mean_squared + eps)


def t5_style(x, eps=1e-6):
    """T5's norm without a weight; over the last two axes."""
    variance = jnp.mean(jnp.square(x), axis=(-2, -1), keepdims=True)
    return x * lax.rsqrt(variance + eps)


def eps_outside(x):
    """x / (rms + eps) is another function: not an RMSNormalization."""
    rms = jnp.sqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True))
    return x / (rms + 1e-5) * WEIGHT.astype(x.dtype)


def leading_axis(x):
    """Normalised over axis 1 of three: RMSNormalization normalises trailing axes only."""
    return x * lax.rsqrt(jnp.mean(jnp.square(x), axis=1, keepdims=True) + 1e-6)


def mean_square_reused(x):
    """The mean square is an output too: fusing would compute it twice."""
    ms = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    return x * lax.rsqrt(ms + 1e-6), ms


def cases():
    batch = [("B", 5, H)]
    half = jax.numpy.float16
    return [
        case("llama_style", llama_style, batch, counts=FUSED, tolerances=WIDE),
        case(
            "llama_float16",
            llama_style,
            batch,
            dtypes=[half],
            variants=["f32"],
            counts={**FUSED, "Cast": 0, "Mul": 0},
        ),
        case("gemma_style", gemma_style, batch, counts=FUSED),
        case("gemma_float32", gemma_float32, batch, counts=FUSED, tolerances=WIDE),
        case(
            "gemma_float16",
            gemma_float32,
            batch,
            dtypes=[half],
            variants=["f32"],
            counts={**FUSED, "Cast": 0, "Mul": 0},
        ),
        case("haiku_style", haiku_style, batch, counts={**FUSED, "Mul": 0, "Expand": 0}),
        case("t5_two_axes", t5_style, [("B", 4, H)], counts={**FUSED, "Mul": 0}),
        case("eps_outside", eps_outside, batch, counts=UNFUSED),
        case("leading_axis", leading_axis, [("B", 6, 3)], counts=UNFUSED),
        case("mean_square_reused", mean_square_reused, batch, counts=UNFUSED),
        case("opset_22", llama_style, batch, opset=22, counts=UNFUSED, tolerances=WIDE),
    ]
