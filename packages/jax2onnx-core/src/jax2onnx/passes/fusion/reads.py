"""Reads and writes by constant indices in fewer nodes (canonical group).

* an ``Expand`` to the shape its input already has is its input;
* a ``ScatterND`` adding updates into zeros at constant indices that cover the
  whole tensor once, in order (a tree sum's first step, a one-row
  accumulator), is its updates (``0 + u`` is ``u``, up to the sign of a zero,
  as :func:`.canonical.arithmetic_identity` takes ``x + 0``);
* a ``Gather`` or ``GatherElements`` reads int32 indices as they are, not
  through a Cast to int64 (both take either; JAX's indices are int32);
* a ``Gather`` or ``GatherElements`` whose constant indices read every element
  in place (``x[[0, 1, 2]]`` of a length-3 axis, what a permutation of a static
  tree order leaves when it is the identity) is its input;
* a ``Transpose`` read only by Slices that each cut one element (entries of a
  transposed triangular factor, read one by one by a substitution) goes: each
  Slice cuts the same element of the untransposed tensor;
* a ``Slice`` of a ``Concat`` that cuts out exactly one of its inputs is that
  input (a substitution reading back the rows it just stacked), and one that
  cuts inside one input is a ``Slice`` of that input (of a Concat stacked in
  turn, which then gives up the input);
* the leading rows cut from a ``ScatterND`` whose constant indices all write
  inside them are a scatter into those rows (the pad row a lowering adds for
  writes out of bounds goes, with a constant base too);
* a stack of stacks along one axis (``jnp.stack([jnp.stack(row, 1) for row in
  rows], 1)``: a matrix per element built entry by entry) is one Concat of the
  entries and a Reshape that splits the axis;
* ``Squeeze(Slice(x))`` that cuts one element on each squeezed axis (an entry
  ``m[..., i, j]`` of a matrix written with slices and a squeeze) is one
  ``Gather`` by a scalar index; two or more adjacent axes are merged by a
  Reshape first (one per source and axes: readers of the same entries of one
  tensor share it).

They move no arithmetic, so the numbers stay.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jax2onnx.passes.fusion.canonical import shape_of
from jax2onnx.passes.fusion.match import Match, constant, ints, node, producer
from jax2onnx.passes.identities import take_place
from jax2onnx.values.ir import ir


def _static(shape: tuple[Any, ...] | None) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def int32_indices(ctx: Any, gather: ir.Node) -> bool:
    """``Gather(x, Cast(i, int64))`` of an int32 ``i`` -> ``Gather(x, i)`` (GatherElements too)."""
    if len(gather.inputs) != 2:
        return False
    cast = producer(gather.inputs[1], "Cast")
    if cast is None or cast.attributes.get_int("to", 0) != ir.DataType.INT64:
        return False
    if cast.inputs[0] is None or cast.inputs[0].dtype != ir.DataType.INT32:
        return False
    gather.replace_input_with(1, cast.inputs[0])
    if not cast.outputs[0].uses() and not cast.outputs[0].is_graph_output():
        if cast.graph is ctx.graph:
            ctx.graph.remove(cast, safe=True)
    return True


def identity_gather(ctx: Any, gather: ir.Node) -> bool:
    """``Gather(x, arange(n))`` on an axis of length ``n`` (or its GatherElements)."""
    if len(gather.inputs) != 2:
        return False
    data, indices = gather.inputs
    shape, index = shape_of(data), constant(indices)
    if shape is None or not shape or index is None or index.dtype.kind not in "iu":
        return False
    axis = gather.attributes.get_int("axis", 0) % len(shape)
    size = shape[axis]
    if not isinstance(size, int):
        return False
    if gather.op_type == "Gather":
        if index.shape != (size,) or not np.array_equal(index, np.arange(size)):
            return False
    else:
        if not _static(shape) or index.shape != shape:
            return False
        place = np.arange(size).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        if not np.array_equal(
            np.where(index < 0, index + size, index), np.broadcast_to(place, shape)
        ):
            return False
    out = gather.outputs[0]
    if out.dtype is not None and data.dtype is not None and out.dtype != data.dtype:
        return False
    return take_place(gather, data)


def squeezed_slice(ctx: Any, squeeze: ir.Node) -> bool:
    """``Squeeze(Slice(x), axes)`` keeping one element on each of ``axes``: a Gather."""
    cut = squeeze.inputs[0].producer() if squeeze.inputs[0] is not None else None
    if len(squeeze.inputs) != 2 or cut is None or cut.op_type != "Slice":
        return False
    if cut.domain not in ("", "ai.onnx") or cut.graph is not ctx.graph:
        return False
    if len(squeeze.inputs[0].uses()) != 1 or squeeze.inputs[0].is_graph_output():
        return False
    source, axes = shape_of(cut.inputs[0]), ints(squeeze.inputs[1])
    if source is None or not source or axes is None:
        return False
    rank = len(source)
    axes = sorted(a % rank for a in axes)
    picks = _elements(cut, source)
    if picks is None or sorted(picks) != axes or axes != list(range(axes[0], axes[-1] + 1)):
        return False  # other axes cut, or the squeezed axes apart
    first, last = axes[0], axes[-1]
    sizes = [source[a] for a in axes]
    if len(axes) > 1 and not (_static(sizes) and _static(source[last + 1 :])):
        return False  # the merging Reshape copies only leading dims it does not know
    flat = 0
    for a, size in zip(axes, sizes, strict=True):
        flat = flat * size + picks[a] if len(axes) > 1 else picks[a]
    data, added = cut.inputs[0], []
    if len(axes) > 1:  # 0 copies a leading dim; the merged and trailing ones are static
        merged = [0] * first + [math.prod(sizes)] + list(source[last + 1 :])
        reshape = node("Reshape", [data, ctx.constant(np.array(merged, np.int64), "merged")])
        reshape.outputs[0].type = data.type
        reshape.outputs[0].shape = ir.Shape(
            [*source[:first], math.prod(sizes), *merged[first + 1 :]]
        )
        added.append(reshape)
        data = reshape.outputs[0]
    read = node("Gather", [data, ctx.constant(np.array(flat, np.int64), "element")], axis=first)
    added.append(read)
    out = squeeze.outputs[0]
    read.outputs[0].type = out.type
    read.outputs[0].shape = None if out.shape is None else ir.Shape(list(out.shape))
    for new in added:
        ctx.graph.insert_before(squeeze, new)
    if not take_place(squeeze, read.outputs[0]):
        ctx.graph.remove(added, safe=True)
        return False
    ctx.graph.remove(cut, safe=True)
    return True


def _elements(cut: ir.Node, source: tuple[Any, ...]) -> dict[int, int] | None:
    """Axis -> the one index a Slice keeps there (only axes it cuts to one element)."""
    starts, ends = ints(cut.inputs[1]), ints(cut.inputs[2])
    rank = len(source)
    axes = ints(cut.inputs[3]) if len(cut.inputs) > 3 and cut.inputs[3] is not None else None
    steps = ints(cut.inputs[4]) if len(cut.inputs) > 4 and cut.inputs[4] is not None else None
    if starts is None or ends is None:
        return None
    axes = list(range(len(starts))) if axes is None else [a % rank for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    picks: dict[int, int] = {}
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        size = source[axis]
        if step != 1 or not isinstance(size, int):
            return None
        lo = max(0, min(size, start + size if start < 0 else start))
        hi = max(0, min(size, end + size if end < 0 else end))
        if hi - lo != 1:
            return None
        picks[axis] = lo
    return picks


def same_shape_expand(ctx: Any, expand: ir.Node) -> bool:
    """``Expand(x, shape)`` where broadcasting ``x`` to ``shape`` gives ``x``'s shape."""
    source, target = shape_of(expand.inputs[0]), ints(expand.inputs[1])
    if source is None or target is None or len(target) > len(source):
        return False
    padded = [1] * (len(source) - len(target)) + target
    if any(t != 1 and t != d for d, t in zip(source, padded, strict=True)):
        return False
    return take_place(expand, expand.inputs[0])


def scatter_into_zeros(ctx: Any, scatter: ir.Node) -> bool:
    """``ScatterND(zeros, indices, u, reduction=none|add)`` writing every element once,
    in order: ``u`` (reshaped, when the indices add unit axes, by no node: shapes match)."""
    if len(scatter.inputs) != 3:
        return False
    reduction = scatter.attributes.get("reduction")
    if reduction is not None and reduction.as_string() not in ("none", "add"):
        return False
    data, indices, updates = (constant(v) for v in scatter.inputs)
    if data is None or indices is None or data.size == 0 or np.any(data != 0):
        return False
    if data.dtype.kind not in "fiu" or indices.ndim < 1:
        return False
    depth = indices.shape[-1]
    if depth > data.ndim or indices.shape[:-1] != data.shape[:depth]:
        return False
    order = np.indices(data.shape[:depth]).reshape(depth, -1).T
    bounds = np.asarray(data.shape[:depth])
    flat = indices.reshape(-1, depth)
    if not np.array_equal(np.where(flat < 0, flat + bounds, flat), order):
        return False
    out = scatter.outputs[0]
    if shape_of(scatter.inputs[2]) != tuple(data.shape) or out.dtype != scatter.inputs[2].dtype:
        return False
    return take_place(scatter, scatter.inputs[2])


def entries_of_transpose(ctx: Any, transpose: ir.Node) -> bool:
    """Every reader of ``Transpose(x, perm)`` a Slice cutting one element: Slices of ``x``."""
    perm = transpose.attributes.get("perm")
    out = transpose.outputs[0]
    source = shape_of(transpose.inputs[0])
    if perm is None or source is None or out.is_graph_output() or not out.uses():
        return False
    perm = list(perm.as_ints())
    shape = tuple(source[p] for p in perm)
    cuts = []
    for use in out.uses():
        cut = use.node
        if cut.op_type != "Slice" or use.idx != 0 or cut.graph is not ctx.graph:
            return False
        picks = _elements(cut, shape)
        if picks is None or len(picks) != len(shape):
            return False  # every axis cut to one element: the entry has no layout
        cuts.append((cut, picks))
    rank = len(shape)
    axes = ctx.constant(np.arange(rank, dtype=np.int64), "axes")
    steps = ctx.constant(np.ones(rank, np.int64), "steps")  # as the lowerings write them
    for cut, picks in cuts:
        starts = [0] * rank
        for axis, index in picks.items():
            starts[perm[axis]] = index
        begin = ctx.constant(np.array(starts, np.int64), "entry")
        end = ctx.constant(np.array(starts, np.int64) + 1, "entry_end")
        entry = node("Slice", [transpose.inputs[0], begin, end, axes, steps])
        entry.outputs[0].type = cut.outputs[0].type
        entry.outputs[0].shape = ir.Shape([1] * rank)
        ctx.graph.insert_before(cut, entry)
        take_place(cut, entry.outputs[0])  # same graph, a new value: always takes it
    ctx.graph.remove(transpose, safe=True)
    return True


def piece_of_concat(ctx: Any, cut: ir.Node) -> bool:
    """``Slice(Concat(a, b, c), ...)`` on the Concat's axis cutting out exactly ``b``."""
    stack = cut.inputs[0].producer() if cut.inputs[0] is not None else None
    if stack is None or stack.op_type != "Concat" or stack.domain not in ("", "ai.onnx"):
        return False
    whole = shape_of(cut.inputs[0])
    if whole is None or not whole:
        return False
    axis = stack.attributes.get_int("axis", 0) % len(whole)
    starts, ends = ints(cut.inputs[1]), ints(cut.inputs[2])
    axes = ints(cut.inputs[3]) if len(cut.inputs) > 3 and cut.inputs[3] is not None else None
    steps = ints(cut.inputs[4]) if len(cut.inputs) > 4 and cut.inputs[4] is not None else None
    if starts is None or ends is None or len(starts) != 1:
        return False
    if (axes is not None and axes[0] % len(whole) != axis) or (axes is None and axis != 0):
        return False
    if steps is not None and steps != [1]:
        return False
    offset = 0
    for piece in stack.inputs:
        shape = shape_of(piece)
        if shape is None or not isinstance(shape[axis], int):
            return False
        if (starts[0], ends[0]) == (offset, offset + shape[axis]):
            return piece.dtype == cut.outputs[0].dtype and _take(ctx, cut, piece, shape)
        if offset <= starts[0] < ends[0] <= offset + shape[axis]:
            return _within(ctx, cut, piece, axis, starts[0] - offset, ends[0] - offset)
        offset += shape[axis]
    return False


def _within(ctx: Any, cut: ir.Node, piece: ir.Value, axis: int, start: int, end: int) -> bool:
    """The cut, inside one piece, as a cut of that piece (a piece that is a Concat
    itself, a substitution's rows stacked one by one, then gives up the row)."""
    if piece.dtype != cut.outputs[0].dtype:
        return False
    inner = node(
        "Slice",
        [
            piece,
            ctx.constant(np.array([start], np.int64), "start"),
            ctx.constant(np.array([end], np.int64), "end"),
            ctx.constant(np.array([axis], np.int64), "axis"),
        ],
    )
    inner.outputs[0].type, inner.outputs[0].shape = cut.outputs[0].type, cut.outputs[0].shape
    match = Match(ctx.graph, cut)
    return match.replace([inner], inner.outputs[0])


def _take(ctx: Any, cut: ir.Node, piece: ir.Value, shape: tuple[Any, ...]) -> bool:
    if shape_of(cut.outputs[0]) not in (None, shape):
        return False
    return take_place(cut, piece)


def scatter_within_cut(ctx: Any, cut: ir.Node) -> bool:
    """``Slice(ScatterND(d, I, u), 0, n)`` on axis 0, ``I`` constant in ``[0, n)``:
    ``ScatterND(Slice(d, 0, n), I, u)``; the Slice of ``d`` then folds or cuts a piece."""
    scatter = cut.inputs[0].producer() if cut.inputs[0] is not None else None
    if scatter is None or scatter.op_type != "ScatterND" or scatter.graph is not ctx.graph:
        return False
    data = scatter.inputs[0]
    if len(scatter.outputs[0].uses()) != 1 or scatter.outputs[0].is_graph_output():
        return False
    indices, whole = constant(scatter.inputs[1]), shape_of(data)
    if indices is None or whole is None or not whole or not isinstance(whole[0], int):
        return False
    picks = [ints(v) if v is not None else None for v in cut.inputs[1:]]
    starts, ends = picks[0], picks[1]
    axes = picks[2] if len(picks) > 2 else [0]
    steps = picks[3] if len(picks) > 3 and picks[3] is not None else [1]
    if starts != [0] or ends is None or len(ends) != 1 or axes != [0] or steps != [1]:
        return False
    rows = min(ends[0], whole[0])
    if rows >= whole[0] or indices.size == 0 or np.any(indices[..., 0] < 0):
        return False
    if np.any(indices[..., 0] >= rows):
        return False
    inner = node("Slice", [data, *cut.inputs[1:]])
    inner.outputs[0].type = data.type
    inner.outputs[0].shape = ir.Shape([rows, *whole[1:]])
    attributes = [scatter.attributes[k] for k in scatter.attributes]
    kept = ir.Node(
        "", "ScatterND", [inner.outputs[0], *scatter.inputs[1:]], attributes, num_outputs=1
    )
    kept.outputs[0].type = scatter.outputs[0].type
    kept.outputs[0].shape = ir.Shape([rows, *whole[1:]])
    kept.metadata_props.update(scatter.metadata_props)
    ctx.graph.insert_before(cut, [inner, kept])
    return take_place(cut, kept.outputs[0])


def _stacked(value: ir.Value, axis: int, graph: ir.Graph) -> list[ir.Value] | None:
    """The values ``value`` stacks along ``axis``: ``Concat(Unsqueeze(v_i, [axis]), axis)``
    read only once, else None. The Unsqueezed values are returned (to be reused)."""
    concat = value.producer()
    if concat is None or concat.op_type != "Concat" or concat.graph is not graph:
        return None
    if len(value.uses()) != 1 or value.is_graph_output():
        return None
    rank = len(shape_of(value) or ())
    if not rank or concat.attributes.get_int("axis", 0) % rank != axis:
        return None
    for piece in concat.inputs:
        layout = piece.producer()
        if layout is None or layout.op_type != "Unsqueeze" or ints(layout.inputs[1]) is None:
            return None
        if [a % rank for a in ints(layout.inputs[1])] != [axis]:
            return None
    return list(concat.inputs)


def stack_of_stacks(ctx: Any, outer: ir.Node) -> bool:
    """``stack_a(stack_a(x_kj over j) over k)``: ``Reshape(Concat_a(Unsqueeze_a(x_kj)))``."""
    shape = shape_of(outer.outputs[0])
    if shape is None or not shape or not all(isinstance(d, int) for d in shape):
        return False
    axis = outer.attributes.get_int("axis", 0) % len(shape)
    entries: list[ir.Value] = []
    inner_rank = len(shape) - 1
    for piece in outer.inputs:  # Unsqueeze(row_k, [axis]), row_k a stack along axis
        layout = piece.producer()
        if layout is None or layout.op_type != "Unsqueeze" or layout.graph is not ctx.graph:
            return False
        axes = ints(layout.inputs[1])
        if axes is None or [a % len(shape) for a in axes] != [axis]:
            return False
        if len(piece.uses()) != 1 or axis >= inner_rank:
            return False
        row = _stacked(layout.inputs[0], axis, ctx.graph)
        if row is None:
            return False
        entries.extend(row)
    if len(outer.inputs) < 2 or len(entries) != shape[axis] * shape[axis + 1]:
        return False
    flat = node("Concat", entries, axis=axis)
    flat.outputs[0].type = outer.outputs[0].type
    merged = [*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :]]
    flat.outputs[0].shape = ir.Shape(merged)
    split = node("Reshape", [flat.outputs[0], ctx.constant(np.array(shape, np.int64), "split")])
    split.outputs[0].type = outer.outputs[0].type
    split.outputs[0].shape = ir.Shape(list(shape))
    ctx.graph.insert_before(outer, [flat, split])
    return take_place(outer, split.outputs[0])


REWRITES = (
    (("Concat",), stack_of_stacks),
    (("Slice",), piece_of_concat),
    (("Slice",), scatter_within_cut),
    (("Transpose",), entries_of_transpose),
    (("Expand",), same_shape_expand),
    (("ScatterND",), scatter_into_zeros),
    (("Gather", "GatherElements"), identity_gather),
    (("Gather", "GatherElements"), int32_indices),
    (("Squeeze",), squeezed_slice),
)
