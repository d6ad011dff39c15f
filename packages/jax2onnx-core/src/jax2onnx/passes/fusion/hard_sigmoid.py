"""``HardSigmoid`` and ``HardSwish`` (opset >= 14) from ``relu6`` arithmetic.

Haiku and Keras models (and MobileNet ports) write the hard activations in
``jnp``: ``relu6(x + 3) / 6`` and ``x * relu6(x + 3) / 6``, with ``relu6``
as ``jnp.clip``, ``jnp.minimum(jnp.maximum(., 0), 6)`` or a ``jax.nn.relu6``
captured at import time; Keras 2 wrote ``clip(0.2 * x + 0.5, 0, 1)``.
Matched, with products read by :func:`.terms.product`::

    c * clip(a * x + b, 0, m)          with c * m = 1   -> HardSigmoid(alpha=c*a, beta=c*b)
    c * x * clip(a * x + b, 0, m)      with c * (a, b, m) = (1/6, 1/2, 1)  -> HardSwish(x)
    x * HardSigmoid(x, 1/6, 1/2)                         -> HardSwish(x)

where ``clip(v, 0, m)`` is ``Clip(v, 0, m)``, ``Min(Max(v, 0), m)``,
``Max(Min(v, m), 0)`` or ``Min(Relu(v), m)``. The ``+ b`` must be there: a
lone ``clip(x, 0, 1)`` is already one op.

Why it is exact: for ``c > 0``, ``c * clip(v, 0, m) = clip(c * v, 0, c * m)``,
and ``HardSigmoid(x) = max(0, min(1, alpha * x + beta))``, ``HardSwish(x) =
x * HardSigmoid(x, 1/6, 1/2)`` by ONNX's definitions; the constants must
agree within 1e-6 relative. Numbers: ONNX Runtime computes ``x / 6 + 0.5``
where the model computes ``(x + 3) / 6``, one rounding apart (6e-8 absolute
in float32): near ``x = -3``, where the result goes to 0, that is absolute
rather than relative accuracy.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from jax2onnx.passes.fusion.match import node, operands, producer, scalar
from jax2onnx.passes.fusion.terms import close, fuse, kernel, product
from jax2onnx.values.ir import ir

HARD_SWISH_OPSET = 14


class Hard(NamedTuple):
    """``clip(alpha * x + beta, 0, top)``, and the nodes computing it."""

    x: ir.Value
    alpha: float
    beta: float
    top: float
    nodes: list[ir.Node]


def clipped(value: ir.Value) -> tuple[ir.Value, float, list[ir.Node]] | None:
    """``(v, m, nodes)`` when ``value`` is ``clip(v, 0, m)`` (see the module), ``m > 0``."""
    clip = producer(value, "Clip")
    if clip is not None:
        low, top = (scalar(clip.inputs[k]) if len(clip.inputs) > k else None for k in (1, 2))
        if low == 0.0 and top is not None and top > 0:
            return clip.inputs[0], top, [clip]
        return None
    outer = producer(value, "Min", "Max")
    for inner, bound in operands(outer) if outer is not None else ():
        limit = scalar(bound)
        if outer.op_type == "Min":  # Min(Max(v, 0) | Relu(v), m)
            floor = _relu(inner)
            if floor is not None and limit is not None and limit > 0:
                return floor[0], limit, [outer, floor[1]]
        elif limit == 0.0:  # Max(Min(v, m), 0)
            cap = producer(inner, "Min")
            for v, top in operands(cap) if cap is not None else ():
                m = scalar(top)
                if m is not None and m > 0 and scalar(v) is None:
                    return v, m, [outer, cap]
    return None


def _relu(value: ir.Value) -> tuple[ir.Value, ir.Node] | None:
    """``(v, node)`` when ``value`` is ``Relu(v)`` or ``Max(v, 0)``."""
    relu = producer(value, "Relu")
    if relu is not None:
        return relu.inputs[0], relu
    floor = producer(value, "Max")
    for v, zero in operands(floor) if floor is not None else ():
        if scalar(zero) == 0.0 and scalar(v) is None:
            return v, floor
    return None


def hard(value: ir.Value) -> Hard | None:
    """``value`` as ``clip(alpha * x + beta, 0, top)``: a HardSigmoid node or a clipped
    ``Add`` of a scalar and ``a * x``."""
    sigmoid = producer(value, "HardSigmoid")
    if sigmoid is not None:
        alpha, beta = sigmoid.attributes.get("alpha"), sigmoid.attributes.get("beta")
        alpha = 0.2 if alpha is None else alpha.as_float()
        beta = 0.5 if beta is None else beta.as_float()
        return Hard(sigmoid.inputs[0], alpha, beta, 1.0, [sigmoid])
    found = clipped(value)
    add = producer(found[0], "Add") if found is not None else None
    if add is None:
        return None
    for linear, constant in operands(add):
        beta = scalar(constant)
        if beta is None or scalar(linear) is not None:
            continue
        p = product(linear)
        if len(p.factors) == 1:
            return Hard(p.factors[0], p.coefficient, beta, found[1], [*found[2], add, *p.nodes])
        return Hard(linear, 1.0, beta, found[1], [*found[2], add])  # x is itself a product
    return None


def hard_sigmoid(ctx: Any, anchor: ir.Node) -> bool:
    if not kernel(anchor, "HardSigmoid"):
        return False
    p = product(anchor.outputs[0])
    found = hard(p.factors[0]) if len(p.factors) == 1 else None
    if found is None or "HardSigmoid" in (n.op_type for n in found.nodes):
        return False
    c = p.coefficient
    if not close(c * found.top, 1.0):
        return False
    fused = node("HardSigmoid", [found.x], alpha=c * found.alpha, beta=c * found.beta)
    return fuse(ctx, anchor, [*p.nodes, *found.nodes], fused)


def hard_swish(ctx: Any, anchor: ir.Node) -> bool:
    if ctx.opset < HARD_SWISH_OPSET or not kernel(anchor, "HardSwish"):
        return False
    p = product(anchor.outputs[0])
    if len(p.factors) != 2:
        return False
    c = p.coefficient
    for x, h in (p.factors, p.factors[::-1]):
        found = hard(h)
        if found is None or found.x is not x:
            continue
        scaled = (c * found.alpha, c * found.beta, c * found.top)
        if all(close(s, w) for s, w in zip(scaled, (1 / 6, 0.5, 1.0))):
            return fuse(ctx, anchor, [*p.nodes, *found.nodes], node("HardSwish", [x]))
    return False


REWRITES = (
    (("Mul", "Div", "Clip", "Min", "Max"), hard_sigmoid),
    (("Mul", "Div"), hard_swish),
)
