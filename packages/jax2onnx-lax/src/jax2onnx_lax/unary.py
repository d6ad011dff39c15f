"""Unary math."""

from __future__ import annotations

import numpy as np
from jax import lax

from jax2onnx.plugin import case
from jax2onnx_lax._rules import rules

rules.elementwise(
    {
        lax.neg_p: "Neg",
        lax.exp_p: "Exp",
        lax.log_p: "Log",
        lax.tanh_p: "Tanh",
        lax.logistic_p: "Sigmoid",
    }
)

rules.add_cases(lax.neg_p, [case("neg", lax.neg, [("B", 3)], expect=["Neg:Bx3"])])
rules.add_cases(lax.exp_p, [case("exp", lax.exp, [("B", 3)], expect=["Exp"])])
rules.add_cases(lax.log_p, [case("log", lax.log, [("B", 3)], input_range=(0.1, 5.0))])
rules.add_cases(lax.tanh_p, [case("tanh", lax.tanh, [(3,)], expect=["Tanh:3"])])
rules.add_cases(lax.logistic_p, [case("logistic", lax.logistic, [("B", 5)], expect=["Sigmoid"])])


@rules.lowering(
    lax.integer_pow_p,
    cases=[
        case("square", lambda x: lax.integer_pow(x, 2), [("B", 3)]),
        case("cube", lambda x: lax.integer_pow(x, 3), [(4,)]),
        case("pow7", lambda x: lax.integer_pow(x, 7), [(4,)], input_range=(0.5, 1.5)),
        case("inverse_square", lambda x: lax.integer_pow(x, -2), [(4,)], input_range=(0.5, 2.0)),
        case("pow0", lambda x: lax.integer_pow(x, 0), [(4,)], no_unused_inputs=False),
        case("int_cube", lambda x: lax.integer_pow(x, 3), [np.array([-2, 0, 3], np.int32)]),
    ],
)
def integer_pow(ctx, x, *, y):
    """x**y by repeated squaring with Mul, as JAX computes it (exact, no Pow)."""
    if y == 0:
        return ctx.op.Add(ctx.op.Mul(x, 0), 1)
    acc, base, n = None, x, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else ctx.op.Mul(acc, base)
        n >>= 1
        if n:
            base = ctx.op.Mul(base, base)
    if y < 0:
        return ctx.op.Reciprocal(acc)
    return acc if acc is not x else ctx.op.Identity(x)
