"""``ComposeGathersPass``: reads of reads by constant indices become one ``Gather``.

Physics code reads components out of pieces it read out before: a 6-D motion
vector split into its angular and linear halves and then permuted for a cross
product (``v[3:6][[1, 2, 0]]``), a row of a table and then an element of it,
an index vector read and then given a unit axis for broadcasting. Each read
is a node per step in a loop body. With constant indices the composition is
one ``Gather`` of the original tensor, its indices computed here:

* ``Gather(Gather(x, i, axis=a), j, axis=a + k)``, the second read in the
  first one's index dimensions: ``Gather(x, take(i, j, axis=k), axis=a)``,
  when every reader of the first is such a Gather;
* ``Gather(Slice(x, s, e, axis=a, step=t), j, axis=a)`` (a step above 0, a
  static dimension ``a``): ``Gather(x, (s..e by t)[j], axis=a)``, when every
  reader of the Slice is such a Gather (else the Slice stays and nothing is
  gained);
* ``Unsqueeze`` or ``Squeeze`` of a ``Gather`` on axes inside its index
  dimensions: the Gather by the indices with those unit axes added or removed.

Indices out of range are left alone (ONNX Runtime reports them at run time).
Every reader of the inner read must compose with it (else it stays and
nothing is gained). Elements only move: no number
changes. Runs in every graph of the model.
"""

from __future__ import annotations

import numpy as np

from jax2onnx.passes.bodies import nested_graphs
from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import constant, ints, new_constant
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir

_ONNX = ("", "ai.onnx")


class ComposeGathersPass(ir.passes.InPlacePass):
    """Gathers of Gathers, of Slices and Gathers given or stripped unit axes, by constant
    indices, become one Gather (module docstring)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in [model.graph, *nested_graphs(model.graph)]:
            for node in list(graph):
                if node.graph is not graph or node.domain not in _ONNX:
                    continue
                if node.op_type == "Gather":
                    modified |= _of_gather(node, model.graph) or _of_slice(node, model.graph)
                elif node.op_type in ("Unsqueeze", "Squeeze"):
                    modified |= _reshaped(node, model.graph)
        return ir.passes.PassResult(model, modified)


def _indices(value: ir.Value | None) -> np.ndarray | None:
    """Constant integer indices (not a graph input, whose value a caller may override)."""
    if value is None or value.is_graph_input():
        return None
    array = constant(value)
    return None if array is None or array.dtype.kind not in "iu" else array.astype(np.int64)


def _axis(gather: ir.Node, rank: int) -> int:
    return gather.attributes.get_int("axis", 0) % rank


def _inner(value: ir.Value, op_type: str, graph: ir.Graph) -> ir.Node | None:
    """The ``op_type`` node of ``graph`` computing ``value``, when nothing else reads it."""
    node = value.producer()
    if node is None or node.graph is not graph or node.domain not in _ONNX:
        return None
    if node.op_type != op_type or value.is_graph_output():
        return None
    return node


def _in_range(j: np.ndarray, n: int) -> np.ndarray | None:
    """``j`` with negative entries counted from ``n``; None when one is outside ``[0, n)``."""
    j = np.where(j < 0, j + n, j)
    return j if j.size == 0 or (j.min() >= 0 and j.max() < n) else None


def _regather(gather: ir.Node, data: ir.Value, index: np.ndarray, axis: int, root) -> None:
    gather.replace_input_with(0, data)
    gather.replace_input_with(1, new_constant(root, index, "index"))
    gather.attributes["axis"] = ir.AttrInt64("axis", axis)


def _of_gather(outer: ir.Node, root: ir.Graph) -> bool:
    inner = _inner(outer.inputs[0], "Gather", outer.graph)
    first = _indices(inner.inputs[1]) if inner is not None else None
    data = shape_of(inner.inputs[0]) if inner is not None else None
    if first is None or not data:
        return False
    a = _axis(inner, len(data))

    def compose(reader: ir.Node, second: np.ndarray) -> np.ndarray | None:
        k = _axis(reader, len(data) - 1 + first.ndim) - a
        if not 0 <= k < first.ndim:
            return None  # a read on another axis of x: two Gathers
        second = _in_range(second, first.shape[k])
        return None if second is None else np.take(first, second, axis=k)

    return _read_through(inner, a, compose, root)


def _read_through(inner: ir.Node, axis: int, compose, root: ir.Graph) -> bool:
    """When every reader of ``inner`` is a Gather by constant indices that ``compose``
    maps to indices of ``inner``'s input on ``axis`` (None: it cannot), they all read
    that input and ``inner`` goes."""
    readers = []
    for reader, index in inner.outputs[0].uses():
        gathers = reader.op_type == "Gather" and reader.domain in _ONNX and index == 0
        indices = _indices(reader.inputs[1]) if gathers else None
        composed = compose(reader, indices) if indices is not None else None
        if composed is None:
            return False
        readers.append((reader, composed))
    for reader, composed in readers:
        _regather(reader, inner.inputs[0], composed, axis, root)
    inner.graph.remove(inner, safe=True)
    return True


def _of_slice(gather: ir.Node, root: ir.Graph) -> bool:
    piece = _inner(gather.inputs[0], "Slice", gather.graph)
    data = shape_of(piece.inputs[0]) if piece is not None else None
    if piece is None or not data:
        return False
    starts, ends = ints(piece.inputs[1]), ints(piece.inputs[2])
    axes = ints(piece.inputs[3]) if len(piece.inputs) > 3 and piece.inputs[3] is not None else [0]
    steps = ints(piece.inputs[4]) if len(piece.inputs) > 4 and piece.inputs[4] is not None else [1]
    if None in (starts, ends, axes, steps) or len(starts) != 1 or steps[0] <= 0:
        return False
    a = axes[0] % len(data)
    if not isinstance(data[a], int):
        return False
    positions = np.arange(data[a])[starts[0] : ends[0] : steps[0]]

    def compose(reader: ir.Node, j: np.ndarray) -> np.ndarray | None:
        j = _in_range(j, len(positions)) if _axis(reader, len(data)) == a else None
        return None if j is None else positions[j]

    return _read_through(piece, a, compose, root)


def _reshaped(node: ir.Node, root: ir.Graph) -> bool:
    gather = _inner(node.inputs[0], "Gather", node.graph)
    if gather is None or len(gather.outputs[0].uses()) != 1 or len(node.inputs) != 2:
        return False
    index, axes, data = _indices(gather.inputs[1]), ints(node.inputs[1]), shape_of(gather.inputs[0])
    if index is None or axes is None or not data or node.outputs[0].is_graph_output():
        return False
    a = _axis(gather, len(data))
    shape = shape_of(node.outputs[0])  # before the Gather changes
    unsqueeze = node.op_type == "Unsqueeze"
    rank = len(data) - 1 + index.ndim + (len(axes) if unsqueeze else 0)
    at = sorted(x % rank - a for x in axes)
    if unsqueeze:
        if not all(0 <= x < index.ndim + len(axes) for x in at):
            return False
        index = np.expand_dims(index, tuple(at))
    else:
        if not all(0 <= x < index.ndim and index.shape[x] == 1 for x in at):
            return False
        index = np.squeeze(index, tuple(at))
    gather.replace_input_with(1, new_constant(root, index, "index"))
    gather.outputs[0].shape = None if shape is None else ir.Shape(list(shape))
    return take_place(node, gather.outputs[0])
