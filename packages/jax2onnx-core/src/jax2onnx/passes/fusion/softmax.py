"""``Softmax`` and ``LogSoftmax`` from the softmax JAX writes op by op.

``jax.nn.softmax`` captured before jax2onnx intercepts it (a module-level
``_softmax = jax.nn.softmax``, Flax and ``transformers`` models) lowers as::

    m = max(-inf, where(any(isnan(x)), nan, ReduceMax(x)))  # initial=-inf, NaN kept
    e = exp(x - m)                                          # m unsqueezed back
    y = e / ReduceSum(e)            # log_softmax: (x - m) - log(ReduceSum(e))

Matched: ``Div(Exp(Sub(x, m)), ReduceSum(Exp(...), keepdims=1))`` (and
``Sub(d, Log(ReduceSum(Exp(d))))`` for ``LogSoftmax``) where ``m`` is
``ReduceMax(x)`` over the same single axis, through any of: an ``Unsqueeze``
of those axes (``keepdims=0`` reductions), ``Max`` with a constant ``-inf``
(the ``initial`` of ``jnp.max``), the ``Where(any NaN, NaN, .)`` guard of
the ``reduce_max`` lowering. ``stop_gradient`` leaves no node.

Why it is exact: with ``m`` the row maximum, ``exp(x - m) / sum`` is the
softmax itself (the subtraction only avoids overflow), and ONNX Runtime's
Softmax returns what JAX returns for every special row (checked in float32
and float64, opsets 11 to 23): all ``-inf``, a ``+inf`` or a NaN give a row
of NaN. Its LogSoftmax agrees in float32 only (float64 differs on rows with
``+inf`` or NaN), which is also the only dtype ``has_kernel`` grants it.
A softmax without the maximum (``exp(x) / sum(exp(x))``) overflows where
Softmax does not: not matched. Below opset 13 Softmax flattens the trailing
axes, so only a softmax over the last axis is fused there.
"""

from __future__ import annotations

import math
from typing import Any

from jax2onnx.passes.fusion.match import (
    Match,
    constant,
    int_attr,
    node,
    operands,
    producer,
    rank,
    reduced_axes,
    scalar,
)
from jax2onnx.values.ir import ir
from jax2onnx.values.kernels import has_kernel


def _axis_of(reduce: ir.Node, x_rank: int) -> int | None:
    axes = reduced_axes(reduce, x_rank)
    if axes is None or len(axes) != 1 or int_attr(reduce, "noop_with_empty_axes", 0):
        return None
    return axes[0]


def _nan_guard(match: Match, condition: ir.Value, x: ir.Value, x_rank: int, axis: int) -> bool:
    """Whether ``condition`` is ``any(isnan(x))`` over ``axis`` (casts and a ReduceMax)."""
    nodes = []
    value = condition
    while True:
        step = producer(value, "Cast", "ReduceMax", "IsNaN")
        if step is None:
            return False
        if step.op_type == "ReduceMax" and _axis_of(step, x_rank) != axis:
            return False
        nodes.append(step)
        if step.op_type == "IsNaN":
            break
        value = step.inputs[0]
    if step.inputs[0] is not x or not any(n.op_type == "ReduceMax" for n in nodes):
        return False
    return match.take(*nodes)


def row_max(match: Match, value: ir.Value, x: ir.Value, x_rank: int) -> int | None:
    """The axis when ``value`` is the maximum of ``x`` over one axis (with keepdims),
    as JAX's ``jnp.max`` lowers it; the nodes walked through join ``match``."""
    taken: list[ir.Node] = []
    unsqueezed = None
    outer = producer(value, "Unsqueeze")
    if outer is not None:
        axes = constant(outer.inputs[1]) if len(outer.inputs) > 1 else None
        if axes is None and "axes" in outer.attributes:
            axes = outer.attributes["axes"].as_ints()
        if axes is None or len(list(axes)) != 1:
            return None
        unsqueezed = int(list(axes)[0]) % x_rank
        taken.append(outer)
        value = outer.inputs[0]
    initial = producer(value, "Max")
    if initial is not None and len(initial.inputs) == 2:
        for inner, bound in operands(initial):
            if scalar(bound) == -math.inf:
                taken.append(initial)
                value = inner
                break
    guard = producer(value, "Where")
    if guard is not None:
        nan = scalar(guard.inputs[1])
        if nan is None or not math.isnan(nan):
            return None
        taken.append(guard)
        value = guard.inputs[2]
    reduce = producer(value, "ReduceMax")
    if reduce is None or reduce.inputs[0] is not x:
        return None
    axis = _axis_of(reduce, x_rank)
    keep = int_attr(reduce, "keepdims", 1)
    if axis is None or (keep == 1) == (unsqueezed is not None):
        return None
    if guard is not None and not _nan_guard(match, guard.inputs[0], x, x_rank, axis):
        return None
    if unsqueezed is not None and unsqueezed != axis:
        return None
    match.take(reduce, *taken)
    return axis


def _shifted(match: Match, value: ir.Value) -> tuple[ir.Value, int, int] | None:
    """``(x, rank, axis)`` when ``value`` is ``x - row_max(x)``."""
    sub = producer(value, "Sub")
    if sub is None:
        return None
    x = sub.inputs[0]
    x_rank = rank(x)
    if x_rank is None or x_rank == 0:
        return None
    axis = row_max(match, sub.inputs[1], x, x_rank)
    if axis is None:
        return None
    match.take(sub)
    return x, x_rank, axis


def _sum_of(match: Match, value: ir.Value, summed: ir.Value, x_rank: int) -> int | None:
    reduce = producer(value, "ReduceSum")
    if reduce is None or reduce.inputs[0] is not summed or int_attr(reduce, "keepdims", 1) != 1:
        return None
    axis = _axis_of(reduce, x_rank)
    if axis is not None:
        match.take(reduce)
    return axis


def _allowed(ctx: Any, op_type: str, x: ir.Value, x_rank: int, axis: int) -> bool:
    if x.dtype is None or not has_kernel(op_type, x.dtype.numpy()):
        return False
    return ctx.opset >= 13 or axis == x_rank - 1


def softmax(ctx: Any, div: ir.Node) -> bool:
    match = Match(ctx.graph, div)
    exp = producer(div.inputs[0], "Exp")
    if exp is None:
        return False
    found = _shifted(match, exp.inputs[0])
    if found is None:
        return False
    x, x_rank, axis = found
    if _sum_of(match, div.inputs[1], exp.outputs[0], x_rank) != axis:
        return False
    if not _allowed(ctx, "Softmax", x, x_rank, axis):
        return False
    match.take(exp)
    if not match.closed():
        return False  # checked before building: a node holds its inputs' uses
    fused = node("Softmax", [x], axis=axis if ctx.opset >= 13 else x_rank - 1)
    return match.replace([fused], fused.outputs[0])


def log_softmax(ctx: Any, sub: ir.Node) -> bool:
    match = Match(ctx.graph, sub)
    log = producer(sub.inputs[1], "Log")
    if log is None:
        return False
    found = _shifted(match, sub.inputs[0])
    if found is None:
        return False
    x, x_rank, axis = found
    reduce = producer(log.inputs[0], "ReduceSum")
    exp = producer(reduce.inputs[0], "Exp") if reduce is not None else None
    if exp is None or exp.inputs[0] is not sub.inputs[0]:
        return False
    if _sum_of(match, log.inputs[0], exp.outputs[0], x_rank) != axis:
        return False
    if not _allowed(ctx, "LogSoftmax", x, x_rank, axis):
        return False
    match.take(log, exp)
    if not match.closed():
        return False  # checked before building: a node holds its inputs' uses
    fused = node("LogSoftmax", [x], axis=axis if ctx.opset >= 13 else x_rank - 1)
    return match.replace([fused], fused.outputs[0])


REWRITES = ((("Div",), softmax), (("Sub",), log_softmax))
