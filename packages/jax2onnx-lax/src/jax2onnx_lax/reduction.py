"""Reductions over any set of axes."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import case
from jax2onnx_lax._rules import rules


def _reduce(ctx, op_type, x, axes, *, axes_as_input):
    if not axes:
        return ctx.op.Identity(x)
    if axes_as_input:
        return getattr(ctx.op, op_type)(x, ctx.const(np.asarray(axes, np.int64)), keepdims=0)
    return getattr(ctx.op, op_type)(x, axes=list(axes), keepdims=0)


_SUM_CASES = [
    case("sum_last", lambda x: jnp.sum(x, axis=-1), [("B", 4)], expect=["ReduceSum:B"]),
    case("sum_all", jnp.sum, [(3, 4)]),
    case("sum_int", lambda x: jnp.sum(x, axis=0), [np.array([[1, 2], [3, 4]], np.int32)]),
    case("sum_no_axes", lambda x: lax.reduce_sum_p.bind(x, axes=(), out_sharding=None), [(3,)]),
]


@rules.lowering(lax.reduce_sum_p, min_opset=13, cases=_SUM_CASES)
def reduce_sum(ctx, x, *, axes, **_):
    """ReduceSum with axes as an input (opset 13 and newer)."""
    return _reduce(ctx, "ReduceSum", x, axes, axes_as_input=True)


@rules.lowering(
    lax.reduce_max_p,
    min_opset=18,
    cases=[
        case("max_last", lambda x: jnp.max(x, axis=-1), [("B", 4)], expect=["ReduceMax:B"]),
        case("max_all", jnp.max, [(3, 4)]),
        case("max_opset17", lambda x: jnp.max(x, axis=0), [(3, 4)], opset=17),
        case("max_int", lambda x: jnp.max(x, axis=1), [np.array([[1, 5], [3, -4]], np.int32)]),
    ],
)
def reduce_max(ctx, x, *, axes, **_):
    """ReduceMax with axes as an input (opset 18 and newer)."""
    return _reduce(ctx, "ReduceMax", x, axes, axes_as_input=True)


@rules.lowering(lax.reduce_max_p)
def reduce_max_attribute(ctx, x, *, axes, **_):
    """ReduceMax with the axes attribute (before opset 18)."""
    return _reduce(ctx, "ReduceMax", x, axes, axes_as_input=False)
