"""Binary arithmetic, comparisons and selection."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax2onnx.plugin import case
from jax2onnx_lax._rules import rules

rules.elementwise(
    {
        lax.add_p: "Add",
        "add_any": "Add",
        lax.sub_p: "Sub",
        lax.mul_p: "Mul",
        lax.eq_p: "Equal",
        lax.lt_p: "Less",
        lax.le_p: "LessOrEqual",
        lax.gt_p: "Greater",
        lax.ge_p: "GreaterOrEqual",
    }
)

rules.add_cases(
    lax.add_p,
    [
        case("add", lax.add, [("B", 4), ("B", 4)]),
        case("add_int", lax.add, [(3,), (3,)], dtypes=[np.int32, np.int32]),
        case("add_scalar_literal", lambda x: x + 1.5, [("B", 3)]),
    ],
)
rules.add_cases(
    "add_any",
    [
        case("grad_fanout", jax.grad(lambda x: (jnp.tanh(x) * x).sum()), [(4,)]),
    ],
)
rules.add_cases(lax.sub_p, [case("sub", lax.sub, [("B", 4), ("B", 4)])])
rules.add_cases(lax.mul_p, [case("mul", lax.mul, [(2, 3), (2, 3)], expect=["Mul:2x3"])])
for _prim, _fn in (
    (lax.eq_p, lax.eq),
    (lax.lt_p, lax.lt),
    (lax.le_p, lax.le),
    (lax.gt_p, lax.gt),
    (lax.ge_p, lax.ge),
    (lax.ne_p, lax.ne),
):
    rules.add_cases(
        _prim,
        [
            case(_prim.name, _fn, [("B", 4), ("B", 4)]),
            case(
                f"{_prim.name}_int",
                _fn,
                [np.array([1, 2, 3], np.int32), np.array([3, 2, 1], np.int32)],
            ),
        ],
    )


@rules.lowering(lax.ne_p)
def ne(ctx, x, y):
    """ne -> Not(Equal): ONNX has no NotEqual."""
    return ctx.op.Not(ctx.op.Equal(x, y))


# Div truncates integer division toward zero in both JAX and ONNX Runtime;
# Max and Min propagate NaN like lax.max and lax.min.
rules.elementwise({lax.div_p: "Div", lax.max_p: "Max", lax.min_p: "Min"})
_NAN_PAIR = [np.array([np.nan, 1.0, 2.0], np.float32), np.array([0.0, np.nan, 1.0], np.float32)]
rules.add_cases(
    lax.div_p,
    [
        case("div", lax.div, [("B", 3), ("B", 3)], input_range=(0.5, 3.0)),
        case(
            "div_int_truncates",
            lax.div,
            [np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)],
        ),
    ],
)
rules.add_cases(
    lax.max_p, [case("max", lax.max, [("B", 3), ("B", 3)]), case("max_nan", lax.max, _NAN_PAIR)]
)
rules.add_cases(
    lax.min_p, [case("min", lax.min, [("B", 3), ("B", 3)]), case("min_nan", lax.min, _NAN_PAIR)]
)


@rules.lowering(
    lax.select_n_p,
    cases=[
        case(
            "select_bool",
            lambda p, a, b: lax.select_n(p, a, b),
            [np.array([True, False, True]), (3,), (3,)],
        ),
        case(
            "select_int3",
            lambda p, a, b, c: lax.select_n(p, a, b, c),
            [np.array([0, 1, 2, 1], np.int32), (4,), (4,), (4,)],
        ),
        case("relu_like", lambda x: lax.select_n(x > 0, -x, x), [("B", 3)]),
    ],
)
def select_n(ctx, which, *cases):
    """select_n -> Where (bool predicate) or a chain of Where(Equal(which, i)) for n > 2."""
    if len(cases) == 1:
        return ctx.op.Identity(cases[0])
    if ctx.avals_in[0].dtype == np.bool_:
        return ctx.op.Where(which, cases[1], cases[0])
    result = cases[-1]
    for i in range(len(cases) - 2, -1, -1):
        result = ctx.op.Where(
            ctx.op.Equal(which, np.asarray(i, ctx.avals_in[0].dtype)), cases[i], result
        )
    return result
