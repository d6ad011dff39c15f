"""The causal triangle computed from iotas, for sequence lengths known only at run time.

With a symbolic length, ``jnp.tril(jnp.ones((S, S), bool))`` and
``jnp.arange(S)[:, None] >= jnp.arange(S)[None, :]`` are not constants: they
lower to a ``Range`` over the length, broadcast to rows and columns and
compared (``tril`` through ``Where(rows + 0 >= cols, ones, zeros)``), then
broadcast to the logits. :func:`is_causal` reads that back: the condition is
``row + a >= col + b`` (or ``col + b <= row + a``) with ``a == b``, rows and
columns the same ``Range(0, n, 1)`` of ``n`` the query and key length, seen
through Casts, Unsqueezes, Expands, ``+ c`` and ``* 1``. That keeps
``j <= i``: ONNX ``Attention``'s ``is_causal`` (equal lengths, so the
alignment of the triangle does not matter).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import static_or_symbolic
from jax2onnx.passes.fusion.match import constant, operands, producer, rank, scalar
from jax2onnx.values.ir import ir

_FLAT = ("Cast", "Expand", "Unsqueeze")


def _uniform_constant(value: ir.Value) -> float | None:
    """The one number a (cast, broadcast) constant holds."""
    while True:
        array = constant(value)
        if array is not None:
            flat = array.reshape(-1)
            return float(flat[0]) if flat.size and (flat == flat[0]).all() else None
        step = producer(value, "Cast", "Expand")
        if step is None:
            return None
        value = step.inputs[0]


def _condition(value: ir.Value) -> ir.Value:
    """Through broadcasts, casts, and ``Where(c, true, false)``, to the comparison."""
    while True:
        step = producer(value, *_FLAT, "Where")
        if step is None:
            return value
        if step.op_type == "Where":
            if _uniform_constant(step.inputs[1]) != 1.0 or _uniform_constant(step.inputs[2]) != 0:
                return value
        value = step.inputs[0]


def _index(value: ir.Value) -> tuple[ir.Node, int, float] | None:
    """``(Range, axis counted from the end, offset)`` when ``value`` is an iota of a
    ``Range(0, n, 1)`` (plus a constant) laid along one axis."""
    offset, chain = 0.0, []
    while True:
        step = producer(value, "Cast", "Expand", "Unsqueeze", "Add", "Mul", "Range")
        if step is None:
            return None
        if step.op_type == "Range":
            break
        if step.op_type in ("Add", "Mul"):
            for inner, other in operands(step):
                number = scalar(other)
                if number is not None and (step.op_type == "Add" or number == 1.0):
                    offset += number if step.op_type == "Add" else 0.0
                    value = inner
                    break
            else:
                return None
            continue
        chain.append(step)
        value = step.inputs[0]
    if scalar(step.inputs[0]) != 0.0 or scalar(step.inputs[2]) != 1.0:
        return None
    r: int | None = 1  # replayed from the Range outwards (None: rank unknown)
    from_end = -1
    for later in reversed(chain):
        if later.op_type == "Unsqueeze":
            axes = constant(later.inputs[1]) if len(later.inputs) > 1 else None
            if axes is None or r is None:
                return None
            out_rank = r + axes.size
            inserted = {int(a) % out_rank for a in axes.reshape(-1)}
            kept = [a for a in range(out_rank) if a not in inserted]
            from_end, r = kept[r + from_end] - out_rank, out_rank
        elif later.op_type == "Expand":  # broadcasting keeps the axis counted from the end
            out_rank = rank(later.outputs[0])
            r = None if out_rank is None or r is None else max(r, out_rank)
    return step, from_end, offset


def _length(range_node: ir.Node) -> Any:
    """``n`` of ``Range(0, n, 1)``: a number, or the symbol of the dimension it reads."""
    number = scalar(range_node.inputs[1])
    if number is not None:
        return int(number)
    value = range_node.inputs[1]
    while True:
        step = producer(value, "Squeeze", "Cast", "Reshape")
        if step is None:
            break
        value = step.inputs[0]
    shape_node = producer(value, "Shape")
    if shape_node is None:
        return None
    shape = static_or_symbolic(shape_node.inputs[0])
    start = shape_node.attributes.get("start")
    end = shape_node.attributes.get("end")
    if shape is None or start is None or end is None:
        return None
    a, b = start.as_int() % len(shape), end.as_int()
    b = b % len(shape) if b < 0 else min(b, len(shape))
    return shape[a] if b - a == 1 else None


def is_causal(condition: ir.Value, sq: Any, sk: Any) -> bool:
    """Whether ``condition`` is ``j <= i`` on the last two axes (see the module)."""
    if sq != sk or condition.dtype != ir.DataType.BOOL:
        return False
    compare = producer(_condition(condition), "GreaterOrEqual", "LessOrEqual")
    if compare is None:
        return False
    rows, cols = compare.inputs
    if compare.op_type == "LessOrEqual":
        rows, cols = cols, rows
    row, col = _index(rows), _index(cols)
    if row is None or col is None or row[0] is not col[0]:
        return False
    if (row[1], col[1]) != (-2, -1) or not np.isclose(row[2], col[2], rtol=0, atol=0):
        return False
    return _length(row[0]) == sq
