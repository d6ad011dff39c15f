"""Activations as libraries write them -> Gelu, HardSigmoid, HardSwish, Softplus, Mish,
Relu, Clip (relu6), LeakyRelu.

The functions taken from ``jax.nn`` are captured when this module is
imported (as ``transformers`` builds ``ACT2FN``), before jax2onnx intercepts
``jax.nn``: they lower op by op, and the fusion pass has to find them. The
fused ops have float32 kernels only, so the fused cases run in float32 and a
float64 twin checks that nothing fuses there.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.registration.cases import case

# transformers' modeling_flax_utils keeps its activations in a table like this one
ACT2FN = {
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_new": jax.nn.gelu,  # approximate=True: the tanh form
    "silu": jax.nn.silu,
    "relu": jax.nn.relu,  # eqx.nn.MLP(activation=jax.nn.relu), nnx.Sequential(..., nnx.relu)
    "relu6": jax.nn.relu6,
    "leaky_relu": functools.partial(jax.nn.leaky_relu, negative_slope=0.2),
}
_relu6 = jax.nn.relu6
_softplus = jax.nn.softplus

H, F = 16, 32
_rng = np.random.default_rng(0)
W1 = (0.3 * _rng.standard_normal((H, F))).astype(np.float32)
B1 = (0.3 * _rng.standard_normal(F)).astype(np.float32)
W2 = (0.3 * _rng.standard_normal((F, H))).astype(np.float32)
B2 = (0.1 * _rng.standard_normal(H)).astype(np.float32)
SQRT_HALF = math.sqrt(0.5)
TANH_SCALE = math.sqrt(2.0 / math.pi)


def mlp(act):
    """A transformers feed-forward block: dense, activation, dense."""

    def block(x):
        return act(x @ W1 + B1) @ W2 + B2

    block.__name__ = f"mlp_{getattr(act, '__name__', 'gelu')}"
    return block


def erf_gelu(x):
    """GELU written with erf (BERT ports, Keras' ``approximate=False``)."""
    return 0.5 * x * (1.0 + lax.erf(x / jnp.sqrt(2.0).astype(x.dtype)))


def erf_gelu_half_inside(x):
    return x * (0.5 + 0.5 * lax.erf(x * SQRT_HALF))


def tanh_gelu_power(x):
    """GPT-2's ``gelu_new`` as written by hand, with ``x ** 3`` a float power."""
    inner = TANH_SCALE * (x + 0.044715 * jnp.power(x, 3.0))
    return 0.5 * x * (1.0 + jnp.tanh(inner))


def tanh_gelu_expanded(x):
    """The tanh argument multiplied out: sqrt(2/pi) x + sqrt(2/pi) 0.044715 x^3."""
    return x * 0.5 * (1.0 + jnp.tanh(TANH_SCALE * x + TANH_SCALE * 0.044715 * x * x * x))


def haiku_hard_swish(x):
    """``x * relu6(x + 3) / 6`` with a ``jax.nn.relu6`` captured at import (Max, Min)."""
    return x * _relu6(x + 3.0) / 6.0


def keras_hard_sigmoid(x):
    """Keras 3's ``relu6(x + 3) / 6`` with ``jnp.clip``."""
    return jnp.clip(x + 3.0, 0.0, 6.0) / 6.0


def keras2_hard_sigmoid(x):
    """Keras 2's ``clip(0.2 x + 0.5, 0, 1)``."""
    return jnp.clip(0.2 * x + 0.5, 0.0, 1.0)


def hard_swish_minmax(x):
    """The hard sigmoid inside divided first: x * (min(max(x + 3, 0), 6) / 6)."""
    return x * (jnp.minimum(jnp.maximum(x + 3.0, 0.0), 6.0) / 6.0)


def stable_softplus(x):
    return jnp.maximum(x, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(x)))


def mish(x):
    return x * jnp.tanh(_softplus(x))


def gelu_reused(x):
    """``1 + erf`` is an output too: fusing would compute it twice."""
    cdf2 = 1.0 + lax.erf(x * SQRT_HALF)
    return 0.5 * x * cdf2, cdf2


def gelu_rough_erfc(x):
    """An erfc shaped like the lowering's but with a rough tail (the asymptote
    exp(-z^2) / (z sqrt(pi))): the tail is checked by value, so it is not a Gelu."""
    z = -x * SQRT_HALF
    tail = jnp.exp(-z * z) / (z * math.sqrt(math.pi))
    return 0.5 * x * jnp.where(z < 0.5, 1.0 - lax.erf(z), tail)


def tanh_gelu_other_constant(x):
    """0.044 instead of 0.044715 is another function."""
    return 0.5 * x * (1.0 + jnp.tanh(TANH_SCALE * (x + 0.044 * x**3)))


def hard_sigmoid_other_scale(x):
    """relu6(x + 3) / 5 reaches 1.2: not a HardSigmoid."""
    return jnp.clip(x + 3.0, 0.0, 6.0) / 5.0


def naive_softplus(x):
    """log1p(exp(x)) overflows to inf above 88 where Softplus does not: not fused."""
    return jnp.log1p(jnp.exp(x))


def silu(x):
    """SiLU has no ONNX op: x * Sigmoid(x) stays."""
    return ACT2FN["silu"](x)


GELU = {"Gelu": 1, "Erf": 0, "Tanh": 0, "Where": 0, "Exp": 0, "Pow": 0}
HARD_SWISH = {"HardSwish": 1, "HardSigmoid": 0, "Clip": 0, "Max": 0, "Min": 0, "Div": 0}
HARD_SIGMOID = {"HardSigmoid": 1, "Clip": 0, "Max": 0, "Min": 0, "Div": 0, "Add": 0}
SOFTPLUS = {"Softplus": 1, "Exp": 0, "Log": 0, "Where": 0, "Max": 0}
MISH = {"Mish": 1, "Softplus": 0, "Tanh": 0, "Exp": 0}
RELU = {"Relu": 1, "Max": 0}
RELU6 = {"Clip": 1, "Max": 0, "Min": 0, "Relu": 0}
LEAKY = {"LeakyRelu": 1, "Where": 0, "GreaterOrEqual": 0, "Mul": 0}


def clamp_minmax(x):
    """jnp.minimum(jnp.maximum(x, 0), 2): one Clip."""
    return jnp.minimum(jnp.maximum(x, 0.0), 2.0)


def floor_half(x):
    """max(x, 0.5) is not a rectifier: the Max stays."""
    return jnp.maximum(x, 0.5)


def leaky_other_threshold(x):
    """where(x >= 1, x, 0.2 x) is another function: not a LeakyRelu."""
    return jnp.where(x >= 1.0, x, 0.2 * x)


def _fused(name, fn, inputs, counts, input_range=(-8.0, 8.0), **kw):
    """The fused case (float32) and its float64 twin, where no kernel exists and nothing fuses."""
    op = next(k for k, v in counts.items() if v == 1)
    return [
        case(name, fn, inputs, counts=counts, variants=["f32"], input_range=input_range, **kw),
        case(
            f"{name}_f64",
            fn,
            inputs,
            counts={op: 0},
            variants=["f64"],
            input_range=input_range,
            **kw,
        ),
    ]


def _kept(name, fn, counts, **kw):
    return case(name, fn, [("B", 5, H)], counts=counts, variants=["f32"], **kw)


def cases():
    batch = [("B", 5, H)]
    return [
        *_fused("transformers_gelu", mlp(ACT2FN["gelu"]), batch, {**GELU, "MatMul": 2}),
        *_fused("transformers_gelu_new", mlp(ACT2FN["gelu_new"]), batch, {**GELU, "MatMul": 2}),
        case(
            "gelu_whole_range",
            ACT2FN["gelu"],
            [np.linspace(-20.0, 20.0, 4001, dtype=np.float32)],
            counts=GELU,
            variants=["f32"],
            tolerances={"float32": (1e-5, 1e-6)},  # ORT's Gelu: absolute accuracy below -3
        ),
        case("erf_gelu", erf_gelu, batch, counts=GELU, variants=["f32"]),
        case("erf_gelu_half_inside", erf_gelu_half_inside, batch, counts=GELU, variants=["f32"]),
        case("tanh_gelu_power", tanh_gelu_power, batch, counts=GELU, variants=["f32"]),
        case("tanh_gelu_expanded", tanh_gelu_expanded, batch, counts=GELU, variants=["f32"]),
        *_fused("haiku_hard_swish", haiku_hard_swish, batch, HARD_SWISH),
        case("hard_swish_minmax", hard_swish_minmax, batch, counts=HARD_SWISH, variants=["f32"]),
        *_fused("keras_hard_sigmoid", keras_hard_sigmoid, batch, HARD_SIGMOID),
        case(
            "keras2_hard_sigmoid", keras2_hard_sigmoid, batch, counts=HARD_SIGMOID, variants=["f32"]
        ),
        *_fused("softplus", lambda x: _softplus(x), batch, SOFTPLUS, input_range=(-30.0, 30.0)),
        case("stable_softplus", stable_softplus, batch, counts=SOFTPLUS, variants=["f32"]),
        *_fused("mish", mish, batch, MISH),
        # rectifiers captured before the interception: the ops the intercepted path gives
        case("captured_relu", mlp(ACT2FN["relu"]), batch, counts=RELU, variants=["f32"]),
        case("captured_relu_f64", ACT2FN["relu"], batch, counts=RELU, variants=["f64"]),
        case("captured_relu6", mlp(ACT2FN["relu6"]), batch, counts=RELU6, variants=["f32"]),
        case("clamp_minmax", clamp_minmax, batch, counts=RELU6, variants=["f32"]),
        case("captured_leaky", mlp(ACT2FN["leaky_relu"]), batch, counts=LEAKY, variants=["f32"]),
        # not fused (float32: float64 has no kernel to fuse into anyway)
        _kept("gelu_reused", gelu_reused, {"Gelu": 0, "Erf": 1}),
        _kept("gelu_rough_erfc", gelu_rough_erfc, {"Gelu": 0, "Erf": 1}),
        _kept("tanh_gelu_0044", tanh_gelu_other_constant, {"Gelu": 0, "Tanh": 1}),
        _kept("gelu_opset19", mlp(ACT2FN["gelu"]), {"Gelu": 0, "Erf": 1}, opset=19),
        _kept("hard_swish_opset13", haiku_hard_swish, {"HardSwish": 0}, opset=13),
        _kept("hard_sigmoid_over_5", hard_sigmoid_other_scale, {"HardSigmoid": 0}),
        _kept("mish_opset17", mish, {"Mish": 0, "Softplus": 1, "Tanh": 1}, opset=17),
        _kept("naive_softplus", naive_softplus, {"Softplus": 0}),
        _kept("silu", silu, {"Sigmoid": 1, "Mul": 1}),
        _kept("floor_half", floor_half, {"Relu": 0, "Max": 1}),
        _kept("leaky_other_threshold", leaky_other_threshold, {"LeakyRelu": 0, "Where": 1}),
    ]
