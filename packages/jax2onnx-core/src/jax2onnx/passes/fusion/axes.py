"""Layout ops that only add, drop or move axes of size 1, or that undo each other.

* a broadcasting op reading an Unsqueeze, Squeeze or Reshape that only adds
  or drops leading unit axes (a stack of vectorised lanes given a batch axis)
  reads its input, when the op's broadcasting gives the same output shape
  (:data:`LATE`: after the fusions, whose patterns may read such axes, an
  attention mask's);
* a Transpose that moves only axes of size 1 is a Reshape, or nothing when
  the shape stays;
* a Reshape of an Unsqueeze/Squeeze/Reshape to a fully given shape reshapes
  the source, and goes when that is the source's shape.

They move no element, so every bit stays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import BROADCASTING, _stand_in, broadcast, shape_of
from jax2onnx.passes.fusion.match import ints, node, producer
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir


def _leading_units_only(source: tuple[Any, ...], target: tuple[Any, ...]) -> bool:
    """Whether the two shapes differ only by leading axes of size 1."""
    strip = lambda s: s[next((i for i, d in enumerate(s) if d != 1), len(s)) :]  # noqa: E731
    return strip(source) == strip(target)


def unit_axes_operand(ctx: Any, op: ir.Node) -> bool:
    """An operand that only gains or loses leading unit axes (``Unsqueeze(v, [0])``, a
    Squeeze or Reshape doing the same) is read as it was, when the op's broadcasting
    gives the same output shape: right-aligned broadcasting pads leading units itself."""
    out = shape_of(op.outputs[0])
    if out is None:
        return False
    changed = False
    for k, value in enumerate(op.inputs):
        layout = value.producer() if value is not None else None
        if layout is None or layout.op_type not in ("Unsqueeze", "Squeeze", "Reshape"):
            continue
        if layout.domain not in ("", "ai.onnx") or (op.op_type == "PRelu" and k == 1):
            continue
        source, target = shape_of(layout.inputs[0]), shape_of(value)
        if source is None or target is None or not _leading_units_only(source, target):
            continue
        inputs = [v if i != k else layout.inputs[0] for i, v in enumerate(op.inputs)]
        shapes = [shape_of(v) for v in inputs]
        if any(s is None for s in shapes) or broadcast(shapes) != out:
            continue
        op.replace_input_with(k, layout.inputs[0])
        unused = not value.uses() and not value.is_graph_output()
        if unused and layout.graph is ctx.graph:
            ctx.graph.remove(layout, safe=True)
        changed = True
    return changed


def reshape_of_layout(ctx: Any, reshape: ir.Node) -> bool:
    """``Reshape(layout(x), shape)`` of an Unsqueeze, Squeeze or Reshape is ``Reshape(x,
    shape)`` for a fully given ``shape`` (element order never changes), and ``x`` itself
    when that is ``x``'s shape (in every graph, after the passes that make such chains)."""
    target = ints(reshape.inputs[1]) if len(reshape.inputs) == 2 else None
    inner = producer(reshape.inputs[0], "Unsqueeze", "Squeeze", "Reshape")
    if target is None or inner is None or any(d <= 0 for d in target):
        return False
    source = inner.inputs[0]
    if shape_of(source) == tuple(target):
        return _stand_in(ctx, reshape, source, same=True)
    if inner.graph is not ctx.graph:
        return False
    reshape.replace_input_with(0, source)
    return True


def unit_transpose(ctx: Any, transpose: ir.Node) -> bool:
    """A Transpose that moves only axes of size 1 is a Reshape (static shapes), or
    nothing when the shape stays; Reshape chains then collapse (:func:`reshape_of_layout`)."""
    perm = transpose.attributes.get("perm")
    source = shape_of(transpose.inputs[0])
    if perm is None or source is None or not all(isinstance(d, int) for d in source):
        return False
    perm = list(perm.as_ints())
    kept = [p for p in perm if source[p] != 1]
    if kept != sorted(kept):
        return False  # the other axes change order: a real transpose
    target = [source[p] for p in perm]
    if tuple(target) == source:
        return _stand_in(ctx, transpose, transpose.inputs[0], same=True)
    shape = ctx.constant(np.array(target, np.int64), "relabel")
    reshape = node("Reshape", [transpose.inputs[0], shape])
    reshape.outputs[0].type = transpose.outputs[0].type
    reshape.outputs[0].shape = ir.Shape(target)
    ctx.graph.insert_before(transpose, reshape)
    return take_place(transpose, reshape.outputs[0]) or _drop(ctx, reshape)


def _drop(ctx: Any, added: ir.Node) -> bool:
    ctx.graph.remove(added, safe=True)
    return False


# after the fusions, whose patterns may read the unit axes (an attention mask's)
LATE = ((BROADCASTING, unit_axes_operand),)
# with the second fusion pass (what ComposeGathersPass and late constant folding leave)
AFTER_GATHERS = ((("Transpose",), unit_transpose), (("Reshape",), reshape_of_layout))
