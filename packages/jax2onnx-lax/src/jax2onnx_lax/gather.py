"""gather: jax.numpy indexing, jnp.take, take_along_axis and vmapped indexing.

XLA's gather is general; the lowering picks the simplest exact ONNX form:

* ``GatherElements`` for ``take_along_axis`` (every other axis a batching axis);
* ``Gather(axis)`` for one indexed axis and no batching axes (``x[i]``,
  ``x[:, i]``, ``x[..., i]``, ``jnp.take``);
* ``GatherND`` otherwise, on an operand transposed to (batching axes, indexed
  axes, the rest), with ``batch_dims`` for the batching axes and windows wider
  than one element spelled out by adding a constant offset grid to the starts.

Axes sliced but not indexed are cut with one ``Slice`` first; a final
``Transpose`` (and ``Unsqueeze`` for kept size-1 windows) puts the axes where
JAX has them. Start indices are clamped so the window lies inside the operand
(``CLIP``; also ``PROMISE_IN_BOUNDS``, where XLA clamps as well, so the numbers
match JAX for any index); ``FILL_OR_DROP`` masks windows that are out of bounds
before clamping with ``fill_value``, exactly as JAX's own lowering does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.lax import GatherDimensionNumbers, GatherScatterMode

from jax2onnx.plugin import Family, case, is_symbolic
from jax2onnx_lax.indexing import as_int64, clamp_starts, constant, same_dim

family = Family("lax")

_I64 = np.int64
_I32 = np.int32


def _take_rows(x, i):
    return x[i]


def _raw_gather(offset, collapsed, start_map, sizes, mode=None):
    dnums = GatherDimensionNumbers(
        offset_dims=offset, collapsed_slice_dims=collapsed, start_index_map=start_map
    )
    return lambda x, i: lax.gather(x, i, dnums, sizes, mode=mode)


def _gather_cases():
    return [
        case(
            "rows",
            _take_rows,
            [(5, 4), (3,)],
            dtypes=[None, _I32],
            input_range=(-5, 5),  # jnp indexing raises for out-of-range concrete indices
            expect=["Clip -> Gather:3x4"],
            variants=["f32", "f64", "bf16"],
        ),
        case(
            "promise_in_bounds_clamps",
            _raw_gather((1,), (0,), (0,), (1, 3), mode=GatherScatterMode.PROMISE_IN_BOUNDS),
            [(4, 3), (6, 1)],
            dtypes=[None, _I32],
            input_range=(-9, 9),
        ),
        case("scalar_index", _take_rows, [(5, "B"), ()], dtypes=[None, _I32], input_range=(-5, 5)),
        case(
            "columns_symbolic",
            lambda x, i: x[:, i],
            [("B", 6), (4,)],
            dtypes=[None, _I32],
            input_range=(-6, 6),
            expect=["Gather:Bx4"],
            counts={"Transpose": 0, "GatherND": 0},
        ),
        case(
            "last_axis_2d_index",
            lambda x, i: x[..., i],
            [(2, 3, 7), (2, 2)],
            dtypes=[None, _I32],
            input_range=(-7, 7),
            expect=["Gather:2x3x2x2"],
            counts={"Transpose": 0},
        ),
        case(
            "index_matrix",
            _take_rows,
            [(4, 3), (2, 5)],
            dtypes=[None, _I32],
            input_range=(-4, 4),
            expect=["Gather:2x5x3"],
        ),
        case(
            "two_arrays",
            lambda x, i, j: x[i, j],
            [(4, 5, 2), (3,), (3,)],
            dtypes=[None, _I32, _I32],
            input_range=(-4, 4),
            expect=["GatherND:3x2"],
            counts={"Transpose": 0},
        ),
        case(
            "split_arrays_symbolic",
            lambda x, i, j: x[i, :, j],
            [(4, "B", 6), (3,), (3,)],
            dtypes=[None, _I32, _I32],
            input_range=(-4, 4),
            expect=["Transpose -> GatherND:3xB"],
        ),
        case(
            "slice_and_array",
            lambda x, i: x[1:3, i],
            [(4, 5, 2), (3,)],
            dtypes=[None, _I32],
            input_range=(-5, 5),
            expect=["Add -> GatherND -> Transpose:2x3x2"],
        ),
        case(
            "array_and_strided_slice",
            lambda x, i: x[i, ::2],
            [(4, 5), (3,)],
            dtypes=[None, _I32],
            input_range=(-4, 4),
        ),
        case(
            "numpy_mask",
            lambda x: x[np.array([True, False, True, True])],
            [(4, "B")],
            expect=["Gather:3xB"],
        ),
        case(
            "take_clip",
            lambda x, i: jnp.take(x, i, axis=1, mode="clip"),
            [(2, 4, 3), (5,)],
            dtypes=[None, _I32],
            input_range=(-9, 9),
            expect=["Clip -> Gather:2x5x3"],
        ),
        case(
            "take_fill_nan",
            lambda x, i: jnp.take(x, i, axis=1),
            [("B", 4), (6,)],
            dtypes=[None, _I32],
            expect=["Gather -> Where:Bx6"],
        ),
        case(
            "take_fill_value",
            lambda x, i: jnp.take(x, i, axis=0, mode="fill", fill_value=-1.5),
            [(4, 2), (2, 3)],
            dtypes=[None, _I32],
            input_range=(-7, 7),
        ),
        case(
            "at_get_fill",
            lambda x, i, j: jnp.asarray(x).at[i, j].get(mode="fill", fill_value=0.0),
            [(3, 4, 2), (5,), (5,)],
            dtypes=[None, _I32, _I32],
            input_range=(-5, 5),
            expect=["GatherND -> Where:5x2"],
        ),
        case(
            "int64_indices",
            lambda x, i: jnp.take(x, i, axis=-1, mode="clip"),
            [(3, 4), (2, 2)],
            dtypes=[None, _I64],
            variants=["f64"],
            counts={"Cast": 0},
        ),
        *(
            case(
                f"take_fill_{np.dtype(t).name}",
                lambda x, i: jnp.take(x, i, axis=0, mode="fill"),
                [(4, 3), (5,)],
                dtypes=[t, _I32],
            )
            for t in (np.int8, np.int16, np.uint8, np.uint16, np.int32, np.uint32, np.bool_)
        ),
        case(
            "take_fill_uint64",
            lambda x, i: jnp.take(x, i, mode="fill"),
            [np.array([2**64 - 1, 7, 2**63], np.uint64), (4,)],
            dtypes=[None, _I64],
            variants=["f64"],
        ),
        *(
            case(
                f"rows_{np.dtype(t).name}",
                _take_rows,
                [(4, 3), (5,)],
                dtypes=[t, _I32],
                input_range=(-4, 4),
                expect=["Gather:5x3"],
            )
            for t in (np.int8, np.uint8, np.int16, np.uint32, np.bool_)
        ),
        case(
            "points_int64",
            _raw_gather((), (0, 1), (0, 1), (1, 1)),
            [(4, 5), (2, 3, 2)],
            dtypes=[np.int64, _I64],
            variants=["f64"],
            input_range=(-7, 7),
            expect=["GatherND:2x3"],
            counts={"Cast": 0},
        ),
        case(
            "vmap_take_fill",
            lambda x, i: jax.vmap(lambda a, j: jnp.take(a, j, axis=1, mode="fill"))(x, i),
            [("B", 3, 4), ("B", 2)],
            dtypes=[None, _I32],
            input_range=(-6, 6),
            expect=["GatherND -> Transpose -> Where:Bx3x2"],
        ),
        case(
            "at_get_fill_opset17",
            lambda x, i, j: jnp.asarray(x).at[i, :, j].get(mode="fill"),
            [(3, "B", 4), (5,), (5,)],
            dtypes=[None, _I32, _I32],
            input_range=(-5, 5),
            opset=17,
        ),
        case(
            "take_along_axis",
            lambda x, i: jnp.take_along_axis(x, i, axis=1),
            [("B", 5, 3), ("B", 4, 3)],
            dtypes=[None, _I32],
            expect=["GatherElements -> Where:Bx4x3"],
            counts={"Transpose": 0},
        ),
        case(
            "take_along_axis_clip",
            lambda x, i: jnp.take_along_axis(x, i, axis=0, mode="clip"),
            [(4, 3), (6, 3)],
            dtypes=[np.int32, _I32],
            expect=["GatherElements:6x3"],
        ),
        case(
            "vmap_index",
            lambda x, i: jax.vmap(lambda a, j: a[j])(x, i),
            [("B", 5, 3), ("B",)],
            dtypes=[None, _I32],
            input_range=(-5, 5),
            expect=["GatherND:Bx3"],  # the row kept as 1xn and squeezed again: cancelled
            counts={"Transpose": 0, "Squeeze": 0},
        ),
        case(
            "vmap_dynamic_slice",
            lambda x, i: jax.vmap(lambda a, j: lax.dynamic_slice_in_dim(a, j, 2, axis=1))(x, i),
            [("B", 3, 6), ("B",)],
            dtypes=[None, _I32],
            input_range=(-2, 8),
        ),
        case(
            "vmap_index_array",
            lambda x, i: jax.vmap(lambda a, j: a[:, j])(x, i),
            [(2, 4, 5), (2, 3)],
            dtypes=[None, _I32],
            input_range=(-5, 5),
        ),
        case(
            "unbatched_operand",
            lambda x, i: jax.vmap(lambda j: jnp.asarray(x)[j, 1:3])(i),
            [(4, 5), (3, 2)],
            dtypes=[None, _I32],
            input_range=(-4, 4),
        ),
        case(
            "uncollapsed_window",
            _raw_gather((1, 2), (), (0,), (1, 3)),
            [(5, 3), (4, 1)],
            dtypes=[None, _I32],
            expect=["Gather -> Unsqueeze:4x1x3"],
            counts={"Transpose": 0},
        ),
        case(
            "collapsed_unindexed_axis",
            _raw_gather((1,), (0, 1), (1,), (1, 1, 2), mode=GatherScatterMode.CLIP),
            [(2, 5, 3), (4, 1)],
            dtypes=[None, _I32],
        ),
        case(
            "constant_indices",
            lambda x: _raw_gather((1,), (0,), (0,), (1, 4))(x, np.array([[2], [0], [5]], _I32)),
            [(3, 4)],
            counts={"Clip": 0, "Cast": 0},
        ),
        case(  # a NumPy integer axis under vmap reaches the params: Python ints in attributes
            "numpy_int_axis_vmap",
            jax.vmap(lambda x, i: jnp.take_along_axis(x, i, axis=np.int64(1))),
            [(2, 3, 4), (2, 3, 1)],
            dtypes=[None, _I32],
            input_range=(0, 3),
        ),
    ]


@family.lowering(lax.gather_p, cases=_gather_cases)
def gather(ctx, operand, indices, *, dimension_numbers, slice_sizes, mode, fill_value, **_):
    """Clamped starts -> GatherElements | Gather | GatherND -> Transpose; Where for FILL_OR_DROP."""
    dn = dimension_numbers
    shape = ctx.avals_in[0].shape
    n = len(ctx.avals_in[1].shape) - 1
    start_map = list(dn.start_index_map)
    upper = [shape[d] - slice_sizes[d] for d in start_map]
    starts = as_int64(ctx, indices)
    keep = None
    if start_map:
        if GatherScatterMode.from_any(mode) == GatherScatterMode.FILL_OR_DROP:
            keep = in_bounds(ctx, starts, upper)
        starts = clamp_starts(ctx, starts, upper)
    result, labels = _gather(ctx, operand, starts, dn, slice_sizes, shape, n)
    collapsed = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    offsets = iter(d for d in range(len(shape)) if d not in collapsed)
    batch = iter(range(n))
    target = [
        ("o", next(offsets)) if pos in dn.offset_dims else ("b", next(batch))
        for pos in range(n + len(dn.offset_dims))
    ]
    result = _arrange(ctx, result, labels, target)
    if keep is None:
        return result
    keep = ctx.op.Unsqueeze(keep, ctx.i64(sorted(dn.offset_dims))) if dn.offset_dims else keep
    dtype = ctx.avals_out[0].dtype
    return ctx.where(keep, result, np.asarray(fill_value, dtype), dtype)


def in_bounds(ctx, starts, upper):
    """Whether each whole window is in bounds (a bool per index), or None when always."""
    value = constant(starts)
    if value is not None and not any(is_symbolic(u) for u in upper):
        if np.all((value >= 0) & (value <= np.asarray(upper, _I64))):
            return None
    ok = ctx.op.And(
        ctx.op.GreaterOrEqual(starts, ctx.const(_I64(0))),
        ctx.op.LessOrEqual(starts, ctx.shape(upper)),
    )
    if len(upper) == 1:
        return ctx.op.Squeeze(ok, ctx.i64([-1]))
    # all() over the last axis as a count: MatMul needs no opset-dependent axes input
    count = ctx.op.MatMul(ctx.cast(ok, _I32), ctx.const(np.ones(len(upper), _I32)))
    return ctx.op.Equal(count, ctx.const(_I32(len(upper))))


def _gather(ctx, x, starts, dn, slice_sizes, shape, n):
    """The gathered values and a label per axis: ("b", index axis) or ("o", operand axis)."""
    rank = len(shape)
    start_map = list(dn.start_index_map)
    pairs = dict(zip(dn.operand_batching_dims, dn.start_indices_batching_dims))
    if _along_axis(dn, slice_sizes, rank, n):
        squeezed = ctx.op.Squeeze(starts, ctx.i64([-1]))
        return ctx.op.GatherElements(x, squeezed, axis=start_map[0]), [("b", i) for i in range(n)]
    # an axis indexed over its whole length always starts at 0: it needs no index
    kept = [k for k, d in enumerate(start_map) if not same_dim(slice_sizes[d], shape[d])]
    indexed = [start_map[k] for k in kept]
    if len(kept) < len(start_map) and kept:
        starts = _columns(ctx, starts, kept)
    plain = [d for d in range(rank) if d not in indexed and d not in pairs]
    cut = [d for d in plain if not same_dim(slice_sizes[d], shape[d])]
    if cut:
        sizes = ctx.shape([slice_sizes[d] for d in cut])
        x = ctx.op.Slice(x, ctx.i64([0] * len(cut)), sizes, ctx.i64(cut))
    drop = [d for d in plain if d in dn.collapsed_slice_dims]
    if drop:
        x = ctx.op.Squeeze(x, ctx.i64(drop))
    labels = [("o", d) for d in range(rank) if d not in drop]
    if not indexed:
        return x, [("b", pairs[d]) if d in pairs else ("o", d) for _, d in labels]
    if not pairs and len(indexed) == 1 and same_dim(slice_sizes[indexed[0]], 1):
        axis = labels.index(("o", indexed[0]))
        result = ctx.op.Gather(x, ctx.op.Squeeze(starts, ctx.i64([-1])), axis=axis)
        return result, labels[:axis] + [("b", i) for i in range(n)] + labels[axis + 1 :]
    if n == 0 and not pairs:
        return _one_window(ctx, x, starts, labels, indexed, slice_sizes, dn.collapsed_slice_dims)
    lead = [("o", d) for d in pairs] + [("o", d) for d in indexed]
    order = lead + [label for label in labels if label not in lead]
    x = ctx.transpose(x, [labels.index(label) for label in order])
    windows = [d for d in indexed if not same_dim(slice_sizes[d], 1)]
    if windows:
        starts = ctx.op.Add(
            ctx.op.Unsqueeze(starts, ctx.i64(list(range(n, n + len(windows))))),
            window_grid(ctx, [slice_sizes[d] for d in windows], indexed, windows),
        )
    index_axes = [pairs[d] for d in pairs]
    index_axes += [i for i in range(n) if i not in index_axes]
    starts = ctx.transpose(starts, index_axes + list(range(n, n + len(windows) + 1)))
    result = ctx.op.GatherND(x, starts, batch_dims=len(pairs))
    labels = [("b", i) for i in index_axes] + [("o", d) for d in windows] + order[len(lead) :]
    return result, labels


def _along_axis(dn, slice_sizes, rank, n) -> bool:
    """take_along_axis: one indexed axis, every other axis a batching axis in place."""
    if len(dn.start_index_map) != 1 or dn.offset_dims or n != rank:
        return False
    axis = dn.start_index_map[0]
    others = tuple(d for d in range(rank) if d != axis)
    return (
        tuple(dn.collapsed_slice_dims) == (axis,)
        and tuple(dn.operand_batching_dims) == others
        and tuple(dn.start_indices_batching_dims) == others
        and all(same_dim(s, 1) for s in slice_sizes)
    )


def _one_window(ctx, x, starts, labels, indexed, slice_sizes, collapsed):
    """A single start vector (``x[:, 1:]``, ``x[:, : T // 2]``): one ``Slice``, then the
    collapsed axes squeezed; the ends are computed from the (clamped) starts."""
    sizes = [slice_sizes[d] for d in indexed]
    value = constant(starts)
    if value is not None:  # x[1:] with a symbolic size: ends are dimensions too
        ends = ctx.shape([int(v) + size for v, size in zip(value.reshape(-1), sizes, strict=True)])
    else:
        ends = ctx.op.Add(starts, ctx.shape(sizes))
    axes = [labels.index(("o", d)) for d in indexed]
    x = ctx.op.Slice(x, starts, ends, ctx.i64(axes))
    drop = [labels.index(("o", d)) for d in indexed if d in collapsed]
    if drop:
        x = ctx.op.Squeeze(x, ctx.i64(drop))
    return x, [label for i, label in enumerate(labels) if i not in drop]


def window_grid(ctx, sizes, indexed, windows):
    """Offsets ``[*sizes, len(indexed)]`` that turn window starts into element indices.

    A constant for static sizes; for symbolic ones each window axis's offsets
    are a ``Range`` over its computed size, broadcast over the other axes.
    """
    if not any(is_symbolic(s) for s in sizes):
        sizes = [int(s) for s in sizes]
        grid = np.zeros((*sizes, len(indexed)), _I64)
        for j, d in enumerate(windows):
            view = [1] * len(sizes)
            view[j] = sizes[j]
            grid[..., indexed.index(d)] = np.arange(sizes[j]).reshape(view)
        return ctx.const(grid)
    full = ctx.shape([*sizes, 1])
    columns = []
    for d in indexed:
        if d not in windows:
            columns.append(ctx.op.Expand(ctx.const(np.zeros([1] * (len(sizes) + 1), _I64)), full))
            continue
        j = windows.index(d)
        size = ctx.op.Squeeze(ctx.dim(sizes[j]), ctx.i64([0]))
        offsets = ctx.op.Range(ctx.const(_I64(0)), size, ctx.const(_I64(1)))
        view = ctx.shape([1] * j + [sizes[j]] + [1] * (len(sizes) - j))
        columns.append(ctx.op.Expand(ctx.op.Reshape(offsets, view), full))
    return columns[0] if len(columns) == 1 else ctx.op.Concat(*columns, axis=-1)


def _columns(ctx, starts, kept):
    value = constant(starts)
    if value is not None:
        return ctx.const(value[..., kept])
    return ctx.op.Gather(starts, ctx.i64(kept), axis=-1)


def _arrange(ctx, y, labels, target):
    """Put the axes of ``y`` (named by ``labels``) in JAX's order ``target``.

    Kept size-1 windows of indexed axes are added with Unsqueeze; index axes
    missing from ``y`` (no axis was indexed) are added and broadcast by Expand.
    """
    missing = [label for label in target if label not in labels]
    if missing and [label for label in target if label in labels] == labels:
        positions = [target.index(label) for label in missing]
        y = ctx.op.Unsqueeze(y, ctx.i64(positions))
        labels = target
    elif missing:
        y = ctx.op.Unsqueeze(y, ctx.i64(list(range(len(labels), len(labels) + len(missing)))))
        labels = labels + missing
    y = ctx.transpose(y, [labels.index(label) for label in target])
    if any(kind == "b" for kind, _ in missing):
        y = ctx.op.Expand(y, ctx.shape(ctx.avals_out[0].shape))
    return y


register = family.register
