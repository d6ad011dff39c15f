"""Softmax and log-softmax written op by op (a captured ``jax.nn.softmax``) -> one op."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jax2onnx.registration.cases import case

# captured at import, as transformers and Flax modules do: not intercepted
_softmax, _log_softmax = jax.nn.softmax, jax.nn.log_softmax

FUSED = {"Softmax": 1, "ReduceMax": 0, "Exp": 0, "ReduceSum": 0, "Div": 0}
UNFUSED = {"Softmax": 0, "LogSoftmax": 0}
_INF, _NAN = np.inf, np.nan
# rows where JAX's answer is special: all -inf (NaN), a +inf (NaN), a NaN (NaN),
# some -inf (zeros there), huge values (no overflow)
SPECIAL = np.array(
    [
        [1.0, 2.0, 3.0, 4.0],
        [-_INF, -_INF, -_INF, -_INF],
        [1.0, _INF, 2.0, 3.0],
        [1.0, _NAN, 2.0, 3.0],
        [1.0, -_INF, 2.0, -_INF],
        [1e30, -1e30, 0.0, 88.0],
    ]
)


def last_axis(x):
    return _softmax(x, axis=-1)


def middle_axis(x):
    return _softmax(x, axis=1)


def written_out(x):
    """The stable softmax written with ``jnp``: the maximum without ``initial=-inf``."""
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def log_softmax(x):
    return _log_softmax(x, axis=-1)


def no_shift(x):
    """``exp(x) / sum(exp(x))`` overflows where Softmax does not: another function."""
    e = jnp.exp(x)
    return e / jnp.sum(e, axis=-1, keepdims=True)


def two_axes(x):
    """A softmax over two axes is no single ONNX Softmax (opset >= 13)."""
    return _softmax(x, axis=(1, 2))


def max_reused(x):
    """The row maximum is an output too: fusing would compute it twice."""
    shifted = x - jnp.max(x, axis=-1, keepdims=True)
    e = jnp.exp(shifted)
    return e / jnp.sum(e, axis=-1, keepdims=True), shifted


def cases():
    x = ("B", 5, 8)
    return [
        case("last_axis", last_axis, [x], counts=FUSED),
        case("middle_axis", middle_axis, [x], counts=FUSED),
        case("special_rows", last_axis, [SPECIAL], counts=FUSED),
        case("written_out", written_out, [x], counts=FUSED),
        case("log_softmax", log_softmax, [x], variants=["f32"], counts={"LogSoftmax": 1, "Exp": 0}),
        case(
            "log_softmax_special_rows",
            log_softmax,
            [SPECIAL],
            variants=["f32"],
            counts={"LogSoftmax": 1},
        ),
        # ONNX Runtime's float64 LogSoftmax gives numbers, not NaN, for rows with NaN or +inf
        case("log_softmax_float64", log_softmax, [x], variants=["f64"], counts=UNFUSED),
        case("no_shift", no_shift, [x], counts=UNFUSED),
        case("two_axes", two_axes, [x], counts=UNFUSED),
        case("max_reused", max_reused, [x], counts=UNFUSED),
    ]
