"""``Relu``, ``Clip`` and ``LeakyRelu`` from the max, min and select forms of rectifiers.

``jax.nn.relu`` called through the ``nn`` plugin's interception becomes one
``Relu``; the same function captured as a value before the conversion
(``eqx.nn.MLP(activation=jax.nn.relu)``, ``nnx.Sequential(..., nnx.relu)``,
an activation table) or written in ``jnp`` is lowered as JAX defines it.
These rewrites give the one op a person would write, whatever the call path::

    Max(v, 0)                                   -> Relu(v)
    Min(Max(v, 0), m), Max(Min(v, m), 0),
    Min(Relu(v), m)                  (m > 0)    -> Clip(v, 0, m)      (relu6: m = 6)
    Where(v >= 0, v, a * v)                     -> LeakyRelu(v, alpha=a)

They run after every other fusion, whose patterns read the max and min
forms themselves (a clamped variance, ``softplus``'s ``max(x, 0)``, the hard
activations). Numbers: the same values, except the sign of a zero: ONNX
Runtime's ``Relu`` and ``Clip`` keep ``-0.0`` where ``max(-0.0, 0.0)`` is
``+0.0`` in JAX (equal as numbers; the intercepted ``jax.nn.relu`` already
gives ``Relu``). ``LeakyRelu`` and ``where(v >= 0, v, a * v)`` agree exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.hard_sigmoid import clipped
from jax2onnx.passes.fusion.match import node, operands, producer, scalar
from jax2onnx.passes.fusion.terms import fuse, kernel
from jax2onnx.values.ir import ir


def relu(ctx: Any, anchor: ir.Node) -> bool:
    if not kernel(anchor, "Relu"):
        return False
    for v, zero in operands(anchor):
        if scalar(zero) == 0.0 and scalar(v) is None:
            return fuse(ctx, anchor, [anchor], node("Relu", [v]))
    return False


def clip(ctx: Any, anchor: ir.Node) -> bool:
    if not kernel(anchor, "Clip"):
        return False
    found = clipped(anchor.outputs[0])
    if found is None or found[2][0] is not anchor:
        return False
    v, top, nodes = found
    if v.dtype is None or scalar(v) is not None:
        return False
    dtype = v.dtype.numpy()
    bounds = [ctx.constant(np.asarray(b, dtype), "clip_bound") for b in (0, top)]
    return fuse(ctx, anchor, nodes, node("Clip", [v, *bounds]))


def leaky_relu(ctx: Any, anchor: ir.Node) -> bool:
    if not kernel(anchor, "LeakyRelu") or len(anchor.inputs) != 3:
        return False
    condition, v, scaled = anchor.inputs
    test = producer(condition, "GreaterOrEqual")
    if test is None or test.inputs[0] is not v or scalar(test.inputs[1]) != 0.0:
        return False
    mul = producer(scaled, "Mul")
    for x, slope in operands(mul) if mul is not None else ():
        alpha = scalar(slope)
        if x is v and alpha is not None:
            return fuse(ctx, anchor, [test, mul], node("LeakyRelu", [v], alpha=alpha))
    return False


REWRITES = (
    (("Min", "Max"), clip),
    (("Max",), relu),
    (("Where",), leaky_relu),
)
