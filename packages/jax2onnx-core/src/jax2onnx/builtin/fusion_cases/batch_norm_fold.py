"""Inference batch norms after a convolution or a dense layer -> folded into its weights.

Written as Haiku writes them (``hk.Conv2D`` / ``hk.Linear`` with a bias, then
``hk.BatchNorm`` with its moving averages: ``(x - mean) * (scale *
rsqrt(var + eps)) + offset``) and as Flax NNX's channels-last lowering emits
them (``y * a + c``). The convolution cases run in float32 only: ONNX Runtime
has no float64 Conv, so the lax plugin writes a float64 convolution as a
MatMul of patches, which is not folded.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.registration.cases import case

CIN, COUT, FEATURES = 3, 6, 8
_rng = np.random.default_rng(3)
KERNEL = (0.3 * _rng.standard_normal((3, 3, CIN, COUT))).astype(np.float32)  # HWIO
WEIGHT = (0.3 * _rng.standard_normal((FEATURES, COUT))).astype(np.float32)
BIAS = (0.1 * _rng.standard_normal(COUT)).astype(np.float32)
MEAN = (0.5 * _rng.standard_normal(COUT)).astype(np.float32)
VAR = _rng.uniform(0.5, 2.0, COUT).astype(np.float32)
SCALE = _rng.uniform(0.5, 1.5, COUT).astype(np.float32)
OFFSET = (0.1 * _rng.standard_normal(COUT)).astype(np.float32)
F32 = ["f32"]
NHWC = ("NHWC", "HWIO", "NHWC")
FOLDED = {"Mul": 0, "Sub": 0, "Add": 0, "Div": 0}


def _as(x, *arrays):
    return [jnp.asarray(a, x.dtype) for a in arrays]


def haiku_batch_norm(y, shape=(COUT,), eps=1e-5):
    """``hk.BatchNorm(...)(y, is_training=False)``: the moving averages, Haiku's order."""
    mean, var, scale, offset = (a.reshape(shape) for a in _as(y, MEAN, VAR, SCALE, OFFSET))
    inv = scale * lax.rsqrt(var + eps)
    return (y - mean) * inv + offset


def haiku_conv(x):
    """``hk.Conv2D`` (NHWC, HWIO, SAME, with bias) then ``hk.BatchNorm``."""
    kernel, bias = _as(x, KERNEL, BIAS)
    y = lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=NHWC)
    return haiku_batch_norm(y + bias)


def conv_channels_first(x):
    """An NCHW convolution without bias, the statistics shaped ``(C, 1, 1)``."""
    kernel = jnp.asarray(KERNEL.transpose(3, 2, 0, 1), x.dtype)
    y = lax.conv_general_dilated(x, kernel, (1, 1), "VALID")
    return haiku_batch_norm(y, (COUT, 1, 1))


def nnx_channels_last(x):
    """What Flax NNX's BatchNorm lowering emits for channels-last inputs: ``y * a + c``."""
    kernel, bias = _as(x, KERNEL, BIAS)
    y = lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=NHWC)
    a = SCALE / np.sqrt(VAR + 1e-5)
    return (y + bias) * jnp.asarray(a, x.dtype) + jnp.asarray(OFFSET - MEAN * a, x.dtype)


def haiku_linear(x):
    """``hk.Linear`` then ``hk.BatchNorm``: one Gemm for a matrix, MatMul + Add above."""
    weight, bias = _as(x, WEIGHT, BIAS)
    return haiku_batch_norm(x @ weight + bias)


def conv_read_twice(x):
    """The convolution's output is read by a residual too: folding would need two convs."""
    kernel = jnp.asarray(KERNEL.transpose(3, 2, 0, 1), x.dtype)
    y = lax.conv_general_dilated(x, kernel, (1, 1), "SAME")
    return haiku_batch_norm(y, (COUT, 1, 1)) + y


def along_width(x):
    """A scale that varies along the width, not the channels: not a batch norm."""
    kernel = jnp.asarray(KERNEL.transpose(3, 2, 0, 1), x.dtype)
    y = lax.conv_general_dilated(x, kernel, (1, 1), "SAME")
    return y * jnp.linspace(0.5, 1.5, 5, dtype=x.dtype) + 1.0


def scalar_only(x):
    """A scalar multiple (attention's ``1 / sqrt(d)``) is left to the product."""
    return (x @ jnp.asarray(WEIGHT, x.dtype)) * 0.125


def weight_input(x, w):
    """Weights that are an input of the graph cannot be folded."""
    return haiku_batch_norm(x @ w)


def cases():
    nhwc, nchw = [("B", 5, 5, CIN)], [("B", CIN, 5, 5)]
    return [
        case("haiku_conv", haiku_conv, nhwc, variants=F32, counts={**FOLDED, "Conv": 1}),
        case(
            "conv_channels_first",
            conv_channels_first,
            [("B", CIN, 7, 5)],
            variants=F32,
            counts={**FOLDED, "Conv": 1, "Transpose": 0},
        ),
        case(
            "nnx_channels_last",
            nnx_channels_last,
            nhwc,
            variants=F32,
            counts={**FOLDED, "Conv": 1, "Transpose": 2},
        ),
        case("haiku_linear", haiku_linear, [("B", FEATURES)], counts={**FOLDED, "Gemm": 1}),
        case(
            "haiku_linear_3d",
            haiku_linear,
            [("B", 4, FEATURES)],
            counts={"MatMul": 1, "Add": 1, "Mul": 0, "Sub": 0},
        ),
        case("conv_read_twice", conv_read_twice, nchw, variants=F32, counts={"Mul": 1}),
        case("along_width", along_width, nchw, variants=F32, counts={"Mul": 1}),
        case("scalar_only", scalar_only, [("B", FEATURES)], counts={"Mul": 1}),
        case("weight_input", weight_input, [("B", FEATURES), (FEATURES, COUT)], counts={"Mul": 1}),
    ]
