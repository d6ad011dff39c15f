"""Rotary position embeddings written in ``jnp`` -> one ONNX RotaryEmbedding (opset 23).

ONNX Runtime's RotaryEmbedding kernel is float32 (no float64 kernel), so the
positive cases run the float32 variants (static and symbolic batch) and one
float64 case pins the decomposed form.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.registration.cases import case

_softmax = jax.nn.softmax  # captured at import, as transformers and Flax modules do

S, E, H, P = 6, 32, 4, 16  # sequence, width, heads, positions of the tables
D = E // H
F32 = ["f32"]
FUSED = {"RotaryEmbedding": 1, "Neg": 0, "Slice": 0, "GatherND": 0, "Mul": 0, "Add": 0}
UNFUSED = {"RotaryEmbedding": 0}


def _angles(n: int = P, dim: int = D, base: float = 10000.0) -> np.ndarray:
    inv_freq = 1.0 / base ** (np.arange(0, dim, 2) / dim)
    return np.einsum("i,j->ij", np.arange(n), inv_freq)


FREQS = _angles()
EMB = np.concatenate([FREQS, FREQS], axis=-1)  # halves repeated, as Llama's tables are
COS, SIN = np.cos(EMB).astype(np.float32), np.sin(EMB).astype(np.float32)
# transformers' Flax Llama keeps one table of sin and cos, indexed by position ids
SINCOS = np.concatenate([np.sin(EMB)[:, None], np.cos(EMB)[:, None]], -1).astype(np.float32)


def rotate_half(x):
    """Llama's and GPT-NeoX's rotation: ``concat(-x2, x1)`` of the halves."""
    half = x.shape[-1] // 2
    return jnp.concatenate((-x[..., half:], x[..., :half]), axis=-1)


def rotate_every_two(x):
    """GPT-J's rotation of pairs: ``stack(-x[..., 1::2], x[..., ::2])`` flattened."""
    pairs = jnp.stack((-x[..., 1::2], x[..., ::2]), axis=-1)
    return pairs.reshape(pairs.shape[:-2] + (-1,))


def llama_rotate_half(x):
    """``x * cos + rotate_half(x) * sin`` on ``(B, S, H, D)``, tables ``[None, :S, None]``."""
    cos, sin = COS[None, :S, None, :], SIN[None, :S, None, :]
    return x * cos + rotate_half(x) * sin


def gptj_rotate_every_two(x):
    """GPT-J: ``sin``/``cos`` of the half width, each value repeated twice (pairs)."""
    sin = np.repeat(np.sin(FREQS[:S]).astype(np.float32)[None, :, None], 2, axis=-1)
    cos = np.repeat(np.cos(FREQS[:S]).astype(np.float32)[None, :, None], 2, axis=-1)
    return x * cos + rotate_every_two(x) * sin


def gptj_rotary_dim(x):
    """GPT-J's ``rotary_dim``: the first half of each head rotated, the rest passed through."""
    rd = x.shape[-1] // 2
    angles = _angles(dim=rd)[:S]
    sin = np.repeat(np.sin(angles).astype(np.float32)[None, :, None], 2, axis=-1)
    cos = np.repeat(np.cos(angles).astype(np.float32)[None, :, None], 2, axis=-1)
    x_rot, x_pass = x[:, :, :, :rd], x[:, :, :, rd:]
    x_rot = x_rot * cos + rotate_every_two(x_rot) * sin
    return jnp.concatenate([x_rot, x_pass], axis=-1)


def position_ids(x, positions):
    """``transformers``' Flax Llama: ``sincos[position_ids]`` split into sin and cos."""
    sin, cos = jnp.split(jnp.asarray(SINCOS)[positions], 2, axis=-1)
    return x * cos + rotate_half(x) * sin


def heads_first(x):
    """``(B, H, S, D)``, tables of shape ``(S, D)``: the 4-D form."""
    return x * COS[:S] + rotate_half(x) * SIN[:S]


def _dense(seed: int):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((E, E)) / math.sqrt(E)).astype(np.float32)
    return w, (0.1 * rng.standard_normal(E)).astype(np.float32)


(WQ, BQ), (WK, BK), (WV, BV), (WO, BO) = (_dense(seed) for seed in range(4))


def llama_attention(x):
    """A Llama attention block as ``transformers``' Flax Llama writes it: projections split
    into heads, rotate_half on queries and keys, the causal mask as a ``finfo.min`` bias,
    Flax's ``dot_product_attention_weights``, heads merged, output projection."""
    split = lambda y: y.reshape(*y.shape[:-1], H, D)  # noqa: E731
    q, k, v = split(x @ WQ + BQ), split(x @ WK + BK), split(x @ WV + BV)
    q, k = llama_rotate_half(q), llama_rotate_half(k)
    causal = jnp.tril(jnp.ones((S, S), bool))[None, None]
    bias = lax.select(
        causal,
        jnp.full(causal.shape, 0.0).astype(x.dtype),
        jnp.full(causal.shape, jnp.finfo(x.dtype).min).astype(x.dtype),
    )
    q = q / jnp.sqrt(D).astype(x.dtype)
    weights = _softmax(jnp.einsum("...qhd,...khd->...hqk", q, k) + bias)
    out = jnp.einsum("...hqk,...khd->...qhd", weights, v)
    return out.reshape(*out.shape[:2], E) @ WO + BO


def rotated_reused(x):
    """The rotated halves are an output too: fusing would compute them twice."""
    rotated = rotate_half(x)
    return x * COS[None, :S, None] + rotated * SIN[None, :S, None], rotated


def tables_not_repeated(x):
    """Tables of ``D`` different angles: not a rotation of pairs ONNX's op computes."""
    angles = _angles(dim=2 * D)[:S]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    return x * cos[None, :, None] + rotate_half(x) * sin[None, :, None]


def cases():
    x = ("B", S, H, D)
    return [
        case("llama_rotate_half", llama_rotate_half, [x], variants=F32, counts=FUSED),
        case("gptj_rotate_every_two", gptj_rotate_every_two, [x], variants=F32, counts=FUSED),
        case(
            "gptj_rotary_dim",
            gptj_rotary_dim,
            [("B", S, H, 2 * D)],
            variants=F32,
            counts={**FUSED, "Transpose": 0, "GatherND": 0},
        ),
        case(
            "position_ids",
            position_ids,
            [x, ("B", S)],
            dtypes=[None, np.int32],
            variants=F32,  # negative ids wrap, as in JAX: the graph's own index is used
            counts={**FUSED, "Gather": 0, "Split": 0, "Add": 1},  # JAX's wrap of negative ids
        ),
        case(
            "heads_first",
            heads_first,
            [("B", H, S, D)],
            variants=F32,
            counts={**FUSED, "Reshape": 0},
        ),
        case(
            "llama_attention",
            llama_attention,
            [("B", S, E)],
            variants=F32,
            counts={
                "RotaryEmbedding": 2,
                "Attention": 1,
                "Softmax": 0,
                "Transpose": 0,
                "Neg": 0,
                "Reshape": 0,
                "Add": 4,  # the projections' biases
            },
        ),
        case("rotated_reused", rotated_reused, [x], counts=UNFUSED),
        case("tables_not_repeated", tables_not_repeated, [x], counts=UNFUSED),
        case("opset_22", llama_rotate_half, [x], opset=22, counts=UNFUSED),
        case("float64", llama_rotate_half, [x], variants=["f64"], counts=UNFUSED),
    ]
