"""Type conversion and the primitives that only matter to JAX (copies, barriers)."""

from __future__ import annotations

import numpy as np
from jax import lax

from jax2onnx.dtypes import onnx_dtype
from jax2onnx.plugin import case
from jax2onnx_lax._rules import rules


@rules.lowering(
    lax.convert_element_type_p,
    cases=[
        case(
            "f32_to_i32",
            lambda x: lax.convert_element_type(x, np.int32),
            [("B", 4)],
            input_range=(-5.0, 5.0),
        ),
        case(
            "i32_to_f32",
            lambda x: lax.convert_element_type(x, np.float32),
            [np.array([1, -2, 3], np.int32)],
        ),
        case(
            "f32_to_bool",
            lambda x: lax.convert_element_type(x, np.bool_),
            [np.array([0.0, 1.5, -0.0, np.nan], np.float32)],
        ),
        case(
            "bool_to_f32",
            lambda x: lax.convert_element_type(x, np.float32),
            [np.array([True, False])],
        ),
    ],
)
def convert_element_type(ctx, x, *, new_dtype, **_):
    """convert_element_type -> Cast (float->int truncates toward zero, as in JAX)."""
    return ctx.op.Cast(x, to=onnx_dtype(new_dtype))


@rules.lowering(
    lax.stop_gradient_p,
    cases=[case("stop_gradient", lambda x: lax.stop_gradient(x) * 2.0, [("B", 3)])],
)
def stop_gradient(ctx, x, **_):
    """stop_gradient matters only to autodiff: Identity (removed by the passes)."""
    return ctx.op.Identity(x)
