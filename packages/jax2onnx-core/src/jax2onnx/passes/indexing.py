"""``FoldIndexingPass``: scalar indexing chains become one Slice or Gather.

Code that indexes scalars out of a vector and stacks them again
(``jnp.stack([q[0], q[2]])``, ``jnp.array([y[1], y[0]])``: state vectors in
simulations, ODE right-hand sides) lowers one equation at a time to
``Slice -> Squeeze`` per element and ``Unsqueeze -> Concat`` for the stack.
Four rewrites, in every graph of the model (``Loop``/``If``/``Scan`` bodies
too, where a solver's step function lives):

* ``Unsqueeze(Squeeze(s, axes), axes)``: ``s`` itself;
* a ``Concat`` whose consecutive inputs are constant, unit-step Slices of one
  tensor along the concatenation axis: one ``Slice`` when the pieces are
  contiguous and ascending, else one ``Gather`` with constant indices;
* ``Squeeze(Slice(x, k, k + 1, axis), axis)`` (``x[..., k]``, an element
  read out of a state vector): one ``Gather`` of the scalar index ``k``;
* ``Gather(Concat(..., Unsqueeze(s), ...), k)`` with a constant scalar ``k``
  that lands on the ``Unsqueeze`` (an element of a vector just stacked): ``s``.

Both keep every value's numbers: they only move elements.
"""

from __future__ import annotations

import numpy as np

from jax2onnx.passes.bodies import nested_graphs
from jax2onnx.passes.fusion.match import ints, new_constant
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir

_ONNX = ("", "ai.onnx")


class FoldIndexingPass(ir.passes.InPlacePass):
    """Squeeze/Unsqueeze pairs cancel; stacked constant slices of one tensor merge."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        indices: dict[int, ir.Value] = {}  # one initializer per scalar index, for CSE to merge
        for graph in [model.graph, *nested_graphs(model.graph)]:
            modified |= _cancel_pairs(graph)
            modified |= _merge_concats(graph, model.graph)
            modified |= _gather_elements_read(graph, model.graph, indices)
            modified |= _stacked_reads(graph)
        return ir.passes.PassResult(model, modified)


def _is_output(graph: ir.Graph, value: ir.Value) -> bool:
    return any(out is value for out in graph.outputs)


def _cancel_pairs(graph: ir.Graph) -> bool:
    modified = False
    for node in list(graph):
        if node.op_type != "Unsqueeze" or node.domain not in _ONNX or len(node.inputs) < 2:
            continue
        squeezed = node.inputs[0]
        squeeze = squeezed.producer() if squeezed is not None else None
        if squeeze is None or squeeze.op_type != "Squeeze" or squeeze.domain not in _ONNX:
            continue
        axes = ints(node.inputs[1])
        if axes is None or len(squeeze.inputs) < 2 or ints(squeeze.inputs[1]) != axes:
            continue
        source, out = squeeze.inputs[0], node.outputs[0]
        if source is None or _is_output(graph, out):
            continue
        if out.shape is not None and source.shape is not None and source.shape != out.shape:
            continue
        ir.convenience.replace_all_uses_with(out, source)
        graph.remove(node, safe=True)
        modified = True
    return modified


def _slice_of(value: ir.Value | None) -> tuple[ir.Value, int, int, int] | None:
    """``(x, axis, start, stop)`` when ``value`` is ``x[start:stop]`` along one static axis."""
    node = value.producer() if value is not None else None
    if node is None or node.op_type != "Slice" or node.domain not in _ONNX:
        return None
    x = node.inputs[0]
    starts, ends = ints(node.inputs[1]), ints(node.inputs[2])
    axes = ints(node.inputs[3]) if len(node.inputs) > 3 else None
    steps = ints(node.inputs[4]) if len(node.inputs) > 4 else None
    if x is None or x.shape is None or starts is None or ends is None or len(starts) != 1:
        return None
    rank = len(x.shape)
    axis = (axes or [0])[0] % rank if rank else 0
    size = x.shape[axis]
    if (steps not in (None, [1])) or not isinstance(size, int):
        return None
    start, stop = (min(max(v + size if v < 0 else v, 0), size) for v in (starts[0], ends[0]))
    return (x, axis, start, stop) if stop > start else None


def _merge_concats(graph: ir.Graph, root: ir.Graph) -> bool:
    modified = False
    for concat in list(graph):
        if concat.op_type != "Concat" or concat.domain not in _ONNX:
            continue
        out = concat.outputs[0]
        if out.shape is None or "axis" not in concat.attributes:
            continue
        axis = concat.attributes["axis"].as_int() % len(out.shape)
        pieces = [_slice_of(v) for v in concat.inputs]
        runs: list[tuple[int, int]] = []  # [begin, end) of inputs that slice one tensor
        i = 0
        while i < len(pieces):
            j = i + 1
            if pieces[i] is not None and pieces[i][1] == axis:
                while j < len(pieces) and _same_source(pieces[i], pieces[j]):
                    j += 1
            if j - i >= 2:
                runs.append((i, j))
            i = j
        if not runs:
            continue
        inputs = list(concat.inputs)
        for begin, end in reversed(runs):
            inputs[begin:end] = [_merged(graph, root, concat, pieces[begin:end], axis)]
        fewer = None
        if len(inputs) == 1 and inputs[0].shape == out.shape:  # one merged node: it takes over
            fewer = inputs[0].producer()
            ir.convenience.replace_all_uses_with(out, inputs[0], replace_graph_outputs=True)
        else:
            fewer = ir.Node(
                "",
                "Concat",
                inputs,
                attributes=[ir.AttrInt64("axis", axis)],
                num_outputs=1,
                name=concat.name,
                metadata_props=dict(concat.metadata_props) or None,
            )
            fewer.outputs[0].dtype, fewer.outputs[0].shape = out.dtype, out.shape
            graph.insert_before(concat, fewer)
            ir.convenience.replace_all_uses_with(out, fewer.outputs[0], replace_graph_outputs=True)
        name = out.name
        graph.remove(concat, safe=True)
        if fewer is not None:
            fewer.outputs[0].name = name
        modified = True
    return modified


def _same_source(a, b) -> bool:
    return b is not None and b[0] is a[0] and b[1] == a[1]


def _merged(graph, root, before, pieces, axis) -> ir.Value:
    """One Slice (contiguous, ascending) or Gather of the pieces, inserted before ``before``."""
    x = pieces[0][0]
    indices = [k for _, _, start, stop in pieces for k in range(start, stop)]
    if indices == list(range(indices[0], indices[-1] + 1)):
        consts = [np.array([v], np.int64) for v in (indices[0], indices[-1] + 1, axis)]
        args = [new_constant(root, c, "slice") for c in consts]
        node = ir.Node("", "Slice", [x, *args], num_outputs=1)
    else:
        where = new_constant(root, np.array(indices, np.int64), "indices")
        node = ir.Node("", "Gather", [x, where], [ir.AttrInt64("axis", axis)], num_outputs=1)
    out = node.outputs[0]
    out.dtype = x.dtype
    out.shape = ir.Shape([len(indices) if d == axis else s for d, s in enumerate(x.shape)])
    if before.metadata_props:
        node.metadata_props.update(before.metadata_props)
    graph.insert_before(before, node)
    return out


def _gather_elements_read(graph: ir.Graph, root: ir.Graph, indices: dict[int, ir.Value]) -> bool:
    modified = False
    for squeeze in list(graph):
        if squeeze.op_type != "Squeeze" or squeeze.domain not in _ONNX:
            continue
        sliced = squeeze.inputs[0]
        piece = _slice_of(sliced)
        axes = ints(squeeze.inputs[1]) if len(squeeze.inputs) > 1 else None
        if piece is None or axes is None or len(axes) != 1 or len(sliced.uses()) != 1:
            continue
        x, axis, start, stop = piece
        if stop - start != 1 or axes[0] % len(x.shape) != axis:
            continue
        index = indices.get(start)
        if index is None:
            index = indices[start] = new_constant(root, np.array(start, np.int64), "index")
        node = ir.Node("", "Gather", [x, index], [ir.AttrInt64("axis", axis)], num_outputs=1)
        out, old = node.outputs[0], squeeze.outputs[0]
        out.dtype, out.shape = x.dtype, ir.Shape([s for d, s in enumerate(x.shape) if d != axis])
        node.metadata_props.update(squeeze.metadata_props)
        graph.insert_before(squeeze, node)
        name = old.name
        ir.convenience.replace_all_uses_with(old, out, replace_graph_outputs=True)
        graph.remove([squeeze, sliced.producer()], safe=True)
        out.name = name
        modified = True
    return modified


def _stacked_reads(graph: ir.Graph) -> bool:
    modified = False
    for gather in list(graph):
        if gather.op_type != "Gather" or gather.domain not in _ONNX:
            continue
        concat = gather.inputs[0].producer() if gather.inputs[0] is not None else None
        index = ints(gather.inputs[1])
        if concat is None or concat.op_type != "Concat" or index is None or len(index) != 1:
            continue
        if gather.inputs[1].shape is None or len(gather.inputs[1].shape) != 0:
            continue  # an index of shape [1] keeps the axis
        rank = len(concat.outputs[0].shape) if concat.outputs[0].shape is not None else None
        if rank is None:
            continue
        axis = gather.attributes["axis"].as_int() if "axis" in gather.attributes else 0
        if concat.attributes["axis"].as_int() % rank != axis % rank:
            continue
        piece = _piece_at(concat, axis % rank, index[0])
        if piece is not None and take_place(gather, piece):
            modified = True
    return modified


def _piece_at(concat: ir.Node, axis: int, k: int) -> ir.Value | None:
    """The scalar ``s`` of ``Unsqueeze(s, axis)`` at position ``k`` of the concatenation."""
    rank = len(concat.outputs[0].shape)
    sizes, scalars = [], []
    for value in concat.inputs:
        scalar = _unsqueezed_on(value, axis, rank)
        if scalar is not None:
            size = 1
        elif value is not None and value.shape is not None and isinstance(value.shape[axis], int):
            size = value.shape[axis]
        else:
            return None
        sizes.append(size)
        scalars.append(scalar)
    k = k + sum(sizes) if k < 0 else k
    start = 0
    for scalar, size in zip(scalars, sizes, strict=True):
        if start <= k < start + size:
            return scalar
        start += size
    return None


def _unsqueezed_on(value: ir.Value | None, axis: int, rank: int) -> ir.Value | None:
    """``s`` when ``value`` is ``Unsqueeze(s, [axis])`` (a result of rank ``rank``)."""
    node = value.producer() if value is not None else None
    if node is None or node.op_type != "Unsqueeze" or node.domain not in _ONNX:
        return None
    axes = ints(node.inputs[1]) if len(node.inputs) > 1 else None
    if axes is None or len(axes) != 1 or axes[0] % rank != axis:
        return None
    return node.inputs[0]
