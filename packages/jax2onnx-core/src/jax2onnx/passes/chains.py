"""Chains of Squeeze, Unsqueeze and Reshape become one op (or none), a Cast among them
moving before them: the layout half of :class:`~jax2onnx.passes.FoldIndexRangesPass`,
whose interval half then decides whether the moved Cast meets one it undoes."""

from __future__ import annotations

from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import new_constant, producer
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir

LAYOUT = ("Squeeze", "Unsqueeze", "Reshape")  # keep the elements in their order
CHAIN = 8  # layout ops walked up from a Cast


def layout_chain(graph: ir.Graph, anchor: ir.Node, root: ir.Graph | None) -> Any:
    """``L2(Cast(L1(s)))`` -> ``L(Cast(s))`` and ``L2(L1(s))`` -> ``L(s)``, with ``L1``
    and ``L2`` chains of Squeeze, Unsqueeze and Reshape and ``L`` one of them, or none
    when the result has the shape of ``s``. Those ops keep the elements in row-major
    order, so a chain is one reshape, and a Cast, element by element, commutes with
    it. Fires only when nodes go: the Cast is read by ``L2`` alone, and a new ``L``
    needs ``L1``'s nodes read by the chain alone. The answer: the moved Cast (or
    None), the new ``L`` (or None) and ``s``; None when nothing changed."""
    cast = producer(anchor.inputs[0], "Cast")
    if cast is not None:
        if cast.graph is not graph or len(cast.outputs[0].uses()) != 1:
            return None
        if cast.outputs[0].is_graph_output():
            return None
    target = shape_of(anchor.outputs[0])
    if target is None:
        return None
    same, alone, single = None, None, True
    value = cast.inputs[0] if cast is not None else anchor.inputs[0]
    for _ in range(CHAIN):
        layout = producer(value, *LAYOUT)
        if layout is None or layout.inputs[0] is None:
            break
        single = single and len(value.uses()) == 1 and not value.is_graph_output()
        value = layout.inputs[0]
        shape = shape_of(value)
        if shape == target:
            same = value  # the furthest: the most nodes may go
        elif single and shape is not None:
            alone = (value, shape)
    if same is not None:
        return _commute(anchor, cast, same, None)
    step = _reshaping(root, alone[1], target) if alone is not None and root is not None else None
    return None if step is None else _commute(anchor, cast, alone[0], step)


def _commute(anchor, cast, source, step) -> Any:
    """``cast`` (when there is one) reads ``source``; ``step`` (a layout op's type and
    second input, or None) reads the Cast or ``source``; it takes ``anchor``'s place."""
    graph, out = anchor.graph, anchor.outputs[0]
    head = cast.outputs[0] if cast is not None else source
    layout = None
    if step is not None:
        layout = ir.Node("", step[0], [head, step[1]], num_outputs=1)
        layout.outputs[0].dtype = out.dtype
        layout.outputs[0].shape = out.shape
        layout.metadata_props.update(anchor.metadata_props)
    kept = head if layout is None else layout.outputs[0]
    if out.is_graph_output():
        made = kept.producer()
        if made is None or made.graph is not graph or kept.is_graph_output():
            return None  # as take_place would refuse: checked before anything changes
    if cast is not None:
        cast.replace_input_with(0, source)
        shape = source.shape  # a rank-0 Shape is falsy: tested against None
        if shape is None and layout is None:
            shape = out.shape
        cast.outputs[0].shape = shape
    if layout is not None:
        graph.insert_before(anchor, layout)
    take_place(anchor, kept)
    return cast, layout, source


def _reshaping(root: ir.Graph, source: tuple, target: tuple) -> tuple[str, ir.Value] | None:
    """The one layout op (type and second input) from shape ``source`` to ``target``: an
    Unsqueeze or a Squeeze when only axes of size 1 differ, else a static Reshape."""
    longer, shorter = (target, source) if len(target) > len(source) else (source, target)
    axes, j = [], 0
    for i, dim in enumerate(longer):
        if j < len(shorter) and dim == shorter[j]:
            j += 1
        elif dim == 1:
            axes.append(i)
        else:
            break
    else:
        if j == len(shorter) and axes:
            op_type = "Unsqueeze" if longer is target else "Squeeze"
            return op_type, new_constant(root, np.array(axes, np.int64), "axes")
    if not all(isinstance(d, int) for d in target):
        return None
    return "Reshape", new_constant(root, np.array(target, np.int64), "shape")
