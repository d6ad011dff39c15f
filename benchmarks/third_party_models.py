"""Models written the way libraries jax2onnx does not intercept write them (random weights).

* ``bert``: a ``transformers``-style encoder. Activations come from a table
  built when the module is imported (``ACT2FN["gelu"]`` holds
  ``functools.partial(jax.nn.gelu, approximate=False)``), softmax is a
  reference captured at import, layer norms are written out in ``jnp`` and
  attention is einsums: nothing passes through an attribute jax2onnx
  intercepts, so every op is lowered as written.
* ``llama``: a Llama-style decoder in plain ``jnp``: RMSNorm, rotary
  embeddings on half-split heads, causal attention, a SwiGLU MLP.

Both take token embeddings ``(B, S, H)`` (float32) so that the benchmark
measures the layers, not an embedding gather.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

ACT2FN = {
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),
    "silu": jax.nn.silu,
}
softmax = jax.nn.softmax  # captured at import, as library code does


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int = 2
    hidden: int = 128
    heads: int = 4
    ffn: int = 512
    seq: int = 32


BERT = Config()
LLAMA = Config(ffn=344)


def _dense(rng, *shape):
    return jnp.asarray(rng.standard_normal(shape).astype(np.float32) * 0.05)


def _layer_norm(x, scale, bias, eps=1e-12):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * scale + bias


def _heads(x, heads):
    b, s, h = x.shape
    return x.reshape(b, s, heads, h // heads)


def bert(config: Config = BERT, seed: int = 0):
    """A function ``(B, S, H) -> (B, S, H)``: ``config.layers`` post-norm encoder layers."""
    rng = np.random.default_rng(seed)
    h, f = config.hidden, config.ffn
    layers = [
        {
            **{f"w{n}": _dense(rng, h, h) for n in "qkvo"},
            **{f"b{n}": _dense(rng, h) for n in "qkvo"},
            "w_in": _dense(rng, h, f),
            "b_in": _dense(rng, f),
            "w_out": _dense(rng, f, h),
            "b_out": _dense(rng, h),
            "ln1": (1 + _dense(rng, h), _dense(rng, h)),
            "ln2": (1 + _dense(rng, h), _dense(rng, h)),
        }
        for _ in range(config.layers)
    ]

    def layer(p, x):
        q, k, v = (_heads(x @ p[f"w{n}"] + p[f"b{n}"], config.heads) for n in "qkv")
        depth = q.shape[-1]
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(depth).astype(x.dtype)
        attended = jnp.einsum("bhqk,bkhd->bqhd", softmax(scores, axis=-1), v)
        attended = attended.reshape(x.shape) @ p["wo"] + p["bo"]
        x = _layer_norm(x + attended, *p["ln1"])
        hidden = ACT2FN["gelu"](x @ p["w_in"] + p["b_in"])
        return _layer_norm(x + hidden @ p["w_out"] + p["b_out"], *p["ln2"])

    def encoder(x):
        for p in layers:
            x = layer(p, x)
        return x

    return encoder


def _rms_norm(x, weight, eps=1e-6):
    variance = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    return x * lax.rsqrt(variance + eps) * weight


def _rotate_half(x):
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def llama(config: Config = LLAMA, seed: int = 0):
    """A function ``(B, S, H) -> (B, S, H)``: ``config.layers`` pre-norm decoder layers."""
    rng = np.random.default_rng(seed)
    h, f, s = config.hidden, config.ffn, config.seq
    depth = h // config.heads
    inverse = 1.0 / (10000 ** (np.arange(0, depth, 2, dtype=np.float32) / depth))
    angles = np.outer(np.arange(s, dtype=np.float32), inverse)
    cos = jnp.asarray(np.cos(np.concatenate([angles, angles], -1))[None, :, None, :])
    sin = jnp.asarray(np.sin(np.concatenate([angles, angles], -1))[None, :, None, :])
    causal = jnp.asarray(np.tril(np.ones((s, s), bool)))
    layers = [
        {
            **{f"w{n}": _dense(rng, h, h) for n in "qkvo"},
            "gate": _dense(rng, h, f),
            "up": _dense(rng, h, f),
            "down": _dense(rng, f, h),
            "norm1": 1 + _dense(rng, h),
            "norm2": 1 + _dense(rng, h),
        }
        for _ in range(config.layers)
    ]

    def layer(p, x):
        y = _rms_norm(x, p["norm1"])
        q, k, v = (_heads(y @ p[f"w{n}"], config.heads) for n in "qkv")
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(depth).astype(np.float32)
        scores = jnp.where(causal, scores, jnp.finfo(scores.dtype).min)
        attended = jnp.einsum("bhqk,bkhd->bqhd", softmax(scores, axis=-1), v)
        x = x + attended.reshape(x.shape) @ p["wo"]
        y = _rms_norm(x, p["norm2"])
        return x + (ACT2FN["silu"](y @ p["gate"]) * (y @ p["up"])) @ p["down"]

    def decoder(x):
        for p in layers:
            x = layer(p, x)
        return x

    return decoder
