"""``Gelu`` (opset >= 20) from the GELUs written op by op.

``transformers`` builds ``ACT2FN = {"gelu": partial(jax.nn.gelu,
approximate=False), "gelu_new": partial(jax.nn.gelu, approximate=True), ...}``
at import time, before jax2onnx intercepts ``jax.nn.gelu``; Keras and
hand-written models use ``erf`` or ``tanh`` themselves. Matched, with the
product read by :func:`.terms.product` (the 0.5 may stand anywhere in it, or
be a division by 2)::

    x * 0.5 * erfc(-x / sqrt(2))                          # jax.nn.gelu(approximate=False)
    x * 0.5 * (1 + erf(x / sqrt(2)))  |  x * (0.5 + 0.5 * erf(x / sqrt(2)))
    x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))     # jax.nn.gelu
    (the tanh argument also as sqrt(2/pi) * x + sqrt(2/pi) * 0.044715 * x^3;
     x^3 as any product of three x or Pow(x, 3))

``erfc`` is the float32 lowering of ``lax.erfc_p``:
``Where(Less(z, t), 1 - Erf(z), tail)``. Its tail (``exp(-z^2)`` times a
rational function, some thirty nodes) is recognised by what it computes, not
by its shape: it must depend on ``z`` and scalar constants only, and its
float64 value must be within 1e-6 (relative) of ``erfc`` from ``t`` to 12
and at large ``z``, where float32 rounds ``erfc`` to 0.

Why it is exact: ``(1 + erf(x / sqrt 2)) / 2 = erfc(-x / sqrt 2) / 2`` is the
normal CDF, so each form is ``Gelu(x, approximate="none")``, and the tanh form
is ONNX's definition of ``approximate="tanh"``. The constants must agree
within 1e-6 relative (their float32 roundings do; ``0.044`` for ``0.044715``
is another function and stays). Numbers: ONNX Runtime's Gelu is within
5e-7 (absolute) of the decomposed forms in float32; like every Gelu kernel it
computes ``1 + erf``, so where ``x * Phi(x)`` is tiny (``x < -3``) it keeps
absolute, not relative, accuracy, as the ``Gelu`` jax2onnx emits for an
intercepted ``jax.nn.gelu`` does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jax2onnx.passes.fusion.match import is_scalar, node, operands, producer, scalar
from jax2onnx.passes.fusion.terms import close, evaluate, fuse, kernel, polynomial, product
from jax2onnx.values.ir import ir

MIN_OPSET = 20
SQRT_HALF = math.sqrt(0.5)
TANH_SCALE = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715
ERFC_RTOL = 1e-6
HALF_SUBNORMAL = 2.0**-150  # float32 rounds anything smaller to 0


def erfc_of(value: ir.Value) -> tuple[ir.Value, list[ir.Node]] | None:
    """``(z, nodes)`` when ``value`` is ``Where(Less(z, t), 1 - Erf(z), tail)`` and ``tail``
    computes ``erfc(z)`` for ``z >= t`` (evaluated in float64, see the module)."""
    where = producer(value, "Where")
    less = producer(where.inputs[0], "Less") if where is not None else None
    if less is None:
        return None
    z, split = less.inputs[0], scalar(less.inputs[1])
    near = producer(where.inputs[1], "Sub")
    if split is None or not math.isfinite(split) or near is None:
        return None
    erf = producer(near.inputs[1], "Erf")
    if erf is None or erf.inputs[0] is not z or not is_scalar(near.inputs[0], 1.0):
        return None
    points = np.concatenate(
        [np.linspace(split, max(split, 12.0), 257), [16.0, 30.0, 1e3, 1e30, np.inf]]
    )
    found = evaluate(where.inputs[2], z, points)
    if found is None:
        return None
    tail, tail_nodes = found
    want = np.frompyfunc(math.erfc, 1, 1)(points).astype(np.float64)
    if tail.shape != want.shape or not np.all(
        np.abs(tail - want) <= ERFC_RTOL * want + HALF_SUBNORMAL
    ):
        return None
    return z, [where, less, near, erf, *tail_nodes]


def _scaled_x(value: ir.Value, x: ir.Value, k: float) -> list[ir.Node] | None:
    """The nodes of ``value = k * x`` (any bracketing, ``/ (1 / k)``), else ``None``."""
    p = product(value)
    if p.factors != [x] or not close(p.coefficient, k):
        return None
    return p.nodes


def _cubic(value: ir.Value, x: ir.Value) -> list[ir.Node] | None:
    """The nodes of ``value = sqrt(2/pi) * (x + 0.044715 * x^3)``, else ``None``."""
    found = polynomial(value, x)
    if found is None:
        return None
    powers, nodes = found
    wanted = {1: TANH_SCALE, 3: TANH_SCALE * TANH_CUBIC}
    if powers.keys() != wanted.keys() or not all(close(powers[n], wanted[n]) for n in wanted):
        return None
    return nodes


def cdf(value: ir.Value, x: ir.Value) -> tuple[float, str, list[ir.Node]] | None:
    """``(k, approximate, nodes)`` when ``value`` is ``k * Phi(x)``, ``Phi`` the normal CDF
    (``"none"``) or its tanh approximation (``"tanh"``)."""
    erfc = erfc_of(value)
    if erfc is not None:
        z, nodes = erfc
        inner = _scaled_x(z, x, -SQRT_HALF)
        return None if inner is None else (2.0, "none", nodes + inner)
    add = producer(value, "Add")
    if add is None:
        return None
    for one, rest in operands(add):  # c + c * erf(...) | c + c * tanh(...)
        c = scalar(one)
        p = product(rest)
        if not c or len(p.factors) != 1 or not close(p.coefficient, c):
            continue
        erf, tanh = producer(p.factors[0], "Erf"), producer(p.factors[0], "Tanh")
        if erf is not None:
            inner, approximate, step = _scaled_x(erf.inputs[0], x, SQRT_HALF), "none", erf
        elif tanh is not None:
            inner, approximate, step = _cubic(tanh.inputs[0], x), "tanh", tanh
        else:
            continue
        if inner is not None:
            return 2.0 * c, approximate, [add, *p.nodes, step, *inner]
    return None


def gelu(ctx: Any, anchor: ir.Node) -> bool:
    if ctx.opset < MIN_OPSET or not kernel(anchor, "Gelu"):
        return False
    p = product(anchor.outputs[0])
    if len(p.factors) != 2:
        return False
    for x, phi in (p.factors, p.factors[::-1]):
        found = cdf(phi, x)
        if found is not None and close(p.coefficient * found[0], 1.0):
            fused = node("Gelu", [x], approximate=found[1])
            return fuse(ctx, anchor, [*p.nodes, *found[2]], fused)
    return False


REWRITES = ((("Mul", "Div"), gelu),)
