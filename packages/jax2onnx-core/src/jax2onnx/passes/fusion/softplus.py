"""``Softplus`` and ``Mish`` (opset >= 18) from the softplus JAX writes op by op.

``jax.nn.softplus`` captured before jax2onnx intercepts it is
``jnp.logaddexp(x, 0)``, which lowers as::

    d = x - 0
    where(isnan(d), x + 0, max(x, 0) + log1p(exp(-|d|)))     # isnan(d): IsNaN(d)

with ``log1p`` in the form jax2onnx-lax writes it (Kahan's:
``u = e + 1; where(u - 1 == 0 or isinf(e), e, log(u) * e / (u - 1))``).
Matched: that ``Where``, also with the zero first (``logaddexp(0, x)``) or
without the ``- 0`` / ``+ 0``, and the stable form written by hand,
``max(x, 0) + log1p(exp(-|x|))`` (``Relu(x)`` for the maximum); then
``x * tanh(Softplus(x))`` -> ``Mish(x)``.

Why it is exact: for ``x`` not NaN, ``max(x, 0) + log1p(exp(-|x|)) =
log(1 + exp(x))`` (split at 0 so that ``exp`` never overflows) and a NaN
gives NaN either way; ``Mish(x) = x * tanh(softplus(x))`` is ONNX's
definition. Numbers: ONNX Runtime's Softplus is within 3e-7 (relative) of
the exact value over all of float32 (checked from -110 to 110 and out to
+-1e30, and against JAX's own), Mish within 5e-7; both have float32 kernels only.
"""

from __future__ import annotations

from typing import Any

from jax2onnx.passes.fusion.match import is_scalar, node, operands, producer, scalar
from jax2onnx.passes.fusion.terms import fuse, kernel, product
from jax2onnx.values.ir import ir

MISH_OPSET = 18


def _plus_zero(value: ir.Value, op_type: str) -> tuple[ir.Value, list[ir.Node]]:
    """``(x, nodes)`` for ``value = x + 0`` (``op_type="Add"``) or ``x - 0`` / ``0 - x``
    (``"Sub"``; the sign does not matter where it is used); ``(value, [])`` otherwise."""
    step = producer(value, op_type)
    if step is None:
        return value, []
    for x, zero in operands(step):
        if is_scalar(zero, 0.0) and scalar(x) is None:
            return x, [step]
    return value, []


def log1p_of(value: ir.Value) -> tuple[ir.Value, list[ir.Node]] | None:
    """``(e, nodes)`` when ``value`` is jax2onnx-lax's ``log1p(e)`` (see the module)."""
    where = producer(value, "Where")
    if where is None:
        return None
    either, e, general = where.inputs
    guard, mul = producer(either, "Or"), producer(general, "Mul")
    if guard is None or mul is None:
        return None
    for logged, ratio in operands(mul):
        log, div = producer(logged, "Log"), producer(ratio, "Div")
        add = producer(log.inputs[0], "Add") if log is not None else None
        sub = producer(div.inputs[1], "Sub") if div is not None else None
        if add is None or sub is None or div.inputs[0] is not e:
            continue
        if not any(a is e and is_scalar(one, 1.0) for a, one in operands(add)):
            continue
        if sub.inputs[0] is not log.inputs[0] or not is_scalar(sub.inputs[1], 1.0):
            continue
        for zero_test, inf_test in operands(guard):
            equal, isinf = producer(zero_test, "Equal"), producer(inf_test, "IsInf")
            if equal is None or isinf is None or isinf.inputs[0] is not e:
                continue
            if any(d is sub.outputs[0] and is_scalar(z, 0.0) for d, z in operands(equal)):
                return e, [where, guard, mul, log, div, add, sub, equal, isinf]
    return None


def stable(value: ir.Value) -> tuple[ir.Value, list[ir.Node]] | None:
    """``(x, nodes)`` when ``value`` is ``max(x, 0) + log1p(exp(-|x|))`` (``x - 0`` inside
    the absolute value allowed) or a ``Softplus`` node."""
    fused = producer(value, "Softplus")
    if fused is not None:
        return fused.inputs[0], [fused]
    add = producer(value, "Add")
    for high, low in operands(add) if add is not None else ():
        relu = producer(high, "Max", "Relu")
        found = log1p_of(low)
        exp = producer(found[0], "Exp") if found is not None else None
        neg = producer(exp.inputs[0], "Neg") if exp is not None else None
        abs_ = producer(neg.inputs[0], "Abs") if neg is not None else None
        if relu is None or abs_ is None:
            continue
        x, shift = _plus_zero(abs_.inputs[0], "Sub")
        if relu.op_type == "Relu" and relu.inputs[0] is not x:
            continue
        if relu.op_type == "Max" and not any(
            a is x and is_scalar(z, 0.0) for a, z in operands(relu)
        ):
            continue
        return x, [add, relu, *found[1], exp, neg, abs_, *shift]
    return None


def softplus(ctx: Any, anchor: ir.Node) -> bool:
    """The ``Where`` of ``logaddexp(x, 0)`` or the ``Add`` of the stable form."""
    if not kernel(anchor, "Softplus"):
        return False
    if anchor.op_type == "Add":
        found = stable(anchor.outputs[0])
        if found is None:
            return False
        x, nodes = found
    else:
        # isnan(d): IsNaN(d), or Not(Equal(d, d)) as JAX writes it
        tests = [producer(anchor.inputs[0], "IsNaN")]
        if tests[0] is None:
            negation = producer(anchor.inputs[0], "Not")
            equal = producer(negation.inputs[0], "Equal") if negation is not None else None
            if equal is None or equal.inputs[0] is not equal.inputs[1]:
                return False
            tests = [negation, equal]
        found = stable(anchor.inputs[2])
        if found is None:
            return False
        x, nodes = found
        d, shift = _plus_zero(tests[-1].inputs[0], "Sub")
        nan_case, plus = _plus_zero(anchor.inputs[1], "Add")
        if d is not x or nan_case is not x:
            return False
        nodes = [*nodes, *tests, *shift, *plus]
    return fuse(ctx, anchor, nodes, node("Softplus", [x]))


def mish(ctx: Any, anchor: ir.Node) -> bool:
    """``x * Tanh(Softplus(x))`` (the Softplus fused first)."""
    if ctx.opset < MISH_OPSET or not kernel(anchor, "Mish"):
        return False
    p = product(anchor.outputs[0])
    if len(p.factors) != 2 or p.coefficient != 1.0:
        return False
    for x, t in (p.factors, p.factors[::-1]):
        tanh = producer(t, "Tanh")
        fused = producer(tanh.inputs[0], "Softplus") if tanh is not None else None
        if fused is not None and fused.inputs[0] is x:
            return fuse(ctx, anchor, [*p.nodes, tanh, fused], node("Mish", [x]))
    return False


REWRITES = (
    (("Where", "Add"), softplus),
    (("Mul",), mish),
)
